"""`fleet demo`'s closing table shows what each defence in the run did (fleet/demo_summary.py)."""

from __future__ import annotations

from rich.console import Console

from fleet.demo_summary import summary_table

STATS = {
    "accuracy": 0.92, "evaluated_version": 321, "version": 322, "staleness_p50": 2.0, "staleness_p99": 9.0,
    "weight_mean": 0.4, "batch_size_min": 50, "batch_size_p50": 526.0, "batch_size_max": 908,
    "rejections": {}, "predicted_time_ms_p50": 999.0, "measured_time_ms_p50": 355.0,
    "time_abs_error_ms_p90": 802.0,
}  # fmt: skip


def rendered(strategy: dict) -> str:
    console = Console(width=200, record=True)
    console.print(summary_table({**STATS, "strategy": strategy}, [{"accuracy": 0.92}], 45.9, 35.5, 1676))
    return console.export_text()


def test_the_label_check_and_trusted_score_rows_show_only_when_those_defences_run():
    plain = rendered({"strategy": "fedbuff-equal", "learning_rate": 0.6})
    assert "label check" not in plain and "trusted score" not in plain and "35.5 s of training" in plain
    robust = rendered({
        "strategy": "fedbuff-equal", "learning_rate": 0.6, "trusted_dropped": 3, "trusted_received": 1611,
        "label_check_received": 1676, "label_check_dropped_false_claims": 60, "label_check_dropped_rows": 5,
        "label_check_shrunk_rows": 12,
    })  # fmt: skip
    assert "3 of 1611" in robust and "60 / 5 of 1676, 12" in robust
