"""What a device tells the coordinator about its data, with and without DP (issue 27).

Under DP nothing data-dependent leaves the device but the noised gradient:

* the task request carries ``local_examples`` as ``bucket_examples(N)`` (the exact N would tell a dataset
  from one with an example added) and no label counts (a count that rises by one reveals a label);
* the push carries no loss and no label counts (neither is noised), ``batch_size`` = the terms' B, and
  the compute time and energy scaled to B (measured × B / max(|S|, 1)), never the sampled batch's.

What remains is the timing side channel the scaling leaves (the per-example cost), declared in
docs/privacy.md. Pure functions: the worker (client/_worker.py) builds its messages with them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fleet_protocol import DPTerms
from fleet_protocol.accounting import bucket_examples

from ._exceptions import WorkerError

__all__ = ["ask_fields", "dp_push_meta", "is_private", "push_meta", "scaled_counts", "scaled_to_batch"]


def is_private(terms: DPTerms | None) -> bool:
    """Whether a grant's terms make it a DP task: any clipped (hence noised) mechanism. A local SGD round
    with clip 0 is plain local SGD (a strategy's terms without DP), whose push is an ordinary one."""
    return terms is not None and terms.clip > 0


def ask_fields(label_counts: list[int], local_examples: int, *, private: bool) -> dict[str, Any]:
    """The data-dependent fields of a task request: the exact N and the label counts without DP; under
    DP the bucketed N alone (``label_counts`` None: left out of the JSON)."""
    if private:
        return {"label_counts": None, "local_examples": bucket_examples(local_examples)}
    return {"label_counts": label_counts, "local_examples": local_examples}


def scaled_to_batch(value: float, batch: int, examples: int) -> float:
    """A measured cost of ``examples`` examples as the cost of ``batch`` (measured × B / max(|S|, 1))."""
    return float(value) * batch / max(int(examples), 1)


def dp_push_meta(
    terms: DPTerms, *, examples: int, compute_time_ms: float, energy: float | None
) -> dict[str, Any]:
    """A DP task's push meta: no loss, no label counts, batch size B = ``terms.expected_batch``, and the
    time and energy measured over the ``examples`` drawn, scaled to B."""
    batch = terms.expected_batch
    return {
        "label_counts": None,
        "loss": None,
        "compute_time_ms": scaled_to_batch(compute_time_ms, batch, examples),
        "energy": None if energy is None else scaled_to_batch(energy, batch, examples),
        "batch_size": batch,
    }


def push_meta(
    terms: DPTerms | None,
    *,
    label_counts: list[int] | None,
    loss: float,
    batch_size: int,
    examples: int,
    compute_time_ms: float,
    energy: float | None,
) -> dict[str, Any]:
    """A push's meta: a DP task's (``dp_push_meta``: ``label_counts``, ``loss`` and ``batch_size`` are not
    sent), else the mini-batch's label counts, its loss and size, and the measured time and energy."""
    if terms is not None and is_private(terms):
        return dp_push_meta(terms, examples=examples, compute_time_ms=compute_time_ms, energy=energy)
    return {
        "label_counts": label_counts,
        "loss": loss,
        "compute_time_ms": compute_time_ms,
        "energy": energy,
        "batch_size": batch_size,
    }


def scaled_counts(counts: list[int], total: int) -> list[int]:
    """``counts`` rescaled to sum to ``total`` (largest remainders): the label counts a push of a local SGD
    round without DP reports (simulations use it for their DP pushes to servers without DP)."""
    weights = np.asarray(counts, np.float64)
    if weights.sum() <= 0:
        raise WorkerError("no local examples to train on")
    exact = weights / weights.sum() * total
    scaled = np.floor(exact).astype(np.int64)
    for i in np.argsort(scaled - exact)[: total - int(scaled.sum())]:
        scaled[i] += 1
    return [int(c) for c in scaled]
