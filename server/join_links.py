"""Where a join code sends a phone: ``<public URL>/device/#join=<code>``, shared by the console's "Join a
phone" page, the admin API and so `fleet demo --phones`.

The device page (served at /device/) reads the code from the URL's fragment, which a browser never sends
to a server (no access log or proxy sees it), and posts it as ``enrollment_key`` to POST /v1/devices.
The public URL is FLEET_PUBLIC_URL, else the URL the request came to: a console opened at 127.0.0.1
would send the phone to itself, so ``unreachable`` says when that is so.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

DEVICE_PAGE = "/device/"


def public_base(configured: str | None, request_base: str) -> str:
    """The base URL phones use: FLEET_PUBLIC_URL when set, else the request's own, without a final /."""
    return (configured or request_base).rstrip("/")


def join_url(base: str, code: str) -> str:
    """The URL a join code's QR code holds (the code is URL-safe: no quoting)."""
    return f"{base.rstrip('/')}{DEVICE_PAGE}#join={code}"


def loopback(url: str) -> bool:
    """Whether ``url`` names this machine only (localhost, 127.0.0.0/8, ::1): no phone can open it."""
    host = (urlsplit(url).hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def installable(url: str) -> bool:
    """Whether a browser may install the device page as an app from ``url``: service workers need a
    secure context, https or this machine itself (plain http on a LAN works, but only as a page)."""
    return urlsplit(url).scheme == "https" or loopback(url)
