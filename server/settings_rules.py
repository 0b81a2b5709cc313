"""Which combinations of strategy, wrappers, DP (FLEET_DP) and scale-out role (FLEET_ROLE) can run: one place.

A combination that cannot run does not fail where it is set: it fails on every device, at every grant (issue
29: ``audp`` without DP, accepted by the console, stopped a whole fleet). So each rule below is checked
wherever settings are made: ``Settings`` validation (start-up, ``fleet serve``'s check, a saved console
change at a restart) and the console's settings form (through ``with_overrides``); server/compose.py checks
the strategy it builds with the same rules. docs/configuration.md's table "What requires what" is ``RULES``.

A rule's ``check`` answers why given settings break it, naming the setting and what it requires, or None.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from server.strategies import STRATEGIES, WRAPPERS, dp_refusal, make_strategy, wrap
from server.strategies.direction import OWN_AGGREGATE
from server.strategies.norm_noise import inner_clip

if TYPE_CHECKING:
    from server.settings import Settings

__all__ = ["RULES", "Rule", "explain", "needing_dp", "refusals", "refused_with_dp", "startup_problem"]

ALONE = ("api", "aggregator")  # the scale-out roles (docs/scale-out.md): not the single process


@dataclass(frozen=True)
class Rule:
    """``setting`` (as an operator writes it) requires ``requires``, because ``why``."""

    setting: str
    requires: str
    why: str
    check: Callable[[Settings], str | None]


def _layers(settings: Settings) -> Iterator[tuple[str, type[Any]]]:
    """(the setting that chose it, its class) for the strategy and each wrapper, without building them."""
    yield f"FLEET_STRATEGY={settings.strategy.name}", STRATEGIES[settings.strategy.name]
    for wrapper in settings.wrappers:
        yield f"FLEET_WRAPPERS entry {wrapper.name}", WRAPPERS[wrapper.name]


def needing_dp() -> list[str]:
    """The registered strategies and wrappers that run only with DP on (``Strategy.needs_dp``)."""
    registered = [*sorted(STRATEGIES.items()), *WRAPPERS.items()]
    return [name for name, cls in registered if getattr(cls, "needs_dp", None)]


def refused_with_dp() -> list[str]:
    """The registered strategies and wrappers whose defaults DP refuses (they read the loss or the label
    counts, or use the 'paper' sampler); each wrapper is tried around plain ``fedbuff`` (it reads neither)."""
    strategies = [name for name in sorted(STRATEGIES) if dp_refusal(make_strategy(name))]
    wrappers = [
        name for name, cls in WRAPPERS.items() if dp_refusal(wrap(make_strategy("fedbuff"), [cls.settings()]))
    ]
    return strategies + wrappers


def _terms_need_dp(settings: Settings) -> str | None:
    if settings.dp:
        return None
    for setting, cls in _layers(settings):
        if cls.needs_dp:
            return (
                f"{setting} requires FLEET_DP=true: {cls.needs_dp}. Turn DP on, or choose a strategy"
                " that runs without it"
            )
    return None


def _dp_reads(settings: Settings) -> str | None:
    if not settings.dp:
        return None
    strategy = wrap(make_strategy(settings.strategy), settings.wrappers)
    problem = dp_refusal(strategy, similarity_drop=settings.similarity_drop)
    return (
        None
        if problem is None
        else f"FLEET_DP=true refuses FLEET_STRATEGY={settings.strategy.name}: {problem}"
    )


def _role_without_dp(settings: Settings) -> str | None:
    if settings.role in ALONE and settings.dp:
        return (
            f"FLEET_ROLE={settings.role} requires FLEET_DP=false: DP budgets are charged in one process,"
            " so FLEET_DP needs FLEET_ROLE=all for now (docs/scale-out.md)"
        )
    return None


def _role_on_postgres(settings: Settings) -> str | None:
    if settings.role in ALONE and not settings.resolved_database_url().startswith("postgresql"):
        return f"FLEET_ROLE={settings.role} needs PostgreSQL (FLEET_DATABASE_URL): docs/scale-out.md"
    return None


STEPPING = ("centered-clip", "robust-aggregation", "norm-noise")  # replace the step's direction


def _trusted_data(settings: Settings) -> str | None:
    names = [wrapper.name for wrapper in settings.wrappers]
    for wrapper in settings.wrappers:  # label-check, trusted-bound: they read the gradient on trusted data
        if WRAPPERS[wrapper.name].needs_reference(wrapper) and "trusted-score" not in names:
            return (
                f"FLEET_WRAPPERS entry {wrapper.name} requires a trusted-score entry with its data: it reads"
                " the server's gradient on those trusted digits"
            )
    for wrapper in settings.wrappers:
        if wrapper.name != "trusted-score":
            continue
        data = getattr(wrapper, "data", None)
        setting = "FLEET_WRAPPERS entry trusted-score"
        if not data or not Path(data).is_file():
            return (
                f"{setting} requires its data: an .npz (x, y) of held-out training samples the server"
                f" trusts ({'none given' if not data else f'{data} is not a file'}); its gradient on them is"
                " what each device's gradient is scored against"
            )
        if settings.eval_data is not None and Path(data).resolve() == Path(settings.eval_data).resolve():
            return (
                f"{setting} requires data other than FLEET_EVAL_DATA: the trusted samples are training"
                " data; scoring against the test set would fit the model to it"
            )
    return None


def _steps_by_buffer(settings: Settings) -> str | None:
    why = OWN_AGGREGATE.get(settings.strategy.name)
    if why is None:
        return None
    for wrapper in settings.wrappers:
        if wrapper.name in STEPPING:
            return (
                f"FLEET_WRAPPERS entry {wrapper.name} requires a strategy that steps by its buffer's"
                f" combination, not FLEET_STRATEGY={settings.strategy.name}: {why}"
            )
    return None


def _noise_bound(settings: Settings) -> str | None:
    inside = make_strategy(settings.strategy)
    for wrapper in settings.wrappers:
        if wrapper.name == "norm-noise":
            bound, noise = getattr(wrapper, "bound", None), getattr(wrapper, "noise", 0.0)
            if bound is None and not noise:
                return "FLEET_WRAPPERS entry norm-noise requires a bound or noise > 0: as set it does nothing"
            if bound is None and inner_clip(inside) is None:
                return (
                    "FLEET_WRAPPERS entry norm-noise requires a bound: set its bound, or list clip-norm"
                    f" before it (FLEET_STRATEGY={settings.strategy.name} does not clip); the noise is σ ×"
                    " the bound"
                )
        inside = wrap(inside, [wrapper])
    return None


def _trims(settings: Settings) -> str | None:
    k = make_strategy(settings.strategy).k
    for wrapper in settings.wrappers:
        if wrapper.name == "robust-aggregation" and getattr(wrapper, "statistic", "") == "trimmed-mean":
            n = max(k, getattr(wrapper, "least", 1))
            if getattr(wrapper, "trim", 0.0) * n < 1:
                return (
                    f"FLEET_WRAPPERS entry robust-aggregation requires trim × gradients per step ≥ 1 for"
                    f" trimmed-mean: {wrapper.trim} × {n} trims nothing (raise trim or least)"
                )
    return None


RULES: tuple[Rule, ...] = (
    Rule(
        "`FLEET_STRATEGY` " + ", ".join(f"`{name}`" for name in needing_dp()),
        "`FLEET_DP=true`",
        "its grants carry DP terms that only the privacy ledger completes; without DP no device can run them",
        _terms_need_dp,
    ),
    Rule(
        "`FLEET_DP=true`",
        "a strategy and wrappers that read neither the loss nor the label counts (`Strategy.reads`; with"
        f" their defaults {', '.join(f'`{name}`' for name in refused_with_dp())} do: `adasgd`/`adabuff` need"
        " `boost_scope` `none`, `wkafl` `wkafl_loss_threshold` 0), `FLEET_SIMILARITY_DROP=0`, and the"
        " `exact` norm-Laplace sampler",
        "a DP device sends no loss and no label counts (they are not noised); the `paper` sampler is not"
        " ε-DP",
        _dp_reads,
    ),
    Rule(
        "`FLEET_ROLE=api` or `aggregator`",
        "`FLEET_DP=false`",
        "a privacy charge must be atomic with its grant, which only the single process does",
        _role_without_dp,
    ),
    Rule(
        "`FLEET_ROLE=api` or `aggregator`",
        "PostgreSQL (`FLEET_DATABASE_URL`)",
        "the workers and the aggregator share the queue and the versions in it",
        _role_on_postgres,
    ),
    Rule(
        "`FLEET_WRAPPERS` entry `trusted-score`",
        "its `data`: an .npz (x, y) of held-out training samples, not `FLEET_EVAL_DATA`",
        "each device's gradient is scored against the server's own gradient on them (the `ReferenceGradient`"
        " port); without them nothing can be scored",
        _trusted_data,
    ),
    Rule(
        "`FLEET_WRAPPERS` entries " + ", ".join(f"`{name}`" for name in STEPPING),
        "a strategy that steps by its buffer's combination (not "
        + ", ".join(f"`{n}`" for n in OWN_AGGREGATE)
        + ")",
        "they replace the buffer's combination by their own direction",
        _steps_by_buffer,
    ),
    Rule(
        "`FLEET_WRAPPERS` entry `norm-noise`",
        "a `bound`, or a `clip-norm` inside it (fedbuff-equal and dynsgd-clip clip already); a bound or"
        " noise",
        "the noise is σ × the bound; with neither it does nothing",
        _noise_bound,
    ),
    Rule(
        "`FLEET_WRAPPERS` entry `robust-aggregation`, statistic `trimmed-mean`",
        "`trim` × max(K, `least`) ≥ 1",
        "below it the trimmed mean trims nothing: a plain mean",
        _trims,
    ),
)


def refusals(settings: Settings) -> list[str]:
    """Why ``settings`` cannot run, one sentence per broken rule (empty: they can)."""
    return [problem for rule in RULES if (problem := rule.check(settings)) is not None]


def explain(exc: ValidationError) -> str:
    """A settings ValidationError as lines an operator can act on: ``FLEET_<NAME>: message`` per field,
    a rule's own sentence (it names its settings) for a combination."""
    lines = []
    for error in exc.errors(include_url=False):
        loc = [str(part) for part in error["loc"] if not isinstance(part, int)]
        if loc[:1] in (["strategy"], ["wrappers"]) and len(loc) > 2:
            loc = [loc[0], *loc[2:]]  # the union's tag (the strategy's name) is not a variable's part
        where = "__".join(loc)
        message = str(error["msg"]).removeprefix("Value error, ")
        lines.append(f"FLEET_{where.upper()}: {message}" if where else message)
    return "\n".join(lines)


def startup_problem(build: Callable[[], Any]) -> str | None:
    """What ``fleet serve`` refuses to start with: ``build()`` (``Settings()``) failing validation, explained;
    None when the settings can run."""
    try:
        build()
    except ValidationError as exc:
        return explain(exc)
    return None
