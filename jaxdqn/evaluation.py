"""Evaluation episodes as a pure function (RLlib's ``evaluate()``).

``make_evaluate(env, act, num_episodes, max_steps)`` returns ``evaluate(params, key, eps=0.0)
-> Evaluation``: ``num_episodes`` environments run side by side, each for exactly one episode,
acting with ``act`` (the worker's: greedy, noisy layers at their mean weights, when
``evaluation_config.explore`` is False, RLlib DQN's default; else epsilon-greedy at ``eps`` with
fresh noise, as the behaviour policy acts). One agent or several: the agents' dict is a pytree,
and an episode's return sums the agents'. The loop is a ``lax.while_loop`` that stops when every
episode has ended (or after ``max_steps``), so it is jittable and vmappable over seeds.
"""

from __future__ import annotations

import functools
import operator
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxdqn.types import Env, episode_ended

Array = jax.Array
# (params, obs [N, ...], eps, key, memory) -> (actions [N], memory): how an evaluation acts
EvalAct = Callable[..., tuple[Any, Any]]


class Evaluation(NamedTuple):
    """One episode per environment."""

    episode_return: Array  # [N] float32
    episode_length: Array  # [N] int32
    finished: Array  # [N] bool: False only for an episode cut at max_steps


def default_max_steps(params: Any) -> int:
    """An env's own episode limit (gymnax ``max_steps_in_episode`` of its params), else 100k steps."""
    return int(getattr(params, "max_steps_in_episode", 100_000))


def make_evaluate(env: Env, act: EvalAct, num_episodes: int, max_steps: int, memory: Any = ()
                  ) -> Callable[..., Evaluation]:
    """``evaluate(params, key, eps=0.0)``: see the module docstring. ``memory``: the acting
    memory every episode starts from (a recurrent network's initial state; ``()`` for none)."""

    def evaluate(params: Any, key: Array, eps: Array | float = 0.0) -> Evaluation:
        key, *reset_keys = jax.random.split(key, 1 + num_episodes)
        obs, env_state = env.reset(jnp.stack(reset_keys))
        zeros = jnp.zeros((num_episodes,))
        carry = (obs, env_state, memory, key, zeros.astype(jnp.float32), zeros.astype(jnp.int32),
                 jnp.ones((num_episodes,), bool), jnp.int32(0))

        def running(carry) -> Array:
            *_, alive, t = carry
            return jnp.any(alive) & (t < max_steps)

        def body(carry):
            obs, env_state, memory, key, ret, length, alive, t = carry
            keys = jax.random.split(key, 2 + num_episodes)  # next, acting, one per env
            actions, memory = act(params, obs, eps, keys[1], memory)
            out, env_state = env.step(keys[2:], env_state, actions)
            key = keys[0]
            reward = functools.reduce(operator.add, jax.tree_util.tree_leaves(out.reward))
            ret = ret + jnp.where(alive, reward, 0.0)
            length = length + alive.astype(jnp.int32)
            return out.obs, env_state, memory, key, ret, length, alive & ~episode_ended(out), t + 1

        *_, ret, length, alive, _ = lax.while_loop(running, body, carry)
        return Evaluation(episode_return=ret, episode_length=length, finished=~alive)

    return evaluate
