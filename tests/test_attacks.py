"""The Byzantine behaviours of client/_attacks.py, alone and inside the worker (issue 17)."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from client._attacks import ATTACKS, Attack, StaleReplay, gaussian, label_flip, sign_flip
from fleet.cli import app
from fleet_protocol import Manifest
from tests.test_client import FakeServer, make_data, make_worker, numpy_reference, softmax_regression


@pytest.fixture(scope="module")
def tiny() -> tuple[Manifest, bytes]:
    return softmax_regression()


def test_each_attack_by_hand():
    g = np.array([1.0, -2.0], np.float32)
    np.testing.assert_array_equal(sign_flip(g), [-10.0, 20.0])
    noise = gaussian(np.zeros(10_000, np.float32), np.random.default_rng(0), sigma=2.0)
    assert noise.dtype == np.float32 and abs(float(noise.std()) - 2.0) < 0.05
    np.testing.assert_array_equal(label_flip(np.array([0, 3, 9]), 10), [9, 6, 0])
    replay = StaleReplay(lag=2)
    sent = [replay(np.full(2, i, np.float32))[0] for i in range(4)]
    assert sent == [0, 0, 1, 2]
    with pytest.raises(ValueError):
        Attack("nonsense", np.random.default_rng(0))  # type: ignore[arg-type]


def test_an_honest_worker_pushes_the_true_gradient_and_a_sign_flipper_minus_ten_times_it(tiny):
    data = make_data(5)
    x, y = data.batch(8, np.random.default_rng(np.random.SeedSequence(11).spawn(2)[0]))
    _, ref = numpy_reference(FakeServer(*tiny).params[3], x, y, 10)
    pushed = {}
    for attack in (None, "sign-flip", "label-flip"):
        server = FakeServer(*tiny, batch_size=8)
        make_worker(server, data=data, seed=11, attack=attack).run_one()
        pushed[attack] = server.pushes[0]["gradient"]
    np.testing.assert_allclose(pushed[None], ref, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(pushed["sign-flip"], -10 * ref, rtol=1e-4, atol=1e-5)
    _, flipped = numpy_reference(FakeServer(*tiny).params[3], x, 9 - y, 10)
    np.testing.assert_allclose(pushed["label-flip"], flipped, rtol=1e-4, atol=1e-6)


def test_gaussian_and_replay_workers_push_noise_and_old_gradients(tiny):
    server = FakeServer(*tiny, batch_size=8)
    make_worker(server, attack="gaussian").run_one()
    assert abs(float(server.pushes[0]["gradient"].std()) - 1.0) < 0.2
    server = FakeServer(*tiny, batch_size=8)
    with make_worker(server, attack="stale-replay") as worker:
        for _ in range(3):
            worker.run_one()
    first = server.pushes[0]["gradient"]
    assert all(np.array_equal(p["gradient"], first) for p in server.pushes)


def test_the_cli_refuses_an_unknown_attack(tmp_path):
    result = CliRunner().invoke(
        app, ["worker", "--data", str(tmp_path / "x.npz"), "--enrollment-key", "k", "--attack", "nope"]
    )
    assert result.exit_code == 2 and "must be one of" in result.output
    assert set(ATTACKS) == {"sign-flip", "gaussian", "label-flip", "stale-replay"}
