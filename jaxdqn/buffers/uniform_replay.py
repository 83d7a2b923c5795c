"""Uniform experience replay: a FIFO ring of items, sampled uniformly with replacement.

An item is any pytree of arrays (a ``Transition``, a ``SequenceItem``, a dict); the ring stores
each leaf with a leading ``[N]`` axis. ``add`` writes ``K`` items (leaves ``[K, ...]``) at the
insert position, wrapping around and overwriting the oldest; ``sample`` draws ``B`` slots
uniformly among the valid ones.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxdqn.buffers import dispatch
from jaxdqn.types import PyTree, ReplayBuffer, Sample, UniformState

Array = jax.Array


def check_capacity(capacity: int) -> int:
    """Refuse a capacity that is not a positive int."""
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity <= 0:
        raise ValueError(f"capacity must be a positive int (items the buffer holds), got {capacity!r}")
    if capacity >= 2**30:
        raise ValueError(f"capacity must be < 2**30 (int32 slot indices and trees), got {capacity!r}")
    return capacity


def check_batch_size(batch_size: int) -> int:
    """Refuse a batch size that is not an int >= 1. Any size is fine otherwise, also one above
    the capacity or the items held: draws are with replacement (as RLlib's and flashbax's)."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int):
        raise TypeError(
            f"batch_size must be a Python int (it is a shape, so it is static), got {batch_size!r}"
        )
    if batch_size < 1:
        raise ValueError(f"batch_size must be an int >= 1, got {batch_size}")
    return batch_size


def check_not_empty(size: Array) -> None:
    """Refuse sampling from a buffer that holds nothing, where that is known outside a trace (a
    traced ``size`` cannot be checked: under ``jit`` an empty buffer's draws are slot 0's zeros)."""
    if not isinstance(size, jax.core.Tracer) and int(size) == 0:
        raise ValueError("cannot sample from an empty buffer: add at least one item first")


def capacity_of(state: UniformState) -> int:
    """The static capacity ``N`` of a ring."""
    return jax.tree_util.tree_leaves(state.storage)[0].shape[0]


def init(example_item: PyTree, *, capacity: int) -> UniformState:
    """An empty ring for items shaped like ``example_item`` (leaves without a leading axis)."""
    check_capacity(capacity)
    leaves = jax.tree_util.tree_leaves(example_item)
    if not leaves:
        raise ValueError("example_item must have at least one array leaf")
    storage = jax.tree_util.tree_map(
        lambda x: jnp.zeros((capacity,) + jnp.shape(x), jnp.asarray(x).dtype), example_item
    )
    # Three distinct buffers: one array shared by several leaves cannot be donated.
    insert_pos, size_, num_added = (jnp.zeros((), jnp.int32) for _ in range(3))
    return UniformState(storage=storage, insert_pos=insert_pos, size=size_, num_added=num_added)


def check_items(storage: PyTree, items: PyTree) -> int:
    """Check that ``items`` (leaves ``[K, ...]``) fit ``storage`` (leaves ``[N, ...]``); return K.

    Raises ``TypeError`` for another structure or dtype and ``ValueError`` for another item shape,
    a ragged ``K`` or ``K`` outside ``[1, N]``, naming the offending leaf.
    """
    store_def = jax.tree_util.tree_structure(storage)
    items_def = jax.tree_util.tree_structure(items)
    if store_def != items_def:
        raise TypeError(f"items must have the buffer's item structure {store_def}, got {items_def}")
    capacity = jax.tree_util.tree_leaves(storage)[0].shape[0]
    ks = set()
    for (path, slot), item in zip(
        jax.tree_util.tree_flatten_with_path(storage)[0], jax.tree_util.tree_leaves(items)
    ):
        name = jax.tree_util.keystr(path) or "item"
        item_dtype = jnp.result_type(item)
        if item_dtype != slot.dtype:
            raise TypeError(f"items{name} has dtype {item_dtype}, the buffer stores {slot.dtype}")
        shape = jnp.shape(item)
        if len(shape) != slot.ndim or shape[1:] != slot.shape[1:]:
            raise ValueError(
                f"items{name} must have shape [K, {', '.join(map(str, slot.shape[1:]))}] "
                f"(a leading batch axis K), got {list(shape)}"
            )
        ks.add(shape[0])
    if len(ks) != 1:
        raise ValueError(f"every leaf of items must have the same leading size K, got {sorted(ks)}")
    (k,) = ks
    if not 1 <= k <= capacity:
        raise ValueError(f"items must hold K in [1, capacity={capacity}] items, got K={k}")
    return k


