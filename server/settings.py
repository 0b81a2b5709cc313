"""All coordinator settings in one typed class (environment variables FLEET_*, or a .env file).

The strategy and the wrappers around it are typed configurations declared next to each strategy and
wrapper (server/strategies/): ``strategy`` is the discriminated union of the registry's strategy settings,
``wrappers`` a list of the wrappers' settings, applied in order (the first innermost). docs/configuration.md
is generated from this module (``python -m server.settings_docs``).

Environment variables, old and new (``fold_flat`` maps the old flat names onto the structure):

* ``FLEET_STRATEGY=adasgd`` (a name) or ``FLEET_STRATEGY='{"name": "adasgd", "percentile": 99}'`` (JSON);
  a field of the strategy: ``FLEET_STRATEGY__PERCENTILE=99`` or the flat ``FLEET_PERCENTILE=99``. Flat
  fields the chosen strategy does not take are ignored, as before; a field given both ways takes the
  nested value.
* ``FLEET_WRAPPERS='[{"name": "kardam", "f": 2}, "loss-guard"]'`` (JSON) or
  ``FLEET_WRAPPERS=clip-norm,warm-up`` (names, default settings); the old ``FLEET_KARDAM=true`` (and
  ``FLEET_KARDAM_F`` ...) adds a kardam entry outermost (or sets the fields of the one listed),
  ``FLEET_KARDAM=false`` removes it.
* ``Settings(strategy="adasgd", learning_rate=0.1, kardam=True)`` works the same way.
"""

from __future__ import annotations

import json
import secrets
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, SecretStr, TypeAdapter, model_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from fleet_protocol.accounting import DEFAULT_DELTA
from profiler.defaults import TUNED_PARAMS
from server.settings_enrollment import EnrollmentSettings
from server.settings_health import HealthSettings
from server.settings_rules import refusals
from server.settings_sections import LIVE_SETTINGS as LIVE_SETTINGS  # re-exported: one list
from server.settings_sections import SECTIONS as SECTIONS
from server.settings_security import SecuritySettings
from server.strategies import DEFAULT_STRATEGY, STRATEGIES, WRAPPERS, settings_union
from server.strategies.wrappers import WrapperSettings

StrategyConfig = settings_union(STRATEGIES)  # one model per strategy, told apart by "name"
WrapperConfig = settings_union(WRAPPERS)


def strategy_keys() -> set[str]:
    """The old flat names of the strategies' fields (FLEET_LEARNING_RATE, FLEET_PERCENTILE, ...)."""
    return {key for cls in STRATEGIES.values() for key in cls.settings.model_fields if key != "name"}


def legacy_wrappers() -> dict[str, type[WrapperSettings]]:
    """Wrappers with an old flat switch (``kardam``: FLEET_KARDAM, FLEET_KARDAM_F, ...), by switch."""
    return {cls.settings.legacy: cls.settings for cls in WRAPPERS.values() if cls.settings.legacy}


def flat_keys() -> set[str]:
    """Every old flat name ``fold_flat`` maps onto ``strategy`` and ``wrappers``."""
    keys = strategy_keys()
    for switch, model in legacy_wrappers().items():
        keys |= {switch} | {f"{switch}_{field}" for field in model.model_fields if field != "name"}
    return keys


def _as_dict(value: Any) -> dict[str, Any]:
    """A config given as a model (only the fields that were set), a dict, a name or a JSON object."""
    if isinstance(value, BaseModel):
        return {"name": value.name, **value.model_dump(exclude_unset=True)}
    if isinstance(value, str):
        text = value.strip()
        return dict(json.loads(text)) if text.startswith("{") else {"name": text}
    return dict(value)


