"""Every relative link in README.md and docs/ points at a file that exists, and at a heading for #anchors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "docs" / "results" / "README.md"]
# docs/configuration.md (every setting) comes in a change of its own: until it lands, links to it pass.
NOT_YET = {ROOT / "docs" / "configuration.md"}

LINK = re.compile(r"\]\(([^)\s]+)\)")  # [text](target), ![alt](target): both of [![alt](picture)](target)
IMG = re.compile(r"<img\s[^>]*src=\"([^\"]+)\"")  # an HTML picture (README sizes one)
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
CODE = re.compile(r"`[^`\n]*`")


def links(page: Path) -> list[str]:
    text = CODE.sub("", FENCE.sub("", page.read_text()))
    return LINK.findall(text) + IMG.findall(text)


def anchors(page: Path) -> set[str]:
    """GitHub's heading ids: lower case, punctuation dropped, spaces to hyphens, repeats numbered."""
    ids: set[str] = set()
    counts: dict[str, int] = {}
    for line in FENCE.sub("", page.read_text()).splitlines():
        if m := re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line):
            slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
            n = counts[slug] = counts.get(slug, -1) + 1
            ids.add(f"{slug}-{n}" if n else slug)
    return ids


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    assert page.exists(), page
    broken = []
    for target in links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, fleet: ...
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if file in NOT_YET and not file.exists():
            continue
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no such heading")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)
