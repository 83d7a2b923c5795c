"""Prioritized replay against the numpy twin: trees, draw frequencies, weights, duplicates."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from jaxdqn import buffers
from jaxdqn.buffers import dispatch, prioritized_replay, segment_tree
from tests.reference.ring import NumpyRing
from tests.reference.sum_tree import LEAF_ULPS, NumpyPrioritized, check_valid
from tests.test_uniform_replay import chi2_critical, chi2_statistic

ALPHA, EPS = 0.6, 1e-6


@functools.lru_cache(maxsize=None)
def jitted(capacity: int, alpha: float = ALPHA):
    buf = buffers.prioritized(capacity, alpha=alpha, eps=EPS)
    return (
        buf,
        jax.jit(buf.add),
        jax.jit(buf.sample, static_argnums=2),
        jax.jit(buf.update),
    )


@given(
    capacity=st.sampled_from([1, 6, 16, 33]),
    ops=st.lists(
        st.tuples(st.sampled_from(["add", "sample_update"]), st.sampled_from([1, 4, 6])),
        min_size=1,
        max_size=12,
    ),
    seed=st.integers(0, 2**16),
)
def test_random_operations_match_the_numpy_twin(capacity, ops, seed):
    buf, add, sample, update = jitted(capacity)
    state = buf.init(jnp.zeros((), jnp.int32))
    ref = NumpyPrioritized(capacity, ALPHA, EPS, dtype=np.int32)
    rng = np.random.default_rng(seed)
    key = jax.random.key(seed)
    next_id = 1
    for op, k in ops:
        k = min(k, capacity)
        if op == "add" or ref.ring.size == 0:
            state = add(state, jnp.arange(next_id, next_id + k, dtype=jnp.int32))
            ref.add(np.arange(next_id, next_id + k))
            next_id += k
        else:
            key, sample_key = jax.random.split(key)
            s = sample(state, sample_key, k, 0.5)
            idx = np.asarray(s.indices)
            assert set(idx.tolist()) <= ref.ring.valid_slots()
            np.testing.assert_array_equal(s.items, ref.ring.data[idx])
            np.testing.assert_allclose(s.weights, ref.weights(idx, 0.5), rtol=1e-5)
            td = rng.normal(size=k).astype(np.float32) * 3
            state = update(state, s.indices, jnp.asarray(td))
            ref.update(idx, td)
        np.testing.assert_array_equal(state.storage.storage, ref.ring.data)
        check_valid(state.trees, ref.priorities, capacity)
        np.testing.assert_array_max_ulp(np.float32(state.max_priority), np.float32(ref.max_priority), LEAF_ULPS)
        assert int(buffers.size(state)) == ref.ring.size


def draw_counts(state, buf, capacity, draws=20_000, batch=None):
    batch = batch or capacity
    keys = jax.random.split(jax.random.key(42), draws // batch)
    idx = jax.vmap(lambda k: buf.sample(state, k, batch).indices)(keys).ravel()
    return np.bincount(np.asarray(idx), minlength=capacity)


def test_draw_frequencies_match_priorities_and_unwritten_slots_are_never_drawn():
    capacity, filled = 40, 25  # 15 unwritten slots and 24 padding leaves (P = 64)
    buf, add, _, update = jitted(capacity)
    state = add(buf.init(jnp.zeros((), jnp.int32)), jnp.arange(filled, dtype=jnp.int32))
    ref = NumpyPrioritized(capacity, ALPHA, EPS, dtype=np.int32)
    ref.add(np.arange(filled))
    td = np.linspace(0.0, 5.0, filled).astype(np.float32) ** 2  # a wide spread of priorities
    state = update(state, jnp.arange(filled, dtype=jnp.int32), jnp.asarray(td))
    ref.update(np.arange(filled), td)
    counts = draw_counts(state, buf, capacity)
    assert counts[filled:].sum() == 0
    assert chi2_statistic(counts, ref.probabilities()) < chi2_critical(filled - 1)


def test_batches_larger_than_the_buffer_follow_the_priorities():
    """A batch of 5x the capacity (with replacement) draws by the same distribution."""
    capacity, filled = 8, 6
    buf, add, _, update = jitted(capacity)
    state = add(buf.init(jnp.zeros((), jnp.int32)), jnp.arange(filled, dtype=jnp.int32))
    ref = NumpyPrioritized(capacity, ALPHA, EPS, dtype=np.int32)
    ref.add(np.arange(filled))
    td = np.array([0.1, 1.0, 2.0, 0.5, 3.0, 0.2], np.float32)
    state = update(state, jnp.arange(filled, dtype=jnp.int32), jnp.asarray(td))
    ref.update(np.arange(filled), td)
    counts = draw_counts(state, buf, capacity, batch=5 * capacity)
    assert counts[filled:].sum() == 0
    assert chi2_statistic(counts, ref.probabilities()) < chi2_critical(filled - 1)


def test_weights_follow_the_formula_and_the_least_likely_item_gets_one():
    capacity = 8
    buf, add, sample, update = jitted(capacity)
    state = add(buf.init(jnp.zeros((), jnp.int32)), jnp.arange(capacity, dtype=jnp.int32))
    td = np.array([0.5, 2.0, 0.1, 4.0, 1.0, 0.3, 3.0, 0.05], np.float32)
    state = update(state, jnp.arange(capacity, dtype=jnp.int32), jnp.asarray(td))
    p = (np.abs(td) + EPS) ** ALPHA
    for beta in (0.0, 0.4, 1.0):
        s = sample(state, jax.random.key(3), capacity, beta)
        expected = (p[np.asarray(s.indices)] / p.min()) ** -beta
        np.testing.assert_allclose(s.weights, expected, rtol=1e-5)
        assert (np.asarray(s.weights) <= 1.0).all()
    # Weights at the least likely slot are exactly 1: draw until slot 7 (smallest td) appears.
    keys = jax.random.split(jax.random.key(5), 300)
    s = jax.vmap(lambda k: sample(state, k, capacity, 0.7))(keys)
    at_min = np.asarray(s.indices) == 7
    assert at_min.any()
    np.testing.assert_array_equal(np.asarray(s.weights)[at_min], 1.0)


def test_new_items_enter_at_the_max_priority_seen():
    buf, add, _, update = jitted(4)
    state = add(buf.init(jnp.zeros((), jnp.int32)), jnp.arange(2, dtype=jnp.int32))
    state = update(state, jnp.array([0, 1], jnp.int32), jnp.array([9.0, 0.5]))
    state = update(state, jnp.array([0], jnp.int32), jnp.array([0.1]))  # the max is remembered
    state = add(state, jnp.array([7], jnp.int32))
    leaves = np.asarray(segment_tree.leaf_values(state.trees, capacity=4)[0])
    np.testing.assert_allclose(leaves[2], (9.0 + EPS) ** ALPHA, rtol=1e-6)
    assert leaves[3] == 0.0


@given(st.lists(st.integers(0, 5), min_size=16, max_size=16), st.integers(0, 2**16))
def test_duplicate_indices_take_the_last_value_deterministically(indices, seed):
    buf, add, _, update = jitted(6)
    state = add(buf.init(jnp.zeros((), jnp.int32)), jnp.arange(6, dtype=jnp.int32))
    td = np.random.default_rng(seed).uniform(0, 3, size=16).astype(np.float32)
    ref = NumpyPrioritized(6, ALPHA, EPS, dtype=np.int32)
    ref.add(np.arange(6))
    ref.update(indices, td)
    new = update(state, jnp.asarray(indices, jnp.int32), jnp.asarray(td))
    check_valid(new.trees, ref.priorities, 6)
    again = update(state, jnp.asarray(indices, jnp.int32), jnp.asarray(td))
    np.testing.assert_array_equal(new.trees, again.trees)


def test_alpha_zero_is_uniform_replay():
    capacity = 16
    buf, add, _, update = jitted(capacity, alpha=0.0)
    state = add(buf.init(jnp.zeros((), jnp.int32)), jnp.arange(capacity, dtype=jnp.int32))
    state = update(state, jnp.arange(capacity, dtype=jnp.int32), jnp.linspace(0, 10, capacity))
    counts = draw_counts(state, buf, capacity)
    assert chi2_statistic(counts, np.full(capacity, 1.0 / capacity)) < chi2_critical(capacity - 1)


def test_module_functions_equal_the_factory():
    state = prioritized_replay.init(jnp.zeros(2), capacity=5)
    state = prioritized_replay.add(state, jnp.ones((3, 2)))
    s = prioritized_replay.sample(state, jax.random.key(0), batch_size=4, beta=0.4)
    state = prioritized_replay.update(state, s.indices, jnp.ones(4), alpha=0.5, eps=0.1)
    buf = buffers.prioritized(5, alpha=0.5, eps=0.1)
    other = buf.add(buf.init(jnp.zeros(2)), jnp.ones((3, 2)))
    other = buf.update(other, buf.sample(other, jax.random.key(0), 4, beta=0.4).indices, jnp.ones(4))
    np.testing.assert_array_equal(state.trees, other.trees)


jitted_draw = jax.jit(dispatch.draw_with_xla, static_argnames=("capacity", "on_cpu"))


@given(
    capacity=st.sampled_from([1, 16, 17, 300]),
    filled=st.sampled_from([1, 5, 16, 17, 300]),  # a few sizes: each new shape compiles again
    seed=st.integers(0, 2**16),
)
def test_the_accelerator_form_of_the_descent_draws_what_the_cpu_form_draws(capacity, filled, seed):
    """``sample`` compiles the descent rolled and fenced on the CPU, unrolled on other platforms
    (``dispatch.draw_with_xla``): both must give the same indices and weights, bit for bit,
    on any priorities (some zero: those leaves must never be drawn by either)."""
    filled = min(filled, capacity)
    rng = np.random.default_rng(seed)
    priorities = rng.exponential(size=filled).astype(np.float32) * (rng.random(filled) < 0.8)
    priorities[rng.integers(filled)] = 1.0  # a positive root
    trees = segment_tree.set_leaves(segment_tree.init(capacity), jnp.arange(filled), jnp.asarray(priorities),
                                    capacity=capacity)
    mass = jnp.asarray(rng.random(64), jnp.float32) * segment_tree.total(trees)
    mass = mass.at[0].set(segment_tree.total(trees))  # round-off at the very top of the tree
    beta = jnp.float32(0.4)
    forms = [jitted_draw(trees, mass, beta, capacity=capacity, on_cpu=on_cpu) for on_cpu in (True, False)]
    np.testing.assert_array_equal(forms[0][0], forms[1][0])
    np.testing.assert_array_equal(forms[0][1], forms[1][1])
    assert np.all(priorities[np.asarray(forms[1][0])] > 0)


@given(capacity=st.sampled_from([1, 5, 16]), masks=st.lists(st.lists(st.booleans(), min_size=1, max_size=5),
                                                             min_size=1, max_size=8))
def test_a_masked_add_stores_only_the_kept_items_in_order(capacity, masks):
    """``add(state, items, mask)``: the numpy ring twin adds only the kept items; the trees give
    them the max priority and leave every other leaf as it was (checked against numpy)."""
    for factory in (buffers.uniform, buffers.prioritized):
        buf = factory(capacity)
        add = jax.jit(buf.add)
        state = buf.init(jnp.zeros((), jnp.int32))
        ring = NumpyRing(capacity, dtype=np.int32)
        ref = NumpyPrioritized(capacity, ALPHA, EPS, dtype=np.int32) if factory is buffers.prioritized else None
        next_id = 1
        for mask in masks:
            mask = [m for m in mask][:capacity] or [True]
            ids = np.arange(next_id, next_id + len(mask), dtype=np.int32)
            next_id += len(mask)
            state = add(state, jnp.asarray(ids), jnp.asarray(mask))
            kept = ids[np.asarray(mask)]
            ring.add(kept)
            if ref is not None and kept.size:
                ref.add(kept)
        storage = state if factory is buffers.uniform else state.storage
        np.testing.assert_array_equal(np.asarray(storage.storage)[:ring.size], ring.data[:ring.size])
        assert (int(storage.size), int(storage.insert_pos), int(storage.num_added)) == (
            ring.size, ring.insert_pos, ring.num_added)
        if ref is not None:
            check_valid(state.trees, ref.priorities, capacity)
