"""The replay buffers' performance choices, in one place: which program computes a step on
which platform. ``uniform_replay`` and ``prioritized_replay`` call these and read like the
algorithm; every choice gives the same results (bitwise: tests compare the forms).

- The fused CPU kernels (``tree_kernels``, built at install time from ``csrc/``) draw from the
  sum tree, write priorities and gather sampled rows on the CPU when they are built and
  ``JAXDQN_CPU_KERNELS`` does not switch them off (``use_kernels``, read when a program is
  traced). Elsewhere XLA's program runs.
- Prioritized draws without the kernels: on the CPU the descent's levels run as a rolled loop
  and its result is ``fence``d (XLA:CPU would otherwise re-fuse tree reads past the next
  priority write and copy the trees every step); other platforms unroll the levels (each loop
  trip costs a kernel launch there).
- Gathers of sampled items go through the kernel only from a storage leaf of
  ``GATHER_KERNEL_MIN_BYTES``: below that XLA's gathers are the faster, above it XLA:CPU splits
  each gather across its thread pool.

docs/benchmarks.md ("Replay buffers") has the measurements behind each choice.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from jaxdqn.buffers import segment_tree, tree_kernels

Array = jax.Array

GATHER_KERNEL_MIN_BYTES = 512 * 1024  # XLA:CPU splits a gather from about 2 x its 256 KiB per-thread L2 estimate


def use_kernels() -> bool:
    """Whether the CPU program traced now uses the fused kernels (built, and switched on)."""
    return tree_kernels.enabled()


def gather(storage: Any, indices: Array) -> Any:
    """The items at ``indices`` ``[B]`` (valid slots) of a ring's ``storage``: leaves ``[B, ...]``."""

    def with_xla(leaves, indices):
        return [s[indices] for s in leaves]

    leaves, treedef = jax.tree_util.tree_flatten(storage)
    largest = max(s.size * s.dtype.itemsize for s in leaves)
    if not use_kernels() or largest < GATHER_KERNEL_MIN_BYTES:
        return treedef.unflatten(with_xla(leaves, indices))
    rows = lax.platform_dependent(
        leaves, indices,
        cpu=lambda leaves, indices: list(tree_kernels.gather_rows(tuple(leaves), indices)),
        default=with_xla)
    return treedef.unflatten(rows)


def set_leaves(trees: Array, slots: Array, values: Array, *, capacity: int) -> Array:
    """Write ``values`` ``[K]`` at leaf ``slots`` ``[K]`` of the trees (a slot named twice keeps
    its last value) and fix their ancestors."""

    def with_xla(trees, slots, values):
        slots, values = segment_tree.last_write_wins(slots, values, capacity=capacity)
        return segment_tree.set_leaves(trees, slots, values, capacity=capacity)

    if not use_kernels():
        return with_xla(trees, slots, values)
    return lax.platform_dependent(trees, slots, values, default=with_xla,
                                  cpu=functools.partial(tree_kernels.set_leaves, capacity=capacity))


def draw(trees: Array, mass: Array, beta: Array, *, capacity: int) -> tuple[Array, Array]:
    """``(indices [B], weights [B])``: the leaves holding ``mass`` ``[B]`` and their importance
    weights ``(p_min / p) ** beta``."""
    return lax.platform_dependent(
        trees, mass, beta, default=functools.partial(draw_with_xla, capacity=capacity, on_cpu=False),
        cpu=functools.partial(draw_with_kernel if use_kernels() else draw_with_xla, capacity=capacity, on_cpu=True))


def draw_with_kernel(trees: Array, mass: Array, beta: Array, *, capacity: int, on_cpu: bool = True
                     ) -> tuple[Array, Array]:
    """``draw`` by the fused CPU kernel (a custom call is never re-fused: no fence needed)."""
    indices, priorities, smallest = tree_kernels.draw(trees, mass, capacity=capacity)
    return indices, (smallest / priorities) ** beta


def draw_with_xla(trees: Array, mass: Array, beta: Array, *, capacity: int, on_cpu: bool) -> tuple[Array, Array]:
    """``draw`` by XLA's program: on the CPU rolled and fenced, elsewhere unrolled."""
    indices, priorities = segment_tree.find_prefix_sum(trees, mass, capacity=capacity, unroll=not on_cpu)
    weights = (segment_tree.minimum(trees) / priorities) ** beta
    return fence((indices, weights)) if on_cpu else (indices, weights)


def fence(values: tuple[Array, ...]) -> tuple[Array, ...]:
    """``values`` unchanged, materialized by a one-trip ``while_loop`` that XLA cannot see through.

    Why: XLA updates the trees in place only if every read of their old contents is done before
    the write. A sample's indices and weights come out of cheap fusions over tree reads, and
    XLA freely re-computes (fuses) such producers into each consumer: into the next priority
    update's level loops, or into whatever the caller does with the batch, after the write. It
    then keeps the old trees alive by copying them every step. A loop is never fused, so its
    outputs are computed once, before anything that uses them. Its trip count depends on the
    data (``min(values[0][0], 0)``: 0 for non-negative indices, which XLA cannot know) and its
    body keeps the values only under a condition that never holds, so XLA can neither unroll
    the loop nor hoist the values out of it.
    """
    start = jnp.minimum(values[0].reshape(-1)[0].astype(jnp.int32), 0)

    def body(carry):
        trip, values = carry
        return trip + 1, tuple(jnp.where(trip < 0, v + 1, v) for v in values)

    return lax.while_loop(lambda carry: carry[0] < 1, body, (start, tuple(values)))[1]
