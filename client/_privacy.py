"""Private gradients on the device, one function per mechanism the grant's ``dp`` terms may name, and one
dispatch (``private_step``) the worker calls.

DP-SGD (``dpsgd-poisson-gaussian/1``): Poisson-subsample the local data, clip each example's gradient, add
Gaussian noise. Norm-Laplace (``clip-normlaplace/1``, AUDP/MAPA): a fixed-size batch, per-example clipping
to G, the mean, and noise of density ∝ exp(−ε‖η‖/ΔS); see ``norm_laplace_gradient``. Local SGD round
(``local-sgd-round/1``, van Dijk et al.): one round of local SGD, every step's clipped gradient noised, and
the sum of the noised steps pushed; see ``local_sgd_round`` (why it is charged as one Gaussian event).

The clipping runs in the model's ``dp_train.onnx`` (per-example gradients clipped to global L2 norm C and
summed); this module samples, adds the noise and normalises. What leaves the device is then a Gaussian
mechanism of sensitivity C / expected_batch under add/remove-one adjacency on the device's own dataset,
with Poisson subsampling at rate q: exactly what the server's accountant assumes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from fleet_protocol import (
    GAUSSIAN_MECHANISM,
    LOCAL_SGD_MECHANISM,
    NOISE_SAMPLERS,
    NORM_LAPLACE_MECHANISM,
    DPTerms,
    Manifest,
)

from ._onnx_session import flat_gradient, training_feeds
from ._random import secure_generator

__all__ = [
    "ClippedGradientComputer",
    "DPGradientSession",
    "Examples",
    "PrivateGradient",
    "draw_batch",
    "local_sgd_round",
    "norm_laplace_gradient",
    "norm_laplace_noise",
    "poisson_sample",
    "private_gradient",
    "private_step",
]


class Examples(Protocol):
    """Anything holding a device's examples as arrays ``x`` (N, ...) and ``y`` (N,): a ``DeviceData``."""

    @property
    def x(self) -> np.ndarray: ...

    @property
    def y(self) -> np.ndarray: ...


@dataclass(frozen=True)
class _Arrays:
    x: np.ndarray
    y: np.ndarray


@runtime_checkable
class ClippedGradientComputer(Protocol):
    """Mean loss and Σ_i clip(g_i, C) (flat, manifest order) over one mini-batch."""

    num_params: int

    def clipped_sum(
        self, flat_params: np.ndarray, x: np.ndarray, y: np.ndarray, clip: float
    ) -> tuple[float, np.ndarray]: ...


class DPGradientSession:
    """An onnxruntime session over ``dp_train.onnx``: parameters, ``x``, ``y``, ``clip`` in; loss, sums out.

    Built like ``GradientSession`` (one inter-op thread, sequential), so the two time alike."""

    def __init__(self, manifest: Manifest, dp_onnx: bytes, threads: int = 1) -> None:
        import onnxruntime as ort

        if not manifest.dp_grad_names:
            raise ValueError(f"model {manifest.name!r} has no DP graph (its manifest names no dp_grad_names)")
        options = ort.SessionOptions()
        options.intra_op_num_threads = max(1, threads)
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        self.manifest = manifest
        self.threads = threads
        self.num_params = manifest.num_params
        self._session = ort.InferenceSession(dp_onnx, options, providers=["CPUExecutionProvider"])
        self._inputs = {i.name for i in self._session.get_inputs()}
        missing = {manifest.x_name, manifest.y_name, manifest.clip_name} - self._inputs
        if missing:
            raise ValueError(f"DP graph lacks inputs {sorted(missing)}")
        outputs = {o.name for o in self._session.get_outputs()}
        absent = [n for n in (manifest.loss_name, *manifest.dp_grad_names) if n not in outputs]
        if absent:
            raise ValueError(f"DP graph lacks outputs {absent[:10]}")
        self._outputs = [manifest.loss_name, *manifest.dp_grad_names]

    def __repr__(self) -> str:
        return f"DPGradientSession(model={self.manifest.name!r}, threads={self.threads})"

    def clipped_sum(
        self, flat_params: np.ndarray, x: np.ndarray, y: np.ndarray, clip: float
    ) -> tuple[float, np.ndarray]:
        """Mean loss over the batch and Σ_i g_i·min(1, C/‖g_i‖) as flat float32 (``num_params`` values).

        An empty batch (Poisson sampling may draw none) gives (nan, zeros) without running the graph."""
        clip = _check_clip(clip)
        if len(y) == 0:
            return math.nan, np.zeros(self.num_params, dtype=np.float32)
        feeds = training_feeds(self.manifest, self._inputs, flat_params, x, y)
        feeds[self.manifest.clip_name] = np.array(clip, dtype=np.float32)
        loss, *sums = self._session.run(self._outputs, feeds)
        return float(np.asarray(loss).reshape(())), flat_gradient(self.manifest, sums, "clipped sum")


