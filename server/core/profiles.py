"""The profiler's state as the console shows it: per device model, the personal model and its pairs.

Read side only: the live profiler (personal models change in memory after every push) through the
``Profiler`` port, and predicted-vs-measured pairs through the ``Store`` port.
"""

from __future__ import annotations

from typing import Any

from server.core.errors import NotFound
from server.core.ports import Profiler, Store


class ProfilerView:
    def __init__(self, profiler: Profiler, store: Store) -> None:
        self.profiler = profiler
        self.store = store

    def settings(self) -> dict[str, Any]:
        p = self.profiler
        return {
            "kind": repr(p),
            "time_slo_ms": p.time_slo_ms,
            "energy_slo": p.energy_slo,
            "min_batch": p.min_batch,
            "max_batch": p.max_batch,
        }

    def overview(self) -> dict[str, Any]:
        """Settings, and per device model: personal-model update counts and measurement counts."""
        counts = self.store.measurement_counts()
        personal = set(self.profiler.device_models())
        models = []
        for device_model in sorted(personal | set(counts)):
            state = self.profiler.device_state(device_model) if device_model in personal else {}
            n, last = counts.get(device_model, (0, None))
            models.append(
                {
                    "device_model": device_model,
                    "personal": device_model in personal,
                    "time_updates": (state.get("time") or {}).get("n_updates", 0),
                    "energy_updates": (state.get("energy") or {}).get("n_updates", 0),
                    "measurements": n,
                    "last_measurement_at": last,
                }
            )
        return {"profiler": self.settings(), "device_models": models}

    def device_model(self, device_model: str, *, limit: int) -> dict[str, Any]:
        """One device model's personal models (standardised-space coefficients) and its latest pairs."""
        rows = self.store.measurements(device_model, limit)
        personal = device_model in set(self.profiler.device_models())
        if not rows and not personal:
            raise NotFound(f"no profile for device model {device_model!r}")
        slo = self.profiler.time_slo_ms
        pairs = [
            {
                "task_id": r.task_id,
                "at": r.at,
                "batch_size": r.batch_size,
                "predicted_time_ms": r.predicted_time_ms,
                "time_ms": r.compute_time_ms,
                "time_error_of_slo": None if not slo else (r.compute_time_ms - slo) / slo,
                "predicted_energy": r.predicted_energy,
                "energy": r.energy,
            }
            for r in rows
        ]
        return {
            "device_model": device_model,
            "source": "personal" if personal else "cold",
            "state": self.profiler.device_state(device_model) if personal else None,
            "pairs": pairs,
        }
