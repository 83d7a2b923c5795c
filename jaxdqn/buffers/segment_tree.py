"""Sum and min segment trees stored as flat arrays, with a static (unrolled) depth.

A tree over ``P`` leaves (``P`` a power of two) is an array of length ``2P``: node 1 is the root,
node ``i`` has children ``2i`` and ``2i + 1``, leaf ``j`` is node ``P + j`` (node 0 is unused).
Updates write the touched leaves and then recompute every ancestor from its two children, one
level at a time, so a parent is always exactly ``combine(left, right)``: no float drift builds up
over millions of updates. Each level is a gather of ``2K`` and a scatter of ``K`` elements; inside
a ``lax.scan`` (or with the state donated) XLA performs the scatters in place.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

Array = jax.Array


def num_leaves(capacity: int) -> int:
    """The next power of two >= ``capacity``: the number of leaves ``P``."""
    return 1 << max(0, int(capacity) - 1).bit_length()


def depth(tree: Array) -> int:
    """Levels between a leaf and the root (static): ``log2(P)``."""
    return (tree.shape[-1] // 2).bit_length() - 1


def init_sum(capacity: int) -> Array:
    """An all-zero sum tree, ``[2P]`` float32."""
    return jnp.zeros((2 * num_leaves(capacity),), jnp.float32)


def init_min(capacity: int) -> Array:
    """An all-``+inf`` min tree, ``[2P]`` float32 (empty leaves never set the minimum)."""
    return jnp.full((2 * num_leaves(capacity),), jnp.inf, jnp.float32)


def last_write_wins(slots: Array, values: Array) -> Array:
    """For duplicate ``slots`` ``[K]``, give every copy the value of the last one ``[K]``.

    This makes a batched write behave like the sequential loop ``for s, v: tree[s] = v`` and, as
    every write to one slot then carries the same value, deterministic on every backend (XLA
    leaves the winner among colliding scatter writes unspecified).
    """
    k = slots.shape[0]
    order = jnp.argsort(slots, stable=True)  # equal slots stay in call order
    sorted_slots = slots[order]
    is_last = jnp.concatenate([sorted_slots[1:] != sorted_slots[:-1], jnp.ones((1,), bool)])
    positions = jnp.arange(k, dtype=jnp.int32)
    # For each sorted position, the position of the last member of its group.
    group_last = lax.cummin(jnp.where(is_last, positions, k), reverse=True)
    winners = values[order][group_last]  # in sorted order
    return jnp.zeros_like(values).at[order].set(winners, unique_indices=True)


def set_leaves(sums: Array, mins: Array, slots: Array, values: Array) -> tuple[Array, Array]:
    """Write ``values`` ``[K]`` at leaf ``slots`` ``[K]`` of both trees, then fix the ancestors.

    Duplicate slots must carry equal values (see ``last_write_wins``).
    """
    leaves = sums.shape[-1] // 2
    nodes = slots.astype(jnp.int32) + leaves
    values = values.astype(sums.dtype)
    sums = sums.at[nodes].set(values)
    mins = mins.at[nodes].set(values)
    for _ in range(depth(sums)):
        nodes = nodes >> 1
        left, right = 2 * nodes, 2 * nodes + 1
        sums = sums.at[nodes].set(sums[left] + sums[right])
        mins = mins.at[nodes].set(jnp.minimum(mins[left], mins[right]))
    return sums, mins


def find_prefix_sum(sums: Array, mass: Array) -> Array:
    """The leaf ``j`` with ``sum(p[:j]) <= mass < sum(p[:j+1])`` for each ``mass`` ``[B]``.

    The descent only ever enters a child whose sum is positive, so with a positive root it ends
    on a leaf of positive priority even when float32 round-off puts ``mass`` at or past the top of
    a subtree (it then lands on the last positive leaf there): an empty or zero-priority slot is
    never returned.
    """
    leaves = sums.shape[-1] // 2
    node = jnp.ones(mass.shape, jnp.int32)
    for _ in range(depth(sums)):
        left = 2 * node
        left_sum = sums[left]
        go_right = (mass >= left_sum) & (sums[left + 1] > 0)
        mass = jnp.where(go_right, mass - left_sum, mass)
        node = jnp.where(go_right, left + 1, left)
    return node - leaves


def total(sums: Array) -> Array:
    """Sum of all leaves."""
    return sums[1]


def minimum(mins: Array) -> Array:
    """Minimum over written leaves (+inf when none is)."""
    return mins[1]