@dataclass(frozen=True)
class PrivateGradient:
    """One DP-SGD step's result: the (non-private, local-only: never sent) mean loss, the noised gradient to
    push, and how many examples were drawn (local only: it scales the reported time and energy to B)."""

    loss: float
    gradient: np.ndarray
    examples: int


def poisson_sample(data: Examples, rate: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Each of ``data``'s examples kept independently with probability ``rate`` (Poisson subsampling: the
    batch size is Binomial(N, rate); the privacy amplification the accountant counts on requires it)."""
    if not (0.0 <= rate <= 1.0):
        raise ValueError(f"sampling rate must be in [0, 1], got {rate}")
    if len(data.x) != len(data.y):
        raise ValueError(f"x has {len(data.x)} examples, y {len(data.y)}")
    keep = rng.random(len(data.y)) < rate
    return data.x[keep], data.y[keep]


def private_gradient(
    session: ClippedGradientComputer,
    flat_params: np.ndarray,
    x_all: np.ndarray,
    y_all: np.ndarray,
    *,
    clip: float,
    noise_multiplier: float,
    expected_batch: int,
    sampling_rate: float | None = None,
    rng: np.random.Generator | None = None,
) -> PrivateGradient:
    """One DP-SGD gradient: (Σ_{i∈S} clip(g_i, C) + N(0, σ²C²·I)) / B with S Poisson-sampled at q.

    q is ``sampling_rate``, the rate the grant's terms state and the ledger charges (the server computes it
    from the bucketed N the device reported, not from the exact N; None: B/N, simulations only).

    The divisor is ``expected_batch`` B, not the realised |S|: dividing by |S| would make the output depend
    on whether one example is present in a way the noise does not cover; with a fixed B, adding or removing
    one example moves the noiseless sum by at most C, so the sensitivity is C/B and the noise σC/B.
    ``rng`` draws both the sample and the noise; leave it None outside tests: a fresh ChaCha20 generator
    keyed from the OS's secure randomness (``secure_generator``) is made on every call.
    """
    clip = _check_clip(clip)
    if not (math.isfinite(noise_multiplier) and noise_multiplier >= 0):
        raise ValueError(f"noise_multiplier must be finite and >= 0, got {noise_multiplier}")
    if isinstance(expected_batch, bool) or int(expected_batch) != expected_batch or expected_batch < 1:
        raise ValueError(f"expected_batch must be an integer >= 1, got {expected_batch}")
    if len(y_all) == 0 or len(x_all) != len(y_all):
        raise ValueError(f"need matching, non-empty x and y, got {len(x_all)} and {len(y_all)} examples")
    if rng is None:
        rng = secure_generator()
    rate = min(1.0, expected_batch / len(y_all)) if sampling_rate is None else float(sampling_rate)
    x, y = poisson_sample(_Arrays(x_all, y_all), rate, rng)
    loss, summed = session.clipped_sum(flat_params, x, y, clip)
    noise = rng.normal(0.0, noise_multiplier * clip, size=summed.shape)  # float64, then one cast
    gradient = ((summed.astype(np.float64) + noise) / expected_batch).astype(np.float32)
    return PrivateGradient(loss=loss, gradient=gradient, examples=len(y))


def draw_batch(n: int, batch: int, rng: np.random.Generator, *, replacement: bool = False) -> np.ndarray:
    """Indices of a fixed-size batch: ``batch`` distinct examples (all n when n < batch), or ``batch``
    draws with replacement (the paper's Alg. 1; an example drawn m times moves the mean by m·2G/b)."""
    if n < 1 or batch < 1:
        raise ValueError(f"need n >= 1 and batch >= 1, got n={n}, batch={batch}")
    if replacement:
        return rng.integers(0, n, size=batch)
    return rng.permutation(n)[: min(batch, n)]


def norm_laplace_noise(d: int, scale: float, rng: np.random.Generator, sampler: str = "exact") -> np.ndarray:
    """η ∈ ℝ^d with a direction uniform on the sphere and a radius by ``sampler`` (float64).

    "exact": radius ~ Gamma(d, scale), i.e. density ∝ exp(−‖η‖/scale) over ℝ^d: what the ε-DP proof needs
    (E‖η‖² = d(d+1)·scale²). "paper": radius ~ Exponential(scale), E‖η‖² = 2·scale², the variance MAPA's
    analysis assumes; it does NOT give the stated ε (reproduction of the paper's curves only)."""
    if sampler not in NOISE_SAMPLERS:
        raise ValueError(f"unknown noise sampler {sampler!r}; known: {NOISE_SAMPLERS}")
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"noise scale must be finite and > 0, got {scale}")
    direction = rng.standard_normal(d)
    direction /= np.linalg.norm(direction)
    radius = rng.gamma(d, scale) if sampler == "exact" else rng.exponential(scale)
    return radius * direction


