"""The device's van Dijk round (client/_privacy.py ``local_sgd_round``, issue 27 finding 2): noised at every
step, a fixed number of noises, and each released step's noiseless part moved by at most 2C by one example
given the same released prefix (what the ledger's one Poisson-subsampled Gaussian event assumes); the
round noised once, as before, let one example move the sum by 33C on a 1-D non-convex loss."""

from __future__ import annotations

import math

import numpy as np
import pytest

from client._privacy import DPGradientSession, local_sgd_round, private_step
from fleet_protocol import LOCAL_SGD_MECHANISM, DPTerms
from models.manifest import builtin
from tests.support.dp_canaries import CANARY, FLAT, ORDINARY, Coordinates, Ridge, once_noised_round

C, ETA, START = 1.0, 0.1, 0.01  # Ridge: a step of η·C = 0.1 crosses the ridge at 0 from w = 0.01


def test_noised_once_one_example_moves_the_round_sum_by_33c():
    """The issue's worst case, reproduced with the old round: 16 ordinary examples after the canary (or a
    flat example in its place), s = 16, noise off to see the sums: U = 17C against −16C."""
    ridge, w0 = Ridge(), np.array([START], np.float32)
    x = np.array([CANARY] + [ORDINARY] * 16)
    neighbour = np.array([FLAT] + [ORDINARY] * 16)
    kw = {"step_size": ETA, "clip": C, "noise_multiplier": 0.0, "rng": np.random.default_rng(0)}
    with_canary = once_noised_round(ridge, w0, x, x, **kw)[0]
    without = once_noised_round(ridge, w0, neighbour, neighbour, **kw)[0]
    assert with_canary == pytest.approx(17 * C, rel=1e-4) and without == pytest.approx(-16 * C, rel=1e-4)
    assert with_canary - without == pytest.approx(33 * C, rel=1e-4)  # (2s + 1)C, where the ledger assumed 2C


class Recorder:
    """Wraps a computer and keeps every call's model and examples (one call per non-empty step)."""

    def __init__(self, inner: Ridge) -> None:
        self.inner, self.num_params, self.calls = inner, inner.num_params, []

    def clipped_sum(self, flat_params, x, y, clip):
        self.calls.append((np.array(flat_params, copy=True), np.array(x, copy=True)))
        return self.inner.clipped_sum(flat_params, x, y, clip)


@pytest.mark.parametrize("seed", range(6))
def test_each_noised_step_moves_by_at_most_2c_given_the_same_released_prefix(seed):
    """Same worst case, new round (N = 17, s = 16, σ = 1): at each step's model ŵ_h, which the released
    prefix fixes, the step's noiseless part with the canary and with an ordinary or a flat example in its
    place differ by ≤ 2C, and by 0 in every step without the canary; the canary is in one step at most;
    and the noise enters the model at every step (ŵ_{h+1} ≠ ŵ_h − η·g_h), so nothing later is un-noised."""
    ridge = Ridge()
    recorder = Recorder(ridge)
    x = np.array([CANARY] + [ORDINARY] * 16)
    out = local_sgd_round(
        recorder, np.array([START], np.float32), x, x, local_steps=16, step_size=ETA, clip=C,
        noise_multiplier=1.0, rng=np.random.default_rng(seed),
    )  # fmt: skip
    assert np.isfinite(out.gradient).all() and recorder.calls
    holding = 0
    for w, members in recorder.calls:
        g = ridge.clipped_sum(w, members, members, C)[1][0]
        for other in (ORDINARY, FLAT):
            replaced = np.where(members == CANARY, other, members)
            diff = abs(ridge.clipped_sum(w, replaced, replaced, C)[1][0] - g)
            assert diff <= 2 * C * (1 + 1e-6) if CANARY in members else diff == 0.0
        holding += CANARY in members
    assert holding <= 1
    moves = [(w, ridge.clipped_sum(w, m, m, C)[1][0]) for w, m in recorder.calls]
    unnoised = [
        abs(nxt[0] - (w[0] - ETA * g))
        for (w, g), (nxt, _) in zip(moves[:-1], recorder.calls[1:], strict=True)
    ]
    assert all(d > 1e-6 for d in unnoised)  # before issue 27 every one was 0: the noise came at the end


