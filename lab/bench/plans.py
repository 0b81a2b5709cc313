"""The benchmarks' plans: every setting that differs between a quick and a full run, as data.

Only dataclasses here (no measurement code, nothing heavy to import): the registry and the tests read
them without loading torch, Ray or schemathesis. Each benchmark module reads its fields; none branches
on ``quick`` (that flag only names the files: NAME-quick.*).
"""

from __future__ import annotations

from dataclasses import dataclass

from lab.contract import Plan

# ── the performance table's sections (lab/bench/__init__.py's BENCHMARKS) ────────────────────────────


@dataclass(frozen=True)
class GradientPlan:
    rounds: int = 7  # interleaved rounds of both computations
    repeats: int = 40  # timed calls per round


@dataclass(frozen=True)
class ThroughputPlan:
    math_updates: int = 2000
    core_tasks: int = 500
    app_devices: int = 50
    app_cycles: int = 10
    load_seconds: float = 15.0


@dataclass(frozen=True)
class MemoryPlan:
    worker_tasks: int = 100


@dataclass(frozen=True)
class WirePlan:
    tasks: int = 20


@dataclass(frozen=True)
class ProfilerPlan:
    requests: int = 5000


@dataclass(frozen=True)
class SimulatorPlan:
    events: int = 20_000


@dataclass(frozen=True, kw_only=True)
class PerformancePlan(Plan):
    """`python -m lab run performance`: which sections, and each one's settings."""

    benchmarks: tuple[str, ...] = ("gradient", "throughput", "memory", "wire", "profiler", "simulator")
    gradient: GradientPlan = GradientPlan()
    throughput: ThroughputPlan = ThroughputPlan()
    memory: MemoryPlan = MemoryPlan()
    wire: WirePlan = WirePlan()
    profiler: ProfilerPlan = ProfilerPlan()
    simulator: SimulatorPlan = SimulatorPlan()


PERFORMANCE_QUICK = PerformancePlan(
    quick=True,
    gradient=GradientPlan(rounds=2, repeats=10),
    throughput=ThroughputPlan(
        math_updates=200, core_tasks=50, app_devices=20, app_cycles=3, load_seconds=3.0
    ),
    memory=MemoryPlan(worker_tasks=20),
    wire=WirePlan(tasks=5),
    profiler=ProfilerPlan(requests=1000),
    simulator=SimulatorPlan(events=300),
)
PERFORMANCE_FULL = PerformancePlan()

# ── the benchmarks with reports of their own ─────────────────────────────────────────────────────────


@dataclass(frozen=True, kw_only=True)
class DpPlan(Plan):
    """`python -m lab run dp`: DP-SGD's clipped sum against the plain gradient."""

    rounds: int = 7
    repeats: int = 40


DP_QUICK, DP_FULL = DpPlan(quick=True, rounds=2, repeats=5), DpPlan()


@dataclass(frozen=True, kw_only=True)
class ConsolePlan(Plan):
    """`python -m lab run console`: the console's pages on a filled database."""

    devices: int = 1000
    tasks: int = 10_000
    repeats: int = 30


CONSOLE_QUICK, CONSOLE_FULL = ConsolePlan(quick=True, devices=50, tasks=300, repeats=3), ConsolePlan()


@dataclass(frozen=True, kw_only=True)
class FuzzPlan(Plan):
    """`python -m lab run fuzz`: schemathesis per operation, on SQLite and (full) PostgreSQL."""

    max_examples: int = 400
    stateful: bool = True
    postgresql: bool = True  # also fuzz a fresh PostgreSQL database when the server is reachable


FUZZ_QUICK = FuzzPlan(quick=True, max_examples=5, stateful=False, postgresql=False)
FUZZ_FULL = FuzzPlan()


@dataclass(frozen=True, kw_only=True)
class SoakPlan(Plan):
    """`python -m lab run soak`: devices × seconds against one coordinator."""

    devices: int = 200
    seconds: float = 600.0
    # RSS "start" is read once the bounded caches have filled: the answered-lease window (10,000
    # leases, ~2 min at ~90 pushes/s), recent parameter versions, rate-limit buckets
    warm_up_s: float = 150.0
    plot: bool = True  # reliability-soak.png, the RSS over the soak


SOAK_QUICK = SoakPlan(quick=True, devices=10, seconds=10.0, warm_up_s=2.0, plot=False)
SOAK_FULL = SoakPlan()


@dataclass(frozen=True, kw_only=True)
class ChaosPlan(Plan):
    """`python -m lab run chaos`: kills and outages under load."""

    devices: int = 100
    seconds: float = 120.0
    kills: int = 5
    outages: int = 3
    outage_s: float = 5.0


CHAOS_QUICK, CHAOS_FULL = ChaosPlan(quick=True, devices=20, seconds=20.0), ChaosPlan()


@dataclass(frozen=True, kw_only=True)
class ScaleOutPlan(Plan):
    """`python -m lab run scale-out`: the topology curve, then the aggregator alone."""

    seconds: float = 15.0
    models: tuple[str, ...] = ("mnist_cnn", "mlp")
    device_counts: tuple[int, ...] = (50, 200)
    worker_counts: tuple[int, ...] = (1, 2, 4)
    aggregator_updates: int = 6000


SCALE_OUT_QUICK = ScaleOutPlan(
    quick=True, seconds=3.0, models=("mnist_cnn",), device_counts=(20,), worker_counts=(1, 2),
    aggregator_updates=300,
)  # fmt: skip
SCALE_OUT_FULL = ScaleOutPlan()


@dataclass(frozen=True, kw_only=True)
class RayPlan(Plan):
    """`python -m lab run ray`: one large run on Ray, then the speed-up runs (1 and 2 workers, repeated)."""

    large: str = "large"  # ray_sim.py's run settings by name: "large", "small" or "quick"
    small: str = "small"
    speedup_workers: tuple[int, ...] = (1, 2, 1, 2)


RAY_QUICK = RayPlan(quick=True, large="quick", small="quick", speedup_workers=(1, 2))
RAY_FULL = RayPlan()


@dataclass(frozen=True, kw_only=True)
class BrowserPlan(Plan):
    """`python -m lab run browser`: the browser device (/device/) in chromium, at phone size."""

    devices: int = 5  # phone profiles training together to the target
    target: float = 0.80
    cap_s: float = 300.0  # time to the target is censored here
    max_batch: int = 64  # the training run's coordinator (as tests/test_browser_device.py's)
    # None: the default strategy at its own rate, what a deployment runs (the tests train at 0.1). IID: a
    # person teaching the page draws every digit
    learning_rate: float | None = None
    gradient_batch: int = 64  # real digits for the browser-vs-Python gradient
    gradient_repeats: int = 5
    slo_ms: float = 500.0  # the frame-gap phase: one phone alone, the coordinator's batch at this SLO
    slo_max_batch: int = 4000  # high enough that the SLO, not the cap, sets the batch
    slo_examples: int = 4000  # the digits that phone holds
    slo_warmup_tasks: int = 5  # tasks before frames are counted (I-Prof finds the batch)
    slo_seconds: float = 40.0


BROWSER_QUICK = BrowserPlan(
    quick=True,
    devices=3,
    cap_s=150.0,
    gradient_repeats=2,
    slo_examples=2000,
    slo_warmup_tasks=3,
    slo_seconds=10.0,
)
BROWSER_FULL = BrowserPlan()
