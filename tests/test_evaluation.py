"""Evaluation episodes: one loop for one agent or several, greedy or exploring, cut at the env's
limit, vmappable over seeds."""

import jax
import jax.numpy as jnp
import numpy as np

from jaxdqn import DQNConfig, ModelConfig, SimpleQConfig
from jaxdqn.plan import make_plan
from tests.test_multiagent import TaggedEnv

TINY = dict(buffer_size=2000, learning_starts=64, num_envs_per_worker=4, timesteps_per_iteration=256,
            total_timesteps=512, model=ModelConfig(fcnet_hiddens=(16,)), train_batch_size=16)


def test_greedy_evaluation_matches_a_python_rollout():
    """evaluate() against a plain Python loop over the same env, keys and greedy policy."""
    import gymnax

    config = SimpleQConfig(**TINY, evaluation_num_episodes=3, env_params={"max_steps_in_episode": 60})
    plan = make_plan(config)
    params = jax.jit(plan.init)(jax.random.key(3)).learner["default_policy"].params
    result = jax.jit(plan.evaluate)({"default_policy": params}, jax.random.key(4))

    env, env_params = gymnax.make("CartPole-v1")
    env_params = env_params.replace(max_steps_in_episode=60)
    key, *reset_keys = jax.random.split(jax.random.key(4), 4)  # the next key, one per env
    obs, state = jax.vmap(env.reset, in_axes=(0, None))(jnp.stack(reset_keys), env_params)
    want_ret, want_len, alive = np.zeros(3), np.zeros(3, int), np.ones(3, bool)
    while alive.any():
        keys = jax.random.split(key, 5)  # the next key, the acting key (unused: greedy), one per env
        key = keys[0]
        q = plan.networks["default_policy"].apply(params, obs).q
        action = np.argmax(np.asarray(q), axis=-1)
        obs, state, reward, term, trunc, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
            keys[2:], state, jnp.asarray(action), env_params)
        want_ret += np.where(alive, np.asarray(reward), 0.0)
        want_len += alive
        alive &= ~(np.asarray(term) | np.asarray(trunc))
    np.testing.assert_allclose(result.episode_return, want_ret)
    np.testing.assert_array_equal(result.episode_length, want_len)
    assert result.finished.all() and (want_len <= 60).all()
    # Greedy means act() agrees with the argmax of the network.
    np.testing.assert_array_equal(plan.act({"default_policy": params}, obs, "default_policy"),
                                  np.argmax(np.asarray(plan.networks["default_policy"].apply(params, obs).q), -1))


def test_evaluation_vmaps_over_seeds():
    config = SimpleQConfig(**TINY, evaluation_num_episodes=2)
    plan = make_plan(config)
    states = jax.vmap(plan.init)(jax.random.split(jax.random.key(0), 2))
    params = {pid: ls.params for pid, ls in states.learner.items()}
    result = jax.jit(jax.vmap(plan.evaluate))(params, jax.random.split(jax.random.key(1), 2))
    assert result.episode_return.shape == (2, 2)
    np.testing.assert_allclose(result.episode_return, result.episode_length)  # CartPole: +1 per step


def test_episodes_are_cut_at_the_env_limit_and_explore_at_the_given_epsilon():
    """CartPole that never falls (no thresholds): every episode, random play at epsilon 1
    included, runs to the env's limit of 25 steps and counts as finished; the same key plays
    the same episodes."""
    config = SimpleQConfig(**TINY, evaluation_num_episodes=4, evaluation_config={"explore": True},
                           env_params={"max_steps_in_episode": 25, "theta_threshold_radians": 100.0,
                                       "x_threshold": 1e6})
    plan = make_plan(config)
    params = {pid: ls.params for pid, ls in jax.jit(plan.init)(jax.random.key(0)).learner.items()}
    evaluate = jax.jit(plan.evaluate)
    out = evaluate(params, jax.random.key(1), 1.0)
    np.testing.assert_array_equal(out.episode_length, 25)
    assert out.finished.all()  # truncated at the env's own limit: finished, not cut by the loop
    again = evaluate(params, jax.random.key(1), 1.0)
    np.testing.assert_array_equal(out.episode_return, again.episode_return)


def test_a_multi_agent_evaluation_scores_the_agents_returns_summed():
    """TaggedEnv: agent i earns i + 1 per step, the joint episode lasts 5 steps: 5 * (1 + 2 + 3)."""
    config = DQNConfig(env=TaggedEnv(), multiagent=dict(policies={"p0": None, "p1": None}, policy_mapping_fn={
        "agent_0": "p0", "agent_1": "p1", "agent_2": "p1"}), env_params={"done_when": "any"}, hiddens=(8,),
        model=dict(fcnet_hiddens=(8,)), evaluation_num_episodes=3, buffer_size=400, learning_starts=20)
    plan = make_plan(config)
    params = {pid: ls.params for pid, ls in jax.jit(plan.init)(jax.random.key(0)).learner.items()}
    out = jax.jit(plan.evaluate)(params, jax.random.key(1))
    np.testing.assert_array_equal(out.episode_return, 30.0)
    np.testing.assert_array_equal(out.episode_length, 5)
