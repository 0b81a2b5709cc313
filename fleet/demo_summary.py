"""The tables `fleet demo` prints at the end: the run's summary and, under DP, what each phone spent."""

from __future__ import annotations

from typing import Any

from rich.table import Table


def privacy_table(privacy: dict[str, Any], names: dict[str, str]) -> Table:
    """Each device's ε (PLD, replace-one, enforced) against its budget, and the assumption behind it."""
    delta, budget = privacy["delta"], privacy["epsilon_budget"]
    table = Table(title=f"Privacy: ε per device at δ = {delta:g} (budget {budget:g})")
    for column in ("device", "phone", "DP tasks", "ε spent", "budget spent"):
        table.add_column(column)
    for d in sorted(privacy["devices"], key=lambda d: names.get(d["device_id"], "")):
        spent = "yes" if d["exhausted"] else "no"
        table.add_row(
            d["device_id"][:8], names.get(d["device_id"], "?"), str(d["tasks"]), f"{d['epsilon']:.3f}", spent
        )
    table.caption = (
        f"{privacy['mechanism']}, C = {privacy['clip']:g}, σ = {privacy['noise_multiplier']:.3f}. "
        + privacy["assumption"]
    )
    return table


def summary_table(
    stats: dict[str, Any], evaluations: list[dict[str, Any]], wall: float, reached: float | None, tasks: int
) -> Table:
    table = Table(title="Fleet demo: summary", show_header=False)
    strategy = stats.get("strategy") or {}
    rows = [
        (
            "final test accuracy (1,000 held-out digits)",
            f"{stats['accuracy']:.4f} at v{stats['evaluated_version']}" if stats["accuracy"] else "-",
        ),
        ("best accuracy seen", f"{max((e['accuracy'] for e in evaluations), default=0):.4f}"),
        ("time to 0.90 accuracy", f"{reached:.1f} s of training" if reached else "not reached"),
        ("training wall time", f"{wall:.1f} s"),
        ("updates applied (model version)", str(stats["version"])),
        ("tasks pushed by devices", str(tasks)),
        ("staleness τ p50 / p99", f"{stats['staleness_p50']:.0f} / {stats['staleness_p99']:.0f}"),
        (
            "strategy (learning rate)",
            f"{strategy.get('strategy', '-')} ({strategy.get('learning_rate', '-')})",
        ),
        ("mean applied weight", f"{stats['weight_mean']:.3f}" if stats["weight_mean"] else "-"),
        *(
            [
                (
                    "Kardam dropped (Lipschitz / frequency)",
                    f"{strategy['kardam_dropped_lipschitz']} / {strategy['kardam_dropped_frequency']}"
                    f" of {strategy['kardam_received']}",
                )
            ]
            if "kardam_received" in strategy
            else []
        ),  # fmt: skip
        *(
            [
                (
                    "trusted score gave weight 0 to",
                    f"{strategy['trusted_dropped']} of {strategy['trusted_received']}",
                )
            ]
            if "trusted_received" in strategy
            else []
        ),  # fmt: skip
        *(
            [
                (
                    "label check dropped (false claims / rows), weighed down",
                    f"{strategy['label_check_dropped_false_claims']} / {strategy['label_check_dropped_rows']}"
                    f" of {strategy['label_check_received']}, {strategy.get('label_check_shrunk_rows', 0)}",
                )
            ]
            if "label_check_received" in strategy
            else []
        ),  # fmt: skip
        (
            "batch size L min / p50 / max",
            f"{stats['batch_size_min']} / {stats['batch_size_p50']:.0f} / {stats['batch_size_max']}",
        ),
        ("rejections by reason", ", ".join(f"{k}: {v}" for k, v in stats["rejections"].items()) or "none"),
        (
            "task time predicted / measured (p50)",
            f"{stats['predicted_time_ms_p50']:.0f} ms / {stats['measured_time_ms_p50']:.0f} ms",
        ),
        ("|measured − predicted| p90", f"{stats['time_abs_error_ms_p90']:.0f} ms"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table
