"""Byzantine behaviours a test device can adopt (issues 17 and 30: what a robust coordinator must survive).

One interface (``Attack``, base.py) for all of them, so that ``fleet worker --attack NAME``
(client/_worker.py) and the simulator (sim/adversary.py) apply the same code:

==============  ===============================================================  ====================
name            pushes                                                           parameters
==============  ===============================================================  ====================
sign-flip       −10·g (the thesis's attack)                                      k
scaled          −k·g                                                             k
gaussian        N(0, σ²) noise                                                   sigma
label-flip      the honest gradient of labels C−1−y (on a ``share`` of it)       share
stale-replay    the gradient of ``lag`` tasks before                             lag
alie            μ − z·σ per coordinate (Baruch et al. 2019)                      n, f, z, estimates
ipm             −ε·μ (Xie, Koyejo, Gupta 2020)                                   epsilon, estimates
backdoor        g of a batch with a share triggered → target, × boost            target, share, boost,
                (Bagdasaryan et al. 2020)                                        size, value
sybil           the ``inner`` attack's, from ``count`` devices of one key        inner, count (+ inner's)
==============  ===============================================================  ====================
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import numpy as np

from .backdoor import Backdoor, add_trigger, attack_success_rate, trigger_size
from .base import Attack, Honest
from .gradients import (
    ALIE,
    IPM,
    Gaussian,
    LabelFlip,
    Replay,
    Scaled,
    SignFlip,
    StaleReplay,
    alie_z,
    gaussian,
    label_flip,
    sign_flip,
)
from .sybil import Sybil

__all__ = [
    "ALIE",
    "ATTACKS",
    "IPM",
    "Attack",
    "AttackName",
    "Backdoor",
    "Gaussian",
    "Honest",
    "LabelFlip",
    "Scaled",
    "StaleReplay",
    "Sybil",
    "add_trigger",
    "alie_z",
    "attack_success_rate",
    "gaussian",
    "label_flip",
    "make_attack",
    "parse_params",
    "sign_flip",
    "trigger_size",
]

AttackName = Literal[
    "sign-flip", "scaled", "gaussian", "label-flip", "stale-replay", "alie", "ipm", "backdoor", "sybil"
]
KINDS: dict[str, type[Honest]] = {
    "sign-flip": SignFlip,
    "scaled": Scaled,
    "gaussian": Gaussian,
    "label-flip": LabelFlip,
    "stale-replay": Replay,
    "alie": ALIE,
    "ipm": IPM,
    "backdoor": Backdoor,
}
ATTACKS: tuple[AttackName, ...] = (*KINDS, "sybil")  # type: ignore[assignment]


def _parameters(kind: type[Honest]) -> dict[str, dataclasses.Field[Any]]:
    return {f.name: f for f in dataclasses.fields(kind) if f.init and f.name != "rng"}


def _coerce(kind: type[Honest], name: str, value: Any) -> Any:
    """A parameter given as text (the CLI's KEY=VALUE) as its field's type: int, float or None."""
    if not isinstance(value, str):
        return value
    default = _parameters(kind)[name].default
    if value.lower() == "none":
        return None
    if isinstance(default, bool):
        return value.lower() in ("1", "true", "yes")
    if isinstance(default, int) or (default is None and value.lstrip("-").isdigit()):
        return int(value)
    return float(value)


def make_attack(name: str, rng: np.random.Generator | None = None, **params: Any) -> Attack:
    """The attack ``name`` with ``params`` (numbers may be given as text); ``rng``: its random source
    (noise, which examples a backdoor triggers). Unknown names and parameters are refused."""
    rng = rng if rng is not None else np.random.default_rng()
    if name == "sybil":
        count = int(params.pop("count", 5))
        inner = str(params.pop("inner", "sign-flip"))
        if inner == "sybil":
            raise ValueError("a sybil's inner attack cannot be sybil")
        return Sybil(make_attack(inner, rng, **params), count)
    kind = KINDS.get(name)
    if kind is None:
        raise ValueError(f"unknown attack {name!r}; known: {list(ATTACKS)}")
    known = _parameters(kind)
    unknown = set(params) - set(known)
    if unknown:
        raise ValueError(f"attack {name!r} takes {sorted(known) or 'no parameters'}, not {sorted(unknown)}")
    return kind(rng=rng, **{k: _coerce(kind, k, v) for k, v in params.items()})


def parse_params(pairs: list[str] | tuple[str, ...]) -> dict[str, str]:
    """``["k=5", "inner=alie"]`` → {"k": "5", "inner": "alie"} (the CLI's repeated --attack-param)."""
    parsed = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"attack parameter {pair!r} is not KEY=VALUE")
        parsed[key.strip()] = value.strip()
    return parsed
