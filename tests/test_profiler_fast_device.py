"""A device much faster than the built-in prior must reach its SLO-sized batch within a few tasks.

A plain worker on a server CPU (≈0.1 ms per sample) stayed at L = 500 for 110 tasks against a
default `fleet serve`: the prior's constant slope (20 ms) set the floor of α̂ at 10% of it, 2 ms, and
1000 ms / 2 ms = 500, whatever the personal model had learned. The floor now follows the slopes the
device model itself measured.
"""

from __future__ import annotations

import numpy as np
import pytest

from profiler import ENERGY_FEATURES, IProf
from profiler.prior import PRIOR_DEVICES
from server.settings import Settings

PHONE = dict(zip(ENERGY_FEATURES, PRIOR_DEVICES["Pixel 3-class"], strict=True))
# what psutil reads on a server VM: lots of memory, no temperature nor frequency (far outside the prior)
SERVER = {"available_memory": 24.4e9, "total_memory": 25.3e9, "temperature": None, "cpu_freq_sum": None}


def _batches(profiler: IProf, features: dict, slope_ms: float, tasks: int) -> list[int]:
    """Run ``tasks`` tasks on a device whose true slope is ``slope_ms`` (±5% noise); the sizes handed out."""
    rng = np.random.default_rng(0)
    sizes = []
    for _ in range(tasks):
        size = profiler.batch_size("fast", features).batch_size
        sizes.append(size)
        profiler.observe("fast", features, size, slope_ms * size * rng.uniform(0.95, 1.05))
    return sizes


def _serve_profiler(**overrides: float) -> IProf:
    """The I-Prof a default `fleet serve` builds (no bootstrap file: the built-in prior)."""
    s = Settings()
    params = {"time_slo_ms": s.time_slo_ms, "min_batch": s.min_batch, "max_batch": s.max_batch}
    return IProf(**{**params, **s.profiler_params, **overrides}).fit_prior()


@pytest.mark.parametrize("features", [PHONE, SERVER], ids=["phone-like", "server-like"])
@pytest.mark.parametrize("speedup", [20, 200])
def test_default_server_sizes_a_fast_device_within_five_tasks(features: dict, speedup: int) -> None:
    profiler = _serve_profiler(max_batch=100_000)
    slope = profiler.prior_time_slope_ms / speedup
    target = profiler.time_slo_ms / slope  # the SLO-sized batch
    sizes = _batches(profiler, features, slope, tasks=8)
    reached = next((i for i, size in enumerate(sizes) if size >= 0.5 * target), None)
    assert reached is not None and reached <= 4, sizes  # the 5th task at the latest
    if speedup == 20:  # ε (0.1 ms) is 10% of this slope: the size settles within it
        assert min(sizes[5:]) >= 0.9 * target, sizes


@pytest.mark.parametrize("features", [PHONE, SERVER], ids=["phone-like", "server-like"])
def test_default_server_reaches_max_batch_on_a_server_cpu(features: dict) -> None:
    """The reported case: 0.1 ms per sample, SLO 1 s, max_batch 1000 (the defaults)."""
    sizes = _batches(_serve_profiler(), features, 0.1, tasks=6)
    assert sizes[2:] == [Settings().max_batch] * 4, sizes


def test_thesis_settings_are_slower_but_not_stuck() -> None:
    """The thesis's C = 0.1 caps each step at 2 ms here: more tasks, but no floor holds the device back."""
    profiler = IProf(time_slo_ms=1000.0, max_batch=100_000).fit_prior()
    sizes = _batches(profiler, PHONE, 1.0, tasks=12)
    assert min(sizes[8:]) >= 900, sizes


def test_a_fast_device_does_not_lower_the_floor_of_others() -> None:
    profiler = _serve_profiler()
    _batches(profiler, PHONE, 0.1, tasks=3)
    assert profiler.time_._floor("other") == profiler.time_.alpha_floor_ == pytest.approx(2.0)
    assert profiler.time_._floor("fast") == pytest.approx(0.01, rel=0.06)


def test_the_floor_survives_a_restart() -> None:
    profiler = _serve_profiler()
    _batches(profiler, SERVER, 0.1, tasks=3)
    state = profiler.device_state("fast")
    restored = _serve_profiler().load_device_state("fast", state)
    assert restored.batch_size("fast", SERVER) == profiler.batch_size("fast", SERVER)
