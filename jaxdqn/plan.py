"""The execution plan (RLlib's DQN ``execution_plan``) as scans over an explicit ``TrainState``.

RLlib's plan is two ops alternated round robin by ``training_intensity``: ``store_op``
(ParallelRollouts -> StoreToReplayBuffer) and ``replay_op`` (Replay -> TrainOneStep -> update
priorities -> UpdateTargetNetwork). ``make_plan(config)`` returns them as pure functions:

- ``sample(state) -> (state, items)``: one rollout fragment of the worker's envs (ParallelRollouts),
  its episodes recorded, and the items each replay buffer stores;
- ``learn(state, items) -> (state, stats)``, the learner side of every source of items: store the
  items (StoreToReplayBuffer), then the replays the schedule pays for (``replay``: each trained
  policy samples its buffer, runs ``before_learn_on_batch``, one SGD step, writes the new
  priorities and syncs its target when due; ``policy.replay``);
- the compiled plan is ``scan(sample -> learn)``: ``chunk(state)`` runs one report's stores
  (about ``timesteps_per_iteration`` env steps) and returns RLlib's result (``metrics``);
  ``train(key)`` runs ``total_timesteps``; ``start(key)`` builds the state, and the first chunk
  fills the replay until ``learning_starts`` (stores without replays) before its own stores
  (``init(key)``: a state with the warm-up done, for step-by-step use).

The schedule (``jaxdqn.schedule``) says how many replays follow each store. A chunk is one loop
of rounds (its warm-up's included), so its program compiles ``sample``, ``store`` and
``replay`` once each. Only a chunk's last SGD step's learner statistics are computed, as RLlib
reports them: every step leaves its unreduced record, the loop carries the latest, and the
report reduces it (the others' dozen small kernels never run: docs/benchmarks.md).

One plan for every variant: as in RLlib, a single agent is a multi-agent run with one policy,
``default_policy``, so learners, buffers and learner statistics are dicts keyed by policy (by
buffer id for buffers). What differs is the ``worker.Worker``: ``worker.single_agent``
(transitions, stacked frames, or sequences with ``model.use_lstm``) or
``multiagent.make_worker``.

Data parallelism: with ``axis_name`` (the plan then runs inside ``parallel``'s ``pmap``) and
``num_replicas = D``, each replica steps ``num_envs / D`` environments into its own replay
shard of ``buffer_size / D`` items and replays ``train_batch_size / D`` of them; gradients and
learner statistics are averaged over the axis, so params, targets and counters (the totals of
all replicas, as RLlib's) are the same on every replica. ``start`` draws the networks from the
shared key and everything else from the key folded with the replica index.

Sweeps: ``hyper`` (a ``config.Hyperparams``, traced under ``vmap``) replaces the config's numbers
that a sweep varies; the config itself stays static.
"""

from __future__ import annotations

import functools
import operator
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxdqn import atari, envs, evaluation, exploration, metrics, multiagent, policy, rollout
from jaxdqn import worker as worker_
from jaxdqn._platform import plan_key
from jaxdqn.config import DQNConfig, Hyperparams
from jaxdqn.learner import LearnerState, LearnInfo, StepRecord
from jaxdqn.networks import QNetwork
from jaxdqn.policy import BatchHook
from jaxdqn.schedule import Schedule, count_chunks, make_schedule, pay

Array = jax.Array
Items = dict[str, tuple[Any, Any]]  # buffer id -> (items [K, ...], store mask [K] or None)


class TrainState(NamedTuple):
    learner: dict[str, LearnerState]  # policy id -> its learner
    buffer: dict[str, Any]  # replay buffer id -> its state
    actor: rollout.ActorState
    metrics: metrics.Metrics
    key: Array
    replay_credit: Array  # [] int32: unpaid replays x ``schedule.stores`` (credit schedules; else 0)


