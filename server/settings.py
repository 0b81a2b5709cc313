"""All coordinator settings in one typed class (environment variables FLEET_*, or a .env file)."""

from __future__ import annotations

import json
import secrets
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from profiler.defaults import TUNED_PARAMS

StrategyName = Literal[
    "adabuff", "adasgd", "audp", "dynsgd", "dynsgd-clip", "fedadam", "fedavg-async", "fedbuff", "fedyogi",
    "mapa", "sasgd", "ssgd", "twafl", "vandijk", "wkafl",
]  # fmt: skip


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FLEET_", env_file=".env", extra="ignore")

    data_dir: Path = Path("var")
    database_url: str = ""  # default: sqlite:///<data_dir>/fleet.db
    # scale-out (docs/scale-out.md): "all" is one process doing everything (the embedded default); "api"
    # workers validate and queue pushes, one "aggregator" applies them (both need PostgreSQL and Redis)
    role: Literal["all", "api", "aggregator"] = "all"
    redis_url: str = "redis://127.0.0.1:6379/0"  # where the aggregator announces new versions
    aggregator_batch: int = Field(256, ge=1)  # queued pushes applied per transaction
    aggregator_lease_seconds: float = Field(5.0, gt=0)  # a silent aggregator's lease lapses after this
    enrollment_key: SecretStr | None = None  # default: generated once into <data_dir>/secrets.json
    admin_token: SecretStr | None = None

    # model and strategy
    initial_model: str | None = "mnist_cnn"  # built-in model to train when the database holds none
    # the default chosen by issue 19's measurements (docs/results/default-search.md)
    strategy: StrategyName = "dynsgd-clip"
    learning_rate: float | None = Field(None, gt=0)  # None: the strategy's own default rate
    k: int | None = Field(None, ge=1)  # None: the strategy's own buffer size
    time_window: float | None = None
    percentile: float = Field(99.7, gt=0, le=100)
    bootstrap: int = Field(100, ge=0)
    staleness_cap: bool = True
    boost_floor: float = Field(0.1, gt=0, le=1)
    boost_scope: Literal["all", "stragglers", "none"] = "all"
    global_counts: Literal["samples", "weighted"] = "samples"
    over_selection: float = Field(1.0, ge=1)  # ssgd: tasks granted per round = ceil(k·this)
    beta1: float = Field(0.9, ge=0, lt=1)  # fedadam, fedyogi: Reddi et al.'s server moments
    beta2: float = Field(0.99, ge=0, lt=1)
    epsilon: float = Field(1e-3, gt=0)
    clip_factor: float = Field(1.0, gt=0)  # dynsgd-clip: clip each gradient to this × the recent median norm
    warmup_gradients: int = Field(200, ge=0)  # dynsgd-clip: rate ramped up over this many gradients
    # audp, mapa (issue 16): norm-Laplace noise on every device, pure ε per step (server/strategies/audp.py)
    dp_step_epsilon: float = Field(0.1, gt=0, allow_inf_nan=False)  # ε_k of every step, one for all devices
    dp_step_batch: int = Field(12, ge=1)  # b: examples per step, each clipped to G = b·ΔS/2
    dp_noise_sampler: Literal["exact", "paper"] = "exact"  # "paper" matches the paper's variance, NOT ε-DP
    tau_max: int = Field(10, ge=0)  # gradients staler than this are dropped; enters the rates
    smoothness: float = Field(10.0, gt=0)  # L, assumed
    gradient_std: float = Field(30.0, ge=0)  # σ of a per-example gradient, assumed
    l2: float = Field(0.0, ge=0)  # λ_reg, applied by the server as weight decay
    audp_clip: float = Field(3.0, gt=0, allow_inf_nan=False)  # audp: the fixed clip G
    mapa_sensitivity: float | None = Field(None, gt=0)  # mapa: ΔS₀; None: Theorem 3's from σ, b, δ
    mapa_theta: float = Field(0.5, gt=0, lt=1)  # mapa: ΔS ← θΔS per stage
    mapa_delta: float = Field(1e-3, gt=0, lt=1)  # mapa: Theorem 3's failure probability for ΔS₀
    mapa_loss_gap: float = Field(2.302585, gt=0)  # mapa: f(x₁) − f*, unknown, a hyperparameter (ln 10)
    # vandijk (issue 16): local SGD rounds of growing size, one Gaussian noise per round (vandijk.py)
    vandijk_schedule: Literal["linear", "ilogi", "constant"] = "linear"  # s_i = b + ⌈a·i⌉, b + ⌈a·z/ln z⌉, b
    vandijk_a: float = Field(1.3216, ge=0, allow_inf_nan=False)  # growth of the per-device round size
    vandijk_b: int = Field(16, ge=1)  # s_0, the first round's size per device
    vandijk_beta: float = Field(0.01, ge=0, allow_inf_nan=False)  # η̄_i = η0/(1 + β·t_i or β√t_i); 0: constant
    vandijk_decay: Literal["linear", "sqrt"] = "sqrt"  # linear: strongly convex; sqrt: convex, non-convex
    vandijk_delay_rounds: int = Field(1, ge=0)  # d: a device may run at most d rounds ahead of the barrier
    vandijk_noise_multiplier: float | None = Field(None, gt=0)  # σ per round; None: the DP policy's
    vandijk_clip: float | None = Field(None, gt=0)  # C per example; None: the DP policy's (unclipped if off)
    # wkafl (issue 17): K-async with staleness weights, momentum, cosine selection, two stages (wkafl.py)
    wkafl_alpha: float = Field(0.1, ge=0, allow_inf_nan=False)  # α: weight of the previous estimate added
    wkafl_beta: float = Field(10.0, ge=0, allow_inf_nan=False)  # β in p' = exp(β·cos)
    wkafl_sim_min: float = Field(0.3, ge=-1, le=1)  # gradients less similar to the estimate are not applied
    wkafl_clip: float = Field(100.0, gt=0, allow_inf_nan=False)  # CB: every gradient clipped to this norm
    wkafl_stage2_clip: float = Field(10.0, gt=0, allow_inf_nan=False)  # B: stage 2 clips to B·‖estimate‖
    wkafl_gamma: float = Field(0.1, ge=0, allow_inf_nan=False)  # η = η0/(γ·τ_min + 1)
    wkafl_loss_threshold: float = Field(0.3, ge=0, allow_inf_nan=False)  # ε: stage 2 at mean loss ≤ ε; 0: off
    wkafl_switch_update: int | None = Field(None, ge=0)  # or stage 2 after this many updates (the code's)
    wkafl_momentum: Literal["estimate", "aggregate"] = "estimate"  # previous ḡ (paper) or applied g (code)
    # kardam (issue 17): Byzantine filters + staleness dampening around FLEET_STRATEGY (strategies/kardam.py)
    kardam: bool = False
    kardam_f: int = Field(3, ge=0)  # f, the assumed Byzantine devices; n > 3f+1 is checked, only warned
    kardam_dampening: Literal["exp", "inverse"] = "exp"  # Λ(τ) = exp(−0.2τ) or 1/(τ+1)
    kardam_coefficient: Literal["worker", "server"] = "worker"  # K̂ vs own previous / the last accepted
    kardam_warmup: Literal["accept", "drop"] = "accept"  # no K̂ yet: frequency filter only / drop

    # controller and profiler
    size_drop: float = Field(0.0, ge=0, lt=1)
    similarity_drop: float = Field(0.0, ge=0, lt=1)
    time_slo_ms: float = Field(1000.0, gt=0)
    energy_slo: float | None = None
    min_batch: int = Field(1, ge=1)
    max_batch: int = Field(1000, ge=1)
    profiler_bootstrap: Path | None = None
    # IProf hyperparameters; default the tuned ones (profiler.defaults), a value replaces them as a whole
    profiler_params: dict[str, float | bool | str] = Field(default_factory=lambda: dict(TUNED_PARAMS))
    profiler_baseline: Literal["none", "maui"] = "none"  # "maui": alternate requests with MAUI (experiments)

    # protocol limits
    # Differential privacy (server/core/privacy.py): DP-SGD on the devices, a per-device ε budget.
    dp: bool = False
    dp_clip: float = Field(1.0, gt=0, allow_inf_nan=False)  # C: each example's gradient norm bound
    dp_noise_multiplier: float = Field(1.1, gt=0, allow_inf_nan=False)  # σ: noise std is σC
    dp_epsilon_budget: float | None = Field(8.0, gt=0, allow_inf_nan=False)  # per device; None: unenforced
    dp_delta: float | None = Field(None, gt=0, lt=1)  # None: 1/N² for a device with N examples
    dp_examples_tolerance: float = Field(2.0, ge=1, allow_inf_nan=False)  # N may change by this factor
    lease_seconds: float = Field(60.0, gt=0)
    max_gradient_norm: float = Field(1e4, gt=0)
    max_body_bytes: int = Field(16 * 1024 * 1024, gt=0)
    version_retention: int = Field(200, ge=1)
    rate_limit_per_second: float = Field(10.0, gt=0)
    rate_limit_burst: int = Field(30, ge=1)
    enroll_rate_per_second: float = Field(10.0, gt=0)  # per client address
    enroll_burst: int = Field(250, ge=1)  # a 200-device fleet behind one address enrolls at once

    # evaluation and stop criterion
    eval_data: Path | None = None  # npz with x (N, ...) and y (N,)
    eval_every_versions: int = Field(50, ge=1)
    eval_interval_s: float = Field(5.0, gt=0)
    target_accuracy: float | None = None
    max_versions: int | None = None

    # admin web console (/admin); FLEET_CONSOLE=false serves none of it and training is unaffected
    console: bool = True
    console_user: str | None = None  # first-run user, created when the database has no console user
    console_password: SecretStr | None = None
    console_session_hours: float = Field(12.0, gt=0)
    login_rate_per_minute: float = Field(6.0, gt=0)  # wrong or right, per client address and per username
    login_burst: int = Field(5, ge=1)

    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir / 'fleet.db'}"

    def secrets(self) -> tuple[str, str]:
        """(enrollment key, admin token): from the environment, else generated once and kept private."""
        path = self.data_dir / "secrets.json"
        stored: dict[str, str] = json.loads(path.read_text()) if path.exists() else {}
        enrollment = (
            self.enrollment_key.get_secret_value() if self.enrollment_key else stored.get("enrollment_key")
        )
        admin = self.admin_token.get_secret_value() if self.admin_token else stored.get("admin_token")
        if enrollment is None or admin is None:
            enrollment = enrollment or secrets.token_urlsafe(24)
            admin = admin or secrets.token_urlsafe(24)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch(mode=0o600)
            path.write_text(json.dumps({"enrollment_key": enrollment, "admin_token": admin}))
        return enrollment, admin


