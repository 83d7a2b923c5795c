"""Memory: the state is the items plus two trees, and adding does not copy the storage."""

import jax
import jax.numpy as jnp
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


def step_items(step):
    """10 transitions that depend on the step (nothing constant-folds)."""
    base = (step * 10 + jnp.arange(10)).astype(jnp.float32)
    obs = jnp.stack([base, base + 1, base + 2, base + 3], 1) * 1e-3
    return Transition(obs=obs, action=(step + jnp.arange(10, dtype=jnp.int32)) % 2,
                      reward=jnp.ones((10,)), discount=jnp.ones((10,)), next_obs=obs + 1e-3)


@pytest.mark.parametrize("capacity", [10_000, 100_000])
@pytest.mark.parametrize("kind", ["uniform", "prioritized"])
def test_a_scan_of_add_sample_update_needs_no_copy_of_the_state(kind, capacity):
    buf = getattr(buffers, kind)(capacity)

    def loop(state, key):
        def body(state, xs):
            step, key = xs
            state = buf.add(state, step_items(step))
            s = buf.sample(state, key, 128, 0.4)
            td = s.items.obs[:, 0] * s.weights - 0.5  # like a learner: uses items and weights
            # The batch is also used outside the update (a metric), which must not force a copy
            # (without ``dispatch.fence`` it did: one copy of the trees per step).
            return buf.update(state, s.indices, td), s.items.reward.sum()

        return lax.scan(body, state, (jnp.arange(100, dtype=jnp.int32), jax.random.split(key, 100)))

    state = buf.init(cartpole_item())
    compiled = jax.jit(loop, donate_argnums=0).lower(state, jax.random.key(0)).compile()
    stats = compiled.memory_analysis()
    if stats is None:
        pytest.skip("this backend reports no memory analysis")
    # A copy of the storage or the trees would need one of them in temporaries.
    smallest_big_array = min(x.nbytes for x in jax.tree_util.tree_leaves(state) if x.size >= capacity)
    assert stats.temp_size_in_bytes < smallest_big_array, stats.temp_size_in_bytes
