"""The fused CPU kernels of the sum/min tree give bitwise what ``segment_tree``'s XLA program gives."""

import functools
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax

from jaxdqn import buffers
from jaxdqn.buffers import segment_tree, tree_kernels
from tests.reference.sum_tree import check_valid

CAPACITIES = [1, 15, 16, 17, 300, 4097, 70_000]
# Batch sizes from a few values (one batch, a few, one past a power of two, many): each distinct
# (capacity, size) is a program to compile, and the programs are jitted once per module.
SIZES = [1, 3, 33, 200]


def test_the_kernels_are_built_where_a_compiler_is():
    """Installing with a C++ compiler present builds them (else the suite would test nothing here).
    CI's second install (``CC=false CXX=false``, ``JAXDQN_EXPECT_NO_KERNELS=1``) checks the other
    path: the install succeeds without them and says so."""
    if os.environ.get("JAXDQN_EXPECT_NO_KERNELS") == "1":
        assert not tree_kernels.available()
        assert tree_kernels.status().startswith("not built")
        return
    if shutil.which("c++") is None and shutil.which("g++") is None:
        pytest.skip("no C++ compiler on this machine: the buffers use XLA's program")
    assert tree_kernels.available()
    assert tree_kernels.library_path().endswith("libjaxdqn_kernels.so")  # a plain library, no ABI tag


def test_the_switch_chooses_the_program_and_refuses_bad_values(monkeypatch):
    monkeypatch.setenv(tree_kernels.SWITCH, "0")
    assert not tree_kernels.enabled()
    assert "switched off" in tree_kernels.status() or not tree_kernels.available()
    monkeypatch.setenv(tree_kernels.SWITCH, "1")
    assert tree_kernels.enabled() == tree_kernels.available()
    monkeypatch.setenv(tree_kernels.SWITCH, "maybe")
    with pytest.raises(ValueError, match="JAXDQN_CPU_KERNELS='maybe' is invalid: use 1"):
        tree_kernels.enabled()


@pytest.fixture
def kernels(monkeypatch):
    """``kernels(on)``: the switch for what is traced next."""
    return lambda on: monkeypatch.setenv(tree_kernels.SWITCH, "1" if on else "0")


needs_kernels = pytest.mark.skipif(not tree_kernels.available(), reason="fused tree kernels not built")


def xla_set(trees, slots, values, *, capacity):
    slots, values = segment_tree.last_write_wins(slots, values, capacity=capacity)
    return segment_tree.set_leaves(trees, slots, values, capacity=capacity)


jitted_xla_set = jax.jit(xla_set, static_argnames="capacity")
jitted_set_leaves = jax.jit(tree_kernels.set_leaves, static_argnames="capacity")
jitted_find_prefix_sum = jax.jit(segment_tree.find_prefix_sum, static_argnames=("capacity", "unroll"))
jitted_draw = jax.jit(tree_kernels.draw, static_argnames="capacity")


def random_trees(rng, capacity, writes, zeros=True):
    """Trees after ``writes`` random leaf writes (slots repeating, some values zero unless not
    ``zeros``), by XLA's program."""
    slots = rng.integers(0, capacity, writes).astype(np.int32)
    values = rng.exponential(size=writes).astype(np.float32)
    if zeros:
        values *= rng.random(writes) < 0.8
    return jitted_xla_set(segment_tree.init(capacity), slots, values, capacity=capacity)


@needs_kernels
@settings(max_examples=40, deadline=None)
@given(capacity=st.sampled_from(CAPACITIES), k=st.sampled_from(SIZES), seed=st.integers(0, 2**16))
def test_set_leaves_equals_the_xla_program_bit_for_bit(capacity, k, seed):
    rng = np.random.default_rng(seed)
    trees = random_trees(rng, capacity, 50, zeros=False)  # check_valid: written leaves > 0
    slots = rng.integers(0, capacity, k).astype(np.int32)  # repeats: the last value must win
    values = (rng.exponential(size=k) * 10.0 ** rng.integers(-6, 6)).astype(np.float32) + np.float32(1e-30)
    expected = jitted_xla_set(trees, slots, values, capacity=capacity)
    got = jitted_set_leaves(trees, slots, values, capacity=capacity)
    np.testing.assert_array_equal(got, expected)
    leaves = np.array(segment_tree.leaf_values(trees, capacity=capacity)[0])
    for slot, value in zip(slots, values):  # the sequential loop the batched write stands for
        leaves[slot] = value
    check_valid(np.asarray(got), leaves, capacity)


