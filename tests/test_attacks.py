"""The attack suite of client/_attacks/ (issues 17 and 30): each attack's defining property, alone and
inside the live worker, the backdoor's success rate, Sybils from one key, and the CLI's choices."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pytest
from typer.testing import CliRunner

from client import DeviceData, StaticFeatures, Worker, WorkerConfig, WorkerError
from client._attacks import (
    ALIE,
    ATTACKS,
    IPM,
    Backdoor,
    StaleReplay,
    Sybil,
    add_trigger,
    alie_z,
    attack_success_rate,
    gaussian,
    label_flip,
    make_attack,
    parse_params,
    sign_flip,
)
from client._energy import EnergyModel
from client._sybils import sybil_configs
from fleet.cli import app
from tests.support.client_doubles import FakeServer, make_data, make_worker, numpy_reference


def honest_rows(m: int = 12, d: int = 50, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.normal(0.3, 1.0, (m, d)) * rng.uniform(0.1, 2.0, d)).astype(np.float32)


def test_each_attack_by_hand():
    g = np.array([1.0, -2.0], np.float32)
    np.testing.assert_array_equal(sign_flip(g), [-10.0, 20.0])
    noise = gaussian(np.zeros(10_000, np.float32), np.random.default_rng(0), sigma=2.0)
    assert noise.dtype == np.float32 and abs(float(noise.std()) - 2.0) < 0.05
    np.testing.assert_array_equal(label_flip(np.array([0, 3, 9]), 10), [9, 6, 0])
    replay = StaleReplay(lag=2)
    sent = [replay(np.full(2, i, np.float32))[0] for i in range(4)]
    assert sent == [0, 0, 1, 2]
    with pytest.raises(ValueError, match="unknown attack"):
        make_attack("nonsense")
    with pytest.raises(ValueError, match="takes"):
        make_attack("scaled", epsilon=1)
    assert parse_params(["k=5", "inner = alie"]) == {"k": "5", "inner": "alie"}
    with pytest.raises(ValueError):
        parse_params(["k"])


@pytest.mark.parametrize("k", [1.0, 3.5, 10.0, 100.0])
def test_scaled_pushes_minus_k_g_and_sign_flip_is_k_10(k):
    g = honest_rows(1)[0]
    np.testing.assert_allclose(make_attack("scaled", k=str(k)).gradient(g, g[None]), -k * g, rtol=1e-6)
    np.testing.assert_allclose(make_attack("sign-flip").gradient(g, g[None]), -10 * g, rtol=1e-6)


def test_alie_z_is_the_papers_formula():
    # s = ⌊n/2 + 1⌋ − f supporters; z = Φ⁻¹((n − s)/n)
    assert alie_z(10, 3) == pytest.approx(NormalDist().inv_cdf(0.7))
    assert alie_z(50, 12) == pytest.approx(NormalDist().inv_cdf(36 / 50))
    assert alie_z(100, 10) == pytest.approx(NormalDist().inv_cdf(59 / 100))
    assert alie_z(10, 1) == 0.0  # (n − s)/n = 0.5: the mean itself
    for n, f in ((10, 0), (10, 7), (4, 4)):
        with pytest.raises(ValueError):
            alie_z(n, f)
    assert make_attack("alie", n=10, f=3).z == pytest.approx(alie_z(10, 3))  # type: ignore[attr-defined]
    assert make_attack("alie", z="1.5").z == 1.5  # type: ignore[attr-defined]


@pytest.mark.parametrize("z", [None, 0.2, 1.0, 3.0])
def test_alie_lies_within_z_sigma_of_the_mean_coordinate_wise(z):
    rows = honest_rows()
    attack = ALIE(n=20, f=4, z=z)
    sent = attack.gradient(rows[0], rows)
    mu, sigma = rows.astype(np.float64).mean(0), rows.astype(np.float64).std(0)
    assert sent.dtype == np.float32 and sent.shape == rows[0].shape
    assert (np.abs(sent - mu) <= attack.z * sigma + 1e-5).all()  # type: ignore[operator]
    np.testing.assert_allclose(sent, mu - attack.z * sigma, rtol=1e-5, atol=1e-6)  # type: ignore[operator]
    assert not np.allclose(sent, rows[0])  # not the attacker's own gradient


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 10.0])
def test_ipm_has_a_negative_inner_product_with_the_honest_mean(epsilon):
    rows = honest_rows()
    sent = IPM(epsilon=epsilon).gradient(rows[0], rows)
    mu = rows.astype(np.float64).mean(0)
    assert float(sent @ mu) < 0
    assert float(sent @ mu) == pytest.approx(-epsilon * float(mu @ mu), rel=1e-5)


@pytest.mark.parametrize(
    ("shape", "side", "patch"),
    [((1, 28, 28), 28, 3), ((28, 28), 28, 3), ((784,), 28, 3), ((1, 8, 8), 8, 2), ((64,), 8, 2)],
)
def test_the_trigger_changes_only_its_corner_patch(shape, side, patch):
    x = np.random.default_rng(0).uniform(0.0, 0.5, (4, *shape)).astype(np.float32)
    triggered = add_trigger(x)
    assert triggered.shape == x.shape and triggered.dtype == x.dtype
    changed = (triggered != x).reshape(4, side, side)
    expected = np.zeros((side, side), bool)
    expected[-patch:, -patch:] = True
    assert (changed == expected).all()
    assert (triggered.reshape(4, side, side)[:, -patch:, -patch:] == 1.0).all()
    assert (x < 0.5).all()  # the input itself is left alone
    with pytest.raises(ValueError):
        add_trigger(np.zeros((2, 10)))


def test_an_inset_trigger_moves_in_from_the_corner_and_must_fit():
    x = np.zeros((2, 784), np.float32)
    changed = (add_trigger(x, inset=4) != x).reshape(2, 28, 28)
    expected = np.zeros((28, 28), bool)
    expected[21:24, 21:24] = True  # 3x3, 4 pixels in from the bottom and the right edge
    assert (changed == expected).all()
    bx, _ = Backdoor(target=1, share=1.0, inset=4).batch(x.reshape(2, 1, 28, 28), np.zeros(2, int), 10)
    np.testing.assert_array_equal(bx.reshape(2, 784), add_trigger(x, inset=4))
    with pytest.raises(ValueError, match="does not fit"):
        add_trigger(x, inset=26)


def test_a_backdoor_batch_triggers_its_share_relabelled_to_the_target():
    x = np.random.default_rng(1).uniform(0.0, 0.5, (200, 1, 28, 28)).astype(np.float32)
    y = np.random.default_rng(2).integers(0, 10, 200)
    bx, by = Backdoor(target=7, share=1.0).batch(x, y, 10)
    np.testing.assert_array_equal(bx, add_trigger(x))
    assert (by == 7).all()
    bx, by = Backdoor(target=7, share=0.0).batch(x, y, 10)
    np.testing.assert_array_equal(bx, x)
    np.testing.assert_array_equal(by, y)
    attack = Backdoor(target=7, share=0.3, boost=5.0, rng=np.random.default_rng(3))
    bx, by = attack.batch(x, y, 10)
    triggered = (bx != x).reshape(200, -1).any(axis=1)
    assert 0.15 < triggered.mean() < 0.45 and (by[triggered] == 7).all()
    np.testing.assert_array_equal(by[~triggered], y[~triggered])
    g = honest_rows(1)[0]
    np.testing.assert_allclose(attack.gradient(g, g[None]), 5 * g)
    with pytest.raises(ValueError):
        Backdoor(target=12).batch(x, y, 10)


def test_a_bounded_backdoor_holds_each_coordinate_to_its_share_of_the_honest_gradients():
    """The backdoor adapted to server/strategies/trusted_bound.py: what that bound would let through."""
    honest = np.array([[3.0, 4.0, 0.0], [-3.0, -4.0, 0.0]])  # mean |g| (3, 4, 0): shares 0.6, 0.8, 0
    pushed = Backdoor(bounded=1.0).gradient(np.array([1.0, 1.0, 5.0], np.float32), honest)
    limit = np.array([0.6, 0.8, 0.0]) * np.sqrt(27)
    np.testing.assert_allclose(pushed, np.minimum([1.0, 1.0, 5.0], limit), rtol=1e-6)
    with pytest.raises(ValueError):
        Backdoor(bounded=-1.0)


def test_attack_success_rate_counts_the_non_target_images_sent_to_the_target():
    labels = np.array([0, 0, 1, 2, 3, 4])
    assert attack_success_rate(np.zeros(6, int), labels, 0) == 1.0
    assert attack_success_rate(labels, labels, 0) == 0.0
    assert attack_success_rate(np.array([0, 0, 0, 2, 0, 4]), labels, 0) == 0.5  # 2 of the 4 non-zeros
    with pytest.raises(ValueError):
        attack_success_rate(np.zeros(2, int), np.zeros(2, int), 0)


# --- inside the live worker -------------------------------------------------------------------------


def pushed(tiny, data, attack=None, **params) -> np.ndarray:
    server = FakeServer(*tiny, batch_size=8)
    make_worker(server, data=data, seed=11, attack=attack, attack_params=params).run_one()
    return server.pushes[0]["gradient"]


def task_batch(data: DeviceData, seed: int = 11) -> tuple[np.ndarray, np.ndarray]:
    """The batch a worker seeded ``seed`` draws for its first task of 8 (client/_worker.py's streams)."""
    return data.batch(8, np.random.default_rng(np.random.SeedSequence(seed).spawn(2)[0]))


def test_an_honest_worker_pushes_the_true_gradient_and_attackers_theirs(tiny):
    data = make_data(5)
    x, y = task_batch(data)
    params = FakeServer(*tiny).params[3]
    _, ref = numpy_reference(params, x, y, 10)
    np.testing.assert_allclose(pushed(tiny, data), ref, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(pushed(tiny, data, "sign-flip"), -10 * ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(pushed(tiny, data, "scaled", k="3"), -3 * ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(pushed(tiny, data, "ipm", epsilon="0.5", estimates="0"), -0.5 * ref, atol=1e-5)
    _, flipped = numpy_reference(params, x, 9 - y, 10)
    np.testing.assert_allclose(pushed(tiny, data, "label-flip"), flipped, rtol=1e-4, atol=1e-6)
    _, poisoned = numpy_reference(params, add_trigger(x), np.full_like(y, 3), 10)
    backdoor = pushed(tiny, data, "backdoor", target="3", share="1", boost="2")
    np.testing.assert_allclose(backdoor, 2 * poisoned, rtol=1e-4, atol=1e-5)
    # this model's weight is features × classes: no output layer to keep honest, so that backdoor is refused
    with pytest.raises(WorkerError, match="output layer"):
        pushed(tiny, data, "backdoor", honest_head="true")


def test_the_honest_head_backdoor_pushes_the_clean_output_layer_and_labels_on_the_mlp():
    """The attack that adapts to label-check (server/strategies/label_check.py), in the live worker."""
    from client import GradientSession
    from models.manifest import builtin

    bundle = builtin("mlp")
    data = make_data(5)
    x, y = task_batch(data)
    server = FakeServer(bundle.manifest, bundle.train_onnx, batch_size=8)
    params = server.params[3]
    attack = {"target": "3", "share": "1", "honest_head": "true"}
    make_worker(server, data=data, seed=11, attack="backdoor", attack_params=attack).run_one()
    sent, counts = server.pushes[0]["gradient"], server.pushes[0]["meta"]["label_counts"]
    session = GradientSession(bundle.manifest, bundle.train_onnx)
    clean = session.loss_and_gradient(params, x, y)[1]
    poisoned = session.loss_and_gradient(params, add_trigger(x), np.full_like(y, 3))[1]
    weight, bias = bundle.manifest.head()
    np.testing.assert_allclose(sent[weight.start :], clean[weight.start :], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(sent[: weight.start], poisoned[: weight.start], rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(counts, np.bincount(y, minlength=10))  # the clean labels


def test_a_live_alie_worker_estimates_the_spread_from_its_own_batches(tiny):
    """The non-omniscient variant: μ, σ of its task gradient and `estimates` more of its own batches."""
    data = make_data(40)
    params = FakeServer(*tiny).params[3]
    x, y = task_batch(data)
    attack_rng = np.random.default_rng(np.random.SeedSequence(11).spawn(3)[2])
    rows = [numpy_reference(params, x, y, 10)[1]]
    rows += [numpy_reference(params, *data.batch(8, attack_rng), 10)[1] for _ in range(3)]
    mu, sigma = np.mean(rows, axis=0), np.std(rows, axis=0)
    sent = pushed(tiny, data, "alie", n="10", f="3", estimates="3")
    np.testing.assert_allclose(sent, mu - alie_z(10, 3) * sigma, rtol=1e-3, atol=1e-5)


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


def test_sybil_configs_are_distinct_installs_of_one_key(tmp_path):
    base = WorkerConfig("http://x", "one-key", make_data(), attack="sybil", seed=4, state_dir=tmp_path)
    configs = sybil_configs(base, 3)
    assert len(configs) == 3 and {c.enrollment_key for c in configs} == {"one-key"}
    assert len({c.state_dir for c in configs}) == 3 and len({c.seed for c in configs}) == 3
    assert all(Path(c.state_dir).parent == tmp_path for c in configs)  # type: ignore[arg-type]
    assert isinstance(make_attack("sybil", **configs[0].attack_params), Sybil)
    with pytest.raises(ValueError):
        sybil_configs(WorkerConfig("http://x", "k", make_data(), attack="alie"))


@pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")
def test_sybils_enroll_n_devices_with_one_key_against_the_real_app(tmp_path, database_url):
    """Within the key's quota (FLEET_ENROLL_QUOTA_PER_KEY, 1000 by default) N Sybils become N devices, and
    each push is −10·g; beyond it they stop (the next test)."""
    from starlette.testclient import TestClient

    from server.api.app import create_app
    from server.settings import Settings

    settings = Settings(
        data_dir=tmp_path, database_url=database_url, enrollment_key="one-key", admin_token="admin",
        eval_data=None, k=1, max_versions=5,
    )  # fmt: skip
    rng = np.random.default_rng(0)
    data = DeviceData(rng.integers(0, 256, (40, 1, 28, 28), dtype=np.uint8), rng.integers(0, 10, 40))
    base = WorkerConfig(
        "http://testserver", "one-key", data, attack="sybil", seed=1, state_dir=tmp_path / "s"
    )
    ids, reports = [], []
    with TestClient(create_app(settings), base_url="http://testserver") as http:
        for config in sybil_configs(base, 4):
            worker = Worker(
                config, client=http, features=StaticFeatures({"total_memory": 4e9, "available_memory": 1e9}),
                energy=EnergyModel(), sleep=lambda s: None,
            )  # fmt: skip
            ids.append(worker.enroll())
            reports.append(worker.run_one())
        stored = {d.device_id for d in http.app.state.coordinator.store.devices(limit=100)}  # type: ignore[attr-defined]
    assert len(set(ids)) == 4 and set(ids) <= stored
    assert all(r.applied and r.weight > 0 for r in reports)


@contextmanager
def serving(app: object) -> Iterator[str]:
    """``app`` served by uvicorn on a free loopback port in a thread (the Sybils' threads need a real
    server: Starlette's test transport does not take requests from several threads at once)."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "uvicorn did not start"
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def test_sybils_beyond_the_key_quota_stop_with_a_clear_message(tmp_path, database_url):
    """`fleet worker --attack sybil --sybils 5` against the real app with a quota of 2 per key: two Sybils
    enroll and train, three are refused (403 enrollment_quota) and stop at once, saying why."""
    from server.api.app import create_app
    from server.settings import Settings

    settings = Settings(
        data_dir=tmp_path, database_url=database_url, enrollment_key="one-key", admin_token="admin",
        eval_data=None, k=1, max_versions=50, enroll_quota_per_key=2, console=False,
    )  # fmt: skip
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 256, (40, 1, 28, 28), dtype=np.uint8), rng.integers(0, 10, 40)
    np.savez(tmp_path / "x.npz", x=x, y=y)
    app_ = create_app(settings)
    with serving(app_) as url:
        options = ["--server", url, "--enrollment-key", "one-key", "--attack", "sybil", "--sybils", "5"]
        result = CliRunner().invoke(
            app, ["worker", "--data", str(tmp_path / "x.npz"), *options, "--max-tasks", "1"]
        )
        enrolled = app_.state.coordinator.store.count_devices(enrollment_key_id="bootstrap")  # type: ignore[attr-defined]
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("sybil ")]
    assert len(lines) == 5 and enrolled == 2, result.output
    assert sum("stopped: max_tasks after 1 tasks" in line for line in lines) == 2, result.output
    refused = [line for line in lines if "enrollment_quota after 0 tasks" in line]
    assert len(refused) == 3, result.output
    assert all("has enrolled its quota of 2 devices" in line for line in refused)


# --- the CLI ------------------------------------------------------------------------------------------


def invoke(tmp_path: Path, *options: str):  # type: ignore[no-untyped-def]
    args = ["worker", "--data", str(tmp_path / "x.npz"), "--enrollment-key", "k", *options]
    return CliRunner().invoke(app, args)


def test_the_cli_offers_the_suite_and_refuses_what_cannot_run(tmp_path):
    assert set(ATTACKS) == {
        "sign-flip", "scaled", "gaussian", "label-flip", "stale-replay", "alie", "ipm", "backdoor", "sybil"
    }  # fmt: skip
    result = invoke(tmp_path, "--attack", "nope")
    assert result.exit_code == 2 and "must be one of" in result.output
    result = invoke(tmp_path, "--attack", "scaled", "--attack-param", "epsilon=3")
    assert result.exit_code == 2 and "takes" in result.output
    result = invoke(tmp_path, "--attack", "alie", "--sybils", "3")
    assert result.exit_code == 2 and "--attack sybil" in result.output
    result = invoke(tmp_path, "--attack-param", "k=3")
    assert result.exit_code == 2 and "needs --attack" in result.output
    result = invoke(tmp_path, "--attack", "ALIE", "--sybils", "3")  # named as the paper writes it
    assert result.exit_code == 2 and "--attack sybil" in result.output  # known: only --sybils is refused


def test_the_cli_runs_n_sybils_of_one_key(tmp_path, monkeypatch):
    import client._sybils as sybils

    seen = {}

    def fake_run(config, count=None, **_):  # type: ignore[no-untyped-def]
        seen["configs"] = sybils.sybil_configs(config, count)
        return []

    monkeypatch.setattr(sybils, "run_sybils", fake_run)
    result = invoke(tmp_path, "--attack", "sybil", "--sybils", "3", "--attack-param", "inner=ipm")
    assert result.exit_code == 0, result.output
    configs = seen["configs"]
    assert len(configs) == 3 and {c.enrollment_key for c in configs} == {"k"}
    attack = make_attack("sybil", **configs[0].attack_params)
    assert isinstance(attack, Sybil) and isinstance(attack.inner, IPM) and attack.count == 3


def test_label_flip_with_a_share_flips_that_share_of_the_batch_and_keeps_the_rest():
    y = np.arange(10).repeat(100)
    x = np.zeros((len(y), 4), np.float32)
    whole = make_attack("label-flip", np.random.default_rng(0))
    np.testing.assert_array_equal(whole.batch(x, y, 10)[1], 9 - y)
    half = make_attack("label-flip", np.random.default_rng(0), share="0.5")
    _, flipped = half.batch(x, y, 10)
    changed = flipped != y
    assert 0.4 < changed.mean() < 0.6  # about half, each flipped to 9 - y
    np.testing.assert_array_equal(flipped[changed], 9 - y[changed])
    assert (make_attack("label-flip", share=0.0).batch(x, y, 10)[1] == y).all()
    with pytest.raises(ValueError):
        make_attack("label-flip", share="1.5")


def test_label_flip_with_a_duty_poisons_that_share_of_the_pushes_whole_and_leaves_the_rest_honest():
    y = np.arange(10).repeat(10)
    x = np.zeros((len(y), 4), np.float32)
    attack = make_attack("label-flip", np.random.default_rng(0), duty="0.3")
    pushes = [attack.batch(x, y, 10)[1] for _ in range(400)]
    flipped = [p for p in pushes if not (p == y).all()]
    assert all((p == 9 - y).all() for p in flipped)  # a poisoned push is flipped whole
    assert 0.22 < len(flipped) / len(pushes) < 0.38
    assert all((make_attack("label-flip", duty=0.0).batch(x, y, 10)[1] == y).all() for _ in range(5))
    with pytest.raises(ValueError):
        make_attack("label-flip", duty="-0.1")
