"""The amortised cold-start refit: running normal equations must give scikit-learn's OLS on the same rows."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import LinearRegression

from profiler import SlopeRegressor


@pytest.mark.parametrize("max_pairs", [10_000, 7])  # 7: most pairs are evicted, their rows subtracted
def test_refit_is_ols_on_bootstrap_plus_kept_pairs(max_pairs: int) -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(30, 4)) * [1e9, 1e9, 5.0, 3000.0] + [2e9, 4e9, 35.0, 12000.0]
    y = 5.0 + x @ [1e-9, -5e-10, 0.2, -3e-4] + rng.normal(0, 0.2, 30)
    reg = SlopeRegressor(max_pairs=max_pairs).fit(x, y)
    for i in range(40):
        xi = rng.normal(size=(1, 4)) * [1e9, 1e9, 5.0, 3000.0] + [2e9, 4e9, 35.0, 12000.0]
        reg.partial_fit(xi, [3.0 + rng.uniform(0, 6)], device_model=f"m{i % 3}")
    reg.refit_cold_start()
    z_kept = np.array([p[0] for p in reg.pairs_])
    y_kept = np.array([p[1] for p in reg.pairs_])
    ols = LinearRegression().fit(np.vstack([reg.boot_z_, z_kept]), np.concatenate([reg.boot_y_, y_kept]))
    assert len(reg.pairs_) == min(max_pairs, 40)
    np.testing.assert_allclose(reg.cold_.coef_, ols.coef_, rtol=1e-8, atol=1e-10)
    assert reg.cold_.intercept_ == pytest.approx(ols.intercept_, rel=1e-9)


def test_refit_floor_follows_the_fastest_pair_seen() -> None:
    x = np.random.default_rng(1).normal(size=(10, 4))
    reg = SlopeRegressor(alpha_floor_fraction=0.1).fit(x, np.full(10, 20.0))
    reg.partial_fit(x[:1], [0.5], device_model="fast")
    assert reg.alpha_floor_ == pytest.approx(2.0)
    reg.refit_cold_start()
    assert reg.alpha_floor_ == pytest.approx(0.05)
