"""Privacy accounting for DP tasks, through Google's dp-accounting (PLD and RDP back-ends).

Every Gaussian DP task is one *Poisson-subsampled Gaussian* event on the device's own dataset: each of
its examples enters the batch independently with probability q, each example's gradient is clipped to C
and Gaussian noise of standard deviation σC is added to their sum (client/_privacy.py). A device's ε is the
composition of its events under **replace-one** adjacency (``RELATION``): the device reports its dataset
size (bucketed, ``bucket_examples``), so N is public and what is protected is the content, label included,
of any one example. The ledger charges PLD ε (pessimistic, an upper bound) at a fixed δ (``DEFAULT_DELTA``);
RDP under add/remove-one is kept for comparisons with the literature only.
"""

from __future__ import annotations

import math
import threading
import warnings
from collections import Counter, OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

__all__ = [
    "ASSUMPTION",
    "MECHANISM",
    "NORM_LAPLACE",
    "PURE_ASSUMPTION",
    "ORDERS",
    "PrivacyEvent",
    "calibrate_noise",
    "ADD_OR_REMOVE",
    "DEFAULT_DELTA",
    "RELATION",
    "REPLACE_ONE",
    "bucket_examples",
    "epsilon",
    "keep_compositions",
    "norm_laplace_bound",
    "norm_laplace_second_moment",
    "pld_epsilon",
    "rdp_epsilon",
    "rdp_of",
    "replace_one_rdp",
]

MECHANISM = "dpsgd-poisson-gaussian/1"
NORM_LAPLACE = "clip-normlaplace/1"  # AUDP/MAPA's step (issue 16): pure ε, counted by basic composition
LOCAL_SGD = "local-sgd-round/1"  # van Dijk et al.'s round (issue 16): a Poisson-subsampled Gaussian sum
TAIL = 1e-12  # a norm-Laplace push is refused above the noise radius's (1 − TAIL)-quantile plus the clip

ADD_OR_REMOVE = "add-or-remove-one"  # the literature's usual relation (N secret): comparisons only
REPLACE_ONE = "replace-one"  # N public (bucketed): one example's content, label included, is protected
RELATION = REPLACE_ONE  # what the ledger charges
DEFAULT_DELTA = 1e-8  # fixed, not 1/N²: a grant is refused when δ ≥ 1/N (issue 27)
MIN_CALIBRATED_SIGMA = 0.3  # calibrate_noise's PLD search: below, σ protects next to nothing
MAX_CALIBRATED_SIGMA = 1000.0  # calibrate_noise's search stops here (σ above drowns any gradient)
PLD_INTERVAL = 1e-3  # PLD value discretisation: pessimistic (an upper bound)
PLD_STEPS = 128  # one-step PLDs kept by (σ, q): up to ~0.3 MB each

PURE_ASSUMPTION = (
    "A norm-Laplace step (AUDP/MAPA) is ε-DP (pure) per step under replace-one adjacency: b distinct "
    "examples, each clipped to G, averaged (sensitivity 2G/b ≤ ΔS), noise of density ∝ exp(−ε‖η‖/ΔS) from "
    "the exact sampler. Steps compose by basic composition (Σ ε). A device with both kinds of steps "
    "reports the PLD ε of its Gaussian steps at δ plus Σ ε of its pure steps, δ unchanged. The 'paper' "
    "noise sampler does not give the stated ε and is refused while DP is on."
)

ASSUMPTION = (
    "Example-level (ε, δ)-DP of each device's own dataset under replace-one adjacency: the device reports "
    "its dataset size N bucketed (public), never its labels or loss, so what is protected is the content, "
    "label included, of any one of its examples. Threat model: an honest-but-curious coordinator and "
    "honest device software. Each DP task is one Poisson-subsampled Gaussian step (each local example "
    "sampled independently at the granted q, each example's gradient clipped to C, N(0, σ²C²) added to "
    "the sum), or one van Dijk local-SGD round noised at every step (each example is in a round at most "
    "once), accounted with privacy loss distributions (pessimistic) at a fixed δ. When a device works is "
    "not random, so no amplification from participation is claimed: every task granted counts, pushed or "
    "not, which makes ε an upper bound. Devices hold disjoint data, so an example's ε is its device's; the "
    "overall figure is the largest device ε. Not user-level: all of one person's examples together are "
    "protected only at ε times their number (group privacy)."
)

