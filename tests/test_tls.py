"""`fleet serve --ssl-certfile/--ssl-keyfile` serves HTTPS, and a worker verifies it with the CA file."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time

import httpx
import pytest

from tests.processes import free_port

pytestmark = pytest.mark.slow


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make a certificate")
def test_serve_over_https(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    port = free_port()
    env_dir = tmp_path / "var"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fleet.cli",
            "serve",
            "--port",
            str(port),
            "--ssl-certfile",
            str(cert),
            "--ssl-keyfile",
            str(key),
            "--log-level",
            "warning",
        ],
        env={"FLEET_DATA_DIR": str(env_dir), "PATH": "/usr/bin:/bin", **_python_env()},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                response = httpx.get(f"https://127.0.0.1:{port}/v1/health", verify=str(cert), timeout=1)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise
                time.sleep(0.2)
        assert response.json() == {"status": "ok"}
        with pytest.raises(httpx.ConnectError):  # an unverified certificate is refused by default
            httpx.get(f"https://127.0.0.1:{port}/v1/health", timeout=5)
        assert (env_dir / "secrets.json").stat().st_mode & 0o077 == 0  # generated secrets are private
    finally:
        process.terminate()
        process.wait(timeout=10)


def _python_env() -> dict[str, str]:
    import os

    return {
        k: v for k, v in os.environ.items() if k.startswith(("PYTHON", "VIRTUAL_ENV", "HOME", "OPENBLAS"))
    }
