"""Multi-agent envs that step on the host (shell layer): PettingZoo parallel envs, registered by
name with ``jaxdqn.register_env`` (the creator returns the parallel env) or named
``"pettingzoo:<module>"`` (the module's ``parallel_env(**env_params)``), played by the same
rollout workers as a Gymnasium env and fed to the multi-agent plan (``jaxdqn.multiagent``:
policies, ``policy_mapping_fn``, independent or lockstep replay).

Each PettingZoo env is one Gymnasium env of the joint episode (``JointEnv``: observation and
action spaces are Dicts by agent), so Gymnasium's vector envs are its workers, in this process
(``num_workers=0``) or in processes of their own, with their same-step autoreset. The joint
episode follows ``env_params`` ``done_when`` as for a JAX multi-agent env (RLlib's
``dones["__all__"]``): ``"all"`` (the default) ends it when every agent's own episode has ended
(an agent that ended stops acting; its steps until the joint end are not stored), ``"any"`` at
the first agent's end (the others are truncated there: they bootstrap). Agents are the env's
``possible_agents``; each must have an observation at reset.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import jax.numpy as jnp
import numpy as np

from jaxdqn import rollout
from jaxdqn.config import DQNConfig
from jaxdqn.hostenv import ENVPOOL, GYMNASIUM, HostEnvs, ObsLayout, gymnasium_module, make_one
from jaxdqn.multiagent import envs as multiagent_envs

FIELDS = ("reward", "terminated", "truncated", "valid")  # what one step tells of each agent


def is_parallel_env(env: Any) -> bool:
    """A PettingZoo parallel env (duck-typed: the agents, and spaces per agent)."""
    return hasattr(env, "possible_agents") and callable(getattr(env, "observation_space", None)) \
        and not hasattr(env, "agent_iter")


def is_aec_env(env: Any) -> bool:
    """A PettingZoo AEC env (agents acting in turn), which the plan does not step."""
    return hasattr(env, "possible_agents") and hasattr(env, "agent_iter")


def JointEnv(env: Any, done_when: str = "all") -> Any:  # noqa: N802 (a class made where Gymnasium is imported)
    """``env`` (a PettingZoo parallel env) as one ``gymnasium.Env`` of the joint episode (see the
    module docstring): observations and actions are dicts by agent, the reward is the agents'
    sum and ``terminated`` the joint episode's end; ``info["agents"]`` holds each agent's
    ``reward`` / ``terminated`` / ``truncated`` / ``valid`` (it acted) of the step."""
    return _joint_class()(env, done_when)


@functools.lru_cache(maxsize=None)
def _joint_class() -> type:
    gymnasium = gymnasium_module()

    class Joint(gymnasium.Env):
        def __init__(self, env: Any, done_when: str) -> None:
            self.env, self.done_when = env, done_when
            self.agents = tuple(env.possible_agents)
            self.observation_space = gymnasium.spaces.Dict({a: env.observation_space(a) for a in self.agents})
            self.action_space = gymnasium.spaces.Dict({a: env.action_space(a) for a in self.agents})
            self.playing = {a: False for a in self.agents}
            self.last: dict[str, Any] = {}

        def blank_record(self) -> dict[str, dict[str, Any]]:
            return {"reward": {a: 0.0 for a in self.agents}, "terminated": {a: False for a in self.agents},
                    "truncated": {a: False for a in self.agents}, "valid": {a: False for a in self.agents}}

        def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
            obs, _ = self.env.reset(seed=seed, options=options)
            missing = [a for a in self.agents if a not in obs]
            if missing:
                raise ValueError(f"agents {missing} have no observation at reset: every one of possible_agents "
                                 "must play from the start")
            self.last = dict(obs)
            self.playing = {a: True for a in self.agents}
            return dict(self.last), {"agents": self.blank_record()}

        def step(self, action: dict[str, Any]) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
            live = {a: int(action[a]) for a in self.agents if self.playing[a] and a in self.env.agents}
            obs, rewards, terms, truncs, _ = self.env.step(live)
            record, ends = self.blank_record(), {}
            for a in self.agents:
                playing = self.playing[a]
                terminated = playing and bool(terms.get(a, False))
                # an agent that left the env without a flag ended its episode there (truncated)
                ends[a] = terminated or (playing and (bool(truncs.get(a, False)) or a not in self.env.agents))
                record["reward"][a] = float(rewards.get(a, 0.0)) if playing else 0.0
                record["terminated"][a], record["valid"][a] = terminated, playing
                if a in obs:
                    self.last[a] = obs[a]
            if self.done_when == "any":
                done = any(ends.values())
                record["truncated"] = {a: done and not record["terminated"][a] for a in self.agents}
            else:
                done = not any(self.playing[a] and not ends[a] for a in self.agents)
                record["truncated"] = {a: ends[a] and not record["terminated"][a] for a in self.agents}
            self.playing = {a: self.playing[a] and not ends[a] for a in self.agents}
            done = done or not self.env.agents
            return dict(self.last), float(sum(record["reward"].values())), done, False, {"agents": record}

        def close(self) -> None:
            self.env.close()

    return Joint


class HostAgentEnvs(HostEnvs):
    """``config``'s PettingZoo envs as one Gymnasium vector env of ``JointEnv``s: fragments of
    per-agent steps (``RawStep`` fields dicts by agent, ``acted``: the agent was playing) and the
    joint episodes with each agent's return, as ``jaxdqn.multiagent``'s plan takes them."""

    def _creator(self, config: DQNConfig) -> Callable[[], Any]:
        done_when = dict(config.env_params).get("done_when", "all")
        if done_when not in multiagent_envs.DONE_WHEN:
            raise ValueError(f"env_params done_when={done_when!r} is invalid: supported "
                             f"{list(multiagent_envs.DONE_WHEN)}")
        self.done_when, one = done_when, make_one(config)
        return lambda: JointEnv(one(), done_when)

    def _wrap(self, made: Any) -> Any:
        return JointEnv(made, self.done_when)

    def _take_spaces(self, obs_space: Any, action_space: Any, config: DQNConfig) -> None:
        gymnasium = gymnasium_module()
        self.agents = tuple(obs_space.spaces)
        if not self.agents:
            raise ValueError(f"env={self.name!r} has no agents (possible_agents is empty)")
        self.num_actions = {}
        for a in self.agents:
            space = action_space.spaces[a]
            if not isinstance(space, gymnasium.spaces.Discrete):
                raise ValueError(f"env={self.name!r} agent {a!r} has a {type(space).__name__} action space: DQN "
                                 "needs a Discrete one")
            self.num_actions[a] = int(space.n)
        self.layouts = {a: ObsLayout(obs_space.spaces[a], f"env={self.name!r} agent {a!r}") for a in self.agents}

    @property
    def spec(self) -> multiagent_envs.MultiAgentSpec:
        return multiagent_envs.host_spec(
            self.agents, {a: lay.shape for a, lay in self.layouts.items()},
            {a: None if lay.dtype == np.float32 else jnp.uint8 for a, lay in self.layouts.items()},
            self.num_actions, self.done_when)

    def restart(self) -> None:
        super().restart()
        self.returns = {a: np.zeros(self.num_envs, np.float32) for a in self.agents}

    def _array(self, batch: Any, where: str) -> dict[str, np.ndarray]:
        return {a: lay.batch(self.vector.observation_space[a], batch[a], self.num_envs, where)
                for a, lay in self.layouts.items()}

    def _record(self, info: dict[str, Any], done: np.ndarray) -> dict[str, dict[str, np.ndarray]]:
        """Each agent's step fields ``[E]``: an env whose joint episode ended has reset in the same
        step, so its step's record is in ``final_info``."""
        now, final = info["agents"], info.get("final_info", {}).get("agents")
        dtypes = {"reward": np.float32, "terminated": bool, "truncated": bool, "valid": bool}
        return {f: {a: np.asarray(now[f][a] if final is None else np.where(done, final[f][a], now[f][a]), dtypes[f])
                    for a in self.agents} for f in FIELDS}

    def fragment(self, act: Callable[[Any, int, np.ndarray], Any], length: int
                 ) -> tuple[rollout.RawStep, rollout.Episodes]:
        """``length`` steps of every env, acting with ``act(obs by agent [E, *obs], t, first [E])``:
        the raw steps (fields dicts by agent) and the joint episodes that ended, ``[length, E]``."""
        shape = (length, self.num_envs)
        blocks = {f: {a: np.empty(shape, np.float32 if f == "reward" else bool) for a in self.agents} for f in FIELDS}
        obs_block = {a: np.empty(shape + lay.shape, lay.dtype) for a, lay in self.layouts.items()}
        next_block = {a: np.empty(shape + lay.shape, lay.dtype) for a, lay in self.layouts.items()}
        action = {a: np.empty(shape, np.int32) for a in self.agents}
        returns = {a: np.empty(shape, np.float32) for a in self.agents}
        lengths, ended = np.empty(shape, np.int32), np.empty(shape, bool)
        for t in range(length):
            chosen = self._actions(act(self.obs, t, self.first))
            for a in self.agents:
                action[a][t] = chosen[a]
                obs_block[a][t] = self.obs[a]
            obs, _, done, _, info = self._step({a: action[a][t] for a in self.agents})
            done = np.asarray(done, bool)
            record = self._record(info, done)
            self.obs = self._array(obs, "step")
            where = np.flatnonzero(done)
            for a in self.agents:
                next_block[a][t] = self.obs[a]
                if len(where):
                    next_block[a][t, where] = self.layouts[a].rows([info["final_obs"][i][a] for i in where],
                                                                   len(where), "step (a final observation)")
                for f in FIELDS:
                    blocks[f][a][t] = record[f][a]
                self.returns[a] += record["reward"][a]
                returns[a][t] = self.returns[a]
                self.returns[a][done] = 0.0
            self.lengths += 1
            lengths[t] = self.lengths
            ended[t] = self.first = done
            self.lengths[done] = 0
        self._finite(blocks["reward"], "reward")
        self._finite(next_block, "observation")
        self.fresh, self.failures = False, 0
        raw = rollout.RawStep(obs=obs_block, action=action, reward=blocks["reward"], terminated=blocks["terminated"],
                              truncated=blocks["truncated"], next_obs=next_block, acted=blocks["valid"])
        return raw, rollout.Episodes(done=ended, episode_return=returns, episode_length=lengths)


def open_envs(config: DQNConfig, num_envs: int | None = None, seed: int | None = None) -> HostEnvs:
    """``config``'s host envs (``HostEnvs``'s ``num_envs`` and ``seed``): ``HostAgentEnvs`` where
    the creator makes a PettingZoo parallel env, ``HostEnvs`` otherwise (Gymnasium ids and
    EnvPool tasks are single-agent)."""
    if config.env.startswith((ENVPOOL, GYMNASIUM)):
        return HostEnvs(config, num_envs, seed)
    one = make_one(config)
    try:
        probe = one()
    except Exception as e:
        raise RuntimeError(f"env={config.env!r} failed creating it: {type(e).__name__}: {e}") from e
    if is_aec_env(probe):
        probe.close()
        raise ValueError(f"env={config.env!r} is a PettingZoo AEC env (agents acting in turn): return its parallel "
                         "form (pettingzoo.utils.conversions.aec_to_parallel) or the module's parallel_env()")
    if is_parallel_env(probe):
        return HostAgentEnvs(config, num_envs, seed, probe=probe)
    return HostEnvs(config, num_envs, seed, probe=probe)


__all__ = ["HostAgentEnvs", "JointEnv", "is_aec_env", "is_parallel_env", "open_envs"]
