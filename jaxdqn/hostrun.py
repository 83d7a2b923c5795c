"""The plan's loop for envs that step on the host (shell layer): ``make_runner`` gives
``parallel.make_runner``'s ``Runner`` whose ``init`` and ``chunk`` step ``jaxdqn.hostenv``'s
envs, and whose ``evaluate`` plays evaluation envs of its own.

Per fragment: one jitted ``explore`` call per step of every env (the acting; with seeds, every
seed's envs in one call; a recurrent policy's memory stays on the device from call to call,
reset where an episode begins), then one jitted ``advance`` (the fragment's store, its replays,
priority updates and target syncs: no Python per SGD step). With ``R`` vmapped runs (``num_seeds``,
or a sweep's trials x seeds) the state is the one-device layout's ``[R, ...]`` (run ``k`` starts
from the key a JAX env's run ``k`` would, and learns with its trial's values) and ``R x num_envs``
envs step as one vector env: run ``k`` acts in and learns from envs ``k * num_envs ... (k + 1) *
num_envs - 1`` (reset with Gymnasium's seeds ``seed + k * num_envs + j``). All runs step in
lockstep, so their reports come at the same points. On ``D`` devices the acting and learner calls
are ``pmap``ped: data parallel, device ``d`` acts in and learns from the ``d``-th block of
``num_envs / D`` envs (its replay shard; the plan averages the gradients); with runs, device
``d`` holds runs ``d * R / D ... (d + 1) * R / D - 1`` (``RunBlocks``). Over several processes
each steps the envs of its own devices, env ``i`` of all of them reset with seed ``seed + i``
as in one process.
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdqn import evaluation, metrics, parallel, rollout, sweep
from jaxdqn.config import DEFAULT_POLICY, DQNConfig
from jaxdqn.hostagents import HostAgentEnvs, open_envs
from jaxdqn.hostenv import HostEnvs, WorkersRecreated

MAX_EVALUATION_STEPS = 100_000  # an evaluation episode's cap, as evaluation.default_max_steps's


def check_config(config: DQNConfig, host: HostEnvs, layout: parallel.Layout) -> None:
    """What a host env does not run (yet): refused before anything compiles, naming the key."""
    refusals = {
        "multiagent": (config.multiagent is not None and not isinstance(host, HostAgentEnvs),
                       "it is a single-agent env (a PettingZoo parallel env takes policies)"),
    }
    for key, (refused, why) in refusals.items():
        if refused:
            raise ValueError(f"{key} is not supported with env={config.env!r}: {why}")


class RunBlocks(NamedTuple):
    """How this process's one vector env's envs lie in its part of the state: ``[N, ...]`` is
    ``[*leading, num_envs, ...]`` in order. Block ``k`` of ``num_envs`` envs belongs to run ``k``
    (vmapped seeds, a sweep's trials x seeds), to device ``k`` (data parallel: each device steps
    its share of the envs), or with seeds on devices to run ``k % (S / D)`` of device
    ``k // (S / D)``. ``leading``: the leading axes of this process's rows of the state (``()``:
    one run on one device)."""

    leading: tuple[int, ...]
    num_envs: int
    seeds: bool = False  # a vmapped runs' axis (the last of ``leading``)
    devices: tuple[Any, ...] | None = None  # pmapped over these local devices (None: jitted, one device)
    processes: int = 1  # several: the pmap spans every process's devices

    @classmethod
    def of(cls, layout: parallel.Layout, num_envs: int) -> "RunBlocks":
        local = layout.num_local_devices
        devices = None if layout.num_devices == 1 else tuple(jax.local_devices()[:local])
        per_block = num_envs // layout.num_devices if layout.data_parallel else num_envs
        leading = layout.leading_shape if layout.num_devices == 1 else (local,) + layout.leading_shape[1:]
        return cls(leading=leading, num_envs=per_block, seeds=layout.num_seeds is not None, devices=devices,
                   processes=layout.num_processes)

    @property
    def total_envs(self) -> int:
        """This process's envs."""
        return math.prod(self.leading) * self.num_envs

    def runs(self, x: Any) -> Any:
        """``[F, N, ...]`` -> ``[*leading, F, num_envs, ...]``."""
        if not self.leading:
            return x
        xp = np if isinstance(x, np.ndarray) else jnp
        y = xp.swapaxes(x.reshape((x.shape[0], -1, self.num_envs) + x.shape[2:]), 0, 1)
        return y.reshape(self.leading + y.shape[1:])

    def flat(self, x: Any) -> Any:
        """``[*leading, num_envs, ...]`` -> ``[N, ...]``, the host's layout (device arrays of a
        pmap come to the host)."""
        if not self.leading:
            return x
        x = np.asarray(x) if self.devices is not None else x
        return x.reshape((-1,) + x.shape[len(self.leading) + 1:])

    def blocks(self, x: Any) -> Any:
        """``[N, ...]`` -> ``[*leading, num_envs, ...]``."""
        return x if not self.leading else x.reshape(self.leading + (self.num_envs,) + x.shape[1:])

    def compiled(self, fn: Callable[..., Any], in_axes: Any = 0, donate_argnums: tuple[int, ...] = ()
                 ) -> Callable[..., Any]:
        """``fn`` of one run (one device's replica) over the leading axes, compiled: jitted, over
        the runs with ``vmap``, over the devices with ``pmap`` (the plan's device axis: its
        collectives), or both."""
        inner = jax.vmap(fn, in_axes, axis_name=parallel.RUNS) if self.seeds else fn
        if self.devices is None:
            return jax.jit(inner, donate_argnums=donate_argnums)
        devices = self.devices if self.processes == 1 else None  # pmap's default: every process's devices
        return jax.pmap(inner, parallel.AXIS, in_axes=in_axes, devices=devices, donate_argnums=donate_argnums)


