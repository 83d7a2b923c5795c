"""Q-networks: shapes of every variant, and each head's formula checked by hand."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdqn import DQNConfig, ModelConfig
from jaxdqn.networks import QNetwork, make_network

RNGS = {"params": jax.random.key(0), "noise": jax.random.key(1)}


@pytest.mark.parametrize(
    "changes, obs_shape",
    [
        (dict(), (4,)),
        (dict(num_atoms=11, v_min=-1.0, v_max=1.0), (4,)),
        (dict(noisy=True), (6,)),
        (dict(dueling=False, hiddens=()), (10, 10, 4)),  # MinAtar
        (dict(model=ModelConfig(fcnet_hiddens=(64,))), (84, 84, 4)),  # Atari
    ],
)
def test_shapes(changes, obs_shape):
    net = make_network(DQNConfig(**changes), 5)
    obs = jnp.ones((3,) + obs_shape)
    params = net.init(RNGS, obs)
    out = net.apply(params, obs, rngs={"noise": jax.random.key(2)})
    assert out.q.shape == (3, 5)
    if net.num_atoms > 1:
        assert out.logits.shape == (3, 5, net.num_atoms)
    else:
        assert out.logits is None


def test_dueling_head_is_value_plus_centred_advantage():
    net = QNetwork(num_actions=3, fcnet_hiddens=(8,), hiddens=(), dueling=True)
    obs = jax.random.normal(jax.random.key(3), (4, 5))
    params = net.init(RNGS, obs)["params"]
    p = jax.tree_util.tree_map(np.asarray, params)
    f = np.tanh(np.asarray(obs) @ p["fc_0"]["kernel"] + p["fc_0"]["bias"])
    value = f @ p["value_out"]["kernel"] + p["value_out"]["bias"]  # [4, 1]
    adv = f @ p["advantage_out"]["kernel"] + p["advantage_out"]["bias"]  # [4, 3]
    expected = value + adv - adv.mean(axis=1, keepdims=True)
    np.testing.assert_allclose(net.apply({"params": params}, obs).q, expected, rtol=1e-5, atol=1e-6)


def test_distributional_q_is_the_mean_of_the_atoms():
    net = QNetwork(num_actions=2, fcnet_hiddens=(8,), hiddens=(16,), dueling=False, num_atoms=7, v_min=-3.0, v_max=3.0)
    obs = jax.random.normal(jax.random.key(4), (4, 5))
    params = net.init(RNGS, obs)
    out = net.apply(params, obs)
    probs = jax.nn.softmax(out.logits, axis=-1)
    np.testing.assert_allclose(out.q, (probs * np.linspace(-3, 3, 7)).sum(-1), rtol=1e-5, atol=1e-6)


def test_noisy_layers_resample_noise_and_have_a_deterministic_mean():
    net = QNetwork(num_actions=2, fcnet_hiddens=(8,), hiddens=(8,), noisy=True, sigma0=0.5)
    obs = jnp.ones((2, 4))
    params = net.init(RNGS, obs)
    a = net.apply(params, obs, rngs={"noise": jax.random.key(5)}).q
    b = net.apply(params, obs, rngs={"noise": jax.random.key(6)}).q
    assert not np.allclose(a, b)
    c = net.apply(params, obs, deterministic=True).q
    d = net.apply(params, obs, deterministic=True).q
    np.testing.assert_array_equal(c, d)
    sigma = params["params"]["advantage_hidden_0"]["sigma_kernel"]
    np.testing.assert_allclose(sigma, 0.5 / np.sqrt(8), rtol=1e-6)  # sigma0 / sqrt(fan_in)


def test_lstm_carries_state_and_resets_at_episode_starts():
    net = QNetwork(num_actions=2, fcnet_hiddens=(8,), hiddens=(), use_lstm=True, lstm_cell_size=6)
    obs = jax.random.normal(jax.random.key(7), (2, 6, 3))
    params = net.init(RNGS, obs)
    (whole, state) = net.apply(params, obs)
    first_half, mid = net.apply(params, obs[:, :3])
    second_half, end = net.apply(params, obs[:, 3:], mid)
    np.testing.assert_allclose(whole.q, jnp.concatenate([first_half.q, second_half.q], 1), rtol=1e-5, atol=1e-6)
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), state, end)
    # A reset at step 3 makes steps 3.. equal to a fresh run on them.
    first = jnp.zeros((2, 6), bool).at[:, 3].set(True)
    reset, _ = net.apply(params, obs, None, first)
    fresh, _ = net.apply(params, obs[:, 3:])
    np.testing.assert_allclose(reset.q[:, 3:], fresh.q, rtol=1e-5, atol=1e-6)
    assert not np.allclose(reset.q[:, 3:], whole.q[:, 3:])
