"""Proportional prioritized experience replay (Schaul et al. 2016), RLlib semantics improved.

Item ``i`` is drawn with probability ``p_i / sum_j p_j`` where ``p_i = (|td_i| + eps) ** alpha``;
the importance weight is ``w_i = (p_i / p_min) ** -beta`` with ``p_min`` the buffer-wide minimum,
so ``w <= 1`` and the least likely item gets exactly 1 (RLlib's ``(N P(i))^-beta / max_w``).
New items enter at the largest priority ever set (the paper; RLlib 1.x used 1.0). Draws are
independent (with replacement), as in RLlib.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from jaxdqn.buffers import dispatch, segment_tree, uniform_replay
from jaxdqn.types import PrioritizedState, PyTree, ReplayBuffer, Sample

Array = jax.Array


def check_priority_args(alpha: float, eps: float) -> None:
    """Refuse ``alpha < 0`` or ``eps <= 0`` (which would give zero or undefined priorities).
    Traced values (a sweep, ``jaxdqn.sweep``) pass: each trial's config checked them."""
    if isinstance(alpha, jax.core.Tracer) or isinstance(eps, jax.core.Tracer):
        return
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not alpha >= 0:
        raise ValueError(f"alpha must be a number >= 0 (0 is uniform replay), got {alpha!r}")
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not eps > 0:
        raise ValueError(f"eps must be a number > 0 (keeps every priority positive), got {eps!r}")


def init(example_item: PyTree, *, capacity: int) -> PrioritizedState:
    """An empty prioritized buffer for items shaped like ``example_item``."""
    return PrioritizedState(
        storage=uniform_replay.init(example_item, capacity=capacity),
        trees=segment_tree.init(capacity),
        max_priority=jnp.ones((), jnp.float32),
    )


def add(state: PrioritizedState, items: PyTree, mask: Array | None = None) -> PrioritizedState:
    """Write ``K`` items (leaves ``[K, ...]``) at the max priority seen so far; ``mask`` ``[K]``
    (optional) keeps only the items where it is True (``uniform_replay.add``)."""
    k = uniform_replay.check_items(state.storage.storage, items)
    capacity = uniform_replay.capacity_of(state.storage)
    priorities = jnp.full((k,), state.max_priority)
    if mask is None:
        slots = uniform_replay.write_slots(state.storage, k)
        trees = dispatch.set_leaves(state.trees, slots, priorities, capacity=capacity)
    else:
        slots, count = uniform_replay.masked_slots(state.storage, mask.reshape(-1))
        # The tree writes cannot drop a slot: a masked-out item writes the same max priority at
        # the first kept item's slot (``insert_pos``), which that item writes anyway; with no
        # item kept the trees stay as they are.
        slots = jnp.where(mask.reshape(-1), slots, state.storage.insert_pos)
        trees = lax.cond(count > 0, lambda t: dispatch.set_leaves(t, slots, priorities, capacity=capacity),
                         lambda t: t, state.trees)
    return PrioritizedState(
        storage=uniform_replay.add(state.storage, items, mask),
        trees=trees,
        max_priority=state.max_priority,
    )


def sample(state: PrioritizedState, key: Array, *, batch_size: int, beta: float | Array) -> Sample:
    """``batch_size`` items drawn with probability ``p_i / sum(p)``, with importance weights.

    ``beta`` may be traced (it is annealed). Any ``batch_size`` >= 1 (draws are with replacement).
    Precondition: at least one item was added (refused outside ``jit``, as for the uniform ring).
    """
    capacity = uniform_replay.capacity_of(state.storage)
    uniform_replay.check_batch_size(batch_size)
    uniform_replay.check_not_empty(state.storage.size)
    if isinstance(beta, (int, float)) and not beta >= 0:
        raise ValueError(f"beta must be >= 0 (0: no importance correction), got {beta!r}")
    mass = jax.random.uniform(key, (batch_size,), jnp.float32) * segment_tree.total(state.trees)
    beta = jnp.asarray(beta, jnp.float32)
    indices, weights = dispatch.draw(state.trees, mass, beta, capacity=capacity)
    return Sample(
        items=dispatch.gather(state.storage.storage, indices),
        indices=indices,
        weights=weights,
    )


def priorities_from_td(td_errors: Array, *, alpha: float, eps: float) -> Array:
    """``p = (|td| + eps) ** alpha``, float32."""
    return (jnp.abs(td_errors.astype(jnp.float32)) + eps) ** alpha


def update(
    state: PrioritizedState,
    indices: Array,
    td_errors: Array,
    *,
    alpha: float,
    eps: float,
) -> PrioritizedState:
    """Set the priorities of ``indices`` ``[B]`` from ``td_errors`` ``[B]``.

    A slot named twice takes its last value, deterministically. Indices must be valid slots
    (those ``sample`` returned).
    """
    if indices.shape != td_errors.shape or indices.ndim != 1:
        raise ValueError(
            f"indices and td_errors must both have shape [B], got {indices.shape} and {td_errors.shape}"
        )
    indices = indices.astype(jnp.int32)
    priorities = priorities_from_td(td_errors, alpha=alpha, eps=eps)
    capacity = uniform_replay.capacity_of(state.storage)
    trees = dispatch.set_leaves(state.trees, indices, priorities, capacity=capacity)
    return PrioritizedState(
        storage=state.storage,
        trees=trees,
        # Over every value given, overwritten ones too, as RLlib's sequential loop does.
        max_priority=jnp.maximum(state.max_priority, jnp.max(priorities)),
    )


def make_prioritized(capacity: int, alpha: float = 0.6, eps: float = 1e-6) -> ReplayBuffer:
    """A proportional prioritized replay buffer (RLlib's ``PrioritizedReplayBuffer``); where its
    steps run as XLA's program or the fused CPU kernels is ``dispatch``'s choice."""
    uniform_replay.check_capacity(capacity)
    check_priority_args(alpha, eps)

    def init_fn(example_item: PyTree) -> PrioritizedState:
        return init(example_item, capacity=capacity)

    def add_fn(state: PrioritizedState, items: PyTree, mask: Array | None = None) -> PrioritizedState:
        return add(state, items, mask)

    def sample_fn(
        state: PrioritizedState, key: Array, batch_size: int, beta: float | Array = 0.4
    ) -> Sample:
        return sample(state, key, batch_size=batch_size, beta=beta)

    def update_fn(state: PrioritizedState, indices: Array, td_errors: Array) -> PrioritizedState:
        return update(state, indices, td_errors, alpha=alpha, eps=eps)

    return ReplayBuffer(init=init_fn, add=add_fn, sample=sample_fn, update=update_fn)
