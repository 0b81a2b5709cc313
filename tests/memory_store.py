"""An in-memory ``Store``: the core's persistence port with no SQL, to test the core through its seam."""

from __future__ import annotations

import copy
import dataclasses
import math
import threading
from collections import Counter
from collections.abc import Sequence
from typing import Any

from server.core.events import (
    CounterBumped,
    DeviceEnrolled,
    DeviceReenrolled,
    DeviceRevoked,
    EnrollmentKeyCreated,
    EnrollmentKeyRevoked,
    EvaluationRecorded,
    Event,
    HeadPromoted,
    LeasesExpired,
    ModelAdded,
    PrivacyCharged,
    PushApplied,
    PushRefused,
    StateCheckpoint,
    StatusChanged,
    StopCriterionSet,
    TaskGranted,
    VersionNoted,
)
from server.core.lineage import version_record
from server.core.ports import (
    AnsweredTask,
    DeviceRecord,
    EnrollmentKey,
    EvaluationRecord,
    Lease,
    MeasurementRecord,
    ModelRecord,
    PromotionRecord,
    VersionRecord,
)
from server.core.types import Device


class MemoryStore:
    """Dictionaries behind the ``Store`` protocol; ``batches`` keeps every commit for inspection."""

    def __init__(self, *, version_retention: int = 200) -> None:
        self.version_retention = version_retention
        self.batches: list[list[Event]] = []
        self.fail_next = False
        self._lock = threading.Lock()
        self.models_: dict[str, dict[str, Any]] = {}
        self.versions_: dict[tuple[str, int], tuple[bytes, float]] = {}
        self.served_: dict[tuple[str, int], bytes] = {}
        self.lineage: dict[
            tuple[str, int], tuple[str | None, int | None, str | None]
        ] = {}  # origin, source, note
        self.tasks: dict[str, dict[str, Any]] = {}
        self.devices_: dict[str, DeviceRecord] = {}  # by device id
        self.token_hashes: dict[str, str] = {}  # token hash -> device id
        self.installs: dict[str, str] = {}  # install secret hash -> device id
        self.keys: dict[str, tuple[EnrollmentKey, str]] = {}  # key id -> (key, hash)
        self.promotions: list[PromotionRecord] = []
        self.evaluations_: dict[str, list[EvaluationRecord]] = {}
        self.measurements_: list[MeasurementRecord] = []
        self.counters_: dict[str, int] = {}
        self.strategies: dict[str, dict[str, Any]] = {}
        self.profiles: dict[str, dict[str, Any]] = {}
        self.charges: list[PrivacyCharged] = []

    def commit(self, events: Sequence[Event]) -> None:
        with self._lock:
            if self.fail_next:
                self.fail_next = False
                raise RuntimeError("disk full")
            self.batches.append(list(events))
            for event in events:
                self._apply(copy.deepcopy(event))

    def _apply(self, e: Event) -> None:  # noqa: C901 - one branch per event type
        match e:
            case TaskGranted():
                self.tasks[e.task_id] = {**e.__dict__, "status": "open", "digest": None, "outcome": None}
                if e.privacy is not None:
                    self.charges.append(e.privacy)
                self._touch(e.device_id, last_seen=e.created_at, last_features=e.features)
            case PushApplied():
                device = self.devices_.get(e.device_id)
                if device is not None:
                    self._touch(e.device_id, tasks_applied=device.tasks_applied + 1)
                task = self.tasks[e.task_id]
                task.update(status="applied", digest=e.digest, outcome=e.outcome, staleness=e.staleness)
                task.update(weight=e.weight, answered_at=e.at)
                self.measurements_.append(
                    MeasurementRecord(
                        e.task_id,
                        e.device_model,
                        e.batch_size,
                        e.compute_time_ms,
                        e.predicted_time_ms,
                        e.energy,
                        e.predicted_energy,
                        e.at,
                    )
                )
                if e.new_version is not None:
                    v = e.new_version
                    self._new_version(v.model_id, v.version, v.params, e.at)
            case StatusChanged():
                self.models_[e.model_id]["status"] = e.status
            case StopCriterionSet():
                model = self.models_[e.model_id]
                model.update(stop_accuracy=e.target_accuracy, stop_versions=e.max_versions)
            case EvaluationRecorded():
                record = EvaluationRecord(e.version, e.accuracy, e.loss, e.at)
                self.evaluations_.setdefault(e.model_id, []).append(record)
                if e.served is not None and (e.model_id, e.version) in self.versions_:
                    self.served_[(e.model_id, e.version)] = e.served
            case PushRefused():
                task = self.tasks[e.task_id]
                if task["status"] == "open":
                    task["digest"] = e.digest
            case LeasesExpired():
                for task in self.tasks.values():
                    if task["status"] == "open" and task["deadline"] < e.before:
                        task["status"] = "expired"
            case CounterBumped():
                self.counters_[e.name] = self.counters_.get(e.name, 0) + e.by
            case ModelAdded():
                for model in self.models_.values():
                    model["active"] = False
                self.models_[e.model_id] = {
                    "event": e,
                    "active": True,
                    "current_version": 0,
                    "status": "training",
                    "stop_accuracy": None,
                    "stop_versions": None,
                }
                self.versions_[(e.model_id, 0)] = (e.init_params, e.at)
            case DeviceEnrolled():
                self.devices_[e.device_id] = DeviceRecord(
                    e.device_id, e.device_model, e.at, e.at, 0, None, None, e.enrollment_key_id
                )
                self.token_hashes[e.token_hash] = e.device_id
                if e.install_hash is not None:
                    self.installs[e.install_hash] = e.device_id
            case DeviceReenrolled():
                for digest in [h for h, d in self.token_hashes.items() if d == e.device_id]:
                    del self.token_hashes[digest]  # a device has one token
                self.token_hashes[e.token_hash] = e.device_id
            case DeviceRevoked():
                if self.devices_[e.device_id].revoked_at is None:
                    self._touch(e.device_id, revoked_at=e.at)
            case EnrollmentKeyCreated():
                self.keys[e.key_id] = (
                    EnrollmentKey(e.key_id, e.name, e.at, e.actor, None, e.max_devices, e.expires_at),
                    e.key_hash,
                )
            case EnrollmentKeyRevoked():
                key, digest = self.keys[e.key_id]
                if key.revoked_at is None:
                    self.keys[e.key_id] = (dataclasses.replace(key, revoked_at=e.at), digest)
            case HeadPromoted():
                self._new_version(e.model_id, e.version, e.params, e.at)
                self.lineage[(e.model_id, e.version)] = (e.kind, e.source_version, e.note)
                for model_id, model in self.models_.items():
                    model["active"] = model_id == e.model_id
                self.models_[e.model_id]["status"] = "training"
                self.promotions.append(
                    PromotionRecord(
                        e.model_id,
                        e.version,
                        e.source_version,
                        e.previous_model_id,
                        e.previous_version,
                        e.actor,
                        e.at,
                        e.kind,
                    )
                )
            case VersionNoted():
                origin, source, _ = self.lineage.get((e.model_id, e.version), (None, None, None))
                self.lineage[(e.model_id, e.version)] = (origin, source, e.note)
            case StateCheckpoint():
                if e.model_id is not None and e.strategy is not None:
                    self.strategies[e.model_id] = e.strategy
                self.profiles.update(e.profiles)

    def _touch(self, device_id: str, **fields: Any) -> None:
        if device_id in self.devices_:
            self.devices_[device_id] = dataclasses.replace(self.devices_[device_id], **fields)

    def _new_version(self, model_id: str, version: int, params: bytes, at: float) -> None:
        """As the SQL store: the head only moves up, and versions past retention go (not version 0)."""
        self.versions_[(model_id, version)] = (params, at)
        model = self.models_[model_id]
        model["current_version"] = newest = max(model["current_version"], version)
        for key in [k for k in self.versions_ if k[0] == model_id]:
            if 0 < key[1] <= newest - self.version_retention:
                del self.versions_[key]

    def ping(self) -> None:
        """Always reachable."""

    def _record(self, model_id: str) -> ModelRecord:
        m = self.models_[model_id]
        e: ModelAdded = m["event"]
        return ModelRecord(
            e.model_id,
            e.name,
            e.manifest_json,
            e.at,
            m["active"],
            m["current_version"],
            m["status"],
            m["stop_accuracy"],
            m["stop_versions"],
        )

    def active_model(self) -> ModelRecord | None:
        return next((self._record(k) for k, m in self.models_.items() if m["active"]), None)

    def model(self, model_id: str) -> ModelRecord | None:
        return self._record(model_id) if model_id in self.models_ else None

    def models(self) -> list[ModelRecord]:
        return [self._record(k) for k in self.models_]

    def graph(self, model_id: str, which: str) -> bytes | None:
        if model_id not in self.models_:
            return None
        event: ModelAdded = self.models_[model_id]["event"]
        return {"train": event.train_onnx, "infer": event.infer_onnx, "dp": event.dp_onnx}[which]

    def version_params(self, model_id: str, version: int) -> bytes | None:
        stored = self.versions_.get((model_id, version))
        return None if stored is None else stored[0]

    def served_params(self, model_id: str, version: int) -> bytes | None:
        return self.served_.get((model_id, version)) if (model_id, version) in self.versions_ else None

    def versions(self, model_id: str) -> list[VersionRecord]:
        retained = sorted((v, at) for (m, v), (_, at) in self.versions_.items() if m == model_id)
        return [
            version_record(v, at, *self.lineage.get((model_id, v), (None, None, None))) for v, at in retained
        ]

    def device_by_token(self, token_hash: str) -> Device | None:
        record = self.devices_.get(self.token_hashes.get(token_hash, ""))
        if record is None or record.revoked_at is not None:
            return None
        return Device(record.device_id, record.device_model)

    def device(self, device_id: str) -> DeviceRecord | None:
        return self.devices_.get(device_id)

    def device_by_install(self, install_hash: str) -> DeviceRecord | None:
        return self.devices_.get(self.installs.get(install_hash, ""))

    def count_devices(self, *, enrollment_key_id: str | None = None) -> int:
        if enrollment_key_id is None:
            return len(self.devices_)
        return sum(d.enrollment_key_id == enrollment_key_id for d in self.devices_.values())

    def devices_per_key(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for d in self.devices_.values():
            if d.enrollment_key_id is not None:
                counts[d.enrollment_key_id] = counts.get(d.enrollment_key_id, 0) + 1
        return counts

    def enrollment_keys(self) -> list[EnrollmentKey]:
        return sorted((key for key, _ in self.keys.values()), key=lambda k: k.created_at)

    def enrollment_key_by_hash(self, key_hash: str) -> EnrollmentKey | None:
        return next((key for key, digest in self.keys.values() if digest == key_hash), None)

    def last_promotion(self) -> PromotionRecord | None:
        return self.promotions[-1] if self.promotions else None

    def head_changes(self) -> list[PromotionRecord]:
        return list(self.promotions)

    def lease(self, task_id: str) -> Lease | None:
        t = self.tasks.get(task_id)
        if t is None:
            return None
        return Lease(**{k: t[k] for k in Lease.__dataclass_fields__ if k in t})

    def answered_tasks(self, model_id: str, limit: int) -> list[AnsweredTask]:
        done = [t for t in self.tasks.values() if t["model_id"] == model_id and t["status"] == "applied"]
        done.sort(key=lambda t: t["answered_at"], reverse=True)
        return [
            AnsweredTask(
                t["task_id"],
                t["device_model"],
                t["version"],
                t["outcome"],
                t["staleness"],
                t["weight"],
                t["similarity"],
                t["batch_size"],
                t["answered_at"],
            )
            for t in done[:limit]
        ]

    def strategy_state(self, model_id: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.strategies.get(model_id))

    def profiler_states(self) -> dict[str, dict[str, Any]]:
        return copy.deepcopy(self.profiles)

    def privacy_charges(self) -> list[PrivacyCharged]:
        return list(self.charges)

    def counters(self, prefix: str) -> dict[str, int]:
        return {k.removeprefix(prefix): v for k, v in self.counters_.items() if k.startswith(prefix)}

    def evaluations(self, model_id: str) -> list[EvaluationRecord]:
        return list(self.evaluations_.get(model_id, []))

    def latest_evaluation(self, model_id: str) -> EvaluationRecord | None:
        return (self.evaluations_.get(model_id) or [None])[-1]

    def measurements(self, device_model: str, limit: int) -> list[MeasurementRecord]:
        return [m for m in self.measurements_ if m.device_model == device_model][-limit:]

    def measurement_counts(self) -> dict[str, tuple[int, float]]:
        counts: dict[str, tuple[int, float]] = {}
        for m in self.measurements_:
            n, last = counts.get(m.device_model, (0, 0.0))
            counts[m.device_model] = (n + 1, max(last, m.at))
        return counts

    def devices(
        self,
        *,
        offset: int = 0,
        limit: int = 100,
        device_model: str | None = None,
        enrollment_key_id: str | None = None,
    ) -> list[DeviceRecord]:
        rows = [
            d
            for d in self.devices_.values()
            if device_model in (None, d.device_model) and enrollment_key_id in (None, d.enrollment_key_id)
        ]
        rows.sort(key=lambda d: (-d.last_seen, d.device_id))
        return rows[offset : offset + limit]

    def device_model_counts(
        self, now: float, active_within_s: float = 300.0
    ) -> dict[str, tuple[int, int, float]]:
        counts: dict[str, tuple[int, int, float]] = {}
        for d in self.devices_.values():
            n, active, seen = counts.get(d.device_model, (0, 0, float("-inf")))
            recent = d.revoked_at is None and d.last_seen >= now - active_within_s
            counts[d.device_model] = (n + 1, active + recent, max(seen, d.last_seen))
        return counts

    def task_counts(self, model_id: str) -> dict[str, int]:
        return dict(Counter(t["status"] for t in self.tasks.values() if t["model_id"] == model_id))

    def answers_per_minute(self, model_id: str, since: float) -> list[tuple[float, int]]:
        minutes = Counter(
            math.floor(t["answered_at"] / 60) * 60.0
            for t in self.tasks.values()
            if t["model_id"] == model_id and t.get("answered_at") is not None and t["answered_at"] >= since
        )
        return sorted(minutes.items())
