"""One Flower arm of the peer benchmark: Flower's synchronous FedAvg (bench/peer_flower/, a Flower App)
with every client a real process on loopback, in Flower's own virtual environment.

Two ways to run it, both what Flower 1.41 ships:

- ``legacy``: ``flwr.server.start_server`` and one ``start_client`` process per device, long-lived
  (gRPC; deprecated since Flower 1.13 but still in 1.41). The headline mode: like Fleet's devices, a
  client process lives for the whole run, so rounds cost what learning costs.
- ``deployment``: Flower's current deployment engine, ``flower-superlink``, one ``flower-supernode``
  per device and ``flwr run``. Its SuperNodes start a fresh ``flwr-clientapp`` process for every
  message (Python, flwr and torch imported again each round) and poll for work every few seconds.

The venv (var/peer/flower-venv) is created on first use from bench/peer_flower/requirements.txt and
reused after; nothing of Flower's goes into Fleet's environment.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import psutil

from fleet.process import free_port
from lab.bench.peer_workload import BATCH, Workload

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "lab" / "bench" / "peer_flower"
REQUIREMENTS = APP / "requirements.txt"
VENV = Path(os.environ.get("FLEET_PEER_FLOWER_VENV", ROOT / "var" / "peer" / "flower-venv"))
STARTUP_GRACE_S = 180.0  # processes started but no fit yet: give up after this (deployment start-up)


@dataclass(frozen=True)
class FlowerArm:
    """A FedAvg configuration: local epochs over the device's 200 digits at this SGD rate."""

    label: str
    local_epochs: int
    lr: float
    mode: Literal["legacy", "deployment"] = "legacy"


def _requirements_hash() -> str:
    return hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:16]


def flower_python(venv: Path = VENV) -> Path | None:
    """The Flower venv's interpreter if that venv holds exactly requirements.txt, else None."""
    python, marker = venv / "bin" / "python", venv / ".fleet-peer-installed"
    ok = python.exists() and marker.exists() and marker.read_text().strip() == _requirements_hash()
    return python if ok else None


def ensure_flower_venv(venv: Path = VENV) -> Path:
    """Create the Flower venv on first use (pinned requirements, CPU torch) and return its python."""
    if (python := flower_python(venv)) is not None:
        return python
    if not (venv / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "-r", str(REQUIREMENTS)], check=True)
    (venv / ".fleet-peer-installed").write_text(_requirements_hash())
    return venv / "bin" / "python"


def flower_versions(python: Path) -> dict[str, str]:
    code = (
        "import importlib.metadata as m, json; "
        "print(json.dumps({p: m.version(p) for p in ('flwr', 'torch')}))"
    )
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout))


