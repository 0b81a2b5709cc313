"""The diurnal availability model: in use by day, eligible for Standard FL by night (issue 31)."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from sim.diurnal import DAY, HOUR, DiurnalFleet, DiurnalParams, load_fedscale_behaviour, usage_profile
from sim.intervals import IntervalSet


@pytest.fixture(scope="module")
def fleet() -> DiurnalFleet:
    return DiurnalFleet(1000, 3, seed=1)


def _share(mask_of_t, day: int, hours: list[float]) -> float:  # noqa: ANN001
    return float(np.mean([mask_of_t(day * DAY + h * HOUR).mean() for h in hours]))


def test_standard_fl_eligibility_is_mostly_at_night(fleet: DiurnalFleet) -> None:
    night = _share(fleet.eligible_mask, 1, [2.5, 3.0, 3.5])
    afternoon = _share(fleet.eligible_mask, 1, [14.5, 15.0, 15.5])
    assert night > 0.5
    assert afternoon < 0.1


def test_the_app_is_used_by_day_not_at_night(fleet: DiurnalFleet) -> None:
    minutes = [h + m / 60 for h in (14, 15) for m in range(0, 60, 5)]
    by_day = _share(fleet.in_use_mask, 1, minutes)
    at_night = _share(fleet.in_use_mask, 1, [3 + m / 60 for m in range(0, 120, 5)])
    assert by_day > 5 * max(at_night, 1e-3)
    profile = usage_profile()
    assert profile.mean() == pytest.approx(1.0)
    assert profile[20 * 60 + 30] > 10 * profile[3 * 60]  # the evening peak against 3 am


def test_eligible_devices_are_never_in_use(fleet: DiurnalFleet) -> None:
    devices = np.arange(fleet.n_devices)
    for t in np.linspace(0, 3 * DAY, 97):
        assert not np.any(fleet.eligible_standard(devices, t) & fleet.in_use(devices, t))


def test_sessions_are_short_and_about_a_dozen_a_day(fleet: DiurnalFleet) -> None:
    starts, ends = fleet.sessions.start, fleet.sessions.end
    inside = (starts >= DAY) & (starts < 2 * DAY)
    assert 8 < inside.sum() / fleet.n_devices < 14  # merged sessions, mean 12 a day
    assert 60 < np.median(ends[inside] - starts[inside]) < 240


def test_time_zones_shift_the_day() -> None:
    offsets = np.array([0.0] * 200 + [12.0] * 200)
    fleet = DiurnalFleet(400, 2, DiurnalParams(), seed=2, tz_offsets_h=offsets)
    mask = fleet.eligible_mask(DAY + 15 * HOUR)  # 15:00 here, 03:00 twelve zones east
    assert mask[:200].mean() < 0.1 < 0.5 < mask[200:].mean()
    assert fleet.local_hour(300, DAY + 15 * HOUR) == pytest.approx(3.0)


def test_deterministic_given_a_seed() -> None:
    a, b = DiurnalFleet(50, 1, seed=7), DiurnalFleet(50, 1, seed=7)
    np.testing.assert_array_equal(a.sessions.start, b.sessions.start)
    np.testing.assert_array_equal(a.unmetered_charging.end, b.unmetered_charging.end)


def test_idle_needs_the_screen_off_for_the_grace_period() -> None:
    fleet = DiurnalFleet(20, 1, seed=3)
    starts, ends = fleet.sessions_of(0)
    end = ends[0]
    grace = fleet.params.idle_grace_s
    assert not fleet.idle(0, end + grace / 2)
    following = starts[1] if starts.size > 1 else np.inf
    if end + grace + 1 < following:
        assert fleet.idle(0, end + grace + 1)


def test_interval_set_merges_overlaps_per_device() -> None:
    s = IntervalSet.from_arrays(
        3, np.array([0, 0, 0, 2]), np.array([5.0, 0.0, 2.0, 1.0]), np.array([6.0, 3.0, 4.0, 2.0])
    )
    np.testing.assert_array_equal(s.start, [0.0, 5.0, 1.0])
    np.testing.assert_array_equal(s.end, [4.0, 6.0, 2.0])
    got = s.contains(np.array([0, 0, 0, 1, 2, 2]), np.array([3.9, 4.5, 5.5, 1.5, 1.5, 2.0]))
    np.testing.assert_array_equal(got, [True, False, True, False, True, False])
    np.testing.assert_allclose(s.total(0.0, 10.0), [5.0, 0.0, 1.0])


def test_fedscale_behaviour_trace_replays_periodically(tmp_path: Path) -> None:
    trace = {
        "b": {"active": [0, 100], "inactive": [10, 150], "finish_time": 200, "duration": 200, "model": "x"},
        "a": {"active": [50], "inactive": [60], "finish_time": 100},
    }
    path = tmp_path / "client_behave_trace"
    path.write_bytes(pickle.dumps(trace))
    availability = load_fedscale_behaviour(path)
    assert availability.names == ["a", "b"]
    np.testing.assert_array_equal(availability.eligible_mask(55.0), [True, False])
    np.testing.assert_array_equal(availability.eligible_mask(305.0), [False, True])  # b at 105
    np.testing.assert_array_equal(availability.eligible_mask(155.0), [True, False])  # a at 55


def test_fedscale_loader_refuses_code_in_a_pickle(tmp_path: Path) -> None:
    path = tmp_path / "evil.pkl"
    path.write_bytes(pickle.dumps({"a": {"active": [0], "inactive": [1], "finish_time": Path("x")}}))
    with pytest.raises(pickle.UnpicklingError):
        load_fedscale_behaviour(path)