@pytest.mark.parametrize("n", [1, 5, 64])
def test_the_round_draws_s_noises_whatever_was_sampled(n):
    """U's noise has std √s·σC per coordinate whether the sample is empty, small or full: the count of
    noises may not depend on the sample (``local_sgd_round`` says why). Gradients are ~0 here (w = targets,
    and a step too small to move w off them)."""
    d, s, sigma, clip = 4000, 9, 2.0, 0.5
    x = np.column_stack([np.arange(n) % d, np.zeros(n)])
    u = local_sgd_round(
        Coordinates(d), np.zeros(d, np.float32), x, np.zeros(n), local_steps=s, step_size=1e-12,
        clip=clip, noise_multiplier=sigma, rng=np.random.default_rng(n),
    ).gradient  # fmt: skip
    assert u.std() == pytest.approx(math.sqrt(s) * sigma * clip, rel=0.05)
    assert abs(u.mean()) < 4 * u.std() / math.sqrt(d)


def _logreg(n: int, seed: int = 0):
    bundle = builtin("logreg")
    rng = np.random.default_rng(seed)
    x = rng.random((n, 1, 28, 28), dtype=np.float32)
    y = rng.integers(0, 10, n)
    return bundle, DPGradientSession(bundle.manifest, bundle.dp_onnx), x, y


def test_without_noise_the_round_is_plain_clipped_sgd_done_by_hand():
    bundle, session, x, y = _logreg(6)
    clip, eta = 0.5, 0.05
    result = local_sgd_round(
        session, bundle.init_params, x, y, local_steps=6, step_size=eta, clip=clip, noise_multiplier=0.0,
        rng=np.random.default_rng(1),
    )  # fmt: skip
    assert result.examples == 6  # q = 6/6: every example, in the generator's order
    order = np.random.default_rng(1)
    order.random(6)
    perm = order.permutation(6)
    w = bundle.init_params.astype(np.float64).copy()
    total = np.zeros_like(w)
    for i in perm:
        W, b = w[:7840].reshape(10, 784), w[7840:]
        z = W @ x[i].reshape(-1) + b
        p = np.exp(z - z.max())
        p /= p.sum()
        p[y[i]] -= 1.0
        g = np.concatenate([np.outer(p, x[i].reshape(-1)).ravel(), p])
        g *= min(1.0, clip / np.linalg.norm(g))
        total += g
        w -= eta * g
    np.testing.assert_allclose(result.gradient, total, rtol=1e-4, atol=1e-5)


def test_the_terms_run_the_noised_round_on_the_dp_graph():
    """Through ``private_step`` on the logreg graph: s noises of std σC (U's noise √s·σC), every sampled
    example visited, and the clipped steps' sum bounded by the sampled examples' count × C."""
    bundle, session, x, y = _logreg(4)
    sigma, clip, s = 3.0, 0.2, 4
    terms = DPTerms.from_json(
        {"mechanism": LOCAL_SGD_MECHANISM, "clip": clip, "noise_multiplier": sigma, "sampling_rate": 1.0,
         "expected_batch": s, "round": 0, "local_steps": s, "step_size": 0.1}
    )  # fmt: skip
    zero = np.zeros(bundle.manifest.num_params, np.float32)
    noised = private_step(terms, session, zero, x, y, rng=np.random.default_rng(5))
    assert noised.examples == 4 and math.isfinite(noised.loss)
    u = noised.gradient.astype(np.float64)
    assert u.std() == pytest.approx(math.sqrt(s) * sigma * clip, rel=0.05)
    assert abs(u.mean()) < 4 * u.std() / math.sqrt(u.size)
    quiet = local_sgd_round(  # the same round with σ tiny: the clipped steps' sum alone, norm ≤ 4C
        session, zero, x, y, local_steps=s, step_size=0.1, clip=clip, noise_multiplier=1e-9,
        rng=np.random.default_rng(5),
    ).gradient  # fmt: skip
    assert 0 < np.linalg.norm(quiet) <= 4 * clip * (1 + 1e-5)
