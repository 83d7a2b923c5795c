"""TD losses for DQN-family learners, as rlax-style single-transition functions.

Every ``*_td`` function takes one transition (time suffixes as in rlax: ``q_tm1`` at the state
acted in, ``q_t`` at the bootstrap state) and is vmapped over the batch by the learner.
``discount_t`` is the full bootstrap factor: ``gamma ** k`` times 0 if the episode terminated
within the ``k`` steps (see ``n_step_returns``).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

Array = jax.Array


def q_learning_td(q_tm1: Array, a_tm1: Array, r_t: Array, discount_t: Array, q_t: Array) -> Array:
    """``r + discount * max_a q_t[a] - q_tm1[a_tm1]``; ``q_*`` are ``[A]``. No gradient through the target."""
    target = r_t + discount_t * jnp.max(q_t)
    return jax.lax.stop_gradient(target) - q_tm1[a_tm1]


def double_q_learning_td(
    q_tm1: Array, a_tm1: Array, r_t: Array, discount_t: Array, q_t_value: Array, q_t_selector: Array
) -> Array:
    """Double Q-learning: the online net (``q_t_selector``) picks, the target net evaluates."""
    target = r_t + discount_t * q_t_value[jnp.argmax(q_t_selector)]
    return jax.lax.stop_gradient(target) - q_tm1[a_tm1]


def h_function(x: Array, epsilon: float) -> Array:
    """R2D2's value rescaling ``h(x) = sign(x) (sqrt(|x| + 1) - 1) + epsilon x`` (Pohlen et al.
    2018): squashes large returns so one network fits games of any reward scale."""
    return jnp.sign(x) * (jnp.sqrt(jnp.abs(x) + 1.0) - 1.0) + epsilon * x


def h_inverse(x: Array, epsilon: float) -> Array:
    """The inverse of ``h_function`` in closed form:
    ``sign(x) (((sqrt(1 + 4 epsilon (|x| + 1 + epsilon)) - 1) / (2 epsilon))^2 - 1)``."""
    root = (jnp.sqrt(1.0 + 4.0 * epsilon * (jnp.abs(x) + 1.0 + epsilon)) - 1.0) / (2.0 * epsilon)
    return jnp.sign(x) * (root**2 - 1.0)


def rescaled_target(r_t: Array, discount_t: Array, v_t: Array, epsilon: float) -> Array:
    """R2D2's target ``h(r + discount * h^-1(v))`` of the bootstrap value ``v_t`` (in the
    rescaled space the network learns)."""
    return h_function(r_t + discount_t * h_inverse(v_t, epsilon), epsilon)


def huber(x: Array, delta: float = 1.0) -> Array:
    """Huber loss: ``0.5 x^2`` for ``|x| <= delta``, ``delta (|x| - 0.5 delta)`` beyond (RLlib's)."""
    abs_x = jnp.abs(x)
    quadratic = jnp.minimum(abs_x, delta)
    return 0.5 * quadratic**2 + delta * (abs_x - quadratic)


def mse(x: Array) -> Array:
    """Squared loss ``0.5 x^2`` (RLlib's ``td_error_loss_fn="mse"``)."""
    return 0.5 * x**2


def weighted_mean(losses: Array, weights: Array) -> Array:
    """Importance-weighted mean over the batch: ``mean(w * loss)``."""
    return jnp.mean(weights * losses)


UNROLLED_N_STEP = 16  # up to this look-ahead the n-step sum is unrolled (fewer, fused kernels)


def n_step_returns(
    rewards: Array, terminated: Array, truncated: Array, *, gamma: float, n: int
) -> tuple[Array, Array, Array]:
    """n-step returns along one time axis, with the true discount for short episodes.

    Args:
      rewards, terminated, truncated: ``[T]``; step ``t`` ends its episode if either flag is set.
      gamma: the per-step discount; n: the look-ahead (static).

    Returns ``(returns, discounts, steps)``, each ``[T]``: ``returns[t] = sum_{j<k} gamma^j
    r[t+j]`` over the ``k = steps[t] <= n`` steps actually taken (stopping at the episode's end
    and at the end of the window); ``discounts[t] = gamma^k`` if the bootstrap state after those
    steps is to be used, 0 if the episode terminated within them. A truncated episode bootstraps
    with ``gamma^k`` (RLlib always uses ``gamma^n``, its issue #4626). The bootstrap state of ``t``
    is the next observation of step ``t + k - 1``.
    """
    length = rewards.shape[0]
    rewards = rewards.astype(jnp.float32)
    positions = jnp.arange(length)

    def look_ahead(j: Any, scale: Any, carry: tuple[Array, ...]) -> tuple[Array, ...]:
        """Step ``t + j`` into every return still inside its episode and the window."""
        returns, steps, alive, ended_by_termination = carry
        idx = positions + j
        take = alive & (idx < length)
        safe = jnp.minimum(idx, length - 1)
        returns = returns + jnp.where(take, scale * rewards[safe], 0.0)
        steps = steps + take.astype(jnp.int32)
        ended_by_termination = ended_by_termination | (take & terminated[safe])
        alive = take & ~(terminated[safe] | truncated[safe])
        return returns, steps, alive, ended_by_termination

    carry = (jnp.zeros((length,), jnp.float32), jnp.zeros((length,), jnp.int32), jnp.ones((length,), bool),
             jnp.zeros((length,), bool))
    reach = min(n, length)  # later look-aheads fall outside the window
    if reach <= UNROLLED_N_STEP:
        for j in range(reach):
            carry = look_ahead(j, gamma**j, carry)
    else:  # a rolled loop: the program's size does not grow with n
        carry = lax.fori_loop(0, reach, lambda j, c: look_ahead(j, jnp.power(jnp.float32(gamma), j), c), carry)
    returns, steps, _, ended_by_termination = carry
    discounts = jnp.where(ended_by_termination, 0.0, jnp.power(jnp.float32(gamma), steps))
    return returns, discounts.astype(jnp.float32), steps


def categorical_projection(z_target: Array, probs: Array, z_support: Array) -> Array:
    """Project the distribution ``probs`` on atoms ``z_target`` onto the fixed ``z_support``.

    Both supports are ``[N]``; ``z_support`` is evenly spaced. Each target atom (clipped to the
    support's range) splits its mass between its two neighbouring support atoms in proportion to
    closeness; a target atom that falls exactly on a support atom (``floor == ceil``) gives it all
    of its mass. This is the triangular-kernel form, so that case needs no special branch.
    """
    v_min, v_max = z_support[0], z_support[-1]
    delta = (v_max - v_min) / (z_support.shape[0] - 1)
    clipped = jnp.clip(z_target, v_min, v_max)
    weights = jnp.clip(1.0 - jnp.abs(clipped[None, :] - z_support[:, None]) / delta, 0.0, 1.0)
    return weights @ probs


def categorical_td(
    logits_tm1: Array,
    a_tm1: Array,
    r_t: Array,
    discount_t: Array,
    probs_t: Array,
    a_t: Array,
    z_support: Array,
) -> Array:
    """C51's cross-entropy between the projected target and the predicted distribution.

    ``logits_tm1`` ``[A, N]`` online logits; ``probs_t`` ``[A, N]`` target-network probabilities;
    ``a_t`` the bootstrap action (greedy, or the online argmax for double Q). Returns the scalar
    loss, which is also the TD error used for priorities (as in RLlib).
    """
    target = categorical_projection(r_t + discount_t * z_support, probs_t[a_t], z_support)
    log_probs = jax.nn.log_softmax(logits_tm1[a_tm1])
    return -jnp.sum(jax.lax.stop_gradient(target) * log_probs)


def masked_sequence_mean(values: Array, mask: Array, *, burn_in: int) -> Array:
    """Mean of ``values`` ``[B, L]`` over valid steps after the burn-in, per sequence ``[B]``.

    Burn-in steps only warm up the recurrent state: they carry no loss. A sequence without a
    valid step gives 0.
    """
    keep = mask.astype(values.dtype).at[:, :burn_in].set(0.0)
    return jnp.sum(values * keep, axis=1) / jnp.maximum(jnp.sum(keep, axis=1), 1.0)