# Integer orders: the fractional ones below 2 fail to converge at large q (q = 0.5 is common here:
# 100 of 200 local digits) and only tighten ε slightly when q is small.
ORDERS: tuple[float, ...] = (*range(2, 65), 80, 96, 128, 192, 256, 512, 1024)


@dataclass(frozen=True)
class PrivacyEvent:
    """``count`` Poisson-subsampled Gaussian steps at noise multiplier σ and sampling rate q."""

    noise_multiplier: float
    sampling_rate: float
    count: int = 1

    def __post_init__(self) -> None:
        if not (math.isfinite(self.noise_multiplier) and self.noise_multiplier > 0):
            raise ValueError(f"noise multiplier must be positive and finite, got {self.noise_multiplier}")
        if not (0 < self.sampling_rate <= 1):
            raise ValueError(f"sampling rate must be in (0, 1], got {self.sampling_rate}")
        if self.count < 0:
            raise ValueError(f"count must be >= 0, got {self.count}")


def bucket_examples(local_examples: int) -> int:
    """What a DP device reports as its N: the largest m·2^k ≤ N with 8 ≤ m < 16 (N itself below 16).

    Eight buckets an octave: the server's q = B/bucket is at most 9/8 of B/N's, and the exact N, which
    would tell a dataset from one with an example added, never leaves the device."""
    n = int(local_examples)
    if n < 1:
        raise ValueError(f"local_examples must be >= 1, got {local_examples}")
    if n < 16:
        return n
    shift = n.bit_length() - 4
    return (n >> shift) << shift


def _relation(relation: str):  # noqa: ANN202 - dp_accounting types are untyped
    import dp_accounting

    relations = {
        ADD_OR_REMOVE: dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
        REPLACE_ONE: dp_accounting.NeighboringRelation.REPLACE_ONE,
    }
    if relation not in relations:
        raise ValueError(f"unknown neighbouring relation {relation!r}; known: {sorted(relations)}")
    return relations[relation]


def _dp_event(event: PrivacyEvent):  # noqa: ANN202 - dp_accounting types are untyped
    import dp_accounting

    step = dp_accounting.PoissonSampledDpEvent(
        event.sampling_rate, dp_accounting.GaussianDpEvent(event.noise_multiplier)
    )
    return dp_accounting.SelfComposedDpEvent(step, event.count)


@lru_cache(maxsize=4096)
def _rdp_one(noise_multiplier: float, sampling_rate: float) -> np.ndarray:
    from dp_accounting.rdp import RdpAccountant

    accountant = RdpAccountant(list(ORDERS))
    accountant.compose(_dp_event(PrivacyEvent(noise_multiplier, sampling_rate)))
    vector = np.array(accountant.rdp, dtype=np.float64)
    vector.setflags(write=False)
    return vector


def rdp_of(events: Iterable[PrivacyEvent]) -> np.ndarray:
    """The RDP curve (one value per order in ``ORDERS``) of the composed events: RDP adds up."""
    total = np.zeros(len(ORDERS))
    for event in events:
        if event.count:
            total += event.count * _rdp_one(event.noise_multiplier, event.sampling_rate)
    return total


def rdp_epsilon(rdp: np.ndarray, delta: float) -> float:
    """ε at δ from an RDP curve (dp-accounting's conversion, which picks the best order)."""
    from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

    _check_delta(delta)
    if not np.any(rdp):
        return 0.0
    return float(compute_epsilon(np.array(ORDERS), rdp, delta)[0])


