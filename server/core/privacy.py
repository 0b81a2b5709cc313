"""The privacy ledger: DP terms for each task, every device's ε, and the budget that stops a device.

A DP task is charged when it is granted (whether or not its gradient comes back: a lease handed out
may be released), so the ε shown is an upper bound. A request that is refused is never charged.

Two kinds of steps (issue 16): Poisson-subsampled Gaussian steps (this policy's terms) and pure ε-DP
norm-Laplace steps whose terms a strategy supplies (AUDP/MAPA, basic composition). A device's ε is the PLD ε
of its Gaussian steps under replace-one adjacency (fleet_protocol/accounting.py) at the policy's fixed δ,
plus the sum of its pure steps' ε, δ unchanged (``PURE_ASSUMPTION``); the same budget applies to it. A
strategy may also supply Gaussian terms of its own (van Dijk et al.'s local SGD round, ``round_terms``):
charged like the policy's steps, at its σ and its q.

Issue 27: δ is one setting (not 1/N²) and a grant is refused when δ ≥ 1/N; a device's N may drift only
within ``examples_tolerance`` of the first N it was charged with (not step by step).
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from fleet_protocol.accounting import (
    ASSUMPTION,
    DEFAULT_DELTA,
    LOCAL_SGD,
    MECHANISM,
    NORM_LAPLACE,
    PURE_ASSUMPTION,
    RELATION,
    PrivacyEvent,
    bucket_examples,
    epsilon,
    keep_compositions,
)
from server.core.dp_bounds import gradient_bound, noise_floor, poisson_ceiling
from server.core.errors import InvalidInput
from server.core.events import PrivacyCharged
from server.core.ports import Lease

__all__ = ["DeviceLedger", "PrivacyLedger", "PrivacyPolicy", "Refusal", "poisson_ceiling"]

MAX_LOCAL_EXAMPLES = 10**9
PRIVACY_RETRY_AFTER = 3600.0  # a device out of budget asks again in an hour (an admin may raise the budget)
COMPOSITIONS = 128  # composed PLDs kept (two per active device: ~64 devices' grants compose one step)
PRIVATE_SAMPLERS = ("exact",)  # norm-Laplace samplers whose noise gives the stated ε ("paper" does not)


@dataclass(frozen=True)
class PrivacyPolicy:
    """What every DP task uses: clip bound C, noise multiplier σ, the per-device budget and δ."""

    clip: float = 1.0
    noise_multiplier: float = 1.1
    epsilon_budget: float | None = 8.0  # None: ε is reported, never enforced
    delta: float = DEFAULT_DELTA  # fixed; a device with N ≤ 1/δ examples gets no task
    examples_tolerance: float = 2.0  # N stays within this factor of the first N charged

    def __post_init__(self) -> None:
        for name in ("clip", "noise_multiplier"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"DP {name} must be positive and finite, got {value}")
        if self.epsilon_budget is not None and not (
            math.isfinite(self.epsilon_budget) and self.epsilon_budget > 0
        ):
            raise ValueError(f"the ε budget must be positive and finite, got {self.epsilon_budget}")
        if not (isinstance(self.delta, int | float) and math.isfinite(self.delta) and 0 < self.delta < 1):
            raise ValueError(f"δ must be in (0, 1), got {self.delta}")
        if not (math.isfinite(self.examples_tolerance) and self.examples_tolerance >= 1):
            raise ValueError(f"the local-examples tolerance must be >= 1, got {self.examples_tolerance}")


@dataclass
class DeviceLedger:
    """One device's DP steps, grouped by (σ, q), its pure ε, and the N it reported."""

    local_examples: int | None = None  # the last N charged
    anchor_examples: int | None = None  # the first N charged: every later N stays within the tolerance of it
    steps: Counter[tuple[float, float]] = field(default_factory=Counter)
    last_task_at: float | None = None
    last_rate: float | None = None
    last_sigma: float | None = None  # σ of its last Gaussian step (a strategy's round may set its own)
    refused: bool = False  # its last request was refused for the budget (cleared by the next task)
    pure_epsilon: float = 0.0  # Σ ε of its pure (norm-Laplace) steps: basic composition
    pure_steps: int = 0
    last_pure: float | None = None  # the ε of its last pure step

    @property
    def tasks(self) -> int:
        return sum(self.steps.values()) + self.pure_steps

    def events(self) -> list[PrivacyEvent]:
        return [PrivacyEvent(s, q, n) for (s, q), n in sorted(self.steps.items())]

    def projected(self, noise_multiplier: float, sampling_rate: float, delta: float) -> float:
        """The device's ε at δ if one more Gaussian step were charged: one PLD composition (cached)."""
        more = [*self.events(), PrivacyEvent(noise_multiplier, sampling_rate)]
        return epsilon(more, delta) + self.pure_epsilon

    def add(self, noise_multiplier: float, sampling_rate: float) -> None:
        self.steps[(noise_multiplier, sampling_rate)] += 1
        self.last_rate, self.last_sigma, self.refused = sampling_rate, noise_multiplier, False

    def add_pure(self, epsilon: float) -> None:
        self.pure_epsilon += epsilon
        self.pure_steps += 1
        self.last_pure, self.refused = epsilon, False

    def spent(self, delta: float) -> float:
        """PLD ε of the Gaussian steps at δ plus Σ ε of the pure ones."""
        return epsilon(self.events(), delta) + self.pure_epsilon


