"""Sum/min trees against the numpy twin: exact parents, prefix-sum oracle, round-off at the top."""

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from jaxdqn.buffers import segment_tree
from tests.reference.sum_tree import check_valid, next_pow2, prefix_sum_index


@given(st.integers(1, 300))
def test_num_leaves_is_next_power_of_two(capacity):
    assert segment_tree.num_leaves(capacity) == next_pow2(capacity)
    assert segment_tree.init_sum(capacity).shape == (2 * next_pow2(capacity),)


@given(
    capacity=st.sampled_from([1, 2, 5, 16, 70]),  # few shapes: few compiles
    writes=st.lists(
        st.lists(st.tuples(st.integers(0, 69), st.floats(0.125, 100.0, width=32)), min_size=1, max_size=20),
        min_size=1,
        max_size=6,
    ),
)
def test_set_leaves_matches_sequential_writes(capacity, writes):
    sums, mins = segment_tree.init_sum(capacity), segment_tree.init_min(capacity)
    leaves = np.zeros(capacity, np.float32)
    set_fn = jax.jit(
        lambda s, m, i, v: segment_tree.set_leaves(s, m, i, segment_tree.last_write_wins(i, v))
    )
    for batch in writes:
        batch = batch + [batch[-1]] * (20 - len(batch))  # repeating the last write changes nothing
        slots = np.array([i % capacity for i, _ in batch], np.int32)
        values = np.array([v for _, v in batch], np.float32)
        for i, v in zip(slots, values):  # sequential: the last write of a slot wins
            leaves[i] = v
        sums, mins = set_fn(sums, mins, jnp.asarray(slots), jnp.asarray(values))
        check_valid(sums, mins, leaves)
    np.testing.assert_allclose(segment_tree.total(sums), leaves.sum(), rtol=1e-5)
    assert segment_tree.minimum(mins) == leaves[leaves > 0].min()


@given(st.lists(st.integers(0, 9), min_size=40, max_size=40), st.randoms(use_true_random=False))
def test_last_write_wins_equals_a_dict(slots, rng):
    values = np.array([rng.random() for _ in slots], np.float32)
    last = {}
    for s, v in zip(slots, values):
        last[s] = v
    got = np.asarray(segment_tree.last_write_wins(jnp.asarray(slots, jnp.int32), jnp.asarray(values)))
    np.testing.assert_array_equal(got, np.array([last[s] for s in slots], np.float32))


@given(
    priorities=st.lists(st.integers(0, 9), min_size=1, max_size=64).filter(lambda p: sum(p) > 0),
    data=st.data(),
)
def test_find_prefix_sum_matches_searchsorted(priorities, data, maybe_jit):
    # Integer priorities keep every partial sum exact in float32, so the oracle is unambiguous;
    # masses at +0.5 sit strictly inside an interval.
    p = np.zeros(64, np.float32)  # one shape for every example; the zero tail must never be drawn
    p[: len(priorities)] = priorities
    sums, mins = segment_tree.set_leaves(
        segment_tree.init_sum(len(p)), segment_tree.init_min(len(p)), jnp.arange(len(p)), jnp.asarray(p)
    )
    total = int(p.sum())
    mass = np.array(data.draw(st.lists(st.integers(0, total - 1), min_size=32, max_size=32)), np.float32) + 0.5
    got = np.asarray(maybe_jit(segment_tree.find_prefix_sum)(sums, jnp.asarray(mass)))
    np.testing.assert_array_equal(got, prefix_sum_index(p, mass))
    assert (p[got] > 0).all()
    # Exactly on a boundary, the right interval owns it (side="right"), skipping zero leaves.
    edges = np.cumsum(p)[:-1][p[1:] > 0].astype(np.float32)
    if len(edges):
        edges = np.resize(edges, 32)
        got = np.asarray(segment_tree.find_prefix_sum(sums, jnp.asarray(edges)))
        np.testing.assert_array_equal(got, prefix_sum_index(p, edges))


def test_mass_at_or_past_the_top_never_lands_on_an_empty_leaf():
    # 5 written leaves of 13 (P = 16): all masses >= total must still land on a written leaf.
    p = np.array([0.3, 0.1, 0.7, 0.2, 0.9], np.float32)
    sums, mins = segment_tree.set_leaves(
        segment_tree.init_sum(13), segment_tree.init_min(13), jnp.arange(5), jnp.asarray(p)
    )
    total = np.float32(segment_tree.total(sums))
    masses = jnp.asarray(
        [total, np.nextafter(total, np.float32(np.inf)), total * 1.001, np.nextafter(total, np.float32(0))],
        jnp.float32,
    )
    got = np.asarray(segment_tree.find_prefix_sum(sums, masses))
    assert (got < 5).all() and (p[got] > 0).all(), got
    assert (got == 4).all()


def test_float32_round_off_with_many_tiny_leaves():
    # Large and tiny priorities make sums inexact; every draw must still be a written leaf.
    capacity = 1000
    rng = np.random.default_rng(0)
    p = rng.choice(np.array([1e-6, 1e3], np.float32), size=700)
    sums, mins = segment_tree.set_leaves(
        segment_tree.init_sum(capacity), segment_tree.init_min(capacity), jnp.arange(700), jnp.asarray(p)
    )
    mass = jnp.linspace(0.0, 1.0, 10_001, dtype=jnp.float32) * segment_tree.total(sums)
    got = np.asarray(segment_tree.find_prefix_sum(sums, mass))
    assert got.max() < 700 and (p[got] > 0).all()
