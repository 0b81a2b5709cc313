"""`make demo`: a coordinator process and a fleet of emulated phones training over loopback HTTP.

Each device is a real worker (its own identity, token and non-IID shard) running in a thread of this
process and talking HTTP to a separate `fleet serve` process. Phones of different speeds are
emulated by stretching each task's real compute time to 1-7 ms per sample (a 7x spread), so I-Prof
must learn per device model how many samples fit in the 1 s time SLO.
"""

from __future__ import annotations

import json
import logging
import os
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
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from fleet import demo_phones
from fleet.demo_dp import DPPlan, dp_verdict, plan_dp
from fleet.demo_summary import privacy_table, summary_table
from server.strategies import RECOMMENDED_DEFENCE

# Five phone classes, slowest to fastest; ms per sample spans the S6 → S10 7x spread of the thesis.
# --robust: the recommended robust configuration (server/strategies/__init__.py), trusted-score on
# TRUSTED_SAMPLES training digits the server holds
ROBUST: tuple[dict[str, Any], ...] = RECOMMENDED_DEFENCE
ROBUST_NAME = (
    "each push held to its claimed labels and each device's output rows to the trusted digits' (and, as the"
    " fleet settles, to their class templates), FLTrust by"
    " each device's standing against the trusted digits of its labels, layer by layer, and a per-parameter"
    " bound from the trusted gradients"
)
TRUSTED_SAMPLES = 64
PHONES = (("Galaxy S6", 7.0), ("Galaxy S7", 4.6), ("Galaxy S8", 3.0), ("Galaxy S9", 1.8), ("Galaxy S10", 1.0))


@dataclass(frozen=True)
class DemoConfig:
    devices: int = 20
    minutes: float = 3.0
    model: str = "mnist_cnn"
    target: float = 0.92
    port: int = 8765
    workdir: Path = Path("var/demo")
    learning_rate: float | None = None  # None: the strategy's own default rate, untuned
    strategy: str | None = None  # None: Fleet's default strategy
    seed: int = 0
    time_slo_ms: float = 1000.0
    linger: float | None = None  # after the run, keep the coordinator up this long (None: until Ctrl-C)
    dp_epsilon: float | None = None  # DP-SGD on every phone with this ε budget per device (None: off)
    dp_tasks: int | None = None  # σ is calibrated so that this many tasks spend the budget (None: DP_TASKS)
    dp_batch: int | None = None  # B granted under DP (None: DP_BATCH)
    attackers: int = (
        0  # the first this many phones are Byzantine (client/_attacks/), to show a defence at work
    )
    attack: str = "sign-flip"
    kardam: bool = False  # FLEET_KARDAM: Kardam's filters around the strategy (server/strategies/kardam.py)
    robust: bool = False  # the recommended robust configuration (ROBUST below), on trusted.npz
    phones: bool = False  # real phones join by a QR code (fleet/demo_phones.py); training goes on past target

    def __post_init__(self) -> None:
        if not 0 <= self.attackers <= self.devices:
            raise ValueError(
                f"attackers must be between 0 and devices ({self.devices}), got {self.attackers}"
            )
        from client._attacks import ATTACKS

        if self.attack not in ATTACKS:
            raise ValueError(f"unknown attack {self.attack!r}; known: {list(ATTACKS)}")


def dp_plan(cfg: DemoConfig, local_examples: int) -> DPPlan | None:
    """The DP run's terms (fleet/demo_dp.py), None without DP: σ calibrated so that ``dp_tasks`` tasks at
    B = ``dp_batch`` spend exactly the budget."""
    if cfg.dp_epsilon is None:
        return None
    return plan_dp(
        cfg.dp_epsilon,
        local_examples,
        tasks=cfg.dp_tasks,
        batch=cfg.dp_batch,
        learning_rate=cfg.learning_rate,
        default_strategy=cfg.strategy is None,
    )


