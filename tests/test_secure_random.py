"""Every DP draw on the device comes from a cryptographically secure generator (issue 27, finding 10)."""

from __future__ import annotations

import numpy as np
import pytest

import client._privacy as privacy
from client._random import secure_generator


def test_the_secure_generator_is_chacha20_freshly_keyed():
    a, b = secure_generator(), secure_generator()
    assert type(a.bit_generator).__name__ == "ChaCha"
    assert not np.array_equal(a.normal(size=8), b.normal(size=8))


@pytest.mark.parametrize("mechanism", ["private_gradient", "norm_laplace_gradient", "local_sgd_round"])
def test_each_mechanism_draws_from_the_secure_generator_when_no_rng_is_given(monkeypatch, mechanism):
    used = []

    def spy() -> np.random.Generator:
        generator = secure_generator()
        used.append(type(generator.bit_generator).__name__)
        return generator

    monkeypatch.setattr(privacy, "secure_generator", spy)
    x, y = np.zeros((20, 3), np.float32), np.zeros(20, np.int64)
    session = _Constant(3)
    kwargs = {
        "private_gradient": {"clip": 1.0, "noise_multiplier": 1.0, "expected_batch": 5},
        "norm_laplace_gradient": {"clip": 1.0, "sensitivity": 0.4, "epsilon": 1.0, "batch": 5},
        "local_sgd_round": {"local_steps": 4, "step_size": 0.1, "clip": 1.0, "noise_multiplier": 1.0},
    }[mechanism]
    getattr(privacy, mechanism)(session, np.zeros(3, np.float32), x, y, **kwargs)
    assert used == ["ChaCha"]


class _Constant:
    """Each example's clipped gradient is (1, 0, 0): enough to run every mechanism."""

    def __init__(self, num_params: int) -> None:
        self.num_params = num_params

    def clipped_sum(self, flat_params, x, y, clip):  # noqa: ANN001, ANN201
        g = np.zeros(self.num_params, np.float32)
        g[0] = min(1.0, clip) * len(y)
        return 0.0, g
