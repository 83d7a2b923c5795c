"""Bad arguments are refused at build or trace time, naming the argument."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdqn import buffers

FACTORIES = [buffers.uniform, buffers.prioritized]


@pytest.mark.parametrize("factory", FACTORIES)
@pytest.mark.parametrize("capacity", [0, -5, 2.5, True, "10", 2**30])
def test_bad_capacity(factory, capacity):
    with pytest.raises(ValueError, match="capacity"):
        factory(capacity)


@pytest.mark.parametrize("kwargs, match", [(dict(alpha=-0.1), "alpha"), (dict(eps=0.0), "eps"), (dict(eps=-1e-3), "eps")])
def test_bad_priority_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        buffers.prioritized(10, **kwargs)


@pytest.mark.parametrize("factory", FACTORIES)
def test_batch_below_one_not_static_or_from_an_empty_buffer(factory):
    buf = factory(4)
    empty = buf.init(jnp.zeros(2))
    state = buf.add(empty, jnp.ones((3, 2)))
    with pytest.raises(ValueError, match="batch_size"):
        buf.sample(state, jax.random.key(0), 0)
    with pytest.raises(TypeError, match="batch_size"):
        jax.jit(lambda s, b: buf.sample(s, jax.random.key(0), b))(state, 2)
    with pytest.raises(ValueError, match="empty buffer"):
        buf.sample(empty, jax.random.key(0), 2)


@pytest.mark.parametrize("factory", FACTORIES)
@pytest.mark.parametrize("batch_size", [1, 3, 4, 5, 64])
def test_any_batch_size_draws_with_replacement_from_the_items_held(factory, batch_size):
    """RLlib and flashbax sample with replacement: a batch may exceed the capacity or the items
    held; every index is a slot holding an item, and the items are those slots' rows."""
    buf = factory(4)
    state = buf.add(buf.init(jnp.zeros(2)), jnp.arange(6.0).reshape(3, 2))
    for sample in (buf.sample, jax.jit(buf.sample, static_argnums=2)):
        s = sample(state, jax.random.key(batch_size), batch_size)
        idx = np.asarray(s.indices)
        assert idx.shape == (batch_size,) and set(idx.tolist()) <= {0, 1, 2}
        np.testing.assert_array_equal(np.asarray(s.items), np.arange(6.0).reshape(3, 2)[idx])
    if batch_size == 64:  # every held item is drawn somewhere in a large batch
        assert set(idx.tolist()) == {0, 1, 2}


@pytest.mark.parametrize("factory", FACTORIES)
def test_mismatched_items_are_refused_naming_the_leaf(factory):
    buf = factory(8)
    state = buf.init({"obs": jnp.zeros(3), "action": jnp.zeros((), jnp.int32)})
    good = {"obs": jnp.zeros((2, 3)), "action": jnp.zeros((2,), jnp.int32)}
    buf.add(state, good)
    with pytest.raises(TypeError, match="structure"):
        buf.add(state, {"obs": jnp.zeros((2, 3))})
    with pytest.raises(TypeError, match=r"\['action'\].*int32"):
        buf.add(state, {**good, "action": jnp.zeros((2,), jnp.float32)})
    with pytest.raises(ValueError, match=r"\['obs'\].*\[K, 3\]"):
        buf.add(state, {**good, "obs": jnp.zeros((2, 4))})
    with pytest.raises(ValueError, match=r"\['obs'\].*\[K, 3\]"):
        buf.add(state, {**good, "obs": jnp.zeros(3)})  # a single item without its leading axis
    with pytest.raises(ValueError, match="same leading size"):
        buf.add(state, {**good, "action": jnp.zeros((3,), jnp.int32)})
    with pytest.raises(ValueError, match="K in"):
        buf.add(state, {"obs": jnp.zeros((9, 3)), "action": jnp.zeros((9,), jnp.int32)})
    # The same checks fire while tracing, before anything runs.
    with pytest.raises(TypeError, match=r"\['action'\]"):
        jax.jit(buf.add)(state, {**good, "action": jnp.zeros((2,), jnp.float32)})


def test_negative_beta_and_mismatched_update_shapes():
    buf = buffers.prioritized(4)
    state = buf.add(buf.init(jnp.zeros(())), jnp.ones((2,)))
    with pytest.raises(ValueError, match="beta"):
        buf.sample(state, jax.random.key(0), 2, beta=-0.5)
    with pytest.raises(ValueError, match="td_errors"):
        buf.update(state, jnp.zeros((2,), jnp.int32), jnp.zeros((3,)))


def test_empty_example_item():
    with pytest.raises(ValueError, match="example_item"):
        buffers.uniform(4).init({})
