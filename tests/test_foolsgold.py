"""Issue 30, FoolsGold (server/strategies/foolsgold.py): devices whose histories point alike are weighed
down, independent ones keep their weight; on hand-made arrays."""

from __future__ import annotations

import numpy as np

from server.strategies import Arrival, FedBuff
from server.strategies.foolsgold import FoolsGold


def arrival(device: str, gradient: np.ndarray, task: str = "t") -> Arrival:
    return Arrival(task, device, 0, 0, np.asarray(gradient, np.float32), np.array([1, 1]), 2, 1.0, 0.0)


class Recorder(FedBuff):
    def __init__(self) -> None:
        super().__init__(learning_rate=0.1, k=1000)
        self.weights: dict[str, list[float]] = {}
        self.norms: dict[str, float] = {}

    def receive(self, arrival: Arrival) -> float:
        self.weights.setdefault(arrival.device_id, []).append(float(np.linalg.norm(arrival.gradient)))
        return super().receive(arrival)


def fleet(center: str, rounds: int = 8, seed: int = 0) -> tuple[FoolsGold, Recorder]:
    """Six honest devices, each pushing its own direction with noise, and three sybils pushing one shared
    direction with noise of their own; every push has norm about 1."""
    rng, d = np.random.default_rng(seed), 400
    own = rng.normal(size=(6, d))
    shared = rng.normal(size=d)
    inner = Recorder()
    fg = FoolsGold(inner, sketch=128, layers="all", center=center, warm_up=2)
    for r in range(rounds):
        for i in range(9):
            base = own[i] if i < 6 else shared
            g = base + 0.3 * rng.normal(size=d)
            fg.receive(arrival(f"{'h' if i < 6 else 's'}{i}", g / np.linalg.norm(g), task=f"{r}-{i}"))
    return fg, inner


def test_sybils_pushing_alike_are_withheld_and_independent_devices_keep_full_weight():
    for center in ("none", "fleet"):
        fg, inner = fleet(center)
        weights = fg.weights()
        rows = {device: weights[row] for device, row in fg.rows.items()}
        assert all(rows[f"h{i}"] == 1.0 for i in range(6)), (center, rows)
        assert all(rows[f"s{i}"] == 0.0 for i in range(6, 9)), (center, rows)
        # the last round: every sybil push withheld (never reaches the strategy), every honest one whole
        assert fg.dropped >= 3 * (8 - 2)
        assert all(len(inner.weights.get(f"s{i}", [])) < 8 for i in range(6, 9))
        assert all(np.allclose(inner.weights[f"h{i}"], 1.0, atol=1e-5) for i in range(6))


def test_before_its_warm_up_a_device_has_full_weight_and_a_zero_push_passes_untouched():
    inner = Recorder()
    fg = FoolsGold(inner, sketch=64, layers="all", warm_up=3)
    g = np.ones(50)
    for i in range(2):
        fg.receive(arrival("a", g, task=f"a{i}"))
        fg.receive(arrival("b", g, task=f"b{i}"))  # identical, but not yet compared
    assert fg.dropped == 0
    fg.receive(arrival("c", np.zeros(50)))
    assert "c" not in fg.rows and len(inner.weights["c"]) == 1
    assert fg.describe()["foolsgold_received"] == 5


def test_the_settings_take_it_alone_and_want_trusted_data_only_for_the_body_or_label_centring():
    import pytest
    from pydantic import ValidationError

    from server.compose import build_strategy
    from server.settings import Settings

    settings = Settings(_env_file=None, wrappers=[{"name": "foolsgold", "center": "none", "confidence": 2}])
    built = build_strategy(settings, None)
    assert isinstance(built, FoolsGold) and built.confidence == 2 and built.center == "none"
    for entry in ({"name": "foolsgold", "layers": "body"}, {"name": "foolsgold", "center": "labels"}):
        with pytest.raises(ValidationError, match="foolsgold requires a trusted-score"):
            Settings(_env_file=None, wrappers=[entry])


def test_the_cosines_kept_from_the_gram_matrix_are_those_of_the_histories_themselves():
    for center in ("none", "fleet"):
        fg, _ = fleet(center, rounds=3, seed=1)
        compared = np.arange(len(fg.counts))
        unit = fg.units_of(fg.histories)
        if center == "fleet":
            unit = fg.units_of(unit - unit.mean(axis=0))
        np.testing.assert_allclose(fg.cosines(compared), unit @ unit.T, atol=1e-9)
