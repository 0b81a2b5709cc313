"""``SignVote``: the robust learning rate of Ozdayi, Kantarcioglu and Gel 2021 ("Defending against Backdoors
in Federated Learning with Robust Learning Rate", AAAI), made asynchronous (issue 30).

A backdoor needs parameters the honest devices leave alone: the fully connected weights from a corner
patch that is dark in every clean digit get no honest gradient at all, so any defence that compares a
gradient with honest ones (FLTrust's cosine, a distance, a median of norms) sees the attackers' push on
them as a small part of an otherwise plausible gradient. The robust learning rate looks coordinate by
coordinate instead: each device votes the sign of its gradient on every parameter, and where the net vote
|Σ sign| falls short of a threshold θ the step along that parameter is reversed (the paper's −η) or, with
``against="zero"``, not taken. With fewer than θ attackers, the parameters only they push never step
their way.

A round of the paper's has every sampled device's update at once; a fleet sends one gradient at a time,
so the vote here is over the latest gradient of each of the last ``devices`` distinct devices (a device
votes once, with its newest signs, however often it pushes), and θ is ``threshold`` × the number of
devices voting, so one setting serves fleets of any size (the paper's θ = 4 of 10 agents is 0.4). The
votes are in the state, two bits a parameter (a 100k-parameter model's 100 votes: 2.5 MB), so a restart
does not reopen the vote to whoever pushes first.

The paper's vote is on signs, and on non-IID devices it stops learning: each device's gradient pulls
most parameters its own labels' way, so the net vote on them is weak. On the peer workload's MLP (20
devices, 2 labels each, seed 1000, inside FLTrust) the paper's form (θ 0.4, flip) ended the clean fleet at
0.27 accuracy, and not stepping instead of flipping at 0.895 (0.921 without it), 0.70 under the backdoor.
So the default counts *support*, the devices whose latest gradient moves the parameter at all (|sign|),
and leaves a parameter with too little support where it is (``count="support"``, ``against="zero"``):
honest non-IID devices disagree on direction but all move the weights of the pixels their digits use,
while a parameter only the attackers move, a dark corner's, stays put. The same run: 0.920 clean, 0.915
under the corner backdoor, its success 6% (99.7% without). What it cannot stop is a trigger on pixels clean
digits also use (``Backdoor(inset=4)``: 99% against 99% without the vote, docs/results/robust-backdoor.md),
and ``floor`` (a device supports only what it moves by more than floor × its mean |g|) did not change
that: 96.7% at 0.5, 96.9% at 1.0 (seed 1000; lab/probes/sign_vote_floor.py). On seeds 1-3 it also lost
more to scaled attackers (4.2 points against 2.7), so `fleet experiment robust` did not recommend it.

``sign_vote_reversed`` is the share of the parameters reversed (or left) in the latest push.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from typing import Any, Literal

import numpy as np
from pydantic import Field

from server.strategies.base import Arrival, Strategy
from server.strategies.wrappers import StrategyWrapper, WrapperSettings

Against = Literal["flip", "zero"]
Count = Literal["sign", "support"]


class SignVoteSettings(WrapperSettings):
    name: Literal["sign-vote"] = "sign-vote"
    threshold: float = Field(
        0.4,
        gt=0,
        le=1,
        description="θ as a share of the devices voting: a parameter with less is not followed",
    )
    devices: int = Field(
        100, ge=1, le=100_000, description="the latest signs of this many distinct devices vote"
    )
    against: Against = Field(
        "zero", description="a parameter short of θ does not step (zero) or steps back (flip)"
    )
    count: Count = Field(
        "support", description="devices that move the parameter at all, or the net sign vote (the paper's)"
    )
    floor: float = Field(
        0.0, ge=0, le=100, description="support: a device moves a parameter when |g_i| > this × its mean |g|"
    )


class SignVote(StrategyWrapper):
    settings = SignVoteSettings

    def __init__(
        self,
        inner: Strategy,
        *,
        threshold: float = 0.4,
        devices: int = 100,
        against: Against = "zero",
        count: Count = "support",
        floor: float = 0.0,
    ) -> None:
        super().__init__(inner)
        if against not in ("flip", "zero") or count not in ("sign", "support"):
            raise ValueError(f"sign-vote: unknown against {against!r} or count {count!r}")
        self.threshold, self.devices, self.against, self.count = threshold, devices, against, count
        self.floor = floor
        self.votes: OrderedDict[str, np.ndarray] = OrderedDict()  # device → its latest signs (int8)
        self.tally: np.ndarray | None = None  # Σ of the votes, per parameter
        self.reversed = 0.0

    def vote(self, device_id: str, gradient: np.ndarray) -> np.ndarray:
        """Record the device's signs (replacing its last, evicting the longest silent); the tally after."""
        if self.count == "support":
            size = np.abs(gradient)
            signs = (size > self.floor * float(size.mean())).astype(np.int8)
        else:
            signs = np.sign(gradient).astype(np.int8)
        if self.tally is None or self.tally.shape != signs.shape:  # a new model: a new vote
            self.votes.clear()
            self.tally = np.zeros(signs.shape, dtype=np.int32)
        old = self.votes.pop(device_id, None)
        if old is None and len(self.votes) >= self.devices:
            _, old = self.votes.popitem(last=False)
        if old is not None:
            self.tally -= old
        self.tally += signs
        self.votes[device_id] = signs
        return self.tally

    def receive(self, arrival: Arrival) -> float:
        tally = self.vote(arrival.device_id, arrival.gradient)
        short = np.abs(tally) < self.threshold * len(self.votes)
        self.reversed = float(short.mean())
        if short.any():
            factor = np.where(short, np.float32(-1.0 if self.against == "flip" else 0.0), np.float32(1.0))
            arrival = dataclasses.replace(arrival, gradient=arrival.gradient * factor)
        return self.inner.receive(arrival)

    def describe(self) -> dict[str, Any]:
        figures = {"sign_vote_devices": len(self.votes), "sign_vote_reversed": self.reversed}
        return {**super().describe(), **figures}

    def state_dict(self) -> dict[str, Any]:
        """The votes, two bits a parameter, at the top level (the store's codec keeps top-level arrays)."""
        if not self.votes:
            return self.inner.state_dict()
        signs = np.stack(list(self.votes.values()))
        return {
            **self.inner.state_dict(),
            "sign_vote_devices": list(self.votes),
            "sign_vote_size": int(signs.shape[1]),
            "sign_vote_up": np.packbits(signs > 0, axis=1),
            "sign_vote_down": np.packbits(signs < 0, axis=1),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state)
        self.votes.clear()
        self.tally = None
        if not state.get("sign_vote_devices"):
            return
        size = int(state["sign_vote_size"])
        up, down = (
            np.unpackbits(np.asarray(state[key], np.uint8), axis=1, count=size).astype(np.int8)
            for key in ("sign_vote_up", "sign_vote_down")
        )
        for device, signs in zip(state["sign_vote_devices"], up - down, strict=True):
            self.votes[str(device)] = signs
        self.tally = (up - down).sum(axis=0, dtype=np.int32)
