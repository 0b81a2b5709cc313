"""Byzantine devices in the simulator: which of a FleetSimulator's devices attack, and what they push.

``FleetSimulator(adversary=...)`` asks the ``Adversary`` three things (sim/fleet.py): whether device i is
Byzantine, what gradient a Byzantine device pushes instead of its honest one, and which enrollment key a
device enrolled with. The attacks themselves are the live devices' (client/_attacks/), so
``fleet worker --attack NAME`` and the simulator run the same code. Here the attackers are omniscient and
collude: ALIE and IPM estimate the honest spread from the last ``window`` honest gradients that reached the
server (the device's own honest gradient when none has yet), where a live device has only its own data.

The adversary draws its randomness (Gaussian noise, which examples a backdoor triggers) from its own
stream, never the simulator's, so the devices' timings and batches are those of the clean run with the
same seed: only what the attackers push differs.

The core does not record which enrollment key enrolled a device, and a simulated device enrolls without
one; ``key_of`` gives each device a key id (one per honest device, one shared by every Sybil) that the
simulator records on its ``VirtualDevice`` (``FleetSimulator.devices_per_key``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection
from typing import Any, Literal

import numpy as np

from client._attacks import Attack, Backdoor, Honest, Sybil, add_trigger, attack_success_rate, make_attack
from client._attacks.live import splice_head
from server.strategies.by_label import cosine
from sim.controlled import Workbench

__all__ = ["Adversary", "adversary", "backdoor_success"]

SYBIL_KEY = "key-sybil"


class Adversary:
    """The devices in ``attackers`` (indices in join order) run ``attack``; the others are honest."""

    def __init__(
        self,
        attack: Attack,
        attackers: Collection[int],
        *,
        window: int = 10,
        claim: Literal["push", "commit"] | None = None,
        silent: bool = False,
    ) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.attack, self.attackers = attack, frozenset(int(i) for i in attackers)
        # lie about the labels, against a defence that reads them (``claimed``): the best label for each push,
        # or the best for the first push, kept by every attacker (against one that remembers a device's)
        self.claim = claim
        # a perfect filter's bound: the attackers take their tasks and their pushes never reach the server
        self.silent = silent
        self.committed: int | None = None
        self.label_rows: dict[int, np.ndarray] | None = None  # ``claimed``'s training digits of each label
        self.recent: deque[np.ndarray] = deque(maxlen=window)  # honest gradients that reached the server
        self.pushed = self.dropped = 0  # Byzantine pushes, and those the strategy gave weight 0
        self.honest_pushed = self.honest_dropped = 0

    def __repr__(self) -> str:
        return f"Adversary({self.attack.name}, attackers={sorted(self.attackers)})"

    def is_byzantine(self, i: int) -> bool:
        return i in self.attackers

    def key_of(self, i: int) -> str:
        """The enrollment key id device ``i`` enrolled with: every Sybil shares one, others have their own."""
        return SYBIL_KEY if isinstance(self.attack, Sybil) and self.is_byzantine(i) else f"key-{i}"

    def honest(self, own: np.ndarray) -> np.ndarray:
        """(m, d) honest gradients the attackers know: the window, or the device's own when it is empty."""
        return np.stack(list(self.recent)) if self.recent else own[None]

    def push(
        self,
        bench: Workbench,
        params: np.ndarray | None,
        batch: np.ndarray,
        loss: float,
        gradient: np.ndarray,
    ) -> tuple[float, np.ndarray, np.ndarray]:
        """(loss, gradient, labels) a Byzantine device pushes for a task over training rows ``batch``, given
        its honest loss and gradient on the handed ``params``: a poisoned batch is computed afresh."""
        x, y = bench.train.x[batch], bench.train.y[batch]
        clean, clean_y = gradient, y
        if self.attack.changes_batch:
            if params is None:
                raise ValueError("a batch-poisoning attack needs the parameters the task was handed")
            x, y = self.attack.batch(x, y, bench.num_classes)
            loss, gradient = bench.gradients.loss_and_gradient(params, x, y)
        pushed = self.attack.gradient(gradient, self.honest(gradient))
        if getattr(self.attack, "honest_head", False):
            head = bench.bundle.manifest.head()
            if head is None:
                raise ValueError(
                    f"{bench.bundle.manifest.name} has no output layer (classes x features) to keep"
                )
            pushed, y = splice_head(pushed, clean, head), clean_y  # the clean batch's output layer and labels
        if self.claim is not None and params is not None:
            if self.committed is None or self.claim == "push":
                self.committed = self.claimed(bench, params, pushed)
            y = np.full_like(y, self.committed)
        return float(loss), pushed, y

    def claimed(self, bench: Workbench, params: np.ndarray, pushed: np.ndarray, per_label: int = 16) -> int:
        """The label whose gradient (on ``per_label`` training digits of it, at the handed parameters) the
        pushed gradient agrees with most: what an attacker claims to have trained on, so that a defence that
        scores a gradient against the claimed labels' reference (trusted-score ``by_labels``) sees the best
        case for it. Omniscient: it knows the training digits of every label."""
        if self.label_rows is None:  # the same digits every push: found once
            labels = range(bench.num_classes)
            found = {label: np.flatnonzero(bench.train.y == label)[:per_label] for label in labels}
            self.label_rows = {label: rows for label, rows in found.items() if len(rows)}

        def agreement(label: int) -> float:
            x, y = bench.train.x[self.label_rows[label]], bench.train.y[self.label_rows[label]]
            return cosine(bench.gradients.loss_and_gradient(params, x, y)[1], pushed)

        return max(self.label_rows, key=agreement)

    def observe(self, byzantine: bool, gradient: np.ndarray, weight: float) -> None:
        """A push reached the server with ``weight``; an honest one joins the window."""
        if byzantine:
            self.pushed += 1
            self.dropped += weight == 0.0
        else:
            self.honest_pushed += 1
            self.honest_dropped += weight == 0.0
            self.recent.append(gradient)

    def counts(self) -> dict[str, int]:
        """Pushes and drops (weight 0) by who sent them."""
        return {
            "byzantine": self.pushed,
            "byzantine_dropped": self.dropped,
            "honest": self.honest_pushed,
            "honest_dropped": self.honest_dropped,
        }


