"""The device's own privacy ledger and policy: the budget belongs to the data (issue 27, finding 4 and 5).

The coordinator keeps a ledger per device id, but an id is an enrollment: re-enrolling used to start a
fresh one. So the device keeps its own, next to its data: every DP step it computed (a Gaussian step or
a local-SGD round as one Poisson-subsampled Gaussian event (σ, q); a norm-Laplace step as its pure ε),
its own budget and δ, and the fingerprint of the data they were spent on. Before a DP task it holds the
grant's terms to its policy (known mechanisms, a σ floor, a q cap, the exact norm-Laplace sampler) and to
its own projected ε, whatever the coordinator says, and it records the step durably BEFORE computing, so
a crash cannot lose a charge whose noised gradient may already have left.

ε is ``fleet_protocol.accounting.epsilon`` (PLD, replace-one, the coordinator's accountant) of the
Gaussian events at the ledger's δ plus the sum of the pure ε. Data that changes (an app's new drawings)
keeps its ledger: its old examples have spent that ε already, so the ledger's ε stays an upper bound for
every example the device has held; the new fingerprint is recorded. Starting afresh is an explicit act:
another state directory, or removing the ledger file.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import math
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fleet_protocol import GAUSSIAN_MECHANISM, LOCAL_SGD_MECHANISM, NORM_LAPLACE_MECHANISM, DPTerms, WireError
from fleet_protocol.accounting import DEFAULT_DELTA, PrivacyEvent, epsilon

from ._exceptions import PrivacyRefused, WorkerError
from ._random import secure_generator
from ._state import write_json_atomic

__all__ = [
    "DEFAULT_BUDGET",
    "DECLINED",
    "EXHAUSTED",
    "KNOWN_MECHANISMS",
    "LEDGER_FILE",
    "NOISE_FLOOR",
    "RATE_CAP",
    "UNACCOUNTABLE",
    "DeviceLedger",
    "DevicePrivacy",
    "PrivacyRefused",
    "data_fingerprint",
]

logger = logging.getLogger("fleet.client")

LEDGER_FILE = "privacy-ledger.json"
FORMAT = 1
DEFAULT_BUDGET = 8.0
NOISE_FLOOR = 0.5  # σ below this protects little at any q: refused whatever the coordinator's budget
# q: the DP demo grants B = 10 of N = 200 examples, reported as the bucket 192: q = 10/192 ≈ 0.052.
# 0.6 admits any B ≤ N/2 whatever the bucket's rounding (≤ 9/8 · 0.5) and refuses steps that sample most
# of the data, where subsampling amplifies next to nothing.
RATE_CAP = 0.6
KNOWN_MECHANISMS = (GAUSSIAN_MECHANISM, LOCAL_SGD_MECHANISM, NORM_LAPLACE_MECHANISM)
EXHAUSTED = "privacy_budget_exhausted"  # the device stops: its own budget has no room for the step
UNACCOUNTABLE = "privacy_unaccountable"  # the device stops: it cannot compute ε (no dp-accounting here)
DECLINED = "privacy_terms_refused"  # the device declines these terms and asks again later


@dataclass(frozen=True)
class DevicePrivacy:
    """The device's own privacy settings. ``budget``/``delta`` None: the ledger's (DEFAULT_BUDGET and
    ``DEFAULT_DELTA`` for a new one); a budget given here replaces the stored one (the owner's choice),
    δ is fixed when the ledger is created. ``require_dp`` None: non-private tasks are refused once the
    data's ledger holds a DP step (the data was promised ε; a plain gradient would break it)."""

    budget: float | None = None
    delta: float | None = None
    min_noise_multiplier: float = NOISE_FLOOR
    max_sampling_rate: float = RATE_CAP
    mechanisms: tuple[str, ...] = KNOWN_MECHANISMS
    require_dp: bool | None = None

    def __post_init__(self) -> None:
        if self.budget is not None and not (math.isfinite(self.budget) and self.budget > 0):
            raise ValueError(f"the privacy budget must be positive and finite, got {self.budget}")
        if self.delta is not None and not (math.isfinite(self.delta) and 0 < self.delta < 1):
            raise ValueError(f"δ must be in (0, 1), got {self.delta}")
        if not (math.isfinite(self.min_noise_multiplier) and self.min_noise_multiplier > 0):
            raise ValueError(f"the σ floor must be positive, got {self.min_noise_multiplier}")
        if not 0 < self.max_sampling_rate <= 1:
            raise ValueError(f"the q cap must be in (0, 1], got {self.max_sampling_rate}")
        unknown = set(self.mechanisms) - set(KNOWN_MECHANISMS)
        if unknown:
            raise ValueError(
                f"mechanisms {sorted(unknown)} are not implemented here; known: {KNOWN_MECHANISMS}"
            )


def _declined(detail: str) -> PrivacyRefused:
    return PrivacyRefused(detail, reason=DECLINED)


def data_fingerprint(x: np.ndarray, y: np.ndarray) -> str:
    """SHA-256 of the examples and labels (shapes and dtypes included): which data a ledger was spent on."""
    digest = hashlib.sha256(b"fleet-data/1")
    for array in (np.ascontiguousarray(x), np.ascontiguousarray(y)):
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(memoryview(array).cast("B"))
    return digest.hexdigest()


def _new_state(privacy: DevicePrivacy) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "budget": privacy.budget if privacy.budget is not None else DEFAULT_BUDGET,
        "delta": privacy.delta if privacy.delta is not None else DEFAULT_DELTA,
        "created_at": time.time(),
        "fingerprints": [],  # every data fingerprint charged under this ledger, the current one last
        "gaussian": [],  # {"mechanism", "noise_multiplier", "sampling_rate", "count"}
        "pure": [],  # {"mechanism", "epsilon", "count"}
        "tasks": 0,
        "last_task": None,
        "exhausted": None,  # why the last DP task did not fit the budget (cleared when the budget changes)
    }


