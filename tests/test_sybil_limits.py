"""Sybil limits (issue 30, part 4): a quota of devices per enrollment key, a rate per key, the attestation
hook, migration 0010 and the console's devices per key; in the core (memory, SQLite, PostgreSQL) and
through the API."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import insert, select

from server.core.attestation import AcceptAll, Verdict, enrollment_binding
from server.core.coordinator import Coordinator
from server.core.devices import DeviceRegistry, hash_token
from server.core.enrollment import BOOTSTRAP, KeyUse
from server.core.errors import EnrollmentRefused, Forbidden, InvalidInput
from server.core.ports import Store
from server.store.database import make_engine, migrate, session_factory
from server.store.sql import SqlStore
from server.store.tables import DeviceRow, EnrollmentKeyRow
from tests.conftest import ENROLL
from tests.support.stores import BACKENDS, plain_cores
from tests.test_console import console, csrf, login  # noqa: F401  (the console fixture)
from tests.test_console_core import alembic_config

SECRET = "s" * 24  # an install secret (urlsafe, ≥ 22 characters)


@pytest.fixture(params=BACKENDS)
def make_core(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., Coordinator]]:
    """Started coordinators on one storage (a second call is a restart), with a default quota."""
    with plain_cores(request.param, tmp_path, enroll_quota=3) as core:
        yield core


def stored_key(core: Coordinator, max_devices: int | None = None) -> tuple[KeyUse, str]:
    key, secret = core.devices.create_enrollment_key("field", actor="alice", max_devices=max_devices)
    use = core.devices.resolve_key(secret)
    assert use is not None and use.key == key
    return use, secret


def bootstrap(core: Coordinator) -> KeyUse:
    use = core.devices.resolve_key(ENROLL, bootstrap=True)
    assert use is not None and use.key.key_id == BOOTSTRAP
    return use


# -- the quota, in the core --------------------------------------------------------------------------
def test_a_key_enrolls_its_quota_and_no_more_and_other_keys_are_not_touched(make_core):
    core = make_core()
    own, own_secret = stored_key(core, max_devices=2)
    for _ in range(2):
        core.enroll("Pixel", key=own)
    with pytest.raises(EnrollmentRefused) as refused:
        core.enroll("Pixel", key=own)
    assert refused.value.reason == "enrollment_quota" and "quota of 2 devices" in str(refused.value)
    assert core.store.count_devices(enrollment_key_id=own.key.key_id) == 2
    default, _ = stored_key(core)  # no quota of its own: the default (3)
    for _ in range(3):
        core.enroll("Pixel", key=default)
    with pytest.raises(EnrollmentRefused):
        core.enroll("Pixel", key=default)
    device, token = core.enroll("Pixel")  # in process, without a key: not limited
    assert core.devices.authenticate(token) == device
    assert core.devices.devices_per_key() == {own.key.key_id: 2, default.key.key_id: 3}
    restarted = make_core()  # the counts are storage's: a restart does not reset them
    with pytest.raises(EnrollmentRefused):
        restarted.enroll("Pixel", key=restarted.devices.resolve_key(own_secret))


def test_an_install_enrolling_again_is_not_counted_twice_even_when_the_key_is_full(make_core):
    core = make_core(enroll_quota=2)
    key = bootstrap(core)
    first, _ = core.enroll("Pixel", SECRET, key=key)
    again, token = core.enroll("Pixel", SECRET, key=key)
    assert again == first and core.store.count_devices(enrollment_key_id=BOOTSTRAP) == 1
    core.enroll("Pixel", key=key)  # the second slot
    with pytest.raises(EnrollmentRefused):
        core.enroll("Pixel", "t" * 24, key=key)  # a new install: refused
    back, token = core.enroll("Pixel", SECRET, key=key)  # the known install: still welcome
    assert back == first and core.devices.authenticate(token) == first


def test_revoked_devices_keep_their_slot_and_a_revoked_install_is_refused_with_a_reason(make_core):
    core = make_core(enroll_quota=1)
    key = bootstrap(core)
    device, _ = core.enroll("Pixel", SECRET, key=key)
    core.revoke_device(device.device_id, actor="alice")
    with pytest.raises(EnrollmentRefused) as full:
        core.enroll("Pixel", key=key)
    assert full.value.reason == "enrollment_quota"
    with pytest.raises(Forbidden) as revoked:
        core.enroll("Pixel", SECRET, key=key)
    assert isinstance(revoked.value, EnrollmentRefused) and revoked.value.reason == "install_revoked"


def test_a_key_quota_is_validated_and_the_default_follows_the_setting(make_core):
    core = make_core(enroll_quota=1)
    with pytest.raises(InvalidInput):
        core.devices.create_enrollment_key("bad", actor="alice", max_devices=0)
    key = bootstrap(core)
    core.enroll("Pixel", key=key)
    with pytest.raises(EnrollmentRefused):
        core.enroll("Pixel", key=key)
    core.devices.default_quota = 2  # what apply_settings does when the console raises it
    core.enroll("Pixel", key=key)
    assert core.devices.quota(key.key) == 2


# -- attestation ---------------------------------------------------------------------------------------
class Refusing:
    name = "refusing"

    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None, str]] = []

    def verify(self, device_model: str, token: str | None, *, binding: str) -> Verdict:
        self.calls.append((device_model, token, binding))
        return Verdict(token == "good", "the integrity verdict is not MEETS_DEVICE_INTEGRITY")


def test_the_attestation_hook_is_called_with_the_binding_and_a_refusal_enrolls_nothing(make_core):
    verifier = Refusing()
    core = make_core(attestation=verifier)
    key = bootstrap(core)
    with pytest.raises(EnrollmentRefused) as refused:
        core.enroll("Pixel", SECRET, key=key, attestation="forged")
    assert refused.value.reason == "attestation_refused" and "MEETS_DEVICE_INTEGRITY" in str(refused.value)
    assert core.store.count_devices() == 0
    device, _ = core.enroll("Pixel", SECRET, key=key, attestation="good")
    binding = enrollment_binding(hash_token(ENROLL), hash_token(SECRET), "Pixel")
    assert verifier.calls == [("Pixel", "forged", binding), ("Pixel", "good", binding)]
    with pytest.raises(EnrollmentRefused):  # enrolling again is attested too
        core.enroll("Pixel", SECRET, key=key, attestation=None)
    core.enroll("Pixel")  # in process, without a key: no attestation asked
    assert len(verifier.calls) == 3


def test_the_default_verifier_accepts_everything_and_says_so():
    verdict = AcceptAll().verify("Pixel", None, binding="x")
    assert verdict.accepted and "every device is accepted" in verdict.reason
    assert Coordinator.__init__.__kwdefaults__["attestation"] is None  # DeviceRegistry: AcceptAll


def test_compose_wires_the_verifier_and_the_quota(tmp_path):
    from server.compose import build_coordinator
    from tests.conftest import settings_for

    core = build_coordinator(settings_for(tmp_path, enroll_quota_per_key=7))
    try:
        assert isinstance(core.devices.attestation, AcceptAll) and core.devices.default_quota == 7
    finally:
        core.close()


# -- through the API -----------------------------------------------------------------------------------
def enroll(api: Any, key: str = ENROLL, **body: Any) -> Any:
    return api.http.post("/v1/devices", json={"enrollment_key": key, "device_model": "Pixel", **body})


def test_the_api_refuses_beyond_the_quota_with_403_and_a_reason(make_api):
    api = make_api(enroll_quota_per_key=2)
    assert [enroll(api).status_code for _ in range(2)] == [201, 201]
    refused = enroll(api)
    assert refused.status_code == 403 and refused.json()["reason"] == "enrollment_quota"
    assert enroll(api, install_secret=SECRET).status_code == 403  # a new install, even one with a secret
    _, secret = api.coordinator.devices.create_enrollment_key("lab", actor="alice", max_devices=1)
    assert enroll(api, secret).status_code == 201  # another key has its own quota
    assert enroll(api, secret).json()["reason"] == "enrollment_quota"
    assert enroll(api, "wrong").status_code == 401


def test_a_key_is_rate_limited_across_addresses(make_api):
    """The per-address bucket is far away; the key's own bucket (burst 3) stops the fourth enrollment."""
    api = make_api(enroll_key_burst=3, enroll_key_rate_per_second=0.01, enroll_burst=1000)
    assert [enroll(api).status_code for _ in range(3)] == [201] * 3
    limited = enroll(api)
    assert limited.status_code == 429 and "this key" in limited.json()["detail"]
    assert int(limited.headers["Retry-After"]) >= 1
    _, secret = api.coordinator.devices.create_enrollment_key("other", actor="alice")
    assert enroll(api, secret).status_code == 201  # one key's bucket is not another's
    assert enroll(api, "wrong").status_code == 401  # wrong keys never spend a real key's tokens


