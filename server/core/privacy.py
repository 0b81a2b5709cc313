"""The privacy ledger: DP terms for each task, every device's ε, and the budget that stops a device.

A DP task is charged when it is granted (whether or not its gradient comes back: a lease handed out
may be released), so the ε shown is an upper bound. A request that is refused is never charged.

Two kinds of steps (issue 16): Poisson-subsampled Gaussian steps (this policy's terms, RDP-accounted) and
pure ε-DP norm-Laplace steps whose terms a strategy supplies (AUDP/MAPA, basic composition). A device's ε
is the RDP ε of its Gaussian steps at its δ plus the sum of its pure steps' ε, δ unchanged
(``PURE_ASSUMPTION``); the same budget applies to it. A strategy may also supply Gaussian terms of its own
(van Dijk et al.'s local SGD round, ``round_terms``): charged like the policy's steps, at its σ and its q.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fleet_protocol.accounting import (
    ASSUMPTION,
    DEFAULT_DELTA,
    LOCAL_SGD,
    MECHANISM,
    NORM_LAPLACE,
    PURE_ASSUMPTION,
    PrivacyEvent,
    norm_laplace_bound,
    pld_epsilon,
    rdp_epsilon,
    rdp_of,
)
from server.core.errors import InvalidInput
from server.core.events import PrivacyCharged
from server.core.ports import Lease

MAX_LOCAL_EXAMPLES = 10**9
PRIVACY_RETRY_AFTER = 3600.0  # a device out of budget asks again in an hour (an admin may raise the budget)
EXAMPLES_SLACK = 16  # a small dataset may grow by this many examples between tasks whatever the factor


def poisson_ceiling(expected_batch: int) -> int:
    """The most examples a Poisson batch of mean B holds, but for a binomial tail of about 1e-15."""
    return math.ceil(expected_batch + 8 * math.sqrt(expected_batch) + 8)


@dataclass(frozen=True)
class PrivacyPolicy:
    """What every DP task uses: clip bound C, noise multiplier σ, the per-device budget and δ."""

    clip: float = 1.0
    noise_multiplier: float = 1.1
    epsilon_budget: float | None = 8.0  # None: ε is reported, never enforced
    delta: float | None = None  # None: 1/N² for a device holding N examples
    examples_tolerance: float = 2.0  # N may change by at most this factor between two tasks

    def __post_init__(self) -> None:
        for name in ("clip", "noise_multiplier"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"DP {name} must be positive and finite, got {value}")
        if self.epsilon_budget is not None and not (
            math.isfinite(self.epsilon_budget) and self.epsilon_budget > 0
        ):
            raise ValueError(f"the ε budget must be positive and finite, got {self.epsilon_budget}")
        if self.delta is not None and not (math.isfinite(self.delta) and 0 < self.delta < 1):
            raise ValueError(f"δ must be in (0, 1), got {self.delta}")
        if not (math.isfinite(self.examples_tolerance) and self.examples_tolerance >= 1):
            raise ValueError(f"the local-examples tolerance must be >= 1, got {self.examples_tolerance}")


@dataclass
class DeviceLedger:
    """One device's DP steps, grouped by (σ, q), and its RDP curve (RDP composes by adding)."""

    local_examples: int | None = None
    steps: Counter[tuple[float, float]] = field(default_factory=Counter)
    rdp: np.ndarray | None = None
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

    def with_step(self, noise_multiplier: float, sampling_rate: float) -> np.ndarray:
        """The RDP curve after one more Gaussian step: RDP adds up, so only the new step is computed."""
        step = rdp_of([PrivacyEvent(noise_multiplier, sampling_rate)])
        return step if self.rdp is None else self.rdp + step

    def projected(self, noise_multiplier: float, sampling_rate: float, delta: float) -> float:
        """The device's ε at δ if one more Gaussian step were charged."""
        return rdp_epsilon(self.with_step(noise_multiplier, sampling_rate), delta) + self.pure_epsilon

    def add(self, noise_multiplier: float, sampling_rate: float) -> None:
        self.rdp = self.with_step(noise_multiplier, sampling_rate)
        self.steps[(noise_multiplier, sampling_rate)] += 1
        self.last_rate, self.last_sigma, self.refused = sampling_rate, noise_multiplier, False

    def add_pure(self, epsilon: float) -> None:
        self.pure_epsilon += epsilon
        self.pure_steps += 1
        self.last_pure, self.refused = epsilon, False

    def spent(self, delta: float | None) -> float:
        """RDP ε of the Gaussian steps at δ plus Σ ε of the pure ones."""
        gaussian = rdp_epsilon(self.rdp, delta) if self.rdp is not None and delta is not None else 0.0
        return gaussian + self.pure_epsilon


@dataclass(frozen=True)
class Refusal:
    reason: str
    detail: str


