"""The device's own privacy ledger and policy (issue 27, findings 4 and 5): persistence and atomic writes,
the charge of each mechanism, its own budget, its floors, changed data, and the install secret."""

from __future__ import annotations

import json
import os
import stat

import numpy as np
import pytest

from client import DeviceData, DeviceLedger, DevicePrivacy, PrivacyRefused, WorkerError
from client._ledger import DECLINED, EXHAUSTED, LEDGER_FILE, data_fingerprint
from client._state import INSTALL_FILE, default_state_dir, install_secret
from fleet_protocol import GAUSSIAN_MECHANISM, LOCAL_SGD_MECHANISM, NORM_LAPLACE_MECHANISM, DPTerms, WireError
from fleet_protocol.accounting import DEFAULT_DELTA, PrivacyEvent, epsilon

GAUSS = {
    "mechanism": GAUSSIAN_MECHANISM,
    "clip": 1.0,
    "noise_multiplier": 2.0,
    "sampling_rate": 0.16,
    "expected_batch": 32,
}
LOCAL = {
    "mechanism": LOCAL_SGD_MECHANISM,
    "clip": 0.5,
    "noise_multiplier": 2.0,
    "sampling_rate": 0.05,
    "expected_batch": 10,
    "round": 0,
    "local_steps": 10,
    "step_size": 0.01,
}
LAPLACE = {
    "mechanism": NORM_LAPLACE_MECHANISM,
    "clip": 3.0,
    "noise_multiplier": 1.0,
    "sampling_rate": 0.06,
    "expected_batch": 12,
    "epsilon_step": 0.4,
    "sensitivity": 0.5,
    "noise": "exact",
}


def examples(n: int = 200, seed: int = 0) -> DeviceData:
    rng = np.random.default_rng(seed)
    return DeviceData(rng.random((n, 4), dtype=np.float32), rng.integers(0, 10, n))


def test_a_step_is_on_disk_before_it_is_computed_and_the_ledger_survives_a_restart(tmp_path):
    data = examples()
    ledger = DeviceLedger.open(tmp_path)
    terms = ledger.admit(GAUSS, data, "t-1")
    assert isinstance(terms, DPTerms) and terms.noise_multiplier == 2.0
    saved = json.loads((tmp_path / LEDGER_FILE).read_text())  # written by admit, before any compute
    assert saved["tasks"] == 1 and saved["last_task"]["task_id"] == "t-1"
    assert saved["budget"] == 8.0 and saved["delta"] == DEFAULT_DELTA
    assert saved["fingerprints"] == [data_fingerprint(data.x, data.y)]
    assert stat.S_IMODE(os.stat(tmp_path / LEDGER_FILE).st_mode) == 0o600
    again = DeviceLedger.open(tmp_path)
    assert again.tasks == 1 and again.epsilon() == pytest.approx(
        epsilon([PrivacyEvent(2.0, 0.16)], DEFAULT_DELTA)
    )


def test_each_mechanism_is_charged_as_one_gaussian_event_or_its_pure_epsilon():
    data = examples()
    ledger = DeviceLedger.open(None)
    for dp in (GAUSS, GAUSS, LOCAL, LAPLACE):
        ledger.admit(dp, data)
    # DP-SGD steps at (σ, q); a local-SGD round as ONE Gaussian event at q = s/N; norm-Laplace: its pure ε
    assert ledger.events() == [PrivacyEvent(2.0, 0.05, 1), PrivacyEvent(2.0, 0.16, 2)]
    gaussian = epsilon([PrivacyEvent(2.0, 0.16, 2), PrivacyEvent(2.0, 0.05)], DEFAULT_DELTA)
    assert ledger.tasks == 4 and ledger.epsilon() == pytest.approx(gaussian + 0.4)
    # the device charges the q it samples at when that is above the grant's (an upper bound)
    ledger.admit({**GAUSS, "sampling_rate": 0.01}, data)
    assert PrivacyEvent(2.0, 0.16, 3) in ledger.events()


