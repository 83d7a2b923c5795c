"""Envs that step on the host (shell layer): Gymnasium envs, EnvPool's, and the user's own,
registered by name as with RLlib's ``tune.register_env`` (PettingZoo's for several agents:
``jaxdqn.hostagents``), played by RLlib-style rollout workers
and fed to the same compiled store / replay step as a JAX env.

Which backend a name means, in this order: ``"gymnasium:<id>"`` is Gymnasium's ``<id>``,
``"envpool:<task>"`` EnvPool's ``<task>`` (one batch stepped by EnvPool's threads, see
``PoolVector``) and ``"pettingzoo:<module>"`` the PettingZoo module's ``parallel_env``
(several agents: ``jaxdqn.hostagents``), ``"<module>:<id>"`` Gymnasium's ``<id>`` once ``<module>`` is imported
(``minigrid:MiniGrid-Empty-6x6-v0``, Gymnasium's own form); a name given to ``register_env`` is
the user's creator; a name gymnax or jaxdqn knows (``CartPole-v1``,
``Breakout-MinAtar``, ``ALE/Pong-v5``, ...) steps inside the compiled loop; any other id in
Gymnasium's registry is Gymnasium's. So ``CartPole-v1`` is gymnax's CartPole and
``gymnasium:CartPole-v1`` Gymnasium's.

The envs: ``num_envs_per_worker`` per worker, ``num_workers`` workers; with ``num_workers=0``
they step in the trainer's process (Gymnasium's ``SyncVectorEnv``), else each in a process of
its own (``AsyncVectorEnv``: RLlib's workers hold ``num_envs_per_worker`` envs each; Gymnasium's
processes hold one). ``jaxdqn.hostrun`` runs the plan's loop over them. The envs' state is not
in checkpoints: after a resume they start new episodes, as RLlib's workers do, and the at most
``n_step - 1`` steps of each env that waited for their n-step return are dropped.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

import jax.numpy as jnp
import numpy as np

from jaxdqn import atari, envs, rollout
from jaxdqn.config import DQNConfig
from jaxdqn.hostpool import ENVPOOL, PoolVector

GYMNASIUM = "gymnasium:"
PETTINGZOO = "pettingzoo:"  # "pettingzoo:<module>": the module's ``parallel_env(**env_config)``
ENV_CREATORS: dict[str, Callable[[dict[str, Any]], Any]] = {}  # register_env's names


def register_env(name: str, creator: Callable[[dict[str, Any]], Any]) -> None:
    """Make ``name`` an env of jaxdqn configs: ``creator(env_config)`` returns a
    ``gymnasium.Env``, or a PettingZoo parallel env for several agents (RLlib's
    ``tune.register_env``; ``env_config`` is the config's ``env_params`` but for a multi-agent
    env's ``done_when``)."""
    if not isinstance(name, str) or not name or name.startswith((GYMNASIUM, PETTINGZOO)):
        raise ValueError(f"name={name!r} is invalid: a non-empty str not starting with {GYMNASIUM!r} or {PETTINGZOO!r}")
    if not callable(creator):
        raise ValueError(f"creator={creator!r} is invalid: a callable env_config -> gymnasium.Env (or a PettingZoo "
                         "parallel env)")
    ENV_CREATORS[name] = creator


def gymnasium_module() -> Any:
    """Gymnasium, imported where a host env needs it (the ``[gymnasium]`` extra); a missing
    extra is one error naming it."""
    try:
        import gymnasium
    except ImportError as e:  # the extra is missing
        raise ImportError('this env steps through Gymnasium: pip install -e ".[gymnasium]"') from e
    return gymnasium


def is_host_env(env: Any) -> bool:
    """Whether ``env`` (a config's ``env``) steps on the host (the module docstring's rule)."""
    if not isinstance(env, str):
        return False
    if env.startswith((GYMNASIUM, ENVPOOL, PETTINGZOO)) or env in ENV_CREATORS or _module_form(env):
        return True
    if envs.is_known(env) or atari.is_atari(env):
        return False
    try:
        return env in gymnasium_module().registry
    except ImportError:
        return False


def _module_form(env: str) -> bool:
    """Gymnasium's ``"<module>:<id>"`` (``minigrid:MiniGrid-Empty-6x6-v0``): the module, imported
    first, registers the id (the plugin packages' way)."""
    module, _, gym_id = env.partition(":")
    return bool(module) and bool(gym_id) and module.isidentifier() and ":" not in gym_id


def make_one(config: DQNConfig) -> Callable[[], Any]:
    """A function creating one env of ``config`` (a worker process calls it)."""
    name, env_config = config.env, dict(config.env_params)
    env_config.pop("done_when", None)  # the joint episode's rule (``jaxdqn.hostagents``), not the env's
    if name in ENV_CREATORS:
        creator = ENV_CREATORS[name]
        return lambda: creator(dict(env_config))
    if name.startswith(PETTINGZOO):
        module = name[len(PETTINGZOO):]
        try:
            made = importlib.import_module(module)
        except ImportError as e:
            raise ImportError(f"env={name!r}: its module {module!r} could not be imported ({e}); PettingZoo "
                              'installs with pip install -e ".[pettingzoo]"') from e
        if not callable(getattr(made, "parallel_env", None)):
            raise ValueError(f"env={name!r}: module {module!r} has no parallel_env (a PettingZoo env module)")
        return lambda: made.parallel_env(**env_config)
    gymnasium = gymnasium_module()
    gym_id = name[len(GYMNASIUM):] if name.startswith(GYMNASIUM) else name
    if _module_form(gym_id):
        module, _, registered = gym_id.partition(":")
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise ImportError(f"env={name!r}: its module {module!r} is not installed ({e})") from e
    else:
        registered = gym_id
    from jaxdqn import hostatari  # an ALE game gets RLlib's DeepMind preprocessing

    if hostatari.is_ale(registered):
        return lambda: hostatari.wrap_deepmind(registered, env_config)
    if registered not in gymnasium.registry:
        raise ValueError(f"env={name!r} is not a Gymnasium env id (nor a name given to jaxdqn.register_env)")
    return lambda: gymnasium.make(gym_id, **env_config)


def numeric_part(space: Any, gymnasium: Any) -> Any:
    """The part of an observation space a network takes, RLlib's default preprocessing: Box,
    Discrete (one-hot), MultiDiscrete, MultiBinary, Dict and Tuple of them; other leaves (text,
    such as MiniGrid's constant mission string) are left out. None if nothing is left."""
    spaces = gymnasium.spaces
    if isinstance(space, (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)):
        return space
    if isinstance(space, (spaces.Dict, spaces.Tuple)):
        items = space.spaces.items() if isinstance(space, spaces.Dict) else enumerate(space.spaces)
        kept = {k: part for k, sub in items if (part := numeric_part(sub, gymnasium)) is not None}
        if not kept:
            return None
        return spaces.Dict(kept) if isinstance(space, spaces.Dict) else spaces.Tuple(tuple(kept.values()))
    return None


def numeric_obs(space: Any, obs: Any, gymnasium: Any) -> Any:
    """``obs`` of ``space`` reduced to ``numeric_part(space)``."""
    spaces = gymnasium.spaces
    if isinstance(space, spaces.Dict):
        return {k: numeric_obs(sub, obs[k], gymnasium) for k, sub in space.spaces.items()
                if numeric_part(sub, gymnasium) is not None}
    if isinstance(space, spaces.Tuple):
        return tuple(numeric_obs(sub, o, gymnasium) for sub, o in zip(space.spaces, obs)
                     if numeric_part(sub, gymnasium) is not None)
    return obs


class ObsLayout:
    """How observations of one space reach the network, RLlib's default preprocessing: Box as it
    is (uint8 images kept, the rest float32), Discrete one-hot, Dict and Tuple flattened
    (``numeric_part``). ``name`` says whose observations they are in errors."""

    def __init__(self, space: Any, name: str) -> None:
        gymnasium = gymnasium_module()
        self.space, self.name = space, name
        self.boxed = isinstance(space, gymnasium.spaces.Box)
        if self.boxed:
            self.shape, self.dtype = tuple(space.shape), (np.uint8 if space.dtype == np.uint8 else np.float32)
            return
        self.numeric = numeric_part(space, gymnasium)
        if self.numeric is None or gymnasium.spaces.flatdim(self.numeric) == 0:
            raise ValueError(f"{name} has a {type(space).__name__} observation space: supported are Box, "
                             "Discrete, MultiDiscrete, MultiBinary, and Dict and Tuple of them")
        self.shape, self.dtype = (int(gymnasium.spaces.flatdim(self.numeric)),), np.float32

    def batch(self, batched_space: Any, batch: Any, count: int, where: str) -> np.ndarray:
        """A vector env's batch of ``count`` observations (of ``batched_space``) as ``[count, *obs]``."""
        if self.boxed:
            return self.rows(batch, count, where)
        return self.rows(list(gymnasium_module().vector.utils.iterate(batched_space, batch)), count, where)

    def rows(self, rows: Any, count: int, where: str) -> np.ndarray:
        """``count`` observations, preprocessed and checked against the space: ``[count, *obs]``."""
        if self.boxed:
            out = np.asarray(rows, self.dtype)
        else:
            gymnasium = gymnasium_module()
            out = np.stack([gymnasium.spaces.flatten(self.numeric, numeric_obs(self.space, r, gymnasium))
                            for r in rows]).astype(np.float32)
        if out.shape != (count,) + self.shape:
            raise ValueError(f"{self.name} returned observations of shape {out.shape[1:]} in {where}; its "
                             f"observation space says {self.shape}")
        return out


class WorkersRecreated(Exception):
    """Rollout workers failed and were started again (RLlib's ``recreate_failed_workers``): the
    fragment they were in is lost and every env starts a new episode."""


class HostEnvs:
    """``config``'s envs as one Gymnasium vector env, with RLlib's default preprocessing
    (Discrete observations one-hot, Dict / Tuple ones flattened) and the episode accounting the
    plan's metrics take."""

    def __init__(self, config: DQNConfig, num_envs: int | None = None, seed: int | None = None,
                 probe: Any = None) -> None:
        """``num_envs`` envs (a run's ``config.num_envs``, the default, or every vmapped run's, or
        a process's share), env ``i`` reset with seed ``seed + i`` (``config.seed`` by
        default); ``probe``: an env the creator made already (``open_envs``'s), read for the
        spaces and closed."""
        gymnasium = gymnasium_module()
        self.name = config.env
        self.num_envs = config.num_envs if num_envs is None else num_envs
        seed = config.seed if seed is None else seed
        envpool = config.env.startswith(ENVPOOL)
        if envpool:  # one batch, stepped by EnvPool's own threads (num_workers of them)
            pool = self._call(lambda: PoolVector(config.env[len(ENVPOOL):], self.num_envs, config.num_workers,
                                                 seed, dict(config.env_params)), "creating it")
            self._start = lambda: pool  # noqa: E731
            self.atari = pool.atari
            self.single_obs, action_space = pool.single_observation_space, pool.single_action_space
        else:
            one = self._creator(config)
            probe = self._call(one, "creating it") if probe is None else self._wrap(probe)
            self.single_obs, action_space = probe.observation_space, probe.action_space
            probe.close()
            self.atari = hasattr(probe.unwrapped, "ale")  # Gymnasium's ALE (jaxdqn.hostatari's preprocessing)
            # num_workers=0: in this process; else processes started fresh (spawn: forking a
            # process that runs JAX's threads can deadlock)
            vector, options = ((gymnasium.vector.SyncVectorEnv, {}) if config.num_workers == 0 else
                               (gymnasium.vector.AsyncVectorEnv, {"context": "spawn"}))
            self._start = lambda: vector([one] * self.num_envs,  # noqa: E731
                                         autoreset_mode=gymnasium.vector.AutoresetMode.SAME_STEP, **options)
        self._take_spaces(self.single_obs, action_space, config)
        self.vector = self._call(self._start, "starting it")
        # RLlib's recreate_failed_workers: only worker processes are recreated (not the trainer's
        # own envs, nor EnvPool's threads)
        self.tolerance = config.num_consecutive_worker_failures_tolerance
        self.recreates = config.recreate_failed_workers and config.num_workers > 0 and not envpool
        self.failures = 0  # consecutive failed steps (a fragment that ends well clears it)
        self.seed = seed
        self.restart()

    def _creator(self, config: DQNConfig) -> Callable[[], Any]:
        """What each worker calls to make one env of the vector env."""
        if "done_when" in dict(config.env_params):
            raise ValueError(f"env_params done_when is for multi-agent envs; env={self.name!r} is a single-agent one")
        return make_one(config)

    def _wrap(self, made: Any) -> Any:
        """An env the creator made, as the vector env holds it."""
        return made

    def _take_spaces(self, obs_space: Any, action_space: Any, config: DQNConfig) -> None:
        """The network's view of the spaces: the number of actions, the observations' layout."""
        if not isinstance(action_space, gymnasium_module().spaces.Discrete):
            raise ValueError(f"env={self.name!r} has a {type(action_space).__name__} action space: DQN needs a "
                             "Discrete one")
        self.num_actions = int(action_space.n)
        self.layout = ObsLayout(obs_space, f"env={self.name!r}")
        self.obs_shape, self.obs_dtype = self.layout.shape, self.layout.dtype

    def _call(self, fn: Callable[[], Any], doing: str) -> Any:
        try:
            return fn()
        except Exception as e:
            raise RuntimeError(f"env={self.name!r} failed {doing}: {type(e).__name__}: {e}") from e

    def _end_workers(self) -> None:
        """After a failed step: every worker process ended (Gymnasium's ``close`` would wait for
        the step that failed), the vector env marked closed."""
        for process in getattr(self.vector, "processes", ()):
            if process.is_alive():
                process.terminate()
            process.join(timeout=10)
        for pipe in getattr(self.vector, "parent_pipes", ()):
            pipe.close()
        self.vector.closed = True

    def _step(self, action: np.ndarray) -> Any:
        """The vector env's step; a failure is one error naming the env, or (RLlib's
        ``recreate_failed_workers``) ``WorkersRecreated`` after new worker processes started."""
        try:
            return self.vector.step(action)
        except Exception as e:
            problem = f"env={self.name!r} failed in step: {type(e).__name__}: {e}"
            self._end_workers()
            if not self.recreates or self.failures >= self.tolerance:
                more = ("" if not self.recreates else
                        f" ({self.failures} consecutive failures: num_consecutive_worker_failures_tolerance)")
                raise RuntimeError(problem + more) from e
            self.failures += 1
            self.vector = self._call(self._start, "restarting its workers")
            self.restart()
            raise WorkersRecreated(problem) from e

    @property
    def spec(self) -> envs.EnvSpec:
        return envs.host_spec(self.obs_shape, self.num_actions, None if self.obs_dtype == np.float32 else jnp.uint8,
                              atari=self.atari)

    def restart(self) -> None:
        """New episodes in every env (a fresh run, or a resumed one)."""
        obs, _ = self._call(lambda: self.vector.reset(seed=self.seed), "in reset")
        self.obs = self._array(obs, "reset")
        self._finite(self.obs, "observation", "reset")
        self.returns = np.zeros(self.num_envs, np.float32)
        self.lengths = np.zeros(self.num_envs, np.int32)
        self.first = np.ones(self.num_envs, bool)  # every env at an episode's first observation
        self.fresh = True

    def _array(self, batch: Any, where: str) -> np.ndarray:
        """A batch of observations from the vector env as ``[E, *obs]``."""
        return self.layout.batch(self.vector.observation_space, batch, self.num_envs, where)

    @staticmethod
    def _episode_end(info: dict[str, Any], terminated: np.ndarray, truncated: np.ndarray) -> np.ndarray:
        """``[E]``: where a scored episode ended. With episodic life (``jaxdqn.hostatari``'s
        wrappers, ``PoolVector``'s Atari) a lost life terminates without ending the game: the
        envs that ended a step say in ``info["final_info"]["game_over"]`` whether the game did."""
        final = info.get("final_info", {})
        if "game_over" in final:
            return (np.asarray(final["game_over"], bool) & final["_game_over"]) | truncated
        return terminated | truncated

    def _finite(self, block: Any, what: str, where: str = "step") -> None:
        """Refuses a non-finite observation or reward in ``block`` (an array, or a dict of them by agent)."""
        for one in (block.values() if isinstance(block, dict) else [block]):
            if one.dtype != np.uint8 and not np.isfinite(one).all():
                raise ValueError(f"env={self.name!r} returned a non-finite {what} in {where}")

    @staticmethod
    def _actions(actions: Any) -> Any:
        """Actions as the vector env takes them (``[E]`` int32; a dict of them by agent)."""
        if isinstance(actions, dict):
            return {a: np.asarray(v, np.int32) for a, v in actions.items()}
        return np.asarray(actions, np.int32)

    def fragment(self, act: Callable[[np.ndarray, int, np.ndarray], Any], length: int
                 ) -> tuple[rollout.RawStep, rollout.Episodes]:
        """``length`` steps of every env, acting with ``act(obs [E, *obs], t, first [E])``
        (``first``: the observation begins an episode): the raw steps and the episodes that
        ended, leaves ``[length, E]`` (numpy). Written into blocks made once per fragment, and
        checked (finite observations and rewards) once per block."""
        shape, obs_shape = (length, self.num_envs), (length, self.num_envs) + self.obs_shape
        obs_block, next_block = np.empty(obs_shape, self.obs_dtype), np.empty(obs_shape, self.obs_dtype)
        action, reward = np.empty(shape, np.int32), np.empty(shape, np.float32)
        terminated, truncated = np.empty(shape, bool), np.empty(shape, bool)
        returns, lengths = np.empty(shape, np.float32), np.empty(shape, np.int32)
        ended = np.empty(shape, bool)  # the scored episodes' ends (an Atari game, not a life)
        for t in range(length):
            action[t] = act(self.obs, t, self.first)
            obs, reward[t], terminated[t], truncated[t], info = self._step(action[t])
            obs_block[t] = self.obs
            self.obs = next_block[t] = self._array(obs, "step")
            if "_final_obs" in info and np.any(info["_final_obs"]):
                where = np.flatnonzero(info["_final_obs"])
                next_block[t, where] = self.layout.rows([info["final_obs"][i] for i in where], len(where),
                                                        "step (a final observation)")
            self.returns += reward[t]
            self.lengths += 1
            returns[t], lengths[t] = self.returns, self.lengths
            ended[t] = self.first = done = self._episode_end(info, terminated[t], truncated[t])
            self.returns[done], self.lengths[done] = 0.0, 0
        self._finite(reward, "reward")
        self._finite(next_block, "observation")
        self.fresh, self.failures = False, 0
        raw = rollout.RawStep(obs=obs_block, action=action, reward=reward, terminated=terminated,
                              truncated=truncated, next_obs=next_block)
        return raw, rollout.Episodes(done=ended, episode_return=returns, episode_length=lengths)

    def episodes(self, act: Callable[[np.ndarray, int], Any], max_steps: int, seed: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One new episode in every env (reset with ``seed``), acting with ``act(obs, t)`` until
        each has ended or ``max_steps`` steps: returns ``[E]``, lengths ``[E]``, finished ``[E]``
        (an env's steps after its episode ended are not counted)."""
        self.seed = seed
        self.restart()
        returns, lengths = np.zeros(self.num_envs, np.float32), np.zeros(self.num_envs, np.int32)
        alive = np.ones(self.num_envs, bool)
        for t in range(max_steps):
            if not alive.any():
                break
            obs, reward, terminated, truncated, info = self._step(self._actions(act(self.obs, t)))
            reward = np.asarray(reward, np.float32)
            self._finite(reward, "reward")
            self.obs = self._array(obs, "step")
            self._finite(self.obs, "observation")
            returns += np.where(alive, reward, 0.0)
            lengths += alive
            alive &= ~self._episode_end(info, np.asarray(terminated, bool), np.asarray(truncated, bool))
        return returns, lengths, ~alive

    def close(self) -> None:
        self.vector.close()


__all__ = ["ENV_CREATORS", "GYMNASIUM", "PETTINGZOO", "HostEnvs", "ObsLayout", "gymnasium_module", "WorkersRecreated", "is_host_env", "make_one", "register_env"]
