"""gymnax environments: a factory by name (or a user's gymnax-API env) and batched steps that
keep gymnax 1.0's ``terminated`` / ``truncated`` apart.

``make_env("CartPole-v1")`` returns an ``EnvSpec``; ``reset(spec, keys)`` and
``step(spec, keys, state, action)`` run ``E`` environments with ``vmap``, one key each. A step returns the
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
from flax import struct
from gymnax.environments import spaces
from gymnax.wrappers.purerl import GymnaxWrapper

from jaxdqn import atari
from jaxdqn.types import Env, EnvStep

Array = jax.Array

# Names that are gymnax environments with other parameters.
ALIASES = {"CartPole-v0": ("CartPole-v1", {"max_steps_in_episode": 200})}

# ``env_params`` keys that wrap the environment rather than set a field of its params; named as
# gym's / ALE's ``make`` keywords (what an RLlib ``env_config`` for Atari holds).
WRAPPER_KEYS = ("repeat_action_probability", "full_action_space")


class EnvSpec(NamedTuple):
    """A discrete-action gymnax environment, its parameters and its shapes (static).

    ``obs_dtype``: the dtype observations are acted on and stored in, where it is not the env's
    own (None): uint8 for observations of small non-negative integers such as MinAtar's 0/1
    channels, a quarter of float32's replay memory at the same values (the network computes in
    float32 either way, so learning is bitwise the same)."""

    env: Any
    params: Any
    obs_shape: tuple[int, ...]
    num_actions: int
    obs_dtype: Any = None


@struct.dataclass
class StickyState:
    """The wrapped env's state and the action it executed last (0, no-op, after a reset)."""

    env_state: Any
    last_action: Array


class StickyActions(GymnaxWrapper):
    """Sticky actions (Machado et al. 2018; MinAtar's ``sticky_action_prob``): on each step,
    with probability ``prob`` the environment repeats the action it executed last instead of the
    agent's. The first action of an episode follows a no-op (0), as in MinAtar and ALE."""

    def __init__(self, env: Any, prob: float):
        super().__init__(env)
        self.prob = prob

    def reset(self, key: Array, params: Any = None) -> tuple[Array, StickyState]:
        obs, state = self._env.reset(key, params)
        return obs, StickyState(state, jnp.zeros((), jnp.int32))

    def step(self, key: Array, state: StickyState, action: Array, params: Any = None) -> tuple:
        key_sticky, key_step = jax.random.split(key)
        action = jnp.where(jax.random.uniform(key_sticky) < self.prob, state.last_action, action).astype(jnp.int32)
        obs, env_state, reward, terminated, truncated, info = self._env.step(key_step, state.env_state, action, params)
        last_action = jnp.where(jnp.logical_or(terminated, truncated), 0, action)
        return obs, StickyState(env_state, last_action), reward, terminated, truncated, info


class FullActionSet(GymnaxWrapper):
    """The full action set of a MinAtar game (``n l u r d f``, 6 actions) over an env that acts on
    its minimal set: an action outside the minimal set is the no-op, which is what the game does
    with it (MinAtar's and ALE's ``full_action_space``)."""

    def __init__(self, env: Any):
        super().__init__(env)
        full, minimal = getattr(env, "full_action_set", None), getattr(env, "minimal_action_set", None)
        if full is None or minimal is None:
            raise ValueError(f"env_params full_action_space=True needs an env with full_action_set and "
                             f"minimal_action_set (the MinAtar games); {getattr(env, 'name', env)!r} has none")
        full, minimal = [int(a) for a in full], [int(a) for a in minimal]
        noop = minimal.index(0)
        self.to_minimal = jnp.asarray([minimal.index(a) if a in minimal else noop for a in full], jnp.int32)

    def action_space(self, params: Any = None) -> spaces.Discrete:
        return spaces.Discrete(int(self.to_minimal.shape[0]))

    @property
    def num_actions(self) -> int:
        return int(self.to_minimal.shape[0])

    def step(self, key: Array, state: Any, action: Array, params: Any = None) -> tuple:
        return self._env.step(key, state, self.to_minimal[action], params)


def wrap(env: Any, options: Mapping[str, Any]) -> Any:
    """``env`` under the wrappers that ``options`` (``WRAPPER_KEYS``) ask for: the full action set
    first (the agent's action space), then sticky actions (they repeat the executed action)."""
    if options.get("full_action_space", False):
        env = FullActionSet(env)
    prob = options.get("repeat_action_probability", 0.0)
    if prob:
        env = StickyActions(env, float(prob))
    return env


def check_wrapper_options(options: Mapping[str, Any]) -> None:
    """Refuses a wrapper option of the wrong type or range, naming it."""
    prob = options.get("repeat_action_probability", 0.0)
    if isinstance(prob, bool) or not isinstance(prob, (int, float)) or not 0.0 <= prob < 1.0:
        raise ValueError(f"env_params repeat_action_probability={prob!r} is invalid: must be a number in [0, 1)")
    full = options.get("full_action_space", False)
    if not isinstance(full, bool):
        raise ValueError(f"env_params full_action_space={full!r} is invalid: must be a bool")


