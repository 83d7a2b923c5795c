"""Envs that step on the host (shell layer): Gymnasium envs and the user's own, registered by name
as with RLlib's ``tune.register_env``, played by RLlib-style rollout workers and fed to the same
compiled store / replay step as a JAX env.

Which backend a name means, in this order: ``"gymnasium:<id>"`` is Gymnasium's ``<id>``; a name
given to ``register_env`` is the user's creator; a name gymnax or jaxdqn knows (``CartPole-v1``,
``Breakout-MinAtar``, ``ALE/Pong-v5``, ...) steps inside the compiled loop; any other id in
Gymnasium's registry is Gymnasium's. So ``CartPole-v1`` is gymnax's CartPole and
``gymnasium:CartPole-v1`` Gymnasium's.

The envs: ``num_envs_per_worker`` per worker, ``num_workers`` workers; with ``num_workers=0``
they step in the trainer's process (Gymnasium's ``SyncVectorEnv``), else each in a process of
its own (``AsyncVectorEnv``: RLlib's workers hold ``num_envs_per_worker`` envs each; Gymnasium's
processes hold one). The loop: one jitted ``explore`` call per step of every env, then one
jitted ``take`` and one ``learn`` per fragment (the schedule's replays, priority updates and
target syncs in it: no Python per SGD step). The envs' state is not in checkpoints: after a
resume they start new episodes, as RLlib's workers do, and the at most ``n_step - 1`` steps of
each env that waited for their n-step return are dropped.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from jaxdqn import atari, envs, metrics, parallel, rollout
from jaxdqn.config import DQNConfig

GYMNASIUM = "gymnasium:"
ENV_CREATORS: dict[str, Callable[[dict[str, Any]], Any]] = {}  # register_env's names


def register_env(name: str, creator: Callable[[dict[str, Any]], Any]) -> None:
    """Make ``name`` an env of jaxdqn configs: ``creator(env_config)`` returns a
    ``gymnasium.Env`` (RLlib's ``tune.register_env``; ``env_config`` is the config's
    ``env_params``)."""
    if not isinstance(name, str) or not name or name.startswith(GYMNASIUM):
        raise ValueError(f"name={name!r} is invalid: a non-empty str not starting with {GYMNASIUM!r}")
    if not callable(creator):
        raise ValueError(f"creator={creator!r} is invalid: a callable env_config -> gymnasium.Env")
    ENV_CREATORS[name] = creator


def _gymnasium() -> Any:
    try:
        import gymnasium
    except ImportError as e:  # the extra is missing
        raise ImportError('this env steps through Gymnasium: pip install -e ".[gymnasium]"') from e
    return gymnasium


def is_host_env(env: Any) -> bool:
    """Whether ``env`` (a config's ``env``) steps on the host (the module docstring's rule)."""
    if not isinstance(env, str):
        return False
    if env.startswith(GYMNASIUM) or env in ENV_CREATORS:
        return True
    if envs.is_known(env) or atari.is_atari(env):
        return False
    try:
        return env in _gymnasium().registry
    except ImportError:
        return False


def make_one(config: DQNConfig) -> Callable[[], Any]:
    """A function creating one env of ``config`` (a worker process calls it)."""
    name, env_config = config.env, dict(config.env_params)
    if name in ENV_CREATORS:
        creator = ENV_CREATORS[name]
        return lambda: creator(dict(env_config))
    gymnasium = _gymnasium()
    gym_id = name[len(GYMNASIUM):] if name.startswith(GYMNASIUM) else name
    if gym_id not in gymnasium.registry:
        raise ValueError(f"env={name!r} is not a Gymnasium env id (nor a name given to jaxdqn.register_env)")
    return lambda: gymnasium.make(gym_id, **env_config)


class HostEnvs:
    """``config``'s envs as one Gymnasium vector env, with RLlib's default preprocessing
    (Discrete observations one-hot, Dict / Tuple ones flattened) and the episode accounting the
    plan's metrics take."""

    def __init__(self, config: DQNConfig) -> None:
        gymnasium = _gymnasium()
        self.name = config.env
        self.num_envs = config.num_envs
        one = make_one(config)
        probe = self._call(one, "creating it")
        self.single_obs, action_space = probe.observation_space, probe.action_space
        probe.close()
        if not isinstance(action_space, gymnasium.spaces.Discrete):
            raise ValueError(f"env={self.name!r} has a {type(action_space).__name__} action space: DQN needs a "
                             "Discrete one")
        self.num_actions = int(action_space.n)
        self.obs_shape, self.obs_dtype = self._obs_layout(gymnasium)
        autoreset = gymnasium.vector.AutoresetMode.SAME_STEP
        if config.num_workers == 0:
            vector, options = gymnasium.vector.SyncVectorEnv, {}
        else:  # processes started fresh (spawn): forking a process that runs JAX's threads can deadlock
            vector, options = gymnasium.vector.AsyncVectorEnv, {"context": "spawn"}
        self.vector = self._call(lambda: vector([one] * self.num_envs, autoreset_mode=autoreset, **options),
                                 "starting it")
        self.seed = config.seed
        self.restart()

    def _call(self, fn: Callable[[], Any], doing: str) -> Any:
        try:
            return fn()
        except Exception as e:
            raise RuntimeError(f"env={self.name!r} failed {doing}: {type(e).__name__}: {e}") from e

    def _obs_layout(self, gymnasium: Any) -> tuple[tuple[int, ...], Any]:
        space = self.single_obs
        if isinstance(space, gymnasium.spaces.Box):
            dtype = np.uint8 if space.dtype == np.uint8 else np.float32
            return tuple(space.shape), dtype
        if isinstance(space, (gymnasium.spaces.Discrete, gymnasium.spaces.Dict, gymnasium.spaces.Tuple,
                              gymnasium.spaces.MultiDiscrete, gymnasium.spaces.MultiBinary)):
            return (int(gymnasium.spaces.flatdim(space)),), np.float32
        raise ValueError(f"env={self.name!r} has a {type(space).__name__} observation space: supported are Box, "
                         "Discrete, MultiDiscrete, MultiBinary, Dict and Tuple")

    @property
    def spec(self) -> envs.EnvSpec:
        return envs.host_spec(self.obs_shape, self.num_actions, None if self.obs_dtype == np.float32 else jnp.uint8)

    def restart(self) -> None:
        """New episodes in every env (a fresh run, or a resumed one)."""
        obs, _ = self._call(lambda: self.vector.reset(seed=self.seed), "in reset")
        self.obs = self._array(obs, "reset")
        self.returns = np.zeros(self.num_envs, np.float32)
        self.lengths = np.zeros(self.num_envs, np.int32)
        self.fresh = True

    def _array(self, batch: Any, where: str) -> np.ndarray:
        """A batch of observations from the vector env as ``[E, *obs]``."""
        gymnasium = _gymnasium()
        boxed = isinstance(self.single_obs, gymnasium.spaces.Box)
        rows = batch if boxed else list(gymnasium.vector.utils.iterate(self.vector.observation_space, batch))
        return self._checked(rows, self.num_envs, where)

    def _checked(self, rows: Any, count: int, where: str) -> np.ndarray:
        """``count`` observations, one per env, preprocessed (RLlib's default: Box as is,
        the others flattened) and checked against the space: ``[count, *obs]``."""
        gymnasium = _gymnasium()
        if isinstance(self.single_obs, gymnasium.spaces.Box):
            out = np.asarray(rows, self.obs_dtype)
        else:
            out = np.stack([gymnasium.spaces.flatten(self.single_obs, r) for r in rows]).astype(np.float32)
        if out.shape != (count,) + self.obs_shape:
            raise ValueError(f"env={self.name!r} returned observations of shape {out.shape[1:]} in {where}; its "
                             f"observation space says {self.obs_shape}")
        if out.dtype != np.uint8 and not np.all(np.isfinite(out)):
            raise ValueError(f"env={self.name!r} returned a non-finite observation in {where}")
        return out

    def fragment(self, act: Callable[[np.ndarray, int], Any], length: int
                 ) -> tuple[rollout.RawStep, rollout.Episodes]:
        """``length`` steps of every env, acting with ``act(obs [E, *obs], t)``: the raw steps
        and the episodes that ended, leaves ``[length, E]`` (numpy)."""
        steps, ended = [], []
        for t in range(length):
            action = np.asarray(act(self.obs, t))
            obs, reward, terminated, truncated, info = self._call(lambda: self.vector.step(action), "in step")
            obs = self._array(obs, "step")
            next_obs = obs.copy()
            if "_final_obs" in info and np.any(info["_final_obs"]):
                where = np.flatnonzero(info["_final_obs"])
                next_obs[where] = self._checked([info["final_obs"][i] for i in where], len(where),
                                                "step (a final observation)")
            reward = np.asarray(reward, np.float32)
            if not np.all(np.isfinite(reward)):
                raise ValueError(f"env={self.name!r} returned a non-finite reward in step")
            terminated, truncated = np.asarray(terminated, bool), np.asarray(truncated, bool)
            done = terminated | truncated
            self.returns += reward
            self.lengths += 1
            ended.append(rollout.Episodes(done=done, episode_return=self.returns.copy(),
                                          episode_length=self.lengths.copy()))
            self.returns[done], self.lengths[done] = 0.0, 0
            steps.append(rollout.RawStep(obs=self.obs, action=action.astype(np.int32), reward=reward,
                                         terminated=terminated, truncated=truncated, next_obs=next_obs))
            self.obs = obs
        self.fresh = False
        stack = lambda *xs: np.stack(xs)  # noqa: E731
        return jax.tree_util.tree_map(stack, *steps), jax.tree_util.tree_map(stack, *ended)

    def close(self) -> None:
        self.vector.close()