def _as_list(value: Any) -> list[Any]:
    """Wrappers given as a list, a JSON list or comma-separated names."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return list(json.loads(text))
        return [name.strip() for name in text.split(",") if name.strip()]
    return list(value or [])


def fold_flat(data: dict[str, Any]) -> dict[str, Any]:
    """Settings values with the old flat names moved into ``strategy`` and ``wrappers`` (see the module
    docstring); a value given in the structure wins over the same one given flat."""
    data = dict(data)
    flat = {key: data.pop(key) for key in list(data) if key in strategy_keys()}
    if "strategy" in data or flat:
        strategy = _as_dict(data.get("strategy") or {})
        strategy.setdefault("name", DEFAULT_STRATEGY)
        cls = STRATEGIES.get(strategy["name"])
        taken = set(cls.settings.model_fields) if cls is not None else set()
        data["strategy"] = {**{k: v for k, v in flat.items() if k in taken}, **strategy}
    if "wrappers" in data:
        data["wrappers"] = [_as_dict(item) for item in _as_list(data["wrappers"])]
    for switch, model in legacy_wrappers().items():
        name = model.model_fields["name"].default
        on = data.pop(switch, None)
        prefix = f"{switch}_"
        fields = {
            key[len(prefix) :]: data.pop(key)
            for key in list(data)
            if key.startswith(prefix) and key[len(prefix) :] in model.model_fields and key != f"{prefix}name"
        }
        if on is None and not fields:
            continue
        wrappers = [_as_dict(item) for item in _as_list(data.get("wrappers"))]
        listed = [i for i, item in enumerate(wrappers) if item.get("name") == name]
        if on is not None and not TypeAdapter(bool).validate_python(on):
            wrappers = [item for item in wrappers if item.get("name") != name]
        elif listed:
            for i in listed:
                wrappers[i] = {**fields, **wrappers[i]}
        elif on is not None:
            wrappers.append({"name": name, **fields})
        data["wrappers"] = wrappers
    return data


class FlatEnvironment(PydanticBaseSettingsSource):
    """The old flat variables (FLEET_PERCENTILE, FLEET_KARDAM_F, ...) and the nested strategy fields
    (FLEET_STRATEGY__PERCENTILE) from the environment and the .env file, as flat values for ``fold_flat``."""

    def __init__(self, settings_cls: type[BaseSettings], *sources: EnvSettingsSource) -> None:
        super().__init__(settings_cls)
        self.sources = sources  # highest priority first

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ reads the variables itself

    def __call__(self) -> dict[str, Any]:
        prefix = str(self.config.get("env_prefix", "")).lower()
        values: dict[str, Any] = {}
        for source in reversed(self.sources):
            variables = {str(k).lower(): v for k, v in source.env_vars.items()}
            nested = strategy_keys()
            for key in flat_keys():
                names = (
                    (f"{prefix}{key}", f"{prefix}strategy__{key}") if key in nested else (f"{prefix}{key}",)
                )
                for name in names:  # the nested one wins
                    if variables.get(name) is not None:
                        values[key] = variables[name]
        return values


class Settings(BaseSettings, SecuritySettings, HealthSettings, EnrollmentSettings):  # + settings_*.py
    model_config = SettingsConfigDict(
        env_prefix="FLEET_", env_file=".env", extra="ignore", env_nested_delimiter="__", allow_inf_nan=False
    )  # every number finite: an inf limit is no limit (issue 29)

    # deployment
    data_dir: Path = Field(Path("var"), description="where the SQLite database and the secrets file live")
    database_url: str = Field("", description="SQLAlchemy URL; empty: sqlite:///<data_dir>/fleet.db")
    role: Literal["all", "api", "aggregator"] = Field(
        "all",
        description="scale-out (docs/scale-out.md): one process doing everything, or an API worker that "
        "validates and queues pushes, or the aggregator that applies them (both need PostgreSQL and Redis)",
    )
    redis_url: str = Field(
        "redis://127.0.0.1:6379/0", description="where the aggregator announces new versions"
    )
    aggregator_batch: int = Field(
        256, ge=1, le=100_000, description="queued pushes the aggregator applies per transaction"
    )
    aggregator_lease_seconds: float = Field(
        5.0, gt=0, le=3600, description="a silent aggregator's lease lapses after this"
    )
    enrollment_key: SecretStr | None = Field(
        None, description="the devices' enrollment key; unset: generated once into <data_dir>/secrets.json"
    )
    admin_token: SecretStr | None = Field(
        None, description="the REST API's admin token; unset: generated once into <data_dir>/secrets.json"
    )

    # model, strategy and wrappers
    initial_model: str | None = Field(
        "mnist_cnn", description="built-in model trained when the database holds none"
    )
    strategy: Annotated[StrategyConfig, NoDecode] = Field(
        STRATEGIES[DEFAULT_STRATEGY].settings(),
        description="the aggregation strategy: a name, or its settings (JSON, or FLEET_STRATEGY__<FIELD>)",
    )
    wrappers: Annotated[list[WrapperConfig], NoDecode] = Field(
        default_factory=list,
        description="wrappers around the strategy, the first innermost: a JSON list of settings, or names",
    )

    # controller and profiler
    size_drop: float = Field(
        0.0, ge=0, lt=1, description="the controller refuses this share of the smallest tasks"
    )
    similarity_drop: float = Field(
        0.0, ge=0, lt=1, description="the controller refuses this share of the most label-redundant tasks"
    )
    time_slo_ms: float = Field(
        1000.0, gt=0, le=3_600_000, description="I-Prof's target computation time per task (ms)"
    )
    energy_slo: float | None = Field(
        None, gt=0, le=100, description="I-Prof's target energy per task (battery %); unset: none"
    )
    min_batch: int = Field(1, ge=1, le=1_000_000, description="the smallest mini-batch a task is granted")
    max_batch: int = Field(1000, ge=1, le=1_000_000, description="the largest mini-batch a task is granted")
    profiler_bootstrap: Path | None = Field(
        None, description="I-Prof's cold-start measurements (JSON); unset: its built-in prior"
    )
    profiler_params: dict[str, float | bool | str] = Field(
        default_factory=lambda: dict(TUNED_PARAMS),
        description="I-Prof's hyperparameters (JSON); a value replaces the tuned ones (profiler.defaults)",
    )
    profiler_baseline: Literal["none", "maui"] = Field(
        "none", description='"maui": alternate task requests between I-Prof and MAUI (experiments)'
    )

    # differential privacy (server/core/privacy.py): DP-SGD on the devices, a per-device ε budget
    dp: bool = Field(False, description="DP-SGD on the devices and a per-device ε budget")
    dp_clip: float = Field(
        1.0, gt=0, allow_inf_nan=False, description="C: each example's gradient norm bound"
    )
    dp_noise_multiplier: float = Field(1.1, gt=0, allow_inf_nan=False, description="σ: the noise std is σ·C")
    dp_epsilon_budget: float | None = Field(
        8.0, gt=0, allow_inf_nan=False, description="ε per device; unset: counted, not enforced"
    )
    dp_delta: float = Field(DEFAULT_DELTA, gt=0, lt=1, description="fixed δ; no task if N ≥ 1/δ")
    dp_examples_tolerance: float = Field(
        2.0, ge=1, allow_inf_nan=False, description="a device's N stays within this factor of its first N"
    )

    # protocol limits
    lease_seconds: float = Field(
        60.0, gt=0, le=86_400, description="a task's result is accepted this long after its grant"
    )
    max_gradient_norm: float = Field(
        1e4, gt=0, le=1e6, description="pushes with a larger gradient norm are refused (always checked)"
    )
    max_body_bytes: int = Field(16 * 1024 * 1024, gt=0, le=2**30, description="the largest request body")
    version_retention: int = Field(200, ge=1, le=100_000, description="model versions kept (older: deleted)")
    rate_limit_per_second: float = Field(10.0, gt=0, le=1e6, description="requests per second per device")
    rate_limit_burst: int = Field(30, ge=1, le=1_000_000, description="the burst a device may send above it")
    enroll_rate_per_second: float = Field(10.0, gt=0, le=1e6, description="enrollments per second per IP")
    enroll_burst: int = Field(
        250,
        ge=1,
        le=1_000_000,
        description="the enrollment burst per address (a 200-device fleet behind one NAT enrolls at once)",
    )

    # evaluation and stop criterion
    eval_data: Path | None = Field(
        None, description="held-out data (npz with x (N, ...) and y (N,)); unset: none"
    )
    eval_metric: str = Field(
        "accuracy",
        pattern=r"^(accuracy|f1@[1-9][0-9]*)$",
        description="what the evaluation measures: accuracy (top-1) or f1@k (F1 of the top k, e.g. f1@5)",
    )
    eval_label: str | None = Field(
        None, max_length=80, description="the console's name for the metric; unset: test accuracy or F1@k"
    )
    eval_every_versions: int = Field(50, ge=1, description="evaluate every this many versions")
    eval_reference_age_s: float | None = Field(
        None,
        gt=0,
        le=30 * 86_400,
        description="also score the model as it was this many seconds before, on the same data (on data "
        "that moves: what a model updated that rarely would score); unset: no reference",
    )
    eval_reference_label: str | None = Field(
        None, max_length=80, description="the console's name for that reference; unset: the model N s before"
    )
    eval_interval_s: float = Field(5.0, gt=0, le=86_400, description="and at most this often (seconds)")
    target_accuracy: float | None = Field(
        None, gt=0, le=1, description="training finishes at this accuracy; unset: never"
    )
    max_versions: int | None = Field(
        None, ge=1, description="training finishes at this many versions; unset: never"
    )

    # admin web console (/admin); FLEET_CONSOLE=false serves none of it and training is unaffected
    console: bool = Field(True, description="serve the admin web console at /admin")
    console_user: str | None = Field(None, description="first-run console user, created when there is none")
    console_password: SecretStr | None = Field(None, description="that user's password")
    console_session_hours: float = Field(12.0, gt=0, le=720, description="a console session lasts this long")
    login_rate_per_minute: float = Field(
        6.0, gt=0, description="console logins per minute, per client address and per username"
    )
    login_burst: int = Field(5, ge=1, description="the login burst above that rate")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources = [s for s in (env_settings, dotenv_settings) if isinstance(s, EnvSettingsSource)]
        flat = FlatEnvironment(settings_cls, *sources)
        return init_settings, env_settings, dotenv_settings, flat, file_secret_settings

    @model_validator(mode="before")
    @classmethod
    def _fold_flat(cls, data: Any) -> Any:
        return fold_flat(data) if isinstance(data, dict) else data

    @model_validator(mode="after")
    def _can_run(self) -> Settings:
        """Strategy, wrappers, DP and role together must be runnable (server/settings_rules.py RULES)."""
        if problems := refusals(self):
            raise ValueError("; ".join(problems))
        return self

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


def live_names() -> set[str]:
    """The settings the console may change, and the old flat strategy names it may have saved."""
    return {name for names in LIVE_SETTINGS.values() for name in names} | strategy_keys()


def with_overrides(settings: Settings, overrides: dict[str, object]) -> Settings:
    """``settings`` with ``overrides`` applied, validated as a whole (raises pydantic's ValidationError).

    ``strategy`` replaces the strategy's settings as a whole. An old flat strategy field (``learning_rate``,
    as saved by earlier consoles) sets that field of the running strategy or of one given by name alone
    (``"strategy": "fedbuff"``: its defaults), is ignored by a strategy that does not take it, and is
    ignored beside full strategy settings (a later save). ``model_validate`` does not read the environment
    again: only the given values change."""
    unknown = set(overrides) - live_names()
    if unknown:
        raise ValueError(f"not settable at run time: {sorted(unknown)}")
    values = settings.model_dump()
    changes = dict(overrides)
    given = changes.get("strategy")
    complete = given is not None and not (isinstance(given, str) and not given.lstrip().startswith("{"))
    if "strategy" in changes:
        values["strategy"] = _as_dict(changes.pop("strategy"))
    strategy = _as_dict(values["strategy"])
    taken = STRATEGIES[strategy["name"]].settings.model_fields if strategy.get("name") in STRATEGIES else {}
    for key in strategy_keys() & set(changes):
        value = changes.pop(key)
        if key in taken and not complete:
            strategy[key] = value
    merged = Settings.model_validate({**values, **changes, "strategy": strategy})
    if merged.min_batch > merged.max_batch:
        raise ValueError(f"min_batch ({merged.min_batch}) must not exceed max_batch ({merged.max_batch})")
    return merged