def norm_laplace_gradient(
    session: ClippedGradientComputer,
    flat_params: np.ndarray,
    x_all: np.ndarray,
    y_all: np.ndarray,
    *,
    clip: float,
    sensitivity: float,
    epsilon: float,
    batch: int,
    noise: str = "exact",
    replacement: bool = False,
    rng: np.random.Generator | None = None,
) -> PrivateGradient:
    """AUDP/MAPA's step: (Σ_{i∈S} clip(g_i, G)) / b + η, η of scale λ = ΔS/ε (``norm_laplace_noise``).

    Clipping each example to G (not the batch mean, as Alg. 1 literally does) bounds the mean's change
    under replace-one adjacency by 2G/b, so ΔS ≥ 2G/b makes the step ε-DP (pure) with the exact sampler;
    terms that ask for less noise are refused here. Dividing by b even when fewer are held keeps that."""
    clip = _check_clip(clip)
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be finite and > 0, got {epsilon}")
    if isinstance(batch, bool) or int(batch) != batch or batch < 1:
        raise ValueError(f"batch must be an integer >= 1, got {batch}")
    if not sensitivity >= 2 * clip / batch * (1 - 1e-9):
        raise ValueError(
            f"sensitivity {sensitivity} is below 2·clip/batch = {2 * clip / batch}: under-noised"
        )
    if len(y_all) == 0 or len(x_all) != len(y_all):
        raise ValueError(f"need matching, non-empty x and y, got {len(x_all)} and {len(y_all)} examples")
    if rng is None:
        rng = secure_generator()
    index = draw_batch(len(y_all), batch, rng, replacement=replacement)
    loss, summed = session.clipped_sum(flat_params, x_all[index], y_all[index], clip)
    eta = norm_laplace_noise(summed.size, sensitivity / epsilon, rng, noise)
    gradient = (summed.astype(np.float64) / batch + eta).astype(np.float32)
    return PrivateGradient(loss=loss, gradient=gradient, examples=len(index))


UNCLIPPED = 1e30  # clip 0 in the terms (no DP): a bound no float32 gradient reaches


def local_sgd_round(
    session: ClippedGradientComputer,
    flat_params: np.ndarray,
    x_all: np.ndarray,
    y_all: np.ndarray,
    *,
    local_steps: int,
    step_size: float,
    clip: float,
    noise_multiplier: float,
    rng: np.random.Generator | None = None,
) -> PrivateGradient:
    """Van Dijk et al.'s client round, noised at every step: U = Σ_h y_h over s = ``local_steps`` steps,
    y_h = g_h + n_h, n_h ~ N(0, σ²C²I), ŵ_{h+1} = ŵ_h − η·y_h; U (a sum, not a mean) is pushed, the server
    steps v̂ −= η̄·U, and ŵ is discarded (the next round starts from the granted model).

    Sampling: each example joins the round independently with probability q = s/N (Poisson) and is put in
    one of the s steps uniformly at random; g_h = Σ clip(∇f(ŵ_h; ξ), C) over the examples in step h (none:
    g_h = 0 and the step is noise alone). So a round draws exactly s noises whatever was sampled, and each
    example is in it at most once.

    Why the ledger may charge the round as ONE Poisson-subsampled Gaussian event at (σ, q), sensitivity C,
    under replace-one: let D, D' differ in example j and couple all other randomness (the other examples'
    steps, the noises). With probability 1 − q, j is in no step and D, D' give the same transcript B; else
    j is in step h (uniform), giving A_h or A'_h. As P_D = (1/s)·Σ_h [(1 − q)·B + q·A_h], joint convexity
    of the hockey-stick divergence reduces the round to each h. Before step h the three are the same
    mechanism; at step h, given the released prefix (hence ŵ_h), y_h is Gaussian σC about G, G + v or
    G + v' (G: the other examples' clipped sum, ‖v‖, ‖v'‖ ≤ C: the in-cases differ by ≤ 2C); after h every
    step is the same mechanism applied to released values (j is in no other step). That is a post-processing
    of the ledger's pair (1 − q)N(0) + qN(v) vs (1 − q)N(0) + qN(v') (dp-accounting's REPLACE_ONE).
    The fixed count matters: with one step per sampled example (|S| steps), the case without j has one
    noise fewer than the cases with it, which is not that pair: on a loss whose steps undo the running sum
    (u → u − clip(u, C)), σ = 0.5, q = 0.1, s = 16, U's exact ε(1e-8) is 9.93 against a charge of 9.71.
    Noised once (U = Σ g_h + n, before issue 27), the later gradients depend on where j moved ŵ, and one
    example moved U by 33C on a 1-D non-convex loss at s = 16 (tests/test_vandijk_round.py).

    σ = 0 (no DP) is plain local SGD: one sampled example per step, in random order; ``clip`` 0 (only with
    σ = 0) leaves the gradients unclipped. ``loss``: the mean over the examples visited (local only)."""
    if isinstance(local_steps, bool) or int(local_steps) != local_steps or local_steps < 1:
        raise ValueError(f"local_steps must be an integer >= 1, got {local_steps}")
    if not (math.isfinite(step_size) and step_size > 0):
        raise ValueError(f"step_size must be finite and > 0, got {step_size}")
    if not (math.isfinite(noise_multiplier) and noise_multiplier >= 0):
        raise ValueError(f"noise_multiplier must be finite and >= 0, got {noise_multiplier}")
    if clip == 0 and noise_multiplier > 0:
        raise ValueError("noise needs a clip bound (clip 0 means unclipped: plain local SGD)")
    bound = UNCLIPPED if clip == 0 else _check_clip(clip)
    if len(y_all) == 0 or len(x_all) != len(y_all):
        raise ValueError(f"need matching, non-empty x and y, got {len(x_all)} and {len(y_all)} examples")
    if rng is None:
        rng = secure_generator()
    rate = min(1.0, local_steps / len(y_all))
    chosen = np.flatnonzero(rng.random(len(y_all)) < rate)
    noise = noise_multiplier * bound
    steps = _round_steps(chosen, int(local_steps), noise > 0, rng)
    w = np.array(flat_params, dtype=np.float32, copy=True)
    total = np.zeros(w.size, dtype=np.float64)
    loss_sum = 0.0
    for members in steps:
        step = np.zeros(w.size, dtype=np.float64)
        if len(members):
            loss, g = session.clipped_sum(w, x_all[members], y_all[members], bound)
            step += g
            loss_sum += loss * len(members)
        if noise > 0:
            step += rng.normal(0.0, noise, size=w.size)
        total += step
        w -= np.float32(step_size) * step.astype(np.float32)
    mean_loss = loss_sum / len(chosen) if len(chosen) else math.nan
    return PrivateGradient(loss=mean_loss, gradient=total.astype(np.float32), examples=len(chosen))


