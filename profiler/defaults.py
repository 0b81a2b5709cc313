"""The I-Prof settings a default `fleet serve` runs, and that the profiler experiments report.

Chosen by `python -m lab run profiler-tune` (docs/results/profiler-tune.md) on a validation split of
the simulated catalogue's bootstrap phones with their own seeds; the 20 test phones and the seeds the
experiments report were never used to choose them. The constructor defaults of ``IProf`` stay the
spec's plain PA-I (C = 0.1, no feature treatment), so the thesis's behaviour remains one call away.
"""

from __future__ import annotations

__all__ = ["TUNED_PARAMS"]

#: ``IProf`` keyword arguments (``FLEET_PROFILER_PARAMS`` replaces them as a whole).
TUNED_PARAMS: dict[str, float | bool | str] = {
    "personal_init": "level",
    "z_clip": 3.0,
    "scale_floor": 0.05,
    "C": 1.0,
}