@needs_kernels
@settings(max_examples=40, deadline=None)
@given(capacity=st.sampled_from(CAPACITIES), b=st.sampled_from(SIZES), seed=st.integers(0, 2**16))
def test_draw_equals_the_xla_descent_bit_for_bit(capacity, b, seed):
    rng = np.random.default_rng(seed)
    trees = random_trees(rng, capacity, max(1, capacity // 2))
    trees = jitted_xla_set(trees, np.int32([0]), np.float32([1.0]), capacity=capacity)
    total = segment_tree.total(trees)
    mass = jnp.asarray(rng.random(b), jnp.float32) * total
    # The very top of the tree and past it (float32 round-off in a caller): never an empty leaf.
    mass = mass.at[0].set(total).at[-1].set(jnp.nextafter(total, jnp.inf))
    leaf, p = jitted_find_prefix_sum(trees, mass, capacity=capacity)
    k_leaf, k_p, k_min = jitted_draw(trees, mass, capacity=capacity)
    np.testing.assert_array_equal(k_leaf, leaf)
    np.testing.assert_array_equal(k_p, p)
    assert k_min == segment_tree.minimum(trees)
    assert np.all(np.asarray(k_p) > 0)


@needs_kernels
def test_vmapped_kernels_act_on_each_tree_alone():
    """``vmap`` (broadcast_all): a stack of trees, with slots batched or shared."""
    capacity, rng = 300, np.random.default_rng(1)
    stack = jnp.stack([random_trees(rng, capacity, 200) for _ in range(3)])
    slots = jnp.asarray(rng.integers(0, capacity, 40), jnp.int32)
    values = jnp.asarray(rng.random((3, 40)), jnp.float32)
    got = jax.jit(jax.vmap(functools.partial(tree_kernels.set_leaves, capacity=capacity),
                           in_axes=(0, None, 0)))(stack, slots, values)
    for i in range(3):
        np.testing.assert_array_equal(got[i], xla_set(stack[i], slots, values[i], capacity=capacity))
    mass = jnp.asarray(rng.random((3, 64)), jnp.float32) * got[:, 0, :1]
    leaf, p, low = jax.vmap(functools.partial(tree_kernels.draw, capacity=capacity))(got, mass)
    for i in range(3):
        want_leaf, want_p = segment_tree.find_prefix_sum(got[i], mass[i], capacity=capacity)
        np.testing.assert_array_equal(leaf[i], want_leaf)
        np.testing.assert_array_equal(p[i], want_p)
        assert low[i] == segment_tree.minimum(got[i])


@needs_kernels
def test_a_slot_outside_the_buffer_is_an_error():
    trees = segment_tree.init(16)
    with pytest.raises(Exception, match="outside"):
        jax.block_until_ready(tree_kernels.set_leaves(trees, jnp.int32([16]), jnp.float32([1.0]), capacity=16))


@needs_kernels
@pytest.mark.parametrize("capacity", [33, 5000])
def test_a_scanned_buffer_with_kernels_equals_one_without(capacity, kernels):
    """add / sample / update in a donated scan: states, batches and weights bitwise equal."""
    item = {"x": jnp.zeros((2,), jnp.float32)}

    def run(cpu_kernels):
        kernels(cpu_kernels)
        buf = buffers.prioritized(capacity, alpha=0.6)

        def body(state, xs):
            step, key = xs
            state = buf.add(state, {"x": jnp.stack([step, -step], 1)[:, :2].astype(jnp.float32)
                                    + jnp.arange(7.0)[:, None]})
            s = buf.sample(state, key, 32, 0.4)
            return buf.update(state, s.indices, s.items["x"][:, 0] * s.weights - 3.0), (s.indices, s.weights)

        steps = jnp.broadcast_to(jnp.arange(60, dtype=jnp.float32)[:, None], (60, 7))
        loop = jax.jit(lambda st, key: lax.scan(body, st, (steps, jax.random.split(key, 60))), donate_argnums=0)
        return loop(buf.init(item), jax.random.key(3))

    (state_k, out_k), (state_x, out_x) = run(True), run(False)
    for a, b in zip(jax.tree_util.tree_leaves((state_k, out_k)), jax.tree_util.tree_leaves((state_x, out_x))):
        np.testing.assert_array_equal(a, b)


ROW_SHAPES = [(), (3,), (2, 5), (16,), (40,)]
ROW_DTYPES = [np.float32, np.int32, np.uint8, np.bool_, np.float16, np.int8]


@needs_kernels
@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 300),
    k=st.integers(1, 200),
    shapes=st.lists(st.tuples(st.sampled_from(ROW_SHAPES), st.sampled_from(ROW_DTYPES)), min_size=1, max_size=4),
    seed=st.integers(0, 2**16),
)
def test_gather_rows_equals_indexing_every_store(n, k, shapes, seed):
    """Rows of 1 to 160 bytes, of any dtype, slots repeating: what ``store[slots]`` gives."""
    rng = np.random.default_rng(seed)
    stores = tuple(
        jnp.asarray((rng.random((n,) + shape) * 200 - 50).astype(dtype)) for shape, dtype in shapes
    )
    slots = jnp.asarray(rng.integers(0, n, k), jnp.int32)
    got = jax.jit(tree_kernels.gather_rows)(stores, slots)
    assert len(got) == len(stores)
    for store, rows in zip(stores, got):
        assert rows.dtype == store.dtype and rows.shape == (k,) + store.shape[1:]
        np.testing.assert_array_equal(rows, np.asarray(store)[np.asarray(slots)])


