"""The staleness controller of the experiments (fleet-spec §6, thesis appendix A.1).

It imposes a chosen staleness distribution independent of device timing, the only honest way: it
hands each task an *older* retained model version t − τ (the coordinator's ``version_policy``), so the
gradient really is computed on that version and the coordinator measures τ from versions as usual.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from server.core.types import TaskRequest


@dataclass(frozen=True)
class Gaussian:
    """τ ~ N(mu, sigma), rounded and clipped to [0, tau_max]."""

    mu: float
    sigma: float
    tau_max: int = 60

    def draw(self, rng: np.random.Generator) -> int:
        return int(np.clip(np.rint(rng.normal(self.mu, self.sigma)), 0, self.tau_max))


D1 = Gaussian(6.0, 2.0)
D2 = Gaussian(12.0, 4.0)


@dataclass
class StalenessController:
    """Draws τ per task; with ``long_tail=(label, tau)`` every device holding that label gets that τ.

    One draw is made per request whatever happens, so for one seed every strategy sees the same
    sequence of staleness values (paired comparisons).
    """

    distribution: Gaussian
    rng: np.random.Generator
    long_tail: tuple[int, int] | None = None
    drawn: list[int] = field(default_factory=list)

    def __call__(self, request: TaskRequest, current_version: int) -> int:
        tau = self.distribution.draw(self.rng)
        counts = request.label_counts  # None: not sent (a DP device), so no long tail by label
        if self.long_tail is not None and counts is not None and counts[self.long_tail[0]] > 0:
            tau = self.long_tail[1]
        self.drawn.append(tau)
        return current_version - tau
