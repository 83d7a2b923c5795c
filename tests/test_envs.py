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
    obs, _ = envs.reset(spec, jax.random.key(0), 3)
    assert obs.shape == (3,) + shape


def run(spec, steps, num_envs=2, action=0):
    obs, state = envs.reset(spec, jax.random.key(0), num_envs)

    def body(carry, key):
        obs, state = carry
        out, state = envs.step(spec, key, state, jnp.full((num_envs,), action, jnp.int32))
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
