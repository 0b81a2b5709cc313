"""Results-table rows for the privacy audit (issue 27): each mechanism's empirical ε lower bound against its
claim, and the power the audit shows on the Gaussian step. Read from docs/results/privacy-audit.json."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from lab.render import results_link as _link

Row = tuple[str, str, str, str]


def audit_rows(data: dict[str, Any]) -> Iterator[Row]:
    s = data["summary"]
    for r in s["rows"]:
        sound = r["kind"] == "sound"
        yield (
            f"privacy audit, {r['mechanism']}: ε lower bound (95%) vs claimed ε"
            + ("" if sound else " (a broken variant)"),
            f"{r['epsilon_lower']:.2f} vs {r['claimed']:.2f} ({r['runs']:,} runs an arm)",
            "≤ claim" if sound else "> claim",
            _link("privacy-audit.md"),
        )
    yield (
        "privacy audit power: the Gaussian step's lower bound as a share of its claim",
        f"{s['gaussian_fraction_of_claim']:.0%}",
        "a useful fraction",
        _link("privacy-audit.md"),
    )


PRIVACY_SECTIONS: tuple[tuple[str, Callable[[dict[str, Any]], Iterator[Row]]], ...] = (
    ("privacy-audit", audit_rows),
)
