"""A naive numpy twin of the sum/min trees and of proportional prioritized replay."""

from __future__ import annotations

import numpy as np

from tests.reference.ring import NumpyRing


def next_pow2(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def reference_layout(capacity: int, fanout: int = 16) -> list[tuple[int, int]]:
    """(offset, padded size) of each level, root first, written out independently."""
    counts = [capacity]
    while counts[-1] > 1:
        counts.append((counts[-1] + fanout - 1) // fanout)
    levels, offset = [], 0
    for n in reversed(counts):
        size = (n + fanout - 1) // fanout * fanout
        levels.append((offset, size))
        offset += size
    return levels


# Leaves hold priorities (|td| + eps) ** alpha: XLA's float32 pow is not correctly rounded and
# differs from numpy's by an ulp on some backends (seen on an H200 GPU); the tree arithmetic
# above the leaves is checked exactly.
LEAF_ULPS = 2


def check_valid(trees: np.ndarray, leaves: np.ndarray, capacity: int, fanout: int = 16) -> None:
    """The leaves equal ``leaves`` (unwritten: 0 / +inf) within ``LEAF_ULPS`` and every parent
    is *exactly* the left-to-right float32 sum (row 0) or the min (row 1) of its children: the
    trees are recomputed from children, never updated by deltas, so nothing drifts."""
    trees = np.asarray(trees)
    levels = reference_layout(capacity, fanout)
    assert trees.shape == (2, levels[-1][0] + levels[-1][1])
    offset, size = levels[-1]
    expected = np.zeros(size, np.float32)
    expected[: len(leaves)] = leaves
    sums = trees[0, offset : offset + size]
    np.testing.assert_array_max_ulp(sums, expected, maxulp=LEAF_ULPS)
    np.testing.assert_array_equal(sums > 0, expected > 0)
    np.testing.assert_array_equal(trees[1, offset : offset + size], np.where(sums > 0, sums, np.inf))
    for (p_off, p_size), (c_off, c_size) in zip(levels[:-1], levels[1:]):
        children = trees[:, c_off : c_off + c_size].reshape(2, -1, fanout)
        n = children.shape[1]
        sums = np.cumsum(children[0], axis=1, dtype=np.float32)[:, -1]  # sequential, float32
        np.testing.assert_array_equal(trees[0, p_off : p_off + n], sums)
        np.testing.assert_array_equal(trees[1, p_off : p_off + n], children[1].min(axis=1))
        np.testing.assert_array_equal(trees[0, p_off + n : p_off + p_size], 0.0)  # padding


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
