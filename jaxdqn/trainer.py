"""The Trainer (shell layer): RLlib's ``Trainer.train() / evaluate() / save() / restore()`` over
the pure execution plan.

``Trainer(config)`` holds one ``TrainState`` (or, with ``num_seeds=S``, ``S`` independent ones
stacked and run with ``vmap``). ``train()`` runs a jitted chunk up to RLlib's next result (the state
donated: replay storage updated in place; an env of the host: ``jaxdqn.hostenv``), RLlib's result dict.
``save(dir)`` / ``restore(path)`` write and read the complete state atomically
(``jaxdqn.checkpoint``), so a restored run continues bit for bit.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

import jaxdqn
from jaxdqn import checkpoint, envs, exploration, hostenv, hostrun, metrics, parallel, sweep
from jaxdqn.config import DEFAULT_POLICY, DQNConfig, algo_of, classified, from_dict, to_dict
from jaxdqn.errors import Diverged
from jaxdqn.policy import BatchHook
from jaxdqn.resources import check_memory, warn_without_kernels
from jaxdqn.results import divergence, merge_reports, result_dict
from jaxdqn.rollout import Memory

# Keys that may differ between a checkpoint and the config that restores it (``resumable``
# metadata): they change how long or how often the shell runs things, never the state or the
# arithmetic of a step.
RESUMABLE_KEYS = frozenset(classified(DQNConfig, "resumable"))
EVAL_STREAM = 0x5EED  # folded into the seed for evaluation keys, apart from training's keys
CHECKPOINT_FORMAT = 6  # 4: an ALE batch's frames stored once; 5: one rollout state for one agent or several;
# 6: a manifest of checksums


def apply_overrides(config: DQNConfig, overrides: Mapping[str, Any]) -> DQNConfig:
    """``config`` with a trial's ``overrides`` (our keys; ``a.b`` or nested mappings reach into
    the sub-configs ``config.NESTED``), validated."""
    data = to_dict(config)
    for key, value in overrides.items():
        parent, _, leaf = str(key).rpartition(".")
        if parent:
            if not isinstance(data.get(parent), dict):
                raise ValueError(f"trial key {key!r} is invalid: {parent!r} is not a nested section")
            data[parent] = {**data[parent], leaf: value}
        elif isinstance(value, Mapping) and isinstance(data.get(leaf), dict) and leaf != "env_params":
            data[leaf] = {**data[leaf], **value}
        else:
            data[leaf] = value
    return from_dict(data, algo_of(config))


def config_differences(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """``"key: checkpoint X, now Y"`` for every key outside ``RESUMABLE_KEYS`` that differs."""
    keys = sorted((set(saved) | set(current)) - RESUMABLE_KEYS)
    return [f"{k}: checkpoint {saved.get(k)!r}, now {current.get(k)!r}" for k in keys
            if saved.get(k) != current.get(k)]


class Trainer:
    """DQN / SimpleQ training, one jitted chunk per ``train()`` call.

    Args:
      config: a ``DQNConfig`` / ``SimpleQConfig``, or a mapping of our keys (with ``algo``).
      algo: ``"dqn"`` or ``"simple_q"`` when ``config`` is a mapping.
      num_seeds: ``None`` for one run; ``S`` for ``S`` independent runs stacked with ``vmap``
        (seed ``k`` is ``jax.random.split(key(config.seed), S)[k]``); ``train()`` then returns a
        list of ``S`` result dicts.
      before_learn_on_batch: RLlib's hook, a pure ``(Sample, key) -> Sample``.
      trials: a sweep: one mapping of overrides per trial (``{"lr": 1e-3, "exploration_config.
        final_epsilon": 0.1}``), applied to ``config`` and validated; they may differ only in
        ``sweep.TRACED_KEYS`` and ``seed``. All ``trials x num_seeds`` runs are one vmapped
        program; ``train()`` returns ``results[trial][seed]`` (``results[trial]`` without
        ``num_seeds``), each with Tune's ``config`` (the trial's overrides); trial ``t``'s seed
        ``k`` is the run of ``Trainer(trial_config, num_seeds=S)``'s seed ``k``.

    ``config.num_devices`` (``"auto"``: all) runs the plan on several devices, data parallel, or,
    with ``num_seeds``, the seeds spread over the devices (``jaxdqn.parallel``); the layout is
    checked here, before anything compiles.
    """

    def __init__(self, config: DQNConfig | Mapping[str, Any], *, algo: str = "dqn",
                 num_seeds: int | None = None, before_learn_on_batch: BatchHook | None = None,
                 trials: Sequence[Mapping[str, Any]] | None = None) -> None:
        if not isinstance(config, DQNConfig):
            config = from_dict(config, algo)
        if num_seeds is not None and (not isinstance(num_seeds, int) or isinstance(num_seeds, bool)
                                      or num_seeds < 1):
            raise ValueError(f"num_seeds={num_seeds!r} is invalid: must be None or an int >= 1")
        self.num_seeds = num_seeds
        warn_without_kernels(config)
        self.trials = None if trials is None else [dict(t) for t in trials]
        trial_configs = None
        if trials is not None:
            if not self.trials:
                raise ValueError("trials=[] is invalid: give at least one trial's overrides, e.g. [{'lr': 1e-3}]")
            trial_configs = [apply_overrides(config, t) for t in self.trials]
            config = trial_configs[0]
        self.trial_configs = trial_configs
        make_runner = hostrun.make_runner if hostenv.is_host_env(config.env) else parallel.make_runner
        self.runner = make_runner(config, num_seeds, before_learn_on_batch=before_learn_on_batch, trials=trial_configs)
        check_memory(config, self.runner)
        self.layout = self.runner.layout
        self.plan = self.runner.plan
        multi = config.multiagent
        if multi is not None and callable(multi.policy_mapping_fn):  # static: store what it resolved to
            config = config.replace(multiagent=dataclasses.replace(multi, policy_mapping_fn=self.plan.policy_mapping))
        self.config = config
        self._chunk = self.runner.chunk
        self._runs = self.layout.num_seeds  # the vmapped axis: seeds, or trials x seeds (None: one run)
        stacked = (lambda f: jax.vmap(f)) if self._runs is not None else (lambda f: f)
        self._evaluate = self.runner.evaluate or jax.jit(stacked(self.plan.evaluate))
        self._act = jax.jit(self.plan.act, static_argnums=2)  # (params, obs, policy_id, memory=None)
        self._state: Any = None
        self.iteration = 0
        self.time_total_s = 0.0
        self.evaluations = 0
        self._explore_draws = 0

    def _nest(self, runs: list[Any]) -> Any:
        """One item per vmapped run -> the public shape: one item, a list over seeds, or with
        trials a list over trials (of lists over seeds when ``num_seeds`` is set)."""
        if self._runs is None:
            return runs[0]
        if self.trials is None:
            return runs
        per = self.num_seeds or 1
        groups = [runs[t * per:(t + 1) * per] for t in range(len(self.trials))]
        return groups if self.num_seeds is not None else [g[0] for g in groups]

    # --- state -----------------------------------------------------------------------------
    @property
    def state(self) -> Any:
        """This process's ``TrainState``, built (warm-up included) on first use. Leaves have the
        layout's leading axes: ``[]``, ``[S]`` (seeds), ``[D]`` (data parallel) or ``[D, S/D]``."""
        if self._state is None:
            self._state = self.runner.init()
        return self._state

    def _seed_view(self, tree: Any, seed: int, trial: int = 0) -> Any:
        """The rows of run (``trial``, ``seed``) of a tree with the vmapped run axis."""
        if self.trials is None and trial != 0:
            raise ValueError(f"trial={trial} is invalid: this Trainer runs no sweep (trial 0)")
        if self.trials is not None and not 0 <= trial < len(self.trials):
            raise ValueError(f"trial={trial} is invalid: must be in [0, {len(self.trials) - 1}]")
        if self.num_seeds is None:
            if seed != 0:
                raise ValueError(f"seed={seed} is invalid: this Trainer runs one seed (0)")
        elif not 0 <= seed < self.num_seeds:
            raise ValueError(f"seed={seed} is invalid: must be in [0, {self.num_seeds - 1}]")
        if self._runs is None:
            return tree
        run = trial * (self.num_seeds or 1) + seed
        return jax.tree_util.tree_map(lambda x: x[run], tree)

    @property
    def params(self) -> dict[str, Any]:
        """The online Q-network parameters of each policy, as RLlib's ``get_weights()``: policy id
        -> params (``default_policy`` for a single agent; leaves ``[S, ...]`` with seeds,
        ``[T, S, ...]`` or ``[T, ...]`` with trials; one copy of the replicated params with several
        devices)."""
        return self._unflatten_runs(self._run_params())

    def get_weights(self, policies: Sequence[str] | None = None) -> dict[str, Any]:
        """RLlib's ``Trainer.get_weights``: ``params`` for the ``policies`` named (default: all)."""
        params = self.params
        unknown = sorted(set(policies or ()) - set(params))
        if unknown:
            raise ValueError(f"policies={unknown} are not this run's; its policies are {sorted(params)}")
        return {pid: params[pid] for pid in (policies or params)}

    def _run_params(self) -> dict[str, Any]:
        """The params with the vmapped run axis (``[R, ...]``) as the plan's functions take them."""
        return self.runner.unreplicate({pid: ls.params for pid, ls in self.state.learner.items()})

    def _unflatten_runs(self, tree: Any) -> Any:
        if self.trials is None or self.num_seeds is None:
            return tree
        shape = (len(self.trials), self.num_seeds)
        return jax.tree_util.tree_map(lambda x: x.reshape(shape + x.shape[1:]), tree)

    # --- RLlib's API ---------------------------------------------------------------------------
    def train(self) -> Any:
        """One iteration: a chunk up to RLlib's next result (``Schedule.chunk_stores``), or
        more chunks until ``min_iter_time_s`` has passed; then, every
        ``evaluation_interval`` iterations, an ``evaluate()`` whose results come under
        ``"evaluation"`` (RLlib's ``Trainer.train``). The first iteration counts the warm-up's
        steps and episodes too, so ``timesteps_this_iter`` sums to ``timesteps_total``.

        Returns a result dict, a list of them (one per seed), or with ``trials`` a list per trial
        of those (``results[trial][seed]``, or ``results[trial]`` without ``num_seeds``)."""
        start = time.perf_counter()
        reports = []
        while not reports or time.perf_counter() - start < self.config.min_iter_time_s:
            state = self.state
            self._state = None  # donated below: never keep a handle on deleted buffers
            state, report = self._chunk(state)
            reports.append(self.runner.report_to_host(report))  # the host round-trip: a few scalars per seed
            self._state = state
        report = merge_reports(reports)
        seconds = time.perf_counter() - start
        problem = divergence(report)
        if problem is not None:  # the state stays (for inspection); saving and evaluating it are refused
            raise Diverged(f"training diverged in iteration {self.iteration + 1}: {problem}; lower lr, or "
                           "clip gradients (grad_clip)")
        self.iteration += 1
        self.time_total_s += seconds
        timing = dict(iteration=self.iteration, time_this_iter_s=seconds, time_total_s=self.time_total_s)
        if self._runs is None:
            runs = [result_dict(report, **timing)]
        else:
            runs = [result_dict({k: np.asarray(v)[r] if np.ndim(v) else v for k, v in report.items()}, **timing)
                    for r in range(self._runs)]
        for r, config in enumerate(self._run_configs()):
            runs[r]["config"] = config
        interval = self.config.evaluation_interval
        if interval is not None and self.iteration % interval == 0:
            for result, one in zip(runs, self._evaluate_runs()):
                result.update(one)
        return self._nest(runs)

    def _run_configs(self) -> list[dict[str, Any]]:
        """Each run's trial overrides (Tune's ``config`` in a sweep's results; empty otherwise)."""
        if self.trials is None:
            return []
        return [dict(t) for t in self.trials for _ in range(self.num_seeds or 1)]

    def _schedule_epsilon(self) -> Any:
        """The epsilon schedule's value now (``[R]`` with vmapped runs), each run its trial's."""
        sampled = self.runner.unreplicate(self.state.metrics.num_steps_sampled)
        return sweep.per_trial(self.config, self.runner.trial_values,
                               lambda hyper, t: exploration.epsilon(hyper, t), sampled)

    def _epsilon(self) -> Any:
        """The behaviour policy's current epsilon (``[R]`` with vmapped runs; 0 with ``explore=False``)."""
        eps = self._schedule_epsilon()
        return eps if self.config.explore else jnp.zeros_like(eps)

    def evaluate(self) -> Any:
        """``evaluation_num_episodes`` episodes, greedy or (``evaluation_config.explore``)
        epsilon-greedy at the current epsilon: ``{"evaluation": {episode_reward_mean, ...}}``
        (per seed and trial, shaped as ``train()``'s results)."""
        self._refuse_nonfinite(self._run_params(), "evaluate")
        return self._nest(self._evaluate_runs())

    def _refuse_nonfinite(self, tree: Any, what: str) -> None:
        """``Diverged`` if ``tree`` (params, or learner states) holds a NaN or an infinity."""
        leaves = jax.tree_util.tree_leaves(jax.device_get(tree))
        if not all(np.isfinite(x).all() for x in leaves if np.issubdtype(np.asarray(x).dtype, np.inexact)):
            raise Diverged(f"cannot {what}: the learner's parameters hold non-finite values (a diverged run)")

    def _evaluate_runs(self) -> list[dict[str, Any]]:
        def stream(seed: int) -> Any:
            return jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), EVAL_STREAM), self.evaluations)

        if self.trials is not None:  # each trial's seed, as in a run of that trial alone
            key = jax.numpy.concatenate([jax.random.split(stream(c.seed), self.num_seeds or 1)
                                         for c in self.trial_configs])
        else:
            key = stream(self.config.seed)
            if self._runs is not None:
                key = jax.random.split(key, self._runs)
        self.evaluations += 1
        out = jax.device_get(self._evaluate(self._run_params(), key, self._epsilon()))

        def one(ret: np.ndarray, length: np.ndarray) -> dict[str, Any]:
            return {"evaluation": {
                "episode_reward_mean": float(np.mean(ret)), "episode_reward_min": float(np.min(ret)),
                "episode_reward_max": float(np.max(ret)), "episode_len_mean": float(np.mean(length)),
                "episodes_this_iter": int(ret.shape[0]), "hist_stats": {"episode_reward": ret.tolist()},
            }}

        if self._runs is None:
            return [one(out.episode_return, out.episode_length)]
        return [one(out.episode_return[r], out.episode_length[r]) for r in range(self._runs)]

    def get_initial_state(self) -> list[np.ndarray]:
        """A recurrent policy's initial state for ``compute_single_action`` (RLlib's name):
        ``[c, h]``, each ``[lstm_cell_size]``; ``[]`` for a feed-forward one."""
        if not self.config.model.use_lstm:
            return []
        return [np.asarray(x[0]) for x in self.plan.networks[DEFAULT_POLICY].initial_state(1)]

    def compute_single_action(self, observation: Any, state: list[Any] | None = None, *,
                              policy_id: str | None = None, explore: bool | None = None, seed: int = 0,
                              trial: int = 0) -> Any:
        """The action for one observation: greedy, or epsilon-greedy at the current epsilon;
        ``explore=None`` takes the config's ``explore`` (RLlib's default: True). Exploring, a
        noisy network (``noisy=True``) acts on Q-values with fresh noise, as RLlib's does;
        greedy, on its mean weights.

        A recurrent policy (``model.use_lstm``) also takes the ``state`` it returned for the
        previous observation of the episode (``None`` or ``get_initial_state()`` at an episode's
        start) and returns ``(action, state_out)``, as RLlib's does. A multi-agent run needs the
        ``policy_id`` (RLlib's argument) unless it has one policy.
        """
        obs = jnp.asarray(observation, jnp.float32)
        policies = self.plan.policy_ids
        if policy_id is None and len(policies) == 1:
            policy_id = policies[0]
        if policy_id not in policies:
            raise ValueError(f"policy_id={policy_id!r} is invalid: this run's policies are {list(policies)}")
        bundle = self.plan.worker.policies[policy_id]
        obs_shape, num_actions = bundle.obs.shape, bundle.network.num_actions
        if obs.shape != obs_shape:
            raise ValueError(f"observation has shape {obs.shape}; this env's is {obs_shape}")
        params = self._seed_view(self._run_params(), seed, trial)
        if explore is None:
            explore = self.config.explore
        rng = noise_key = None
        if explore:
            sampled = self._seed_view(self.runner.unreplicate(self.state.metrics.num_steps_sampled), seed, trial)
            self._explore_draws += 1  # a fresh draw per call, reproducible from the seed
            rng = np.random.default_rng([self.config.seed, trial, seed, int(sampled), self._explore_draws])
            if bundle.network.head.noisy:
                noise_key = jax.random.key(int(rng.integers(2**31)))
        recurrent, memory = self.config.model.use_lstm, None
        if recurrent:
            first = state is None
            state = self.get_initial_state() if state is None else state
            if len(state) != 2 or any(np.shape(x) != (self.config.model.lstm_cell_size,) for x in state):
                raise ValueError(f"state must be [c, h], each of shape ({self.config.model.lstm_cell_size},) "
                                 f"as get_initial_state() returns, got shapes {[np.shape(x) for x in state]}")
            memory = Memory(state=tuple(jnp.asarray(x, jnp.float32)[None] for x in state),
                            first=jnp.full((1,), first))
        elif state:
            raise ValueError("state is only for recurrent policies (model.use_lstm=True); this one is feed-forward")
        out = self._act(params, obs[None], policy_id, memory, noise_key)
        actions, state_out = out if recurrent else (out, None)
        action = int(actions[0])
        if rng is not None and rng.random() < float(self._seed_view(self._schedule_epsilon(), seed, trial)):
            action = int(rng.integers(num_actions))
        if recurrent:
            return action, [np.asarray(x[0]) for x in state_out]
        return action

    # --- checkpoints ----------------------------------------------------------------------------
    def _meta(self) -> dict[str, Any]:
        return {
            "format": CHECKPOINT_FORMAT, "jaxdqn_version": jaxdqn.__version__, "algo": algo_of(self.config),
            "config": to_dict(self.config), "num_seeds": self.num_seeds, "num_devices": self.layout.num_devices,
            "trials": self.trials,
            "iteration": self.iteration,
            "time_total_s": self.time_total_s, "evaluations": self.evaluations,
        }

    def save(self, checkpoint_dir: str | os.PathLike, *, keep: int | None = None) -> str:
        """Write the complete state to ``checkpoint_dir/checkpoint_<iteration>``; returns the path.

        Atomic: a crash during ``save`` leaves earlier checkpoints intact and no partial one
        under a final name. ``keep`` retains only the newest ``keep`` checkpoints. With several
        processes every process must call it: the state is gathered, and orbax has process 0
        write it while the others wait."""
        state = self.runner.to_host(self.state)
        self._refuse_nonfinite(state.learner, "save")
        return str(checkpoint.save(checkpoint_dir, self.iteration, state, self._meta(), keep=keep))

    def restore(self, path: str | os.PathLike, *, learner_only: bool = False) -> None:
        """Load a checkpoint (a ``checkpoint_*`` folder, or the newest one in a folder).

        Refused with a ``ValueError`` listing what differs when the checkpoint's algorithm,
        seed count or config (other than ``RESUMABLE_KEYS``) differ from this Trainer's.

        Across device layouts: independent seeds (``num_seeds``) move exactly onto any device
        count that divides them; a data-parallel state (one replay shard and env batch per
        device) restores only onto as many devices as it was saved from, or, with
        ``learner_only=True``, onto any: a warm start that keeps the checkpoint's params, target
        and optimizer state, while envs, replay buffer, counters and schedules start afresh."""
        meta = checkpoint.read_meta(path)
        problems = []
        if meta.get("format") != CHECKPOINT_FORMAT:
            problems.append(f"format: checkpoint {meta.get('format')!r}, now {CHECKPOINT_FORMAT}")
        if meta.get("algo") != algo_of(self.config):
            problems.append(f"algo: checkpoint {meta.get('algo')!r}, now {algo_of(self.config)!r}")
        if meta.get("num_seeds") != self.num_seeds:
            problems.append(f"num_seeds: checkpoint {meta.get('num_seeds')!r}, now {self.num_seeds!r}")
        if meta.get("trials") != self.trials:
            problems.append(f"trials: checkpoint {meta.get('trials')!r}, now {self.trials!r}")
        saved_devices = int(meta.get("num_devices", 1))
        devices = self.layout.num_devices
        sharded = self._runs is None and devices != saved_devices and max(devices, saved_devices) > 1
        if sharded and not learner_only:
            problems.append(
                f"num_devices: the checkpoint's state is laid out over {saved_devices} device(s) (one replay "
                f"shard and env batch each), this Trainer runs on {devices}; restore it on {saved_devices} "
                f"devices (on a CPU: XLA_FLAGS=--xla_force_host_platform_device_count={saved_devices}), or "
                f"keep only its learner: restore(path, learner_only=True)")
        differences = config_differences(meta.get("config", {}), to_dict(self.config))
        problems += [d for d in differences if not d.startswith("num_devices:")]  # the layout: above
        if problems:
            raise ValueError(f"checkpoint {str(checkpoint.resolve(path))!r} does not fit this Trainer: "
                             + "; ".join(problems))
        # The episode rings are sized by timesteps_per_iteration: restored at the saved size, then resized.
        saved_config = self.config.replace(num_devices=saved_devices, timesteps_per_iteration=meta.get(
            "config", {}).get("timesteps_per_iteration", self.config.timesteps_per_iteration))
        spec = self.plan.spec if self.plan.worker.env is None else None  # an env of the host: the shell's spec
        state, meta = checkpoint.restore(path, parallel.global_template(saved_config, saved_devices, self._runs,
                                                                        spec=spec))
        if saved_config.timesteps_per_iteration != self.config.timesteps_per_iteration:
            wanted = parallel.global_template(self.config.replace(num_devices=saved_devices), saved_devices, self._runs,
                                              spec=spec)
            state = state._replace(metrics=metrics.resize_rings(state.metrics, wanted.metrics))
        if saved_devices != devices or learner_only:
            state = self.runner.replicate(parallel.unreplicate_global(state, saved_devices, self._runs))
        if learner_only:
            self._state = self.state._replace(learner=self.runner.to_device(state.learner))
            return
        self._state = self.runner.to_device(state)
        if envs.is_batched(self.plan.spec):
            # The emulator's games are not in a checkpoint: new episodes, and the n-step
            # look-ahead marked as no transitions (``rollout.init``), so nothing spans the cut.
            fresh = lambda key: self.plan.worker.init(jax.random.fold_in(key, self.iteration))  # noqa: E731
            actor = jax.jit(fresh if self._runs is None else jax.vmap(fresh))(self._state.key)
            self._state = self._state._replace(actor=actor)
        self.iteration = int(meta["iteration"])
        self.time_total_s = float(meta["time_total_s"])
        self.evaluations = int(meta.get("evaluations", 0))

    @classmethod
    def from_checkpoint(cls, path: str | os.PathLike, *, before_learn_on_batch: BatchHook | None = None,
                        learner_only: bool = False, **overrides: Any) -> "Trainer":
        """A Trainer built from the config stored in a checkpoint (``overrides``: resumable keys
        such as ``total_timesteps``, and ``num_devices``), with the checkpoint's state loaded
        (see ``restore`` for moving between device layouts and ``learner_only``)."""
        meta = checkpoint.read_meta(path)
        allowed = RESUMABLE_KEYS | {"num_devices"}
        if not_allowed := sorted(set(overrides) - allowed):
            raise ValueError(f"{not_allowed} cannot change when resuming; allowed: {sorted(allowed)}")
        config = from_dict({**meta["config"], **overrides}, meta["algo"])
        trainer = cls(config, num_seeds=meta["num_seeds"], before_learn_on_batch=before_learn_on_batch,
                      trials=meta.get("trials"))
        trainer.restore(path, learner_only=learner_only)
        return trainer

    @property
    def timesteps_total(self) -> int:
        """Env steps sampled so far (the smallest over seeds; they are equal by construction)."""
        return int(np.min(jax.device_get(self.state.metrics.num_steps_sampled)))

    def __repr__(self) -> str:
        seeds = "" if self.num_seeds is None else f", num_seeds={self.num_seeds}"
        seeds += "" if self.trials is None else f", trials={len(self.trials)}"
        return f"Trainer({algo_of(self.config)}, env={self.config.env!r}{seeds}, iteration={self.iteration})"


__all__ = ["RESUMABLE_KEYS", "Trainer", "apply_overrides", "config_differences"]
