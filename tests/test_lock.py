"""The lock (constraints.txt) agrees with pyproject.toml: every `make` install is constrained by it, so a
dependency added to pyproject.toml without `make lock` would float to whatever is newest."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
PIN = re.compile(r"^([A-Za-z0-9._-]+)==(\S+)")


def pins() -> dict[str, Version]:
    """Package → pinned version, from the pip-compile output."""
    found = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if match := PIN.match(line):
            found[canonicalize_name(match[1])] = Version(match[2])
    return found


def declared(*extras: str) -> list[Requirement]:
    project = PYPROJECT["project"]
    lines = list(project["dependencies"])
    for extra in extras:
        lines += project["optional-dependencies"][extra]
    return [Requirement(line) for line in lines]


@pytest.mark.parametrize("extras", [("server", "client"), ("server", "client", "export", "dev", "app")])
def test_every_declared_dependency_is_pinned_within_its_range(extras: tuple[str, ...]) -> None:
    pinned = pins()
    for requirement in declared(*extras):
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{requirement} is not in constraints.txt: run `make lock`"
        assert requirement.specifier.contains(pinned[name], prereleases=True), (
            f"constraints.txt pins {name}=={pinned[name]}, outside {requirement}: run `make lock`"
        )


def test_torch_is_the_cpu_build() -> None:
    """An unpinned or CUDA torch is a multi-GB download; the lock names the local CPU wheel."""
    pinned = pins()
    assert pinned["torch"] == Version("2.13.0+cpu")
    assert "psycopg-binary" in pinned  # psycopg[binary]: the extra's packages are locked too
    assert not [name for name in pinned if name.startswith("nvidia-")]
