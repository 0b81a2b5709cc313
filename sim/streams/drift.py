"""The standard concept-drift streams of the stream-learning literature, as functions of time.

Three generators, written in numpy from their papers' definitions rather than taken from ``river``:
river's generators yield one example per Python call (a few µs each, a million calls for a week of
1,000 devices) and tie the concept to the example count, while an online-vs-standard experiment needs
the concept as a function of *time* (devices produce examples at their own rates) and whole arrays at
once. Each is a few lines of numpy, and the tests check each paper's defining property, so a
dependency (and a lock change) buys nothing here.

* :class:`SEA` (Street & Kim 2001): 3 attributes uniform in [0, 10], label ``x1 + x2 <= theta``; the
  third attribute is noise. Sudden drift: ``theta`` steps through ``thresholds`` (8, 9, 7, 9.5), one
  concept per ``period_hours``; ``noise`` of the labels are flipped.
* :class:`RotatingHyperplane` (Hulten, Spencer & Domingos 2001): ``x`` uniform in [0, 1]^d, label
  ``sum(w x) >= sum(w) / 2``. Gradual drift: ``n_drift_features`` weights move at ``speed_per_hour``,
  each reversing direction with probability ``reverse_prob`` every hour.
* :class:`RandomRBFDrift` (Bifet et al. 2009, MOA's RandomRBFGeneratorDrift): ``n_centroids`` Gaussian
  centroids, each with a class, a weight and a standard deviation (uniform in [0, 1]); an example picks a
  centroid by weight and lies at a Gaussian distance from it in a uniformly random direction. Drift: the
  first ``n_drift_centroids`` move in straight lines at ``speed_per_hour``, bouncing off the unit cube.

Every generator draws its concept (weights' paths, centroids) once from its seed and then answers
``draw(times, rng)``: one example per time, from the concept in force at that time. The features are
in [0, 1] (SEA's are scaled by ``scale``), and :func:`to_bundle_input` pads them into the 1x28x28 input
of the ``logreg`` and ``mlp`` built-in bundles (the padding is zeros, whose weights get zero gradient),
whose 10 classes cover every stream's labels: no new bundle is needed for these streams.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.diurnal import DAY, HOUR

__all__ = [
    "SEA",
    "HyperplaneParams",
    "RandomRBFDrift",
    "RandomRBFParams",
    "RotatingHyperplane",
    "SEAParams",
    "TimedSamples",
    "to_bundle_input",
]


@dataclass(frozen=True)
class TimedSamples:
    """Examples with their times: ``X`` float32 ``(n, d)``, ``y`` int64 ``(n,)``."""

    time: np.ndarray
    X: np.ndarray
    y: np.ndarray


def to_bundle_input(X: np.ndarray, input_shape: tuple[int, ...] = (1, 28, 28)) -> np.ndarray:
    """Zero-pad feature rows into a bundle's example shape (default: the built-ins' 1x28x28)."""
    size = int(np.prod(input_shape))
    if X.shape[1] > size:
        raise ValueError(f"{X.shape[1]} features do not fit an input of {size} values")
    out = np.zeros((X.shape[0], size), dtype=np.float32)
    out[:, : X.shape[1]] = X
    return out.reshape(X.shape[0], *input_shape)


@dataclass(frozen=True)
class SEAParams:
    """SEA concepts (Street & Kim 2001) with sudden drift in time."""

    thresholds: tuple[float, ...] = (8.0, 9.0, 7.0, 9.5)
    """``theta`` of each concept, in the paper's order; the stream cycles through them."""
    period_hours: float = 12.0
    """Hours each concept lasts before the next one takes over (sudden drift)."""
    noise: float = 0.1
    """Share of labels flipped (the paper's 10 % class noise)."""
    scale: float = 0.1
    """Features are returned multiplied by this (0.1: from [0, 10] into [0, 1])."""


class SEA:
    """SEA with sudden drift: ``y = 1`` iff ``x1 + x2 <= theta(t)``."""

    n_features = 3
    n_classes = 2

    def __init__(self, params: SEAParams = SEAParams()) -> None:
        self.params = params

    def concept(self, t: np.ndarray | float) -> np.ndarray:
        """Index into ``thresholds`` of the concept in force at ``t``."""
        period = self.params.period_hours * HOUR
        return (np.floor(np.asarray(t, dtype=float) / period).astype(np.int64)) % len(self.params.thresholds)

    def theta(self, t: np.ndarray | float) -> np.ndarray:
        return np.asarray(self.params.thresholds)[self.concept(t)]

    def label(self, raw: np.ndarray, t: np.ndarray) -> np.ndarray:
        """The noise-free label of unscaled attributes ``raw`` (n, 3) at times ``t``."""
        return (raw[:, 0] + raw[:, 1] <= self.theta(t)).astype(np.int64)

    def draw(self, times: np.ndarray, rng: np.random.Generator) -> TimedSamples:
        times = np.asarray(times, dtype=float)
        raw = rng.uniform(0.0, 10.0, size=(times.size, 3))
        y = self.label(raw, times)
        flip = rng.random(times.size) < self.params.noise
        y[flip] = 1 - y[flip]
        return TimedSamples(times, (raw * self.params.scale).astype(np.float32), y)