def test_the_api_takes_an_attestation_token_and_refuses_a_malformed_one(make_api):
    api = make_api()
    assert enroll(api, attestation="eyJhbGciOiJBMjU2S1cifQ.abc-_=").status_code == 201
    assert enroll(api, attestation="not a token!").status_code == 422


# -- migration 0010 ------------------------------------------------------------------------------------
def test_migration_0010_leaves_old_devices_on_no_key_and_old_keys_on_the_default(storage_url):
    engine = make_engine(storage_url)
    migrate(engine)
    with engine.begin() as connection:
        command.downgrade(alembic_config(connection), "0009")
        connection.execute(
            insert(DeviceRow.__table__).values(
                id="d-old",
                device_model="Pixel",
                token_hash="h",
                created_at=1.0,
                last_seen=1.0,
                tasks_applied=0,
            )
        )
        key = {"id": "k-old", "name": "old", "key_hash": "x" * 64, "created_at": 1.0, "created_by": "a"}
        connection.execute(insert(EnrollmentKeyRow.__table__).values(**key))
    migrate(engine)
    store = SqlStore(session_factory(engine))
    assert store.device("d-old").enrollment_key_id is None and store.devices_per_key() == {}
    [old] = store.enrollment_keys()
    assert old.max_devices is None
    with engine.begin() as connection:  # and down again: the columns go, the rows stay
        command.downgrade(alembic_config(connection), "0009")
        assert connection.execute(select(DeviceRow.__table__.c.id)).scalars().all() == ["d-old"]
    migrate(engine)
    engine.dispose()


