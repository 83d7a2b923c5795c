"""A naive numpy twin of the sum/min trees and of proportional prioritized replay."""

from __future__ import annotations

import numpy as np

from tests.reference.ring import NumpyRing


def next_pow2(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def check_valid(sums: np.ndarray, mins: np.ndarray, leaves: np.ndarray) -> None:
    """Every parent equals its children combined, and the leaves equal ``leaves`` (unwritten: 0).

    Parents must be *exactly* ``left + right`` / ``min(left, right)`` in float32: the trees are
    recomputed from children, never updated by deltas.
    """
    sums = np.asarray(sums)
    mins = np.asarray(mins)
    p = sums.shape[0] // 2
    expected_leaves = np.zeros(p, np.float32)
    expected_leaves[: len(leaves)] = leaves
    np.testing.assert_array_equal(sums[p:], expected_leaves)
    expected_min_leaves = np.where(expected_leaves > 0, expected_leaves, np.inf).astype(np.float32)
    np.testing.assert_array_equal(mins[p:], expected_min_leaves)
    np.testing.assert_array_equal(sums[1:p], sums[2 : 2 * p : 2] + sums[3 : 2 * p : 2])
    np.testing.assert_array_equal(mins[1:p], np.minimum(mins[2 : 2 * p : 2], mins[3 : 2 * p : 2]))


def prefix_sum_index(priorities: np.ndarray, mass: np.ndarray) -> np.ndarray:
    """The oracle: the leaf whose cumulative interval holds ``mass``."""
    return np.searchsorted(np.cumsum(priorities, dtype=np.float64), mass, side="right")


class NumpyPrioritized:
    """Proportional PER as the paper states it, with sequential semantics."""

    def __init__(self, capacity: int, alpha: float, eps: float, item_shape=(), dtype=np.float32):
        self.ring = NumpyRing(capacity, item_shape, dtype)
        self.alpha = alpha
        self.eps = eps
        self.priorities = np.zeros(capacity, np.float32)  # p_i = (|td| + eps)^alpha; 0 = unwritten
        self.max_priority = np.float32(1.0)

    def add(self, items: np.ndarray) -> None:
        for slot in self.ring.add(items):
            self.priorities[slot] = self.max_priority

    def update(self, indices, td_errors) -> None:
        for i, td in zip(np.asarray(indices), np.asarray(td_errors, np.float32)):
            p = np.float32((np.float32(abs(td)) + np.float32(self.eps)) ** np.float32(self.alpha))
            self.priorities[i] = p
            self.max_priority = max(self.max_priority, p)

    def probabilities(self) -> np.ndarray:
        p = self.priorities.astype(np.float64)
        return p / p.sum()

    def weights(self, indices, beta: float) -> np.ndarray:
        p = self.priorities.astype(np.float64)
        p_min = p[p > 0].min()
        return (p[np.asarray(indices)] / p_min) ** -beta
