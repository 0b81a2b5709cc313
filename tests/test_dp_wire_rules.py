"""The DP wire rules of issue 27, one regression test per finding: the coordinator refuses what a DP device
may not send (label counts with a request; a loss, label counts or a batch size other than B with a push),
checks label counts against N without DP (finding 13), and refuses DP with a strategy, a wrapper or an
admission rule that reads what a DP device does not send. The device samples at the granted rate and
reports its time and energy for B."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from pydantic import ValidationError

from client._dp_wire import ask_fields, dp_push_meta
from client._privacy import private_step
from fleet_protocol import GAUSSIAN_MECHANISM, DPTerms
from fleet_protocol.accounting import bucket_examples
from server.compose import build_coordinator, check_dp_strategy
from server.core.types import TaskGrant, TaskRequest, TaskResult
from server.settings import Settings, with_overrides
from server.strategies import WKAFL, AdaSGD, Arrival, DynSGD, LossGuard
from tests.conftest import FEATURES, settings_for

B = 16


@pytest.fixture
def dp_api(make_api):
    return make_api(dp=True, dp_epsilon_budget=None, initial_model="logreg", min_batch=B, max_batch=B)


def dp_ask(api, headers, **extra):
    return api.http.post(
        "/v1/tasks", json={"features": FEATURES, "local_examples": 192, **extra}, headers=headers
    )


def dp_meta(**changes):
    return {
        "label_counts": None,
        "loss": None,
        "compute_time_ms": 5.0,
        "energy": None,
        "batch_size": B,
        **changes,
    }


# -- finding 3: N and the label counts out with every request ----------------------------------------------
def test_a_dp_request_carrying_label_counts_is_refused_and_charges_nothing(dp_api):
    device = dp_api.enroll()
    refused = dp_ask(dp_api, device, label_counts=[20] * 10)
    assert refused.status_code == 422 and "label_counts" in refused.json()["detail"], refused.text
    assert dp_api.http.get("/v1/privacy/me", headers=device).json()["tasks"] == 0
    assert dp_ask(dp_api, device).status_code == 201


def test_the_active_model_tells_a_device_before_its_first_request_that_dp_is_on(dp_api, make_api):
    assert dp_api.http.get("/v1/models/active").json()["dp"] is True
    assert make_api(initial_model="logreg").http.get("/v1/models/active").json()["dp"] is False


def test_a_dp_device_reports_its_bucketed_n_and_no_labels():
    assert ask_fields([100, 100], 200, private=True) == {"label_counts": None, "local_examples": 192}
    assert ask_fields([100, 100], 200, private=False) == {"label_counts": [100, 100], "local_examples": 200}
    assert bucket_examples(201) == bucket_examples(200)  # an added example does not show


# -- findings 1 and 15: the loss in every DP push, a batch size other than B --------------------------------
def test_a_dp_push_with_a_loss_label_counts_or_the_sampled_batch_size_is_refused(dp_api):
    device = dp_api.enroll()
    n = dp_api.http.get("/v1/models/active").json()["num_params"]
    gradient = np.random.default_rng(0).normal(0, 1.1 / B, n)  # the noise σC/B alone (σ 1.1, C 1)
    refusals = {
        "loss": dp_meta(loss=2.3),
        "label_counts": dp_meta(label_counts=[B] + [0] * 9),
        "expected_batch": dp_meta(batch_size=1),
    }
    for word, meta in refusals.items():  # a task each: after a refused DP push only that body may come again
        grant = dp_ask(dp_api, device).json()
        assert grant["batch_size"] == B
        answer = dp_api.push(device, grant["task_id"], gradient, meta)
        assert answer.status_code == 422 and word in answer.json()["detail"], answer.text
    grant = dp_ask(dp_api, device).json()
    applied = dp_api.push(device, grant["task_id"], gradient, dp_meta())
    assert applied.status_code == 200 and applied.json()["applied"], applied.text


def test_a_dp_push_without_a_loss_is_stored_and_found_after_a_restart(tmp_path, storage_url):
    settings = settings_for(
        tmp_path, database_url=storage_url, dp=True, initial_model="logreg", min_batch=B, max_batch=B
    )
    first = build_coordinator(settings)
    device, _ = first.enroll("Pixel")
    grant = first.request_task(TaskRequest(device, dict(FEATURES), None, local_examples=192))
    assert isinstance(grant, TaskGrant)
    noise = np.random.default_rng(0).normal(0, 1.1 / B, first.run.manifest.num_params)  # σC/B, σ 1.1
    gradient = noise.astype(np.float32)
    body = TaskResult(None, None, 5.0, None, B, gradient, hashlib.sha256(gradient.tobytes()).hexdigest())
    assert first.submit(device, grant.task_id, body).applied
    first.close()
    second = build_coordinator(settings)
    assert second.run.version == 1 and second.submit(device, grant.task_id, body).duplicate
    second.close()


# -- finding 13: label counts not checked against N ----------------------------------------------------------
@pytest.mark.parametrize(("counts", "examples"), [([1] * 10, 6000), ([6000] * 10, 100)])
def test_label_counts_that_do_not_sum_to_n_are_refused(make_api, counts, examples):
    api = make_api(initial_model="logreg")
    device = api.enroll()
    body = {"features": FEATURES, "label_counts": counts, "local_examples": examples}
    refused = api.http.post("/v1/tasks", json=body, headers=device)
    assert refused.status_code == 422 and "local_examples" in refused.json()["detail"], refused.text
    matching = {**body, "local_examples": sum(counts)}
    assert api.http.post("/v1/tasks", json=matching, headers=device).status_code == 201
    assert api.task(device).status_code == 201  # counts without N: as before


def test_without_dp_a_push_may_leave_out_its_loss_and_labels(make_api):
    """A DP task of a strategy's own terms on a coordinator without DP (a local SGD round, a norm-Laplace
    step) is pushed as a DP push: the coordinator takes it, the strategies read None."""
    api = make_api(initial_model="logreg", min_batch=10, max_batch=10)
    device = api.enroll()
    grant = api.task(device).json()
    n = api.http.get("/v1/models/active").json()["num_params"]
    meta = dp_meta(batch_size=10)
    assert api.push(device, grant["task_id"], np.full(n, 1e-3), meta).status_code == 200


# -- strategies that read what a DP device does not send ----------------------------------------------------
@pytest.mark.parametrize(
    ("settings", "names"),
    [
        ({"strategy": "adasgd"}, ("strategy adasgd", "label_counts")),
        ({"strategy": "adabuff"}, ("strategy adabuff", "label_counts")),
        ({"strategy": "wkafl"}, ("strategy wkafl", "loss")),
        ({"wrappers": ["loss-guard"]}, ("wrapper loss-guard", "loss")),
        ({"similarity_drop": 0.2}, ("admission by similarity", "label_counts")),
    ],
)
def test_dp_with_a_strategy_that_reads_the_loss_or_the_labels_is_refused(tmp_path, settings, names):
    with pytest.raises(ValidationError) as refused:
        settings_for(tmp_path, dp=True, **settings)
    assert all(name in str(refused.value) for name in names), refused.value
    settings_for(tmp_path, **settings)  # without DP: as before


def test_the_documented_modes_without_those_fields_run_with_dp(tmp_path):
    settings_for(tmp_path, dp=True, strategy={"name": "adasgd", "boost_scope": "none"})
    settings_for(
        tmp_path, dp=True, strategy={"name": "wkafl", "wkafl_loss_threshold": 0, "wkafl_switch_update": 5}
    )
    settings_for(tmp_path, dp=True, wrappers=["clip-norm", "kardam"])


def test_the_console_and_the_composition_root_refuse_it_too(tmp_path):
    running = settings_for(tmp_path, dp=True)
    with pytest.raises(ValueError, match="wrapper loss-guard reads loss"):
        with_overrides(running, {"wrappers": [{"name": "loss-guard"}]})  # the console's path
    unchecked = Settings.model_construct(**{**running.__dict__, "strategy": AdaSGD.settings()})
    with pytest.raises(ValueError, match="strategy adasgd reads label_counts"):
        check_dp_strategy(unchecked)


def blind(task: str = "t", tau: int = 0) -> Arrival:
    """A DP push's arrival: no loss, no label counts."""
    return Arrival(task, "d", 0, tau, np.full(4, 0.1, np.float32), None, B, None, 0.0)