def test_the_device_refuses_beyond_its_own_budget_whatever_the_coordinator_says(tmp_path):
    data = examples()
    ledger = DeviceLedger.open(tmp_path, DevicePrivacy(budget=1.6))
    with pytest.raises(PrivacyRefused) as refused:
        for _ in range(20):
            ledger.admit(GAUSS, data)
    assert refused.value.reason == EXHAUSTED and refused.value.stop
    tasks = ledger.tasks
    assert 1 <= tasks < 20 and ledger.epsilon() <= 1.6
    assert epsilon([PrivacyEvent(2.0, 0.16, tasks + 1)], DEFAULT_DELTA) > 1.6  # the next one did not fit
    assert DeviceLedger.open(tmp_path).exhausted is not None  # a restarted worker asks nothing
    raised = DeviceLedger.open(tmp_path, DevicePrivacy(budget=3.0))  # the owner raises it: work again
    assert raised.exhausted is None and raised.admit(GAUSS, data) is not None and raised.tasks == tasks + 1


@pytest.mark.parametrize(
    ("dp", "why"),
    [
        ({**GAUSS, "noise_multiplier": 0.0}, "noise_multiplier > 0"),  # finding 5: σ = 0 was accepted
        ({**LOCAL, "noise_multiplier": 0.0}, "noise_multiplier > 0"),
        ({**GAUSS, "noise_multiplier": 0.3}, "below this device's floor"),
        ({**GAUSS, "sampling_rate": 0.9}, "exceeds this device's cap"),
        ({**GAUSS, "expected_batch": 150}, "exceeds this device's cap"),  # q = 150/200 on the device
        ({**GAUSS, "mechanism": "dpsgd-poisson-gaussian/2"}, "unknown DP mechanism"),
        ({**LAPLACE, "noise": "paper"}, "not ε-DP"),
        ({**LAPLACE, "replacement": True}, "not ε-DP"),
        ({**LAPLACE, "sensitivity": 0.1}, "under-noised"),
    ],
)
def test_terms_below_the_device_policy_are_declined_and_nothing_is_charged(tmp_path, dp, why):
    ledger = DeviceLedger.open(tmp_path)
    with pytest.raises(PrivacyRefused, match=why) as refused:
        ledger.admit(dp, examples())
    assert refused.value.reason == DECLINED and not refused.value.stop
    assert DeviceLedger.open(tmp_path).tasks == 0


def test_a_device_can_narrow_its_mechanisms_and_its_policy_is_checked():
    only_gauss = DeviceLedger.open(None, DevicePrivacy(mechanisms=(GAUSSIAN_MECHANISM,)))
    with pytest.raises(PrivacyRefused, match="unknown DP mechanism"):
        only_gauss.admit(LAPLACE, examples())
    for bad in ({"budget": 0.0}, {"delta": 1.0}, {"min_noise_multiplier": 0.0}, {"max_sampling_rate": 1.5}):
        with pytest.raises(ValueError):
            DevicePrivacy(**bad)
    with pytest.raises(ValueError, match="not implemented"):
        DevicePrivacy(mechanisms=("rappor/1",))


def test_non_private_work_is_refused_once_the_data_has_a_dp_ledger():
    data = examples()
    ledger = DeviceLedger.open(None)
    assert ledger.admit(None, data) is None  # no DP yet: a plain task is fine
    ledger.admit(GAUSS, data)
    plain_local_sgd = {**LOCAL, "clip": 0.0, "noise_multiplier": 0.0}
    for dp in (None, plain_local_sgd):
        with pytest.raises(PrivacyRefused, match="refuses non-private tasks") as refused:
            ledger.admit(dp, data)
        assert not refused.value.stop
    assert DeviceLedger.open(None, DevicePrivacy(require_dp=False)).admit(None, data) is None
    with pytest.raises(PrivacyRefused):
        DeviceLedger.open(None, DevicePrivacy(require_dp=True)).admit(None, data)


