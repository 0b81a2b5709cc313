"""`fleet demo --scenario drift` (issue 31 item 5): the time-fed device data, the moving evaluation set,
the F1@k metric, the feed, the console's label, and (slow) a short run on real processes."""

from __future__ import annotations

import socket
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from rich.console import Console

from client import FileFedData
from fleet.demo_drift import DriftConfig, drive, per_hour
from fleet.demo_drift_feed import DriftFeed, to_unit_range, write_npz
from models.manifest import builtin
from server.console.labels import metric_label
from server.core.eval_file import EvalFile
from server.core.evaluation import Evaluator, metric_k
from server.core.evaluation_loop import EvaluationLoop
from tests.support.waiting import wait_until


def _npz(path: Path, n: int, label: int = 0, features: int = 3) -> None:
    write_npz(path, np.full((n, features), 0.5, dtype=np.float32), np.full(n, label, dtype=np.int64))


def test_file_fed_data_follows_its_file(tmp_path: Path) -> None:
    path = tmp_path / "device.npz"
    _npz(path, 4, label=1)
    data = FileFedData(path)
    assert len(data) == 4 and data.label_counts(3) == [0, 4, 0]
    _npz(path, 7, label=2)  # the next simulated hour's window
    x, y = data.batch(100, np.random.default_rng(0))
    assert len(y) == 7 and set(y) == {2}
    path.write_bytes(b"not an npz")  # unreadable: the last good window stays
    assert len(data) == 7
    path.unlink()
    assert data.label_counts(3) == [0, 0, 7]


