"""Data that changes over time (issue 31): a hashtag-like recommender stream, the standard concept-drift
streams, per-device recent windows and prequential metrics. docs/online.md describes the models."""

from sim.streams.device import DeviceStreams, RecentWindow, WindowBound
from sim.streams.drift import (
    SEA,
    HyperplaneParams,
    RandomRBFDrift,
    RandomRBFParams,
    RotatingHyperplane,
    SEAParams,
    TimedSamples,
    to_bundle_input,
)
from sim.streams.metrics import accuracy, f1_at_k, hourly_chunks, prequential, top_k
from sim.streams.recommender import EventLog, RecommenderParams, RecommenderStream

__all__ = [
    "SEA",
    "DeviceStreams",
    "EventLog",
    "HyperplaneParams",
    "RandomRBFDrift",
    "RandomRBFParams",
    "RecentWindow",
    "RecommenderParams",
    "RecommenderStream",
    "RotatingHyperplane",
    "SEAParams",
    "TimedSamples",
    "WindowBound",
    "accuracy",
    "f1_at_k",
    "hourly_chunks",
    "prequential",
    "top_k",
    "to_bundle_input",
]
