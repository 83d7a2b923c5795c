"""Uniform replay against the numpy ring twin, over random operation sequences."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from jaxdqn import buffers
from jaxdqn.types import Transition
from tests.reference.ring import NumpyRing

CAPACITIES = [1, 7, 16, 50]


def chi2_critical(df: int, z: float = 4.0) -> float:
    """Wilson-Hilferty approximation of the chi-square quantile at a normal z-score."""
    h = 2.0 / (9.0 * df)
    return df * (1.0 - h + z * np.sqrt(h)) ** 3


def chi2_statistic(counts: np.ndarray, probs: np.ndarray) -> float:
    expected = counts.sum() * probs
    keep = expected > 0
    assert counts[~keep].sum() == 0, "drew an item of zero probability"
    return float(((counts[keep] - expected[keep]) ** 2 / expected[keep]).sum())


@functools.lru_cache(maxsize=None)
def jitted(capacity: int):
    buf = buffers.uniform(capacity)
    return buf, jax.jit(buf.add), jax.jit(buf.sample, static_argnums=2)


def id_items(start: int, k: int) -> dict:
    ids = np.arange(start, start + k)
    return {"id": jnp.asarray(ids, jnp.int32), "vec": jnp.asarray(np.stack([ids, -ids], 1), jnp.float32)}


@given(
    capacity=st.sampled_from(CAPACITIES),
    ops=st.lists(st.tuples(st.sampled_from(["add", "sample"]), st.sampled_from([1, 3, 7])), min_size=1, max_size=15),
    seed=st.integers(0, 2**16),
)
def test_random_operations_match_the_numpy_ring(capacity, ops, seed):
    buf, add, sample = jitted(capacity)
    state = buf.init({"id": jnp.zeros((), jnp.int32), "vec": jnp.zeros(2, jnp.float32)})
    ring = NumpyRing(capacity, dtype=np.int32)
    key = jax.random.key(seed)
    next_id = 1
    for op, k in ops:
        k = min(k, capacity)
        if op == "add" or ring.size == 0:
            state = add(state, id_items(next_id, k))
            ring.add(np.arange(next_id, next_id + k))
            next_id += k
            np.testing.assert_array_equal(state.storage["id"], ring.data)
            np.testing.assert_array_equal(state.storage["vec"][:, 1], -ring.data)
            assert int(state.insert_pos) == ring.insert_pos
            assert int(buffers.size(state)) == ring.size
            assert int(state.num_added) == ring.num_added
        else:
            key, sample_key = jax.random.split(key)
            s = sample(state, sample_key, k)
            idx = np.asarray(s.indices)
            assert idx.dtype == np.int32 and idx.shape == (k,)
            assert set(idx.tolist()) <= ring.valid_slots()
            np.testing.assert_array_equal(s.items["id"], ring.data[idx])
            np.testing.assert_array_equal(s.weights, np.ones(k, np.float32))


def test_sampling_is_uniform_over_valid_slots_only():
    capacity, filled = 50, 30
    buf = buffers.uniform(capacity)
    state = buf.add(buf.init(jnp.zeros((), jnp.int32)), jnp.arange(filled, dtype=jnp.int32))
    keys = jax.random.split(jax.random.key(0), 400)
    draws = jax.vmap(lambda k: buf.sample(state, k, 50).indices)(keys).ravel()  # 20k draws
    counts = np.bincount(np.asarray(draws), minlength=capacity)
    probs = np.r_[np.full(filled, 1.0 / filled), np.zeros(capacity - filled)]
    assert chi2_statistic(counts, probs) < chi2_critical(filled - 1)


def test_wrap_around_overwrites_the_oldest_and_update_is_a_no_op():
    buf = buffers.uniform(5)
    item = Transition(
        obs=jnp.zeros(4), action=jnp.zeros((), jnp.int32), reward=jnp.zeros(()),
        discount=jnp.ones(()), next_obs=jnp.zeros(4),
    )
    state = buf.init(item)
    for start in (0, 3, 6):  # 9 items into 5 slots: the last five (4..8) survive
        batch = jax.tree_util.tree_map(lambda x: jnp.stack([x] * 3), item)._replace(
            reward=jnp.arange(start, start + 3, dtype=jnp.float32)
        )
        state = buf.add(state, batch)
    np.testing.assert_array_equal(state.storage.reward, [5.0, 6.0, 7.0, 8.0, 4.0])
    assert int(state.insert_pos) == 4 and int(state.size) == 5 and int(state.num_added) == 9
    s = buf.sample(state, jax.random.key(1), 4)
    same = buf.update(state, s.indices, jnp.ones(4))
    assert same is state
