"""The console's datasets: each a table (columns, rows) read from the core's figures and the store.

Every chart draws one dataset and every dataset downloads as CSV or JSON, so what a chart shows is
exactly what the download holds. Reads are bounded (recent windows, LIMITs, GROUP BYs): a page must
render in well under 50 ms with 1,000 devices and 10,000 tasks (bench/console_pages.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

from server.core.coordinator import Coordinator

Row = tuple[Any, ...]
ALL_WELL = "Nothing needs attention."  # the health banner's text when there is no reason
# a device model meets the time SLO when at least this share (%) of its tasks finish within it
MEETS_SLO_PCT = 90.0


def iso(at: float | None) -> str | None:
    """A timestamp as the ISO string plotly draws on a time axis (UTC)."""
    return None if at is None else datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S")


@dataclass(frozen=True)
class Dataset:
    title: str
    columns: tuple[str, ...]
    rows: Callable[[Figures, dict[str, str]], list[Row]]


def _histogram(values: np.ndarray, bins: int = 30) -> list[Row]:
    if values.size == 0:
        return []
    counts, edges = np.histogram(values, bins=bins)
    return [
        (round(float(lo), 6), round(float(hi), 6), int(c))
        for lo, hi, c in zip(edges, edges[1:], counts, strict=False)
    ]


class Figures:
    """Reads for one request: the coordinator's in-memory figures and the store's aggregates."""

    def __init__(self, coordinator: Coordinator, clock: Callable[[], float] = time.time) -> None:
        self.coordinator = coordinator
        self.store = coordinator.store
        self.now = clock()
        run = coordinator.run
        self.model_id = run.model_id if run else None

    # -- overview ------------------------------------------------------------------------------
    def overview(self) -> dict[str, Any]:
        c, run = self.coordinator, self.coordinator.run
        latest = self.store.latest_evaluation(self.model_id) if self.model_id else None
        counts = self.store.task_counts(self.model_id) if self.model_id else {}
        per_model = self.store.device_model_counts(self.now)
        per_minute = self.store.answers_per_minute(self.model_id, self.now - 60) if self.model_id else []
        rejected = dict(c.recent.rejections)
        staleness = np.asarray(c.recent.staleness or [0])
        return {
            "model_id": self.model_id,
            "status": run.status if run else "no_model",
            "version": run.version if run else 0,
            "accuracy": latest.accuracy if latest else None,
            "evaluated_version": latest.version if latest else None,
            "strategy": run.strategy.describe() if run else None,
            "devices": sum(n for n, _, _ in per_model.values()),
            "active_devices": sum(a for _, a, _ in per_model.values()),
            "updates_last_minute": sum(n for _, n in per_minute),
            "tasks_granted": sum(counts.values()),
            "tasks_by_status": counts,
            "tasks_rejected": sum(rejected.values()),
            "rejected_by_reason": rejected,
            "declined_by_reason": dict(c.recent.declines),  # tasks devices gave back unrun (issue 29)
            "staleness_p50": float(np.percentile(staleness, 50)),
            "staleness_p99": float(np.percentile(staleness, 99)),
            # ok / degraded / down and why (server/core/health.py); flat for the live-refreshed banner
            "health": (health := c.health().to_dict()),
            "health_state": health["state"],
            "health_summary": " ".join(r["message"] for r in health["reasons"]) or ALL_WELL,
        }

    # -- datasets ------------------------------------------------------------------------------
    def accuracy(self, _: dict[str, str]) -> list[Row]:
        if self.model_id is None:
            return []
        evaluations = self.store.evaluations(self.model_id)
        return [(e.version, e.accuracy, e.loss, iso(e.at), e.reference) for e in evaluations]

    def updates(self, _: dict[str, str]) -> list[Row]:
        if self.model_id is None:
            return []
        return [(iso(m), n) for m, n in self.store.answers_per_minute(self.model_id, self.now - 3600)]

    def tasks(self, _: dict[str, str]) -> list[Row]:
        counts = self.store.task_counts(self.model_id) if self.model_id else {}
        rows: list[Row] = [("granted", status, n) for status, n in sorted(counts.items())]
        rows += [("rejected", reason, n) for reason, n in sorted(self.coordinator.recent.rejections.items())]
        rows += [("declined", reason, n) for reason, n in sorted(self.coordinator.recent.declines.items())]
        return rows

    def staleness(self, _: dict[str, str]) -> list[Row]:
        values = np.asarray(self.coordinator.recent.staleness, dtype=int)
        if values.size == 0:
            return []
        return [(tau, int(n)) for tau, n in enumerate(np.bincount(values)) if n]

    def weights(self, _: dict[str, str]) -> list[Row]:
        return _histogram(np.asarray(self.coordinator.recent.weights, dtype=float))

    def _recent_tasks(self, limit: int = 1000) -> list[Any]:
        return list(reversed(self.store.answered_tasks(self.model_id, limit))) if self.model_id else []

    def tau(self, _: dict[str, str]) -> list[Row]:
        return [
            (iso(t.answered_at), t.outcome.get("version"), t.staleness, t.outcome.get("tau_thres"))
            for t in self._recent_tasks()
        ]

    def similarity(self, _: dict[str, str]) -> list[Row]:
        values = [t.similarity for t in self._recent_tasks() if t.similarity is not None]
        return _histogram(np.asarray(values, dtype=float))

    def slo(self, _: dict[str, str]) -> list[Row]:
        """Per device model: tasks measured, median predicted and measured time, p90 |error|, SLO share."""
        slo = float(self.coordinator.profiler.time_slo_ms)
        rows: list[Row] = []
        for device_model in sorted(self.store.measurement_counts()):
            pairs = [
                (m.predicted_time_ms, m.compute_time_ms)
                for m in self.store.measurements(device_model, 200)
                if m.predicted_time_ms is not None
            ]
            if not pairs:
                continue
            predicted, measured = np.asarray(pairs, dtype=float).T
            rows.append(
                (
                    device_model,
                    len(pairs),
                    round(float(np.median(predicted)), 1),
                    round(float(np.median(measured)), 1),
                    round(float(np.percentile(np.abs(measured - predicted), 90)), 1),
                    slo,
                    round(float(np.mean(measured <= slo)) * 100, 1),
                )
            )
        return rows

    def device_models(self, _: dict[str, str]) -> list[Row]:
        """Per device model, worst first: does it meet the time SLO, and with what batch sizes.

        I-Prof sizes each task's batch to the SLO, so every model's median task time sits near the SLO
        and tells little; what differs is the batch a model gets (a slow phone gets small ones) and the
        share of its tasks that still overran. Worst first: the smallest share within the SLO, then the
        largest p90 overrun. A model ``misses`` the SLO when under ``MEETS_SLO_PCT`` of its tasks
        finish within it; models with no measurement yet come last."""
        slo = float(self.coordinator.profiler.time_slo_ms)
        counts = self.store.device_model_counts(self.now)
        measured = set(self.store.measurement_counts())
        rows: list[Row] = []
        for device_model in sorted(set(counts) | measured):
            devices, active, last = counts.get(device_model, (0, 0, None))
            records = self.store.measurements(device_model, 200) if device_model in measured else []
            if not records:
                rows.append((device_model, devices, active, iso(last), 0, *([None] * 7), slo, None))
                continue
            batch = np.asarray([m.batch_size for m in records], dtype=float)
            times = np.asarray([m.compute_time_ms for m in records], dtype=float)
            within = round(float(np.mean(times <= slo)) * 100, 1)
            over = round(float(np.percentile((times - slo) / slo, 90)) * 100, 1)
            predicted = [m.predicted_time_ms for m in records if m.predicted_time_ms is not None]
            rows.append(
                (
                    device_model, devices, active, iso(last), len(records),
                    int(np.median(batch)), int(batch.min()), int(batch.max()), within, over,
                    round(float(np.median(times)), 1),
                    round(float(np.median(predicted)), 1) if predicted else None,
                    slo, within < MEETS_SLO_PCT,
                )
            )  # fmt: skip
        return sorted(rows, key=lambda r: (r[8] is None, r[8] or 0.0, -(r[9] or 0.0), r[0]))

    def measurements(self, query: dict[str, str]) -> list[Row]:
        """One device model's latest tasks (``?device_model=``): predicted vs measured time and energy."""
        device_model = query.get("device_model", "")
        return [
            (iso(m.at), m.batch_size, m.predicted_time_ms, m.compute_time_ms, m.predicted_energy, m.energy)
            for m in reversed(self.store.measurements(device_model, 500))
        ]


