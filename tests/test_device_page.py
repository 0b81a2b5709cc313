"""The browser device's page at /device/ without a browser: what is served, with which types and headers,
and the plain message when ONNX Runtime Web was not vendored (`make vendor`).

tests/test_browser_device.py drives the page itself in chromium against a real coordinator.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
import warnings
from pathlib import Path

import pytest
from starlette.applications import Starlette

from server import device

warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
from starlette.testclient import TestClient  # noqa: E402


def static_copy(tmp_path: Path, *, vendor: bool) -> Path:
    """The committed app shell, with stand-in vendor files (and a gzip copy of the wasm) or none."""
    root = tmp_path / "static"
    shutil.copytree(device.STATIC, root, ignore=shutil.ignore_patterns("vendor"))
    if vendor:
        (root / "vendor").mkdir()
        for name in device.VENDOR_FILES:
            (root / "vendor" / name).write_bytes(
                b"\0asm\1\0\0\0" * 100 if name.endswith(".wasm") else b"export {};\n"
            )
        wasm = root / "vendor" / "ort-wasm-simd-threaded.wasm"
        (root / "vendor" / (wasm.name + ".gz")).write_bytes(gzip.compress(wasm.read_bytes()))
    return root


def client_for(root: Path) -> TestClient:
    app = Starlette()
    app.mount("/device", device.DeviceFiles(root), name="device")
    return TestClient(app)


def test_the_coordinator_serves_the_page_the_manifest_and_the_service_worker(make_api):
    http = make_api().http
    moved = http.get("/device", follow_redirects=False)
    assert moved.status_code in (307, 308) and moved.headers["location"].endswith("/device/")
    for path, media in {
        "app.js": "text/javascript",
        "compute-worker.js": "text/javascript",
        "sw.js": "text/javascript",
        "device.css": "text/css",
        "manifest.webmanifest": "application/manifest+json",
        "icons/icon-192.png": "image/png",
    }.items():
        response = http.get(f"/device/{path}")
        assert response.status_code == 200, path
        assert response.headers["content-type"].split(";")[0] == media, path
        assert "'wasm-unsafe-eval'" in response.headers["content-security-policy"]
        assert response.headers["cache-control"] == "no-cache"
    manifest = http.get("/device/manifest.webmanifest").json()
    assert manifest["start_url"] == manifest["scope"] == "/device/"
    assert manifest["display"] == "standalone"
    assert {i["sizes"] for i in manifest["icons"]} == {"192x192", "512x512"}
    for icon in manifest["icons"]:
        assert http.get(f"/device/{icon['src']}").content[:8] == b"\x89PNG\r\n\x1a\n"
    page = http.get("/device/")  # the app, or (vendor files not built here) the plain message
    if device.missing_vendor():
        assert page.status_code == 503 and "make vendor" in page.text
    else:
        assert page.status_code == 200 and 'src="app.js"' in page.text
    assert http.get("/v1/models/active").status_code == 200  # the API is untouched by the mount


def test_vendored_runtime_has_wasm_and_module_types_and_goes_gzipped(tmp_path):
    http = client_for(static_copy(tmp_path, vendor=True))
    page = http.get("/device/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    raw = http.get("/device/vendor/ort-wasm-simd-threaded.wasm", headers={"Accept-Encoding": "identity"})
    assert raw.headers["content-type"] == "application/wasm"
    assert "content-encoding" not in raw.headers and raw.content.startswith(b"\0asm")
    packed = http.get("/device/vendor/ort-wasm-simd-threaded.wasm", headers={"Accept-Encoding": "gzip, br"})
    assert packed.headers["content-type"] == "application/wasm"
    assert packed.headers["content-encoding"] == "gzip" and packed.headers["vary"] == "Accept-Encoding"
    assert packed.content == raw.content  # httpx undid the gzip: the same bytes
    for name in ("ort.wasm.min.mjs", "ort-wasm-simd-threaded.mjs"):
        module = http.get(f"/device/vendor/{name}")
        assert module.headers["content-type"].split(";")[0] == "text/javascript"
    etag = raw.headers["etag"]
    again = http.get(
        "/device/vendor/ort-wasm-simd-threaded.wasm",
        headers={"If-None-Match": etag, "Accept-Encoding": "identity"},
    )
    assert again.status_code == 304
    etag = packed.headers["etag"]
    assert etag != raw.headers["etag"]  # two representations, two tags
    wasm = "/device/vendor/ort-wasm-simd-threaded.wasm"
    again = http.get(wasm, headers={"If-None-Match": etag, "Accept-Encoding": "gzip"})
    assert again.status_code == 304


def test_missing_vendor_files_are_named_with_the_command_that_builds_them(tmp_path):
    http = client_for(static_copy(tmp_path, vendor=False))
    for path in ("/device/", "/device/index.html"):
        page = http.get(path)
        assert page.status_code == 503
        assert "make vendor" in page.text
        assert all(name in page.text for name in device.VENDOR_FILES)
    assert http.get("/device/app.js").status_code == 200  # the rest of the shell is still there


def test_the_service_worker_caches_every_shell_file_and_never_the_api():
    """cache.addAll fails whole on a single 404: every file the worker precaches must exist (or be built)."""
    text = (device.STATIC / "sw.js").read_text()
    shell = re.search(r"const SHELL = \[(.*?)\];", text, re.S).group(1)
    files = re.findall(r"'([^']+)'", shell)
    for name in files:
        if name == "./":
            continue
        if name.startswith("vendor/"):
            assert name.removeprefix("vendor/") in device.VENDOR_FILES
        else:
            assert (device.STATIC / name).is_file(), name
    scripts = {p.name for p in device.STATIC.glob("*.js")} - {"sw.js"}
    assert scripts <= set(files), scripts - set(files)  # every module the page imports works offline
    assert "url.pathname.startsWith(SCOPE)" in text  # only /device/ is answered: /v1/ goes to the network


@pytest.mark.parametrize("name", sorted(p.name for p in device.STATIC.glob("*.js")))
def test_each_module_stays_small(name):
    assert len((device.STATIC / name).read_text().splitlines()) < 400


def test_the_pinned_runtime_matches_the_lock():
    web = Path(__file__).resolve().parents[1] / "web" / "device"
    wanted = json.loads((web / "package.json").read_text())["dependencies"]["onnxruntime-web"]
    locked = json.loads((web / "package-lock.json").read_text())["packages"]["node_modules/onnxruntime-web"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", wanted), "pin an exact version"
    assert locked["version"] == wanted and locked["integrity"].startswith("sha512-")
