"""What the console says in sentences: audit entries, and the running strategy's state.

The audit log stores each entry's details as JSON (who changed what, old → new), which is what an
auditor's script wants; an operator reading the page wants "changed Learning rate γ from 0.1 to 0.0625".
Each audit action maps to a sentence here; an action none knows still reads as words with its details.
The strategy's ``describe()`` is a dict of internals; the Learning page shows it as labelled figures,
and only the panels the running strategy feeds (``panels``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from server.console.labels import humanize, label, number

Detail = dict[str, Any]


def _value(value: Any) -> str:
    if value is None:
        return "the default"
    if isinstance(value, dict):
        return ", ".join(f"{label(k)} {_value(v)}" for k, v in value.items() if v is not None) or "defaults"
    if isinstance(value, list):
        return ", ".join(_value(v) for v in value) or "none"
    return number(value)


def _head(value: Any) -> str:
    if not isinstance(value, dict):
        return "no model"
    return f"{value.get('model_id', '?')} version {value.get('version', '?')}"


def _change(name: str, old: Any, new: Any) -> str:
    """One setting's change; a strategy's settings (a dict) are compared field by field."""
    if isinstance(old, dict) and isinstance(new, dict):
        if old.get("name") != new.get("name"):
            return f"switched the strategy from {old.get('name')} to {new.get('name')}"
        parts = [
            f"{label(key)} from {_value(old.get(key))} to {_value(new.get(key))}"
            for key in sorted(set(old) | set(new))
            if old.get(key) != new.get(key)
        ]
        return f"changed {new.get('name', name)}'s " + "; ".join(parts)
    return f"changed {label(name)} from {_value(old)} to {_value(new)}"


def _settings(detail: Detail) -> str:
    changes = detail.get("changes") or {}
    said = [_change(name, c.get("old"), c.get("new")) for name, c in changes.items() if isinstance(c, dict)]
    return "; ".join(said) or "saved the settings (no change)"


SENTENCES: dict[str, Callable[[Detail], str]] = {
    "settings_changed": _settings,
    "enrollment_key_created": lambda d: f"created the enrollment key “{d.get('name')}” ({d.get('key_id')})",
    "enrollment_key_revoked": lambda d: f"revoked the enrollment key {d.get('key_id')}",
    "join_code_created": lambda d: (
        f"created a join code ({d.get('key_id')}) for up to {d.get('max_devices')} phones, valid "
        f"{d.get('minutes')} min"
    ),
    "device_revoked": lambda d: f"revoked device {d.get('device_id')}: its token stopped working",
    "version_promoted": lambda d: (
        f"promoted version {(d.get('new') or {}).get('params_of', '?')}: {_head(d.get('new'))} is the head "
        f"(was {_head(d.get('old'))})"
    ),
    "rolled_back": lambda d: (
        f"rolled back {_head(d.get('old'))} to the parameters of version "
        f"{(d.get('new') or {}).get('params_of', '?')} (now {_head(d.get('new'))})"
    ),
    "version_noted": lambda d: (
        f"noted version {d.get('version')} of {d.get('model_id')}: “{d.get('new') or ''}”"
        + (f" (was “{d['old']}”)" if d.get("old") else "")
    ),
    "add_model": lambda d: f"added model {d.get('model_id')}",
    "stop_criterion": lambda d: (
        f"set the stop rule: accuracy {_value(d.get('target_accuracy'))}, "
        f"at most {_value(d.get('max_versions'))} versions"
    ),
    "task_declined": lambda d: (
        f"declined task {d.get('task_id')}: {d.get('reason')}"
        + (f" ({d['detail']})" if d.get("detail") else "")
    ),
}


def audit_sentence(action: str, detail: Detail | None) -> str:
    """The entry as a sentence: a login's own ``summary``, the action's sentence, or words and details."""
    detail = detail if isinstance(detail, dict) else {}
    if detail.get("summary"):
        return str(detail["summary"])
    if action.startswith("status:"):
        return (
            f"set training of {detail.get('model_id', 'the model')} to {action.split(':', 1)[1]} "
            f"(was {detail.get('old', '?')}) at version {detail.get('version', '?')}"
        )
    said = SENTENCES.get(action)
    if said is not None:
        try:
            return said(detail)
        except (AttributeError, KeyError, TypeError):  # an older entry's shape: fall back to its words
            pass
    extra = ", ".join(f"{humanize(k).lower()} {_value(v)}" for k, v in detail.items())
    return humanize(action) + (f": {extra}" if extra else "")


def innermost(strategy: Any) -> Any:
    """The strategy inside its wrappers (each wrapper keeps the one it wraps as ``inner``)."""
    while hasattr(strategy, "inner"):
        strategy = strategy.inner
    return strategy


def panels(strategy: Any) -> dict[str, bool]:
    """Which Learning panels the running strategy feeds: τ_thres (AdaSGD's) and label similarity (its
    boost); a panel nothing feeds is hidden rather than drawn empty."""
    if strategy is None:
        return {"tau_thres": False, "similarity": False}
    inner = innermost(strategy)
    described = strategy.describe()
    return {
        "tau_thres": "tau_thres" in described,
        "similarity": getattr(inner, "boost_scope", "none") != "none",
    }


def strategy_summary(described: dict[str, Any]) -> list[tuple[str, str]]:
    """The strategy's ``describe()`` as (label, value) rows; a value not known yet says so."""
    rows = []
    for key, value in described.items():
        if key == "strategy":
            continue
        if isinstance(value, dict | list):
            value = _value(value)
        rows.append((label(key), "not yet known" if value is None else number(value, 4)))
    return rows
