"""docs/running.md's walk-through of one task is a script (docs/examples/one_task.sh), run on a server."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from sim.data import write_shards
from tests.processes import ADMIN, ENROLL, ServerProcess

pytestmark = pytest.mark.slow
SCRIPT = Path(__file__).resolve().parent.parent / "docs" / "examples" / "one_task.sh"


@pytest.mark.skipif(shutil.which("jq") is None or shutil.which("curl") is None, reason="needs jq and curl")
def test_one_task_walkthrough_runs_as_written(tmp_path):
    shards, _ = write_shards(tmp_path / "data", devices=2)
    with ServerProcess(tmp_path / "server", k=1) as server:  # one push, one version (the default buffers 5)
        env = {
            **os.environ,
            "FLEET": server.url,
            "FLEET_ENROLLMENT_KEY": ENROLL,
            "DATA": str(shards[0]),
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",  # python3 = this venv's
            "PYTHONPATH": str(SCRIPT.parent.parent.parent),
        }
        done = subprocess.run(
            ["bash", str(SCRIPT)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        grant, push = (json.loads(line) for line in done.stdout.strip().splitlines())
        assert push["task_id"] == grant["task_id"] and push["applied"] and not push["duplicate"]
        assert push["version"] == grant["version"] + 1
        stats = httpx.get(f"{server.url}/v1/admin/stats", headers={"authorization": f"Bearer {ADMIN}"}).json()
        assert stats["version"] == push["version"]
    assert ENROLL not in done.stdout + done.stderr