def _round_steps(chosen: np.ndarray, steps: int, noised: bool, rng: np.random.Generator) -> list[np.ndarray]:
    """The examples of each step of a round: with noise, ``steps`` steps, each sampled example in one drawn
    uniformly (``local_sgd_round`` says why the count is fixed); without, one step per example in random
    order."""
    if not noised:
        return [chosen[i : i + 1] for i in rng.permutation(len(chosen))]
    slot = rng.integers(0, steps, size=len(chosen))
    order = np.argsort(slot, kind="stable")
    return np.split(chosen[order], np.cumsum(np.bincount(slot, minlength=steps))[:-1])


def private_step(
    terms: DPTerms,
    session: ClippedGradientComputer,
    flat_params: np.ndarray,
    x_all: np.ndarray,
    y_all: np.ndarray,
    rng: np.random.Generator | None = None,
) -> PrivateGradient:
    """The private gradient the grant's terms ask for, by their mechanism (``rng``: simulation only)."""
    if terms.mechanism == GAUSSIAN_MECHANISM:
        return private_gradient(
            session,
            flat_params,
            x_all,
            y_all,
            clip=terms.clip,
            noise_multiplier=terms.noise_multiplier,
            expected_batch=terms.expected_batch,
            sampling_rate=terms.sampling_rate,
            rng=rng,
        )
    if terms.mechanism == NORM_LAPLACE_MECHANISM:
        assert terms.sensitivity is not None and terms.epsilon_step is not None  # DPTerms.from_json checks
        return norm_laplace_gradient(
            session,
            flat_params,
            x_all,
            y_all,
            clip=terms.clip,
            sensitivity=terms.sensitivity,
            epsilon=terms.epsilon_step,
            batch=terms.expected_batch,
            noise=terms.noise or "exact",
            replacement=terms.replacement,
            rng=rng,
        )
    if terms.mechanism == LOCAL_SGD_MECHANISM:
        assert terms.local_steps is not None and terms.step_size is not None  # DPTerms.from_json checks
        return local_sgd_round(
            session,
            flat_params,
            x_all,
            y_all,
            local_steps=terms.local_steps,
            step_size=terms.step_size,
            clip=terms.clip,
            noise_multiplier=terms.noise_multiplier,
            rng=rng,
        )
    raise ValueError(f"unknown DP mechanism {terms.mechanism!r}")


def _check_clip(clip: float) -> float:
    clip = float(clip)
    if not (math.isfinite(clip) and clip > 0):
        raise ValueError(f"clip must be finite and > 0, got {clip}")
    return clip
