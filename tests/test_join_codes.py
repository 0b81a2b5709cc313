"""Join codes: enrollment keys that expire (migration 0012), made by the console's "Join a phone" page and by
POST /v1/admin/join-codes; an expired code is a 401 with reason enrollment_code_expired, which the device
client stops on. The console page itself: tests/test_console_join.py."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from alembic import command
from sqlalchemy import insert, select

from client import EnrollmentRefused as ClientRefused
from client._transport import _error_from
from server.core.coordinator import Coordinator
from server.core.errors import EnrollmentCodeExpired, EnrollmentRefused, InvalidInput, Unauthorized
from server.core.join_codes import ALPHABET, canonical, new_code
from server.join_links import installable, join_url, loopback, public_base
from server.store.database import make_engine, migrate, session_factory
from server.store.sql import SqlStore
from server.store.tables import EnrollmentKeyRow
from tests.conftest import ADMIN
from tests.support.client_doubles import make_worker
from tests.support.stores import BACKENDS, plain_cores
from tests.test_console_core import alembic_config

SECRET = "s" * 24  # an install secret


class Clock:
    """The coordinator's clock, moved by hand: a code expires without waiting for it."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=BACKENDS)
def make_core(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., Coordinator]]:
    with plain_cores(request.param, tmp_path) as core:
        yield core


# -- the code ------------------------------------------------------------------------------------------
def test_a_code_is_100_random_bits_in_readable_groups_and_typed_forms_read_back():
    codes = {new_code() for _ in range(200)}
    assert len(codes) == 200
    for code in codes:
        assert re.fullmatch(r"([0-9A-Z]{4}-){4}[0-9A-Z]{4}", code) and set(code) <= set(ALPHABET + "-")
    code = "7K3M-QX9B-2HWD-N4TF-8RZ0"
    assert canonical(code) == code
    assert canonical(" 7k3mqx9b2hwdn4tf8rzo ") == code  # lower case, no dashes, O typed for 0
    assert canonical("1ILL-" + code[5:]) == "1111-" + code[5:]
    assert canonical("test-enrollment-key") is None and canonical(code[:-1]) is None


def test_the_join_url_is_the_public_base_plus_the_device_page_fragment():
    assert public_base(None, "http://127.0.0.1:8000/") == "http://127.0.0.1:8000"
    assert public_base("http://192.168.1.20:8000/", "http://127.0.0.1:8000/") == "http://192.168.1.20:8000"
    url = join_url("https://fleet.example.org/lab", "AAAA-BBBB-CCCC-DDDD-EEEE")
    assert url == "https://fleet.example.org/lab/device/#join=AAAA-BBBB-CCCC-DDDD-EEEE"
    for here in ("http://127.0.0.1:8000", "http://localhost", "http://[::1]:80", "http://127.9.9.9"):
        assert loopback(here) and installable(here)
    assert not loopback("http://192.168.1.20:8000") and not installable("http://192.168.1.20:8000")
    assert installable("https://192.168.1.20")


# -- in the core ---------------------------------------------------------------------------------------
def test_a_code_enrolls_until_it_expires_and_its_devices_keep_their_tokens(make_core):
    clock = Clock()
    core = make_core(clock=clock)
    key, code = core.devices.create_join_code(15, actor="alice", max_devices=5)
    assert key.expires_at == clock.now + 900 and key.max_devices == 5
    assert core.devices.enrollment_keys()[0].expires_at == key.expires_at  # stored
    device, token = core.enroll("Pixel", SECRET, key=core.devices.resolve_key(code))
    typed = core.devices.resolve_key(code.lower().replace("-", ""))  # as a person types it
    assert typed is not None and typed.key.key_id == key.key_id
    clock.now += 899
    assert core.devices.enrollment_key_valid(code)
    clock.now += 1
    with pytest.raises(EnrollmentCodeExpired) as expired:
        core.devices.resolve_key(code)
    assert isinstance(expired.value, Unauthorized) and expired.value.reason == "enrollment_code_expired"
    assert "expired at" in str(expired.value) and code not in str(expired.value)
    assert not core.devices.enrollment_key_valid(code)
    assert core.devices.authenticate(token).device_id == device.device_id  # the code only gates enrolling
    core.close()
    restarted = make_core(clock=clock)  # the end is stored, not only remembered
    with pytest.raises(EnrollmentCodeExpired):
        restarted.devices.resolve_key(code)
    assert restarted.devices.authenticate(token).device_id == device.device_id


def test_a_code_has_its_quota_and_bounds_and_revoking_it_refuses_at_once(make_core):
    core = make_core(clock=Clock())
    key, code = core.devices.create_join_code(1, actor="alice", max_devices=1)
    core.enroll("Pixel", SECRET, key=core.devices.resolve_key(code))
    with pytest.raises(EnrollmentRefused) as full:
        core.enroll("Pixel", key=core.devices.resolve_key(code))
    assert full.value.reason == "enrollment_quota"
    core.devices.revoke_enrollment_key(key.key_id, actor="alice")
    assert core.devices.resolve_key(code) is None  # revoked: a wrong key, whether expired or not
    for minutes, devices in ((0, 5), (1441, 5), (15, 0), (15, 1001)):
        with pytest.raises(InvalidInput):
            core.devices.create_join_code(minutes, actor="alice", max_devices=devices)
    plain, _ = core.devices.create_enrollment_key("field", actor="alice")
    assert plain.expires_at is None  # the settings page's keys never expire


