"""`fleet demo --phones`: a real phone joins the emulated fleet by scanning a QR code in the terminal.

The coordinator listens on every interface and FLEET_PUBLIC_URL is this machine's address on its network,
so the join code's URL (``<public URL>/device/#join=<code>``, from POST /v1/admin/join-codes) opens the
browser device page on a phone on the same network. Training does not stop at the target: the emulated
phones do, and the model goes on learning from the real ones for as long as the demo lingers.
"""

from __future__ import annotations

import io
import socket
import time
from typing import Any

import httpx
import segno
from rich.console import Console

JOIN_MINUTES, JOIN_PHONES = 60, 5  # the demo's code: long enough to fetch a phone, a few of them
HINT = "A real phone can join too: [bold]fleet demo --phones[/] shows a QR code to scan."
ANY_ADDRESS = "0.0.0.0"  # --phones binds every interface on purpose: the phone is another machine


def lan_address() -> str | None:
    """This machine's address on its network: the source address the OS picks for a route out. A UDP
    socket's connect only chooses the route, no packet is sent. None without one (no network)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 1))
            address = str(probe.getsockname()[0])
        except OSError:
            return None
    return None if address.startswith("127.") or address == ANY_ADDRESS else address


def public_url(port: int, console: Console) -> str:
    """The URL a phone reaches the coordinator at (FLEET_PUBLIC_URL): the LAN address, else 127.0.0.1
    with a warning (the QR code then works only in a browser on this machine)."""
    address = lan_address()
    if address is None:
        console.print(
            "[yellow]warning[/]: this machine has no network address, so a phone cannot reach it; the join "
            "URL names 127.0.0.1 (a browser on this machine only). Connect to a network and run again."
        )
        address = "127.0.0.1"
    return f"http://{address}:{port}"


def create_join_code(base: str, admin_token: str) -> dict[str, Any]:
    """A join code from the admin API: {code, url, expires_at, key_id}."""
    answer = httpx.post(
        f"{base}/v1/admin/join-codes",
        json={"minutes": JOIN_MINUTES, "max_devices": JOIN_PHONES},
        headers={"Authorization": f"Bearer {admin_token}"},
        timeout=10,
    )
    answer.raise_for_status()
    return dict(answer.json())


def terminal_qr(text: str) -> str:
    """``text`` as a QR code in half-block characters (two modules a line), as segno draws it."""
    out = io.StringIO()
    segno.make(text, error="m").terminal(out=out, compact=True, border=2)
    return out.getvalue()


def show_join(console: Console, joined: dict[str, Any]) -> None:
    """The QR code, the URL and what the phone needs."""
    until = time.strftime("%H:%M", time.localtime(joined["expires_at"]))
    console.print(
        f"[bold]Join with a phone[/] on the same network: scan this, or open [link]{joined['url']}[/link] "
        f"(code {joined['code']}, up to {JOIN_PHONES} phones until {until})"
    )
    console.print(terminal_qr(joined["url"]), markup=False, highlight=False, crop=False)
    console.print(
        "Over plain http the page trains in the browser but cannot be installed as an app (that needs "
        "https). The emulated phones stop at the target; the model goes on training with yours."
    )