def dp_settings(plan: DPPlan | None) -> dict[str, str]:
    """FLEET_* settings for a DP run: the budget, σ, the batch pinned to B (q is the plan's) and the rate."""
    if plan is None:
        return {}
    return {
        "FLEET_DP": "true",
        "FLEET_DP_EPSILON_BUDGET": str(plan.epsilon),
        "FLEET_DP_NOISE_MULTIPLIER": f"{plan.sigma:.6f}",
        "FLEET_MIN_BATCH": str(plan.batch),
        "FLEET_MAX_BATCH": str(plan.batch),
        **({"FLEET_LEARNING_RATE": str(plan.learning_rate)} if plan.learning_rate is not None else {}),
    }


def _server_env(
    cfg: DemoConfig, enrollment_key: str, admin_token: str, console_password: str
) -> dict[str, str]:
    return {
        **os.environ,
        "FLEET_CONSOLE_USER": "admin",
        "FLEET_CONSOLE_PASSWORD": console_password,
        "FLEET_DATA_DIR": str(cfg.workdir),
        "FLEET_DATABASE_URL": f"sqlite:///{cfg.workdir / 'fleet.db'}",
        "FLEET_ENROLLMENT_KEY": enrollment_key,
        "FLEET_ADMIN_TOKEN": admin_token,
        "FLEET_INITIAL_MODEL": cfg.model,
        **({"FLEET_LEARNING_RATE": str(cfg.learning_rate)} if cfg.learning_rate else {}),
        **({"FLEET_STRATEGY": cfg.strategy} if cfg.strategy else {}),
        "FLEET_TIME_SLO_MS": str(cfg.time_slo_ms),
        "FLEET_EVAL_DATA": str(cfg.workdir / "data" / "test.npz"),
        "FLEET_EVAL_EVERY_VERSIONS": "25",
        "FLEET_EVAL_INTERVAL_S": "2",
        **({} if cfg.phones else {"FLEET_TARGET_ACCURACY": str(cfg.target)}),  # --phones: trains on
        **({"FLEET_KARDAM": "true"} if cfg.kardam else {}),
        **(
            {"FLEET_WRAPPERS": json.dumps([robust_wrapper(w, trusted_path(cfg)) for w in ROBUST])}
            if cfg.robust
            else {}
        ),
    }


def robust_wrapper(config: dict[str, Any], trusted: Path) -> dict[str, Any]:
    """One FLEET_WRAPPERS entry of the robust configuration: trusted-score gets the server's digits."""
    return {**config, "data": str(trusted)} if config["name"] == "trusted-score" else dict(config)


def trusted_path(cfg: DemoConfig) -> Path:
    """The server's trusted samples under --robust: training digits no phone holds (sim/data.py)."""
    return cfg.workdir / "data" / "trusted.npz"


def worker_configs(cfg: DemoConfig, shards: list[Path], base: str, enrollment_key: str) -> list[Any]:
    """One phone per shard: phone classes dealt in turn, the first ``cfg.attackers`` running the attack."""
    from client import DevicePrivacy, WorkerConfig

    own = DevicePrivacy(budget=cfg.dp_epsilon)  # the phones' own ledgers (in memory) take the demo's budget
    configs = []
    for i, shard in enumerate(shards):
        phone, ms = PHONES[i % len(PHONES)]
        configs.append(
            WorkerConfig(
                base_url=base,
                enrollment_key=enrollment_key,
                data=shard,
                device_model=phone,
                min_ms_per_sample=ms,
                seed=cfg.seed * 1000 + i,
                max_seconds=cfg.minutes * 60,
                attack=cfg.attack if i < cfg.attackers else None,  # type: ignore[arg-type]
                privacy=own,
            )
        )
    return configs