class Plan(NamedTuple):
    """The pure pieces of one config's execution plan (see the module docstring)."""

    start: Callable[[Array], TrainState]  # fresh: the first chunk runs the warm-up (what runners compile)
    init: Callable[[Array], TrainState]  # start + the warm-up stores
    sample: Callable[[TrainState], tuple[TrainState, Items]]
    learn: Callable[..., tuple[TrainState, dict[str, LearnInfo]]]  # (state, items, replays=None)
    store: Callable[[TrainState, Items], TrainState]
    replay: Callable[[TrainState], TrainState]  # one replay round, its learner statistics reported
    iteration: Callable[[TrainState, Any], tuple[TrainState, None]]  # one schedule period (its last step's statistics)
    chunk: Callable[..., tuple[TrainState, dict[str, Array]]]  # (state, clock=None)
    train: Callable[[Array], tuple[TrainState, dict[str, Array]]]
    evaluate: Callable[..., evaluation.Evaluation]  # (params: policy id -> params, key, eps=0.0)
    act: Callable[..., Any]  # (params: policy id -> params, obs [B, *obs], policy_id, memory=None) -> [B]
    schedule: Schedule
    worker: worker_.Worker
    num_chunks: int  # chunks that ``train`` runs
    # For envs that step on the host (the shell's rollout workers): a fragment's steps in, the
    # report out, and the behaviour policy's actions.
    take: Callable[..., tuple[TrainState, Any]]  # (state, raw [F, E], episodes [F, E]) -> (state, items)
    close: Callable[[TrainState], tuple[TrainState, dict[str, Array]]]
    explore: Callable[..., Array]  # (params: policy id -> params, sampled, obs [E, *obs], key) -> [E]

    @property
    def spec(self) -> Any:
        """``envs.EnvSpec`` (``multiagent.MultiAgentSpec`` for a multi-agent env)."""
        return self.worker.spec

    @property
    def networks(self) -> dict[str, QNetwork]:
        """Policy id -> its ``QNetwork`` (``default_policy`` for a single agent)."""
        return {pid: p.network for pid, p in self.worker.policies.items()}

    @property
    def policy_ids(self) -> tuple[str, ...]:
        return tuple(self.worker.policies)

    @property
    def policy_mapping(self) -> dict[str, str] | None:
        """Agent id -> policy id for a multi-agent env; None for a single agent."""
        return self.worker.policy_mapping


def make_train(config: DQNConfig, *, before_learn_on_batch: BatchHook | None = None, num_runs: int = 1
               ) -> Callable[[Array], tuple[TrainState, dict[str, Array]]]:
    """The pure ``train(key) -> (TrainState, reports stacked per chunk)`` for ``total_timesteps``.
    ``num_runs``: the size of the ``vmap`` a caller puts it in, where an Atari game's ALE batch
    holds every run's games (``atari.over_runs``); a gymnax env needs none."""
    return make_plan(config, before_learn_on_batch=before_learn_on_batch, num_runs=num_runs).train