def epsilon(
    events: Iterable[PrivacyEvent], delta: float, *, backend: str = "pld", relation: str = RELATION
) -> float:
    """ε at δ of the composed events: ``pld`` (what the ledger charges, under ``relation``) or ``rdp``
    (add/remove-one only: dp-accounting's RDP has no replace-one Poisson subsampling)."""
    events = [e for e in events if e.count]
    if backend == "pld":
        return pld_epsilon(events, delta, relation=relation)
    if backend == "rdp":
        if relation != ADD_OR_REMOVE:
            raise ValueError("the rdp back-end accounts add/remove-one only; use pld for replace-one")
        return rdp_epsilon(rdp_of(events), delta)
    raise ValueError(f"unknown accountant back-end {backend!r} (pld or rdp)")


def pld_epsilon(events: Iterable[PrivacyEvent], delta: float, *, relation: str = RELATION) -> float:
    """ε at δ with privacy loss distributions (pessimistic: an upper bound), cached on the composition.

    Steps of the same (σ, q) are merged first, so a ledger's projection (its history plus one step) and the
    history it becomes once charged are one cache entry. A composition one step past a recent one is that
    one's PLD composed with the step's (a few ms: ``_pld_of``), not rebuilt from scratch."""
    _check_delta(delta)
    counts: Counter[tuple[float, float]] = Counter()
    for e in events:
        counts[(e.noise_multiplier, e.sampling_rate)] += e.count
    key = tuple(sorted((s, q, n) for (s, q), n in counts.items() if n))
    return _pld_epsilon(key, delta, relation) if key else 0.0


@lru_cache(maxsize=8192)
def _pld_epsilon(key: tuple[tuple[float, float, int], ...], delta: float, relation: str) -> float:
    return float(_pld_of(key, relation).get_epsilon_for_delta(delta))


@lru_cache(maxsize=PLD_STEPS)
def _pld_step(noise_multiplier: float, sampling_rate: float, relation: str):  # noqa: ANN202 - untyped
    """One Poisson-subsampled Gaussian step's PLD, as dp-accounting's ``PLDAccountant`` builds it (the
    costly part, 20-90 ms: kept for the (σ, q) pairs in use)."""
    from dp_accounting.pld import privacy_loss_distribution

    PrivacyEvent(noise_multiplier, sampling_rate)  # validates σ and q
    return privacy_loss_distribution.from_gaussian_mechanism(
        standard_deviation=noise_multiplier,
        value_discretization_interval=PLD_INTERVAL,
        sampling_prob=sampling_rate,
        neighboring_relation=_relation(relation),
    )


_COMPOSED: OrderedDict[tuple[Any, str], Any] = OrderedDict()  # recent compositions' PLDs, LRU
_COMPOSED_LOCK = threading.Lock()
_KEEP = [16]  # how many: a device's own ledger needs its history and the next step's (up to ~1 MB each)


def keep_compositions(entries: int) -> None:
    """Keep at least ``entries`` composed PLDs (LRU, up to ~1 MB each): a server holding many devices'
    ledgers keeps two per active device (its history and the next step's), so a grant composes one step
    instead of rebuilding the device's whole history."""
    with _COMPOSED_LOCK:
        _KEEP[0] = max(_KEEP[0], int(entries))