def is_known(name: str) -> bool:
    """Whether ``name`` is a gymnax environment or one of our aliases (without building it)."""
    return name in gymnax.registered_envs or name in ALIASES


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


def make_env(env: str | Any, env_params: Mapping[str, Any] | tuple = (), params: Any = None, *,
             num_envs: int = 1, runs: int = 1) -> EnvSpec:
    """The ``EnvSpec`` for a gymnax name (``"CartPole-v1"``, ``"Breakout-MinAtar"``, ...) or a
    user's env object with the gymnax API, with ``env_params`` overriding fields of its params.
    ``num_envs`` and ``runs`` size an Atari game's ALE batch (``runs`` vmapped runs of
    ``num_envs`` games each, ``atari.AtariEnv``); a gymnax env is vmapped instead.

    Raises ``ValueError`` for an unknown name (listing the valid ones), a continuous action
    space, or an ``env_params`` key the environment does not have.
    """
    overrides = dict(env_params)
    if atari.is_atari(env):  # a batch of ALE games: ``num_envs`` of them, ALE's own options
        game = atari.AtariEnv(env, num_envs, overrides, runs=runs)
        return EnvSpec(env=game, params=None, obs_shape=game.obs_shape, num_actions=game.num_actions)
    options = {key: overrides.pop(key) for key in WRAPPER_KEYS if key in overrides}
    check_wrapper_options(options)
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
    env = wrap(env, options)
    space = env.action_space(params)
    if not isinstance(space, spaces.Discrete):
        raise ValueError(f"env {getattr(env, 'name', env)!r} has a {type(space).__name__} action space; "
                         "DQN needs a Discrete one")
    obs_shape = tuple(env.observation_space(params).shape)
    obs_dtype = jnp.uint8 if name_of(env).endswith("-MinAtar") else None  # 0/1 channels
    return EnvSpec(env=env, params=params, obs_shape=obs_shape, num_actions=int(space.n), obs_dtype=obs_dtype)


def name_of(env: Any) -> str:
    """A gymnax env's registered name ("" for one without)."""
    name = getattr(env, "name", "")
    return name if isinstance(name, str) else ""


def stored(spec: EnvSpec, obs: Array) -> Array:
    """``obs`` in the spec's ``obs_dtype`` (unchanged without one)."""
    return obs if spec.obs_dtype is None else obs.astype(spec.obs_dtype)


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


class HostParams(NamedTuple):
    """What the plan knows of an env that steps on the host beyond its shapes."""

    atari: bool = False  # an Atari game (rewards clipped for the learner as RLlib's DeepMind preprocessing)


def host_spec(obs_shape: tuple[int, ...], num_actions: int, obs_dtype: Any = None, *, atari: bool = False
              ) -> EnvSpec:
    """The spec of an env that steps on the host, outside the compiled program (a Gymnasium env
    of the shell's rollout workers, an EnvPool batch): shapes only, no env."""
    return EnvSpec(env=None, params=HostParams(atari=atari), obs_shape=tuple(obs_shape),
                   num_actions=int(num_actions), obs_dtype=obs_dtype)


def is_batched(spec: EnvSpec) -> bool:
    """Whether the env is one batch stepped as a whole (``atari.AtariEnv``), not a gymnax env vmapped."""
    return getattr(spec.env, "batched", False)


def reset(spec: EnvSpec, keys: Array) -> tuple[Array, Any]:
    """Fresh episodes, one per key ``[E]``: ``(obs [E, *obs], env_state)``."""
    if is_batched(spec):
        if keys.shape[0] != spec.env.num_envs:
            raise ValueError(f"this {spec.env.name} env holds {spec.env.num_envs} games, not {keys.shape[0]}")
        return spec.env.reset_all(keys)
    obs, env_state = jax.vmap(spec.env.reset, in_axes=(0, None))(keys, spec.params)
    return stored(spec, obs), env_state


def step(spec: EnvSpec, keys: Array, env_state: Any, action: Array) -> tuple[EnvStep, Any]:
    """Step every environment once with ``action`` ``[E]`` and its key ``[E]`` (ended episodes
    reset themselves)."""
    if is_batched(spec):
        return spec.env.step_all(keys, env_state, action)
    obs, env_state, reward, terminated, truncated, info = jax.vmap(
        spec.env.step, in_axes=(0, 0, 0, None)
    )(keys, env_state, action, spec.params)
    # gymnax marks a step that is both as terminated; it must not bootstrap.
    truncated = jnp.logical_and(truncated, jnp.logical_not(terminated))
    return (
        EnvStep(
            obs=stored(spec, obs),
            next_obs=stored(spec, info["final_observation"]),
            reward=reward.astype(jnp.float32),
            terminated=terminated.astype(bool),
            truncated=truncated.astype(bool),
        ),
        env_state,
    )


def functions(spec: EnvSpec) -> Env:
    """``spec``'s ``reset`` / ``step`` as the ``Env`` that rollouts and evaluations step."""
    return Env(reset=lambda keys: reset(spec, keys), step=lambda keys, env_state, action: step(spec, keys, env_state, action))
