"""gymnax environments: names, parameters, and terminated / truncated / final observations."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdqn import envs


def test_unknown_name_lists_the_valid_ones():
    with pytest.raises(ValueError, match=r"CartPol-v1.*valid:.*'CartPole-v1'"):
        envs.make_env("CartPol-v1")


def test_continuous_actions_and_unknown_params_are_refused():
    with pytest.raises(ValueError, match="Box action space"):
        envs.make_env("Pendulum-v1")
    with pytest.raises(ValueError, match=r"\['max_step'\].*max_steps_in_episode"):
        envs.make_env("CartPole-v1", {"max_step": 10})


@pytest.mark.parametrize("name, shape, actions", [("CartPole-v1", (4,), 2), ("Acrobot-v1", (6,), 3),
                                                    ("Breakout-MinAtar", (10, 10, 4), 3)])
def test_shapes(name, shape, actions):
    spec = envs.make_env(name)
    assert spec.obs_shape == shape and spec.num_actions == actions
    obs, _ = envs.reset(spec, jax.random.split(jax.random.key(0), 3))
    assert obs.shape == (3,) + shape


def run(spec, steps, num_envs=2, action=0):
    obs, state = envs.reset(spec, jax.random.split(jax.random.key(0), num_envs))

    def body(carry, key):
        obs, state = carry
        out, state = envs.step(spec, jax.random.split(key, num_envs), state, jnp.full((num_envs,), action, jnp.int32))
        return (out.obs, state), (obs, out)

    _, (acted_on, outs) = jax.lax.scan(body, (obs, state), jax.random.split(jax.random.key(1), steps))
    return acted_on, outs


def test_cartpole_v0_truncates_at_200_and_keeps_the_final_observation():
    spec = envs.make_env("CartPole-v0")
    assert spec.params.max_steps_in_episode == 200
    # Thresholds out of reach: the episode never terminates, so only the time limit ends it.
    spec = envs.make_env("CartPole-v0", {"theta_threshold_radians": 100.0, "x_threshold": 1e6})
    acted_on, out = run(spec, 205, action=1)
    ends = np.nonzero(np.asarray(out.truncated[:, 0]))[0]
    np.testing.assert_array_equal(ends, [199])
    assert not np.asarray(out.terminated).any()
    t = 199
    # next_obs is the true successor; obs (what is acted on next) is a fresh reset.
    assert not np.allclose(out.next_obs[t], out.obs[t])
    np.testing.assert_array_equal(acted_on[t + 1], out.obs[t])
    np.testing.assert_array_equal(out.next_obs[t - 1], acted_on[t])  # no reset mid-episode
    assert np.abs(np.asarray(out.obs[t])).max() <= 0.05  # CartPole resets near 0


def test_termination_is_not_truncation():
    spec = envs.make_env("CartPole-v1")
    _, out = run(spec, 60, action=0)  # pushing one way topples the pole quickly
    term = np.asarray(out.terminated)
    assert term.any() and not (term & np.asarray(out.truncated)).any()


def test_a_users_env_object():
    import gymnax

    env, params = gymnax.make("Acrobot-v1")
    spec = envs.make_env(env, {"max_steps_in_episode": 7}, params)
    assert spec.params.max_steps_in_episode == 7 and spec.num_actions == 3


MINATAR = ["Asterix-MinAtar", "Breakout-MinAtar", "Freeway-MinAtar", "SpaceInvaders-MinAtar", "Seaquest-MinAtar"]


@pytest.mark.parametrize("name", MINATAR)
def test_full_action_set_is_the_games_own(name):
    """``full_action_space=True`` plays exactly as the game built on its full action set
    (gymnax's ``use_minimal_action_set=False``): same observations, rewards and ends over
    random full-set actions."""
    import gymnax

    spec = envs.make_env(name, {"full_action_space": True})
    env, params = gymnax.make(name, use_minimal_action_set=False)
    assert spec.num_actions == env.num_actions == 6
    actions = jax.random.randint(jax.random.key(2), (300,), 0, 6)
    keys = jax.random.split(jax.random.key(3), 300)

    def play(step, reset):
        def body(state, inputs):
            key, action = inputs
            obs, state, reward, terminated, truncated, _ = step(key, state, action, params)
            return state, (obs, reward, terminated, truncated)

        _, state = reset(jax.random.key(4), params)
        return jax.lax.scan(body, state, (keys, actions))[1]

    ours = play(spec.env.step, spec.env.reset)
    theirs = play(env.step, env.reset)
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


class ActionEcho:
    """A gymnax-API env whose observation is the action it executed; never ends."""

    default_params = None

    def reset(self, key, params=None):
        return jnp.zeros((1,)), jnp.zeros(())

    def step(self, key, state, action, params=None):
        return jnp.asarray(action, jnp.float32)[None], state, 0.0, False, False, {}

    def action_space(self, params=None):
        from gymnax.environments import spaces

        return spaces.Discrete(4)


def test_sticky_actions_repeat_the_last_executed_action_with_the_given_probability():
    """Each step executes the agent's action or, with probability p, the one executed before
    (no-op 0 before the first): the repeat rate over steps where the two differ is p."""
    p, steps = 0.25, 20_000
    env = envs.StickyActions(ActionEcho(), p)
    agent = jax.random.randint(jax.random.key(5), (steps,), 0, 4)

    def body(state, inputs):
        key, action = inputs
        obs, state, *_ = env.step(key, state, action)
        return state, obs[0].astype(jnp.int32)

    _, state = env.reset(jax.random.key(6))
    executed = np.asarray(jax.lax.scan(body, state, (jax.random.split(jax.random.key(7), steps), agent))[1])
    agent = np.asarray(agent)
    previous = np.concatenate([[0], executed[:-1]])
    assert np.all((executed == agent) | (executed == previous))
    differ = agent != previous
    rate = np.mean(executed[differ] == previous[differ])
    sigma = np.sqrt(p * (1 - p) / differ.sum())
    assert abs(rate - p) < 4 * sigma, (rate, p)


def test_wrapper_options_are_checked():
    with pytest.raises(ValueError, match=r"repeat_action_probability=1\.5.*\[0, 1\)"):
        envs.make_env("Breakout-MinAtar", {"repeat_action_probability": 1.5})
    with pytest.raises(ValueError, match=r"full_action_space='yes'.*bool"):
        envs.make_env("Breakout-MinAtar", {"full_action_space": "yes"})
    with pytest.raises(ValueError, match=r"full_action_space=True needs .*MinAtar"):
        envs.make_env("CartPole-v1", {"full_action_space": True})


def test_minatar_observations_are_stored_as_uint8_with_the_same_values():
    """MinAtar's 0/1 channels are acted on and stored as uint8 (a quarter of the replay memory);
    the values are gymnax's own."""
    import gymnax

    spec = envs.make_env("Breakout-MinAtar")
    env, params = gymnax.make("Breakout-MinAtar")
    obs, state = envs.reset(spec, jax.random.split(jax.random.key(0), 2))
    want, _ = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(jax.random.key(0), 2), params)
    assert obs.dtype == jnp.uint8 and want.dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(obs, np.float32), np.asarray(want))
    out, _ = envs.step(spec, jax.random.split(jax.random.key(1), 2), state, jnp.array([1, 2]))
    assert out.obs.dtype == out.next_obs.dtype == jnp.uint8
    assert envs.make_env("CartPole-v1").obs_dtype is None


def test_uint8_storage_trains_bitwise_as_float32(monkeypatch):
    """The network computes in float32 either way: the same seed gives the same params whether
    MinAtar observations are stored as uint8 or as the env's float32."""
    import dataclasses

    from jaxdqn import DQNConfig
    from jaxdqn.plan import make_train

    config = DQNConfig(env="Breakout-MinAtar", total_timesteps=64, timesteps_per_iteration=64, learning_starts=32,
                       buffer_size=256, train_batch_size=8, prioritized_replay=False, hiddens=(16,),
                       model={"conv_filters": [[4, 3, 1]], "fcnet_hiddens": []})
    stored_uint8 = jax.jit(make_train(config))(jax.random.key(0))[0]
    assert stored_uint8.buffer["default_policy"].storage.obs.dtype == jnp.uint8
    monkeypatch.setattr(envs, "stored", lambda spec, obs: obs)
    stored_float = jax.jit(make_train(dataclasses.replace(config)))(jax.random.key(0))[0]
    assert stored_float.buffer["default_policy"].storage.obs.dtype == jnp.float32
    for a, b in zip(jax.tree_util.tree_leaves(stored_uint8.learner["default_policy"].params),
                    jax.tree_util.tree_leaves(stored_float.learner["default_policy"].params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
