"""The lock (requirements/*.txt) agrees with pyproject.toml: `make` installs from the lock only, so a
dependency added to pyproject.toml without `make lock` would be missing from every fresh install."""

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


def pins(lock: str) -> dict[str, Version]:
    """Package → pinned version, from a pip-compile output file."""
    found = {}
    for line in (REPO / "requirements" / lock).read_text().splitlines():
        if match := PIN.match(line):
            found[canonicalize_name(match[1])] = Version(match[2])
    return found


def declared(*extras: str) -> list[Requirement]:
    project = PYPROJECT["project"]
    lines = list(project["dependencies"])
    for extra in extras:
        lines += project["optional-dependencies"][extra]
    return [Requirement(line) for line in lines]


@pytest.mark.parametrize(
    ("lock", "extras"),
    [("runtime.txt", ("server", "client")), ("dev.txt", ("server", "client", "export", "dev"))],
)
def test_every_declared_dependency_is_pinned_within_its_range(lock: str, extras: tuple[str, ...]) -> None:
    pinned = pins(lock)
    for requirement in declared(*extras):
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{requirement} is not in requirements/{lock}: run `make lock`"
        assert requirement.specifier.contains(pinned[name], prereleases=True), (
            f"requirements/{lock} pins {name}=={pinned[name]}, outside {requirement}: run `make lock`"
        )


def test_runtime_pins_are_the_dev_pins() -> None:
    """One version per package: a demo runs what the tests ran."""
    runtime, dev = pins("runtime.txt"), pins("dev.txt")
    assert {name: dev.get(name) for name in runtime} == runtime


def test_torch_is_the_cpu_build() -> None:
    """An unpinned or CUDA torch is a multi-GB download; the lock names the local CPU wheel."""
    assert pins("dev.txt")["torch"] == Version("2.13.0+cpu")
    assert "torch" not in pins("runtime.txt")
    assert "psycopg-binary" in pins("runtime.txt")  # psycopg[binary]: the extra's packages are locked too
    assert not [name for name in pins("dev.txt") if name.startswith("nvidia-")]