@dataclass(frozen=True)
class Refusal:
    reason: str
    detail: str


class PrivacyLedger:
    """Hands out DP terms within each device's budget and keeps the charges (loaded from storage)."""

    def __init__(self, policy: PrivacyPolicy, charges: Iterable[PrivacyCharged] = ()) -> None:
        import dp_accounting.pld  # noqa: F401 - imported here (~1 s), not under the first grant's lock
        import scipy.stats  # noqa: F401 - the push bounds' quantiles

        self.policy = policy
        keep_compositions(COMPOSITIONS)
        self.devices: dict[str, DeviceLedger] = {}
        self._lock = threading.Lock()  # the API's threads read while the coordinator charges
        self._tasks: dict[str, PrivacyCharged] = {}  # by task: a lease recalled after a restart is still DP
        for charge in charges:
            self.record(charge)

    def record(self, charge: PrivacyCharged) -> None:
        with self._lock:
            ledger = self.devices.setdefault(charge.device_id, DeviceLedger())
            if ledger.anchor_examples is None and charge.local_examples > 0:
                ledger.anchor_examples = charge.local_examples
            ledger.local_examples = charge.local_examples
            ledger.last_task_at = charge.at
            if charge.mechanism == NORM_LAPLACE:
                ledger.add_pure(charge.epsilon)
            else:
                ledger.add(charge.noise_multiplier, charge.sampling_rate)
            self._tasks[charge.task_id] = charge

    def charged(self, task_id: str) -> bool:
        return task_id in self._tasks

    def check_examples(self, device_id: str, local_examples: Any) -> int:
        """The device's reported local dataset size N, validated (an ``InvalidInput`` says why): an integer
        (not a string or a bool), in range, and within ``examples_tolerance`` of the first N this device was
        charged with, so N cannot walk by small steps to any size (finding 14); and a bucket value
        (``bucket_examples``), as an honest device reports it."""
        if local_examples is None:
            raise InvalidInput("DP is on: the task request must report local_examples (the device's N)")
        if isinstance(local_examples, bool) or not isinstance(local_examples, int):
            raise InvalidInput(f"local_examples must be an integer, got {local_examples!r}")
        if not 1 <= local_examples <= MAX_LOCAL_EXAMPLES:
            raise InvalidInput(f"local_examples must be in [1, {MAX_LOCAL_EXAMPLES}], got {local_examples}")
        if local_examples != bucket_examples(local_examples):  # the exact N tells D from D ∪ {x}
            raise InvalidInput(
                f"DP is on: report local_examples as its bucket, {bucket_examples(local_examples)} for"
                f" {local_examples} (fleet_protocol.accounting.bucket_examples), never the exact N"
            )
        anchor = self.devices.get(device_id, DeviceLedger()).anchor_examples
        if anchor is not None:
            factor = self.policy.examples_tolerance
            if not anchor / factor <= local_examples <= anchor * factor:
                raise InvalidInput(
                    f"local_examples {local_examples} is more than {factor:g}x away from {anchor}, the N this"
                    " device first reported (its N may drift only within that factor in total)"
                )
        return local_examples

    def grant_terms(
        self, device_id: str, local_examples: Any, batch_size: int, step: dict[str, Any] | None
    ) -> dict[str, Any] | Refusal:
        """A DP task's terms for this device (its reported N checked first), or why it may not have one. A
        strategy's own terms (``step``: AUDP/MAPA's pure-ε steps, van Dijk's rounds) replace the policy's."""
        examples = self.check_examples(device_id, local_examples)
        if step is not None and step.get("mechanism") == LOCAL_SGD:
            return self.round_terms(device_id, examples, step)
        if step is not None:
            return self.pure_terms(device_id, examples, step)
        return self.terms(device_id, examples, batch_size)

    def _delta(self, local_examples: int) -> float | Refusal:
        """The policy's δ, or a refusal when δ ≥ 1/N: δ must stay well below one example's share."""
        delta = self.policy.delta
        if delta * local_examples >= 1:
            return Refusal(
                "delta_too_large",
                f"δ = {delta:.2e} is not below 1/N = {1 / local_examples:.2e} for N = {local_examples}:"
                " an (ε, δ) guarantee that allows one example in N to leak protects nothing",
            )
        return delta

    def terms(self, device_id: str, local_examples: int, batch_size: int) -> dict[str, Any] | Refusal:
        """The task's DP terms, or a refusal when the task would take the device past its budget."""
        batch_size = min(batch_size, local_examples)  # a device cannot sample more than it holds
        q = batch_size / local_examples
        sigma = self.policy.noise_multiplier
        granted = self._gaussian(device_id, local_examples, sigma, q)
        if isinstance(granted, Refusal):
            return granted
        return {
            "mechanism": MECHANISM,
            "clip": self.policy.clip,
            "noise_multiplier": sigma,
            "sampling_rate": q,
            "expected_batch": batch_size,
            **granted,
        }

    def round_terms(
        self, device_id: str, local_examples: int, step: dict[str, Any]
    ) -> dict[str, Any] | Refusal:
        """A local SGD round's terms (``step``: round, local_steps s, step_size; clip and noise_multiplier,
        None for the policy's) completed for this device: q = s/N, charged as one Poisson-subsampled
        Gaussian step at its own σ and q, or a refusal. The device noises every one of the round's s steps
        and each example is in at most one, which makes the round that one event under replace-one
        (client/_privacy.py ``local_sgd_round`` gives the argument)."""
        steps = int(step["local_steps"])
        q = min(1.0, steps / local_examples)
        sigma = float(step.get("noise_multiplier") or self.policy.noise_multiplier)
        clip = float(step.get("clip") or self.policy.clip)
        granted = self._gaussian(device_id, local_examples, sigma, q)
        if isinstance(granted, Refusal):
            return granted
        return {
            **step,
            "clip": clip,
            "noise_multiplier": sigma,
            "sampling_rate": q,
            "expected_batch": steps,
            **granted,
        }

    def _gaussian(
        self, device_id: str, local_examples: int, sigma: float, q: float
    ) -> dict[str, Any] | Refusal:
        """The δ and projected ε of one more Gaussian step at (σ, q) for this device, or why it may not
        have one (δ too large for its N, or past its budget): one PLD composition."""
        delta = self._delta(local_examples)
        if isinstance(delta, Refusal):
            return delta
        ledger = self.devices.get(device_id, DeviceLedger())
        projected = ledger.projected(sigma, q, delta)
        refusal = self._over_budget(device_id, ledger, projected, delta)
        return refusal or {"delta": delta, "epsilon_after": projected}

    def pure_terms(
        self, device_id: str, local_examples: int, step: dict[str, Any]
    ) -> dict[str, Any] | Refusal:
        """A strategy's pure-ε step terms (``step["epsilon_step"]``) completed for this device, or a refusal
        when its noise sampler is not ε-DP, δ is too large for N, or the step would pass the budget."""
        if step.get("noise") not in PRIVATE_SAMPLERS:
            return Refusal(
                "dp_sampler_not_private",
                f"the {step.get('noise')!r} norm-Laplace sampler does not give the stated ε (DP is on)",
            )
        delta = self._delta(local_examples)
        if isinstance(delta, Refusal):
            return delta
        ledger = self.devices.get(device_id, DeviceLedger())
        projected = ledger.spent(delta) + float(step["epsilon_step"])
        refusal = self._over_budget(device_id, ledger, projected, delta)
        if refusal is not None:
            return refusal
        q = min(1.0, int(step["expected_batch"]) / local_examples)
        return {**step, "sampling_rate": q, "delta": delta, "epsilon_after": projected}

    def _over_budget(
        self, device_id: str, ledger: DeviceLedger, projected: float, delta: float
    ) -> Refusal | None:
        budget = self.policy.epsilon_budget
        if budget is None or projected <= budget:
            return None
        if device_id in self.devices:
            self.devices[device_id].refused = True
        return Refusal(
            "privacy_budget_exhausted",
            f"this device has spent ε = {ledger.spent(delta):.3f} of its {budget:g} budget (δ = {delta:.2e});"
            f" one more task would take it to {projected:.3f}",
        )

    def gradient_bound(self, batch_size: int, num_params: int, terms: dict[str, Any] | None = None) -> float:
        """The largest norm a push can have but with negligible probability (server/core/dp_bounds.py)."""
        p = self.policy
        return gradient_bound(p.clip, p.noise_multiplier, batch_size, num_params, terms)

    def noise_floor(
        self, batch_size: int, num_params: int, terms: dict[str, Any] | None = None
    ) -> float | None:
        """The smallest norm a noised push can have but with negligible probability (None: no floor)."""
        p = self.policy
        return noise_floor(p.clip, p.noise_multiplier, batch_size, num_params, terms)

    def bound(self, lease: Lease, num_params: int, terms: dict[str, Any] | None = None) -> None:
        """Set a DP lease's push norm bound and floor from its terms (at grant) or its charge (a lease
        recalled after a restart; charges written before migration 0008 have no floor). A pure step's
        bound replaces max_gradient_norm: its noise legitimately exceeds any fixed bound, while a Gaussian
        task's bound is the smaller of the two."""
        charge = self._tasks.get(lease.task_id)
        if terms is None and charge is not None and charge.norm_bound is not None:
            lease.dp_bound, lease.dp_floor = charge.norm_bound, charge.norm_floor
            lease.dp_bound_replaces = charge.mechanism in (NORM_LAPLACE, LOCAL_SGD)
            return
        lease.dp_bound = self.gradient_bound(lease.batch_size, num_params, terms)
        lease.dp_floor = self.noise_floor(lease.batch_size, num_params, terms)
        lease.dp_bound_replaces = terms is not None and terms.get("mechanism") in (NORM_LAPLACE, LOCAL_SGD)

    def charge(
        self,
        lease: Lease,
        terms: dict[str, Any],
        *,
        local_examples: int | None,
        at: float,
    ) -> PrivacyCharged:
        """Enter a granted DP task in its device's ledger; the event to write with the grant."""
        pure = terms.get("mechanism") == NORM_LAPLACE
        charge = PrivacyCharged(
            device_id=lease.device_id,
            task_id=lease.task_id,
            model_id=lease.model_id,
            at=at,
            noise_multiplier=float(terms["noise_multiplier"]),
            sampling_rate=float(terms["sampling_rate"]),
            local_examples=int(local_examples or 0),
            mechanism=str(terms.get("mechanism", MECHANISM)),
            epsilon=float(terms["epsilon_step"]) if pure else 0.0,
            norm_bound=lease.dp_bound,
            norm_floor=lease.dp_floor,
        )
        self.record(charge)
        return charge

    def device_view(self, device_id: str) -> dict[str, Any]:
        """A device's ledger: tasks, N, δ, ε (PLD under replace-one, enforced), budget left."""
        with self._lock:  # a consistent copy; the accounting runs outside the lock
            ledger = self.devices.get(device_id, DeviceLedger())
            copy = replace(ledger, steps=Counter(ledger.steps))
        delta = self.policy.delta
        spent = copy.spent(delta)
        return {
            "device_id": device_id,
            "tasks": copy.tasks,
            "local_examples": copy.local_examples,
            "delta": delta,
            "epsilon": spent,
            "epsilon_budget": self.policy.epsilon_budget,
            "exhausted": copy.refused or self._exhausted(copy, spent, delta),
            "last_task_at": copy.last_task_at,
            "epsilon_pure": copy.pure_epsilon,
        }

    def _exhausted(self, ledger: DeviceLedger, spent: float, delta: float) -> bool:
        """True when one more task like its last (Gaussian at its last σ and rate, or pure at its last ε)
        would not fit its budget; ``spent`` is the device's ε now."""
        budget = self.policy.epsilon_budget
        if budget is None:
            return False
        if ledger.last_pure is not None and spent + ledger.last_pure > budget:
            return True
        if not ledger.steps or ledger.last_rate is None:
            return False
        sigma = ledger.last_sigma or self.policy.noise_multiplier
        return ledger.projected(sigma, ledger.last_rate, delta) > budget

    def overview(self) -> dict[str, Any]:
        """Every device's ε and the overall figure: the largest device ε (devices hold disjoint data)."""
        with self._lock:
            device_ids = sorted(self.devices)
        views = [self.device_view(d) for d in device_ids]
        return {
            "mechanism": MECHANISM,
            "accountant": f"pld ({RELATION}, pessimistic)",
            "assumption": ASSUMPTION,
            "pure_mechanism": NORM_LAPLACE,
            "pure_assumption": PURE_ASSUMPTION,
            "clip": self.policy.clip,
            "noise_multiplier": self.policy.noise_multiplier,
            "epsilon_budget": self.policy.epsilon_budget,
            "delta": self.policy.delta,
            "devices": views,
            "epsilon_max": max((v["epsilon"] for v in views), default=0.0),
            "exhausted": sum(v["exhausted"] for v in views),
        }
