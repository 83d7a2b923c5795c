"""The time slicer against RLlib's documented example and a loop-by-loop twin."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxdqn import buffers
from jaxdqn.types import SequenceItem
from tests.reference.sequence import timeslice_loops


def test_rllib_docstring_example():
    # T=12 single-episode steps, seq_len=8 (3 burn-in + 5), as in RLlib's docstring:
    # | Z Z Z | 0 1 2 3 4 |, | 2 3 4 | 5 6 7 8 9 |, | 7 8 9 | 10 11 Z Z Z |
    t = jnp.arange(12, dtype=jnp.float32)[:, None] + 1  # +1 so that zeros are padding only
    first = jnp.zeros((12, 1), bool).at[0, 0].set(True)
    out = buffers.timeslice({"t": t}, first, seq_len=8, burn_in=3)
    np.testing.assert_array_equal(
        np.asarray(out.data["t"]) - np.asarray(out.mask),  # back to 0-based steps; Z = 0
        [[0, 0, 0, 0, 1, 2, 3, 4], [2, 3, 4, 5, 6, 7, 8, 9], [7, 8, 9, 10, 11, 0, 0, 0]],
    )
    np.testing.assert_array_equal(out.mask, [[0, 0, 0, 1, 1, 1, 1, 1], [1] * 8, [1] * 5 + [0] * 3])
    np.testing.assert_array_equal(out.first[0], [0, 0, 0, 1, 0, 0, 0, 0])
    assert out.init_state == ()


def test_burn_in_from_an_earlier_episode_is_dropped_and_the_state_zeroed():
    # One env, 15 steps, episodes start at t=0 and t=9; data[t] = t + 1; slices of 3 + 5 steps.
    # Slice 1: burn-in t=2..4, training t=5..9 (the episode at t=9 starts inside the training
    # part, where the network resets): the burn-in is kept and the state before t=2 carried.
    # Slice 2: burn-in t=7..9, training t=10..14: t=7, 8 belong to the earlier episode and are
    # dropped; t=9 starts the training steps' episode and stays; the initial state is zero.
    t_len = 15
    data = np.arange(1, t_len + 1, dtype=np.float32)[:, None]
    states = np.arange(100, 100 + t_len, dtype=np.float32)[:, None, None]  # state before step t
    first = np.zeros((t_len, 1), bool)
    first[[0, 9], 0] = True
    out = buffers.timeslice(
        data, jnp.asarray(first), seq_len=8, burn_in=3, states=jnp.asarray(states), zero_init_states=False
    )
    np.testing.assert_array_equal(out.mask[1], [1] * 8)
    np.testing.assert_array_equal(out.mask[2], [0, 0, 1, 1, 1, 1, 1, 1])
    np.testing.assert_array_equal(out.data[2], [0, 0, 10, 11, 12, 13, 14, 15])
    np.testing.assert_array_equal(out.init_state[:, 0], [0, 102, 0])  # 0: padded / dropped start
    np.testing.assert_array_equal(out.first[2], [0, 0, 1, 0, 0, 0, 0, 0])
    zeroed = buffers.timeslice(data, jnp.asarray(first), seq_len=8, burn_in=3, states=jnp.asarray(states))
    np.testing.assert_array_equal(zeroed.init_state, np.zeros((3, 1), np.float32))


@settings(max_examples=15)
@given(
    t_len=st.integers(1, 20),
    num_envs=st.integers(1, 3),
    seq_len=st.integers(1, 6),
    burn_frac=st.floats(0, 0.99),
    start_frac=st.floats(0, 0.99),
    zero_init=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_matches_the_loop_twin(t_len, num_envs, seq_len, burn_frac, start_frac, zero_init, seed):
    burn_in = int(burn_frac * seq_len)
    start = int(start_frac * t_len)
    rng = np.random.default_rng(seed)
    data = rng.integers(1, 100, size=(t_len, num_envs, 2)).astype(np.int32)
    states = rng.normal(size=(t_len, num_envs, 3)).astype(np.float32)
    first = rng.random((t_len, num_envs)) < 0.2
    out = jax.jit(  # one program per example, not one per op
        lambda x, f, st: buffers.timeslice({"x": x}, f, seq_len=seq_len, burn_in=burn_in, start=start, states=st,
                                           zero_init_states=zero_init)
    )(jnp.asarray(data), jnp.asarray(first), jnp.asarray(states))
    ref_data, ref_mask, ref_first, ref_init = timeslice_loops(
        data, first, seq_len=seq_len, burn_in=burn_in, start=start, states=states, zero_init_states=zero_init
    )
    np.testing.assert_array_equal(out.data["x"], ref_data)
    np.testing.assert_array_equal(out.mask, ref_mask)
    np.testing.assert_array_equal(out.first, ref_first)
    np.testing.assert_array_equal(out.init_state, ref_init)


def test_sequence_items_go_into_both_buffers_and_come_back_whole():
    t_len, num_envs, seq_len = 9, 2, 4
    obs = jnp.arange(t_len * num_envs * 3, dtype=jnp.float32).reshape(t_len, num_envs, 3)
    first = jnp.zeros((t_len, num_envs), bool).at[0].set(True)
    states = (jnp.ones((t_len, num_envs, 5)), jnp.zeros((t_len, num_envs, 5)))  # an LSTM (h, c)
    items = jax.jit(
        lambda o, f, s: buffers.timeslice({"obs": o}, f, seq_len=seq_len, burn_in=1, states=s, zero_init_states=False)
    )(obs, first, states)
    count = items.mask.shape[0]
    assert items.data["obs"].shape == (count, seq_len, 3) and items.init_state[0].shape == (count, 5)
    example = jax.tree_util.tree_map(lambda x: x[0], items)
    for buf in (buffers.uniform(16), buffers.prioritized(16)):
        state = buf.add(buf.init(example), items)
        s = buf.sample(state, jax.random.key(0), 8)
        assert isinstance(s.items, SequenceItem)
        expected = jax.tree_util.tree_map(lambda x: x[np.asarray(s.indices)], items)
        jax.tree_util.tree_map(np.testing.assert_array_equal, s.items, expected)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(seq_len=0), "seq_len"),
        (dict(seq_len=4, burn_in=4), "burn_in"),
        (dict(seq_len=4, burn_in=-1), "burn_in"),
        (dict(seq_len=4, start=10), "start"),
    ],
)
def test_bad_slicing_arguments_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        buffers.timeslice(jnp.zeros((10, 2)), jnp.zeros((10, 2), bool), **kwargs)


def test_rollout_leaves_must_share_the_time_and_env_axes():
    with pytest.raises(ValueError, match=r"rollout\['x'\]"):
        buffers.timeslice({"x": jnp.zeros((9, 2))}, jnp.zeros((10, 2), bool), seq_len=3)
