"""Sum/min trees against the numpy twin: exact parents, prefix-sum oracle, round-off at the top."""

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from jaxdqn.buffers import dispatch, segment_tree
from tests.reference.sum_tree import check_valid, next_pow2, prefix_sum_index, reference_layout


def build(p: np.ndarray, capacity: int):
    trees = segment_tree.init(capacity)
    return segment_tree.set_leaves(
        trees, jnp.arange(len(p), dtype=jnp.int32), jnp.asarray(p, jnp.float32), capacity=capacity
    )


@given(st.integers(1, 5000))
def test_layout_fits_in_two_power_of_two_trees(capacity):
    assert [(lv.offset, lv.size) for lv in segment_tree.layout(capacity)] == reference_layout(capacity)
    # The memory bound of the issue: both trees together within 2 x 2P float32 (plus, for a
    # capacity under 16, the padding of two 16-wide levels).
    assert segment_tree.init(capacity).size <= 2 * 2 * next_pow2(capacity) + (64 if capacity < 16 else 0)


@given(
    capacity=st.sampled_from([1, 2, 16, 17, 70, 300]),  # few shapes: few compiles
    writes=st.lists(
        st.lists(st.tuples(st.integers(0, 299), st.floats(0.125, 100.0, width=32)), min_size=1, max_size=20),
        min_size=1,
        max_size=6,
    ),
)
def test_set_leaves_matches_sequential_writes(capacity, writes):
    trees = segment_tree.init(capacity)
    leaves = np.zeros(capacity, np.float32)

    @jax.jit
    def write(trees, slots, values):
        slots, values = segment_tree.last_write_wins(slots, values, capacity=capacity)
        return segment_tree.set_leaves(trees, slots, values, capacity=capacity)

    for batch in writes:
        batch = batch + [batch[-1]] * (20 - len(batch))  # repeating the last write changes nothing
        slots = np.array([i % capacity for i, _ in batch], np.int32)
        values = np.array([v for _, v in batch], np.float32)
        for i, v in zip(slots, values):  # sequential: the last write of a slot wins
            leaves[i] = v
        trees = write(trees, jnp.asarray(slots), jnp.asarray(values))
        check_valid(trees, leaves, capacity)
    np.testing.assert_allclose(segment_tree.total(trees), leaves.sum(), rtol=1e-5)
    assert segment_tree.minimum(trees) == leaves[leaves > 0].min()


@given(st.lists(st.integers(0, 9), min_size=40, max_size=40), st.randoms(use_true_random=False))
def test_last_write_wins_equals_a_dict(slots, rng):
    values = np.array([rng.random() for _ in slots], np.float32)
    last = {}
    for s, v in zip(slots, values):
        last[s] = v
    for capacity in (10, 2**30 - 1):  # packed int32 keys, and the two-array sort
        got_slots, got_values = segment_tree.last_write_wins(
            jnp.asarray(slots, jnp.int32), jnp.asarray(values), capacity=capacity
        )
        np.testing.assert_array_equal(got_slots, sorted(slots))
        np.testing.assert_array_equal(got_values, np.array([last[s] for s in sorted(slots)], np.float32))


def find_300(trees, mass):
    return segment_tree.find_prefix_sum(trees, mass, capacity=300)


@given(
    priorities=st.lists(st.integers(0, 9), min_size=1, max_size=300).filter(lambda p: sum(p) > 0),
    data=st.data(),
)
def test_find_prefix_sum_matches_searchsorted(priorities, data, maybe_jit):
    # Integer priorities keep every partial sum exact in float32, so the oracle is unambiguous;
    # masses at +0.5 sit strictly inside an interval.
    capacity = 300
    p = np.zeros(capacity, np.float32)  # one shape for every example; the zero tail is never drawn
    p[: len(priorities)] = priorities
    trees = build(p, capacity)
    find = maybe_jit(find_300)
    total = int(p.sum())
    mass = np.array(data.draw(st.lists(st.integers(0, total - 1), min_size=32, max_size=32)), np.float32) + 0.5
    got, value = find(trees, jnp.asarray(mass))
    got = np.asarray(got)
    np.testing.assert_array_equal(got, prefix_sum_index(p, mass))
    np.testing.assert_array_equal(value, p[got])
    assert (p[got] > 0).all()
    # Exactly on a boundary, the right interval owns it (side="right"), skipping zero leaves.
    edges = np.cumsum(p)[:-1][p[1:] > 0].astype(np.float32)
    if len(edges):
        edges = np.resize(edges, 32)
        got = np.asarray(find(trees, jnp.asarray(edges))[0])
        np.testing.assert_array_equal(got, prefix_sum_index(p, edges))


def test_mass_at_or_past_the_top_never_lands_on_an_empty_leaf():
    # 5 written leaves of 40: every mass >= total must still land on a written leaf (the last).
    p = np.array([0.3, 0.1, 0.7, 0.2, 0.9], np.float32)
    trees = build(p, 40)
    total = np.float32(segment_tree.total(trees))
    masses = jnp.asarray(
        [total, np.nextafter(total, np.float32(np.inf)), total * 1.001, 1e9], jnp.float32
    )
    got, value = segment_tree.find_prefix_sum(trees, masses, capacity=40)
    np.testing.assert_array_equal(got, [4, 4, 4, 4])
    np.testing.assert_array_equal(value, np.full(4, 0.9, np.float32))


def test_float32_round_off_with_many_tiny_leaves():
    # Large and tiny priorities make the sums inexact; every draw must still be a written leaf.
    capacity = 1000
    rng = np.random.default_rng(0)
    p = rng.choice(np.array([1e-6, 1e3], np.float32), size=700)
    p[rng.random(700) < 0.2] = 0.0  # and some zero leaves among them
    trees = build(p, capacity)
    mass = jnp.linspace(0.0, 1.0, 10_001, dtype=jnp.float32) * segment_tree.total(trees)
    got, value = segment_tree.find_prefix_sum(trees, mass, capacity=capacity)
    got = np.asarray(got)
    assert got.max() < 700 and (p[got] > 0).all()
    np.testing.assert_array_equal(value, p[got])


def test_fence_returns_its_values():
    idx, w = jnp.array([3, 0, 7], jnp.int32), jnp.array([0.5, -1.0, jnp.nan])
    out = jax.jit(dispatch.fence)((idx, w))
    np.testing.assert_array_equal(out[0], idx)
    np.testing.assert_array_equal(out[1], w)
    out = jax.vmap(dispatch.fence)((jnp.stack([idx, idx + 1]), jnp.stack([w, w])))
    np.testing.assert_array_equal(out[0], jnp.stack([idx, idx + 1]))
