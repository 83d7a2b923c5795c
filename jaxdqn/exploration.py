"""Schedules over sampled env steps and action selection (epsilon-greedy, greedy).

Noisy nets (``noisy=True``) explore through their noise *and* epsilon-greedy, as in RLlib (whose
DQN keeps its ``exploration_config`` with noisy layers); set ``initial_epsilon`` and
``final_epsilon`` to 0 for noise-only exploration (Fortunato et al.)."""

from __future__ import annotations

from typing import Any, Sequence

import jax
import jax.numpy as jnp

from jaxdqn.config import ExplorationConfig, Hyperparams

Array = jax.Array


def _difference(a: Any, b: Any) -> Any:
    """``b - a``: in Python (double precision, then rounded once) where both are Python numbers,
    as a static schedule computes it; in float32 where either is traced."""
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return b - a
    return jnp.float32(b) - jnp.float32(a)


def piecewise_linear(points: Sequence[tuple[Any, Any]], t: Array) -> Array:
    """RLlib's ``PiecewiseSchedule`` with ``outside_value`` the last point's value (as RLlib 1.x's
    learning-rate, epsilon and beta schedules all set it): linear between ``(timestep, value)``
    points, the last value before the first point and from the last point on; a jump where two
    points share a timestep. The number of points is static; ``t``, the timesteps and the values
    may be traced (a swept schedule)."""
    t = jnp.asarray(t, jnp.float32)
    # Unrolled over the static segments, each taking over from its start: a few elementwise ops
    # (``jnp.interp``'s searchsorted is a while loop on the CPU, run on every plan step).
    value = jnp.float32(points[-1][1])
    for (t0, v0), (t1, v1) in zip(points, points[1:]):
        span = _difference(t0, t1)
        if isinstance(span, (int, float)):  # static timesteps
            if span == 0:  # a jump: the new value from t1 on
                segment = jnp.float32(v1)
            else:
                frac = jnp.clip((t - t0) / jnp.float32(span), 0.0, 1.0)
                segment = jnp.float32(v0) + frac * jnp.float32(_difference(v0, v1))
        else:  # traced timesteps: the jump is a select
            frac = jnp.clip((t - t0) / jnp.maximum(span, 1.0), 0.0, 1.0)
            segment = jnp.where(span > 0, jnp.float32(v0) + frac * jnp.float32(_difference(v0, v1)),
                                jnp.float32(v1))
        value = jnp.where(t >= t0, segment, value)
    return jnp.broadcast_to(value, t.shape).astype(jnp.float32)


def epsilon(schedule: ExplorationConfig | Hyperparams, t: Array) -> Array:
    """Epsilon after ``t`` sampled steps: linear from ``initial_epsilon`` to ``final_epsilon``
    over ``epsilon_timesteps`` (an ``exploration_config``, or a plan's ``Hyperparams``)."""
    return piecewise_linear(
        [(0, schedule.initial_epsilon), (schedule.epsilon_timesteps, schedule.final_epsilon)], t
    )


def epsilon_greedy(key: Array, q: Array, eps: Array) -> Array:
    """Actions ``[B]`` int32 from ``q`` ``[B, A]``: uniform with probability ``eps``, else greedy.

    One draw of two words per row (one generator call, where a split and two draws were three;
    on XLA:CPU each threefry call is a loop of its own): ``u`` from the first word's high 24
    bits (``[0, 1)``, exact in float32) decides, the second word modulo ``A`` is the random
    action (bias below ``A / 2**32``)."""
    batch, num_actions = q.shape
    bits = jax.random.bits(key, (2, batch), jnp.uint32)
    u = (bits[0] >> 8).astype(jnp.float32) * jnp.float32(2.0**-24)
    random_actions = (bits[1] % jnp.uint32(num_actions)).astype(jnp.int32)
    return jnp.where(u < eps, random_actions, greedy(q))


def greedy(q: Array) -> Array:
    """``argmax_a q`` ``[B]`` int32."""
    return jnp.argmax(q, axis=-1).astype(jnp.int32)


def behaviour_epsilon(schedule: ExplorationConfig | Hyperparams, t: Array, *, explore: bool) -> Array:
    """The epsilon a behaviour policy acts with after ``t`` sampled steps: the schedule's, or 0
    with ``explore=False`` (RLlib's top-level ``explore`` key)."""
    return epsilon(schedule, t) if explore else jnp.float32(0.0)