class Processes:
    """Every process of one deployment, each in its own session; ``close`` ends them and whatever they
    started (Flower detaches some children into sessions of their own), by process group and by pid."""

    def __init__(self, workdir: Path, env: dict[str, str]) -> None:
        self.workdir, self.env = workdir, env
        self.started: list[subprocess.Popen[bytes]] = []

    def spawn(self, name: str, command: list[str]) -> subprocess.Popen[bytes]:
        with (self.workdir / f"{name}.log").open("ab") as log:
            process = subprocess.Popen(
                command, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.started.append(process)
        return process

    def close(self, grace_s: float = 10.0) -> None:
        family: dict[int, psutil.Process] = {}
        for process in self.started:
            try:
                parent = psutil.Process(process.pid)
                family.update({p.pid: p for p in [parent, *parent.children(recursive=True)]})
            except psutil.NoSuchProcess:
                continue
        own = os.getpgrp()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            alive = [p for p in family.values() if _alive(p)]
            for p in alive:
                try:
                    group = os.getpgid(p.pid)
                    if group != own:
                        os.killpg(group, sig)
                    p.send_signal(sig)
                except (ProcessLookupError, psutil.NoSuchProcess, PermissionError):
                    pass
            _, still = psutil.wait_procs(alive, timeout=grace_s)
            if not still:
                break
        for process in self.started:
            if process.poll() is None:
                process.wait(timeout=5)


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait_port(port: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout:.0f} s")


def _start_legacy(
    procs: Processes, python: Path, workload: Workload, arm: FlowerArm, files: dict[str, Path]
) -> None:
    port = free_port()
    common = ["--address", f"127.0.0.1:{port}", "--workload", str(workload.root), "--fleet-root", str(ROOT)]
    procs.spawn(
        "server",
        [str(python), "-m", "fleetpeer.legacy", "server", *common, "--curve", str(files["curve"])]
        + ["--devices", str(workload.devices), "--local-epochs", str(arm.local_epochs), "--lr", str(arm.lr)]
        + ["--batch-size", str(BATCH)],
    )
    _wait_port(port)
    for i, (shard, delay) in enumerate(workload.assignment()):
        procs.spawn(
            f"client-{i:03d}",
            [str(python), "-m", "fleetpeer.legacy", "client", *common, "--fits", str(files["fits"])]
            + ["--device", str(i), "--shard", str(shard), "--delay-ms", str(delay)],
        )


def _start_deployment(
    procs: Processes, python: Path, workload: Workload, arm: FlowerArm, files: dict[str, Path]
) -> None:
    bin_dir, link = python.parent, free_port()
    home = Path(procs.env["FLWR_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "peer"\n\n[superlink.peer]\naddress = "127.0.0.1:{link}"\ninsecure = true\n'
    )
    procs.spawn(
        "superlink",
        [str(bin_dir / "flower-superlink"), "--insecure", "--port", str(link)]
        + ["--disable-runtime-dependency-installation"],
    )
    _wait_port(link)
    for i, (shard, delay) in enumerate(workload.assignment()):
        node = f"partition-id={i} shard={json.dumps(str(shard))} delay-ms={delay}"
        procs.spawn(
            f"supernode-{i:03d}",
            [str(bin_dir / "flower-supernode"), "--insecure", "--superlink", f"127.0.0.1:{link}"]
            + ["--port", str(free_port()), "--node-config", node],
        )
    config = {
        "workload-dir": str(workload.root),
        "fleet-root": str(ROOT),
        "curve": str(files["curve"]),
        "fits": str(files["fits"]),
        "devices": workload.devices,
        "local-epochs": arm.local_epochs,
        "lr": arm.lr,
        "batch-size": BATCH,
    }
    overrides = " ".join(f"{k}={json.dumps(v)}" for k, v in config.items())
    run = procs.spawn("flwr-run", [str(bin_dir / "flwr"), "run", str(APP), "peer", "--run-config", overrides])
    if run.wait(timeout=120) != 0:
        raise RuntimeError(f"flwr run failed: {(procs.workdir / 'flwr-run.log').read_text()[-2000:]}")


def _lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def run_flower_arm(
    workload: Workload,
    arm: FlowerArm,
    workdir: Path,
    *,
    python: Path,
    cap_s: float,
    stop_at: float,
    on_progress: Callable[[float, float], None] | None = None,
) -> dict[str, Any]:
    """Run FedAvg until an evaluation reaches ``stop_at`` or ``cap_s`` seconds after the first fit."""
    workdir.mkdir(parents=True, exist_ok=True)
    files = {"curve": workdir / "curve.jsonl", "fits": workdir / "fits.jsonl"}
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")},
        "PATH": f"{python.parent}{os.pathsep}{os.environ.get('PATH', '')}",  # flower-superexec & co.
        "VIRTUAL_ENV": str(python.parent.parent),
        "FLWR_HOME": str(workdir / "flwr-home"),
        "FLWR_TELEMETRY_ENABLED": "0",
        "FLWR_DISABLE_UPDATE_CHECK": "1",
    }
    if arm.mode == "legacy":
        env["PYTHONPATH"] = str(APP)
    procs = Processes(workdir, env)
    launched = time.time()
    try:
        (_start_legacy if arm.mode == "legacy" else _start_deployment)(procs, python, workload, arm, files)
        started: float | None = None
        while True:
            time.sleep(0.5)
            now, fits, curve = time.time(), _lines(files["fits"]), _lines(files["curve"])
            if started is None and fits:
                started = min(f["began"] for f in fits)
            best = max((c["accuracy"] for c in curve), default=0.0)
            if on_progress is not None and started is not None:
                on_progress(now - started, best)
            if best >= stop_at or (started is not None and now - started >= cap_s):
                break
            if started is None and now - launched > STARTUP_GRACE_S:
                raise RuntimeError(f"no Flower client trained within {STARTUP_GRACE_S:.0f} s: see {workdir}")
            if failed := [p.args[0:4] for p in procs.started if p.poll() not in (None, 0)]:
                raise RuntimeError(f"Flower processes failed: {failed}")
    finally:
        procs.close()
    fits = _lines(files["fits"])  # each fit's line is written as it ends: the first to begin may be late
    started = min((f["began"] for f in fits), default=launched)
    return _result(arm, workload, _lines(files["curve"]), fits, started, now)


def _result(
    arm: FlowerArm,
    workload: Workload,
    curve: list[dict[str, Any]],
    fits: list[dict[str, Any]],
    started: float,
    ended: float,
) -> dict[str, Any]:
    rounds = sorted({c["round"] for c in curve if c["round"] > 0})
    by_round = {c["round"]: c["at"] for c in curve}
    slowest = {
        r: max((f["ended"] - f["began"] for f in fits if f["round"] == r), default=0.0) for r in rounds
    }
    overhead = [by_round[r] - by_round[r - 1] - slowest[r] for r in rounds if r - 1 in by_round and r > 1]
    first = curve[0] if curve else {}
    return {
        "system": "flower",
        "label": arm.label,
        "mode": arm.mode,
        "local_epochs": arm.local_epochs,
        "lr": arm.lr,
        "duration_s": round(ended - started, 2),
        # (seconds since the first fit began, accuracy, loss, round); round 0 is the initial model
        "curve": [
            (round(max(0.0, c["at"] - started), 2), c["accuracy"], c["loss"], c["round"]) for c in curve
        ],
        "work_at": sorted(round(f["ended"] - started, 3) for f in fits for _ in range(f["steps"])),
        "work_unit": "local steps",
        "rounds": len(rounds),
        "round_s_p50": _median(
            [by_round[r] - by_round[r - 1] for r in rounds if r > 1 and r - 1 in by_round]
        ),
        "round_overhead_s_p50": _median(overhead),  # a round's time beyond its slowest client's training
        "init_sha256": first.get("init_sha256"),
        "init_matches_workload": first.get("init_sha256") == workload.init_sha256,
    }


def _median(values: list[float]) -> float | None:
    return round(sorted(values)[len(values) // 2], 3) if values else None