def make_fragment(host: HostEnvs, plan_of: Callable[[Any], Any], values: dict[str, Any], blocks: RunBlocks,
                  recurrent: bool) -> Callable[[Any, int], tuple[rollout.RawStep, rollout.Episodes, Any]]:
    """``fragment(state, length)``: ``length`` steps of the host's envs, one jitted acting call
    per step for every run: raw steps and episodes ``[F, R * E]``, and a recurrent actor's
    memory after them (``()`` for a feed-forward one)."""

    def explore_one(params: Any, sampled: Any, obs: Any, key: Any, v: Any, t: Any, memory: Any) -> Any:
        return plan_of(v).explore(params, sampled, obs, jax.random.fold_in(key, t), memory)

    mapped = blocks.compiled(explore_one, in_axes=(0, 0, 0, 0, 0, None, 0))

    def explore(params: Any, sampled: Any, obs: Any, key: Any, t: Any, memory: Any = None) -> Any:
        """Every run's actions (and recurrent states) on the host's layout ``[N, ...]``."""
        out = mapped(params, sampled, jax.tree_util.tree_map(blocks.blocks, obs), key, values, t,
                     jax.tree_util.tree_map(blocks.blocks, memory))
        return jax.tree_util.tree_map(blocks.flat, out)

    # a pmapped layout's memory comes to the host to be flattened (blocks.flat); one device's stays there
    flat_memory = ((lambda memory: jax.tree_util.tree_map(blocks.flat, memory)) if blocks.devices is not None
                   else jax.jit(lambda memory: jax.tree_util.tree_map(blocks.flat, memory)))

    def fragment(state: Any, length: int) -> tuple[rollout.RawStep, rollout.Episodes, Any]:
        params = {pid: ls.params for pid, ls in state.learner.items()}
        sampled, key = state.metrics.num_steps_sampled, state.key
        if not recurrent:
            return (*host.fragment(lambda obs, t, first: explore(params, sampled, obs, key, t), length), ())
        carried, acted_from = [flat_memory(state.actor.memory).state], []

        def act(obs: np.ndarray, t: int, first: np.ndarray) -> Any:
            memory = rollout.Memory(state=carried[0], first=first)
            action, carried[0] = explore(params, sampled, obs, key, t, memory)
            acted_from.append(memory)
            return action

        raw, episodes = host.fragment(act, length)
        memory = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *acted_from)  # [F, R * E, ...]
        return raw._replace(memory=memory), episodes, rollout.Memory(state=carried[0], first=host.first)

    return fragment


