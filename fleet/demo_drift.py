"""`fleet demo --scenario drift`: online learning on a recommender stream whose popular items turn over.

The clock is accelerated: one simulated hour lasts ``seconds_per_hour`` real seconds (4 s by default, so
the default 3 minutes show 45 hours, about two days of drift). Every simulated hour the feed
(fleet/demo_drift_feed.py) rewrites each device's recent window of the stream and the freshest hour of
held-out users' events; the devices (real workers, each in its thread, through the REST API, emulating
the demo's phone classes) train on their file as it grows and ages (client.FileFedData), and the
coordinator scores each new version on the freshest hour (FLEET_EVAL_DATA reread when it changes,
F1@top-5 as the thesis scores its hashtag recommender). The console's accuracy chart over wall time,
labelled "F1@5 on the freshest hour", is then the model tracking the drift; the summary here gives the
same per simulated hour.
"""

from __future__ import annotations

import logging
import math
import secrets
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from rich.console import Console
from rich.table import Table

from fleet.demo import PHONES, DemoConfig, _linger, _server_env, _wait_ready, stop_server
from fleet.demo_drift_feed import DriftFeed

METRIC, LABEL = "f1@5", "F1@5 on the freshest hour"
REFERENCE_HOURS = 24  # the console scores the model of a day before beside the live one: had it stopped
REFERENCE_LABEL = "the model as it was a day before"
HOUR_S = 3600.0


@dataclass(frozen=True)
class DriftConfig:
    devices: int = 20
    minutes: float = 3.0  # of training: the simulated hours shown are minutes * 60 / seconds_per_hour
    seconds_per_hour: float = 4.0  # the accelerated clock: one simulated hour lasts this many real seconds
    port: int = 8765
    workdir: Path = Path("var/demo")
    learning_rate: float | None = None
    strategy: str | None = None
    seed: int = 0
    time_slo_ms: float = 1000.0
    linger: float | None = None
    held_out_users: int = 200  # users who are no device: the freshest hour of their events is the test set

    def __post_init__(self) -> None:
        if self.seconds_per_hour <= 0 or self.minutes <= 0 or self.devices < 1:
            raise ValueError("seconds_per_hour, minutes and devices must be positive")

    @property
    def hours(self) -> int:
        """Simulated hours the run shows."""
        return max(1, math.floor(self.minutes * 60 / self.seconds_per_hour))


def server_env(cfg: DriftConfig, eval_path: Path, keys: tuple[str, str, str]) -> dict[str, str]:
    """The demo's coordinator settings, for the recommender scored by F1@5 on a moving evaluation set."""
    demo = DemoConfig(
        devices=cfg.devices, model="recommender", port=cfg.port, workdir=cfg.workdir,
        learning_rate=cfg.learning_rate, strategy=cfg.strategy, seed=cfg.seed, time_slo_ms=cfg.time_slo_ms,
    )  # fmt: skip
    env = _server_env(demo, *keys)
    env.pop("FLEET_TARGET_ACCURACY")  # online learning never finishes
    env.update(
        FLEET_EVAL_DATA=str(eval_path),
        FLEET_EVAL_METRIC=METRIC,
        FLEET_EVAL_LABEL=LABEL,
        FLEET_EVAL_INTERVAL_S=str(min(2.0, cfg.seconds_per_hour / 2)),  # several scores per simulated hour
        FLEET_EVAL_REFERENCE_AGE_S=str(REFERENCE_HOURS * cfg.seconds_per_hour),
        FLEET_EVAL_REFERENCE_LABEL=REFERENCE_LABEL,
    )
    return env


def _start_worker(
    cfg: DriftConfig, feed: DriftFeed, device: int, base: str, key: str, stop: threading.Event
) -> threading.Thread:
    from client import FileFedData, Worker, WorkerConfig

    phone, ms = PHONES[device % len(PHONES)]
    config = WorkerConfig(
        base_url=base,
        enrollment_key=key,
        data=FileFedData(feed.device_path(device)),
        device_model=phone,
        min_ms_per_sample=ms,
        seed=cfg.seed * 1000 + device,
        max_seconds=cfg.minutes * 60 + 30,
    )
    thread = threading.Thread(target=Worker(config).run, args=(stop,), name=f"device-{device}", daemon=True)
    thread.start()
    return thread


