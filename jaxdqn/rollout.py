"""Rollouts: ``E`` vmapped gymnax environments stepped for a fragment, turned into n-step
transitions that are exact across fragment boundaries.

The actor keeps the last ``n - 1`` raw steps of the previous fragment (``ActorState.pending``):
a fragment of ``F`` new steps is appended to them, and the first ``F`` steps of that window,
each of which now sees ``n - 1`` steps ahead, become transitions. The n-step return of a step
stops at its episode's end (``losses.n_step_returns``: ``gamma^k`` for the ``k`` steps taken, 0
after a termination), so a transition never mixes two episodes. ``prime`` fills ``pending``
once before the first fragment, so every fragment emits exactly ``F * E`` transitions (static
shapes).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxdqn import envs, losses
from jaxdqn.types import Transition

Array = jax.Array


class RawStep(NamedTuple):
    """One environment step before n-step assembly; leaves ``[..., E, ...]``."""

    obs: Array
    action: Array  # int32
    reward: Array  # float32
    terminated: Array  # bool
    truncated: Array  # bool
    next_obs: Array  # the true successor (gymnax's final observation at an episode's end)


class ActorState(NamedTuple):
    env_state: Any
    obs: Array  # [E, *obs], to act on next
    episode_return: Array  # [E] float32, of the running episodes
    episode_length: Array  # [E] int32
    pending: RawStep  # leaves [n - 1, E, ...]: the look-ahead carried into the next fragment


class Episodes(NamedTuple):
    """Episodes that ended during a fragment: ``done`` marks where, ``[F, E]``."""

    done: Array  # bool
    episode_return: Array  # float32, valid where done
    episode_length: Array  # int32, valid where done


Policy = Callable[[Any, Array, Array], Array]  # (params, obs [E, *obs], key) -> actions [E]


def run_steps(spec: envs.EnvSpec, policy: Policy, params: Any, actor: ActorState, key: Array,
              num_steps: int) -> tuple[ActorState, RawStep, Episodes]:
    """Step every environment ``num_steps`` times with ``policy``; raw steps ``[T, E]``."""

    def body(actor: ActorState, key: Array):
        act_key, env_key = jax.random.split(key)
        action = policy(params, actor.obs, act_key)
        out, env_state = envs.step(spec, env_key, actor.env_state, action)
        done = out.terminated | out.truncated
        ret = actor.episode_return + out.reward
        length = actor.episode_length + 1
        raw = RawStep(obs=actor.obs, action=action.astype(jnp.int32), reward=out.reward,
                      terminated=out.terminated, truncated=out.truncated, next_obs=out.next_obs)
        episodes = Episodes(done=done, episode_return=ret, episode_length=length)
        actor = actor._replace(env_state=env_state, obs=out.obs,
                               episode_return=jnp.where(done, 0.0, ret),
                               episode_length=jnp.where(done, 0, length))
        return actor, (raw, episodes)

    if num_steps == 1:  # no one-trip loop (see plan.repeat)
        actor, out = body(actor, key)
        raw, episodes = jax.tree_util.tree_map(lambda x: x[None], out)
    else:
        actor, (raw, episodes) = lax.scan(body, actor, jax.random.split(key, num_steps))
    return actor, raw, episodes


def init(spec: envs.EnvSpec, key: Array, num_envs: int, n_step: int) -> ActorState:
    """Fresh episodes; ``pending`` is empty-shaped until ``prime`` fills it."""
    obs, env_state = envs.reset(spec, key, num_envs)
    pending = RawStep(
        obs=jnp.zeros((n_step - 1,) + obs.shape, obs.dtype),
        action=jnp.zeros((n_step - 1, num_envs), jnp.int32),
        reward=jnp.zeros((n_step - 1, num_envs), jnp.float32),
        terminated=jnp.zeros((n_step - 1, num_envs), bool),
        truncated=jnp.zeros((n_step - 1, num_envs), bool),
        next_obs=jnp.zeros((n_step - 1,) + obs.shape, obs.dtype),
    )
    return ActorState(env_state=env_state, obs=obs, episode_return=jnp.zeros((num_envs,), jnp.float32),
                      episode_length=jnp.zeros((num_envs,), jnp.int32), pending=pending)


def prime(spec: envs.EnvSpec, policy: Policy, params: Any, actor: ActorState, key: Array
          ) -> tuple[ActorState, Episodes]:
    """Take the first ``n - 1`` steps into ``pending`` (no transitions yet)."""
    steps = actor.pending.action.shape[0]  # n - 1; a zero-length scan when n == 1
    actor, raw, episodes = run_steps(spec, policy, params, actor, key, steps)
    return actor._replace(pending=raw), episodes


def n_step_transitions(window: RawStep, *, count: int, gamma: float, n: int) -> Transition:
    """Transitions ``[count * E]`` for the first ``count`` steps of ``window`` (``[count + n - 1, E]``)."""
    returns, discounts, steps = jax.vmap(
        lambda r, te, tr: losses.n_step_returns(r, te, tr, gamma=gamma, n=n), in_axes=1, out_axes=1
    )(window.reward, window.terminated, window.truncated)  # [W, E] each
    length, num_envs = window.reward.shape
    last = jnp.arange(length)[:, None] + steps - 1  # [W, E]: the step whose successor bootstraps
    next_obs = jnp.take_along_axis(
        window.next_obs, last.reshape(last.shape + (1,) * (window.next_obs.ndim - 2)), axis=0
    )

    def head(x: Array) -> Array:  # the first ``count`` steps, flattened time-major to [count * E]
        return x[:count].reshape((count * num_envs,) + x.shape[2:])

    return Transition(obs=head(window.obs), action=head(window.action), reward=head(returns),
                      discount=head(discounts), next_obs=head(next_obs))


def fragment(spec: envs.EnvSpec, policy: Policy, params: Any, actor: ActorState, key: Array, *,
             length: int, gamma: float, n: int) -> tuple[ActorState, Transition, Episodes]:
    """Run ``length`` steps per env; return ``length * E`` n-step transitions and the episodes."""
    actor, raw, episodes = run_steps(spec, policy, params, actor, key, length)
    window = jax.tree_util.tree_map(lambda p, r: jnp.concatenate([p, r]), actor.pending, raw)
    transitions = n_step_transitions(window, count=length, gamma=gamma, n=n)
    pending = jax.tree_util.tree_map(lambda w: w[length:], window)
    return actor._replace(pending=pending), transitions, episodes
