"""Issue 29's socket-level hardening against a real `fleet serve` on 127.0.0.1: a body sent one byte a
second (or not at all) gets 408 and the connection closes; X-Forwarded-For from 127.0.0.1 is not believed
when no proxy is configured."""

from __future__ import annotations

import contextlib
import re
import select
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.processes import ServerProcess

pytestmark = pytest.mark.slow
TIMEOUT_S = 2.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    workdir: Path = tmp_path_factory.mktemp("hardening") / "server"
    settings = {
        "body_timeout_seconds": TIMEOUT_S,
        "console_user": "admin",
        "console_password": "a-long-enough-password",
        "login_burst": 3,
    }
    with ServerProcess(workdir, **settings) as running:
        yield running


def post_slowly(port: int, *, byte_every_s: float | None, give_up_s: float = 15) -> tuple[bytes, float, bool]:
    """Headers at once, then the body one byte every ``byte_every_s`` (None: never): (the answer, seconds
    until it came, whether the server closed the connection after it)."""
    head = (
        f"POST /v1/devices HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        "Content-Length: 200\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(head.encode())
        began, answer, next_byte, elapsed = time.monotonic(), b"", time.monotonic(), -1.0
        while time.monotonic() - began < give_up_s:
            answered = bool(select.select([sock], [], [], 0)[0])  # never write past an answer: a reset
            if byte_every_s is not None and time.monotonic() >= next_byte and not answered and not answer:
                with contextlib.suppress(OSError):  # closed under us: the answer is in the buffer
                    sock.sendall(b" ")
                next_byte += byte_every_s
            readable, _, _ = select.select([sock], [], [], 0.2)
            if not readable:
                continue
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:  # the server closed with our last byte unread: closed
                return answer, elapsed, True
            if not chunk:
                return answer, elapsed, True
            if not answer:
                elapsed = time.monotonic() - began
            answer += chunk
        return answer, time.monotonic() - began, False


@pytest.mark.parametrize("byte_every_s", [1.0, None], ids=["one-byte-a-second", "no-body-at-all"])
def test_a_slow_or_missing_body_gets_408_and_the_connection_closes(server, byte_every_s):
    answer, elapsed, closed = post_slowly(server.port, byte_every_s=byte_every_s)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert TIMEOUT_S - 0.5 <= elapsed < TIMEOUT_S + 3, elapsed
    assert closed
    assert httpx.get(f"{server.url}/v1/health", timeout=5).status_code == 200  # the server is fine


def test_a_rotating_forwarded_for_from_localhost_does_not_escape_the_login_throttle(server):
    with httpx.Client(base_url=server.url, timeout=10) as client:
        codes = []
        for i in range(5):  # another user each time: only the per-address limit can stop this
            headers = {"X-Forwarded-For": f"203.0.113.{i}"}
            form = client.get("/admin/login", headers=headers).text
            token = re.search(r'name="csrf_token" value="([^"]+)"', form).group(1)
            data = {"username": f"user{i}", "password": "wrong-wrong-wrong", "csrf_token": token}
            codes.append(client.post("/admin/login", data=data, headers=headers).status_code)
    assert codes == [401, 401, 401, 429, 429]  # login_burst=3 for 127.0.0.1, whatever the header says
