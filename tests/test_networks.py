"""Q-networks: shapes of every variant, and each head's formula checked by hand."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxdqn import DQNConfig, ModelConfig
from jaxdqn.config import QHeadConfig
from jaxdqn.networks import QNetwork, default_conv_filters

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
    config = DQNConfig(**changes)
    net = QNetwork(5, config.model, config.head)
    obs = jnp.ones((3,) + obs_shape)
    params = net.init(RNGS, obs)
    out = net.apply(params, obs, rngs={"noise": jax.random.key(2)})
    assert out.q.shape == (3, 5)
    if net.head.num_atoms > 1:
        assert out.logits.shape == (3, 5, net.head.num_atoms)
    else:
        assert out.logits is None


def test_dueling_head_is_value_plus_centred_advantage():
    net = QNetwork(3, ModelConfig(fcnet_hiddens=(8,)), QHeadConfig(hiddens=(), dueling=True))
    obs = jax.random.normal(jax.random.key(3), (4, 5))
    params = net.init(RNGS, obs)["params"]
    p = jax.tree_util.tree_map(np.asarray, params)
    f = np.tanh(np.asarray(obs) @ p["fc_0"]["kernel"] + p["fc_0"]["bias"])
    value = f @ p["value_out"]["kernel"] + p["value_out"]["bias"]  # [4, 1]
    adv = f @ p["advantage_out"]["kernel"] + p["advantage_out"]["bias"]  # [4, 3]
    expected = value + adv - adv.mean(axis=1, keepdims=True)
    np.testing.assert_allclose(net.apply({"params": params}, obs).q, expected, rtol=1e-5, atol=1e-6)


def test_distributional_q_is_the_mean_of_the_atoms():
    net = QNetwork(2, ModelConfig(fcnet_hiddens=(8,)), QHeadConfig(hiddens=(16,), dueling=False, num_atoms=7, v_min=-3.0, v_max=3.0))
    obs = jax.random.normal(jax.random.key(4), (4, 5))
    params = net.init(RNGS, obs)
    out = net.apply(params, obs)
    probs = jax.nn.softmax(out.logits, axis=-1)
    np.testing.assert_allclose(out.q, (probs * np.linspace(-3, 3, 7)).sum(-1), rtol=1e-5, atol=1e-6)


def test_noisy_layers_resample_noise_and_have_a_deterministic_mean():
    net = QNetwork(2, ModelConfig(fcnet_hiddens=(8,)), QHeadConfig(hiddens=(8,), noisy=True, sigma0=0.5))
    obs = jnp.ones((2, 4))
    params = net.init(RNGS, obs)
    a = net.apply(params, obs, rngs={"noise": jax.random.key(5)}).q
    b = net.apply(params, obs, rngs={"noise": jax.random.key(6)}).q
    assert not np.allclose(a, b)
    c = net.apply(params, obs, deterministic=True).q
    d = net.apply(params, obs, deterministic=True).q
    np.testing.assert_array_equal(c, d)


def test_noisy_layers_initialise_as_rllibs():
    """RLlib 1.x's ``_noisy_layer`` (dqn tf model): ``sigma_w ~ U(+-1/sqrt(in))``, ``sigma_b =
    sigma0 / sqrt(in)`` (``sigma0`` scales only the bias noise), ``w`` Glorot-uniform
    (``+-sqrt(6 / (in + out))``), ``b`` zeros."""
    fan_in, out = 64, 48
    net = QNetwork(2, ModelConfig(fcnet_hiddens=(fan_in,)), QHeadConfig(hiddens=(out,), noisy=True, sigma0=0.3))
    layer = net.init(RNGS, jnp.ones((1, 4)))["params"]["advantage_hidden_0"]
    bound = 1 / np.sqrt(fan_in)
    sigma_w = np.asarray(layer["sigma_kernel"])
    assert sigma_w.shape == (fan_in, out) and np.all(np.abs(sigma_w) <= bound)
    assert abs(sigma_w.std() - bound / np.sqrt(3)) < 0.1 * bound and abs(sigma_w.mean()) < 0.05 * bound  # U(-b, b)
    np.testing.assert_allclose(layer["sigma_bias"], 0.3 / np.sqrt(fan_in), rtol=1e-6)
    glorot = np.sqrt(6 / (fan_in + out))
    mu_w = np.asarray(layer["mu_kernel"])
    assert np.all(np.abs(mu_w) <= glorot) and abs(mu_w.std() - glorot / np.sqrt(3)) < 0.1 * glorot
    np.testing.assert_array_equal(layer["mu_bias"], 0.0)


def test_lstm_carries_state_and_resets_at_episode_starts():
    net = QNetwork(2, ModelConfig(fcnet_hiddens=(8,), use_lstm=True, lstm_cell_size=6), QHeadConfig(hiddens=()))
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


def numpy_conv(x, kernel, bias, stride, padding):
    """Plain-numpy convolution (cross-correlation; TF/lax "SAME" or "VALID" padding), the reference."""
    k = kernel.shape[0]
    b, h, w, _ = x.shape
    if padding == "VALID":
        out_h, out_w = (h - k) // stride + 1, (w - k) // stride + 1
    else:
        out_h, out_w = -(-h // stride), -(-w // stride)
    pad_h = max((out_h - 1) * stride + k - h, 0) if padding == "SAME" else 0
    pad_w = max((out_w - 1) * stride + k - w, 0) if padding == "SAME" else 0
    xp = np.pad(x, ((0, 0), (pad_h // 2, pad_h - pad_h // 2), (pad_w // 2, pad_w - pad_w // 2), (0, 0)))
    y = np.zeros((b, out_h, out_w, kernel.shape[-1]))
    for i in range(out_h):
        for j in range(out_w):
            window = xp[:, i * stride:i * stride + k, j * stride:j * stride + k, :]
            y[:, i, j] = np.einsum("bhwc,hwco->bo", window, kernel)
    return y + bias


@settings(max_examples=12, deadline=None)
@given(st.integers(1, 3), st.integers(5, 12), st.integers(5, 12), st.integers(1, 4), st.integers(1, 5),
       st.integers(1, 3), st.integers(1, 8), st.sampled_from(["SAME", "VALID"]), st.booleans(),
       st.integers(0, 2**31 - 1))
def test_conv_is_the_same_convolution_on_both_paths(batch, height, width, channels, kernel, stride, features,
                                                    padding, as_matmul, seed):
    """``Conv`` (patches @ kernel, XLA:CPU's path, or ``lax.conv``) equals a numpy convolution and
    has ``nn.Conv``'s parameters (names, shapes), so a checkpoint loads whichever path made it."""
    import flax.linen as nn

    from jaxdqn import _platform
    from jaxdqn.networks import Conv

    x = np.asarray(jax.random.normal(jax.random.key(seed), (batch, height, width, channels)))
    conv = Conv(features, kernel, stride, padding)
    params = jax.jit(conv.init)(jax.random.key(seed + 1), x)  # one program, not one per op
    reference = jax.eval_shape(nn.Conv(features, (kernel, kernel), (stride, stride), padding).init,
                               jax.random.key(seed + 1), x)
    assert jax.tree_util.tree_map(jnp.shape, params) == jax.tree_util.tree_map(jnp.shape, reference)
    p = jax.tree_util.tree_map(np.asarray, params)["params"]
    p["bias"] = np.asarray(jax.random.normal(jax.random.key(seed + 2), p["bias"].shape))
    original = _platform.conv_as_matmul
    _platform.conv_as_matmul = lambda: as_matmul
    try:
        y = jax.jit(conv.apply)({"params": p}, x)
    finally:
        _platform.conv_as_matmul = original
    np.testing.assert_allclose(np.asarray(y), numpy_conv(x, p["kernel"], p["bias"], stride, padding), rtol=1e-4,
                               atol=1e-4)


def test_conv_keeps_leading_axes():
    """Observations ``[B, T, H, W, C]`` (the LSTM's) convolve frame by frame."""
    from jaxdqn.networks import Conv

    x = jax.random.normal(jax.random.key(0), (2, 3, 6, 6, 2))
    conv = Conv(4, 3, 2, "SAME")
    params = conv.init(jax.random.key(1), x)
    y = conv.apply(params, x)
    assert y.shape == (2, 3, 3, 3, 4)
    np.testing.assert_allclose(y[1, 2], conv.apply(params, x[1, 2][None])[0], rtol=1e-6)


def test_conv_torso_pads_as_rllibs_vision_network():
    """RLlib's VisionNetwork: "same" padding in every conv layer but the last, which is "valid":
    MinAtar's one 3x3 layer gives 8 x 8 x 16 features (the MinAtar paper's 1024), RLlib's 42x42
    filters end in 1 x 1 x 256. As there, ``fcnet_hiddens`` (here their default, two tanh layers
    of 256) add no layer after the convs: the features are the last conv layer's."""
    # RLlib 1.x's get_filter_config: the defaults at 84x84 and 42x42.
    assert default_conv_filters((84, 84, 4)) == ((16, 8, 4), (32, 4, 2), (256, 11, 1))
    assert default_conv_filters((42, 42, 4)) == ((16, 4, 2), (32, 4, 2), (256, 11, 1))
    for obs_shape, filters, features in [((10, 10, 4), ((16, 3, 1),), 8 * 8 * 16),
                                         ((42, 42, 4), ((16, 4, 2), (32, 4, 2), (256, 11, 1)), 256),
                                         ((84, 84, 4), ((16, 8, 4), (32, 4, 2), (256, 11, 1)), 256),
                                         ((84, 84, 4), ((32, 8, 4), (64, 4, 2), (64, 3, 1)), 9 * 9 * 64)]:
        net = QNetwork(3, ModelConfig(conv_filters=filters), QHeadConfig(hiddens=(), dueling=False))
        assert net.model.fcnet_hiddens == (256, 256)
        obs = jnp.zeros((1,) + obs_shape)
        params = net.init(RNGS, obs)["params"]
        assert sorted(params) == ["advantage_out"] + [f"conv_{i}" for i in range(len(filters))]
        assert params["advantage_out"]["kernel"].shape == (features, 3), obs_shape