def make_runner(config: DQNConfig, num_seeds: int | None = None, *, before_learn_on_batch: Any = None,
                trials: Any = None) -> parallel.Runner:
    """``parallel.make_runner``'s ``Runner`` for an env that steps on the host: ``init`` primes
    the n-step look-ahead and runs the warm-up stores from the host envs, ``chunk`` runs the
    fragments up to the next report (the module docstring)."""
    num_runs = num_seeds if trials is None else len(trials) * (num_seeds or 1)  # vmapped: seeds, trials x seeds
    layout = parallel.make_layout(config, num_runs, 1 if trials is None else len(trials))
    blocks = RunBlocks.of(layout, config.num_envs)
    # this process's envs, reset with the seeds they would have in one process holding them all
    first_env = layout.process_index * blocks.total_envs
    host = open_envs(config, num_envs=blocks.total_envs, seed=config.seed + first_env)
    try:
        check_config(config, host, layout)
    except ValueError:
        host.close()
        raise
    runner = parallel.make_runner(config, num_seeds, before_learn_on_batch=before_learn_on_batch, trials=trials,
                                  spec=host.spec)
    plan, schedule = runner.plan, runner.plan.schedule
    view = plan.worker.view or (lambda raw: raw)
    # a sweep's traced keys, one value per run in the state's layout
    first = layout.process_index * layout.num_local_devices  # this process's first device row
    values = {k: jnp.asarray(np.asarray(v).reshape(layout.leading_shape)[first:first + layout.num_local_devices]
                             if layout.num_devices > 1 else v) for k, v in runner.trial_values.items()}

    def plan_of(v: dict[str, Any]) -> Any:
        """The plan of one run: a sweep's trial's values in place of the config's."""
        return plan if not v else parallel.make_plan(config, before_learn_on_batch=before_learn_on_batch,
                                                     hyper=sweep.hyperparams(config, v), spec=host.spec,
                                                     runs_axis=parallel.RUNS)

    def advance_one(state: Any, raw: rollout.RawStep, episodes: rollout.Episodes, v: Any, memory: Any,
                    count: Any) -> Any:
        """One fragment's store and its replays (``count``; ``None``: the credit's); a recurrent
        actor's ``memory`` after the fragment."""
        one = plan_of(v)
        state = state._replace(actor=state.actor._replace(memory=memory))
        state, items = one.take(state, view(raw), episodes)
        return one.learn(state._replace(key=jax.random.split(state.key)[0]), items, count)[0]

    @functools.lru_cache(maxsize=None)
    def advance_of(count: int | None) -> Callable[..., Any]:
        """The compiled fragment step with ``count`` replays (None: the credit's)."""
        return blocks.compiled(lambda s, r, e, v, m: advance_one(s, r, e, v, m, count), donate_argnums=(0,))

    def advance(state: Any, raw: rollout.RawStep, episodes: rollout.Episodes, memory: Any, count: Any) -> Any:
        return advance_of(count)(state, *jax.tree_util.tree_map(blocks.runs, (raw, episodes)), values,
                                 jax.tree_util.tree_map(blocks.blocks, memory))

    close = blocks.compiled(plan.close, donate_argnums=(0,))
    record = blocks.compiled(lambda m, episodes: metrics.record_episodes(m, episodes,
                                                                         plan.worker.policy_episodes(episodes)))
    primed = plan.worker.pending if plan.worker.primed else 0
    counts = schedule.replay_counts(schedule.stores) if not schedule.credit else None
    new_key = blocks.compiled(lambda key: jax.random.split(key)[0])
    viewed = blocks.compiled(view)
    fragment = make_fragment(host, plan_of, values, blocks, config.model.use_lstm)

    def prime(state: Any) -> Any:
        """The n-step look-ahead: the first ``n - 1`` steps of every env, carried, not stored."""
        if not primed:
            return state
        raw, episodes = jax.tree_util.tree_map(blocks.runs, fragment(state, primed)[:2])
        m = record(state.metrics, episodes)
        m = m._replace(num_steps_sampled=m.num_steps_sampled + jnp.int32(primed * config.num_envs))
        actor = state.actor._replace(pending=viewed(raw))
        return state._replace(actor=actor, metrics=m, key=new_key(state.key))

    def store_round(state: Any, count: Any) -> Any:
        """One fragment stored and learned from; after new episodes (a fresh or resumed run,
        recreated workers) the look-ahead is primed first."""
        while True:
            try:
                if host.fresh:
                    state = prime(state)
                return advance(state, *fragment(state, config.rollout_fragment_length), count)
            except WorkersRecreated as e:
                warnings.warn(f"{e}; its rollout workers were recreated (recreate_failed_workers) and the "
                              "fragment they were in dropped", RuntimeWarning, stacklevel=2)

    def init() -> Any:
        state = runner.init()
        for _ in range(schedule.warmup_stores):
            state = store_round(state, 0)
        return prime(state) if host.fresh else state

    def chunk(state: Any) -> tuple[Any, dict[str, Any]]:
        if host.fresh:  # a resumed state: new episodes, the look-ahead primed again
            state = prime(state)
        counters = np.asarray(jax.device_get((state.metrics.num_steps_sampled, state.metrics.sampled_at_report)))
        sampled, at_report = (int(np.ravel(c)[0]) for c in counters)  # the runs step in lockstep
        stores = schedule.chunk_stores(sampled, sampled - at_report)
        phase = schedule.phase(sampled)
        for i in range(stores):
            state = store_round(state, None if counts is None else int(counts[(phase + i) % schedule.period]))
        return close(state)

    return runner._replace(init=init, chunk=chunk, evaluate=make_evaluate(config, plan, num_runs))