def test_stored_quotas_and_keys_survive_in_sql(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'q.db'}")
    migrate(engine)
    store: Store = SqlStore(session_factory(engine))
    registry = DeviceRegistry(store=store, clock=time.time, default_quota=5)
    key, secret = registry.create_enrollment_key("lab", actor="alice", max_devices=4)
    registry.enroll("Pixel", key=registry.resolve_key(secret))
    assert store.enrollment_keys()[0].max_devices == 4
    assert [d.enrollment_key_id for d in store.devices(enrollment_key_id=key.key_id)] == [key.key_id]
    assert store.devices(enrollment_key_id="k-none") == []
    engine.dispose()


# -- the console ---------------------------------------------------------------------------------------
def test_the_console_shows_devices_per_key_against_the_quota_and_creates_keys_with_one(console):  # noqa: F811
    client = console(enrollment_key=ENROLL, enroll_quota_per_key=3)
    for _ in range(2):
        assert (
            client.post("/v1/devices", json={"enrollment_key": ENROLL, "device_model": "P"}).status_code
            == 201
        )
    login(client)
    token = csrf(client)
    page = client.post("/admin/keys", data={"name": "field", "max_devices": "1", "csrf_token": token})
    assert page.status_code == 200 and "data-new-key" in page.text
    secret = re.search(r"data-new-key>([^<]+)<", page.text).group(1)
    assert client.post("/v1/devices", json={"enrollment_key": secret, "device_model": "P"}).status_code == 201
    html = client.get("/admin/settings").text
    bootstrap_row = re.search(r'<tr data-key="bootstrap".*?</tr>', html, re.S).group(0)
    assert re.search(r">2</a> / 3", bootstrap_row) and "full" not in bootstrap_row
    field_row = re.search(r'<tr data-key="k-[0-9a-f]+" class="warn">.*?</tr>', html, re.S).group(0)
    assert re.search(r">1</a> / 1", field_row) and "full" in field_row
    key_id = re.search(r'data-key="(k-[0-9a-f]+)"', field_row).group(1)
    devices = client.get(f"/admin/devices?key={key_id}").text
    assert devices.count(f"<code>{key_id}</code></a>") == 1  # the one device that key enrolled
    bad = client.post("/admin/keys", data={"name": "x", "max_devices": "0", "csrf_token": token})
    assert bad.status_code == 422 and "between 1 and" in bad.text
    assert len(client.app.state.coordinator.devices.enrollment_keys()) == 1  # type: ignore[attr-defined]
