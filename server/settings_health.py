"""The health settings (issue 29): when the coordinator calls itself degraded (server/core/health.py).

A group of its own, mixed into ``server.settings.Settings`` like server/settings_security.py (same FLEET_*
variables, same docs table). The defaults turn the state "degraded" within 30 s of each failure they watch
for (no push for 20 s: the Overview, refreshed every 3 s, shows it well within 30 s); an operator whose
devices train only while charging may well want a longer ``health_no_push_seconds``.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from server.core.health import HealthPolicy


class HealthSettings(BaseModel):
    health_no_push_seconds: float = Field(
        20.0,
        gt=0,
        le=86_400,
        description="degraded when no push has arrived for this long while devices are enrolled and "
        "training runs",
    )
    health_window_seconds: float = Field(
        120.0, gt=0, le=86_400, description="the window of task outcomes the failing-devices check reads"
    )
    health_failing_share: float = Field(
        0.5,
        ge=0,
        lt=1,
        description="degraded when more than this share of the devices with tasks in that window had most "
        "of their latest three refused or declined",
    )
    health_accuracy_window: int = Field(
        6, ge=3, le=1000, description="the latest evaluations the falling-accuracy check compares"
    )
    health_accuracy_drop: float = Field(
        0.05,
        gt=0,
        le=1,
        description="degraded when the latest two evaluations' mean is this far below the best before "
        "them in that window (and beyond three times their step-to-step noise)",
    )
    health_journal_seconds: float = Field(
        10.0, gt=0, le=3600, description="degraded when a write has waited this long for its commit"
    )

    def health_policy(self) -> HealthPolicy:
        """The core's thresholds (the core reads no settings)."""
        return HealthPolicy(
            no_push_seconds=self.health_no_push_seconds,
            window_seconds=self.health_window_seconds,
            failing_share=self.health_failing_share,
            accuracy_window=self.health_accuracy_window,
            accuracy_drop=self.health_accuracy_drop,
            journal_seconds=self.health_journal_seconds,
        )


HEALTH_FIELDS: tuple[str, ...] = tuple(HealthSettings.model_fields)