def write_slots(state: UniformState, k: int) -> Array:
    """The ``[k]`` slots the next ``add`` of ``k`` items writes (FIFO, wrapping)."""
    capacity = capacity_of(state)
    return (state.insert_pos + jnp.arange(k, dtype=jnp.int32)) % capacity


def masked_slots(state: UniformState, mask: Array) -> tuple[Array, Array]:
    """``(slots [K], count [])`` of an ``add`` that keeps only the items where ``mask`` ``[K]``:
    the kept ones take the next slots in order; the others get distinct slots past the end
    (``N + i``), which a ``mode="drop"`` write leaves out."""
    capacity = capacity_of(state)
    mask = mask.astype(bool)
    offset = jnp.cumsum(mask.astype(jnp.int32)) - 1
    k = mask.shape[0]
    slots = jnp.where(mask, (state.insert_pos + offset) % capacity, capacity + jnp.arange(k, dtype=jnp.int32))
    return slots.astype(jnp.int32), jnp.sum(mask, dtype=jnp.int32)


def add(state: UniformState, items: PyTree, mask: Array | None = None) -> UniformState:
    """Write ``K`` items (leaves ``[K, ...]``), overwriting the oldest once the ring is full.

    ``mask`` ``[K]`` bool (optional) keeps only the items where it is True, in order (a
    multi-agent step whose agent had already finished, say); shapes stay static."""
    k = check_items(state.storage, items)
    capacity = capacity_of(state)
    if mask is None:
        slots, count = write_slots(state, k), k
    else:
        if mask.shape != (k,):
            raise ValueError(f"mask must have shape [K] = [{k}], got {list(mask.shape)}")
        slots, count = masked_slots(state, mask)
    # K <= N, so the slots are distinct (the masked-out ones too: past the end, dropped): the
    # hint lets XLA emit a plain in-place row write.
    storage = jax.tree_util.tree_map(
        lambda s, x: s.at[slots].set(x, unique_indices=True, mode="drop"), state.storage, items
    )
    return UniformState(
        storage=storage,
        insert_pos=(state.insert_pos + count) % capacity,
        size=jnp.minimum(state.size + count, capacity),
        num_added=state.num_added + count,
    )


def draw_indices(key: Array, batch_size: int, size: Array) -> Array:
    """``batch_size`` slots drawn uniformly from ``[0, size)``: one word each, modulo ``size``
    (one generator call; bias below ``size / 2**32``, 0.03% at a million items)."""
    bits = jax.random.bits(key, (batch_size,), jnp.uint32)
    return (bits % jnp.maximum(size, 1).astype(jnp.uint32)).astype(jnp.int32)


def sample(state: UniformState, key: Array, *, batch_size: int) -> Sample:
    """``batch_size`` items drawn uniformly, with replacement, from the valid slots.

    Precondition: the ring holds at least one item (``size >= 1``), which the execution plan
    guarantees (every replay follows a store); an empty ring is refused outside ``jit``, and
    inside it slot 0 (zeros) comes back.
    """
    check_batch_size(batch_size)
    check_not_empty(state.size)
    indices = draw_indices(key, batch_size, state.size)
    return Sample(
        items=dispatch.gather(state.storage, indices),
        indices=indices,
        weights=jnp.ones((batch_size,), jnp.float32),
    )


def make_uniform(capacity: int) -> ReplayBuffer:
    """A uniform replay buffer of ``capacity`` items (RLlib's ``ReplayBuffer``)."""
    check_capacity(capacity)

    def init_fn(example_item: PyTree) -> UniformState:
        return init(example_item, capacity=capacity)

    def sample_fn(state: UniformState, key: Array, batch_size: int, beta: float = 0.0) -> Sample:
        del beta  # uniform replay has no importance weights to anneal
        return sample(state, key, batch_size=batch_size)

    def update_fn(state: UniformState, indices: Array, td_errors: Array) -> UniformState:
        del indices, td_errors
        return state

    return ReplayBuffer(init=init_fn, add=add, sample=sample_fn, update=update_fn)
