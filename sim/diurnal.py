"""Availability over the day: when each device's app is in use, and when Standard FL may train on it.

Online FL (the thesis, ch. 3) trains while the app is in use: a task runs during a session, within the
time and energy SLOs that I-Prof enforces. Standard FL (Bonawitz et al. 2019) trains only when the device
is idle, charging and on an unmetered network, which for most phones means at night. The experiment of
issue 31 compares the two, so both windows come from one generative model of a phone's day:

* **App sessions.** A device opens the app ``sessions_per_day`` times a day on average (scaled per device
  by a lognormal activity factor), at local hours drawn from a daily profile: a low night floor, a
  daytime base and Gaussian peaks in the morning, at lunch and in the evening (the shape of smartphone
  usage studies, e.g. Böhmer et al. 2011). Sessions are short: lognormal lengths, median 2 minutes.
  Overlapping sessions merge.
* **Charging on an unmetered network.** Most nights a phone charges from about 23:00 for about 7.5 h; it
  is on an unmetered network then only if its owner has home Wi-Fi. Some days also have a short daytime
  charge, on an unmetered network with a lower probability (office Wi-Fi).
* **Idle.** The screen must have been off for ``idle_grace_s``: a night session (checking the phone at
  2 am) makes the device ineligible for Standard FL for that session plus the grace period.

``eligible_standard(device, t)`` is the second window only; ``eligible_online(device, t)`` is the first
(the app is in use). Time ``t`` is seconds since midnight of day 0 in the reference time zone; a device's
local time is ``t + 3600 * tz_offset_h``. Everything is drawn once, at construction, from the seed.

**Traces.** No device-behaviour trace is available offline on this machine (FedScale's
``client_behave_trace`` is not in the repository or under /work/shared; 2026-11).
:func:`load_fedscale_behaviour` reads one from a local path (FedScale's pickle format: per client
``active``/``inactive`` lists of seconds, periodic with ``finish_time``) as a
:class:`TraceAvailability` whose ``eligible_standard`` answers from the trace instead of the model.
"""

from __future__ import annotations

import io
import json
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sim.intervals import IntervalSet

__all__ = [
    "DAY",
    "DiurnalFleet",
    "DiurnalParams",
    "TraceAvailability",
    "load_fedscale_behaviour",
    "sample_local_hours",
    "usage_profile",
]

DAY = 86_400.0
HOUR = 3_600.0
_GRID = 1_440  # the daily profile is sampled per minute


@dataclass(frozen=True)
class DiurnalParams:
    """Every knob of the diurnal model. Hours are local hours of the day (0-24)."""

    sessions_per_day: float = 12.0
    """Mean app sessions per device per day (before the per-device activity factor)."""
    activity_sigma: float = 0.5
    """Lognormal sigma of the per-device activity factor (mean 1) that scales ``sessions_per_day``."""
    session_median_s: float = 120.0
    """Median session length in seconds."""
    session_sigma: float = 0.8
    """Lognormal sigma of session lengths."""
    night_floor: float = 0.03
    """Usage intensity at night, relative to the daytime base (1)."""
    day_start_h: float = 7.0
    """Local hour when the daytime base intensity begins (smooth 1-hour ramp)."""
    day_end_h: float = 23.5
    """Local hour when the daytime base intensity ends (smooth 1-hour ramp)."""
    peaks: tuple[tuple[float, float, float], ...] = ((8.0, 1.0, 1.0), (12.5, 1.0, 0.8), (20.5, 1.5, 1.6))
    """Usage peaks on top of the base: (local hour, width in hours (Gaussian sd), height relative to the
    base)."""
    p_charge_night: float = 0.85
    """Probability that a device charges overnight on a given night."""
    charge_start_h: float = 23.0
    """Mean local hour at which the overnight charge begins."""
    charge_start_sd_h: float = 1.0
    """Standard deviation of the overnight charge's start, in hours."""
    charge_hours: float = 7.5
    """Mean length of the overnight charge, in hours."""
    charge_hours_sd: float = 1.0
    """Standard deviation of the overnight charge's length (clipped to 1-12 h)."""
    p_home_unmetered: float = 0.9
    """Share of devices on an unmetered network (home Wi-Fi) while charging overnight."""
    day_charges_per_day: float = 0.3
    """Mean number of daytime charges per device per day (Poisson), starting uniformly 09:00-18:00."""
    day_charge_hours: float = 1.0
    """Mean length of a daytime charge (exponential), in hours."""
    p_day_unmetered: float = 0.5
    """Probability that a daytime charge is on an unmetered network."""
    idle_grace_s: float = 300.0
    """The screen must have been off this long for the device to count as idle."""
    tz_spread_h: int = 0
    """Devices' time-zone offsets are drawn uniformly from the integers in [-spread, spread] (0: one zone,
    as in the thesis's west-coast data). Explicit offsets passed to :class:`DiurnalFleet` override it."""


