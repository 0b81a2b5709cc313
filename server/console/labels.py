"""Words and units for what the console shows: setting labels, humanized numbers, device features.

The settings models name their fields for code (``time_slo_ms``, ``dp_step_epsilon``); an operator reads
"Time SLO (ms)". The labels live here, in one mapping, beside the pydantic descriptions (kept as the
help text); a field missing from the mapping still reads as words (``humanize``), never as a variable.
"""

from __future__ import annotations

import math
from typing import Any

# name -> (label, unit or ""): the top-level live settings, then strategy and wrapper fields
LABELS: dict[str, tuple[str, str]] = {
    "strategy": ("Strategy", ""),
    "time_slo_ms": ("Time SLO per task", "ms"),
    "energy_slo": ("Energy SLO per task", "% battery"),
    "min_batch": ("Smallest mini-batch", "examples"),
    "max_batch": ("Largest mini-batch", "examples"),
    "size_drop": ("Refuse the smallest tasks (share)", ""),
    "similarity_drop": ("Refuse the most redundant tasks (share)", ""),
    "lease_seconds": ("Task lease", "s"),
    "max_gradient_norm": ("Largest gradient norm accepted", ""),
    "rate_limit_per_second": ("Requests per device", "per s"),
    "rate_limit_burst": ("Request burst per device", "requests"),
    "enroll_rate_per_second": ("Enrollments per address", "per s"),
    "enroll_burst": ("Enrollment burst per address", "enrollments"),
    "enroll_quota_per_key": ("Devices per enrollment key (default quota)", "devices"),
    "enroll_key_rate_per_second": ("Enrollments per key", "per s"),
    "enroll_key_burst": ("Enrollment burst per key", "enrollments"),
    "public_url": ("Public URL (what phones open)", ""),
    "max_devices": ("New key's quota", "devices"),
    "health_no_push_seconds": ("Degraded after no push for", "s"),
    "health_window_seconds": ("Failing-devices window", "s"),
    "health_failing_share": ("Degraded past this share of devices failing", ""),
    "health_accuracy_window": ("Evaluations the accuracy check compares", ""),
    "health_accuracy_drop": ("Degraded when accuracy falls by", "accuracy"),
    "health_journal_seconds": ("Degraded when a write waits for its commit", "s"),
    "learning_rate": ("Learning rate γ", ""),
    "k": ("Gradients per update (K)", ""),
    "time_window": ("Apply a short buffer after", "s"),
    "percentile": ("τ_thres percentile of past staleness", "%"),
    "bootstrap": ("Staleness values before τ_thres", ""),
    "staleness_cap": ("Cap staleness at τ_thres", ""),
    "boost_floor": ("Similarity boost floor", ""),
    "boost_scope": ("Similarity boost applies to", ""),
    "global_counts": ("Global label counts from", ""),
    "clip_factor": ("Clip to × the median norm", ""),
    "clip_gradients": ("Clip only the first", "gradients"),
    "warmup_gradients": ("Learning-rate warm-up", "gradients"),
    "share_window": ("Device shares counted over", "arrivals"),
    "concurrency_reference": ("Shrink the rate past median staleness", ""),
    "cap_reference": ("Shrink the step cap past median staleness", ""),
    "beta": ("Server momentum β", ""),
    "beta1": ("First-moment decay β₁", ""),
    "beta2": ("Second-moment decay β₂", ""),
    "epsilon": ("Adaptivity ε", ""),
    "dp_step_epsilon": ("Privacy ε per step", ""),
    "dp_step_batch": ("Examples per DP step", ""),
    "dp_noise_sampler": ("Noise sampler", ""),
    "audp_clip": ("Per-example clip G", ""),
    "tau_max": ("Drop gradients staler than", "versions"),
    "smoothness": ("Loss smoothness L (assumed)", ""),
    "gradient_std": ("Per-example gradient σ (assumed)", ""),
    "l2": ("Weight decay λ", ""),
    "over_selection": ("Tasks granted per round (× K)", ""),
    "f": ("Byzantine devices assumed", ""),
    "coefficient": ("Lipschitz coefficient against", ""),
    "dampening": ("Staleness dampening", ""),
    "warmup": ("Warm-up", ""),
    "factor": ("Clip to × the median norm", ""),
    "until": ("Clip only the first", "gradients"),
    "window": ("Counted over the last", "arrivals"),
    "gradients": ("Ramp the rate up over", "gradients"),
    "cap": ("Weight cap (× or 1/×)", ""),
    "spike": ("Halve the rate at loss ×", ""),
    "span": ("Loss average span", "gradients"),
    "cooldown": ("Cool-down after halving", "gradients"),
    "floor": ("Lowest rate fraction", ""),
    "reference": ("Median staleness left as set", "versions"),
    "power": ("Rate shrink exponent", ""),
}
# the strategy's state (describe()) beside its settings
STATE_LABELS: dict[str, tuple[str, str]] = {
    "updates": ("Model updates applied", ""),
    "tau_thres": ("τ_thres now", "versions"),
    "buffered": ("Gradients in the buffer", ""),
    "clip_threshold": ("Clip threshold now", ""),
    "clipped": ("Gradients clipped", ""),
    "warmup_factor": ("Warm-up factor now", ""),
    "concurrency_factor": ("Concurrency factor now", ""),
}
FEATURES: dict[str, tuple[str, str]] = {
    "available_memory": ("Available memory", "bytes"),
    "total_memory": ("Total memory", "bytes"),
    "temperature": ("Temperature", "°C"),
    "cpu_freq_sum": ("CPU frequency (sum)", "MHz"),
    "energy_per_cpu_time": ("Energy per CPU second", "% battery"),
}


