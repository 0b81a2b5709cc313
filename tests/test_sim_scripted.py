"""sim/scripted.py: experiments that fix their own serving order still train through the coordinator core
(issue 26: no private training loops), with strategies built as server/compose.py builds them."""

from __future__ import annotations

import numpy as np
import pytest

from models.manifest import builtin
from server.core.errors import InvalidInput
from server.core.types import TaskGrant
from server.strategies import FedAvgAsync
from server.strategies.kardam import Kardam
from sim.scripted import ScriptedFleet, strategy_factory


def is_float16_exact(values: np.ndarray) -> bool:
    return bool(np.array_equal(values, values.astype(np.float16).astype(np.float32)))


def test_strategy_factory_builds_what_the_composition_root_builds():
    strategy = strategy_factory(strategy="fedavg-async", learning_rate=0.2, k=1, kardam=True, kardam_f=2)()
    assert isinstance(strategy, Kardam) and strategy.f == 2
    assert isinstance(strategy.inner, FedAvgAsync) and strategy.inner.learning_rate == 0.2
    with pytest.raises(ValueError):  # validated as the server validates its settings
        strategy_factory(strategy="mapa", dp_step_epsilon=0.0)


@pytest.mark.parametrize("encoding", ["float32", "float16"])
def test_round_robin_through_the_core_with_the_wire_encoding(monkeypatch, encoding):
    """Three devices ask once, then push in turn and ask again: τ = 2 from the second round on, one version
    per push (K = 1); what is pulled and what reaches the strategy crossed the wire in ``encoding``."""
    received: list[np.ndarray] = []
    original = FedAvgAsync.receive

    def recording(self, arrival):  # type: ignore[no-untyped-def]
        received.append(np.array(arrival.gradient))
        return original(self, arrival)

    monkeypatch.setattr(FedAvgAsync, "receive", recording)
    bundle = builtin("logreg")
    counts = [np.full(10, 5) for _ in range(3)]
    fleet = ScriptedFleet(
        bundle, strategy_factory(strategy="fedavg-async", learning_rate=0.1, k=1), label_counts=counts,
        batch=4, encoding=encoding,
    )  # fmt: skip
    for i in range(3):
        assert isinstance(fleet.ask(i), TaskGrant)
    rng = np.random.default_rng(0)
    outcomes = []
    for step in range(9):
        i = step % 3
        pulled = fleet.devices[i].params
        assert pulled is not None and is_float16_exact(pulled) == (encoding == "float16")
        gradient = rng.standard_normal(bundle.manifest.num_params).astype(np.float32)
        outcomes.append(fleet.push(i, gradient, loss=1.0, label_counts=[4] + [0] * 9))
        fleet.ask(i)
    assert [o.staleness for o in outcomes] == [0, 1, 2] + [2] * 6
    assert fleet.version == 9 and all(o.applied for o in outcomes)
    assert len(received) == 9 and all(is_float16_exact(g) == (encoding == "float16") for g in received)
    # the core validates as the push route does: label counts must sum to the batch size
    with pytest.raises(InvalidInput):
        fleet.push(0, gradient, loss=1.0, label_counts=[3] + [0] * 9)