def usage_profile(params: DiurnalParams = DiurnalParams(), hours: np.ndarray | None = None) -> np.ndarray:
    """Relative app-usage intensity at local ``hours`` (default: each minute of the day); mean 1 a day."""
    grid = np.arange(_GRID) * 24.0 / _GRID
    h = grid if hours is None else np.asarray(hours, dtype=float) % 24.0

    def raw(x: np.ndarray) -> np.ndarray:
        rise = 1.0 / (1.0 + np.exp(-4.0 * (x - params.day_start_h)))
        fall = 1.0 / (1.0 + np.exp(4.0 * (x - params.day_end_h)))
        value = params.night_floor + (1.0 - params.night_floor) * rise * fall
        for centre, width, height in params.peaks:
            d = (x - centre + 12.0) % 24.0 - 12.0  # circular distance in hours
            value = value + height * np.exp(-0.5 * (d / width) ** 2)
        return value

    return raw(h) / raw(grid).mean()


def sample_local_hours(
    n: int, rng: np.random.Generator, params: DiurnalParams = DiurnalParams()
) -> np.ndarray:
    """``n`` local hours of the day drawn from the usage profile (per-minute grid, uniform in a minute)."""
    cdf = np.cumsum(usage_profile(params))
    cdf /= cdf[-1]
    minute = np.searchsorted(cdf, rng.random(n), side="right")
    return (np.minimum(minute, _GRID - 1) + rng.random(n)) * 24.0 / _GRID


class DiurnalFleet:
    """The in-use and Standard-FL-eligible windows of ``n_devices`` over ``days`` days, drawn from a seed.

    Queries take a device index (or an array of them) and a time in seconds; arrays broadcast.
    """

    def __init__(
        self,
        n_devices: int,
        days: float,
        params: DiurnalParams = DiurnalParams(),
        *,
        seed: int = 0,
        tz_offsets_h: np.ndarray | None = None,
    ) -> None:
        if n_devices < 1 or days <= 0:
            raise ValueError("need at least one device and a positive number of days")
        self.params, self.n_devices, self.days = params, n_devices, days
        rng = np.random.default_rng(seed)
        if tz_offsets_h is None:
            spread = params.tz_spread_h
            tz_offsets_h = (
                rng.integers(-spread, spread + 1, size=n_devices) if spread else np.zeros(n_devices)
            )
        self.tz_offsets_h = np.asarray(tz_offsets_h, dtype=float)
        if self.tz_offsets_h.shape != (n_devices,):
            raise ValueError("tz_offsets_h needs one offset per device")
        self.activity = rng.lognormal(-0.5 * params.activity_sigma**2, params.activity_sigma, n_devices)
        self.home_unmetered = rng.random(n_devices) < params.p_home_unmetered
        first, last = -1, int(np.ceil(days)) + 1  # a day either side so windows cover [0, days)
        self.sessions = self._draw_sessions(rng, first, last)
        self.unmetered_charging = self._draw_charging(rng, first, last)

    # ----------------------------------------------------------------------------------------- drawing
    def _to_global(self, device: np.ndarray, day: np.ndarray, local_h: np.ndarray) -> np.ndarray:
        return day * DAY + (local_h - self.tz_offsets_h[device]) * HOUR

    def _draw_sessions(self, rng: np.random.Generator, first: int, last: int) -> IntervalSet:
        p, n_days = self.params, last - first
        counts = rng.poisson(np.repeat(p.sessions_per_day * self.activity, n_days))
        device = np.repeat(np.repeat(np.arange(self.n_devices), n_days), counts)
        day = np.repeat(np.tile(np.arange(first, last), self.n_devices), counts)
        start = self._to_global(device, day, sample_local_hours(int(counts.sum()), rng, p))
        length = p.session_median_s * rng.lognormal(0.0, p.session_sigma, start.size)
        return IntervalSet.from_arrays(self.n_devices, device, start, start + length)

    def _draw_charging(self, rng: np.random.Generator, first: int, last: int) -> IntervalSet:
        p, n_days = self.params, last - first
        device = np.repeat(np.arange(self.n_devices), n_days)
        day = np.tile(np.arange(first, last), self.n_devices)
        night = (rng.random(device.size) < p.p_charge_night) & self.home_unmetered[device]
        start_h = p.charge_start_h + p.charge_start_sd_h * rng.standard_normal(device.size)
        hours = np.clip(p.charge_hours + p.charge_hours_sd * rng.standard_normal(device.size), 1.0, 12.0)
        n_day = rng.poisson(p.day_charges_per_day, device.size)
        d_dev, d_day = np.repeat(device, n_day), np.repeat(day, n_day)
        d_start = rng.uniform(9.0, 18.0, d_dev.size)
        d_hours = rng.exponential(p.day_charge_hours, d_dev.size)
        d_keep = rng.random(d_dev.size) < p.p_day_unmetered
        all_dev = np.concatenate([device[night], d_dev[d_keep]])
        all_start = self._to_global(
            all_dev,
            np.concatenate([day[night], d_day[d_keep]]),
            np.concatenate([start_h[night], d_start[d_keep]]),
        )
        all_hours = np.concatenate([hours[night], d_hours[d_keep]])
        return IntervalSet.from_arrays(self.n_devices, all_dev, all_start, all_start + all_hours * HOUR)

    # ----------------------------------------------------------------------------------------- queries
    def in_use(self, device: np.ndarray | int, t: np.ndarray | float) -> np.ndarray:
        """Whether the app is in use (a session is open): when Online FL may run a task."""
        return self.sessions.contains(device, t)

    eligible_online = in_use

    def idle(self, device: np.ndarray | int, t: np.ndarray | float) -> np.ndarray:
        """No session open, and none ended within the last ``idle_grace_s``."""
        return ~self.sessions.ended_within(device, t, self.params.idle_grace_s)

    def charging_unmetered(self, device: np.ndarray | int, t: np.ndarray | float) -> np.ndarray:
        """Charging and on an unmetered network."""
        return self.unmetered_charging.contains(device, t)

    def eligible_standard(self, device: np.ndarray | int, t: np.ndarray | float) -> np.ndarray:
        """Idle, charging and on an unmetered network: when Standard FL may train on the device."""
        return self.charging_unmetered(device, t) & self.idle(device, t)

    def in_use_mask(self, t: float) -> np.ndarray:
        """``in_use`` for every device at one time: bool ``(n_devices,)``."""
        return self.in_use(np.arange(self.n_devices), t)

    def eligible_mask(self, t: float) -> np.ndarray:
        """``eligible_standard`` for every device at one time: bool ``(n_devices,)``."""
        return self.eligible_standard(np.arange(self.n_devices), t)

    def local_hour(self, device: np.ndarray | int, t: np.ndarray | float) -> np.ndarray:
        """The device's local hour of the day (0-24) at ``t``."""
        return ((np.asarray(t, dtype=float) / HOUR) + self.tz_offsets_h[device]) % 24.0

    def sessions_of(
        self, device: int, t0: float = -np.inf, t1: float = np.inf
    ) -> tuple[np.ndarray, np.ndarray]:
        """``device``'s sessions (starts, ends) that start in ``[t0, t1)``: when an online task can begin."""
        start, end = self.sessions.of(device)
        keep = (start >= t0) & (start < t1)
        return start[keep], end[keep]


