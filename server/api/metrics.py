"""Prometheus figures of one app instance (own registry, so several apps can live in one process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from server.core.health import CODES, STATES, Health


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.tasks_granted = Counter("fleet_tasks_granted", "Learning tasks handed out", registry=r)
        self.tasks_rejected = Counter("fleet_tasks_rejected", "Task requests refused", ["reason"], registry=r)
        self.gradients = Counter("fleet_gradients_received", "Gradients accepted", registry=r)
        self.updates = Counter("fleet_model_updates", "Model updates applied", registry=r)
        self.bad_pushes = Counter("fleet_pushes_refused", "Pushes refused", ["status"], registry=r)
        self.version = Gauge("fleet_model_version", "Current model version", registry=r)
        self.accuracy = Gauge("fleet_test_accuracy", "Latest server-side test accuracy", registry=r)
        self.staleness = Histogram(
            "fleet_staleness",
            "Staleness τ of applied gradients",
            buckets=(0, 1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 128),
            registry=r,
        )
        self.weight = Histogram(
            "fleet_applied_weight",
            "Weight gradients were applied with",
            buckets=(0.01, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0),
            registry=r,
        )
        self.batch_size = Histogram(
            "fleet_batch_size",
            "Mini-batch sizes handed out",
            buckets=(1, 10, 25, 50, 100, 200, 400, 800, 1600),
            registry=r,
        )
        self.epsilon_max = Gauge(
            "fleet_privacy_epsilon_max", "Largest ε (PLD) any device has spent (DP on)", registry=r
        )
        self.budget_exhausted = Gauge(
            "fleet_privacy_devices_exhausted", "Devices whose privacy budget is spent (DP on)", registry=r
        )
        self.push_seconds = Histogram("fleet_push_seconds", "Push handling time", registry=r)
        self.task_seconds = Histogram("fleet_task_request_seconds", "Task request handling time", registry=r)
        # the coordinator's health (server/core/health.py; docs/ops/alerts.yml alerts on these)
        self.health_state = Gauge(
            "fleet_health_state", "Health: 0 ok, 1 degraded, 2 down (cannot serve)", registry=r
        )
        self.health_reason = Gauge(
            "fleet_health_reason", "1 while this reason holds, else 0", ["code"], registry=r
        )
        self.journal_pending = Gauge(
            "fleet_journal_pending", "Writes queued or being written, not yet committed", registry=r
        )
        self.journal_oldest = Gauge(
            "fleet_journal_oldest_pending_seconds",
            "Age of the oldest write not yet committed (0: none)",
            registry=r,
        )
        self.observe_health(Health(STATES[0]), 0, 0.0)  # every code's series exists from the first scrape

    def observe_health(self, health: Health, pending: int, oldest_s: float) -> None:
        """Set the health gauges: the state's level and one 0/1 series per reason code."""
        self.health_state.set(health.level)
        held = health.codes()
        for code in CODES:
            self.health_reason.labels(code).set(1 if code in held else 0)
        self.journal_pending.set(pending)
        self.journal_oldest.set(oldest_s)
