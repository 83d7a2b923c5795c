"""Evaluation episodes as a pure function (RLlib's ``evaluate()``).

``make_evaluate(spec, network, num_episodes, explore=False)`` returns ``evaluate(params, key,
eps=0.0) -> Evaluation``: ``num_episodes`` environments run side by side, each for exactly one
episode. ``explore=False`` (``evaluation_config.explore``, RLlib DQN's default) acts greedily,
noisy layers at their mean weights; ``explore=True`` acts epsilon-greedily at ``eps`` on Q-values
with fresh noise, as the behaviour policy does. The loop is a ``lax.while_loop`` that stops when
every episode has ended (or after ``max_steps``), so it is jittable and vmappable over seeds.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxdqn import envs, exploration
from jaxdqn.networks import QNetwork
from jaxdqn.types import episode_ended

Array = jax.Array


class Evaluation(NamedTuple):
    """One greedy episode per environment."""

    episode_return: Array  # [N] float32
    episode_length: Array  # [N] int32
    finished: Array  # [N] bool: False only for an episode cut at max_steps


def default_max_steps(spec: envs.EnvSpec) -> int:
    """The env's own episode limit (gymnax ``max_steps_in_episode``), else 100k steps."""
    return int(getattr(spec.params, "max_steps_in_episode", 100_000))


def greedy_actions(network: QNetwork, params: Any, obs: Array) -> Array:
    """``argmax_a Q(obs, a)`` ``[B]``, noise-free."""
    return exploration.greedy(network.apply(params, obs, deterministic=True).q)


def greedy_recurrent_actions(network: QNetwork, params: Any, obs: Array, state: Any, first: Array
                             ) -> tuple[Array, Any]:
    """Greedy actions ``[B]`` of a recurrent network and its next state, from ``state`` (reset
    where ``first`` ``[B]``: ``obs`` starts an episode)."""
    out, state = network.apply(params, obs[:, None], state, first[:, None], deterministic=True)
    return exploration.greedy(out.q[:, 0]), state


def run_episodes(reset: Callable[[Array], tuple[Any, Any]], step: Callable[..., tuple[Any, Any, Any, Array, Array]],
                 memory: Any, num_episodes: int, max_steps: int, key: Array) -> Evaluation:
    """One episode per env, side by side, until all have ended (or ``max_steps``): the greedy loop
    shared by the single- and multi-agent plans. ``reset(key) -> (obs, env_state)``;
    ``step(obs, env_state, memory, key) -> (obs, env_state, memory, reward [N], done [N])``."""
    reset_key, key = jax.random.split(key)
    obs, env_state = reset(reset_key)
    carry = (obs, env_state, memory, key, jnp.zeros((num_episodes,), jnp.float32),
             jnp.zeros((num_episodes,), jnp.int32), jnp.ones((num_episodes,), bool), jnp.int32(0))

    def running(carry) -> Array:
        *_, alive, t = carry
        return jnp.any(alive) & (t < max_steps)

    def body(carry):
        obs, env_state, memory, key, ret, length, alive, t = carry
        key, step_key = jax.random.split(key)
        obs, env_state, memory, reward, done = step(obs, env_state, memory, step_key)
        ret = ret + jnp.where(alive, reward, 0.0)
        length = length + alive.astype(jnp.int32)
        return obs, env_state, memory, key, ret, length, alive & ~done, t + 1

    *_, ret, length, alive, _ = lax.while_loop(running, body, carry)
    return Evaluation(episode_return=ret, episode_length=length, finished=~alive)


def explore_actions(network: QNetwork, params: Any, obs: Array, eps: Array, key: Array,
                    memory: Any = None) -> Any:
    """Behaviour actions ``[B]``: epsilon-greedy at ``eps`` on Q-values with fresh noise (and,
    for a recurrent network, from ``memory``, never reset: one episode per env)."""
    noise_key, act_key = jax.random.split(key)
    if memory is None:
        return exploration.epsilon_greedy(act_key, network.apply(params, obs, rngs={"noise": noise_key}).q, eps)
    first = jnp.zeros((obs.shape[0], 1), bool)
    out, memory = network.apply(params, obs[:, None], memory, first, rngs={"noise": noise_key})
    return exploration.epsilon_greedy(act_key, out.q[:, 0], eps), memory


def make_evaluate(spec: envs.EnvSpec, network: QNetwork, num_episodes: int,
                  max_steps: int | None = None, *, explore: bool = False) -> Callable[..., Evaluation]:
    """``evaluate(params, key, eps=0.0)``: ``num_episodes`` episodes; see the module docstring."""
    limit = default_max_steps(spec) if max_steps is None else max_steps

    def evaluate(params: Any, key: Array, eps: Array | float = 0.0) -> Evaluation:
        def step(obs, env_state, memory, key):
            if explore:
                act_key, key = jax.random.split(key)
                out = explore_actions(network, params, obs, eps, act_key, memory if network.use_lstm else None)
                action, memory = out if network.use_lstm else (out, memory)
            elif network.use_lstm:  # one episode per env: the state starts at zeros, no reset needed
                action, memory = greedy_recurrent_actions(network, params, obs, memory,
                                                          jnp.zeros((num_episodes,), bool))
            else:
                action = greedy_actions(network, params, obs)
            out, env_state = envs.step(spec, key, env_state, action)
            return out.obs, env_state, memory, out.reward, episode_ended(out)

        memory = network.initial_state(num_episodes) if network.use_lstm else ()
        return run_episodes(lambda k: envs.reset(spec, k, num_episodes), step, memory, num_episodes, limit, key)

    return evaluate
