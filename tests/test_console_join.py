"""The console's "Join a phone" page (/admin/join): a CSRF-protected form makes a join code, shown once as an
inline SVG QR code of <public URL>/device/#join=<code>, its URL and the code; the codes listed with their
state; the loopback and plain-http warnings; the audit names the key, never the code."""

from __future__ import annotations

import re
import time

import segno

from server.console.join import qr_svg
from tests.test_console import console, csrf, login  # noqa: F401  (the console fixture)

CODE = r"[0-9A-Z]{4}(?:-[0-9A-Z]{4}){4}"


def made(client, **form: str):  # type: ignore[no-untyped-def]
    return client.post("/admin/join", data={"csrf_token": csrf(client), **form})


def test_the_page_makes_a_code_shown_once_as_a_qr_code_of_the_join_url(console):  # noqa: F811
    client = console()
    login(client)
    page = client.get("/admin/join")
    assert page.status_code == 200 and 'href="/admin/join" aria-current="page"' in page.text
    assert "data-new-code" not in page.text and "No join codes yet" in page.text
    assert client.post("/admin/join", data={"minutes": "15"}).status_code == 403  # no CSRF token
    assert client.post("/admin/join", data={"minutes": "15", "csrf_token": "forged"}).status_code == 403
    assert client.app.state.coordinator.devices.enrollment_keys() == []
    answer = made(client)  # the defaults: 15 minutes, 5 phones
    assert answer.status_code == 200
    code = re.search(rf"data-new-code>({CODE})<", answer.text).group(1)
    url = f"http://127.0.0.1/device/#join={code}"  # the console's own base URL (the fixture's)
    assert f'href="{url}" data-join-url>{url}</a>' in answer.text
    svg = re.search(r"<svg.*?</svg>", answer.text, re.S).group(0)
    assert 'class="qr-code"' in svg and svg == str(qr_svg(url))  # the QR code of exactly that URL
    assert segno.make(url, error="m").version <= 5  # a small code: a phone reads it off a screen
    assert re.search(r'data-expires-in="(899|900)"', answer.text) and "up to 5 phones" in answer.text
    [key] = client.app.state.coordinator.devices.enrollment_keys()
    assert key.max_devices == 5 and 899 <= key.expires_at - time.time() <= 900 and key.created_by == "admin"
    assert client.post("/v1/devices", json={"enrollment_key": code, "device_model": "P"}).status_code == 201
    again = client.get("/admin/join").text  # listed, never shown again
    assert code not in again and "<svg" not in again
    row = re.search(rf'<tr data-key="{key.key_id}" data-state="live">.*?</tr>', again, re.S).group(0)
    assert ">1</a> / 5" in row and "Revoke" in row
    audit = client.get("/admin/audit").text
    assert f"created a join code ({key.key_id}) for up to 5 phones, valid 15 min" in audit
    assert code not in audit
    settings = client.get("/admin/settings").text
    assert key.key_id not in settings and 'href="/admin/join"' in settings  # join codes live on their page


def test_a_loopback_url_is_called_unreachable_and_the_fix_is_named(console):  # noqa: F811
    client = console()
    login(client)
    page = client.get("/admin/join").text
    assert "data-loopback" in page and "A phone cannot reach http://127.0.0.1" in page
    assert "--host 0.0.0.0" in page and "FLEET_PUBLIC_URL=http://192.168.1.20:8000" in page
    assert "data-http-note" not in page  # a browser on this machine itself may install the page
    lan = console(public_url="http://192.168.1.20:8000")
    login(lan)
    page = lan.get("/admin/join").text
    assert "data-loopback" not in page and "http://192.168.1.20:8000/device/" in page
    assert "data-http-note" in page and "service workers need https" in page
    answer = made(lan, minutes="60", max_devices="2").text
    code = re.search(rf"data-new-code>({CODE})<", answer).group(1)
    assert f'href="http://192.168.1.20:8000/device/#join={code}"' in answer and "up to 2 phones" in answer


def test_bad_lifetimes_are_refused_and_codes_show_expired_or_revoked(console):  # noqa: F811
    client = console()
    login(client)
    for form in ({"minutes": "0"}, {"minutes": "1441"}, {"max_devices": "0"}, {"minutes": "ten"}):
        refused = made(client, **form)
        assert refused.status_code == 422 and "No join code was created" in refused.text, form
    assert client.app.state.coordinator.devices.enrollment_keys() == []
    made(client, minutes="1", max_devices="1")
    made(client, minutes="5")
    old, new = client.app.state.coordinator.devices.enrollment_keys()
    devices = client.app.state.coordinator.devices
    devices.keys.clock = lambda: time.time() + 120  # two minutes on: the first one is over
    client.app.state.coordinator.clock = devices.keys.clock
    token = csrf(client)
    back = client.post(f"/admin/join/{new.key_id}/revoke", data={"csrf_token": token}, follow_redirects=False)
    assert back.status_code == 303 and back.headers["location"].startswith("/admin/join?msg=")
    page = client.get("/admin/join").text
    assert f'<tr data-key="{old.key_id}" data-state="expired" class="inactive">' in page
    assert f'<tr data-key="{new.key_id}" data-state="revoked" class="inactive">' in page
    assert "revoked the enrollment key " + new.key_id in client.get("/admin/audit").text
    assert client.post("/admin/join/k-nothing/revoke", data={"csrf_token": token}).status_code == 404
