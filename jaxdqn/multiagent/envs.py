"""Multi-agent environments in the gymnax style: functional, jittable, dicts keyed by agent id.

A ``MultiAgentEnv`` has a static tuple of ``agents`` that all act at every step (RLlib's
``MultiAgentEnv`` dicts of observations / actions / rewards / dones, with static shapes). It
implements, like a gymnax ``Environment``, ``reset_env(key, params) -> (obs, state)`` and
``step_env(key, state, actions, params) -> (obs, state, rewards, terminated, truncated)`` without
automatic reset, plus ``observation_space(agent, params)`` / ``action_space(agent, params)``.

``step`` here runs ``E`` copies with ``vmap`` and returns the ``EnvStep`` every rollout takes,
its fields dicts by agent, and makes one joint episode (RLlib's ``dones["__all__"]``,
``EnvStep.episode_end``), ended as ``env_params`` ``done_when`` says:

* ``"all"`` (the default; RLlib's ``make_multi_agent``): the joint episode ends when every
  agent's own episode has ended; an agent that has finished stops acting: its later steps earn
  no reward and are marked not ``valid`` (the plan stores no transition for them), while the
  others play on (``EnvStep.valid``);
* ``"any"``: it ends for every agent at the first step where any agent's ends; an agent whose
  own episode did not terminate there is truncated (it bootstraps).

Then all agents reset together, and the step's true next observations are kept apart, as
``envs.step`` does for one agent.

Shipped: ``MultiCartPole-v1`` (RLlib's ``MultiAgentCartPole`` example): ``num_agents`` gymnax
CartPoles, one per agent, each agent rewarded 1 per step its own pole stays up; the joint episode
ends when every pole has fallen (``done_when="any"``: when one has), or after
``max_steps_in_episode``. ``env_params`` take the CartPole fields plus ``num_agents`` and
``done_when``.
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple

import gymnax
import jax
import jax.numpy as jnp
from gymnax.environments import spaces

from jaxdqn import envs
from jaxdqn.types import Env, EnvStep

Array = jax.Array


class MultiAgentEnv:
    """The interface (see the module docstring); subclass it for a new environment."""

    agents: tuple[str, ...] = ()

    @property
    def default_params(self) -> Any:
        raise NotImplementedError

    def reset_env(self, key: Array, params: Any) -> tuple[dict[str, Array], Any]:
        raise NotImplementedError

    def step_env(self, key: Array, state: Any, actions: dict[str, Array], params: Any
                 ) -> tuple[dict[str, Array], Any, dict[str, Array], dict[str, Array], dict[str, Array]]:
        raise NotImplementedError

    def observation_space(self, agent: str, params: Any) -> spaces.Space:
        raise NotImplementedError

    def action_space(self, agent: str, params: Any) -> spaces.Space:
        raise NotImplementedError


class MultiCartPole(MultiAgentEnv):
    """``num_agents`` CartPole-v1 instances, one per agent (see the module docstring)."""

    def __init__(self, num_agents: int = 2) -> None:
        if isinstance(num_agents, bool) or not isinstance(num_agents, int) or num_agents < 1:
            raise ValueError(f"env_params num_agents={num_agents!r} is invalid: must be an int >= 1")
        self.agents = tuple(f"agent_{i}" for i in range(num_agents))
        self.cartpole, _ = gymnax.make("CartPole-v1")

    @property
    def default_params(self) -> Any:
        return self.cartpole.default_params

    def reset_env(self, key: Array, params: Any) -> tuple[dict[str, Array], Any]:
        keys = jax.random.split(key, len(self.agents))
        out = {a: self.cartpole.reset_env(k, params) for a, k in zip(self.agents, keys)}
        return {a: o for a, (o, _) in out.items()}, {a: s for a, (_, s) in out.items()}

    def step_env(self, key: Array, state: Any, actions: dict[str, Array], params: Any):
        keys = jax.random.split(key, len(self.agents))
        obs, new_state, rewards, terminated, truncated = {}, {}, {}, {}, {}
        for agent, k in zip(self.agents, keys):
            o, s, r, term, _ = self.cartpole.step_env(k, state[agent], actions[agent], params)
            trunc = self.cartpole.is_truncated(s, params)
            obs[agent], new_state[agent], rewards[agent] = o, s, jnp.asarray(r, jnp.float32)
            terminated[agent], truncated[agent] = term, trunc  # both: terminated wins in ``step``
        return obs, new_state, rewards, terminated, truncated

    def observation_space(self, agent: str, params: Any) -> spaces.Space:
        return self.cartpole.observation_space(params)

    def action_space(self, agent: str, params: Any) -> spaces.Space:
        return self.cartpole.action_space(params)


# name -> (constructor, the env_params keys that go to the constructor rather than the params)
REGISTRY: dict[str, tuple[Any, tuple[str, ...]]] = {"MultiCartPole-v1": (MultiCartPole, ("num_agents",))}


DONE_WHEN = ("all", "any")


class MultiAgentSpec(NamedTuple):
    """A multi-agent environment, its parameters and each agent's shapes (static)."""

    env: MultiAgentEnv
    params: Any
    agents: tuple[str, ...]
    obs_shapes: dict[str, tuple[int, ...]]
    num_actions: dict[str, int]
    done_when: str = "all"  # see the module docstring
    obs_dtypes: dict[str, Any] | None = None  # agent -> uint8 images; None: float32 for every agent