def _pld_of(key: tuple[tuple[float, float, int], ...], relation: str):  # noqa: ANN202 - untyped
    """The composed PLD of ``key`` ((σ, q, count) sorted): a cached one, or a cached composition one step
    shorter composed with that step, or every step's PLD self-composed and composed (what the accountant
    does). dp-accounting's compositions return new objects, so cached ones are shared safely."""
    with _COMPOSED_LOCK:
        hit = _COMPOSED.get((key, relation))
        if hit is not None:
            _COMPOSED.move_to_end((key, relation))
            return hit
        parent = None
        for i, (s, q, n) in enumerate(key):
            shorter = key[:i] + (((s, q, n - 1),) if n > 1 else ()) + key[i + 1 :]
            parent = _COMPOSED.get((shorter, relation)) if shorter else None
            if parent is not None:
                break
    if parent is not None:
        pld = parent.compose(_pld_step(s, q, relation))
    else:
        pld = None
        for s, q, n in key:
            part = _pld_step(s, q, relation)
            part = part.self_compose(n) if n > 1 else part
            pld = part if pld is None else pld.compose(part)
    with _COMPOSED_LOCK:
        _COMPOSED[(key, relation)] = pld
        while len(_COMPOSED) > _KEEP[0]:
            _COMPOSED.popitem(last=False)
    return pld


def calibrate_noise(
    target_epsilon: float, delta: float, sampling_rate: float, steps: int, *, relation: str = RELATION
) -> float:
    """The smallest noise multiplier σ whose ``steps`` steps at rate q stay within (ε, δ): under
    replace-one by PLD (what the ledger charges; a second or two), under add/remove-one by RDP.

    PLD searches σ in [``MIN_CALIBRATED_SIGMA``, ``MAX_CALIBRATED_SIGMA``] only: a target the smallest σ
    meets gets it; one that needs more than the largest (whose noise would drown any gradient) raises
    ValueError."""
    import dp_accounting
    from dp_accounting.pld import PLDAccountant
    from dp_accounting.rdp import RdpAccountant

    if not (math.isfinite(target_epsilon) and target_epsilon > 0):
        raise ValueError(f"target ε must be positive and finite, got {target_epsilon}")
    _check_delta(delta)
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    PrivacyEvent(1.0, sampling_rate)  # validates q

    def fresh():  # noqa: ANN202
        if relation == ADD_OR_REMOVE:
            return RdpAccountant(list(ORDERS))
        return PLDAccountant(_relation(relation), value_discretization_interval=PLD_INTERVAL)

    if relation == ADD_OR_REMOVE:
        bracket, tol = dp_accounting.LowerEndpointAndGuess(1e-2, 1.0), 1e-4
    else:
        bracket, tol = dp_accounting.ExplicitBracketInterval(MIN_CALIBRATED_SIGMA, MAX_CALIBRATED_SIGMA), 1e-3
        floor = [PrivacyEvent(MIN_CALIBRATED_SIGMA, sampling_rate, steps)]
        if epsilon(floor, delta, relation=relation) <= target_epsilon:
            return MIN_CALIBRATED_SIGMA  # a lax target: the smallest σ searched already meets it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            sigma = dp_accounting.calibrate_dp_mechanism(
                fresh, lambda s: _dp_event(PrivacyEvent(s, sampling_rate, steps)), target_epsilon, delta,
                bracket, tol=tol,
            )  # fmt: skip
        except (ValueError, dp_accounting.mechanism_calibration.NoBracketIntervalFoundError) as exc:
            raise ValueError(
                f"no σ up to {MAX_CALIBRATED_SIGMA:g} keeps {steps} steps at q = {sampling_rate:g} within"
                f" ε = {target_epsilon:g}, δ = {delta:g}"
            ) from exc
    return float(sigma)


def norm_laplace_second_moment(d: int, scale: float, sampler: str) -> float:
    """E‖η‖² of the norm-Laplace noise in ℝ^d at scale λ: d(d+1)λ² (exact, radius Gamma(d, λ)) or 2λ²
    (paper, radius Exp(λ)). MAPA's Δ_b and AUDP's rate use the one actually sampled."""
    if sampler == "exact":
        return float(d) * (d + 1) * scale**2
    if sampler == "paper":
        return 2.0 * scale**2
    raise ValueError(f"unknown noise sampler {sampler!r} (exact or paper)")


