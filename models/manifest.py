"""The built-in models' exported bundles; the manifest and bundle types live in ``fleet_protocol``.

Re-exported here because the torch export code (models/export.py) and older callers import them from
``models.manifest``; new code imports ``fleet_protocol``.
"""

from __future__ import annotations

from pathlib import Path

from fleet_protocol.manifest import BUNDLE_FILES, DP_GRAPH_FILE, Bundle, Manifest, ParamSpec, read_zip

__all__ = [
    "BUILTIN_DIR",
    "BUNDLE_FILES",
    "DP_GRAPH_FILE",
    "Bundle",
    "Manifest",
    "ParamSpec",
    "builtin",
    "read_zip",
]

BUILTIN_DIR = Path(__file__).parent / "artifacts"


def builtin(name: str) -> Bundle:
    """A built-in model's exported bundle (shipped in the package; torch not needed)."""
    path = BUILTIN_DIR / name
    if not path.is_dir():
        known = sorted(p.name for p in BUILTIN_DIR.iterdir() if p.is_dir())
        raise KeyError(f"unknown built-in model {name!r}; known: {known}")
    return Bundle.load(path)
