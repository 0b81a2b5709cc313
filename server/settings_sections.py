"""The settings by topic (docs/configuration.md's sections) and the ones the console may change while
training runs: names only, so the pages, the docs generator and the tests share one list."""

from __future__ import annotations

from server.settings_enrollment import ENROLLMENT_FIELDS
from server.settings_health import HEALTH_FIELDS
from server.settings_security import SECURITY_FIELDS

# The settings by topic: docs/configuration.md's sections (a test checks every field is in one).
SECTIONS: dict[str, tuple[str, ...]] = {
    "Deployment": (
        "data_dir", "database_url", "role", "redis_url", "aggregator_batch", "aggregator_lease_seconds",
        "enrollment_key", "admin_token",
    ),
    "Model, strategy and wrappers": ("initial_model", "strategy", "wrappers"),
    "Controller and profiler": (
        "size_drop", "similarity_drop", "time_slo_ms", "energy_slo", "min_batch", "max_batch",
        "profiler_bootstrap", "profiler_params", "profiler_baseline",
    ),
    "Differential privacy": (
        "dp", "dp_clip", "dp_noise_multiplier", "dp_epsilon_budget", "dp_delta", "dp_examples_tolerance",
    ),
    "Protocol limits": (
        "lease_seconds", "max_gradient_norm", "max_body_bytes", "version_retention", "rate_limit_per_second",
        "rate_limit_burst", "enroll_rate_per_second", "enroll_burst",
    ),
    "Evaluation and stop criterion": (
        "eval_data", "eval_metric", "eval_label", "eval_every_versions", "eval_interval_s",
        "eval_reference_age_s", "eval_reference_label", "target_accuracy", "max_versions",
    ),
    "Admin console": (
        "console", "console_user", "console_password", "console_session_hours", "login_rate_per_minute",
        "login_burst",
    ),
    "Enrollment and Sybil limits": ENROLLMENT_FIELDS,
    "Security": SECURITY_FIELDS,
    "Health": HEALTH_FIELDS,
}  # fmt: skip

# What the console may change while training runs (applied by server/compose.py's apply_settings), by page
# section. "strategy" is the strategy's whole settings (its name and only its own fields, from the registry)
# and "wrappers" the list around it.
LIVE_SETTINGS: dict[str, tuple[str, ...]] = {
    "Learning": ("strategy", "wrappers"),
    "SLOs and batch limits": ("time_slo_ms", "energy_slo", "min_batch", "max_batch"),
    "Controller": ("size_drop", "similarity_drop"),
    "Protocol limits": (
        "lease_seconds", "max_gradient_norm", "rate_limit_per_second", "rate_limit_burst",
        "enroll_rate_per_second", "enroll_burst",
    ),
    "Enrollment and Sybil limits": ENROLLMENT_FIELDS,
    "Health": HEALTH_FIELDS,
}  # fmt: skip
