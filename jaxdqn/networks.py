"""Q-networks (flax linen): one module composed by flags, not a copy per variant.

torso (an MLP for vector observations; for images a conv stack alone, as RLlib's VisionNetwork,
which ignores ``fcnet_hiddens``) -> optional LSTM core -> head, where the head
is plain or dueling (``V + A - mean(A)``), scalar or distributional (C51 logits over
``num_atoms`` on ``[v_min, v_max]``), with dense or noisy (factorised Gaussian) layers.
Shapes: observations ``[B, *obs]`` (or ``[B, T, *obs]`` with the LSTM), Q-values ``[B, A]``,
logits ``[B, A, N]``.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax

from jaxdqn import _platform
from jaxdqn.config import ModelConfig, QHeadConfig

Array = jax.Array

ACTIVATION_FNS = {
    "tanh": jnp.tanh,
    "relu": nn.relu,
    "elu": nn.elu,
    "swish": nn.swish,
    "silu": nn.silu,
    "gelu": nn.gelu,
    "linear": lambda x: x,
}


class QOutput(NamedTuple):
    q: Array  # [..., A]
    logits: Array | None  # [..., A, N] for C51, else None


def default_conv_filters(obs_shape: Sequence[int]) -> tuple[tuple[int, int, int], ...]:
    """RLlib 1.x's ``get_filter_config`` for 84x84 and 42x42 images (the last layer's 11x11
    kernel covers what the first two leave). RLlib has no default for other shapes (it raises);
    ours: the Nature DQN stack above 84, RLlib's 42x42 one from 42, one 3x3 layer below (MinAtar)."""
    height, width = obs_shape[:2]
    if (height, width) == (84, 84):
        return ((16, 8, 4), (32, 4, 2), (256, 11, 1))
    if height > 84:
        return ((32, 8, 4), (64, 4, 2), (64, 3, 1))
    if height >= 42:
        return ((16, 4, 2), (32, 4, 2), (256, 11, 1))
    return ((16, 3, 1),)


