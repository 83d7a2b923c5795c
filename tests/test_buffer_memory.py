"""Memory: the state is the items plus two trees, and adding does not copy the storage."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jaxdqn import buffers
from jaxdqn.types import Transition

CAPACITY = 100_000


def cartpole_item():
    obs = jnp.zeros(4, jnp.float32)
    return Transition(obs=obs, action=jnp.zeros((), jnp.int32), reward=jnp.zeros(()),
                      discount=jnp.ones(()), next_obs=obs)


def nbytes(tree) -> int:
    return sum(x.size * x.dtype.itemsize for x in jax.tree_util.tree_leaves(tree))


@pytest.mark.parametrize("kind", ["uniform", "prioritized"])
def test_state_bytes_are_items_plus_two_trees(kind):
    buf = getattr(buffers, kind)(CAPACITY)
    state = buf.init(cartpole_item())
    item_bytes = nbytes(cartpole_item())  # 4 + 4 + 4 + 4*4 * 2 = 44
    trees = 2 * (2 * 131072) * 4 if kind == "prioritized" else 0  # two [2P] float32, P = 2**17
    assert item_bytes == 44
    assert nbytes(state) <= item_bytes * CAPACITY + trees + 64


@pytest.mark.parametrize("kind", ["uniform", "prioritized"])
def test_donated_add_updates_the_storage_in_place(kind):
    buf = getattr(buffers, kind)(CAPACITY)
    state = buf.init(cartpole_item())
    storage = state.storage if kind == "uniform" else state.storage.storage
    before = storage.obs.unsafe_buffer_pointer()
    items = jax.tree_util.tree_map(lambda x: jnp.stack([x] * 10), cartpole_item())
    add = jax.jit(buf.add, donate_argnums=0)
    new = add(state, items)
    new_storage = new.storage if kind == "uniform" else new.storage.storage
    assert storage.obs.is_deleted()
    assert new_storage.obs.unsafe_buffer_pointer() == before


@pytest.mark.parametrize("kind", ["uniform", "prioritized"])
def test_a_scan_of_add_sample_update_needs_no_copy_of_the_state(kind):
    buf = getattr(buffers, kind)(CAPACITY)
    items = jax.tree_util.tree_map(lambda x: jnp.stack([x] * 10), cartpole_item())

    def loop(state, key):
        def body(state, key):
            state = buf.add(state, items)
            s = buf.sample(state, key, 128, 0.4)
            return buf.update(state, s.indices, s.items.reward + 1.0), s.weights.sum()

        return lax.scan(body, state, jax.random.split(key, 100))

    state = buf.init(cartpole_item())
    compiled = jax.jit(loop, donate_argnums=0).lower(state, jax.random.key(0)).compile()
    stats = compiled.memory_analysis()
    if stats is None:
        pytest.skip("this backend reports no memory analysis")
    # A copy of the storage or a tree would need at least one of them in temporaries.
    smallest_big_array = min(x.size * x.dtype.itemsize for x in jax.tree_util.tree_leaves(state) if x.size >= CAPACITY)
    assert stats.temp_size_in_bytes < smallest_big_array, stats
    assert nbytes(state) - 64 <= stats.alias_size_in_bytes or stats.output_size_in_bytes >= nbytes(state)
