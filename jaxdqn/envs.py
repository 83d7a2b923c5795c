"""gymnax environments: a factory by name (or a user's gymnax-API env) and batched steps that
keep gymnax 1.0's ``terminated`` / ``truncated`` apart.

``make_env("CartPole-v1")`` returns an ``EnvSpec``; ``reset(spec, key, num_envs)`` and
``step(spec, key, state, action)`` run ``E`` environments with ``vmap``. A step returns the
observation to act on next (after the automatic reset) and, separately, the true next
observation of the step (gymnax's ``info["final_observation"]``), which is what a transition
stores: a truncated episode bootstraps from it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, NamedTuple

import gymnax
import jax
import jax.numpy as jnp
from gymnax.environments import spaces

Array = jax.Array

# Names that are gymnax environments with other parameters.
ALIASES = {"CartPole-v0": ("CartPole-v1", {"max_steps_in_episode": 200})}


class EnvSpec(NamedTuple):
    """A discrete-action gymnax environment, its parameters and its shapes (static)."""

    env: Any
    params: Any
    obs_shape: tuple[int, ...]
    num_actions: int


class EnvStep(NamedTuple):
    """The outcome of stepping ``E`` environments once; leaves ``[E, ...]``."""

    obs: Array  # observation to act on next (the reset one where an episode ended)
    next_obs: Array  # the step's true next observation (before any reset)
    reward: Array  # float32
    terminated: Array  # bool
    truncated: Array  # bool


def valid_names() -> list[str]:
    """Discrete-action gymnax environments (and our aliases), by name."""
    names = []
    for name in gymnax.registered_envs:
        try:
            env, params = gymnax.make(name)
        except Exception:  # an optional dependency (e.g. MNIST data) may be missing
            continue
        if isinstance(env.action_space(params), spaces.Discrete):
            names.append(name)
    return sorted(names + list(ALIASES))


def make_env(env: str | Any, env_params: Mapping[str, Any] | tuple = (), params: Any = None) -> EnvSpec:
    """The ``EnvSpec`` for a gymnax name (``"CartPole-v1"``, ``"Breakout-MinAtar"``, ...) or a
    user's env object with the gymnax API, with ``env_params`` overriding fields of its params.

    Raises ``ValueError`` for an unknown name (listing the valid ones), a continuous action
    space, or an ``env_params`` key the environment does not have.
    """
    overrides = dict(env_params)
    if isinstance(env, str):
        name = env
        if name in ALIASES:
            name, alias_params = ALIASES[name]
            overrides = {**alias_params, **overrides}
        if name not in gymnax.registered_envs:
            raise ValueError(f"env={env!r} is not a gymnax environment; valid: {valid_names()}")
        env, default = gymnax.make(name)
        params = default if params is None else params
    elif params is None:
        params = env.default_params
    params = override_params(params, overrides)
    space = env.action_space(params)
    if not isinstance(space, spaces.Discrete):
        raise ValueError(f"env {getattr(env, 'name', env)!r} has a {type(space).__name__} action space; "
                         "DQN needs a Discrete one")
    obs_shape = tuple(env.observation_space(params).shape)
    return EnvSpec(env=env, params=params, obs_shape=obs_shape, num_actions=int(space.n))


def override_params(params: Any, overrides: Mapping[str, Any]) -> Any:
    """``params`` with the ``env_params`` ``overrides`` applied; an unknown field raises a
    ``ValueError`` naming it and listing the valid ones."""
    if not overrides:
        return params
    fields = {f.name for f in dataclasses.fields(params)} if dataclasses.is_dataclass(params) else set()
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise ValueError(f"env_params {unknown} are not fields of {type(params).__name__}; valid: {sorted(fields)}")
    return params.replace(**overrides)


def reset(spec: EnvSpec, key: Array, num_envs: int) -> tuple[Array, Any]:
    """``num_envs`` fresh episodes: ``(obs [E, *obs], env_state)``."""
    keys = jax.random.split(key, num_envs)
    return jax.vmap(spec.env.reset, in_axes=(0, None))(keys, spec.params)


def step(spec: EnvSpec, key: Array, env_state: Any, action: Array) -> tuple[EnvStep, Any]:
    """Step every environment once with ``action`` ``[E]`` (ended episodes reset themselves)."""
    keys = jax.random.split(key, action.shape[0])
    obs, env_state, reward, terminated, truncated, info = jax.vmap(
        spec.env.step, in_axes=(0, 0, 0, None)
    )(keys, env_state, action, spec.params)
    # gymnax marks a step that is both as terminated; it must not bootstrap.
    truncated = jnp.logical_and(truncated, jnp.logical_not(terminated))
    return (
        EnvStep(
            obs=obs,
            next_obs=info["final_observation"],
            reward=reward.astype(jnp.float32),
            terminated=terminated.astype(bool),
            truncated=truncated.astype(bool),
        ),
        env_state,
    )