def conv_padding(size: int, kernel: int, stride: int, padding: str) -> tuple[int, tuple[int, int]]:
    """One spatial axis under ``"SAME"`` or ``"VALID"`` padding: ``(output size, (pad low, pad
    high))``, as ``lax``'s."""
    if padding == "VALID":
        return (size - kernel) // stride + 1, (0, 0)
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return out, (total // 2, total - total // 2)


def image_patches(x: Array, kernel: int, stride: int, padding: str = "SAME") -> Array:
    """The ``kernel x kernel`` patches of images ``[..., H, W, C]``: ``[..., H', W', kernel *
    kernel * C]``, ordered (row, column, channel) as an ``HWIO`` kernel reshaped to
    ``[kernel * kernel * C, O]``."""
    height, width = x.shape[-3:-1]
    out_h, pad_h = conv_padding(height, kernel, stride, padding)
    out_w, pad_w = conv_padding(width, kernel, stride, padding)
    x = jnp.pad(x, [(0, 0)] * (x.ndim - 3) + [pad_h, pad_w, (0, 0)])
    rows = [lax.slice_in_dim(x, i, i + (out_h - 1) * stride + 1, stride, axis=-3) for i in range(kernel)]
    return jnp.concatenate(
        [lax.slice_in_dim(row, j, j + (out_w - 1) * stride + 1, stride, axis=-2) for row in rows for j in range(kernel)],
        axis=-1,
    )


class Conv(nn.Module):
    """A square convolution (``"SAME"`` or ``"VALID"`` padding) with ``nn.Conv``'s parameters
    (``kernel [k, k, C, O]``, ``bias [O]``, same initializers), so checkpoints do not depend on
    how it is computed: as ``lax.conv``, or on XLA:CPU as one matrix product over the patches
    (``_platform``)."""

    features: int
    kernel_size: int
    stride: int = 1
    padding: str = "SAME"

    @nn.compact
    def __call__(self, x: Array) -> Array:
        k = self.kernel_size
        kernel = self.param("kernel", nn.initializers.lecun_normal(), (k, k, x.shape[-1], self.features))
        bias = self.param("bias", nn.initializers.zeros_init(), (self.features,))
        if _platform.conv_as_matmul():
            return image_patches(x, k, self.stride, self.padding) @ kernel.reshape(-1, self.features) + bias
        lead = x.shape[:-3]
        y = lax.conv_general_dilated(x.reshape((-1,) + x.shape[-3:]), kernel, (self.stride, self.stride), self.padding,
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return y.reshape(lead + y.shape[1:]) + bias


class NoisyDense(nn.Module):
    """Factorised-Gaussian noisy linear layer (Fortunato et al. 2018).

    ``w = mu_w + sigma_w * f(eps_out) f(eps_in)^T`` with ``f(x) = sign(x) sqrt|x|``, fresh noise
    from the ``"noise"`` RNG stream on every call unless ``deterministic``. Initialised as RLlib
    1.x's ``_noisy_layer``: ``mu_w`` Glorot-uniform, ``mu_b`` 0, ``sigma_w ~ U(+-1/sqrt(in))`` and
    ``sigma_b = sigma0 / sqrt(in)`` (``sigma0`` scales only the bias noise).
    """

    features: int
    sigma0: float = 0.5

    @nn.compact
    def __call__(self, x: Array, deterministic: bool = False) -> Array:
        fan_in = x.shape[-1]
        bound = 1.0 / jnp.sqrt(fan_in)
        uniform = lambda key, shape: jax.random.uniform(key, shape, minval=-bound, maxval=bound)  # noqa: E731
        mu_w = self.param("mu_kernel", nn.initializers.glorot_uniform(), (fan_in, self.features))
        mu_b = self.param("mu_bias", nn.initializers.zeros, (self.features,))
        sigma_w = self.param("sigma_kernel", uniform, (fan_in, self.features))
        sigma_b = self.param("sigma_bias", nn.initializers.constant(self.sigma0 / jnp.sqrt(fan_in)), (self.features,))
        if deterministic:
            return x @ mu_w + mu_b
        key_in, key_out = jax.random.split(self.make_rng("noise"))
        scale = lambda e: jnp.sign(e) * jnp.sqrt(jnp.abs(e))  # noqa: E731
        eps_in = scale(jax.random.normal(key_in, (fan_in,)))
        eps_out = scale(jax.random.normal(key_out, (self.features,)))
        w = mu_w + sigma_w * jnp.outer(eps_in, eps_out)
        return x @ w + mu_b + sigma_b * eps_out


class QNetwork(nn.Module):
    """The Q-network of a torso (``ModelConfig``, RLlib's ``model``) and a Q head
    (``QHeadConfig``: ``hiddens``, ``dueling``, C51's atoms, noisy layers); see the module
    docstring."""

    num_actions: int
    model: ModelConfig = ModelConfig()
    head: QHeadConfig = QHeadConfig()

    @property
    def use_lstm(self) -> bool:
        return self.model.use_lstm

    def dense(self, features: int, name: str) -> Any:
        if self.head.noisy:
            return NoisyDense(features, self.head.sigma0, name=name)
        return nn.Dense(features, name=name)

    def apply_dense(self, layer: Any, x: Array, deterministic: bool) -> Array:
        return layer(x, deterministic) if self.head.noisy else layer(x)

    @property
    def support(self) -> Array:
        """The C51 atoms ``[N]``."""
        return jnp.linspace(self.head.v_min, self.head.v_max, self.head.num_atoms)

    def torso(self, obs: Array) -> Array:
        """Features ``[*lead, F]`` of observations ``[*lead, *obs]`` (lead: B, or B, T)."""
        lead = 2 if self.use_lstm else 1
        x = obs.astype(jnp.float32)
        if x.ndim - lead == 3:  # [*lead, H, W, C] images
            filters = self.model.conv_filters or default_conv_filters(x.shape[-3:])
            act = ACTIVATION_FNS[self.model.conv_activation]
            # RLlib's VisionNetwork: "same" padding, but "valid" in the last layer; its features
            # are the flattened last conv layer (fcnet_hiddens apply to vector observations only:
            # a dense tanh stack on raw 0-255 pixel features saturates, every state alike).
            for i, (out, kernel, stride) in enumerate(filters):
                padding = "VALID" if i == len(filters) - 1 else "SAME"
                x = act(Conv(out, kernel, stride, padding, name=f"conv_{i}")(x))
            return x.reshape(x.shape[:lead] + (-1,))
        x = x.reshape(x.shape[:lead] + (-1,))
        act = ACTIVATION_FNS[self.model.fcnet_activation]
        for i, width in enumerate(self.model.fcnet_hiddens):
            x = act(nn.Dense(width, name=f"fc_{i}")(x))
        return x

    def q_values(self, x: Array, deterministic: bool) -> QOutput:
        atoms = self.head.num_atoms

        def branch(x: Array, out: int, name: str) -> Array:
            for i, width in enumerate(self.head.hiddens):
                x = nn.relu(self.apply_dense(self.dense(width, f"{name}_hidden_{i}"), x, deterministic))
            return self.apply_dense(self.dense(out, f"{name}_out"), x, deterministic)

        advantages = branch(x, self.num_actions * atoms, "advantage").reshape(
            x.shape[:-1] + (self.num_actions, atoms)
        )
        if self.head.dueling:
            value = branch(x, atoms, "value").reshape(x.shape[:-1] + (1, atoms))
            advantages = value + advantages - jnp.mean(advantages, axis=-2, keepdims=True)
        if atoms == 1:
            return QOutput(q=advantages[..., 0], logits=None)
        probs = jax.nn.softmax(advantages, axis=-1)
        return QOutput(q=jnp.sum(probs * self.support, axis=-1), logits=advantages)

    def initial_state(self, batch_size: int) -> tuple[Array, Array]:
        """Zero LSTM state ``(c, h)``, each ``[B, cell]``."""
        zeros = jnp.zeros((batch_size, self.model.lstm_cell_size), jnp.float32)
        return zeros, zeros

    @nn.compact
    def __call__(
        self,
        obs: Array,
        state: tuple[Array, Array] | None = None,
        first: Array | None = None,
        deterministic: bool = False,
        all_states: bool = False,
    ) -> QOutput | tuple[QOutput, tuple[Array, Array]]:
        """Q-values for ``obs`` ``[B, *obs]``; with the LSTM, ``obs`` is ``[B, T, *obs]``,
        ``state`` the state before step 0 and ``first`` ``[B, T]`` where to reset it; returns
        ``(QOutput [B, T, ...], final state)``, or with ``all_states`` the state after every
        step, ``(c, h)`` each ``[B, T, cell]`` (the sequence loss bootstraps from them)."""
        if not self.use_lstm:
            return self.q_values(self.torso(obs), deterministic)
        features = self.torso(obs)  # [B, T, F]
        batch, steps = features.shape[:2]
        if state is None:
            state = self.initial_state(batch)
        if first is None:
            first = jnp.zeros((batch, steps), bool)
        cell = nn.OptimizedLSTMCell(self.model.lstm_cell_size, name="lstm")

        def step(cell, carry, inputs):
            x, reset = inputs
            carry = jax.tree_util.tree_map(lambda s: jnp.where(reset[:, None], 0.0, s), carry)
            carry, y = cell(carry, x)
            return carry, (y, carry) if all_states else y

        scan = nn.scan(step, variable_broadcast="params", split_rngs={"params": False},
                       in_axes=1, out_axes=1)
        state, outputs = scan(cell, state, (features, first))
        if all_states:
            outputs, state = outputs
        return self.q_values(outputs, deterministic), state
