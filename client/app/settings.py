"""The app's settings: one JSON file in the app's user data directory, written atomically.

A crash or a full disk mid-save leaves the previous file whole (write a temporary file, fsync,
``os.replace``). The enrollment key and the device token are secrets: ``repr`` masks them and nothing
here logs them.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import SplitResult, parse_qs, urlsplit

from client._state import write_json_atomic

__all__ = ["AppSettings", "load_settings", "parse_enrollment_link", "save_settings", "url_problem"]

logger = logging.getLogger("fleet.app")

SETTINGS_FILE = "settings.json"
SECRETS = ("enrollment_key", "device_token")


@dataclass(frozen=True)
class AppSettings:
    """What the user chose on the Settings screen, plus the identity the coordinator gave this device.

    The device token belongs to ``token_server``: pointing the app at another coordinator drops it.
    """

    server_url: str = ""
    enrollment_key: str = field(default="", repr=False)
    min_battery_percent: int = 30
    unmetered_only: bool = True
    paused: bool = False
    data_path: str = ""  # a demo shard (.npz) trained on next to the drawn examples; empty on a phone
    device_id: str = ""
    device_token: str = field(default="", repr=False)
    token_server: str = ""

    def __repr__(self) -> str:
        shown = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in SECRETS}
        masked = {name: "***" if getattr(self, name) else "" for name in SECRETS}
        return f"AppSettings({', '.join(f'{k}={v!r}' for k, v in {**shown, **masked}.items())})"

    def with_server(self, server_url: str, enrollment_key: str) -> AppSettings:
        """New coordinator settings; a token of another coordinator (or key) is forgotten."""
        server_url = server_url.strip().rstrip("/")
        same = server_url == self.token_server and enrollment_key == self.enrollment_key
        identity = {} if same else {"device_id": "", "device_token": "", "token_server": ""}
        return replace(self, server_url=server_url, enrollment_key=enrollment_key.strip(), **identity)

    def token_for(self, server_url: str) -> str | None:
        return self.device_token if self.device_token and self.token_server == server_url else None


def url_problem(url: str) -> str | None:
    """Why ``url`` cannot be a coordinator URL (None when it can)."""
    if not url.strip():
        return "Set the coordinator URL in Settings."
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{url!r} is not an http(s) URL, e.g. https://fleet.example.org"
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        return f"{url!r} has an invalid port"
    return None


def parse_enrollment_link(text: str) -> tuple[str, str] | None:
    """(coordinator URL, enrollment key) from a pasted link, or None if ``text`` is not one.

    Accepted: ``fleet://enroll?server=https://host:8000&key=KEY``, any http(s) link with a ``key``
    (or ``enrollment_key``) query value, whose own origin is the coordinator unless ``server`` says, and
    a console join code's link, ``https://host:8000/device/#join=CODE`` (the coordinator: what precedes
    /device/).
    """
    parts = urlsplit(text.strip())
    query = parse_qs(parts.query)
    key = (query.get("key") or query.get("enrollment_key") or [""])[0]
    if not key:
        return _join_link(parts)
    server = (query.get("server") or [""])[0]
    if not server and parts.scheme in ("http", "https") and parts.netloc:
        server = f"{parts.scheme}://{parts.netloc}"
    if not server or url_problem(server):
        return None
    return server.rstrip("/"), key


def _join_link(parts: SplitResult) -> tuple[str, str] | None:
    """(coordinator URL, code) of ``<coordinator>/device/#join=<code>``, else None."""
    code = (parse_qs(parts.fragment).get("join") or [""])[0]
    head, device, _ = parts.path.rpartition("/device/")
    if not code or not device or parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    server = f"{parts.scheme}://{parts.netloc}{head}"
    return None if url_problem(server) else (server, code)


def load_settings(folder: Path) -> AppSettings:
    """The saved settings, or the defaults when there are none (or the file is unreadable)."""
    path = Path(folder) / SETTINGS_FILE
    try:
        data: Any = json.loads(path.read_text())
    except FileNotFoundError:
        return AppSettings()
    except (OSError, ValueError) as exc:
        logger.warning("settings file %s unreadable (%s); using defaults", path, type(exc).__name__)
        return AppSettings()
    known = {f.name: f.type for f in fields(AppSettings)}
    values = {k: v for k, v in (data.items() if isinstance(data, dict) else ()) if k in known}
    defaults = AppSettings()
    for name, value in list(values.items()):
        if type(value) is not type(getattr(defaults, name)):
            del values[name]  # a hand-edited or older file: keep the default for that field
    return replace(defaults, **values)


def save_settings(folder: Path, settings: AppSettings) -> Path:
    """Write atomically (owner-only permissions: the file holds the device token)."""
    path = Path(folder) / SETTINGS_FILE
    write_json_atomic(path, asdict(settings))
    return path
