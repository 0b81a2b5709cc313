"""The dp-staleness markdown quotes its reading only while the tables still say what the reading says."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from lab.experiments.dp_staleness_report import reading_applies

COMMITTED = json.loads((Path(__file__).parents[1] / "docs/results/dp-staleness.json").read_text())["summary"]


def test_the_reading_matches_the_committed_run_and_goes_when_a_rerun_differs():
    assert reading_applies(COMMITTED)
    rerun = copy.deepcopy(COMMITTED)
    rerun["claim"]["1"]["gain_pp"] = 0.5
    assert not reading_applies(rerun)
    assert not reading_applies({**COMMITTED, "quick": True})
