"""The scale-out benchmark's aggregator-alone measurement (lab/bench/scale_out.py): a test of the
benchmark, so it imports the lab."""

from __future__ import annotations


def test_the_aggregator_benchmark_drains_every_push_once():
    from lab.bench.scale_out import aggregator_rate
    from server.strategies import DEFAULT_STRATEGY, make_strategy

    rate = aggregator_rate("mnist_cnn", 120, batch=32)
    per_version = make_strategy(DEFAULT_STRATEGY).k  # the default's buffer: K pushes make a version
    assert rate["versions made"] == 120 // per_version
    assert rate["updates/s"] > 0 and rate["aggregator CPU µs/update"] > 0