def check_config(config: DQNConfig, num_seeds: int | None, trials: Any) -> None:
    """What a host env does not run (yet): refused before anything compiles, naming the key."""
    refusals = {
        "num_seeds": (num_seeds is not None, "seeds of a host env are separate runs (one Trainer each)"),
        "trials": (trials is not None, "a sweep's trials of a host env are separate runs"),
        "num_devices": (config.num_devices not in (1, "auto"), "a host env's run is on one device"),
        "model.use_lstm": (config.model.use_lstm, "recurrent policies on a host env are not supported yet"),
        "multiagent": (config.multiagent is not None, "multi-agent host envs are not supported yet"),
        "evaluation_interval": (config.evaluation_interval is not None,
                                "evaluation of a host env is not supported yet (train() reports its episodes)"),
    }
    for key, (refused, why) in refusals.items():
        if refused:
            raise ValueError(f"{key} is not supported with env={config.env!r}: {why}")


def make_runner(config: DQNConfig, num_seeds: int | None = None, *, before_learn_on_batch: Any = None,
                trials: Any = None) -> parallel.Runner:
    """``parallel.make_runner``'s ``Runner`` for an env that steps on the host: ``init`` primes
    the n-step look-ahead and runs the warm-up stores from the host envs, ``chunk`` runs the
    fragments up to the next report."""
    check_config(config, num_seeds, trials)
    if config.num_devices == "auto":
        config = config.replace(num_devices=1)
    host = HostEnvs(config)
    runner = parallel.make_runner(config, before_learn_on_batch=before_learn_on_batch, spec=host.spec)
    plan, schedule = runner.plan, runner.plan.schedule
    view = plan.worker.view or (lambda raw: raw)
    take = jax.jit(lambda state, raw, episodes: plan.take(state, view(raw), episodes), donate_argnums=0)
    learn = jax.jit(lambda state, items, count: plan.learn(state, items, count)[0], donate_argnums=0,
                    static_argnums=2)
    explore = jax.jit(lambda params, sampled, obs, key, t: plan.explore(params, sampled, obs,
                                                                        jax.random.fold_in(key, t)))
    close = jax.jit(plan.close, donate_argnums=0)
    primed = plan.worker.pending if plan.worker.primed else 0
    counts = schedule.replay_counts(schedule.stores) if not schedule.credit else None

    def fragment(state: Any, length: int) -> tuple[rollout.RawStep, rollout.Episodes]:
        params = {pid: ls.params for pid, ls in state.learner.items()}
        sampled, key = state.metrics.num_steps_sampled, state.key
        return host.fragment(lambda obs, t: explore(params, sampled, obs, key, t), length)

    record = jax.jit(lambda m, episodes: metrics.record_episodes(m, episodes, {}))

    def prime(state: Any) -> Any:
        """The n-step look-ahead: the first ``n - 1`` steps of every env, carried, not stored."""
        if not primed:
            return state
        raw, episodes = fragment(state, primed)
        m = record(state.metrics, episodes)
        m = m._replace(num_steps_sampled=m.num_steps_sampled + jnp.int32(primed * config.num_envs))
        actor = state.actor._replace(pending=view(jax.tree_util.tree_map(jnp.asarray, raw)))
        return state._replace(actor=actor, metrics=m, key=jax.random.split(state.key)[0])

    def store_round(state: Any, count: Any) -> Any:
        raw, episodes = fragment(state, config.rollout_fragment_length)
        state, items = take(state, raw, episodes)
        state = state._replace(key=jax.random.split(state.key)[0])
        return learn(state, items, count)

    def init() -> Any:
        state = prime(runner.init())
        for _ in range(schedule.warmup_stores):
            state = store_round(state, 0)
        return state

    def chunk(state: Any) -> tuple[Any, dict[str, Any]]:
        if host.fresh:  # a resumed state: new episodes, the look-ahead primed again
            state = prime(state)
        sampled, at_report = int(state.metrics.num_steps_sampled), int(state.metrics.sampled_at_report)
        stores = schedule.chunk_stores(sampled, sampled - at_report)
        phase = schedule.phase(sampled)
        for i in range(stores):
            state = store_round(state, None if counts is None else int(counts[(phase + i) % schedule.period]))
        return close(state)

    return runner._replace(init=init, chunk=chunk)


__all__ = ["ENV_CREATORS", "GYMNASIUM", "HostEnvs", "check_config", "is_host_env", "make_runner", "register_env"]