def _wait_ready(base: str, process: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"coordinator exited with code {process.returncode}")
        try:
            if httpx.get(f"{base}/v1/ready", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError("coordinator did not become ready")


def run_demo(cfg: DemoConfig) -> int:
    """Run the demo; returns the process exit code (0 when 0.90 accuracy was reached)."""
    from client import DeviceData, Worker
    from sim.data import write_shards

    console = Console()
    if cfg.workdir.exists():
        shutil.rmtree(cfg.workdir)
    console.print(
        f"[bold]Fleet demo[/]: {cfg.devices} emulated phones, non-IID MNIST, {cfg.model}, "
        f"time SLO {cfg.time_slo_ms:.0f} ms"
    )
    trusted = TRUSTED_SAMPLES if cfg.robust else 0
    shards, _ = write_shards(
        cfg.workdir / "data", devices=cfg.devices, partition="sorted", seed=cfg.seed, trusted=trusted
    )
    plan = dp_plan(cfg, min(len(DeviceData.from_npz(s)) for s in shards))
    dp_env = dp_settings(plan)
    if plan is not None:
        from fleet_protocol.accounting import keep_compositions

        keep_compositions(2 * cfg.devices + 8)  # the phones' ledgers compose one step per task, not T
        console.print("Differential privacy: DP-SGD on every phone. " + plan.describe(cfg.target))
    if cfg.attackers or cfg.kardam or cfg.robust:
        defence = "Kardam's filters" if cfg.kardam else "none"
        if cfg.robust:
            defence = (
                f"the recommended robust configuration ({ROBUST_NAME}, {TRUSTED_SAMPLES} trusted digits)"
            )
        console.print(
            f"Byzantine: {cfg.attackers} of {cfg.devices} phones run the {cfg.attack} attack; "
            f"defence: {defence}"
        )
    enrollment_key, admin_token = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
    console_password = secrets.token_urlsafe(12)
    base = f"http://127.0.0.1:{cfg.port}"
    public = demo_phones.public_url(cfg.port, console) if cfg.phones else None
    host = demo_phones.ANY_ADDRESS if cfg.phones else "127.0.0.1"
    login = f"console: [link]{base}/admin[/link]  user [bold]admin[/]  password [bold]{console_password}[/]"
    log = (cfg.workdir / "server.log").open("wb")
    device_log = logging.FileHandler(cfg.workdir / "devices.log")
    device_log.setFormatter(logging.Formatter("%(asctime)s %(threadName)s %(levelname)s %(message)s"))
    client_logger = logging.getLogger("fleet.client")
    client_logger.addHandler(device_log)
    client_logger.propagate = False  # keep device retries out of the progress display
    env = {**_server_env(cfg, enrollment_key, admin_token, console_password), **dp_env}
    if public is not None:
        env.pop("FLEET_TARGET_ACCURACY", None)  # the emulated phones stop at the target, training does not
        env["FLEET_PUBLIC_URL"] = public
    server = subprocess.Popen(
        [sys.executable, "-m", "fleet.cli", "serve", "--host", host, "--port", str(cfg.port)]
        + ["--log-level", "warning"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    stop = threading.Event()
    tasks = [0]
    try:
        _wait_ready(base, server)
        console.print("Watch it live in the " + login)
        joined = demo_phones.create_join_code(base, admin_token) if cfg.phones else None
        if joined is not None:
            demo_phones.show_join(console, joined)
        else:
            console.print(demo_phones.HINT)
        started = time.monotonic()  # training starts now: the times reported exclude the server's start-up
        threads, workers = [], []
        for i, config in enumerate(worker_configs(cfg, shards, base, enrollment_key)):
            worker = Worker(config, on_report=lambda _r: tasks.__setitem__(0, tasks[0] + 1))
            workers.append(worker)
            thread = threading.Thread(target=worker.run, args=(stop,), name=f"device-{i}", daemon=True)
            threads.append(thread)
            thread.start()
        reached = _watch(console, base, admin_token, cfg, started, threads)
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
        headers = {"Authorization": f"Bearer {admin_token}"}
        time.sleep(0.5)
        stats = httpx.get(f"{base}/v1/admin/stats", headers=headers, timeout=10).json()
        evaluations = httpx.get(f"{base}/v1/admin/evaluations", headers=headers, timeout=10).json()
        console.print(summary_table(stats, evaluations, time.monotonic() - started, reached, tasks[0]))
        if plan is not None:
            privacy = httpx.get(f"{base}/v1/admin/privacy", headers=headers, timeout=30).json()
            names = {w.device_id: w.config.device_model for w in workers if w.device_id}
            console.print(privacy_table(privacy, names))
            verdict = dp_verdict(plan, stats["accuracy"], cfg.target, privacy["exhausted"], cfg.devices)
            if verdict:
                console.print(f"[bold]{verdict}[/]")
        console.print(f"Logs: {cfg.workdir / 'server.log'}, {cfg.workdir / 'devices.log'}")
        if joined is not None:
            console.print(f"Phones can still join while the coordinator stays up: {joined['url']}")
        _linger(console, cfg, login)
        return 0 if reached is not None or dp_env else 1  # under DP: whatever accuracy the budget allows
    finally:
        stop.set()
        stop_server(server)
        log.close()


def stop_server(server: subprocess.Popen[bytes]) -> None:
    """Ask the coordinator process to stop; kill it if it has not within 15 s."""
    server.terminate()
    try:
        server.wait(timeout=15)
    except subprocess.TimeoutExpired:
        server.kill()


def _linger(console: Console, cfg: DemoConfig, login: str) -> None:
    """Keep the coordinator up so the run can be looked at in the console: ``cfg.linger`` seconds, or
    until Ctrl-C when a person is at the terminal (no wait when nobody is, e.g. under CI)."""
    seconds = cfg.linger if cfg.linger is not None else (float("inf") if sys.stdin.isatty() else 0.0)
    if seconds <= 0:
        return
    until = "Ctrl-C" if seconds == float("inf") else f"{seconds:.0f} s or Ctrl-C"
    console.print(f"The coordinator stays up ({until}) — the {login}")
    try:
        time.sleep(seconds if seconds != float("inf") else 10**9)
    except KeyboardInterrupt:
        console.print("stopping the coordinator")


def _watch(
    console: Console,
    base: str,
    admin_token: str,
    cfg: DemoConfig,
    started: float,
    threads: list[threading.Thread],
) -> float | None:
    """Live progress until the target, the time limit, or every device stopped; returns time to 0.90. With
    --phones the coordinator has no target: the emulated phones stop when the evaluation reaches it."""
    headers = {"Authorization": f"Bearer {admin_token}"}
    reached = None
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[line]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console) as progress:
        bar = progress.add_task("accuracy", total=cfg.target, line="starting")
        while time.monotonic() - started < cfg.minutes * 60 + 5 and any(t.is_alive() for t in threads):
            time.sleep(0.5)
            try:
                stats = httpx.get(f"{base}/v1/admin/stats", headers=headers, timeout=5).json()
            except httpx.HTTPError:
                continue
            accuracy = stats["accuracy"] or 0.0
            if reached is None and accuracy >= 0.90:
                reached = time.monotonic() - started
            progress.update(
                bar,
                completed=min(accuracy, cfg.target),
                line=(
                    f"acc {accuracy:.3f} · v{stats['version']} · τ p50 {stats['staleness_p50']:.0f} "
                    f"p99 {stats['staleness_p99']:.0f} · L p50 {stats['batch_size_p50']:.0f} · "
                    f"{stats['status']}"
                ),
            )
            if stats["status"] == "finished" or _budgets_spent(base, headers, cfg):
                break
            if cfg.phones and accuracy >= cfg.target:
                break
    return reached


def _budgets_spent(base: str, headers: dict[str, str], cfg: DemoConfig) -> bool:
    """Under DP: every phone has spent its privacy budget, so no more learning can happen."""
    if cfg.dp_epsilon is None:
        return False
    try:
        privacy = httpx.get(f"{base}/v1/admin/privacy", headers=headers, timeout=5).json()
    except httpx.HTTPError:
        return False
    return privacy["exhausted"] >= cfg.devices


def main() -> None:  # pragma: no cover - `python -m fleet.demo`
    raise SystemExit(run_demo(DemoConfig()))


if __name__ == "__main__":
    main()
