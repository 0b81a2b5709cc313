"""The norm-Laplace mechanism of AUDP/MAPA on the device (client/_privacy.py): the noise's distribution, the
fixed-size batch, per-example clipping against the real logreg graph, fresh noise per call, the dispatch.

Statistical tests use a false-alarm rate of 1e-6 each (as tests/test_dp_client.py), with the generator
seeded: they are deterministic here, and a wrong shape or scale fails them at any seed.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from client import DPGradientSession, GradientSession, norm_laplace_gradient, norm_laplace_noise, private_step
from client._privacy import draw_batch
from fleet_protocol import NORM_LAPLACE_MECHANISM, DPTerms, WireError
from fleet_protocol.accounting import norm_laplace_second_moment
from models.manifest import builtin

ALPHA = 1e-6


class ZeroSum:
    """A stand-in DP graph whose clipped sum is zero: the mechanism's output is then pure noise."""

    def __init__(self, num_params: int) -> None:
        self.num_params = num_params
        self.batches: list[np.ndarray] = []

    def clipped_sum(self, flat_params, x, y, clip):
        self.batches.append(np.asarray(y))
        return 0.0, np.zeros(self.num_params, dtype=np.float32)


def _draws(d: int, scale: float, sampler: str, n: int = 2000, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.stack([norm_laplace_noise(d, scale, rng, sampler) for _ in range(n)])


@pytest.mark.parametrize("d", [1, 5, 200])
def test_exact_radius_is_gamma_d_lambda(d):
    """Density ∝ exp(−‖η‖/λ) over ℝ^d ⇔ radius ~ Gamma(d, λ): what the ε-DP proof covers."""
    scale = 2.5
    radius = np.linalg.norm(_draws(d, scale, "exact"), axis=1)
    assert stats.kstest(radius, stats.gamma(d, scale=scale).cdf).pvalue > ALPHA


def test_paper_radius_is_exponential_with_the_papers_variance():
    scale = 3.0
    noise = _draws(50, scale, "paper", n=4000)
    radius = np.linalg.norm(noise, axis=1)
    assert stats.kstest(radius, stats.expon(scale=scale).cdf).pvalue > ALPHA
    assert norm_laplace_second_moment(50, scale, "paper") == pytest.approx(2 * scale**2)
    assert np.mean(radius**2) == pytest.approx(2 * scale**2, rel=0.15)


def test_second_moment_matches_the_exact_sampler():
    d, scale = 30, 0.5
    radius = np.linalg.norm(_draws(d, scale, "exact", n=4000), axis=1)
    assert np.mean(radius**2) == pytest.approx(norm_laplace_second_moment(d, scale, "exact"), rel=0.02)
    assert norm_laplace_second_moment(d, scale, "exact") == pytest.approx(d * (d + 1) * scale**2)


@pytest.mark.parametrize("sampler", ["exact", "paper"])
def test_direction_is_uniform_on_the_sphere(sampler):
    """For u uniform on S^{d-1}, (u·e + 1)/2 ~ Beta((d−1)/2, (d−1)/2) for any unit e; and E u = 0."""
    d = 10
    noise = _draws(d, 1.0, sampler, n=4000)
    unit = noise / np.linalg.norm(noise, axis=1, keepdims=True)
    e = np.ones(d) / np.sqrt(d)
    projected = (unit @ e + 1) / 2
    assert stats.kstest(projected, stats.beta((d - 1) / 2, (d - 1) / 2).cdf).pvalue > ALPHA
    assert stats.kstest((unit[:, 0] + 1) / 2, stats.beta((d - 1) / 2, (d - 1) / 2).cdf).pvalue > ALPHA


def test_two_calls_never_share_noise_nor_batches():
    """rng=None, as on a device: each call seeds its own generator from the OS."""
    d, n = 1000, 500
    x, y = np.zeros((n, 1, 28, 28), np.float32), np.arange(n) % 10
    session = ZeroSum(d)
    kwargs = dict(clip=1.0, sensitivity=2 / 12, epsilon=0.5, batch=12)
    first = norm_laplace_gradient(session, np.zeros(d), x, y, **kwargs).gradient
    second = norm_laplace_gradient(session, np.zeros(d), x, y, **kwargs).gradient
    assert not np.any(first == second)
    assert not np.array_equal(session.batches[0], session.batches[1])


def test_batch_is_fixed_size_distinct_and_capped_by_n():
    rng = np.random.default_rng(0)
    index = draw_batch(100, 12, rng)
    assert len(index) == 12 and len(set(index.tolist())) == 12
    assert sorted(draw_batch(5, 12, rng).tolist()) == [0, 1, 2, 3, 4]
    assert len(draw_batch(5, 12, rng, replacement=True)) == 12


def test_under_noised_terms_are_refused_on_the_device():
    x, y = np.zeros((20, 1, 28, 28), np.float32), np.zeros(20, np.int64)
    with pytest.raises(ValueError, match="under-noised"):
        norm_laplace_gradient(ZeroSum(4), np.zeros(4), x, y, clip=6.0, sensitivity=0.5, epsilon=1, batch=12)


def test_per_example_clipping_then_mean_on_the_real_logreg_graph():
    """With ε huge the noise vanishes: the step is the mean of per-example-clipped gradients of the drawn
    batch; with a clip above every example's norm it is the plain mean gradient of the train graph."""
    bundle = builtin("logreg")
    m = bundle.manifest
    dp_session = DPGradientSession(m, bundle.dp_onnx)
    plain = GradientSession(m, bundle.train_onnx)
    rng = np.random.default_rng(3)
    x, y = rng.random((40, 1, 28, 28), dtype=np.float32), rng.integers(0, 10, 40)
    params = (rng.standard_normal(m.num_params) * 0.01).astype(np.float32)
    b, clip = 12, 1e4
    out = norm_laplace_gradient(
        dp_session, params, x, y, clip=clip, sensitivity=2 * clip / b, epsilon=1e12, batch=b,
        rng=np.random.default_rng(7),
    )  # fmt: skip
    index = draw_batch(40, b, np.random.default_rng(7))
    _, expected = plain.loss_and_gradient(params, x[index], y[index])
    np.testing.assert_allclose(out.gradient, expected, atol=1e-5)
    small = norm_laplace_gradient(
        dp_session, params, x, y, clip=0.01, sensitivity=2 * 0.01 / b, epsilon=1e12, batch=b,
        rng=np.random.default_rng(7),
    )  # fmt: skip
    assert np.linalg.norm(small.gradient) <= 0.01 * (1 + 1e-4)  # a mean of vectors of norm ≤ G


def test_dispatch_follows_the_terms_mechanism_and_the_wire_checks_them():
    d = 64
    x, y = np.zeros((30, 1, 28, 28), np.float32), np.zeros(30, np.int64)
    raw = {
        "mechanism": NORM_LAPLACE_MECHANISM, "clip": 1.5, "noise_multiplier": 2 / (12 * 0.1 * 1.5),
        "sampling_rate": 0.4, "expected_batch": 12, "epsilon_step": 0.1, "sensitivity": 0.25,
        "noise": "paper",
    }  # fmt: skip
    terms = DPTerms.from_json(raw)
    session = ZeroSum(d)
    out = private_step(terms, session, np.zeros(d), x, y, rng=np.random.default_rng(0))
    assert out.examples == 12 and len(session.batches[0]) == 12
    for bad in ({"noise": "laplace"}, {"epsilon_step": None}, {"sensitivity": 0}):
        with pytest.raises(WireError):
            DPTerms.from_json({**raw, **bad})
    with pytest.raises(ValueError, match="unknown DP mechanism"):
        private_step(DPTerms.from_json({**raw, "mechanism": "x/1"}), session, np.zeros(d), x, y)
