"""Bad arguments are refused at build or trace time, naming the argument."""

import jax
import jax.numpy as jnp
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
def test_batch_larger_than_capacity_or_not_static(factory):
    buf = factory(4)
    state = buf.add(buf.init(jnp.zeros(2)), jnp.ones((3, 2)))
    with pytest.raises(ValueError, match="batch_size"):
        buf.sample(state, jax.random.key(0), 5)
    with pytest.raises(ValueError, match="batch_size"):
        buf.sample(state, jax.random.key(0), 0)
    with pytest.raises(TypeError, match="batch_size"):
        jax.jit(lambda s, b: buf.sample(s, jax.random.key(0), b))(state, 2)


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