@dataclass(frozen=True)
class HyperplaneParams:
    """A rotating hyperplane (Hulten et al. 2001) whose weights drift in time."""

    n_features: int = 10
    """Dimension ``d`` of ``x``, uniform in [0, 1]^d."""
    n_drift_features: int = 5
    """How many weights drift (the first ones)."""
    speed_per_hour: float = 0.05
    """How far a drifting weight moves per hour (initial weights are uniform in [0, 1])."""
    reverse_prob: float = 0.1
    """Probability that a drifting weight reverses its direction at each hour."""
    noise: float = 0.05
    """Share of labels flipped."""


class RotatingHyperplane:
    """Label ``sum(w(t) x) >= sum(w(t)) / 2``; ``w(t)`` piecewise linear with hourly knots."""

    n_classes = 2

    def __init__(self, days: float, params: HyperplaneParams = HyperplaneParams(), *, seed: int = 0) -> None:
        p = self.params = params
        self.n_features = p.n_features
        rng = np.random.default_rng(seed)
        hours = int(np.ceil(days * DAY / HOUR)) + 1
        direction = np.where(rng.random(p.n_drift_features) < 0.5, -1.0, 1.0)
        flips = np.where(rng.random((hours, p.n_drift_features)) < p.reverse_prob, -1.0, 1.0)
        flips[0] = 1.0
        steps = direction * np.cumprod(flips, axis=0) * p.speed_per_hour  # move during hour k
        self.knots = np.tile(rng.random(p.n_features), (hours + 1, 1))
        self.knots[1:, : p.n_drift_features] += np.cumsum(steps, axis=0)

    def weights(self, t: np.ndarray | float) -> np.ndarray:
        """``w(t)``: shape ``(*t.shape, d)`` (held at the last knot past the horizon)."""
        h = np.clip(np.asarray(t, dtype=float) / HOUR, 0.0, len(self.knots) - 1.0)
        k = np.minimum(np.floor(h).astype(np.int64), len(self.knots) - 2)
        frac = (h - k)[..., None]
        return self.knots[k] * (1.0 - frac) + self.knots[k + 1] * frac

    def label(self, X: np.ndarray, t: np.ndarray) -> np.ndarray:
        w = self.weights(t)
        return ((w * X).sum(axis=1) >= 0.5 * w.sum(axis=1)).astype(np.int64)

    def draw(self, times: np.ndarray, rng: np.random.Generator) -> TimedSamples:
        times = np.asarray(times, dtype=float)
        X = rng.random((times.size, self.n_features))
        y = self.label(X, times)
        flip = rng.random(times.size) < self.params.noise
        y[flip] = 1 - y[flip]
        return TimedSamples(times, X.astype(np.float32), y)


@dataclass(frozen=True)
class RandomRBFParams:
    """Random RBF with moving centroids (Bifet et al. 2009)."""

    n_features: int = 10
    """Dimension of ``x``; centroids' centres are uniform in [0, 1]^d."""
    n_classes: int = 5
    """Classes, assigned to centroids uniformly (at most 10 for the built-in bundles)."""
    n_centroids: int = 50
    """Gaussian centroids."""
    n_drift_centroids: int = 50
    """How many centroids move (the first ones)."""
    speed_per_hour: float = 0.05
    """Distance a moving centroid covers per hour (the unit cube is 1 wide)."""


class RandomRBFDrift:
    """Examples around centroids that move in straight lines, reflected at the unit cube's faces."""

    def __init__(self, params: RandomRBFParams = RandomRBFParams(), *, seed: int = 0) -> None:
        p = self.params = params
        self.n_features, self.n_classes = p.n_features, p.n_classes
        rng = np.random.default_rng(seed)
        self.centres = rng.random((p.n_centroids, p.n_features))
        self.classes = rng.integers(p.n_classes, size=p.n_centroids)
        self.std = rng.random(p.n_centroids)
        weight = rng.random(p.n_centroids)
        self.weight = weight / weight.sum()
        direction = rng.standard_normal((p.n_centroids, p.n_features))
        direction /= np.linalg.norm(direction, axis=1, keepdims=True)
        direction[p.n_drift_centroids :] = 0.0
        self.velocity = direction * p.speed_per_hour / HOUR

    def centroids(self, t: np.ndarray | float) -> np.ndarray:
        """Centre of each centroid at ``t``: shape ``(*t.shape, n_centroids, d)``, inside [0, 1]^d."""
        t = np.asarray(t, dtype=float)[..., None, None]
        free = (self.centres + self.velocity * t) % 2.0  # straight line, folded back at 0 and 1
        return np.where(free > 1.0, 2.0 - free, free)

    def draw(self, times: np.ndarray, rng: np.random.Generator) -> TimedSamples:
        times = np.asarray(times, dtype=float)
        pick = rng.choice(self.params.n_centroids, size=times.size, p=self.weight)
        free = (self.centres[pick] + self.velocity[pick] * times[:, None]) % 2.0
        centre = np.where(free > 1.0, 2.0 - free, free)
        direction = rng.standard_normal((times.size, self.n_features))
        direction /= np.linalg.norm(direction, axis=1, keepdims=True)
        X = centre + direction * (rng.standard_normal(times.size) * self.std[pick])[:, None]
        return TimedSamples(times, X.astype(np.float32), self.classes[pick].astype(np.int64))