def norm_laplace_bound(clip: float, scale: float, d: int, sampler: str) -> float:
    """The largest norm a norm-Laplace push has but with probability TAIL: the mean of clipped gradients
    (≤ G) plus the radius's (1 − TAIL)-quantile. There is no hard bound (the radius is unbounded)."""
    from scipy import stats

    radius = stats.gamma(d, scale=scale) if sampler == "exact" else stats.expon(scale=scale)
    return float(clip + radius.isf(TAIL))


def _check_delta(delta: float) -> None:
    if not (math.isfinite(delta) and 0 < delta < 1):
        raise ValueError(f"δ must be in (0, 1), got {delta}")


def replace_one_rdp(noise_multiplier: float, sample_size: int, population: int, count: int) -> np.ndarray:
    """The RDP curve (``ORDERS``) of ``count`` Gaussian steps on ``sample_size`` examples drawn without
    replacement from ``population``, under replace-one adjacency; ``noise_multiplier`` is the noise std over
    the replace-one sensitivity (dp-accounting's bound, Wang-Balle-Kasiviswanathan Thm. 27).

    Not what the ledger charges (Poisson, add/remove): it is the mechanism closed forms such as
    A(DP)²SGD's Theorem 2 are stated for, so they can be checked against a numeric accountant."""
    import dp_accounting
    from dp_accounting.rdp import RdpAccountant

    if not 1 <= sample_size <= population:
        raise ValueError(f"need 1 <= sample_size <= population, got {sample_size} of {population}")
    PrivacyEvent(noise_multiplier, sample_size / population, count)  # validates σ and count
    accountant = RdpAccountant(list(ORDERS), dp_accounting.NeighboringRelation.REPLACE_ONE)
    step = dp_accounting.SampledWithoutReplacementDpEvent(
        population, sample_size, dp_accounting.GaussianDpEvent(noise_multiplier)
    )
    accountant.compose(dp_accounting.SelfComposedDpEvent(step, count))
    return np.array(accountant.rdp, dtype=np.float64)


# The guarantee as stated, in one place: docs/privacy.md quotes it word for word (a test checks) and the
# console's Privacy page shows it.
STATEMENT: tuple[tuple[str, str], ...] = (
    (
        "Unit",
        "One example of one device's own data: its features and its label. Each device's examples are "
        "accounted separately; devices hold disjoint data, so the overall figure is the largest device ε.",
    ),
    (
        "Neighbouring relation",
        "Replace-one: two datasets of the same size that differ in one example. The size N is public, "
        "reported only as its bucket (eight buckets an octave); nothing reveals whether an example is "
        "present beyond that bucket.",
    ),
    (
        "Threat model",
        "An honest-but-curious coordinator, and anyone who sees what it sees (its database, its logs, the "
        "published models); honest device software. The device does not trust the coordinator's terms: it "
        "keeps its own ledger and budget, refuses σ below its floor, q above its cap and mechanisms it "
        "does not know, so its own ε bound holds even against a coordinator that deviates.",
    ),
    (
        "What is sent",
        "Under DP a device sends its features (hardware and battery state), its bucketed N, the noised "
        "gradient, the expected batch size B, and its compute time and energy scaled to B. It sends no "
        "loss, no label counts, no sampled batch size.",
    ),
    (
        "What ε means",
        "For any two neighbouring datasets of a device and any set S of everything the device ever sends, "
        "P[output ∈ S] ≤ e^ε · P[output' ∈ S] + δ, with ε from privacy loss distributions over every task "
        "granted (pushed or not) and δ = 1e-8 fixed. Every task granted counts; no amplification from when "
        "a device works is claimed.",
    ),
    (
        "Not covered",
        "User-level privacy: all of one person's examples together are protected only at k·ε for k "
        "examples (group privacy); user-level DP would clip and noise each device's whole contribution and "
        "account across devices (DP-FedAvg). Timing: compute time scaled to B still carries the timing "
        "noise of the sampled batch. A reinstall starts a new ledger.",
    ),
)
