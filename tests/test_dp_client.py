"""DP-SGD on the device (client/_privacy.py): Poisson sampling, the noise's statistics, fresh noise per call.

Statistical tests use a false-alarm rate of 1e-6 each: a correct implementation fails one of them about
once in a million runs, while the errors they look for (a wrong scale, reused noise, a fixed-size
sample) fail them every time.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from client import DeviceData, DPGradientSession, poisson_sample, private_gradient
from models.manifest import builtin

ALPHA = 1e-6  # false-alarm rate of each statistical test
Z = stats.norm.isf(ALPHA / 2)  # two-sided normal bound, about 4.9


class ZeroSum:
    """A stand-in DP graph whose clipped sum is zero: what private_gradient returns is then pure noise."""

    def __init__(self, num_params: int) -> None:
        self.num_params = num_params
        self.batches: list[int] = []

    def clipped_sum(self, flat_params, x, y, clip):
        self.batches.append(len(y))
        return 0.0, np.zeros(self.num_params, dtype=np.float32)


def _data(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.random((n, 1, 28, 28), dtype=np.float32), rng.integers(0, 10, n)


def test_noise_has_standard_deviation_sigma_c_over_b_and_mean_zero():
    d, clip, sigma, b = 200_000, 0.7, 1.3, 25
    x, y = _data(100)
    noise = private_gradient(
        ZeroSum(d), np.zeros(d), x, y, clip=clip, noise_multiplier=sigma, expected_batch=b
    ).gradient.astype(np.float64)
    scale = sigma * clip / b
    # Known mean 0: Σ z_j² / scale² ~ χ²(d) exactly; two-sided acceptance region at ALPHA.
    statistic = float(np.sum(noise**2) / scale**2)
    assert stats.chi2.ppf(ALPHA / 2, d) < statistic < stats.chi2.isf(ALPHA / 2, d), statistic / d
    # The mean of d draws of N(0, scale²) is N(0, scale²/d).
    assert abs(noise.mean()) < Z * scale / math.sqrt(d)


def test_two_calls_never_share_noise():
    """rng=None, as on a device: each call draws its own OS-seeded generator."""
    d = 100_000
    x, y = _data(50)
    first, second = (
        private_gradient(ZeroSum(d), np.zeros(d), x, y, clip=1.0, noise_multiplier=1.0, expected_batch=10)
        for _ in range(2)
    )
    assert not np.array_equal(first.gradient, second.gradient)
    # Independent noise: the sample correlation of d pairs is about N(0, 1/d).
    r = float(np.corrcoef(first.gradient, second.gradient)[0, 1])
    assert abs(r) < Z / math.sqrt(d), r


def test_poisson_batch_sizes_are_binomial():
    n, q, trials = 40, 0.15, 4000
    x, y = _data(n)
    data = DeviceData(x, y)
    rng = np.random.default_rng(7)
    sizes = np.array([len(poisson_sample(data, q, rng)[1]) for _ in range(trials)])
    # Chi-square goodness of fit against Binomial(n, q), bins merged until each expects >= 20 draws.
    pmf = stats.binom.pmf(np.arange(n + 1), n, q) * trials
    observed = np.bincount(sizes, minlength=n + 1).astype(float)
    bins_e, bins_o, acc_e, acc_o = [], [], 0.0, 0.0
    for e, o in zip(pmf, observed, strict=True):
        acc_e, acc_o = acc_e + e, acc_o + o
        if acc_e >= 20:
            bins_e.append(acc_e)
            bins_o.append(acc_o)
            acc_e = acc_o = 0.0
    bins_e[-1] += acc_e
    bins_o[-1] += acc_o
    statistic = sum((o - e) ** 2 / e for o, e in zip(bins_o, bins_e, strict=True))
    assert statistic < stats.chi2.isf(ALPHA, len(bins_e) - 1), statistic
    # each example is drawn independently with probability q (not a prefix or a fixed set): with unique
    # labels as ids, each one's count is Binomial(trials, q); Bonferroni over the n examples.
    ids = DeviceData(x, np.arange(n))
    counts = np.zeros(n)
    for _ in range(trials):
        counts[poisson_sample(ids, q, rng)[1]] += 1
    bound = stats.norm.isf(ALPHA / (2 * n)) * math.sqrt(trials * q * (1 - q))
    assert np.abs(counts - trials * q).max() < bound


def test_private_gradient_samples_at_rate_b_over_n_and_divides_by_b():
    n, b = 500, 50
    x, y = _data(n)
    session = ZeroSum(10)
    private_gradient(session, np.zeros(10), x, y, clip=1.0, noise_multiplier=0.0, expected_batch=b)
    rng = np.random.default_rng(3)
    for _ in range(300):
        private_gradient(session, np.zeros(10), x, y, clip=1, noise_multiplier=0, expected_batch=b, rng=rng)
    sizes = np.array(session.batches)
    # mean of 301 Binomial(500, 0.1) sizes: N(50, 45/301)
    assert abs(sizes.mean() - b) < Z * math.sqrt(b * (1 - b / n) / len(sizes))
    assert len(set(sizes)) > 5  # not a fixed batch


def test_without_noise_the_result_is_the_clipped_sum_over_the_expected_batch():
    bundle = builtin("mlp")
    session = DPGradientSession(bundle.manifest, bundle.dp_onnx)
    x, y = _data(30)
    loss, total = session.clipped_sum(bundle.init_params, x, y, 0.5)
    # expected_batch >= N: q = 1, every example is in
    result = private_gradient(
        session, bundle.init_params, x, y, clip=0.5, noise_multiplier=0.0, expected_batch=40
    )
    assert result.examples == 30 and result.loss == pytest.approx(loss)
    np.testing.assert_allclose(result.gradient, total / 40, rtol=1e-6, atol=1e-9)
    assert np.linalg.norm(result.gradient) <= 30 * 0.5 / 40 * (1 + 1e-5)


def test_an_empty_sample_gives_zeros_without_running_the_graph():
    bundle = builtin("mlp")
    session = DPGradientSession(bundle.manifest, bundle.dp_onnx)
    x, y = _data(3)
    loss, total = session.clipped_sum(bundle.init_params, x[:0], y[:0], 1.0)
    assert math.isnan(loss) and total.shape == (bundle.manifest.num_params,) and not total.any()
    rng = np.random.default_rng(0)
    result = private_gradient(
        session, bundle.init_params, x, y, clip=1.0, noise_multiplier=0.0, expected_batch=1, rng=rng
    )
    assert result.gradient.dtype == np.float32


@pytest.mark.parametrize(
    "bad",
    [
        {"clip": 0.0},
        {"clip": -1.0},
        {"clip": math.nan},
        {"clip": math.inf},
        {"noise_multiplier": -0.1},
        {"noise_multiplier": math.nan},
        {"noise_multiplier": math.inf},
        {"expected_batch": 0},
        {"expected_batch": 2.5},
        {"expected_batch": True},
    ],
)
def test_bad_inputs_raise_value_error(bad):
    x, y = _data(5)
    kwargs = {"clip": 1.0, "noise_multiplier": 1.0, "expected_batch": 2, **bad}
    with pytest.raises(ValueError):
        private_gradient(ZeroSum(4), np.zeros(4), x, y, **kwargs)


def test_bad_sampling_inputs_raise_value_error():
    x, y = _data(5)
    with pytest.raises(ValueError):
        private_gradient(ZeroSum(4), np.zeros(4), x[:0], y[:0], clip=1, noise_multiplier=1, expected_batch=1)
    with pytest.raises(ValueError):
        poisson_sample(DeviceData(x, y), 1.5, np.random.default_rng(0))
    bundle = builtin("mlp")
    with pytest.raises(ValueError):
        DPGradientSession(bundle.manifest, bundle.dp_onnx).clipped_sum(bundle.init_params, x, y, 0.0)