def test_a_failed_write_records_nothing_and_refuses_the_task(tmp_path, monkeypatch):
    data = examples()
    ledger = DeviceLedger.open(tmp_path)
    ledger.admit(GAUSS, data)
    before = (tmp_path / LEDGER_FILE).read_bytes()

    def crash(*_args: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("client._state.os.replace", crash)
    with pytest.raises(PrivacyRefused, match="cannot record the privacy charge"):
        ledger.admit(GAUSS, data)
    monkeypatch.undo()
    assert (tmp_path / LEDGER_FILE).read_bytes() == before and ledger.tasks == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [LEDGER_FILE]  # no temporary file left behind


def test_changed_data_keeps_its_ledger_and_a_corrupt_one_is_not_silently_replaced(tmp_path):
    first, grown = examples(200), examples(201)
    ledger = DeviceLedger.open(tmp_path)
    ledger.admit(GAUSS, first)
    ledger.admit(GAUSS, grown)  # an app's new drawing: the old examples already spent this ε
    again = DeviceLedger.open(tmp_path)
    assert again.tasks == 2 and json.loads((tmp_path / LEDGER_FILE).read_text())["fingerprints"] == [
        data_fingerprint(first.x, first.y),
        data_fingerprint(grown.x, grown.y),
    ]
    assert again.epsilon() == pytest.approx(epsilon([PrivacyEvent(2.0, 0.16, 2)], DEFAULT_DELTA))
    (tmp_path / LEDGER_FILE).write_text("{not json")
    with pytest.raises(WorkerError, match="unreadable"):
        DeviceLedger.open(tmp_path)


def test_dp_terms_refuse_zero_noise_for_the_gaussian_mechanisms():
    """Finding 5: ``DPTerms.from_json`` accepted σ = 0, and the device returned the exact clipped mean."""
    for dp in ({**GAUSS, "noise_multiplier": 0.0}, {**LOCAL, "noise_multiplier": 0.0}):
        with pytest.raises(WireError, match="noise_multiplier > 0"):
            DPTerms.from_json(dp)
    assert DPTerms.from_json({**LOCAL, "clip": 0.0, "noise_multiplier": 0.0}).clip == 0  # plain local SGD
    assert DPTerms.from_json(GAUSS).noise_multiplier == 2.0


def test_the_install_secret_is_kept_in_the_state_dir(tmp_path):
    secret = install_secret(tmp_path / "state")
    assert len(secret) >= 22 and install_secret(tmp_path / "state") == secret
    assert stat.S_IMODE(os.stat(tmp_path / "state" / INSTALL_FILE).st_mode) == 0o600
    assert install_secret(None) != install_secret(None)  # in memory: one per worker
    (tmp_path / "state" / INSTALL_FILE).write_text("[]")
    with pytest.raises(ValueError, match="unreadable install state"):
        install_secret(tmp_path / "state")
    assert default_state_dir(tmp_path / "device_000.npz") == tmp_path / "device_000.npz.fleet-state"


def test_fleet_worker_keeps_its_state_next_to_the_data_or_where_it_is_told(tmp_path):
    from typer.testing import CliRunner

    from fleet.cli import app

    data = examples()
    shard = tmp_path / "phone.npz"
    np.savez(shard, x=data.x, y=data.y)
    base = ["worker", "--data", str(shard), "--enrollment-key", "k", "--max-tasks", "0"]
    for extra, where in (
        ([], tmp_path / "phone.npz.fleet-state"),
        (["--state-dir", str(tmp_path / "s")], tmp_path / "s"),
    ):
        result = CliRunner().invoke(app, [*base, *extra, "--privacy-budget", "3"])
        assert result.exit_code == 0, result.output
        assert (where / INSTALL_FILE).exists() and DeviceLedger.open(where).budget == 3.0


def test_the_owners_budget_is_kept_with_the_ledger(tmp_path):
    DeviceLedger.open(tmp_path, DevicePrivacy(budget=5.0))
    assert DeviceLedger.open(tmp_path).budget == 5.0  # given once, kept
    assert DeviceLedger.open(tmp_path, DevicePrivacy(delta=1e-6)).delta == DEFAULT_DELTA  # δ is fixed


def test_a_device_without_secure_noise_or_an_accountant_stops_before_charging(tmp_path, monkeypatch):
    """The Android build ships neither randomgen nor dp-accounting yet: its DP tasks stop, never run."""
    import client._ledger as module
    from client._ledger import UNACCOUNTABLE

    def missing() -> None:
        raise ImportError("No module named 'randomgen'")

    monkeypatch.setattr(module, "secure_generator", missing)
    ledger = DeviceLedger.open(tmp_path)
    with pytest.raises(PrivacyRefused) as refused:
        ledger.admit(GAUSS, examples(), "t-1")
    assert refused.value.reason == UNACCOUNTABLE and refused.value.stop and ledger.tasks == 0