class DeviceLedger:
    """Every DP step this device computed on its data, in ``path`` (None: in memory, for simulations and
    tests); ``admit`` is the one call the worker makes per task."""

    def __init__(self, path: Path | None, privacy: DevicePrivacy | None = None) -> None:
        self.path = path
        self.privacy = privacy if privacy is not None else DevicePrivacy()
        self._lock = threading.Lock()
        self._fingerprint: tuple[object, str] | None = None  # (the data object, its fingerprint)
        stored = self._load() if path is not None and path.exists() else None
        state = stored if stored is not None else _new_state(self.privacy)
        if self.privacy.budget is not None and self.privacy.budget != state["budget"]:
            state = {**state, "budget": self.privacy.budget, "exhausted": None}  # the owner's new budget
        if self.privacy.delta is not None and self.privacy.delta != state["delta"]:
            logger.warning("privacy ledger %s keeps its δ %.2e (δ is fixed once spent)", path, state["delta"])
        self._state = state
        if path is not None and state is not stored:
            write_json_atomic(path, state)

    @classmethod
    def open(cls, state_dir: str | Path | None, privacy: DevicePrivacy | None = None) -> DeviceLedger:
        """The ledger kept in ``state_dir`` (created on first use), or an in-memory one for None."""
        return cls(None if state_dir is None else Path(state_dir) / LEDGER_FILE, privacy)

    def __repr__(self) -> str:
        where = str(self.path) if self.path is not None else "memory"
        return f"DeviceLedger({where}, tasks={self.tasks}, budget={self.budget:g})"

    def _load(self) -> dict[str, Any]:
        assert self.path is not None
        try:
            state = json.loads(self.path.read_text(encoding="utf-8"))
            if state.get("format") != FORMAT:
                raise ValueError(f"unknown format {state.get('format')!r}")
            for key in ("budget", "delta", "fingerprints", "gaussian", "pure", "tasks"):
                state[key]  # noqa: B018 - present, or the file is not a ledger
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise WorkerError(
                f"privacy ledger {self.path} is unreadable ({exc}): fix it, or remove it to start afresh"
                " (that forgets the ε this data has spent)"
            ) from exc
        return state

    # --- reading -------------------------------------------------------------------------------

    @property
    def budget(self) -> float:
        return float(self._state["budget"])

    @property
    def delta(self) -> float:
        return float(self._state["delta"])

    @property
    def tasks(self) -> int:
        return int(self._state["tasks"])

    @property
    def exhausted(self) -> str | None:
        """Why the device stopped taking DP tasks (None: it has not)."""
        return self._state.get("exhausted")

    def events(self, state: dict[str, Any] | None = None) -> list[PrivacyEvent]:
        """The Gaussian steps (DP-SGD steps and local-SGD rounds) grouped by (σ, q)."""
        counts: Counter[tuple[float, float]] = Counter()
        for e in (state or self._state)["gaussian"]:
            counts[(float(e["noise_multiplier"]), float(e["sampling_rate"]))] += int(e["count"])
        return [PrivacyEvent(s, q, n) for (s, q), n in sorted(counts.items())]

    def epsilon(self, state: dict[str, Any] | None = None) -> float:
        """ε spent at the ledger's δ: PLD (replace-one) of the Gaussian steps plus Σ pure ε."""
        state = state or self._state
        events = self.events(state)
        gaussian = epsilon(events, float(state["delta"])) if events else 0.0
        return gaussian + sum(float(e["epsilon"]) * int(e["count"]) for e in state["pure"])

    # --- the worker's call ---------------------------------------------------------------------

    def admit(self, dp: Any, data: Any, task_id: str | None = None) -> DPTerms | None:
        """The grant's DP terms (None for a non-private task) once they pass this device's policy and
        fit its budget, the step recorded durably; otherwise ``PrivacyRefused`` and nothing recorded."""
        with self._lock:
            terms = self._parse(dp)
            if terms is None:
                return None
            entry, pure = self._check(terms, len(data))
            state = copy.deepcopy(self._state)
            key = {k: v for k, v in entry.items() if k != "count"}
            section = state["pure" if pure else "gaussian"]
            for old in section:
                if {k: v for k, v in old.items() if k != "count"} == key:
                    old["count"] += 1
                    break
            else:
                section.append(entry)
            try:
                secure_generator()  # no secure noise, no DP task: refused before anything is charged
                after = self.epsilon(state)
            except ImportError as exc:  # the Android app ships neither dp-accounting nor randomgen yet
                detail = f"this device cannot account ε or draw secure noise: {exc}"
                raise PrivacyRefused(detail, reason=UNACCOUNTABLE, stop=True) from exc
            if after > self.budget:
                self._refuse_exhausted(after)
            fingerprint = self._fingerprint_of(data)
            if fingerprint not in state["fingerprints"][-1:]:
                if state["fingerprints"]:
                    logger.info("the device's data changed: its privacy ledger goes on (ε carried over)")
                state["fingerprints"].append(fingerprint)
            state["tasks"], state["exhausted"] = state["tasks"] + 1, None
            state["last_task"] = {"task_id": task_id, "at": time.time(), "epsilon_after": after}
            self._commit(state)
            return terms

    def _parse(self, dp: Any) -> DPTerms | None:
        if dp is not None:
            try:
                terms = DPTerms.from_json(dp)
            except WireError as exc:
                raise _declined(f"the coordinator's DP terms are unacceptable: {exc}") from exc
            if not (terms.mechanism == LOCAL_SGD_MECHANISM and terms.clip == 0):  # 0: plain local SGD
                return terms
        require = self.privacy.require_dp
        if require or (require is None and self.tasks > 0):
            raise _declined(
                "this device's data has a DP ledger: it refuses non-private tasks on it"
                f" ({self.tasks} DP steps, ε = {self.epsilon():.3f} of {self.budget:g})"
            )
        return None

    def _check(self, terms: DPTerms, examples: int) -> tuple[dict[str, Any], bool]:
        """The ledger entry of one step of ``terms`` on ``examples`` examples, or ``PrivacyRefused``."""
        policy, mechanism = self.privacy, terms.mechanism
        if mechanism not in policy.mechanisms:
            raise _declined(f"unknown DP mechanism {mechanism!r}; this device runs {policy.mechanisms}")
        if mechanism == NORM_LAPLACE_MECHANISM:
            if terms.noise != "exact" or terms.replacement:
                raise _declined(
                    f"norm-Laplace with the {terms.noise!r} sampler{' with replacement' * terms.replacement}"
                    " is not ε-DP: this device runs the exact sampler on distinct examples only"
                )
            assert terms.sensitivity is not None and terms.epsilon_step is not None  # from_json checks
            if terms.sensitivity < 2 * terms.clip / terms.expected_batch * (1 - 1e-9):
                raise _declined(f"norm-Laplace ΔS {terms.sensitivity} < 2·clip/b: under-noised")
            return {"mechanism": mechanism, "epsilon": float(terms.epsilon_step), "count": 1}, True
        if terms.noise_multiplier < policy.min_noise_multiplier:
            raise _declined(
                f"noise multiplier σ = {terms.noise_multiplier:g} is below this device's floor"
                f" {policy.min_noise_multiplier:g}"
            )
        # the q charged: the grant's, or the device's own sampling if that is larger (an upper bound)
        size = terms.local_steps if mechanism == LOCAL_SGD_MECHANISM else terms.expected_batch
        rate = max(float(terms.sampling_rate), min(1.0, (size or 1) / max(examples, 1)))
        if rate > policy.max_sampling_rate:
            raise _declined(
                f"sampling rate q = {rate:.3g} exceeds this device's cap {policy.max_sampling_rate:g}"
            )
        entry = {
            "mechanism": mechanism,
            "noise_multiplier": float(terms.noise_multiplier),
            "sampling_rate": rate,
        }
        return {**entry, "count": 1}, False

    def _refuse_exhausted(self, after: float) -> None:
        spent = self.epsilon()
        detail = (
            f"this device's own privacy budget is spent: ε = {spent:.3f} of {self.budget:g}"
            f" (δ = {self.delta:.0e}); the next step would reach {after:.3f}"
        )
        try:
            self._commit({**self._state, "exhausted": detail})  # a restarted worker stops before asking
        except PrivacyRefused:
            logger.warning("could not record that the privacy budget is spent")
        raise PrivacyRefused(detail, reason=EXHAUSTED, stop=True)

    def _fingerprint_of(self, data: Any) -> str:
        cached = self._fingerprint
        if cached is None or cached[0] is not data:
            cached = self._fingerprint = (data, data_fingerprint(data.x, data.y))
        return cached[1]

    def _commit(self, state: dict[str, Any]) -> None:
        """Durable first, then in memory: a failed write records nothing and refuses the task."""
        if self.path is not None:
            try:
                write_json_atomic(self.path, state)
            except OSError as exc:
                raise _declined(f"cannot record the privacy charge in {self.path}: {exc}") from exc
        self._state = state
