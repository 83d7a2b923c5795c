"""Functional replay buffers: pure ``init`` / ``add`` / ``sample`` / ``update`` over state pytrees.

    from jaxdqn import buffers
    buf = buffers.prioritized(capacity=10_000, alpha=0.6, eps=1e-6)
    state = buf.init(example_item)                   # item: any pytree, no leading axis
    state = buf.add(state, items)                    # leaves [K, ...]
    s = buf.sample(state, key, batch_size, beta=0.4) # Sample(items, indices, weights)
    state = buf.update(state, s.indices, td_errors)

Everything is jittable, vmappable (a stack of independent buffers) and pmappable (one shard per
device); shapes are static. The module-level functions of ``uniform_replay`` and
``prioritized_replay`` are the same operations with their static arguments as keywords.
``frame_replay(inner, ...)`` wraps either for stacked-frame observations (Atari): each frame is
stored once and ``sample`` rebuilds the stacks (``buffers.frames``).
"""

from __future__ import annotations

import jax

from jaxdqn.buffers import dispatch, frames, prioritized_replay, segment_tree, sequence, uniform_replay
from jaxdqn.buffers.frames import make_frame_replay as frame_replay
from jaxdqn.buffers.prioritized_replay import make_prioritized as prioritized
from jaxdqn.buffers.sequence import timeslice
from jaxdqn.buffers.uniform_replay import make_uniform as uniform
from jaxdqn.types import FrameState, PrioritizedState, ReplayBuffer, Sample, SequenceItem, UniformState


def size(state: UniformState | PrioritizedState | FrameState) -> jax.Array:
    """Number of valid items in a buffer state, a jax int32 scalar."""
    if isinstance(state, FrameState):
        state = state.items
    if isinstance(state, PrioritizedState):
        state = state.storage
    return state.size


__all__ = [
    "FrameState",
    "PrioritizedState",
    "ReplayBuffer",
    "Sample",
    "SequenceItem",
    "UniformState",
    "dispatch",
    "frame_replay",
    "frames",
    "prioritized",
    "prioritized_replay",
    "segment_tree",
    "sequence",
    "size",
    "timeslice",
    "uniform",
    "uniform_replay",
]