def test_every_reader_of_the_loss_and_the_labels_takes_none():
    guard = LossGuard(DynSGD(), warmup=0)
    ada = AdaSGD(boost_scope="none")
    wkafl = WKAFL(k=2, wkafl_loss_threshold=None)
    for strategy in (guard, ada, wkafl):
        assert strategy.terms_for(device_id="d", label_counts=None).similarity is None
        strategy.receive(blind("a"))
        strategy.receive(blind("b", tau=1))
        assert np.isfinite(strategy.aggregate(np.zeros(4, np.float32))).all()
    wkafl.receive(blind("c"))
    restored = WKAFL(k=2)
    restored.load_state_dict(wkafl.state_dict())
    assert restored.tags[0].loss is None and wkafl.stage == 1
    assert guard.loss_average is None and ada.label_totals is None


# -- the device: the granted sampling rate, time and energy for B ---------------------------------------
class Recording:
    """A stand-in DP graph recording how many examples each call was given."""

    num_params = 3

    def __init__(self) -> None:
        self.batches: list[int] = []

    def clipped_sum(self, flat_params, x, y, clip):
        self.batches.append(len(y))
        return 0.0, np.zeros(self.num_params, np.float32)


def test_the_device_poisson_samples_at_the_granted_rate_not_b_over_n():
    terms = DPTerms(GAUSSIAN_MECHANISM, clip=1.0, noise_multiplier=1.0, sampling_rate=0.02, expected_batch=50)
    x, y = np.zeros((1000, 1)), np.zeros(1000, np.int64)
    session, rng = Recording(), np.random.default_rng(0)
    for _ in range(50):
        private_step(terms, session, np.zeros(3), x, y, rng=rng)
    assert 15 < np.mean(session.batches) < 25  # q·N = 20; B/N would draw 50


def test_a_dp_push_reports_time_and_energy_for_b_not_for_the_sampled_batch():
    terms = DPTerms(GAUSSIAN_MECHANISM, clip=1.0, noise_multiplier=1.0, sampling_rate=0.1, expected_batch=40)
    meta = dp_push_meta(terms, examples=10, compute_time_ms=25.0, energy=0.002)
    assert meta == {
        "label_counts": None,
        "loss": None,
        "compute_time_ms": 100.0,
        "energy": 0.008,
        "batch_size": 40,
    }
    assert dp_push_meta(terms, examples=0, compute_time_ms=1.0, energy=None)["compute_time_ms"] == 40.0