def split_totals(config: DQNConfig, num_replicas: int) -> tuple[int, int, int]:
    """``(num_envs, buffer_size, train_batch_size)`` of one replica: the totals split evenly.
    A total that ``num_replicas`` does not divide raises a ``ValueError`` naming it."""
    envs_key = "num_envs_per_worker" if config.num_workers <= 1 else "num_workers * num_envs_per_worker"
    totals = {envs_key: config.num_envs, "buffer_size": config.buffer_size,
              "train_batch_size": config.train_batch_size}
    for key, total in totals.items():
        if total % num_replicas:
            lower = total // num_replicas * num_replicas
            near = [v for v in (lower, lower + num_replicas, lower + 2 * num_replicas) if v > 0][:2]
            raise ValueError(f"{key}={total} is invalid with num_devices={num_replicas}: totals are split "
                             f"evenly over the devices; use a multiple of {num_replicas} such as "
                             f"{near[0]} or {near[1]}")
    return tuple(total // num_replicas for total in totals.values())


def repeat(step: Callable[[Any], Any], state: Any, times: Any) -> Any:
    """``step`` applied ``times`` times: a plain call for one, a ``lax.scan`` for a static
    count, a ``fori_loop`` for a traced one (a one-trip loop still costs a while loop with its
    carry copies on every trip of the loop around it)."""
    if isinstance(times, int):
        if times <= 1:
            return step(state) if times == 1 else state
        return lax.scan(lambda s, _: (step(s), None), state, None, length=times)[0]
    return lax.fori_loop(jnp.int32(0), times, lambda i, s: step(s), state)


def params_of(state: TrainState) -> dict[str, Any]:
    return {pid: ls.params for pid, ls in state.learner.items()}


def params_finite(state: TrainState) -> Array:
    """[] bool: every online parameter of every policy is finite (one pass over the params)."""
    leaves = jax.tree_util.tree_leaves(params_of(state))
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in leaves]))


class Ops(NamedTuple):
    """The plan's two ops (see the module docstring), the store side split into sampling a
    fragment (``take`` its steps from any source) and storing its items, and the learner
    statistics of a replay's records."""

    epsilon: Callable[[TrainState], Array]  # the behaviour policy's, from the counters
    sample: Callable[[TrainState], tuple[TrainState, Items]]
    take: Callable[..., tuple[TrainState, Items]]  # (state, raw [F, E], episodes [F, E])
    store: Callable[[TrainState, Items], TrainState]
    replay: Callable[[TrainState], tuple[TrainState, dict[str, StepRecord]]]
    report: Callable[..., TrainState]  # (state, records, num_updates before) -> metrics.learner set
    blank: Callable[[TrainState], dict[str, StepRecord]]  # zero records (a loop carry's start)