def make_evaluate(config: DQNConfig, plan: Any, num_runs: int | None = None) -> Callable[..., evaluation.Evaluation]:
    """``evaluate(params, key, eps=0.0) -> Evaluation``, the plan's evaluation for host envs:
    ``evaluation_num_episodes`` envs of their own in this process (RLlib's local evaluation
    worker), one episode each, greedy or (``evaluation_config.explore``) epsilon-greedy at
    ``eps``; ``key`` seeds their resets and the acting. With ``num_runs`` (seeds, trials x seeds)
    every argument has the runs' axis and each run plays its episodes in turn (leaves ``[R, N]``). The envs are made at the
    first call."""
    one = plan.worker.evaluation_actions  # by policy: the agents' actions for a multi-agent env
    act = jax.jit(lambda params, obs, eps, key, t, memory: one(params, obs, eps, jax.random.fold_in(key, t), memory))
    made: list[HostEnvs] = []

    def evaluate_one(params: dict[str, Any], key: Any, eps: Any) -> evaluation.Evaluation:
        if not made:
            made.append(open_envs(config.replace(num_workers=0, num_envs_per_worker=config.evaluation_num_episodes)))
        seed = int(jax.random.bits(key, (), jnp.uint32) >> 1)
        # a recurrent policy: every episode from the initial state (one episode per env)
        memory = [plan.worker.policies[DEFAULT_POLICY].network.initial_state(config.evaluation_num_episodes)
                  if config.model.use_lstm else ()]

        def step(obs: np.ndarray, t: int) -> Any:
            action, memory[0] = act(params, obs, eps, key, t, memory[0])
            return action

        returns, lengths, finished = made[0].episodes(step, MAX_EVALUATION_STEPS, seed)
        return evaluation.Evaluation(episode_return=returns, episode_length=lengths, finished=finished)

    def evaluate(params: dict[str, Any], key: Any, eps: Any = 0.0) -> evaluation.Evaluation:
        if num_runs is None:
            return evaluate_one(params, key, eps)
        eps = jnp.broadcast_to(jnp.asarray(eps), (num_runs,))
        each = [evaluate_one(jax.tree_util.tree_map(lambda x: x[k], params), key[k], eps[k]) for k in range(num_runs)]
        return jax.tree_util.tree_map(lambda *xs: np.stack(xs), *each)

    return evaluate


__all__ = ["MAX_EVALUATION_STEPS", "check_config", "make_evaluate", "make_runner"]