@needs_kernels
def test_vmapped_gather_rows_reads_each_ring_alone():
    rng = np.random.default_rng(2)
    stores = (jnp.asarray(rng.random((3, 50, 4)), jnp.float32), jnp.asarray(rng.integers(0, 9, (3, 50)), jnp.int32))
    slots = jnp.asarray(rng.integers(0, 50, (3, 20)), jnp.int32)
    got = jax.jit(jax.vmap(tree_kernels.gather_rows))(stores, slots)
    for store, rows in zip(stores, got):
        for i in range(3):
            np.testing.assert_array_equal(rows[i], np.asarray(store[i])[np.asarray(slots[i])])


@needs_kernels
def test_a_gathered_slot_outside_the_ring_is_an_error():
    with pytest.raises(Exception, match="outside"):
        jax.block_until_ready(tree_kernels.gather_rows((jnp.zeros((8, 2)),), jnp.int32([3, 8])))
    with pytest.raises(Exception, match="different numbers of rows"):  # slot 8 is past the first
        jax.block_until_ready(tree_kernels.gather_rows((jnp.zeros((8, 2)), jnp.zeros((9,))), jnp.int32([8])))


@needs_kernels
@pytest.mark.parametrize("kind", ["uniform", "prioritized"])
def test_a_large_ring_samples_the_same_items_with_the_row_kernel(kind, kernels):
    """Above ``GATHER_KERNEL_MIN_BYTES`` the CPU gathers with the kernel: same batches as XLA's."""
    capacity = 2048
    item = {"obs": jnp.zeros((80,), jnp.float32), "a": jnp.zeros((), jnp.int32)}  # obs: 640 KiB
    assert capacity * 80 * 4 >= buffers.dispatch.GATHER_KERNEL_MIN_BYTES

    def run(cpu_kernels):
        kernels(cpu_kernels)
        make = buffers.uniform if kind == "uniform" else buffers.prioritized
        buf = make(capacity)

        def body(state, xs):
            step, key = xs
            obs = step + jnp.arange(300.0)[:, None] * 1e-3 + jnp.arange(80.0)
            count = step.astype(jnp.int32) * 300 + jnp.arange(300, dtype=jnp.int32)  # items added before
            state = buf.add(state, {"obs": obs, "a": count})
            s = buf.sample(state, key, 64, 0.4)
            return buf.update(state, s.indices, s.items["obs"][:, 0] * 1e-3), s

        steps = jnp.arange(12, dtype=jnp.float32)
        loop = jax.jit(lambda st, key: lax.scan(body, st, (steps, jax.random.split(key, 12))), donate_argnums=0)
        return loop(buf.init(item), jax.random.key(5))

    with_kernel, without = run(True), run(False)
    make = buffers.uniform if kind == "uniform" else buffers.prioritized
    for cpu_kernels in (True, False):  # the kernel is what ran (or not)
        kernels(cpu_kernels)
        buf = make(capacity)
        hlo = jax.jit(lambda st, key: buf.sample(st, key, 64)).lower(buf.init(item), jax.random.key(0)).as_text()
        assert (tree_kernels.GATHER_ROWS in hlo) == cpu_kernels
    for a, b in zip(jax.tree_util.tree_leaves(with_kernel), jax.tree_util.tree_leaves(without)):
        np.testing.assert_array_equal(a, b)
    batches = with_kernel[1]
    # The FIFO ring puts item number c in slot c % capacity: each row is its slot's item.
    np.testing.assert_array_equal(np.asarray(batches.items["a"]) % capacity, batches.indices)


def test_a_large_cpu_prioritized_run_without_the_kernels_warns(monkeypatch):
    from jaxdqn import DQNConfig
    from jaxdqn.resources import warn_without_kernels

    monkeypatch.setenv(tree_kernels.SWITCH, "0")
    with pytest.warns(RuntimeWarning, match="buffer_size=1000000 on the CPU runs without the fused tree kernels"):
        warn_without_kernels(DQNConfig(buffer_size=1_000_000))
    monkeypatch.setenv(tree_kernels.SWITCH, "1")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_without_kernels(DQNConfig(buffer_size=50_000))  # small: no warning
        warn_without_kernels(DQNConfig(buffer_size=1_000_000, prioritized_replay=False))
        if tree_kernels.available():
            warn_without_kernels(DQNConfig(buffer_size=1_000_000))