def make_ops(config: DQNConfig, hyper: Hyperparams, worker: worker_.Worker, schedule: Schedule, num_envs: int,
             batch_size: int, hook: BatchHook | None) -> Ops:
    """The ``Ops`` of one config's plan."""
    replayed = tuple(b for b in worker.buffers if any(worker.policies[p].buffer_id == b for p in worker.trained))
    beta_points = [(0, hyper.prioritized_replay_beta),
                   (hyper.prioritized_replay_beta_annealing_timesteps, hyper.final_prioritized_replay_beta)]

    def epsilon(state: TrainState) -> Array:
        return exploration.behaviour_epsilon(hyper, state.metrics.num_steps_sampled, explore=config.explore)

    def take(state: TrainState, raw: rollout.RawStep, episodes: rollout.Episodes) -> tuple[TrainState, Items]:
        """A fragment's steps ``[F, E]`` (as the learner sees them) and its ended episodes, from
        whatever stepped the envs: counted, and assembled into the items to store behind the
        steps carried from the last fragment."""
        m = metrics.record_episodes(state.metrics, episodes, worker.policy_episodes(episodes))
        m = m._replace(num_steps_sampled=m.num_steps_sampled + schedule.steps_per_store)
        window, pending = rollout.extend_window(state.actor.pending, raw)
        return state._replace(actor=state.actor._replace(pending=pending), metrics=m), worker.items(window)

    def sample(state: TrainState) -> tuple[TrainState, Items]:
        key, keys = rollout.step_keys(state.key, config.rollout_fragment_length, num_envs)
        act = worker.behaviour(params_of(state), epsilon(state))
        actor, raw, episodes = rollout.run_steps(worker.env, act, state.actor, keys, worker.view)
        return take(state._replace(actor=actor, key=key), raw, episodes)

    def store(state: TrainState, items: Items) -> TrainState:
        buffer = dict(state.buffer)
        for b, (stored, mask) in items.items():
            buffer[b] = worker.buffers[b].add(buffer[b], stored, mask)
        return state._replace(buffer=buffer)

    def replay(state: TrainState) -> tuple[TrainState, dict[str, StepRecord]]:
        """One replay round of every trained policy, and each one's SGD step record (reduced to
        the learner statistics only where a report shows them: ``report_statistics``)."""
        key, *keys = jax.random.split(state.key, 1 + len(replayed) + len(worker.trained))
        sample_keys = dict(zip(replayed, keys))
        sampled = state.metrics.num_steps_sampled
        beta = exploration.piecewise_linear(beta_points, sampled)
        learners, buffer, records, synced = dict(state.learner), dict(state.buffer), {}, []
        for pid, train_key in zip(worker.trained, keys[len(replayed):]):
            bundle = worker.policies[pid]
            b = bundle.buffer_id
            learners[pid], buffer[b], records[pid], done = policy.replay(
                bundle, learners[pid], buffer[b], sample_key=sample_keys[b], train_key=train_key,
                batch_size=batch_size, beta=beta, env_steps=sampled, hook=hook)
            synced.append(done)
        m = state.metrics
        m = m._replace(num_steps_trained=m.num_steps_trained + config.train_batch_size * config.sequence_length,
                       num_target_updates=m.num_target_updates + functools.reduce(operator.or_, synced).astype(jnp.int32),
                       last_target_update_ts=functools.reduce(jnp.maximum, [learners[p].last_target_update
                                                                            for p in worker.trained]))
        return state._replace(learner=learners, buffer=buffer, metrics=m, key=key), records

    def report(state: TrainState, records: dict[str, StepRecord], updates: dict[str, Array]) -> TrainState:
        """``metrics.learner``: the statistics of each trained policy's last SGD step
        (``records``); a policy that took no step since it had ``updates`` keeps its earlier ones."""
        infos = dict(state.metrics.learner)
        for pid in worker.trained:
            stepped = state.learner[pid].num_updates != updates[pid]
            new = worker.policies[pid].learn.statistics(records[pid])
            infos[pid] = jax.tree_util.tree_map(lambda a, b: jnp.where(stepped, a, b), new, infos[pid])
        return state._replace(metrics=state.metrics._replace(learner=infos))

    def blank(state: TrainState) -> dict[str, StepRecord]:
        """Zero records of every trained policy, shaped as ``replay``'s."""
        return {pid: policy.blank_record(worker.policies[pid], state.learner[pid].params,
                                         state.buffer[worker.policies[pid].buffer_id], state.key, batch_size)
                for pid in worker.trained}

    return Ops(epsilon, sample, take, store, replay, report, blank)


def num_updates(state: TrainState) -> dict[str, Array]:
    """Policy id -> its SGD steps so far (``Ops.report`` tells which policies stepped since)."""
    return {pid: ls.num_updates for pid, ls in state.learner.items()}


def replay_reported(ops: Ops, state: TrainState) -> TrainState:
    """One replay round with its learner statistics reported (``Plan.replay``)."""
    updates = num_updates(state)
    return ops.report(*ops.replay(state), updates)


def host_fragment(state: TrainState, length: int, num_envs: int) -> tuple[rollout.RawStep, rollout.Episodes]:
    """A fragment's shapes as the host gives it (zeros): ``take``'s input."""
    raw = jax.tree_util.tree_map(lambda x: jnp.zeros((length,) + x.shape[1:], x.dtype), state.actor.pending)
    flags = (length, num_envs)
    returns = jax.tree_util.tree_map(lambda r: jnp.zeros(flags, jnp.float32), state.actor.episode_return)  # per agent
    return raw, rollout.Episodes(done=jnp.zeros(flags, bool), episode_return=returns,
                                 episode_length=jnp.zeros(flags, jnp.int32))


