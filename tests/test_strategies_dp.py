"""AUDP and MAPA (issue 16) against the paper's formulas by hand: rates, stages, τ_max, terms, state."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fleet_protocol import NORM_LAPLACE_MECHANISM, DPTerms
from server.settings import LIVE_SETTINGS, Settings
from server.store.codec import decode_state, encode_state
from server.strategies import AUDP, MAPA, Arrival, make_strategy
from server.strategies.mapa import initial_sensitivity

D = 5  # parameters of the toy model


def arrival(tau: int, gradient: np.ndarray | None = None) -> Arrival:
    g = np.ones(D, np.float32) if gradient is None else gradient
    return Arrival("t", "d", 0, tau, g, np.array([6, 6]), 12, 1.0, 0.0)


def step(strategy, params: np.ndarray, tau: int = 0) -> np.ndarray:
    assert strategy.receive(arrival(tau)) == 1.0 and strategy.ready(0.0)
    return strategy.aggregate(params)


def test_audp_rate_follows_table_2_with_the_samplers_variance():
    eps, b, clip, L, tau, sigma = 0.1, 12, 3.0, 10.0, 4, 30.0
    for sampler, noise in (("paper", 2.0), ("exact", D * (D + 1))):
        audp = AUDP(
            dp_step_epsilon=eps, dp_step_batch=b, audp_clip=clip, tau_max=tau, dp_noise_sampler=sampler
        )
        ds = 2 * clip / b
        delta_b = sigma**2 / b + noise * (ds / eps) ** 2
        params = np.zeros(D, np.float32)
        for t in (1, 2, 3):
            params = step(audp, params)
            expected = 1 / (L * (tau + 1) + math.sqrt(delta_b + 1) * math.sqrt(t))
            assert audp.learning_rate == pytest.approx(expected, rel=1e-12)
        assert params == pytest.approx(-np.ones(D) * sum(audp.rate(t) for t in (1, 2, 3)), rel=1e-6)


def test_audp_terms_carry_the_clip_sensitivity_and_epsilon():
    audp = AUDP(dp_step_epsilon=0.2, dp_step_batch=10, audp_clip=15.0, dp_noise_sampler="paper")
    dp = audp.terms_for(device_id="d", label_counts=np.array([1, 1])).extra["dp"]
    assert dp["mechanism"] == NORM_LAPLACE_MECHANISM and dp["clip"] == 15.0 and dp["sensitivity"] == 3.0
    assert dp["epsilon_step"] == 0.2 and dp["expected_batch"] == 10 and dp["noise"] == "paper"
    terms = DPTerms.from_json({**dp, "sampling_rate": 0.5})  # what the device reads (plus N-dependent q)
    assert terms.noise_multiplier * terms.clip == pytest.approx(3.0 / 0.2)  # λ = ΔS/ε


@pytest.mark.parametrize("cls", [AUDP, MAPA])
def test_tau_max_drops_staler_gradients(cls):
    strategy = cls(tau_max=3, dp_noise_sampler="paper")
    assert strategy.receive(arrival(4)) == 0.0 and not strategy.ready(0.0) and strategy.dropped == 1
    assert strategy.receive(arrival(3)) == 1.0 and strategy.ready(0.0)
    assert strategy.describe()["dropped"] == 1


def test_theorem_3_initial_sensitivity():
    # paper defaults σ = 30, b = 12, δ = 1e-3: ΔS₀ ≈ 223.6 (seed-algorithms.md §3.3)
    assert initial_sensitivity(30, 12, 1e-3) == pytest.approx(223.6, abs=0.1)
    ds = initial_sensitivity(30, 12, 1e-3)
    assert (1 - 4 * 30**2 / (12**2 * ds**2)) ** 2 == pytest.approx(1 - 1e-3)
    assert MAPA().sensitivity == pytest.approx(ds)


def test_mapa_stage_figures_follow_eqs_15_16():
    eps, b, tau, L, theta, gap, ds = 0.1, 12, 5, 10.0, 0.5, 2.0, 10.0
    mapa = MAPA(
        dp_step_epsilon=eps, dp_step_batch=b, tau_max=tau, smoothness=L, mapa_theta=theta, mapa_loss_gap=gap,
        mapa_sensitivity=ds, dp_noise_sampler="paper",
    )  # fmt: skip
    delta_b = 30**2 / b + 2 * ds**2 / eps**2
    p = max(8 * delta_b / ((tau + 1) * b**2 * ds**2 * theta**2), 1)
    length = max(1, math.ceil(4 * p**2 * L * (tau + 1) ** 2 * gap / delta_b))
    assert mapa.stage_figures(D) == pytest.approx((p, 1 / (2 * p * L * (tau + 1)), length))
    assert p > 1 and length > 1


def test_mapa_shrinks_sensitivity_by_theta_after_each_stage_and_stages_grow():
    mapa = MAPA(
        dp_step_epsilon=0.5, tau_max=5, mapa_sensitivity=10.0, mapa_loss_gap=2.0, dp_noise_sampler="paper"
    )
    params = np.zeros(D, np.float32)
    lengths, sensitivities = [], []
    while mapa.stage < 4:
        stage, length = mapa.stage, mapa.stage_figures(D)[2]
        lengths.append(length)
        sensitivities.append(mapa.sensitivity)
        for i in range(length):
            gamma = mapa.stage_figures(D)[1]
            before = params.copy()
            params = step(mapa, params)
            assert params == pytest.approx(before - gamma, rel=1e-6)  # constant rate within the stage
            assert mapa.stage == (stage if i < length - 1 else stage + 1)
    assert sensitivities == pytest.approx([10.0, 5.0, 2.5, 1.25])
    assert all(b >= a for a, b in zip(lengths, lengths[1:], strict=False)) and lengths[-1] > lengths[0]
    dp = mapa.terms_for(device_id="d", label_counts=np.array([1])).extra["dp"]
    assert dp["sensitivity"] == pytest.approx(10.0 / 16) and dp["clip"] == pytest.approx(12 * 10.0 / 16 / 2)


def test_mapa_clamps_p_and_stage_length_at_one():
    """A tiny f(x₁) − f* gives T_s < 1: each stage still lasts one update (decision 3.7.3)."""
    mapa = MAPA(mapa_sensitivity=200.0, mapa_loss_gap=1e-9, dp_noise_sampler="paper", tau_max=0)
    assert mapa.stage_figures(D)[2] == 1
    step(mapa, np.zeros(D, np.float32))
    assert mapa.stage == 1 and mapa.sensitivity == pytest.approx(100.0)
    loose = MAPA(gradient_std=0.0, mapa_sensitivity=1.0, dp_step_epsilon=1e6, dp_noise_sampler="paper")
    assert loose.stage_figures(D)[0] == 1.0


def test_state_round_trip_keeps_stage_and_sensitivity():
    mapa = MAPA(mapa_sensitivity=10.0, mapa_loss_gap=1e-9, dp_noise_sampler="paper", tau_max=2)
    params = np.zeros(D, np.float32)
    for tau in (0, 1, 5, 0):
        if mapa.receive(arrival(tau)):
            params = mapa.aggregate(params)
    restored = MAPA(mapa_sensitivity=10.0, mapa_loss_gap=1e-9, dp_noise_sampler="paper", tau_max=2)
    restored.load_state_dict(decode_state(encode_state(mapa.state_dict())))
    assert (restored.stage, restored.sensitivity, restored.dropped, restored.updates) == (3, 1.25, 1, 3)
    assert restored.describe() == mapa.describe()
    np.testing.assert_array_equal(step(restored, params), step(mapa, params))
    audp = AUDP(audp_clip=3.0)
    step(audp, params)
    again = AUDP(audp_clip=1.0)  # a changed clip setting wins over the stored ΔS
    again.load_state_dict(decode_state(encode_state(audp.state_dict())))
    assert again.sensitivity == pytest.approx(2 / 12) and again.updates == 1


def test_l2_is_weight_decay_and_a_fixed_rate_replaces_the_formula():
    audp = AUDP(learning_rate=0.5, l2=0.1)
    out = step(audp, np.full(D, 2.0, np.float32))
    assert out == pytest.approx(2.0 - 0.5 * (1.0 + 0.1 * 2.0))


def test_registered_with_settings_and_on_the_console():
    for name, cls in (("audp", AUDP), ("mapa", MAPA)):
        strategy = make_strategy(name)
        assert isinstance(strategy, cls)
        assert Settings(strategy=name, dp=True, _env_file=None).strategy == cls.settings()
        assert "strategy" in LIVE_SETTINGS["Learning"]  # its fields are the console's, from its settings
    assert "audp_clip" not in MAPA.settings.model_fields
    from server.compose import strategy_params

    params = strategy_params(Settings(strategy="mapa", mapa_theta=0.25, dp=True, _env_file=None))
    assert make_strategy("mapa", **params).theta == 0.25
