"""Results-table rows for the profiler (I-Prof against MAUI): time and energy SLOs, simulated and live.
Read from docs/results/profiler-time.json and profiler-energy.json."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from lab.render import number as _num
from lab.render import results_link as _link

Row = tuple[str, str, str, str]


def _share(value: Any) -> str:
    return "—" if value is None else f"{value:.0%}"


def _pair(summary: dict[str, Any], iprof: str, maui: str) -> str:
    """'I-Prof share (MAUI share)'."""
    return f"{_share(summary.get(iprof))} ({_share(summary.get(maui))})"


def _live_rows(summary: dict[str, Any], figure: str, target: str, file: str) -> Iterator[Row]:
    """The live comparison's rows: one worker per core, and workers sharing cores."""
    for key, label in (("live", "one worker per core"), ("live_shared", "workers sharing cores")):
        if summary.get(f"{key}_iprof_p90_fraction") is not None:
            yield (
                f"I-Prof (MAUI) p90 {figure}, live, {label}",
                f"{summary[f'{key}_iprof_p90_fraction']:.2f} ({summary[f'{key}_maui_p90_fraction']:.2f})",
                target,
                _link(file),
            )


def profiler_time_rows(time_: dict[str, Any]) -> Iterator[Row]:
    if time_ is not None:
        s = time_["summary"]
        yield (
            "I-Prof (MAUI) p90 |t − 3 s|, simulation, 20 test phones, mean of 5 seeds",
            f"{_num(s.get('sim_iprof_p90_s_mean'), 2, ' s')} ({_num(s.get('sim_maui_p90_s_mean'), 2, ' s')})",
            "≤ 0.75 s (2.7 s)",
            _link("profiler-time.md"),
        )
        yield (
            "share of tasks over the 3 s SLO, simulation: I-Prof (MAUI)",
            _pair(s, "sim_iprof_over_slo_share_mean", "sim_maui_over_slo_share_mean"),
            "low",
            _link("profiler-time.md"),
        )
        yield from _live_rows(s, "|t − SLO| / SLO", "≤ 0.25 (I-Prof below MAUI)", "profiler-time.md")
        if s.get("fast_device_tasks_to_target") is not None:
            yield (
                "tasks until a real unslowed worker gets its SLO-sized batch (or max_batch), default server",
                str(s["fast_device_tasks_to_target"]),
                "a few",
                _link("profiler-time.md"),
            )


def profiler_energy_rows(energy: dict[str, Any]) -> Iterator[Row]:
    if energy is not None:
        s = energy["summary"]
        yield (
            "I-Prof (MAUI) p90 energy deviation, simulation, mean of 5 seeds",
            f"{_num(s.get('sim_iprof_p90_percent_mean'), 3, '%')} "
            f"({_num(s.get('sim_maui_p90_percent_mean'), 3, '%')})",
            "≤ 0.01% (0.19%)",
            _link("profiler-energy.md"),
        )
        yield from _live_rows(
            s, "energy deviation / SLO", "≤ 0.133 (I-Prof below MAUI)", "profiler-energy.md"
        )
        yield (
            "share of tasks over the energy SLO, simulation: I-Prof (MAUI)",
            _pair(s, "sim_iprof_over_slo_share_mean", "sim_maui_over_slo_share_mean"),
            "low",
            _link("profiler-energy.md"),
        )


PROFILER_SECTIONS: tuple[tuple[str, Callable[[dict[str, Any]], Iterator[Row]]], ...] = (
    ("profiler-time", profiler_time_rows),
    ("profiler-energy", profiler_energy_rows),
)