def atari_spec(config: DQNConfig, num_envs: int, num_replicas: int, num_runs: int) -> Any:
    """The ALE batch of ``config``'s Atari game: ``num_runs`` vmapped runs' ``num_envs`` games
    (``atari.AtariEnv``), on one device, without a recurrent model."""
    if config.model.use_lstm or num_replicas > 1:
        raise ValueError(f"env={config.env!r} is an ALE batch of games: "
                         + ("model.use_lstm is not supported with it" if config.model.use_lstm else
                            "it runs on one device (num_devices=1)"))
    return envs.make_env(config.env, config.env_params, num_envs=num_envs, runs=num_runs)


def make_plan(config: DQNConfig, *, before_learn_on_batch: BatchHook | None = None, axis_name: str | None = None,
              num_replicas: int = 1, hyper: Hyperparams | None = None, spec: Any = None,
              runs_axis: str | None = None, num_runs: int = 1) -> Plan:
    """The ``Plan`` for ``config``; with ``axis_name``, one replica of ``num_replicas``; with
    ``hyper``, those numbers in place of the config's (see the module docstring); with
    ``runs_axis``, one of ``num_runs`` runs vmapped over that axis name, in lockstep (seeds,
    trials: their counters are equal, the loops read their counts once across the axis, and an
    ALE batch plays all their games). ``start`` draws from ``plan_key(key, config.prng_impl)``."""
    if num_replicas > 1 and axis_name is None:
        raise ValueError(f"num_replicas={num_replicas} needs the axis_name of the device axis")
    num_envs, buffer_size, batch_size = split_totals(config, num_replicas)
    if atari.is_atari(config.env) and spec is None:
        spec = atari_spec(config, num_envs, num_replicas, num_runs)
    hyper = config.hyperparams if hyper is None else hyper
    several = multiagent.is_multi_agent_config(config) or isinstance(spec, multiagent.MultiAgentSpec)
    build = multiagent.make_worker if several else worker_.single_agent
    worker = build(config, hyper, num_envs=num_envs, buffer_size=buffer_size, axis_name=axis_name,
                   **({} if spec is None else {"spec": spec}))
    host = worker.env is None  # its envs step on the host: it primes and warms up, and feeds ``take``
    primed = worker.pending if worker.primed else 0
    schedule = make_schedule(steps_per_store=config.rollout_fragment_length * config.num_envs,
                             replayed_steps=config.train_batch_size * config.sequence_length,
                             training_intensity=config.training_intensity, learning_starts=config.learning_starts,
                             timesteps_per_iteration=config.timesteps_per_iteration,
                             primed_steps=primed * config.num_envs)
    ops = make_ops(config, hyper, worker, schedule, num_envs, batch_size, before_learn_on_batch)
    epsilon, sample, take, store = ops.epsilon, ops.sample, ops.take, ops.store
    lockstep = (lambda x: lax.pmax(x, runs_axis)) if runs_axis is not None else (lambda x: x)  # noqa: E731
    learn, iteration, run_chunk = make_loops(schedule, ops, lockstep)
    ring = metrics.ring_size(config.metrics_smoothing_episodes,
                             schedule.max_chunk_stores * schedule.steps_per_store + schedule.warmup_steps, num_replicas)
    gather = metrics.gatherer(axis_name)

    def start(key: Array) -> TrainState:
        """Fresh learners, empty buffers and primed actors: the first ``chunk`` runs the warm-up."""
        key = plan_key(key, config.prng_impl)
        learner_key, key = jax.random.split(key)  # the networks: the same on every replica
        if axis_name is not None:
            key = jax.random.fold_in(key, lax.axis_index(axis_name))
        env_key, prime_key, key = jax.random.split(key, 3)
        actor = worker.init(env_key)
        pids = tuple(worker.policies)
        learner_keys = [learner_key] if len(pids) == 1 else jax.random.split(learner_key, len(pids))
        learners = {pid: policy.init(worker.policies[pid], k) for pid, k in zip(pids, learner_keys)}
        state = TrainState(learner=learners, buffer={}, actor=actor, key=key, replay_credit=jnp.zeros((), jnp.int32),
                           metrics=metrics.init(ring, worker.agents_per_policy, worker.trained))
        items = jax.eval_shape(lambda s: (take(s, *host_fragment(s, config.rollout_fragment_length, num_envs)) if host
                                          else sample(s))[1], state)  # one item
        state = state._replace(buffer={b: worker.buffers[b].init(jax.tree_util.tree_map(
            lambda s: jnp.zeros(s.shape[1:], s.dtype), stored)) for b, (stored, _) in items.items()})
        if host:  # the host steps the envs: it primes and runs the warm-up stores (``take``)
            return state
        if primed:  # fill the n-step look-ahead
            act = worker.behaviour(params_of(state), epsilon(state))
            actor, episodes = rollout.prime(worker.env, act, actor, rollout.step_keys(prime_key, primed, num_envs)[1],
                                            worker.view)
            m = metrics.record_episodes(state.metrics, episodes, worker.policy_episodes(episodes))
            state = state._replace(actor=actor, metrics=m._replace(num_steps_sampled=jnp.int32(primed * config.num_envs)))
        return state

    def init(key: Array) -> TrainState:
        """``start``, then the warm-up stores (a state ready for ``iteration``)."""
        state = start(key)
        return state if host else repeat(lambda s: store(*sample(s)), state, schedule.warmup_stores)

    def chunk(state: TrainState, clock: Any = None) -> tuple[TrainState, dict[str, Array]]:
        """The env steps up to the next report (``Schedule.chunk_stores``: RLlib's
        ``OncePerTimestepsElapsed``) and the report (``metrics.close_report``: RLlib's result);
        ``clock``: the state's counters where the caller knows them (``make_loops``)."""
        return close(run_chunk(state, clock))

    def close(state: TrainState) -> tuple[TrainState, dict[str, Array]]:
        """The report of the steps since the last one (``metrics.close_report``)."""
        report, m = metrics.close_report(state.metrics, gather, config.metrics_smoothing_episodes)
        report["params_finite"] = params_finite(state)  # the shell stops a diverged run on it
        return state._replace(metrics=m), report

    def explore(params: dict[str, Any], sampled: Array, obs: Array, key: Array, memory: Any = None) -> Any:
        """The behaviour policy's actions ``[E]`` on ``obs`` ``[E, *obs]`` after ``sampled`` env
        steps (its epsilon), for envs that step on the host; a recurrent policy acts from
        ``memory`` (``rollout.Memory``) and also returns its next state."""
        eps = exploration.behaviour_epsilon(hyper, sampled, explore=config.explore)
        return worker.behaviour(params, eps)(obs, key, memory)

    chunks = count_chunks(config.total_timesteps, schedule)

    def train(key: Array) -> tuple[TrainState, dict[str, Array]]:
        """``total_timesteps`` env steps, the warm-up's included (rounded up to whole chunks); the
        reports are stacked per chunk. The chunks' counters are known ahead: their loop counts
        stay constants under a user's ``vmap`` (seeds)."""
        clocks = tuple(jnp.asarray(c) for c in schedule.chunk_clocks(chunks).T)
        return lax.scan(lambda s, clock: chunk(s, clock), start(key), clocks)

    return Plan(start=start, init=init, sample=sample, learn=learn, store=store, replay=functools.partial(replay_reported, ops),
                iteration=iteration, chunk=chunk,
                train=train, evaluate=worker.evaluate, act=worker.act, schedule=schedule, worker=worker,
                num_chunks=chunks, take=take, close=close, explore=explore)


