"""The browser device at /device/: a static web app that trains the served model with ONNX Runtime Web.

Any phone's browser opens it (docs/browser-device.md); it speaks the same REST protocol as the Python
client. The app shell lives in ``static/``; ONNX Runtime Web is vendored at the version pinned by
web/device/package-lock.json into ``static/vendor/`` by ``make vendor`` (gitignored, with ``.gz``
copies made at build time). Without those files the page says so instead of failing in the browser.
"""

from __future__ import annotations

import os
from pathlib import Path

from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.responses import FileResponse, HTMLResponse, Response
from starlette.staticfiles import NotModifiedResponse, StaticFiles
from starlette.types import Scope

__all__ = ["MEDIA_TYPES", "STATIC", "VENDOR_FILES", "DeviceFiles", "install", "missing_vendor"]

STATIC = Path(__file__).parent / "static"
# what the compute worker imports: the wasm-only ES module, the wasm and its Emscripten loader
VENDOR_FILES = ("ort.wasm.min.mjs", "ort-wasm-simd-threaded.mjs", "ort-wasm-simd-threaded.wasm")
# by suffix, not by the host's mime.types (a bare container may not know .mjs, .wasm or .webmanifest;
# WebAssembly.instantiateStreaming and module scripts refuse a wrong type)
MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".wasm": "application/wasm",
    ".webmanifest": "application/manifest+json",
    ".png": "image/png",
    ".txt": "text/plain; charset=utf-8",
}
# WebAssembly needs 'wasm-unsafe-eval'; everything else comes from this origin (no CDN)
CSP = (
    "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; worker-src 'self'; connect-src 'self'; "
    "img-src 'self' data: blob:; style-src 'self'; manifest-src 'self'; frame-ancestors 'none'; "
    "base-uri 'none'; form-action 'self'"
)
HEADERS = {
    "Cache-Control": "no-cache",  # revalidated each load (a 304): a new build is seen at once
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}
MISSING = """<!doctype html><html lang="en"><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>Fleet device: not built</title>
<body style="font-family: system-ui, sans-serif; max-width: 36em; margin: 2em auto; padding: 0 1em">
<h1>The browser device is not built on this server</h1>
<p>ONNX Runtime Web, which the page trains with, is missing from <code>server/device/static/vendor/</code>
({missing}).</p>
<p>On the coordinator's machine, run <code>make vendor</code> (or <code>make serve</code>, which does it:
it needs Node.js and npm), then reload this page.</p></body></html>
"""


def missing_vendor(static: Path = STATIC) -> list[str]:
    """The vendored ONNX Runtime Web files that are not there (empty: the page can run)."""
    return [name for name in VENDOR_FILES if not (static / "vendor" / name).is_file()]


class DeviceFiles(StaticFiles):
    """StaticFiles with the device page's media types, headers and build-time ``.gz`` copies (sent to
    clients that accept gzip), and a plain page instead of the app when the vendored files are missing."""

    def __init__(self, directory: Path = STATIC) -> None:
        super().__init__(directory=directory, html=True)
        self.root = Path(directory)

    async def get_response(self, path: str, scope: Scope) -> Response:
        if path in ("", ".", "index.html") and (missing := missing_vendor(self.root)):
            return HTMLResponse(MISSING.format(missing=", ".join(missing)), 503, headers=HEADERS)
        return await super().get_response(path, scope)

    def file_response(
        self,
        full_path: str | os.PathLike[str],
        stat_result: os.stat_result,
        scope: Scope,
        status_code: int = 200,
    ) -> Response:
        full = Path(full_path)
        request = Headers(scope=scope)
        media_type = MEDIA_TYPES.get(full.suffix)
        packed = full.with_name(full.name + ".gz")
        if "gzip" in request.get("accept-encoding", "") and packed.is_file():
            headers = {**HEADERS, "Content-Encoding": "gzip", "Vary": "Accept-Encoding"}
            # its own ETag (from its own stat): the two encodings are two representations
            response: Response = FileResponse(
                packed, status_code, headers, media_type, stat_result=packed.stat()
            )
        else:
            headers = {**HEADERS, "Vary": "Accept-Encoding"} if packed.is_file() else HEADERS
            response = FileResponse(
                full, status_code=status_code, headers=headers, media_type=media_type, stat_result=stat_result
            )
        if self.is_not_modified(response.headers, request):
            return NotModifiedResponse(response.headers)
        return response


def install(app: Starlette) -> None:
    """Serve the device page at /device/ (``/device`` redirects there)."""
    app.mount("/device", DeviceFiles(STATIC), name="device")