# -- migration 0012 ------------------------------------------------------------------------------------
def test_migration_0012_leaves_old_keys_without_an_end_and_goes_down_again(storage_url):
    engine = make_engine(storage_url)
    migrate(engine)
    with engine.begin() as connection:
        command.downgrade(alembic_config(connection), "0011")
        key = {"id": "k-old", "name": "old", "key_hash": "x" * 64, "created_at": 1.0, "created_by": "a"}
        connection.execute(insert(EnrollmentKeyRow.__table__).values(**key))  # names no expires_at
    migrate(engine)
    store = SqlStore(session_factory(engine))
    [old] = store.enrollment_keys()
    assert old.expires_at is None and not old.expired(1e12)
    with engine.begin() as connection:  # and down again: the column goes, the rows stay
        command.downgrade(alembic_config(connection), "0011")
        assert connection.execute(select(EnrollmentKeyRow.__table__.c.id)).scalars().all() == ["k-old"]
    migrate(engine)
    engine.dispose()


# -- the admin API and the device's answer -------------------------------------------------------------
ADMIN_HEADERS = {"Authorization": f"Bearer {ADMIN}"}


def enroll(api: Any, key: str, **body: Any) -> httpx.Response:
    return api.http.post("/v1/devices", json={"enrollment_key": key, "device_model": "Pixel", **body})


def test_the_admin_api_makes_codes_that_enroll_and_revokes_them(make_api):
    api = make_api()
    assert api.http.post("/v1/admin/join-codes", json={}).status_code == 401
    other = {"Authorization": "Bearer not-the-admin"}
    assert api.http.post("/v1/admin/join-codes", json={}, headers=other).status_code == 403
    before = time.time()
    made = api.http.post("/v1/admin/join-codes", json={}, headers=ADMIN_HEADERS)  # 15 min, 5 devices
    assert made.status_code == 201, made.text
    body = made.json()
    assert set(body) == {"code", "url", "expires_at", "key_id"}
    assert body["url"] == f"http://testserver/device/#join={body['code']}"  # the request's base URL
    assert before + 900 <= body["expires_at"] <= time.time() + 900
    assert enroll(api, body["code"]).status_code == 201
    assert enroll(api, body["code"].lower()).status_code == 201  # typed by hand
    [key] = api.coordinator.devices.enrollment_keys()
    assert key.key_id == body["key_id"] and key.max_devices == 5 and key.created_by == "admin-api"
    revoke = f"/v1/admin/enrollment-keys/{body['key_id']}/revoke"
    assert api.http.post(revoke).status_code == 401
    assert api.http.post(revoke, headers=ADMIN_HEADERS).status_code == 204
    assert api.http.post(revoke, headers=ADMIN_HEADERS).status_code == 204  # idempotent
    refused = enroll(api, body["code"])
    assert refused.status_code == 401 and refused.json()["detail"] == "wrong enrollment key"
    missing = api.http.post("/v1/admin/enrollment-keys/k-nothing/revoke", headers=ADMIN_HEADERS)
    assert missing.status_code == 404
    for bad in ({"minutes": 0}, {"minutes": 1441}, {"max_devices": 0}, {"minutes": "15"}, {"minutes": 1.5}):
        assert api.http.post("/v1/admin/join-codes", json=bad, headers=ADMIN_HEADERS).status_code == 422


def test_the_url_follows_fleet_public_url(make_api):
    api = make_api(public_url="http://192.168.1.20:8000")
    asked = {"minutes": 60, "max_devices": 2}
    body = api.http.post("/v1/admin/join-codes", json=asked, headers=ADMIN_HEADERS).json()
    assert body["url"] == f"http://192.168.1.20:8000/device/#join={body['code']}"


def test_an_expired_code_is_a_401_with_a_reason_the_client_stops_on(make_api):
    api = make_api()
    body = api.http.post("/v1/admin/join-codes", json={"minutes": 1}, headers=ADMIN_HEADERS).json()
    assert enroll(api, body["code"], install_secret=SECRET).status_code == 201
    api.coordinator.devices.keys.clock = lambda: time.time() + 61  # the registry's clock: a minute on
    expired = enroll(api, body["code"], install_secret=SECRET)  # even the install it enrolled
    assert expired.status_code == 401
    answer = expired.json()
    assert answer["reason"] == "enrollment_code_expired" and "expired at" in answer["detail"]
    error = _error_from(expired)  # the device client reads the same answer
    assert isinstance(error, ClientRefused) and error.reason == "enrollment_code_expired"
    assert error.status_code == 401
    assert not isinstance(_error_from(enroll(api, "wrong")), ClientRefused)  # a wrong key is not final


def test_the_worker_stops_on_an_expired_code_instead_of_retrying():
    calls: list[str] = []

    def coordinator(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        detail = "the enrollment code 'join code (15 min)' expired at 2026-11-28 09:15:00 UTC"
        return httpx.Response(401, json={"detail": detail, "reason": "enrollment_code_expired"})

    summary = make_worker(coordinator, max_consecutive_errors=50).run()  # type: ignore[arg-type]
    assert summary.stop_reason == "enrollment_code_expired" and summary.tasks == 0
    assert "expired at" in (summary.stop_detail or "") and calls == ["/v1/devices"]