def host_spec(agents: tuple[str, ...], obs_shapes: dict[str, tuple[int, ...]], obs_dtypes: dict[str, Any],
              num_actions: dict[str, int], done_when: str) -> MultiAgentSpec:
    """The spec of a multi-agent env that steps on the host (a PettingZoo parallel env of the
    shell's rollout workers, whose ``done_when`` the shell checked): shapes only, no env."""
    return MultiAgentSpec(env=None, params=envs.HostParams(), agents=tuple(agents), obs_shapes=dict(obs_shapes),
                          num_actions=dict(num_actions), done_when=done_when, obs_dtypes=dict(obs_dtypes))


class JointState(NamedTuple):
    """The env's state and which agents still play in the joint episode."""

    env: Any
    playing: dict[str, Array]  # agent -> [] bool


def obs_struct(spec: MultiAgentSpec, agent: str) -> jax.ShapeDtypeStruct:
    """One observation of ``agent``."""
    dtype = (spec.obs_dtypes or {}).get(agent) or jnp.float32
    return jax.ShapeDtypeStruct(spec.obs_shapes[agent], dtype)


def is_multi_agent(env: Any) -> bool:
    """A registered multi-agent name, or a ``MultiAgentEnv`` object."""
    return isinstance(env, MultiAgentEnv) or (isinstance(env, str) and env in REGISTRY)


def make_multi_agent_env(env: str | MultiAgentEnv, env_params: Mapping[str, Any] | tuple = ()) -> MultiAgentSpec:
    """The ``MultiAgentSpec`` of a registered name or a ``MultiAgentEnv``; ``env_params`` override
    the constructor's keys (``num_agents``) and the params' fields. Refuses unknown keys and
    non-discrete action spaces, naming them."""
    overrides = dict(env_params)
    done_when = overrides.pop("done_when", "all")
    if done_when not in DONE_WHEN:
        raise ValueError(f"env_params done_when={done_when!r} is invalid: supported {list(DONE_WHEN)} (the joint "
                         "episode ends when all agents' episodes have ended, RLlib's, or when any has)")
    if isinstance(env, str):
        if env not in REGISTRY:
            raise ValueError(f"env={env!r} is not a multi-agent environment; registered: {sorted(REGISTRY)}")
        build, build_keys = REGISTRY[env]
        env = build(**{k: overrides.pop(k) for k in build_keys if k in overrides})
    params = envs.override_params(env.default_params, overrides)
    num_actions = {}
    for agent in env.agents:
        space = env.action_space(agent, params)
        if not isinstance(space, spaces.Discrete):
            raise ValueError(f"agent {agent!r} has a {type(space).__name__} action space; DQN needs a Discrete one")
        num_actions[agent] = int(space.n)
    obs_shapes = {a: tuple(env.observation_space(a, params).shape) for a in env.agents}
    return MultiAgentSpec(env=env, params=params, agents=tuple(env.agents), obs_shapes=obs_shapes,
                          num_actions=num_actions, done_when=done_when)


def fresh(spec: MultiAgentSpec, key: Array) -> tuple[dict[str, Array], JointState]:
    """One new joint episode, every agent playing."""
    obs, state = spec.env.reset_env(key, spec.params)
    return obs, JointState(env=state, playing={a: jnp.ones((), bool) for a in spec.agents})


def reset(spec: MultiAgentSpec, keys: Array) -> tuple[dict[str, Array], JointState]:
    """Fresh joint episodes, one per key ``[E]``: ``(obs dict of [E, *obs], state)``."""
    return jax.vmap(lambda k: fresh(spec, k))(keys)


def step(spec: MultiAgentSpec, keys: Array, state: JointState, actions: dict[str, Array]
         ) -> tuple[EnvStep, JointState]:
    """Step ``E`` copies once with ``actions`` (dict of ``[E]``) and their keys ``[E]``; ended
    joint episodes reset.
    ``valid`` marks the agents still playing (their steps are transitions), ``reward`` is 0 for
    the others and ``episode_end`` is the joint episode's end."""

    def one(key, state, actions):
        step_key, reset_key = jax.random.split(key)
        obs, new_state, reward, terminated, truncated = spec.env.step_env(step_key, state.env, actions, spec.params)
        playing = state.playing
        terminated = {a: playing[a] & jnp.asarray(terminated[a], bool) for a in spec.agents}
        ends = {a: terminated[a] | (playing[a] & jnp.asarray(truncated[a], bool)) for a in spec.agents}
        if spec.done_when == "any":
            done = jnp.any(jnp.stack(list(ends.values())))
            truncated = {a: done & ~terminated[a] for a in spec.agents}
        else:  # "all": an agent's episode ends on its own; the joint one when no agent plays on
            done = ~jnp.any(jnp.stack([playing[a] & ~ends[a] for a in spec.agents]))
            truncated = {a: ends[a] & ~terminated[a] for a in spec.agents}
        reset_obs, reset_state = fresh(spec, reset_key)
        pick = lambda fresh_, old: jax.tree_util.tree_map(lambda x, y: jnp.where(done, x, y), fresh_, old)  # noqa: E731
        still = JointState(env=new_state, playing={a: playing[a] & ~ends[a] for a in spec.agents})
        out = EnvStep(obs=pick(reset_obs, obs), next_obs=obs,
                      reward={a: jnp.where(playing[a], jnp.asarray(reward[a], jnp.float32), 0.0) for a in spec.agents},
                      terminated=terminated, truncated=truncated, valid=dict(playing), episode_end=done)
        return out, pick(reset_state, still)

    return jax.vmap(one)(keys, state, actions)


def functions(spec: MultiAgentSpec) -> Env:
    """``spec``'s ``reset`` / ``step`` as the ``Env`` that rollouts and evaluations step."""
    return Env(reset=lambda keys: reset(spec, keys),
               step=lambda keys, env_state, actions: step(spec, keys, env_state, actions))
