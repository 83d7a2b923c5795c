"""A sum tree and a min tree over the same leaves: 16-ary, flat, both in one ``[2, M]`` array.

Row 0 is the sum tree, row 1 the min tree. The levels are stored root first, each padded to a
multiple of ``FANOUT`` (16 float32 = one 64-byte cache line); the children of node ``i`` of a
level are nodes ``16 i .. 16 i + 15`` of the level below, one aligned block. Unwritten leaves
hold 0 (sum) and +inf (min): never drawn, never the minimum. ``M`` is about ``1.07 N``.

Why 16-ary: a binary tree over 1M leaves is 20 levels of dependent random reads per sample and
per update, each a likely cache miss; 16 children in one cache line make it 5 levels, and each
level's work is a vector op over one line. The depth is static: updates unroll the levels,
the descent is a loop of fixed trip count (see ``find_prefix_sum``).

Updates write the touched leaves and then recompute every ancestor from its children, one level
at a time, so a parent is always exactly the sequential sum (or the min) of its 16 children: no
float drift builds up over millions of updates, and the descent's running sums over a block end
exactly at the parent's value.

Why one array: XLA updates a loop-carried array in place only if every read of its old value is
provably done before the write. With a separate array per tree, the values written to the
second tree get re-fused (recomputed, with the tree reads they came from) after the write to
the first, and XLA then copies a whole tree every step. One array and one scatter per level
leave nothing to re-fuse (docs/benchmarks.md, "Replay buffers", has the measurements).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

Array = jax.Array

SUM, MIN = 0, 1
FANOUT = 16


class Level(NamedTuple):
    """One level of the flat layout (static)."""

    offset: int  # index of its first node in a row, a multiple of FANOUT
    nodes: int  # real nodes
    size: int  # nodes padded to a multiple of FANOUT


@functools.lru_cache(maxsize=None)
def layout(capacity: int) -> tuple[Level, ...]:
    """The levels for ``capacity`` leaves, root first (the last one holds the leaves)."""
    counts = [int(capacity)]
    while counts[-1] > 1:
        counts.append(-(-counts[-1] // FANOUT))
    levels, offset = [], 0
    for nodes in reversed(counts):
        size = -(-nodes // FANOUT) * FANOUT
        levels.append(Level(offset=offset, nodes=nodes, size=size))
        offset += size
    return tuple(levels)


def num_nodes(capacity: int) -> int:
    """``M``, the length of each row."""
    last = layout(capacity)[-1]
    return last.offset + last.size


def init(capacity: int) -> Array:
    """Empty trees for ``capacity`` leaves: ``[2, M]`` float32, sums 0 and mins +inf."""
    size = num_nodes(capacity)
    return jnp.stack([jnp.zeros((size,), jnp.float32), jnp.full((size,), jnp.inf, jnp.float32)])


def last_write_wins(slots: Array, values: Array, *, capacity: int) -> tuple[Array, Array]:
    """Sort ``(slots, values)`` ``[K]`` by slot; every copy of a slot gets its last value.

    A batched write of the result then behaves like the sequential loop
    ``for s, v: tree[s] = v``, deterministically on every backend (XLA leaves the winner among
    colliding scatter writes unspecified; here colliding writes carry the same value). The sort
    also keeps the trees in place: its output cannot be fused (re-computed) into the level
    updates that follow the first write, where it would read the overwritten tree and force XLA
    to copy it every step. Sorted slots also write in order.

    ``(slot, position)`` is packed into one int32 key when ``capacity * 2**ceil(log2 K)`` fits:
    a one-array sort is cheaper than a two-array stable sort on the CPU.
    """
    k = slots.shape[0]
    shift = max(1, (k - 1).bit_length())
    positions = jnp.arange(k, dtype=jnp.int32)
    slots = slots.astype(jnp.int32)
    if capacity << shift <= 2**31 - 1:
        keys = jnp.sort(slots * (1 << shift) + positions)
        slots, order = keys >> shift, keys & ((1 << shift) - 1)
    else:
        slots, order = lax.sort((slots, positions), num_keys=1, is_stable=True)
    is_last = jnp.concatenate([slots[1:] != slots[:-1], jnp.ones((1,), bool)])
    # For each position, the position of the last member of its group of equal slots.
    group_last = lax.cummin(jnp.where(is_last, positions, k), reverse=True)
    return slots, values[order[group_last]]


def blocks(trees: Array, level: Level, parents: Array) -> Array:
    """The children blocks ``[2, K, FANOUT]`` (level ``level``) of ``parents`` ``[K]``."""
    rows = trees.reshape(2, -1, FANOUT)  # a free view: every level starts on a block boundary
    return rows[:, level.offset // FANOUT + parents]


def running_sums(block: Array) -> Array:
    """Inclusive prefix sums along the last axis, added left to right (a fixed order)."""
    out = [block[..., 0]]
    for j in range(1, block.shape[-1]):
        out.append(out[-1] + block[..., j])
    return jnp.stack(out, axis=-1)


def set_leaves(trees: Array, slots: Array, values: Array, *, capacity: int) -> Array:
    """Write ``values`` ``[K]`` at leaf ``slots`` ``[K]`` of both trees, then fix the ancestors.

    Duplicate slots must carry equal values (see ``last_write_wins``).
    """
    levels = layout(capacity)
    nodes = slots.astype(jnp.int32)
    values = values.astype(trees.dtype)
    # One scatter per level that writes a column of both rows: its indices are the nodes
    # themselves (no [2K, 2] index pairs to build), its updates one [2, K] array.
    trees = trees.at[:, levels[-1].offset + nodes].set(jnp.stack([values, values]))
    for parent_level, child_level in zip(levels[-2::-1], levels[:0:-1]):
        nodes = nodes // FANOUT
        children = blocks(trees, child_level, nodes)  # [2, K, F]
        total = running_sums(children[SUM])[:, -1]
        smallest = jnp.min(children[MIN], axis=-1)
        trees = trees.at[:, parent_level.offset + nodes].set(jnp.stack([total, smallest]))
    return trees


def find_prefix_sum(trees: Array, mass: Array, *, capacity: int, unroll: bool = False) -> tuple[Array, Array]:
    """The leaf ``j`` with ``sum(p[:j]) <= mass < sum(p[:j+1])`` for each ``mass`` ``[B]``.

    Returns ``(leaf [B] int32, p[leaf] [B])``. Within a block of children the descent takes the
    first child whose running sum exceeds ``mass``; a running sum only grows past a child of
    positive value, so that child is positive. ``mass`` is first clamped to just below the
    block's total, so when float32 round-off puts it at or past the total the last positive
    child is taken. With a positive root the descent therefore always ends on a written leaf
    of positive priority: an empty or zero-priority slot is never returned.

    Each level is elementwise work over 16 unrolled columns. The levels themselves run as a
    ``fori_loop`` of static trip count (depth - 1), not unrolled: unrolled, XLA fused each
    level's cheap elementwise producers (the random draw of ``mass`` included) into every later
    level's kernels, so the descent recomputed all levels above it at each level
    (docs/benchmarks.md). The loop reads the trees in place (the gather
    indexes the ``[2, M]`` array itself: slicing the sum row outside the loop would materialize
    a copy of it on every call). ``unroll=True`` unrolls the levels: the better choice on a GPU,
    where each trip of a loop costs a kernel launch and a host round trip (``dispatch.draw``
    picks the form per platform).
    """
    levels = layout(capacity)
    node = jnp.zeros(mass.shape, jnp.int32)
    if len(levels) > 1:
        first_blocks = jnp.array([level.offset // FANOUT for level in levels[1:]], jnp.int32)

        def descend(depth, carry):
            node, mass = carry
            block = trees.reshape(2, -1, FANOUT)[SUM, first_blocks[depth] + node]  # [B, F]
            running = [block[:, 0]]
            for j in range(1, FANOUT):
                running.append(running[-1] + block[:, j])
            mass = jnp.minimum(mass, jnp.nextafter(running[-1], jnp.zeros_like(mass)))
            passed = [r <= mass for r in running]  # True for every child wholly below ``mass``
            child = sum(p.astype(jnp.int32) for p in passed)  # [B], in [0, F - 1]
            below = functools.reduce(jnp.maximum, [jnp.where(p, r, 0) for p, r in zip(passed, running)])
            return node * FANOUT + jnp.minimum(child, FANOUT - 1), mass - below

        node, _ = lax.fori_loop(0, len(levels) - 1, descend, (node, mass), unroll=unroll)
    # The leaf's priority, read once after the descent (carrying it through the loop would cost
    # a kernel per level).
    value = trees[SUM, levels[-1].offset + node]
    return node, value


def leaf_values(trees: Array, *, capacity: int) -> Array:
    """The ``[2, capacity]`` leaf rows (priorities, and the same with +inf where unwritten)."""
    leaves = layout(capacity)[-1]
    return trees[:, leaves.offset : leaves.offset + capacity]


def total(trees: Array) -> Array:
    """Sum of all leaves (the sum tree's root)."""
    return trees[SUM, 0]


def minimum(trees: Array) -> Array:
    """Minimum over written leaves (+inf when none is)."""
    return trees[MIN, 0]
