"""AdaBuff: AdaSGD's weights (exponential dampening × similarity boost) on a FedBuff buffer of K.

One of the candidates issue 19 measured for the default: it asks whether AdaSGD's weighting helps
once gradients are averaged K at a time instead of applied one by one.
"""

from __future__ import annotations

from typing import Any, Literal

from server.strategies.adasgd import AdaSGD, AdaSGDSettings


class AdaBuffSettings(AdaSGDSettings):
    name: Literal["adabuff"] = "adabuff"  # type: ignore[assignment]


class AdaBuff(AdaSGD):
    name = "adabuff"
    average = True
    settings = AdaBuffSettings

    def __init__(self, *, learning_rate: float = 0.4, k: int = 10, **params: Any) -> None:
        super().__init__(learning_rate=learning_rate, k=k, **params)