def privacy_rows(figures: Figures, query: dict[str, str]) -> list[Row]:
    """Each device's ε (PLD, enforced) against the budget, most spent first (DP on; else no rows)."""
    ledger = figures.coordinator.privacy
    if ledger is None:
        return []
    views = ledger.overview()["devices"]
    views.sort(key=lambda v: v["epsilon"], reverse=True)
    return [
        (v["device_id"], v["tasks"], v["local_examples"], v["delta"], round(v["epsilon"], 6),
         v["epsilon_budget"], v["exhausted"], iso(v["last_task_at"]))
        for v in views
    ]  # fmt: skip


DATASETS: dict[str, Dataset] = {
    "accuracy": Dataset(
        "Test accuracy", ("version", "accuracy", "loss", "at", "reference"), Figures.accuracy
    ),
    "updates": Dataset("Gradients answered per minute", ("minute", "answered"), Figures.updates),
    "tasks": Dataset("Tasks granted and rejected", ("kind", "status_or_reason", "count"), Figures.tasks),
    "staleness": Dataset("Staleness of recent gradients", ("staleness", "gradients"), Figures.staleness),
    "weights": Dataset("Applied weights (recent)", ("bin_low", "bin_high", "gradients"), Figures.weights),
    "tau": Dataset(
        "τ_thres and staleness", ("answered_at", "version", "staleness", "tau_thres"), Figures.tau
    ),
    "similarity": Dataset("Label similarity", ("bin_low", "bin_high", "tasks"), Figures.similarity),
    "slo": Dataset(
        "Task time against the SLO, per device model",
        (
            "device_model",
            "tasks",
            "predicted_ms_p50",
            "measured_ms_p50",
            "abs_error_ms_p90",
            "slo_ms",
            "within_slo_pct",
        ),
        Figures.slo,
    ),  # fmt: skip
    "device_models": Dataset(
        "Device models against the time SLO, worst first",
        (
            "device_model",
            "devices",
            "active_5min",
            "last_seen",
            "tasks_measured",
            "batch_p50",
            "batch_min",
            "batch_max",
            "within_slo_pct",
            "p90_over_slo_pct",
            "measured_ms_p50",
            "predicted_ms_p50",
            "slo_ms",
            "misses_slo",
        ),
        Figures.device_models,
    ),  # fmt: skip
    "privacy": Dataset(
        "Privacy spent per device",
        (
            "device_id",
            "tasks",
            "local_examples",
            "delta",
            "epsilon",
            "epsilon_budget",
            "exhausted",
            "last_task",
        ),
        privacy_rows,
    ),
    "measurements": Dataset(
        "Predicted vs measured, one device model",
        ("at", "batch_size", "predicted_ms", "measured_ms", "predicted_energy", "energy"),
        Figures.measurements,
    ),
}
