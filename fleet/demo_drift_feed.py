"""The data side of `fleet demo --scenario drift`: the recommender stream, cut by the simulated hour.

At each simulated hour the feed writes, atomically (write, then ``os.replace``):

* ``device-<d>.npz``: device ``d``'s recent window of the stream (its own events, the newest 200 and
  none older than 6 h: sim/streams/device.py), which the device's worker reads through
  :class:`client.FileFedData`. The coordinator never sees these files.
* ``eval.npz``: the freshest hour of events of *held-out* users (users who are no device), the
  coordinator's FLEET_EVAL_DATA, which it rereads when it changes (server/core/eval_file.py): the
  model is scored on what people do now, not on a fixed test set.

A device whose window is empty keeps its previous file (a phone keeps the last data it saw), and one
that never had an event has no file yet (its worker starts once it has); an hour with fewer than
``min_eval`` held-out events (the night is quiet) keeps the previous evaluation set.

The stream's last two features are the local hour's sine and cosine, in [-1, 1]; device data must lie
in [0, 1] (client/_data.py), so both the devices and the evaluation get them as ``(v + 1) / 2``, an
affine change a linear model absorbs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sim.diurnal import DAY, HOUR
from sim.streams import DeviceStreams, RecommenderParams, RecommenderStream, WindowBound

__all__ = ["DriftFeed", "FeedHour", "to_unit_range", "write_npz"]

WINDOW = WindowBound()  # the newest 200 events, none older than 6 h
STREAM = RecommenderParams(events_per_user_day=40.0)  # twice the default: fuller windows on 20 phones


def to_unit_range(features: np.ndarray) -> np.ndarray:
    """The stream's features in [0, 1]: the hour's sine and cosine (the last two) mapped by (v + 1) / 2."""
    out = np.array(features, dtype=np.float32)
    out[:, -2:] = (out[:, -2:] + 1.0) / 2.0
    return np.clip(out, 0.0, 1.0)


def write_npz(path: Path, x: np.ndarray, y: np.ndarray) -> None:
    """Save ``x`` and ``y`` so that a reader sees the old file or the new one, never half of one."""
    part = path.with_name(path.name + ".part")
    with part.open("wb") as f:
        np.savez(f, x=x, y=y)
    os.replace(part, path)


@dataclass(frozen=True)
class FeedHour:
    """What one hour's write did."""

    hour: int
    sim_time: float  # seconds since the stream's start
    devices_written: int  # devices with a non-empty window (the others kept their file)
    eval_examples: int  # examples in the freshest hour of held-out users (0: the eval set was kept)


class DriftFeed:
    """A recommender stream of ``devices`` device users and ``held_out_users`` evaluation users."""

    def __init__(
        self,
        folder: Path,
        devices: int,
        hours: float,
        *,
        held_out_users: int = 200,
        start_hour: float = 12.0,
        bound: WindowBound = WINDOW,
        params: RecommenderParams = STREAM,
        seed: int = 0,
        min_eval: int = 30,
    ) -> None:
        if devices < 1 or held_out_users < 1 or hours <= 0:
            raise ValueError("need a device, a held-out user and a positive number of hours")
        self.folder, self.devices, self.start_hour, self.min_eval = folder, devices, start_hour, min_eval
        folder.mkdir(parents=True, exist_ok=True)
        days = (start_hour + hours + 1) * HOUR / DAY
        self.stream = RecommenderStream(devices + held_out_users, days, params, seed=seed)
        log = self.stream.generate()
        own = log.of_users(np.arange(devices))
        self.windows = DeviceStreams.from_events(own, n_devices=devices, bound=bound)
        held = log.of_users(np.arange(devices, devices + held_out_users))
        self.held_out = held
        self.n_features = params.n_features

    @property
    def eval_path(self) -> Path:
        return self.folder / "eval.npz"

    def device_path(self, device: int) -> Path:
        return self.folder / f"device-{device}.npz"

    def sim_time(self, hour: float) -> float:
        """Seconds since the stream's start at the demo's ``hour`` (hour 0 is ``start_hour``)."""
        return (self.start_hour + hour) * HOUR

    def write(self, hour: int) -> FeedHour:
        """Every device's window and the held-out freshest hour, at the end of the demo's ``hour``."""
        now = self.sim_time(hour)
        written = 0
        for d in range(self.devices):
            _, x, y = self.windows.window(d, now)
            if len(y):
                write_npz(self.device_path(d), to_unit_range(x), y)
                written += 1
        fresh = self.held_out.between(now - HOUR, now)
        if len(fresh) < self.min_eval:
            return FeedHour(hour, now, written, 0)
        write_npz(self.eval_path, to_unit_range(fresh.features), fresh.item)
        return FeedHour(hour, now, written, len(fresh))

    def ready(self) -> list[int]:
        """The devices that have a data file (so a worker can start)."""
        return [d for d in range(self.devices) if self.device_path(d).exists()]
