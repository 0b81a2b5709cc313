"""``python -m client.app [folder]``: the app on this desktop (``fleet app`` also seeds its settings)."""

import sys
from pathlib import Path

from client.app import run

run(Path(sys.argv[1]) if len(sys.argv) > 1 else Path.home() / ".config" / "fleet-app", size=(420, 780))