def adversary(
    name: str,
    *,
    devices: int,
    attackers: int,
    seed: int,
    window: int | None = None,
    claim: Literal["push", "commit"] | None = None,
    **params: Any,
) -> Adversary:
    """The first ``attackers`` of ``devices`` run attack ``name`` (client/_attacks/) with ``params``; ALIE's
    n and f default to the fleet's, a Sybil's count to ``attackers``, the window to ``devices``. ``"silent"``:
    no attack, the attackers' pushes are lost on the way (what a defence that drops exactly them reaches)."""
    if name == "silent":
        return Adversary(Honest(), range(attackers), window=window or devices, silent=True)
    inner = params.get("inner") if name == "sybil" else name
    if inner == "alie":
        params.setdefault("n", devices)
        params.setdefault("f", attackers)
    if name == "sybil":
        params.setdefault("count", attackers)
    attack = make_attack(name, np.random.default_rng([seed, 31]), **params)
    return Adversary(attack, range(attackers), window=window or devices, claim=claim)


def backdoor_success(
    bench: Workbench, params: np.ndarray, backdoor: Backdoor | Sybil, *, chunk: int = 500
) -> float:
    """The attack success rate of ``params`` on the workbench's test set: of the test images whose label is
    not the target, the share classified as the target once triggered (client/_attacks/backdoor.py)."""
    attack = backdoor.inner if isinstance(backdoor, Sybil) else backdoor
    if not isinstance(attack, Backdoor):
        raise TypeError(f"not a backdoor: {backdoor!r}")
    evaluator = bench.evaluator
    others = evaluator.y != attack.target
    x = add_trigger(evaluator.x[others], size=attack.size, value=attack.value, inset=attack.inset)
    predictions = np.concatenate(
        [evaluator.logits(params, x[s : s + chunk]).argmax(axis=1) for s in range(0, len(x), chunk)]
    )
    return attack_success_rate(predictions, evaluator.y[others], attack.target)
