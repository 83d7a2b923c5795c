"""Rollouts: n-step transitions exact across fragment boundaries, terminated vs truncated."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdqn import envs, rollout

GAMMA = 0.9


def constant(action):
    """An ``Act`` that always takes ``action``."""
    return lambda obs, key: jnp.full((obs.shape[0],), action, jnp.int32)


def reference(raw, t_count, n, gamma):
    """Plain loops over one env's raw steps: (obs, action, return, discount, next_obs) per step."""
    out = []
    for t in range(t_count):
        total, k, terminated = 0.0, 0, False
        for j in range(n):
            total += gamma**j * raw["reward"][t + j]
            k += 1
            if raw["terminated"][t + j]:
                terminated = True
                break
            if raw["truncated"][t + j]:
                break
        out.append((raw["obs"][t], raw["action"][t], total, 0.0 if terminated else gamma**k,
                    raw["next_obs"][t + k - 1]))
    return out


@pytest.mark.parametrize("env_params, action", [
    ({"max_steps_in_episode": 5, "theta_threshold_radians": 100.0, "x_threshold": 1e6}, 1),  # truncations
    ({}, 0),  # pushing one way: terminations
])
def test_fragments_give_the_exact_n_step_transitions(env_params, action):
    env = envs.functions(envs.make_env("CartPole-v1", env_params))
    n, length, num_envs, fragments = 3, 4, 2, 6
    actor = rollout.init(env, jax.random.key(0), num_envs, n - 1)
    keys = [rollout.step_keys(k, length if i else n - 1, num_envs)[1]
            for i, k in enumerate(jax.random.split(jax.random.key(1), fragments + 1))]
    primed, _ = rollout.prime(env, constant(action), actor, keys[0])
    state, got = primed, []
    for i in range(fragments):
        state, window, _ = rollout.fragment(env, constant(action), state, keys[i + 1])
        transitions = rollout.n_step_transitions(window, count=length, gamma=GAMMA, n=n)
        mask = rollout.stored_mask(window, length)
        assert transitions.reward.shape == (length * num_envs,) and mask is None  # a gymnax env: all stored
        got.append(jax.tree_util.tree_map(lambda x: x.reshape((length, num_envs) + x.shape[1:]), transitions))
    got = jax.tree_util.tree_map(lambda *x: np.concatenate(x), *got)  # [T, E, ...]
    # The same raw trajectory, replayed with the same keys in one piece.
    actor2, raw0, _ = rollout.run_steps(env, constant(action), actor, keys[0])
    raws = [raw0]
    for i in range(fragments):
        actor2, raw, _ = rollout.run_steps(env, constant(action), actor2, keys[i + 1])
        raws.append(raw)
    raw = jax.tree_util.tree_map(lambda *x: np.concatenate(x), *raws)
    total = fragments * length
    ends = 0
    for e in range(num_envs):
        env_raw = {k: np.asarray(v)[:, e] for k, v in raw._asdict().items() if k not in ("memory", "acted")}  # single-agent, feed-forward
        ends += env_raw["terminated"].sum() + env_raw["truncated"].sum()
        for t, (obs, act, ret, disc, nxt) in enumerate(reference(env_raw, total, n, GAMMA)):
            np.testing.assert_allclose(got.obs[t, e], obs, rtol=1e-6)
            assert got.action[t, e] == act
            np.testing.assert_allclose(got.reward[t, e], ret, rtol=1e-5)
            np.testing.assert_allclose(got.discount[t, e], disc, rtol=1e-6)
            np.testing.assert_allclose(got.next_obs[t, e], nxt, rtol=1e-6)
    assert ends > 2  # the trajectory really crosses episode ends
    if env_params:
        assert not np.asarray(raw.terminated).any() and np.asarray(raw.truncated).any()


def test_episode_returns_and_lengths_are_recorded():
    env = envs.functions(envs.make_env("CartPole-v1", {"max_steps_in_episode": 7, "theta_threshold_radians": 100.0,
                                                       "x_threshold": 1e6}))
    actor = rollout.init(env, jax.random.key(0), 3, 0)
    _, _, episodes = rollout.run_steps(env, constant(0), actor, rollout.step_keys(jax.random.key(1), 20, 3)[1])
    done = np.asarray(episodes.done)
    np.testing.assert_array_equal(np.nonzero(done[:, 0])[0], [6, 13])
    np.testing.assert_array_equal(np.asarray(episodes.episode_length)[done], 7)
    np.testing.assert_allclose(np.asarray(episodes.episode_return)[done], 7.0)  # +1 per step
