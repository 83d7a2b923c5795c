"""The execution plan: replay ratio, target syncs, one trace per chunk, independent seeds."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdqn import DQNConfig, ModelConfig, SimpleQConfig
from jaxdqn.plan import make_schedule, make_train

TINY = dict(buffer_size=2000, learning_starts=64, num_envs_per_worker=4, timesteps_per_iteration=256,
            total_timesteps=512, model=ModelConfig(fcnet_hiddens=(16,)), train_batch_size=16)


@pytest.mark.parametrize("intensity", [None, 4.0, 6.0, 1.0])
def test_trained_over_sampled_matches_training_intensity(intensity):
    config = SimpleQConfig(training_intensity=intensity, **TINY)
    schedule = make_schedule(config)
    init, chunk, _ = make_train(config)
    state = jax.jit(init)(jax.random.key(0))
    start_sampled = int(state.metrics.num_steps_sampled)
    state, report = jax.jit(chunk)(state)
    sampled = int(report["num_steps_sampled"]) - start_sampled
    trained = int(report["num_steps_trained"])
    native = config.train_batch_size / (config.rollout_fragment_length * config.num_envs)  # 1.0 here
    want = intensity or native
    assert trained / sampled == pytest.approx(want, rel=0.02), schedule


def test_fractional_intensity_is_an_exact_static_schedule():
    config = SimpleQConfig(training_intensity=1.5, **TINY)  # 3 replays per 2 stores
    schedule = make_schedule(config)
    assert (schedule.stores, schedule.replays) == (2, 3)


def test_target_syncs_every_freq_sampled_steps():
    config = SimpleQConfig(target_network_update_freq=40, **TINY)  # stores of 16 steps
    schedule = make_schedule(config)
    init, chunk, _ = make_train(config)
    state = jax.jit(init)(jax.random.key(0))
    sampled = int(state.metrics.num_steps_sampled)
    state, report = jax.jit(chunk)(state)
    # Simulate RLlib's rule over the same schedule: replays check sampled - last >= freq.
    last, count = 0, 0
    for _ in range(schedule.iterations_per_chunk):
        sampled += schedule.stores * schedule.steps_per_store
        for _ in range(schedule.replays):
            if sampled - last >= 40:
                count, last = count + 1, sampled
    assert int(report["num_target_updates"]) == count > 3
    assert int(report["last_target_update_ts"]) == last
    assert int(report["num_steps_sampled"]) == sampled


def test_the_chunk_traces_once_and_donates_the_state():
    config = DQNConfig(**TINY, hiddens=(16,))
    init, chunk, _ = make_train(config)
    traced = jax.jit(chex.assert_max_traces(chunk, n=1), donate_argnums=0)
    state = jax.jit(init)(jax.random.key(0))
    for _ in range(3):
        old = state.buffer.storage.storage.obs
        state, report = traced(state)
        assert old.is_deleted()
    assert int(report["num_steps_sampled"]) > 3 * 200


def test_vmapped_seeds_train_independently():
    config = SimpleQConfig(**TINY)
    _, _, train = make_train(config)
    states, reports = jax.jit(jax.vmap(train))(jax.random.split(jax.random.key(0), 3))
    leaves = jax.tree_util.tree_leaves(states.learner.params)
    for a, b in [(0, 1), (0, 2), (1, 2)]:
        assert not np.allclose(leaves[0][a], leaves[0][b])
    assert reports["episodes_total"].shape[0] == 3
    np.testing.assert_array_equal(reports["num_steps_sampled"][0], reports["num_steps_sampled"][1])


def test_episode_metrics_follow_the_episodes():
    config = SimpleQConfig(**TINY)
    init, chunk, _ = make_train(config)
    state, report = jax.jit(chunk)(jax.jit(init)(jax.random.key(1)))
    assert int(report["episodes_total"]) > 0
    assert 8 <= float(report["episode_reward_min"]) <= float(report["episode_reward_mean"]) <= float(
        report["episode_reward_max"]) <= 500
    # CartPole gives +1 per step: return equals length.
    assert float(report["episode_len_mean"]) == pytest.approx(float(report["episode_reward_mean"]))