class TraceAvailability:
    """Standard-FL eligibility replayed from a device-behaviour trace (periodic per device)."""

    def __init__(self, names: list[str], windows: IntervalSet, period: np.ndarray) -> None:
        self.names, self.windows, self.period = names, windows, period
        self.n_devices = len(names)

    def eligible_standard(self, device: np.ndarray | int, t: np.ndarray | float) -> np.ndarray:
        device = np.asarray(device, dtype=np.int64)
        return self.windows.contains(device, np.asarray(t, dtype=float) % self.period[device])

    def eligible_mask(self, t: float) -> np.ndarray:
        return self.eligible_standard(np.arange(self.n_devices), t)


class _PlainUnpickler(pickle.Unpickler):
    """A trace is a pickle of plain dicts and lists: refuse anything else (no code execution)."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a behaviour trace")


def load_fedscale_behaviour(path: str | Path) -> TraceAvailability:
    """FedScale's ``client_behave_trace`` from a local file (pickle, or the same mapping as JSON).

    Per client: ``active`` and ``inactive`` (equal-length lists of seconds: the device is available from
    ``active[i]`` to ``inactive[i]``) and ``finish_time`` (the trace's period; FedScale replays it
    modulo this). Clients are numbered in sorted order of their ids; ``names`` keeps the ids.
    """
    path = Path(path)
    raw = (
        json.loads(path.read_text())
        if path.suffix == ".json"
        else _PlainUnpickler(io.BytesIO(path.read_bytes())).load()
    )
    if not isinstance(raw, dict) or not raw:
        raise ValueError(f"{path}: expected a non-empty mapping client id → behaviour")
    names = sorted(raw, key=str)
    devices, starts, ends, period = [], [], [], []
    for i, name in enumerate(names):
        entry = raw[name]
        active = np.asarray(entry["active"], dtype=float)
        inactive = np.asarray(entry["inactive"], dtype=float)
        if active.shape != inactive.shape or np.any(inactive < active):
            raise ValueError(f"{path}: client {name} has mismatched active/inactive lists")
        finish = float(entry.get("finish_time", inactive.max(initial=0.0)))
        if not finish > 0:
            raise ValueError(f"{path}: client {name} has finish_time {finish}")
        devices.append(np.full(active.size, i))
        starts.append(active)
        ends.append(inactive)
        period.append(finish)
    windows = IntervalSet.from_arrays(
        len(names), np.concatenate(devices), np.concatenate(starts), np.concatenate(ends)
    )
    return TraceAvailability([str(n) for n in names], windows, np.asarray(period))