def make_loops(schedule: Schedule, ops: Ops, lockstep: Callable[[Array], Array]) -> tuple[Callable, Callable, Callable]:
    """``(learn, iteration, run_chunk)`` of ``schedule`` over the plan's ``ops``, each program
    holding one copy of ``sample``, ``store`` and ``replay`` (compile time grows with every copy).

    A round is ``sample -> store`` and the replays after that store. ``replay(state) -> (state,
    records)`` leaves each policy's SGD step record; the loops carry the latest and ``report``
    reduces it to the learner statistics once, at the end: only the last SGD step's
    statistics are ever computed, as RLlib reports them (``blank(state)``: zero records, the
    carry's start; a policy that took no step keeps its earlier statistics).

    ``learn(state, items, count=None)``: store, then ``count`` replays (an int, a traced count,
    or None: what the carried credit pays for).
    ``iteration(state, _)``: one period of the schedule (from a period's start).
    ``run_chunk(state, clock=None)``: the rounds up to the next report (``Schedule.chunk_stores``),
    the warm-up's stores first where the state has not run them (a fresh state: one program
    for the first chunk and the later ones). The counts come from the state's counters, read
    through ``lockstep`` (the same in every vmapped run: a loop count that differs per run would
    make every trip select the whole state), or from ``clock`` (``(sampled, sampled at the last
    report)``, where the caller knows them: ``train``'s, computed ahead).
    """
    sample, store, replay, report, blank = ops.sample, ops.store, ops.replay, ops.report, ops.blank
    q = schedule.stores
    counts = schedule.replay_counts(q)
    constant = len(set(counts.tolist())) == 1  # p / 1: the same count after every store

    def replays(carry: tuple[TrainState, Any], count: Any) -> tuple[TrainState, Any]:
        return repeat(lambda c: replay(c[0]), carry, count)

    def pay_credit(state: TrainState, warming: Any = False) -> tuple[TrainState, Any]:
        """The replays the credit pays for after a store (none while ``warming``), and the state
        with the credit left."""
        count, credit = pay(state.replay_credit, schedule)
        credit = jnp.where(warming, state.replay_credit, credit).astype(jnp.int32)
        return state._replace(replay_credit=credit), lockstep(jnp.where(warming, 0, count))

    def run_rounds(state: TrainState, n: Any, warm: Any, phase: Any) -> TrainState:
        """``n`` rounds, the first ``warm`` without replays (the warm-up), the others with the
        schedule's count from ``phase``; the last SGD step's statistics reported."""
        table = jnp.asarray(counts)

        def round_(i: Array, carry: tuple[TrainState, Any]) -> tuple[TrainState, Any]:
            state = store(*sample(carry[0]))
            warming = i < warm
            if schedule.credit:
                state, count = pay_credit(state, warming)
            else:
                count = jnp.where(warming, 0, int(counts[0]) if constant else table[(phase + i - warm) % q])
            return replays((state, carry[1]), count)

        updates = num_updates(state)
        state, records = lax.fori_loop(jnp.int32(0), n, round_, (state, blank(state)))
        return report(state, records, updates)

    def learn(state: TrainState, items: Items, count: Any = None) -> tuple[TrainState, dict[str, LearnInfo]]:
        updates = num_updates(state)
        state = store(state, items)
        if count is None:
            state, count = pay_credit(state)
        state = report(*replays((state, blank(state)), count), updates)
        return state, state.metrics.learner

    def iteration(state: TrainState, _: Any = None) -> tuple[TrainState, None]:
        return run_rounds(state, schedule.period, 0, lockstep(schedule.phase(state.metrics.num_steps_sampled))), None

    def run_chunk(state: TrainState, clock: Any = None) -> TrainState:
        m = state.metrics
        sampled, at_report = (lockstep(m.num_steps_sampled), lockstep(m.sampled_at_report)) if clock is None else clock
        warm = schedule.warmup_left(sampled)
        after = sampled + warm * schedule.steps_per_store  # the steps sampled once the warm-up is done
        n = warm + schedule.chunk_stores(after, after - at_report, jnp.asarray(schedule.gaps))
        return run_rounds(state, n.astype(jnp.int32), warm, schedule.phase(after))

    return learn, iteration, run_chunk
