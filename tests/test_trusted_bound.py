"""Issue 30, the trusted bound (server/strategies/trusted_bound.py): a push's coordinates held to their
share of the trusted gradients, on hand-made arrays; its profile; the settings that wire it."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from server.settings import Settings
from server.strategies import Arrival, FedBuff
from server.strategies.trusted_bound import TrustedBound


def arrival(gradient, version: int = 0, task: str = "t", counts=(1, 1)) -> Arrival:
    return Arrival(task, "d", version, 0, np.asarray(gradient, np.float32), np.array(counts), 2, 1.0, 0.0)


class Reference:
    """A ``ReferenceGradient`` port whose g_s the test sets, counting its calls."""

    def __init__(self, gradient) -> None:
        self.value, self.calls = np.asarray(gradient, np.float32), 0

    def gradient(self, label: int | None = None) -> np.ndarray:
        self.calls += 1
        return self.value


class Recorder(FedBuff):
    def __init__(self) -> None:
        super().__init__(learning_rate=0.1, k=100)
        self.seen: list[np.ndarray] = []

    def receive(self, arrival: Arrival) -> float:
        self.seen.append(arrival.gradient)
        return super().receive(arrival)


def test_a_parameter_the_trusted_data_never_moves_is_not_moved_and_the_rest_keeps_its_direction():
    inner = Recorder()
    bound = TrustedBound(inner, bound=2.0, reference=Reference([3.0, 4.0, 0.0]))  # shares 0.6, 0.8, 0
    bound.receive(arrival([-6.0, 8.0, 0.0]))  # as the profile (signs are free): untouched
    bound.receive(arrival([1.0, 1.0, 5.0], task="t2"))  # the third coordinate: only the attacker's
    np.testing.assert_allclose(inner.seen[0], [-6.0, 8.0, 0.0])
    np.testing.assert_allclose(inner.seen[1], [1.0, 1.0, 0.0])
    assert bound.describe()["trusted_bound_clipped"] == 1
    assert bound.describe()["trusted_bound_removed"] == pytest.approx(25 / 27 / 2)


def test_a_coordinate_past_its_share_is_clipped_to_bound_times_it():
    inner = Recorder()
    bound = TrustedBound(inner, bound=1.5, reference=Reference([1.0, 1.0, 1.0, 1.0]))  # each share 0.5
    g = np.array([10.0, 1.0, -1.0, 0.0])
    bound.receive(arrival(g))
    limit = 1.5 * 0.5 * np.linalg.norm(g)  # 7.57
    np.testing.assert_allclose(inner.seen[0], [limit, 1.0, -1.0, 0.0], rtol=1e-6)


def test_the_profile_averages_the_trusted_magnitudes_once_a_version():
    reference = Reference([2.0, 0.0])
    bound = TrustedBound(Recorder(), memory=3, reference=reference)  # weight 2 / (3 + 1) = 0.5
    bound.receive(arrival([1.0, 0.0], version=0))
    bound.receive(arrival([1.0, 0.0], version=0, task="t2"))
    assert reference.calls == 1
    reference.value = np.array([0.0, -2.0], np.float32)
    bound.receive(arrival([1.0, 0.0], version=1, task="t3"))
    np.testing.assert_allclose(bound.profile, [1.0, 1.0])  # |g_s|, averaged


def test_the_body_bound_leaves_the_output_layer_as_it_came():
    class Headed(Reference):
        def head(self) -> tuple[slice, slice]:
            return slice(2, 3), slice(3, 4)  # the output layer: the last two parameters

    inner = Recorder()
    bound = TrustedBound(inner, bound=1.0, layers="body", reference=Headed([1.0, 0.0, 1.0, 1.0]))
    bound.receive(arrival([1.0, 1.0, 9.0, -9.0]))
    np.testing.assert_allclose(inner.seen[0], [1.0, 0.0, 9.0, -9.0])  # the body's second: never moved


def test_without_a_trusted_gradient_a_push_passes_as_it_came():
    inner = Recorder()
    TrustedBound(inner, reference=None).receive(arrival([1.0, -2.0]))
    np.testing.assert_allclose(inner.seen[0], [1.0, -2.0])


def test_the_settings_refuse_it_without_the_trusted_data_and_wire_the_port(tmp_path):
    with pytest.raises(ValidationError, match="trusted-bound requires a trusted-score"):
        Settings(_env_file=None, wrappers=["trusted-bound"])
    data = tmp_path / "trusted.npz"
    np.savez(data, x=np.zeros((4, 1, 28, 28), np.uint8), y=np.zeros(4, np.int64))
    trusted = {"name": "trusted-score", "test": "fltrust", "data": str(data)}
    settings = Settings(_env_file=None, wrappers=[{"name": "trusted-bound", "bound": 3}, trusted])

    from server.compose import build_strategy, trusted_gradient

    port = trusted_gradient(settings)
    built = build_strategy(settings, port)
    assert isinstance(built.inner, TrustedBound) and built.inner.reference is port  # type: ignore[attr-defined]
    assert built.inner.bound == 3  # type: ignore[attr-defined]
