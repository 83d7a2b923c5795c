"""Checkpoint files on their own: exact round trip of odd leaves, layout refusal, finished-only lookup."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdqn import checkpoint


class State(NamedTuple):
    weights: jax.Array
    empty: jax.Array  # zero-size: orbax refuses these, so they are not stored
    counter: jax.Array
    key: jax.Array  # a typed PRNG key


def make_state(seed: int) -> State:
    rng = np.random.default_rng(seed)
    return State(weights=jnp.asarray(rng.normal(size=(3, 5)), jnp.float32), empty=jnp.zeros((0, 4), jnp.float32),
                 counter=jnp.int32(seed), key=jax.random.key(seed))


def test_round_trip_is_exact_for_every_leaf_kind(tmp_path):
    state = make_state(7)
    path = checkpoint.save(tmp_path, 12, state, {"note": "x"})
    assert path.name == "checkpoint_000012"
    restored, meta = checkpoint.restore(tmp_path, jax.eval_shape(lambda: make_state(0)))
    assert meta["note"] == "x"
    np.testing.assert_array_equal(restored.weights, state.weights)
    assert restored.empty.shape == (0, 4) and restored.counter.dtype == jnp.int32 and int(restored.counter) == 7
    np.testing.assert_array_equal(jax.random.key_data(restored.key), jax.random.key_data(state.key))
    np.testing.assert_array_equal(jax.random.uniform(restored.key, (3,)), jax.random.uniform(state.key, (3,)))


def test_another_layout_is_refused_with_the_first_difference(tmp_path):
    checkpoint.save(tmp_path, 1, make_state(1), {})
    other = make_state(1)._replace(weights=jnp.zeros((3, 6), jnp.float32))
    with pytest.raises(ValueError, match=r"another state layout.*\[3, 5\].*\[3, 6\]"):
        checkpoint.restore(tmp_path, other)


def test_only_finished_checkpoints_are_found(tmp_path):
    assert checkpoint.finished(tmp_path) == []
    checkpoint.save(tmp_path, 2, make_state(2), {})
    checkpoint.save(tmp_path, 10, make_state(3), {})
    (tmp_path / "checkpoint_000011.orbax-checkpoint-tmp-123").mkdir()  # an interrupted save
    assert [p.name for p in checkpoint.finished(tmp_path)] == ["checkpoint_000002", "checkpoint_000010"]
    assert checkpoint.resolve(tmp_path).name == "checkpoint_000010"
    restored, _ = checkpoint.restore(tmp_path / "checkpoint_000002", make_state(0))
    assert int(restored.counter) == 2


def test_keys_keep_their_prng_and_another_prng_is_refused(tmp_path):
    philox = make_state(3)._replace(key=jax.random.key(3, impl="philox4x32"))
    checkpoint.save(tmp_path, 1, philox, {})
    template = jax.eval_shape(lambda: philox)
    restored, _ = checkpoint.restore(tmp_path, template)
    assert str(jax.random.key_impl(restored.key)) == "philox4x32"
    np.testing.assert_array_equal(jax.random.uniform(restored.key, (3,)), jax.random.uniform(philox.key, (3,)))
    # Same uint32[2] key data, another generator: refused, not silently reinterpreted.
    with pytest.raises(ValueError, match=r"holds a philox4x32 key at .*key.*draws from threefry2x32"):
        checkpoint.restore(tmp_path, jax.eval_shape(lambda: make_state(0)))
