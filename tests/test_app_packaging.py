"""android-build/ can be built: every buildozer requirement is a python-for-android recipe or pure Python at
the lock's version, and the app's Android import graph needs nothing the spec does not bring."""

from __future__ import annotations

import configparser
import json
import os
import re
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.test_lock import pins

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "android-build"
RECIPES = {
    line.strip()
    for line in (BUILD / "p4a-recipes.txt").read_text().splitlines()
    if line.strip()[:1] not in ("#", "")
}
# What a p4a recipe installs under another import name, and the pure-Python packages the kivy recipe
# itself pulls in (its python_depends).
IMPORT_NAMES = {"pyjnius": "jnius", "typing-extensions": "typing_extensions"}
KIVY_BRINGS = {"certifi", "chardet", "idna", "requests", "urllib3", "filetype"}
NEVER_ON_THE_PHONE = ("torch", "psutil", "onnxruntime", "onnx", "sklearn", "fastapi", "sqlalchemy", "typer")


def spec() -> configparser.SectionProxy:
    parser = configparser.ConfigParser(inline_comment_prefixes=None, interpolation=None)
    parser.read(BUILD / "buildozer.spec")
    return parser["app"]


def requirements() -> list[Requirement]:
    return [Requirement(item.strip()) for item in spec()["requirements"].split(",")]


def test_every_requirement_has_a_recipe_or_is_pure_python_at_the_locked_version() -> None:
    locked = pins()
    for requirement in requirements():
        name = canonicalize_name(requirement.name)
        if requirement.name in RECIPES:
            continue
        try:
            wheel = distribution(requirement.name).read_text("WHEEL") or ""
        except PackageNotFoundError:
            pytest.fail(f"{requirement} is neither a p4a recipe nor installed here to check")
        assert "Root-Is-Purelib: true" in wheel, f"{requirement} has native code and no p4a recipe"
        assert name in locked and requirement.specifier.contains(locked[name]), (
            f"buildozer.spec pins {requirement}, constraints.txt {locked.get(name)}"
        )


def test_the_pure_python_closure_of_httpx_is_listed() -> None:
    listed = {canonicalize_name(r.name) for r in requirements()}
    todo, seen = ["httpx"], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for line in distribution(name).requires or []:
            dependency = Requirement(line)
            if dependency.marker is None or dependency.marker.evaluate(
                {"extra": "", "python_version": "3.11"}
            ):
                todo.append(canonicalize_name(dependency.name))
    assert seen <= listed, f"missing from buildozer.spec: {sorted(seen - listed)}"


def test_the_spec_targets_both_arm_abis_and_ships_the_onnxruntime_aar() -> None:
    app = spec()
    assert [a.strip() for a in app["android.archs"].split(",")] == ["arm64-v8a", "armeabi-v7a"]
    assert {"INTERNET", "ACCESS_NETWORK_STATE"} <= {p.strip() for p in app["android.permissions"].split(",")}
    gradle = app["android.gradle_dependencies"]
    assert re.fullmatch(r"com\.microsoft\.onnxruntime:onnxruntime-android:[\d.]+", gradle.strip())
    assert gradle.strip().rsplit(":", 1)[1] == str(pins()["onnxruntime"])  # the desktop's ORT version
    assert app["package.name"] == "fleet" and app["version"] == "0.1.0"
    assert int(app["android.minapi"]) >= 24  # numpy's recipe


def test_build_sh_stages_only_the_client_and_says_what_it_needs(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": f"{tmp_path}:/usr/bin:/bin"}  # no buildozer here
    run = subprocess.run(
        ["bash", str(BUILD / "build.sh")], env=env, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 1 and "pip install buildozer" in run.stderr
    staged = sorted(p.name for p in (BUILD / "build" / "src").iterdir())
    assert staged == ["client", "fleet_protocol", "main.py"]


PROBE = """
import importlib.abc, json, os, sys
ALLOWED = set(sys.argv[1].split(",")) | set(sys.stdlib_module_names)
blocked = set()

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if top not in ALLOWED:  # not on the phone: optional imports must cope, required ones fail here
            blocked.add(top)
            raise ImportError(f"{name} is not on the phone")
        return None

sys.meta_path.insert(0, Block())
os.environ["ANDROID_ARGUMENT"] = os.getcwd()
before = set(sys.modules)
import client.app.main, client.app.screens, client.app.controller, client._android, client._android_onnx
from client._platform import backends
from client.app.controller import AppController
from client.app.drawing import strokes_to_image
sys.path.insert(0, sys.argv[2])
from android_standins import StandInBridge
platform = backends(bridge=StandInBridge())
assert platform.name == "android", platform
control = AppController(sys.argv[3], platform=platform)
control.add_drawing(strokes_to_image([[(0, 0), (0, 9)]]), 1)
assert control._data() is not None and control._hold(control._stop) is None
from client._exceptions import TransportError
from client._transport import ApiClient
try:  # the whole HTTP stack (httpcore, h11, certifi, ssl) loads on a first request
    ApiClient("https://127.0.0.1:9", timeout=2.0).active_model()
except TransportError:
    pass
loaded = {m.split(".")[0] for m in set(sys.modules) - before}
print(json.dumps({"loaded": sorted(loaded), "blocked": sorted(blocked), "client": client.__file__}))
"""


def test_the_android_import_graph_needs_nothing_outside_the_spec(tmp_path: Path) -> None:
    """The staged sources run the app's Android path with every package outside the spec blocked."""
    src = BUILD / "build" / "src"
    if not src.exists():
        test_build_sh_stages_only_the_client_and_says_what_it_needs(tmp_path)
    allowed = {IMPORT_NAMES.get(r.name, r.name) for r in requirements()} | KIVY_BRINGS
    allowed |= {"client", "fleet_protocol", "android_standins"}  # the staged sources; the test's stand-ins
    assert not allowed & set(NEVER_ON_THE_PHONE)
    env = {**os.environ, "KIVY_HOME": str(tmp_path / "kivy"), "KIVY_NO_ARGS": "1", "KIVY_NO_CONSOLELOG": "1"}
    argv = [",".join(sorted(allowed)), str(ROOT / "tests"), str(tmp_path / "app")]
    run = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], cwd=src, env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr[-3000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen["client"].startswith(str(src))  # the staged copy, not the repository's
    internal = re.compile(r"_?cython_|__editable__")  # Cython's per-module pseudo-modules
    foreign = {
        m for m in seen["loaded"] if m not in allowed | sys.stdlib_module_names and not internal.match(m)
    }
    assert not foreign, sorted(foreign)
    print(f"\nAndroid path: loaded {sorted(set(seen['loaded']) - sys.stdlib_module_names)}, "
          f"optional imports refused {seen['blocked']}")  # fmt: skip
    assert not set(seen["blocked"]) & {"numpy", "kivy", "httpx", "jnius"}  # what the app needs is there
    assert set(NEVER_ON_THE_PHONE).isdisjoint(seen["loaded"])