class PrivacyLedger:
    """Hands out DP terms within each device's budget and keeps the charges (loaded from storage)."""

    def __init__(self, policy: PrivacyPolicy, charges: Iterable[PrivacyCharged] = ()) -> None:
        self.policy = policy
        self.devices: dict[str, DeviceLedger] = {}
        self._lock = threading.Lock()  # the API's threads read while the coordinator charges
        self._tasks: dict[str, PrivacyCharged] = {}  # by task: a lease recalled after a restart is still DP
        for charge in charges:
            self.record(charge)

    def record(self, charge: PrivacyCharged) -> None:
        with self._lock:
            ledger = self.devices.setdefault(charge.device_id, DeviceLedger())
            ledger.local_examples = charge.local_examples
            ledger.last_task_at = charge.at
            if charge.mechanism == NORM_LAPLACE:
                ledger.add_pure(charge.epsilon)
            else:
                ledger.add(charge.noise_multiplier, charge.sampling_rate)
            self._tasks[charge.task_id] = charge

    def charged(self, task_id: str) -> bool:
        return task_id in self._tasks

    def delta_for(self, local_examples: int) -> float:
        return self.policy.delta if self.policy.delta is not None else DEFAULT_DELTA

    def check_examples(self, device_id: str, local_examples: Any) -> int:
        """The device's reported local dataset size N, validated (an ``InvalidInput`` says why)."""
        if local_examples is None:
            raise InvalidInput("DP is on: the task request must report local_examples (the device's N)")
        if isinstance(local_examples, bool) or not isinstance(local_examples, int):
            raise InvalidInput(f"local_examples must be an integer, got {local_examples!r}")
        if not 1 <= local_examples <= MAX_LOCAL_EXAMPLES:
            raise InvalidInput(f"local_examples must be in [1, {MAX_LOCAL_EXAMPLES}], got {local_examples}")
        before = self.devices.get(device_id, DeviceLedger()).local_examples
        if before is not None:
            factor = self.policy.examples_tolerance
            low, high = before / factor - EXAMPLES_SLACK, before * factor + EXAMPLES_SLACK
            if not low <= local_examples <= high:
                raise InvalidInput(
                    f"local_examples changed from {before} to {local_examples}: more than {factor:g}x"
                    f" (± {EXAMPLES_SLACK}) between two tasks"
                )
        return local_examples

    def terms(self, device_id: str, local_examples: int, batch_size: int) -> dict[str, Any] | Refusal:
        """The task's DP terms, or a refusal when the task would take the device past its budget."""
        batch_size = min(batch_size, local_examples)  # a device cannot sample more than it holds
        q = batch_size / local_examples
        sigma = self.policy.noise_multiplier
        delta = self.delta_for(local_examples)
        ledger = self.devices.get(device_id, DeviceLedger())
        projected = ledger.projected(sigma, q, delta)
        refusal = self._over_budget(device_id, ledger, projected, delta)
        if refusal is not None:
            return refusal
        return {
            "mechanism": MECHANISM,
            "clip": self.policy.clip,
            "noise_multiplier": sigma,
            "sampling_rate": q,
            "expected_batch": batch_size,
            "delta": delta,
            "epsilon_after": projected,
        }

    def pure_terms(
        self, device_id: str, local_examples: int, step: dict[str, Any]
    ) -> dict[str, Any] | Refusal:
        """A strategy's pure-ε step terms (``step["epsilon_step"]``) completed for this device, or a refusal
        when the step would take it past its budget (Gaussian RDP ε + Σ pure ε, at the device's δ)."""
        delta = self.delta_for(local_examples)
        ledger = self.devices.get(device_id, DeviceLedger())
        projected = ledger.spent(delta) + float(step["epsilon_step"])
        refusal = self._over_budget(device_id, ledger, projected, delta)
        if refusal is not None:
            return refusal
        q = min(1.0, int(step["expected_batch"]) / local_examples)
        return {**step, "sampling_rate": q, "delta": delta, "epsilon_after": projected}

    def round_terms(
        self, device_id: str, local_examples: int, step: dict[str, Any]
    ) -> dict[str, Any] | Refusal:
        """A local SGD round's terms (``step``: round, local_steps s, step_size; clip and noise_multiplier,
        None for the policy's) completed for this device: q = s/N, charged as one Poisson-subsampled
        Gaussian step of sensitivity C at its own σ and q, or a refusal past the budget. The device noises
        every one of the round's s steps and each example is in at most one, which makes the round that
        one event under replace-one (client/_privacy.py ``local_sgd_round`` gives the argument)."""
        steps = int(step["local_steps"])
        q = min(1.0, steps / local_examples)
        sigma = float(step.get("noise_multiplier") or self.policy.noise_multiplier)
        clip = float(step.get("clip") or self.policy.clip)
        delta = self.delta_for(local_examples)
        ledger = self.devices.get(device_id, DeviceLedger())
        projected = ledger.projected(sigma, q, delta)
        refusal = self._over_budget(device_id, ledger, projected, delta)
        if refusal is not None:
            return refusal
        return {
            **step,
            "clip": clip,
            "noise_multiplier": sigma,
            "sampling_rate": q,
            "expected_batch": steps,
            "delta": delta,
            "epsilon_after": projected,
        }

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
        """The largest gradient norm a clipped, noised push can have, except with negligible probability.

        Gaussian: (Σ clipped + noise) / B: the Poisson batch holds at most B + 8√B + 8 examples (a binomial
        tail of about 1e-15) of norm ≤ C each, and the noise's norm is at most σC(√d + 8) (a χ tail).
        Norm-Laplace (``terms``): G plus the noise radius's 1e-12 tail quantile (``norm_laplace_bound``).
        Local SGD round (a sum of s noised steps): C·ceil(s) for the clipped gradients plus the noise of s
        draws, √s·σC(√d + 8)."""
        if terms is not None and terms.get("mechanism") == NORM_LAPLACE:
            scale = float(terms["sensitivity"]) / float(terms["epsilon_step"])
            return norm_laplace_bound(float(terms["clip"]), scale, num_params, str(terms["noise"]))
        if terms is not None and terms.get("mechanism") == LOCAL_SGD:  # a sum of clipped gradients, not /B
            c, sigma = float(terms["clip"]), float(terms["noise_multiplier"])
            noise = sigma * c * math.sqrt(batch_size) * (math.sqrt(num_params) + 8)
            return c * poisson_ceiling(batch_size) + noise
        c, sigma, b = self.policy.clip, self.policy.noise_multiplier, batch_size
        return (c * poisson_ceiling(b) + sigma * c * (math.sqrt(num_params) + 8)) / b

    def bound(self, lease: Lease, num_params: int, terms: dict[str, Any] | None = None) -> None:
        """Set a DP lease's push norm bound from its terms (at grant) or its charge (a lease recalled after
        a restart). A pure step's bound replaces max_gradient_norm: its noise legitimately exceeds any
        fixed bound, while a Gaussian task's bound is the smaller of the two."""
        charge = self._tasks.get(lease.task_id)
        if terms is None and charge is not None and charge.mechanism in (NORM_LAPLACE, LOCAL_SGD):
            lease.dp_bound, lease.dp_bound_replaces = charge.norm_bound, charge.norm_bound is not None
            return
        lease.dp_bound = self.gradient_bound(lease.batch_size, num_params, terms)
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
            norm_bound=lease.dp_bound if pure or terms.get("mechanism") == LOCAL_SGD else None,
        )
        self.record(charge)
        return charge

    def device_view(self, device_id: str, *, tight: bool = False) -> dict[str, Any]:
        """A device's ledger: tasks, N, δ, ε (RDP, enforced; PLD too when ``tight``), budget left."""
        with self._lock:  # a consistent copy; the accounting runs outside the lock
            ledger = self.devices.get(device_id, DeviceLedger())
            n, events, rdp, last = ledger.local_examples, ledger.events(), ledger.rdp, ledger.last_task_at
            last_rate, last_sigma, refused = ledger.last_rate, ledger.last_sigma, ledger.refused
            pure, pure_steps, last_pure = ledger.pure_epsilon, ledger.pure_steps, ledger.last_pure
        delta = self.delta_for(n) if n is not None else self.policy.delta
        gaussian = rdp_epsilon(rdp, delta) if rdp is not None and delta is not None else 0.0
        spent = gaussian + pure
        view: dict[str, Any] = {
            "device_id": device_id,
            "tasks": sum(e.count for e in events) + pure_steps,
            "local_examples": n,
            "delta": delta,
            "epsilon": spent,
            "epsilon_budget": self.policy.epsilon_budget,
            "exhausted": refused
            or self._exhausted(rdp, gaussian, pure, delta, last_rate, last_sigma, last_pure),
            "last_task_at": last,
            "epsilon_pure": pure,
        }
        if tight:
            view["epsilon_pld"] = pld_epsilon(events, delta) if events and delta else 0.0
        return view

    def _exhausted(
        self,
        rdp: np.ndarray | None,
        gaussian: float,
        pure: float,
        delta: float | None,
        last_rate: float | None,
        last_sigma: float | None,
        last_pure: float | None,
    ) -> bool:
        """True when one more task like its last (Gaussian at its last σ and rate, or pure at its last ε)
        would not fit its budget; ``gaussian`` + ``pure`` is the device's ε now."""
        budget = self.policy.epsilon_budget
        if budget is None or delta is None:
            return False
        if last_pure is not None and gaussian + pure + last_pure > budget:
            return True
        if rdp is None or last_rate is None:
            return False
        more = rdp + rdp_of([PrivacyEvent(last_sigma or self.policy.noise_multiplier, last_rate)])
        return rdp_epsilon(more, delta) + pure > budget

    def overview(self) -> dict[str, Any]:
        """Every device's ε and the overall figure: the largest device ε (devices hold disjoint data)."""
        with self._lock:
            device_ids = sorted(self.devices)
        views = [self.device_view(d) for d in device_ids]
        return {
            "mechanism": MECHANISM,
            "accountant": "rdp (enforced); pld on request per device",
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