def humanize(name: str) -> str:
    """A field name as words: the fallback for a field no mapping knows yet."""
    words = name.replace("_", " ").replace("-", " ").strip()
    return words[:1].upper() + words[1:]


def label(name: str) -> str:
    """The label of a setting (its last dotted part) with its unit, e.g. "Time SLO per task (ms)"."""
    key = name.split(".")[-1]
    text, unit = LABELS.get(key) or STATE_LABELS.get(key) or (humanize(key), "")
    return f"{text} ({unit})" if unit else text


def number(value: Any, digits: int = 3) -> str:
    """A number an operator reads at a glance: 1,000 not 1e+03, 0.2 not 0.2000, thousands separated."""
    if value is None:
        return "—"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"  # 0.2, 0.0625, 1e-05


def nbytes(value: float | None) -> str:
    """Bytes in decimal units (22.4 GB), as phones' storage and memory are sold."""
    if value is None:
        return "—"
    size = float(value)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(size) < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    raise AssertionError("unreachable")


def duration_ms(value: float | None) -> str:
    """A duration given in ms: "850 ms", "1,000 ms (1 s)", "2.5 min" for long ones."""
    if value is None:
        return "—"
    if value < 1000:
        return f"{number(value)} ms"
    seconds = value / 1000
    if seconds < 120:
        return f"{number(value)} ms ({number(round(seconds, 2))} s)"
    return f"{number(round(seconds / 60, 1))} min"


def with_unit(value: Any, unit: str) -> str:
    """``value`` formatted for its unit (bytes, ms or a plain suffix)."""
    if value is None:
        return "—"
    if unit == "bytes":
        return nbytes(value)
    if unit == "ms":
        return duration_ms(value)
    return f"{number(value)} {unit}".strip()


def features(values: dict[str, Any] | None) -> list[tuple[str, str]]:
    """A device's last features as (label, value with unit) pairs, in the mapping's order."""
    if not values:
        return []
    present = {key: value for key, value in values.items() if value is not None}  # unknown: not shown
    known = [key for key in FEATURES if key in present] + sorted(k for k in present if k not in FEATURES)
    rows = []
    for key in known:
        text, unit = FEATURES.get(key, (humanize(key), ""))
        rows.append((text, with_unit(present[key], unit)))
    return rows


def plain(value: Any) -> str:
    """A value for a form input, as the form will parse it back: 1000 not 1000.0, no separators."""
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return str(value)


def install(env: Any) -> None:
    """Register the filters the templates use (``|label``, ``|number``, ``|bytes``, ``|ms``, ...)."""
    env.filters["label"] = label
    env.filters["number"] = number
    env.filters["bytes"] = nbytes
    env.filters["ms"] = duration_ms
    env.filters["features"] = features
    env.filters["plain"] = plain


def metric_label(eval_metric: str, eval_label: str | None) -> str:
    """What the accuracy figures measure, as the console names them: FLEET_EVAL_LABEL, else from the
    metric ("test accuracy", or "F1@5" for a recommender scored on its top 5)."""
    if eval_label:
        return eval_label
    return "test accuracy" if eval_metric == "accuracy" else eval_metric.upper()
