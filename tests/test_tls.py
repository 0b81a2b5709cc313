"""`fleet serve --ssl-certfile/--ssl-keyfile` serves HTTPS, and a worker verifies it with the CA file."""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import sys
import time

import httpx
import numpy as np
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
                response = httpx.get(
                    f"https://127.0.0.1:{port}/v1/health",
                    verify=ssl.create_default_context(cafile=str(cert)),
                    timeout=1,
                )
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise
                time.sleep(0.2)
        assert response.json() == {"status": "ok"}
        with pytest.raises(httpx.ConnectError):  # an unverified certificate is refused by default
            httpx.get(f"https://127.0.0.1:{port}/v1/health", timeout=5)
        secrets_file = env_dir / "secrets.json"
        assert secrets_file.stat().st_mode & 0o077 == 0  # generated secrets are private
        from client import DeviceData, Worker, WorkerConfig

        data = DeviceData(np.zeros((4, 1, 28, 28), np.float32), np.arange(4))
        key = json.loads(secrets_file.read_text())["enrollment_key"]
        config = WorkerConfig(
            base_url=f"https://127.0.0.1:{port}", enrollment_key=key, data=data, verify=str(cert)
        )
        with Worker(config) as worker:
            assert worker.enroll().startswith("d-")  # the device worker verifies the server with the CA file
    finally:
        process.terminate()
        process.wait(timeout=10)


def _python_env() -> dict[str, str]:
    import os

    return {
        k: v for k, v in os.environ.items() if k.startswith(("PYTHON", "VIRTUAL_ENV", "HOME", "OPENBLAS"))
    }