def test_file_fed_data_needs_a_first_window(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no readable"):
        FileFedData(tmp_path / "missing.npz")


def test_eval_file_rereads_only_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "eval.npz"
    _npz(path, 5)
    held_out = EvalFile(path)
    assert held_out.loads == 1 and not held_out.refresh()
    _npz(path, 9, label=3)
    assert held_out.refresh() and len(held_out.y) == 9 and held_out.loads == 2
    path.write_bytes(b"garbage")
    assert not held_out.refresh() and len(held_out.y) == 9


def test_metric_names() -> None:
    assert metric_k("accuracy") == 1 and metric_k("f1@5") == 5
    for bad in ("f1@0", "f1", "top5", "f1@x"):
        with pytest.raises(ValueError):
            metric_k(bad)
    assert metric_label("accuracy", None) == "test accuracy"
    assert metric_label("f1@5", None) == "F1@5"
    assert metric_label("f1@5", "F1@5 on the freshest hour") == "F1@5 on the freshest hour"


def test_f1_at_k_of_the_recommender() -> None:
    """A hit in the top k scores 2 / (k + 1); accuracy keeps argmax's tie-breaking (all-zero logits)."""
    bundle = builtin("recommender")
    n, classes = 50, bundle.manifest.num_classes
    x = np.zeros((n, *bundle.manifest.input_shape), dtype=np.float32)
    y = np.arange(n) % 10  # labels 0-9
    params = np.zeros(bundle.manifest.num_params, dtype=np.float32)
    bias = next(v for v in bundle.manifest.split(params).values() if v.shape == (classes,))
    bias[:] = -np.arange(classes)  # a view into params: class 0 ranks first, then 1, 2...
    f1, _ = Evaluator(bundle.manifest, bundle.infer_onnx, x, y, metric="f1@5").evaluate(params)
    assert f1 == pytest.approx(0.5 * 2 / 6)  # labels 0-4 of 0-9 are in the top 5
    accuracy, _ = Evaluator(bundle.manifest, bundle.infer_onnx, x, y).evaluate(np.zeros_like(params))
    assert accuracy == pytest.approx(0.1)  # all ties: argmax says 0, as before


class _Coordinator:
    def __init__(self) -> None:
        self.recorded: list[tuple[int, float]] = []
        self.snap = SimpleNamespace(model_id="m", version=3, params=np.zeros(1), averaged=False)

    def snapshot(self) -> SimpleNamespace:
        return self.snap

    def record_evaluation(
        self,
        model_id: str,
        version: int,
        accuracy: float,
        loss: float,
        reference: float | None = None,
        served: np.ndarray | None = None,
    ) -> None:
        self.recorded.append((version, accuracy))


class _Evaluator:
    def __init__(self, held_out: EvalFile) -> None:
        self.y = held_out.y

    def use(self, x: np.ndarray, y: np.ndarray) -> None:
        self.y = y

    def evaluate(self, params: np.ndarray) -> tuple[float, float]:
        return float(len(self.y)), 0.0


def test_the_loop_scores_the_same_version_again_on_a_new_set(tmp_path: Path) -> None:
    path = tmp_path / "eval.npz"
    _npz(path, 5)
    held_out = EvalFile(path)
    coordinator = _Coordinator()
    loop = EvaluationLoop(
        coordinator,  # type: ignore[arg-type]
        lambda _m: _Evaluator(held_out),  # type: ignore[arg-type,return-value]
        every_versions=100, interval_s=1000, poll_s=0.01, eval_file=held_out,
    )  # fmt: skip
    loop.start()
    try:
        wait_until(lambda: coordinator.recorded == [(3, 5.0)])
        _npz(path, 8)  # the next hour: no new version, a new set
        wait_until(lambda: coordinator.recorded == [(3, 5.0), (3, 8.0)])
    finally:
        loop.stop()
        loop.join(timeout=5)


def test_the_feed_writes_windows_and_the_freshest_hour(tmp_path: Path) -> None:
    feed = DriftFeed(tmp_path, devices=4, hours=6, held_out_users=50, seed=1)
    first = feed.write(0)
    assert first.devices_written == len(feed.ready()) > 0 and first.eval_examples >= feed.min_eval
    with np.load(feed.eval_path) as data:
        x0, y0 = data["x"], data["y"]
    assert x0.shape[1] == 118 and x0.min() >= 0 and x0.max() <= 1 and y0.max() < 100
    feed.write(3)
    with np.load(feed.eval_path) as data:
        assert not np.array_equal(data["y"], y0)  # three hours on, other events
    device = FileFedData(feed.device_path(feed.ready()[0]))
    assert len(device) <= 200


def test_unit_range_maps_the_hour_only() -> None:
    features = np.array([[0.2, 0.7, -1.0, 1.0], [1.0, 0.0, 0.0, -0.5]], dtype=np.float32)
    out = to_unit_range(features)
    assert out[:, :2].tolist() == features[:, :2].tolist()
    assert out[:, 2:].tolist() == [[0.0, 1.0], [0.5, 0.25]]


def test_per_hour_keeps_the_newest_score_of_each_hour() -> None:
    times = {100.5: 0.1, 101.9: 0.2, 102.1: 0.3, 99.0: 0.9}  # 99.0: before the clock started
    evaluations = [{"at": at, "accuracy": score} for at, score in times.items()]
    assert per_hour(evaluations, started=100.0, seconds_per_hour=2.0) == {0: 0.2, 1: 0.3}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_the_drift_scenario_tracks_the_freshest_hour(tmp_path: Path) -> None:
    """About 80 s: 6 phones, 30 simulated hours at 2 s; the coordinator's score is recorded hour after
    hour on a set that moves, beats ranking items at random (F1@5 = 5 / 100 / 3), and from the second day
    on beats the model as it was a day before, scored on the same hours (the console's second line)."""
    cfg = DriftConfig(devices=6, minutes=1.0, seconds_per_hour=2.0, port=_free_port(), workdir=tmp_path,
                      linger=0, held_out_users=150)  # fmt: skip
    run = drive(cfg, Console(quiet=True))
    assert run.stats["version"] > 50
    assert len(run.scores) >= 18  # recorded in (almost) every simulated hour
    values = list(run.scores.values())
    assert len({round(v, 4) for v in values}) >= 5  # it moves with the data
    assert np.mean(values[len(values) // 2 :]) > 1.5 * (5 / 100 / 3)
    both = [h for h in run.reference if h in run.scores]
    assert len(both) >= 4  # hours 24 to 29
    assert np.mean([run.scores[h] for h in both]) > np.mean([run.reference[h] for h in both])
