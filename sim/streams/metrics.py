"""F1@top-k and prequential (test-then-train) evaluation, as the thesis scores its hashtag recommender.

**F1@top-k.** The thesis (§3.3.1) compares, per tweet, the recommender's top 5 hashtags with the tweet's
actual hashtags: precision = hits / k, recall = hits / |relevant|, F1 their harmonic mean, averaged
over tweets. Here one event is one query. With a single relevant item (the default: one event, one
hashtag) a hit gives precision 1/k and recall 1, so F1 = 2 / (k + 1) (1/3 for k = 5) and F1@5 is the
top-5 hit rate divided by 3; a miss gives 0. :func:`f1_at_k` also takes a boolean relevance matrix for
queries with several relevant items (e.g. all of a user's items in the next hour).

**Prequential evaluation.** Time is cut into chunks (an hour by default). For each chunk the current
model is scored on the chunk's data *first*, then the trainer may use that data: every example is
tested before any model has trained on it (Gama et al. 2013). :func:`prequential` runs that loop with
callbacks, so Online FL (train every hour) and Standard FL (train once a day, on eligible devices)
are scored the same way and differ only in their ``update``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

__all__ = ["accuracy", "f1_at_k", "hourly_chunks", "prequential", "top_k"]


def top_k(scores: np.ndarray, k: int = 5) -> np.ndarray:
    """Indices of the ``k`` highest scores per row, best first: shape ``(n, k)``."""
    k = min(k, scores.shape[1])
    part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    order = np.argsort(-np.take_along_axis(scores, part, axis=1), axis=1, kind="stable")
    return np.take_along_axis(part, order, axis=1)


def f1_at_k(
    scores: np.ndarray, relevant: np.ndarray, k: int = 5, *, average: bool = True
) -> np.ndarray | float:
    """F1 of the top-``k`` of ``scores`` (n, n_items) against ``relevant``.

    ``relevant`` is either the one relevant item per query (int, shape ``(n,)``) or a boolean matrix
    ``(n, n_items)``. Returns the mean over queries, or per-query values with ``average=False``; a
    query with no relevant item scores 0. An empty input averages to ``nan``.
    """
    scores = np.asarray(scores)
    picked = top_k(scores, k)
    relevant = np.asarray(relevant)
    if relevant.ndim == 1:
        hits = (picked == relevant[:, None]).any(axis=1).astype(float)
        n_relevant = np.ones(scores.shape[0])
    else:
        hits = np.take_along_axis(relevant.astype(bool), picked, axis=1).sum(axis=1).astype(float)
        n_relevant = relevant.sum(axis=1).astype(float)
    precision = hits / picked.shape[1]
    recall = np.divide(hits, n_relevant, out=np.zeros_like(hits), where=n_relevant > 0)
    denominator = precision + recall
    f1 = np.divide(2 * precision * recall, denominator, out=np.zeros_like(hits), where=denominator > 0)
    if not average:
        return f1
    return float(f1.mean()) if f1.size else float("nan")


def accuracy(scores: np.ndarray, y: np.ndarray) -> float:
    """Share of rows whose highest score is the label (``nan`` for no rows)."""
    return float((np.argmax(scores, axis=1) == y).mean()) if len(y) else float("nan")


def hourly_chunks(t0: float, t1: float, chunk_s: float = 3600.0) -> Iterator[tuple[float, float]]:
    """Consecutive ``[lo, hi)`` chunks covering ``[t0, t1)`` (the last one may be shorter)."""
    lo = t0
    while lo < t1:
        hi = min(lo + chunk_s, t1)
        yield lo, hi
        lo = hi


def prequential(
    t0: float,
    t1: float,
    score: Callable[[float, float], float],
    update: Callable[[float, float], None],
    *,
    chunk_s: float = 3600.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Test-then-train over ``[t0, t1)``: per chunk, ``score(lo, hi)`` the current model on the chunk's
    data, then ``update(lo, hi)`` (the trainer may now use that data, and decides itself whether to
    train: hourly, daily, only on eligible devices...). Returns (chunk starts, scores)."""
    starts, values = [], []
    for lo, hi in hourly_chunks(t0, t1, chunk_s):
        starts.append(lo)
        values.append(score(lo, hi))
        update(lo, hi)
    return np.asarray(starts), np.asarray(values, dtype=float)
