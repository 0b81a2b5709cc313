"""The controller of FLeet §3.2.4: drop the smallest mini-batches and the most similar label sets.

Each threshold is a fraction to drop, p ∈ [0, 1): a request is refused when its batch size is below
the p-quantile of recent batch sizes, or its similarity above the (1 − p)-quantile of recent ones.
"""

from __future__ import annotations

from collections import deque

import numpy as np


class AdmissionController:
    def __init__(
        self,
        *,
        size_drop: float = 0.0,
        similarity_drop: float = 0.0,
        window: int = 500,
        min_history: int = 20,
    ) -> None:
        self.size_drop = size_drop
        self.similarity_drop = similarity_drop
        self.window = window
        self.min_history = min_history
        self.sizes: deque[int] = deque(maxlen=window)
        self.similarities: deque[float] = deque(maxlen=window)

    def check(self, batch_size: int, similarity: float | None) -> str | None:
        """The reason to refuse this request, or None to accept; records the values either way."""
        reason = None
        sizes_known = self.size_drop > 0 and len(self.sizes) >= self.min_history
        if sizes_known and batch_size < np.quantile(np.fromiter(self.sizes, float), self.size_drop):
            reason = "small_batch"
        similarities_known = self.similarity_drop > 0 and len(self.similarities) >= self.min_history
        if (
            reason is None
            and similarity is not None
            and similarities_known
            and similarity > np.quantile(np.fromiter(self.similarities, float), 1.0 - self.similarity_drop)
        ):
            reason = "too_similar"
        self.sizes.append(batch_size)
        if similarity is not None:
            self.similarities.append(similarity)
        return reason
