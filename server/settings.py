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


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FLEET_", env_file=".env", extra="ignore")

    data_dir: Path = Path("var")
    database_url: str = ""  # default: sqlite:///<data_dir>/fleet.db
    enrollment_key: SecretStr | None = None  # default: generated once into <data_dir>/secrets.json
    admin_token: SecretStr | None = None

    # model and strategy
    initial_model: str | None = "mnist_cnn"  # built-in model to train when the database holds none
    strategy: Literal[
        "adabuff", "adasgd", "dynsgd", "dynsgd-clip", "fedadam", "fedavg-async", "fedbuff", "fedyogi", "ssgd"
    ] = "dynsgd-clip"  # the default chosen by issue 19's measurements (docs/results/default-search.md)
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
