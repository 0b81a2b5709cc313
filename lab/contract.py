"""The one run contract of the lab's experiments and benchmarks.

An entry is an ``Experiment``: a quick and a full ``Plan`` (a frozen dataclass of every parameter that
differs between the two: the plans are data, not ``if quick`` branches), ``run(plan, ctx) -> Result``,
and how its result renders (``markdown``, ``plot``); the results-table rows it supports (its claims)
are read from its record by lab/results_table.py. The runner (lab/runner.py) picks the plan, builds
the ``Context``, writes docs/results/NAME.{json,md,png} (NAME-quick.* for a quick plan) and fills
``Result.claims``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar


@dataclass(frozen=True, kw_only=True)
class Plan:
    """The parameters of one run of an experiment. Subclasses add their fields; ``quick`` marks the
    short plan (recorded in the summary, and a quick run's files are NAME-quick.*)."""

    quick: bool = False


P = TypeVar("P", bound=Plan)
Row = tuple[str, str, str, str]  # a results-table row: claim, measured, thesis / target, file


@dataclass(frozen=True)
class Claim:
    """One row of the results table: what is claimed, what was measured, the paper's figure or the
    target, and the file with the details."""

    claim: str
    measured: str
    target: str
    file: str

    def cells(self) -> Row:
        return (self.claim, self.measured, self.target, self.file)


@dataclass
class Result:
    """What a run produced. Its record (``record()``: the JSON file) is ``summary`` first, then the
    other raw data in ``records`` (tuning grids, per-run outputs, …) in order, then ``series`` (the
    curves); the markdown, the plot and the claims are rendered from it."""

    summary: dict[str, Any]
    series: Any = None
    records: dict[str, Any] = field(default_factory=dict)
    claims: list[Claim] = field(default_factory=list)
    view: dict[str, Any] = field(default_factory=dict, repr=False)  # only for the plot/markdown (not written)

    def record(self) -> dict[str, Any]:
        out: dict[str, Any] = {"summary": self.summary, **self.records}
        if self.series is not None:
            out["series"] = self.series
        return clean(out)


def clean(value: Any) -> Any:
    """JSON-safe: NaN/inf become None, tuples lists, numpy scalars Python numbers."""
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, str):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class Steps:
    """Progress of one stage of a run: ``advance()`` once per unit of work (the runner's bar)."""

    def __init__(self, advance: Callable[[float], None] = lambda n: None) -> None:
        self._advance = advance

    def advance(self, n: float = 1) -> None:
        self._advance(n)


@dataclass
class Context:
    """What the runner gives a run: its output name, seed, where records are read (other entries'
    JSON, e.g. the staleness tuning later figures reuse), its run cache, a scratch directory, the
    progress bar and ``checkpoint`` (write a partial result: a long run may stop)."""

    name: str
    seed: int = 0
    results: Path = Path("docs/results")
    cache: Path = Path("docs/results/cache")
    workdir: Path = Path("var/lab")
    checkpoint: Callable[[Result], None] = lambda result: None
    stage: Callable[[str, int | None], Any] | None = None

    @contextmanager
    def steps(self, label: str, total: int | None = None) -> Iterator[Steps]:
        """A stage of ``total`` units on the progress bar (a no-op without one)."""
        if self.stage is None:
            yield Steps()
            return
        with self.stage(label, total) as advance:
            yield Steps(advance)

    def track(self, items: Iterable[Any], label: str, total: int | None = None) -> Iterator[Any]:
        items = list(items) if total is None else items
        with self.steps(label, total if total is not None else len(items)) as steps:  # type: ignore[arg-type]
            for item in items:
                yield item
                steps.advance()


@dataclass(frozen=True)
class Experiment(Generic[P]):
    """A registered experiment or benchmark (``kind``)."""

    name: str
    quick: P
    full: P
    run: Callable[[P, Context], Result]
    markdown: Callable[[Result, P], str]
    plot: Callable[[Result], Any] | None = None  # a matplotlib figure, or None
    dumps: Callable[[dict[str, Any]], str] = lambda record: json.dumps(record, indent=1)  # the JSON file
    kind: str = "experiment"
    title: str = ""
    record_name: str = ""  # the record's file stem when it is not ``name`` (e.g. peer → peer-flower)
    page: str = ""  # the markdown's file stem when not the record's (soak, chaos: reliability.md)

    @property
    def stem(self) -> str:
        return self.record_name or self.name

    def plan(self, quick: bool) -> P:
        return self.quick if quick else self.full
