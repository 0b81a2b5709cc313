"""docs/results/README.md's table is generated from the committed results, and shows every comparison."""

from __future__ import annotations

import re
from pathlib import Path

from lab.results_table import END, START, table, update_readme

ROOT = Path(__file__).resolve().parent.parent


def test_results_page_table_is_what_the_results_say():
    page = (ROOT / "docs" / "results" / "README.md").read_text()
    block = page.split(START, 1)[1].split(END, 1)[0].strip()
    assert block == table(ROOT / "docs" / "results"), "run `python -m lab report` after new results"
    # the table's links are relative to the page, so each names a file beside it
    for name in re.findall(r"\]\(([^)#]+)\)", block):
        assert (ROOT / "docs" / "results" / name).is_file(), name


def test_update_rewrites_only_the_block(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\nbefore\n{START}\nold | table\n{END}\nafter\n")
    written = update_readme(readme, ROOT / "docs" / "results")
    text = readme.read_text()
    assert text.startswith("# x\n\nbefore\n") and text.endswith(f"{END}\nafter\n")
    assert "old | table" not in text and written in text
    # every row has its four cells (a '|' inside a cell is escaped)
    for line in written.splitlines():
        assert line.replace("\\|", "").count("|") == 5


def test_every_seed_experiment_has_its_rows_and_a_missing_one_is_skipped(tmp_path):
    from lab.render import read_results
    from lab.results_table import claims, table
    from lab.results_table_seeds import SEED_SECTIONS

    results = ROOT / "docs" / "results"
    rows = [row for name, _ in SEED_SECTIONS for row in claims(name, read_results(results, name))]
    files = {row[3] for row in rows}
    for name in ("mapa", "vandijk", "adp2sgd", "kardam", "wkafl"):
        assert f"[{name}.md]({name}.md)" in files
    assert table(tmp_path).count("\n") == 1  # nothing run: the header alone


def test_every_dp_sgd_row_shows_the_ledgers_epsilon_beside_the_pooled_one():
    """A pooled ε (the thesis's: secret uniform device selection) is never shown alone (issue 27, #7)."""
    rows = [
        line for line in table(ROOT / "docs" / "results").splitlines() if "under DP" in line and "ε =" in line
    ]
    assert rows, "the dp-staleness rows are missing"
    for row in rows:
        assert "pooled ε" in row and "ledger" in row, row


def test_the_front_pages_table_of_the_default_is_what_the_search_says():
    from lab.results_table import DEFAULT_END, DEFAULT_START, default_table

    page = (ROOT / "README.md").read_text()
    block = page.split(DEFAULT_START, 1)[1].split(DEFAULT_END, 1)[0].strip()
    assert block == default_table(ROOT / "docs" / "results").strip(), "run `python -m lab report`"


def test_the_shipped_default_is_the_one_the_search_chose():
    import json

    from lab.experiments.default_search import ARMS, shipped
    from server.strategies import default_strategy

    s = json.loads((ROOT / "docs" / "results" / "default-search.json").read_text())["summary"]
    rates = s["default_rate"]  # one rate, or each bundled model's own
    for model, rate in rates.items() if isinstance(rates, dict) else [(None, rates)]:
        assert (ARMS[s["default"]][0], rate) == default_strategy(model)
    caps = s.get("default_max_step", {})  # each capped model's step cap
    chosen = (
        tuple((m, r, caps[m]) if m in caps else (m, r) for m, r in rates.items())
        if isinstance(rates, dict)
        else rates
    )
    assert shipped(s["default"], chosen)["is_chosen"]  # s["shipped"]: what ran then, for the record
