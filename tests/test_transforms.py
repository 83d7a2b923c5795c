"""Buffers under jit, vmap (a stack of independent buffers) and pmap (one shard per device)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdqn import buffers

CAPACITY, K, B = 12, 5, 6
KINDS = {"uniform": buffers.uniform(CAPACITY), "prioritized": buffers.prioritized(CAPACITY, alpha=0.7)}


def item_example():
    return {"obs": jnp.zeros(3, jnp.float32), "action": jnp.zeros((), jnp.int32)}


def items_for(step: int, replica: int):
    base = 1000 * replica + 10 * step
    ids = jnp.arange(base, base + K, dtype=jnp.int32)
    return {"obs": jnp.stack([ids, ids + 1, ids + 2], 1).astype(jnp.float32), "action": ids}


def run(buf, state, keys, replica, steps=4, transform=lambda f: f):
    """add -> sample -> update, ``steps`` times; returns the final state and the samples."""
    add, sample, update = transform(buf.add), transform(lambda s, k: buf.sample(s, k, B, 0.5)), transform(buf.update)
    samples = []
    for step in range(steps):
        state = add(state, items_for(step, replica))
        s = sample(state, keys[step])
        td = s.items["obs"][..., 0] * 0.01 - 3.0 + step  # depends on what was drawn
        state = update(state, s.indices, td)
        samples.append(s)
    return state, samples


@pytest.mark.parametrize("kind", KINDS)
def test_jit_and_eager_agree(kind):
    buf = KINDS[kind]
    keys = jax.random.split(jax.random.key(0), 4)
    eager_state, eager_samples = run(buf, buf.init(item_example()), keys, 0)
    jit_state, jit_samples = run(buf, buf.init(item_example()), keys, 0, transform=jax.jit)
    for e, j in zip(eager_samples, jit_samples):
        np.testing.assert_array_equal(e.indices, j.indices)
        np.testing.assert_allclose(e.weights, j.weights, rtol=1e-6)
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), eager_state, jit_state)


def stacked_run(buf, n, transform):
    keys = jax.random.split(jax.random.key(1), (n, 4))
    state = transform(lambda _: buf.init(item_example()))(jnp.arange(n))
    add = transform(buf.add)
    sample = transform(lambda s, k: buf.sample(s, k, B, 0.5))
    update = transform(buf.update)
    samples = []
    for step in range(4):
        items = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *[items_for(step, r) for r in range(n)])
        state = add(state, items)
        s = sample(state, keys[:, step])
        state = update(state, s.indices, s.items["obs"][..., 0] * 0.01 - 3.0 + step)
        samples.append(s)
    return state, samples, keys


def assert_replicas_are_independent(buf, n, state, samples, keys):
    for r in range(n):
        alone_state, alone_samples = run(buf, buf.init(item_example()), keys[r], r)
        for stacked, alone in zip(samples, alone_samples):
            np.testing.assert_array_equal(stacked.indices[r], alone.indices)
            np.testing.assert_array_equal(stacked.items["action"][r], alone.items["action"])
            np.testing.assert_allclose(stacked.weights[r], alone.weights, rtol=1e-6)
        jax.tree_util.tree_map(
            lambda a, b: np.testing.assert_allclose(a[r], b, rtol=1e-6), state, alone_state
        )
    # Different items and keys: the replicas' draws really differ.
    assert len({tuple(np.asarray(samples[-1].items["action"][r])) for r in range(n)}) == n


@pytest.mark.parametrize("kind", KINDS)
def test_vmapped_stack_of_8_buffers_behaves_as_8_independent_ones(kind):
    buf = KINDS[kind]
    state, samples, keys = stacked_run(buf, 8, jax.vmap)
    assert all(x.shape[0] == 8 for x in jax.tree_util.tree_leaves(state))
    assert_replicas_are_independent(buf, 8, state, samples, keys)


@pytest.mark.parametrize("kind", KINDS)
def test_pmapped_buffer_over_4_cpu_devices(kind):
    cpus = jax.devices("cpu")
    assert len(cpus) >= 4, "conftest forces 4 CPU devices"
    buf = KINDS[kind]
    with jax.default_device(cpus[0]):  # also where a GPU is the default backend
        state, samples, keys = stacked_run(buf, 4, functools.partial(jax.pmap, devices=cpus[:4]))
    shards = jax.tree_util.tree_leaves(state)[0].sharding
    assert len(shards.device_set) == 4
    assert_replicas_are_independent(buf, 4, jax.device_get(state), jax.device_get(samples), keys)