@lru_cache
def get_settings() -> Settings:
    return Settings()


# What the console may change while training runs (applied by server/compose.py's apply_settings), by page
# section; strategy fields are shown only when the running strategy takes them.
LIVE_SETTINGS: dict[str, tuple[str, ...]] = {
    "Learning": (
        "strategy", "learning_rate", "k", "time_window", "percentile", "bootstrap", "staleness_cap",
        "boost_floor", "boost_scope", "global_counts", "over_selection", "beta1", "beta2", "epsilon",
        "clip_factor", "warmup_gradients", "dp_step_epsilon", "dp_step_batch", "dp_noise_sampler", "tau_max",
        "smoothness", "gradient_std", "l2", "audp_clip", "mapa_sensitivity", "mapa_theta", "mapa_delta",
        "mapa_loss_gap", "vandijk_schedule", "vandijk_a", "vandijk_b", "vandijk_beta", "vandijk_decay",
        "vandijk_delay_rounds", "vandijk_noise_multiplier", "vandijk_clip", "wkafl_alpha", "wkafl_beta",
        "wkafl_sim_min", "wkafl_clip", "wkafl_stage2_clip", "wkafl_gamma", "wkafl_loss_threshold",
        "wkafl_switch_update", "wkafl_momentum",
    ),
    "SLOs and batch limits": ("time_slo_ms", "energy_slo", "min_batch", "max_batch"),
    "Controller": ("size_drop", "similarity_drop"),
    "Protocol limits": (
        "lease_seconds", "max_gradient_norm", "rate_limit_per_second", "rate_limit_burst",
        "enroll_rate_per_second", "enroll_burst",
    ),
}  # fmt: skip


def with_overrides(settings: Settings, overrides: dict[str, object]) -> Settings:
    """``settings`` with ``overrides`` applied, validated as a whole (raises pydantic's ValidationError).

    ``model_validate`` does not read the environment again: only the given values change."""
    unknown = set(overrides) - {name for names in LIVE_SETTINGS.values() for name in names}
    if unknown:
        raise ValueError(f"not settable at run time: {sorted(unknown)}")
    merged = Settings.model_validate({**settings.model_dump(), **overrides})
    if merged.min_batch > merged.max_batch:
        raise ValueError(f"min_batch ({merged.min_batch}) must not exceed max_batch ({merged.max_batch})")
    return merged
