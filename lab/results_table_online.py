"""Results-table rows of online learning on fresh data (issue 31): the thesis's headline, measured."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from lab.contract import Row
from lab.render import results_link


def online_rows(data: dict[str, Any]) -> Iterator[Row]:
    s = data["summary"]
    rec = s["streams"].get("recommender")
    setup = f"{s['setup']['devices']} phones, {s['setup']['days']} days, seeds {s['seeds']}"
    if rec is not None:
        ratio, mean = rec["ratio_online_standard"], rec["mean"]
        low, high = min(ratio["per_seed"]), max(ratio["per_seed"])
        yield (
            f"Online FL over Standard FL (daily FedAvg at night), hashtag-like recommender, F1@top-5, same "
            f"gradients ({setup}); the last hour's most popular items",
            f"{ratio['mean']:.2f}x ({low:.2f}-{high:.2f}); {mean['online']:.3f} vs {mean['standard']:.3f}, "
            f"most popular {mean['popular']:.3f}",
            "2.3x (thesis Fig. 3.6)",
            results_link("online-vs-standard.md"),
        )
        energy = rec["energy"]
        yield (
            "Online FL's battery drain per device per day (at the thesis CNN's cost per example: mean / max)",
            f"{energy['mean_at_cnn_cost']:.4f}% / {energy['max_at_cnn_cost']:.3f}%",
            "0.036% (thesis §3.3.1)",
            results_link("online-vs-standard.md"),
        )
    drift = {name: v for name, v in s["streams"].items() if name != "recommender"}
    if drift:
        gaps = [(v["gap_to_oracle"]["online"], v["gap_to_oracle"]["standard"]) for v in drift.values()]
        yield (
            f"Drift streams ({', '.join(drift)}): online over standard accuracy; online's gap to an hourly "
            "oracle over standard's",
            " / ".join(f"{v['ratio_online_standard']['mean']:.2f}x" for v in drift.values())
            + "; "
            + " / ".join(f"{max(o, 0.0):.3f} vs {st:.3f}" for o, st in gaps),
            "online above on every stream; gap ≤ half of standard's",
            results_link("online-vs-standard.md"),
        )


ONLINE_SECTIONS: tuple[tuple[str, Callable[[dict[str, Any]], Iterator[Row]]], ...] = (
    ("online-vs-standard", online_rows),
)
