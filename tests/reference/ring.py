"""A naive numpy twin of the uniform FIFO ring: Python loops, one item at a time."""

from __future__ import annotations

import numpy as np


class NumpyRing:
    def __init__(self, capacity: int, item_shape: tuple[int, ...] = (), dtype=np.float32):
        self.capacity = capacity
        self.data = np.zeros((capacity,) + item_shape, dtype)
        self.insert_pos = 0
        self.size = 0
        self.num_added = 0

    def add(self, items: np.ndarray) -> list[int]:
        """Add items one by one; return the slots written, in order."""
        slots = []
        for item in items:
            self.data[self.insert_pos] = item
            slots.append(self.insert_pos)
            self.insert_pos = (self.insert_pos + 1) % self.capacity
            self.size = min(self.size + 1, self.capacity)
            self.num_added += 1
        return slots

    def valid_slots(self) -> set[int]:
        return set(range(self.size))