def per_hour(
    evaluations: list[dict[str, Any]], started: float, seconds_per_hour: float, field: str = "accuracy"
) -> dict[int, float]:
    """The newest score (``field``: the live model's, or ``reference``, the day-old model's) recorded during
    each simulated hour (an evaluation at wall time ``at``, the clock having started at ``started``, falls
    in hour ``(at - started) // seconds_per_hour``)."""
    scores: dict[int, float] = {}
    for e in sorted(evaluations, key=lambda e: e["at"]):
        if e["at"] >= started and e.get(field) is not None:
            scores[int((e["at"] - started) // seconds_per_hour)] = float(e[field])
    return scores


def _summary(run: DriftRun) -> Table:
    table = Table(title=f"Fleet drift demo: {LABEL}, per simulated hour")
    for column in ("hour", "local time", "the model now", REFERENCE_LABEL):
        table.add_column(column)
    for hour, score in sorted(run.scores.items()):
        clock = (run.feed.sim_time(hour) % (24 * HOUR_S)) / HOUR_S
        day = int(run.feed.sim_time(hour) // (24 * HOUR_S)) + 1
        old = run.reference.get(hour)
        table.add_row(
            str(hour), f"day {day}, {clock:04.1f} h", f"{score:.3f}", "" if old is None else f"{old:.3f}"
        )
    later = [h for h in run.reference if h in run.scores]
    gain = ""
    if later:
        now, before = (np.mean([series[h] for h in later]) for series in (run.scores, run.reference))
        gain = f"; over the {len(later)} hours with both, the model now {now:.3f}, a day before {before:.3f}"
    table.caption = (
        f"model v{run.stats['version']}{gain}; F1@5 of a perfect top-5 is 0.333 (one relevant item per "
        "event), of a random one 0.017"
    )
    return table


@dataclass(frozen=True)
class DriftRun:
    """What a run recorded: the score per simulated hour, the coordinator's figures, the feed."""

    scores: dict[int, float]
    stats: dict[str, Any]
    feed: DriftFeed
    reference: dict[int, float]  # the day-old model's score on the same hour (from day 2 on)


def run_drift(cfg: DriftConfig) -> int:
    """Run the scenario; 0 when the coordinator recorded the metric in at least two simulated hours."""
    console = Console()
    run = drive(cfg, console)
    return 0 if len(run.scores) >= 2 else 1


def drive(cfg: DriftConfig, console: Console) -> DriftRun:
    """The coordinator process, the phones and the clock: the run itself, its summary printed."""
    if cfg.workdir.exists():
        shutil.rmtree(cfg.workdir)
    feed = DriftFeed(
        cfg.workdir / "data", cfg.devices, cfg.hours, held_out_users=cfg.held_out_users, seed=cfg.seed
    )
    feed.write(0)
    if not feed.eval_path.exists():
        raise RuntimeError("the stream's first hour has no held-out events to evaluate on")
    console.print(
        f"[bold]Fleet demo, drift scenario[/]: {cfg.devices} emulated phones on a recommender stream, "
        f"{cfg.hours} simulated hours at {cfg.seconds_per_hour:g} s each; the coordinator scores "
        f"{LABEL}"
    )
    keys = (secrets.token_urlsafe(16), secrets.token_urlsafe(16), secrets.token_urlsafe(12))
    base = f"http://127.0.0.1:{cfg.port}"
    login = f"console: [link]{base}/admin[/link]  user [bold]admin[/]  password [bold]{keys[2]}[/]"
    device_log = logging.FileHandler(cfg.workdir / "devices.log")
    client_logger = logging.getLogger("fleet.client")
    client_logger.addHandler(device_log)
    client_logger.propagate = False
    log = (cfg.workdir / "server.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "fleet.cli", "serve", "--port", str(cfg.port), "--log-level", "warning"],
        env=server_env(cfg, feed.eval_path, keys),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    stop = threading.Event()
    workers: dict[int, threading.Thread] = {}
    headers = {"Authorization": f"Bearer {keys[1]}"}
    try:
        _wait_ready(base, server)
        console.print("Watch it live in the " + login)
        started = time.time()
        for hour in range(cfg.hours):
            if hour:
                feed.write(hour)
            for device in feed.ready():
                if device not in workers:
                    workers[device] = _start_worker(cfg, feed, device, base, keys[0], stop)
            time.sleep(max(0.0, started + (hour + 1) * cfg.seconds_per_hour - time.time()))
            _progress(console, base, headers, hour, feed)
        stop.set()
        for thread in workers.values():
            thread.join(timeout=30)
        stats = httpx.get(f"{base}/v1/admin/stats", headers=headers, timeout=10).json()
        evaluations = httpx.get(f"{base}/v1/admin/evaluations", headers=headers, timeout=10).json()
        scores = per_hour(evaluations, started, cfg.seconds_per_hour)
        reference = per_hour(evaluations, started, cfg.seconds_per_hour, "reference")
        run = DriftRun(scores, stats, feed, reference)
        console.print(_summary(run))
        console.print(f"Logs: {cfg.workdir / 'server.log'}, {cfg.workdir / 'devices.log'}")
        _linger(console, DemoConfig(linger=cfg.linger), login)
        return run
    finally:
        stop.set()
        stop_server(server)
        log.close()
        client_logger.removeHandler(device_log)
        device_log.close()


def _progress(console: Console, base: str, headers: dict[str, str], hour: int, feed: DriftFeed) -> None:
    """One line per simulated hour: the clock, the model version and the latest score."""
    try:
        stats = httpx.get(f"{base}/v1/admin/stats", headers=headers, timeout=5).json()
    except httpx.HTTPError:
        return
    score = stats["accuracy"]
    clock = (feed.sim_time(hour) % (24 * HOUR_S)) / HOUR_S
    console.print(
        f"hour {hour:3d} ({clock:04.1f} h local) · v{stats['version']} · "
        f"{LABEL} {'-' if score is None else f'{score:.3f}'}"
    )
