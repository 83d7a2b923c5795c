"""The execution plan (RLlib's DQN ``execution_plan``) as scans over an explicit ``TrainState``.

RLlib alternates, round robin, ``store`` (ParallelRollouts -> StoreToReplayBuffer) and
``replay`` (Replay -> TrainOneStep -> update priorities -> UpdateTargetNetwork) with weights
from ``training_intensity``. Here the requested intensity (replayed / sampled env steps) is
``replays`` replay steps per ``stores`` store steps, an exact fraction (``make_schedule``), held
exactly in the long run: when ``stores`` is small, one *iteration* is the static schedule of
``stores`` store steps then ``replays`` replay steps (no ``lax.cond``); otherwise an iteration
is one store step, which earns ``replays`` credit, then as many replay steps as the credit pays
for at ``stores`` each (a loop with a traced trip count; the credit is ``TrainState.replay_credit``).
Warm-up until ``learning_starts`` is its own scan of store steps.

``make_plan(config)`` returns a ``Plan`` of pure pieces: ``init(key)``, ``store``, ``replay``,
``iteration``, ``chunk(state)`` (``timesteps_per_iteration`` env steps and their report, for the
shell), ``train(key)`` (``total_timesteps``), ``evaluate(params, key)`` (greedy episodes) and
``act(params, obs, policy_id)``. ``make_train(config)`` is ``make_plan(config).train``:
``jax.jit(jax.vmap(train))(keys)`` trains many independent seeds at once.

One plan for every variant: as in RLlib, a single agent is a multi-agent run with one policy,
``default_policy``. Learners, replay buffers and learner statistics are dicts keyed by policy
(buffer) id, ``params`` arguments are dicts policy id -> params, and reports carry
``learner/<policy>/<stat>``. How the env is played and what is stored is an ``acting.Acting``
built once (``make_acting``): ``acting.single_agent`` (transitions, or sequences with
``model.use_lstm``) or ``multiagent.make_acting`` (a multi-agent env; independent or lockstep
replay; ``policy_reward_*`` reports).

Data parallelism: with ``axis_name`` (the plan then runs inside ``parallel``'s ``pmap``) and
``num_replicas = D``, each replica steps ``num_envs / D`` environments into its own replay shard
of ``buffer_size / D`` items and replays ``train_batch_size / D`` of them; gradients and learner
statistics are averaged over the axis (``learner.make_train_step``), so the params, the target
and the counters (which count the totals of all replicas, as RLlib's do) are the same on every
replica. Episode metrics are gathered from all replicas. ``init`` draws the network from the
shared key and everything else (envs, exploration, replay) from the key folded with the replica
index.

Recurrent Q-networks (``model.use_lstm``, RLlib's R2D2-style replay): the actor carries the
recurrent state across steps (``rollout.Memory``; reset where an episode starts), the store step
cuts each fragment, with the last ``burn_in`` steps of the previous one in front, into overlapping
sequences of ``config.sequence_length`` steps (``rollout.sequence_items``) that start from the
actor's recorded state (or zeros with ``zero_init_states``), and the replay step trains on
``train_batch_size`` sequences with ``learner.make_sequence_loss``, writing back one priority per
sequence. ``buffer_size`` still counts timesteps (``config.buffer_items`` sequences).
"""

from __future__ import annotations

import fractions
import functools
import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxdqn import acting as acting_
from jaxdqn import atari, buffers, evaluation, exploration, learner, multiagent, rollout
from jaxdqn._platform import plan_key  # noqa: F401 (the plan's random stream; re-exported)
from jaxdqn.config import DQNConfig
from jaxdqn.networks import QNetwork
from jaxdqn.types import Sample

Array = jax.Array
MAX_STATIC_STORES = 64  # a replay ratio p / q with q up to this runs as a static schedule
class Ring(NamedTuple):
    """The last completed episodes of one policy's agents (``record_episodes`` fills it)."""

    returns: Array  # [ring] float32
    lengths: Array  # [ring] int32
    ring_pos: Array  # [] int32
    episodes_total: Array  # [] int32, agent episodes


class Metrics(NamedTuple):
    """On-device counters (RLlib's names), the last ``ring_size`` completed (joint) episodes, the
    counters at the last report (what a report's ``*_this_iter`` values count from), and for a
    multi-agent env a ring of agent episodes per policy."""

    returns: Array  # [ring] float32
    lengths: Array  # [ring] int32
    ring_pos: Array  # [] int32
    episodes_total: Array  # [] int32
    num_steps_sampled: Array  # [] int32
    num_steps_trained: Array  # [] int32
    num_target_updates: Array  # [] int32
    last_target_update_ts: Array  # [] int32
    learner: dict[str, learner.LearnInfo]  # trained policy id -> its last replay step's (td_error dropped: [0])
    episodes_at_report: Array  # [] int32, this replica's episodes_total at the last report
    sampled_at_report: Array  # [] int32
    trained_at_report: Array  # [] int32
    policies: dict[str, Ring]  # policy id -> its agents' episodes (policy_reward_*); {} for one agent


class TrainState(NamedTuple):
    learner: dict[str, learner.LearnerState]  # policy id -> its learner
    buffer: dict[str, Any]  # replay buffer id -> its state (``acting.Acting.capacities``)
    actor: rollout.ActorState
    metrics: Metrics
    key: Array
    replay_credit: Array  # [] int32: unpaid replays x ``schedule.stores`` (credit schedules; else 0)


class Schedule(NamedTuple):
    """Static shape of the plan: ``replays`` replay steps per ``stores`` store steps, exactly."""

    steps_per_store: int  # rollout_fragment_length * num_envs
    stores: int  # q of the ratio p / q (in lowest terms)
    replays: int  # p
    warmup_stores: int  # store steps before learning starts
    iterations_per_chunk: int
    credit: bool = False  # False: an iteration is `stores` stores, then `replays` replays; True: see the module doc

    @property
    def stores_per_iteration(self) -> int:
        return 1 if self.credit else self.stores

    @property
    def steps_per_iteration(self) -> int:
        """Env steps sampled per iteration (all replicas)."""
        return self.stores_per_iteration * self.steps_per_store


def replay_ratio(config: DQNConfig) -> fractions.Fraction:
    """Replay steps per store step: ``training_intensity * steps_per_store / replayed_steps`` (1
    without ``training_intensity``: RLlib's native ratio), as the exact fraction of the decimal
    the user wrote (``0.3`` is 3/10), its terms bounded so that the credit fits an int32."""
    if config.training_intensity is None:
        return fractions.Fraction(1)
    per_store = config.rollout_fragment_length * config.num_envs
    exact = fractions.Fraction(repr(float(config.training_intensity))) * per_store / replayed_steps(config)
    limit = 1_000_000
    ratio = exact.limit_denominator(limit)
    while ratio.numerator + ratio.denominator >= 2**30 and limit > 1:
        limit //= 10
        ratio = exact.limit_denominator(limit)
    if ratio == 0 or ratio.numerator + ratio.denominator >= 2**30:
        raise ValueError(f"training_intensity={config.training_intensity} is invalid: it gives "
                         f"{float(exact):.3g} replay steps per store step of {per_store} env steps; "
                         f"use a value between {replayed_steps(config) / per_store / 1e6:.3g} and "
                         f"{replayed_steps(config) / per_store * 1e8:.3g}")
    return ratio


def make_schedule(config: DQNConfig) -> Schedule:
    """The replay ratio as a static schedule when its denominator is at most
    ``MAX_STATIC_STORES``, else as a credit schedule (see the module docstring)."""
    per_store = config.rollout_fragment_length * config.num_envs
    ratio = replay_ratio(config)
    credit = ratio.denominator > MAX_STATIC_STORES
    schedule = Schedule(steps_per_store=per_store, stores=ratio.denominator, replays=ratio.numerator,
                        warmup_stores=math.ceil(config.learning_starts / per_store), iterations_per_chunk=1,
                        credit=credit)
    iterations = max(1, math.ceil(config.timesteps_per_iteration / schedule.steps_per_iteration))
    return schedule._replace(iterations_per_chunk=iterations)


def count_chunks(config: DQNConfig, schedule: Schedule) -> int:
    """Chunks that ``train`` runs: ``total_timesteps`` rounded up to whole chunks."""
    per_chunk = schedule.iterations_per_chunk * schedule.steps_per_iteration
    return max(1, math.ceil(config.total_timesteps / per_chunk))


def make_iteration(schedule: Schedule, store: Callable, replay: Callable, replay_quiet: Callable
                   ) -> tuple[Callable[[Any, Any], tuple[Any, None]], Callable[[Any], Any]]:
    """``(iteration, run_chunk)`` of a schedule over the plan's ``store``, ``replay`` (computes
    the learner statistics) and ``replay_quiet`` (the same SGD step, statistics left as they
    were) steps, each ``(state, _) -> (state, None)`` on a state with a ``replay_credit`` field.

    ``iteration(state, _)``: one iteration, every replay computing the statistics.
    ``run_chunk(state)``: ``iterations_per_chunk`` iterations in which only the chunk's last
    replay computes them (RLlib reports the last SGD step's; XLA drops the rest as dead code,
    about a dozen small kernels per step). A static schedule peels its last iteration
    statically; in a credit schedule the last replay depends on the credit, so each replay
    picks ``replay`` or ``replay_quiet`` with a ``lax.cond`` on whether none follows in the
    chunk.
    """
    if not schedule.credit:
        def iteration(state: Any, _: Any = None) -> tuple[Any, None]:
            state = repeat(store, state, schedule.stores)
            return repeat(replay, state, schedule.replays), None

        def quiet_iteration(state: Any, _: Any = None) -> tuple[Any, None]:
            state = repeat(store, state, schedule.stores)
            return repeat(replay_quiet, state, schedule.replays), None

        def run_chunk(state: Any) -> Any:
            state = repeat(quiet_iteration, state, schedule.iterations_per_chunk - 1)
            state = repeat(store, state, schedule.stores)
            state = repeat(replay_quiet, state, schedule.replays - 1)
            return replay(state)[0]

        return iteration, run_chunk

    p, q = schedule.replays, schedule.stores

    def paid(state: Any) -> tuple[Any, Array, Array]:
        """One store step and the replays its credit pays for: ``(state, count, credit left)``."""
        state = store(state)[0]
        credit = state.replay_credit + p
        count = credit // q
        return state, count.astype(jnp.int32), (credit - count * q).astype(jnp.int32)

    def iteration(state: Any, _: Any = None) -> tuple[Any, None]:
        state, count, credit = paid(state)
        state = state._replace(replay_credit=credit)
        return lax.fori_loop(jnp.int32(0), count, lambda i, s: replay(s)[0], state), None

    def chunk_iteration(state: Any, remaining: Array) -> tuple[Any, None]:
        """An iteration of a chunk followed by ``remaining`` more."""
        state, count, credit = paid(state)
        # no later iteration of the chunk pays for a replay: credit + remaining * p < q
        last_in_chunk = remaining < (q - credit + p - 1) // p

        def body(i: Array, state: Any) -> Any:
            due = last_in_chunk & (i == count - 1)
            return lax.cond(due, lambda s: replay(s)[0], lambda s: replay_quiet(s)[0], state)

        state = state._replace(replay_credit=credit)
        return lax.fori_loop(jnp.int32(0), count, body, state), None

    def run_chunk(state: Any) -> Any:
        n = schedule.iterations_per_chunk
        return lax.scan(chunk_iteration, state, jnp.arange(n - 1, -1, -1, dtype=jnp.int32))[0]

    return iteration, run_chunk


def replayed_steps(config: DQNConfig) -> int:
    """Timesteps one replay step trains on (all replicas): the batch, times the sequence length
    with sequences (where ``train_batch_size`` counts sequences)."""
    return config.train_batch_size * config.sequence_length


def repeat(step: Callable[[Any, Any], tuple[Any, None]], state: Any, times: int) -> Any:
    """``step`` applied ``times`` times: a ``lax.scan``, or a plain call for one (a one-trip
    loop still costs a while loop with its carry copies on every iteration of the outer scan)."""
    if times == 0:
        return state
    return step(state, None)[0] if times == 1 else lax.scan(step, state, None, length=times)[0]


def ring_size(config: DQNConfig, schedule: Schedule, num_replicas: int) -> int:
    """Episodes each replica keeps: its share of ``metrics_smoothing_episodes``, and every episode
    that one report can count (at most one per env step of the replica: a chunk's steps, plus
    the warm-up's for the first report), so that RLlib's window of ``max(N, episodes this
    iteration)`` always fits."""
    smoothing = math.ceil(config.metrics_smoothing_episodes / num_replicas)
    steps = (schedule.iterations_per_chunk * schedule.steps_per_iteration
             + schedule.warmup_stores * schedule.steps_per_store + (config.n_step - 1) * config.num_envs)
    return max(smoothing, math.ceil(steps / num_replicas))


def record_episodes(metrics: Metrics, episodes: rollout.Episodes) -> Metrics:
    """Write the episodes that ended into the ring, in time-major order."""
    ring = metrics.returns.shape[0]
    done = episodes.done.reshape(-1)
    slot = metrics.ring_pos + jnp.cumsum(done) - 1
    slot = jnp.where(done, slot % ring, ring)  # ring: dropped
    return metrics._replace(
        returns=metrics.returns.at[slot].set(episodes.episode_return.reshape(-1), mode="drop"),
        lengths=metrics.lengths.at[slot].set(episodes.episode_length.reshape(-1), mode="drop"),
        ring_pos=(metrics.ring_pos + jnp.sum(done)).astype(jnp.int32) % ring,
        episodes_total=metrics.episodes_total + jnp.sum(done).astype(jnp.int32),
    )


def gatherer(axis_name: str | None) -> Callable[[Array], Array]:
    """``x [...] -> [D, ...]``: every replica's value (``[1, ...]`` without a device axis)."""
    if axis_name is None:
        return lambda x: x[None]
    return lambda x: lax.all_gather(x, axis_name)


def smoothing_window(new_episodes: Array, gather: Callable[[Array], Array], smoothing: int) -> Array:
    """RLlib's ``CollectMetrics`` window, per replica: the episodes of this iteration when all
    replicas together have at least ``smoothing`` (``metrics_smoothing_episodes``) of them, else
    each replica's share of the last ``smoothing``. ``new_episodes`` [] is this replica's count."""
    replicas = gather(new_episodes).shape[0]
    enough = jnp.sum(gather(new_episodes)) >= smoothing
    return jnp.where(enough, new_episodes, math.ceil(smoothing / replicas)).astype(jnp.int32)


def episode_report(ring: Any, gather: Callable[[Array], Array], window: Array) -> dict[str, Array]:
    """RLlib's ``episode_reward_mean/min/max``, ``episode_len_mean`` and ``episodes_total`` over
    the last ``window`` [] episodes of each replica's ring (``returns``, ``lengths``,
    ``ring_pos``, ``episodes_total`` fields)."""
    size = ring.returns.shape[0]
    totals = gather(ring.episodes_total)  # [D]
    count = jnp.minimum(jnp.minimum(totals, size), gather(window))  # [D]
    age = (gather(ring.ring_pos)[:, None] - 1 - jnp.arange(size)[None, :]) % size  # [D, ring]: 0 newest
    valid = age < count[:, None]
    nan = jnp.float32(jnp.nan)
    returns = jnp.where(valid, gather(ring.returns), nan)
    lengths = jnp.where(valid, gather(ring.lengths).astype(jnp.float32), nan)
    return {
        "episode_reward_mean": jnp.nanmean(returns),
        "episode_reward_min": jnp.nanmin(returns),
        "episode_reward_max": jnp.nanmax(returns),
        "episode_len_mean": jnp.nanmean(lengths),
        "episodes_total": jnp.sum(totals),
    }


def counters_report(m: Any) -> dict[str, Array]:
    """The plan's counters under RLlib's names."""
    return {
        "timesteps_total": m.num_steps_sampled,
        "num_steps_sampled": m.num_steps_sampled,
        "num_steps_trained": m.num_steps_trained,
        "num_target_updates": m.num_target_updates,
        "last_target_update_ts": m.last_target_update_ts,
    }


def report_markers() -> dict[str, Array]:
    """The ``*_at_report`` fields of fresh metrics: the first report counts from zero, so it
    includes the warm-up (every report's ``*_this_iter`` then sums to the totals)."""
    zero = jnp.zeros((), jnp.int32)
    return {"episodes_at_report": zero, "sampled_at_report": zero, "trained_at_report": zero}


def close_report(m: Any, gather: Callable[[Array], Array], smoothing: int) -> tuple[dict[str, Array], Array, Any]:
    """``(report, window, metrics)`` at the end of a reporting period: the counters, this
    period's ``episodes_this_iter`` / ``timesteps_this_iter`` / ``num_steps_trained_this_iter``,
    the episode statistics over RLlib's smoothing window (``window``, per replica, is returned
    for the per-policy rings), and the metrics with their markers moved to now."""
    new_episodes = m.episodes_total - m.episodes_at_report
    window = smoothing_window(new_episodes, gather, smoothing)
    report = {
        **episode_report(m, gather, window),
        "episodes_this_iter": jnp.sum(gather(new_episodes)),
        "timesteps_this_iter": m.num_steps_sampled - m.sampled_at_report,
        "num_steps_trained_this_iter": m.num_steps_trained - m.trained_at_report,
        **counters_report(m),
    }
    m = m._replace(episodes_at_report=m.episodes_total, sampled_at_report=m.num_steps_sampled,
                   trained_at_report=m.num_steps_trained)
    return report, window, m


# RLlib's ``before_learn_on_batch(batch, ...)``: a pure ``(sample, key) -> sample`` applied to
# every replayed batch before the SGD step (e.g. reward shaping, relabelling, augmentation).
BatchHook = Callable[[Sample, Array], Sample]


class Plan(NamedTuple):
    """The pure pieces of one config's execution plan (see the module docstring)."""

    init: Callable[[Array], TrainState]
    store: Callable[[TrainState, Any], tuple[TrainState, None]]
    replay: Callable[[TrainState, Any], tuple[TrainState, None]]
    iteration: Callable[[TrainState, Any], tuple[TrainState, None]]
    chunk: Callable[[TrainState], tuple[TrainState, dict[str, Array]]]
    train: Callable[[Array], tuple[TrainState, dict[str, Array]]]
    evaluate: Callable[..., evaluation.Evaluation]  # (params: policy id -> params, key, eps=0.0)
    act: Callable[..., Any]  # (params: policy id -> params, obs [B, *obs], policy_id, memory=None) -> [B]
    schedule: Schedule
    acting: acting_.Acting  # the env, policies, networks and buffers (static)
    num_chunks: int  # chunks that ``train`` runs

    @property
    def spec(self) -> Any:
        """``envs.EnvSpec`` (``multi_agent_envs.MultiAgentSpec`` for a multi-agent env)."""
        return self.acting.spec

    @property
    def networks(self) -> dict[str, QNetwork]:
        """Policy id -> its ``QNetwork`` (``default_policy`` for a single agent)."""
        return self.acting.networks

    @property
    def policy_ids(self) -> tuple[str, ...]:
        return tuple(self.acting.networks)

    @property
    def policy_mapping(self) -> dict[str, str] | None:
        """Agent id -> policy id for a multi-agent env; None for a single agent."""
        return self.acting.policy_mapping


def make_train(config: DQNConfig, *, before_learn_on_batch: BatchHook | None = None
               ) -> Callable[[Array], tuple[TrainState, dict[str, Array]]]:
    """The pure ``train(key) -> (TrainState, reports stacked per chunk)`` for ``total_timesteps``."""
    return make_plan(config, before_learn_on_batch=before_learn_on_batch).train


def split_totals(config: DQNConfig, num_replicas: int) -> tuple[int, int, int]:
    """``(num_envs, buffer_size, train_batch_size)`` of one replica: the totals split evenly.
    A total that ``num_replicas`` does not divide raises a ``ValueError`` naming it."""
    envs_key = "num_envs_per_worker" if config.num_workers <= 1 else "num_workers * num_envs_per_worker"
    totals = {envs_key: config.num_envs, "buffer_size": config.buffer_size,
              "train_batch_size": config.train_batch_size}
    for key, total in totals.items():
        if total % num_replicas:
            lower = total // num_replicas * num_replicas
            raise ValueError(f"{key}={total} is invalid with num_devices={num_replicas}: totals are split "
                             f"evenly over the devices; use a multiple of {num_replicas} such as "
                             f"{max(lower, num_replicas)} or {lower + num_replicas}")
    return tuple(total // num_replicas for total in totals.values())


def make_acting(config: DQNConfig, *, num_envs: int, buffer_size: int) -> acting_.Acting:
    """The ``Acting`` of ``config``'s environment: a multi-agent one (``multiagent``), else one
    gymnax env or ALE batch."""
    if multiagent.is_multi_agent_config(config):
        return multiagent.make_acting(config, num_envs=num_envs, buffer_size=buffer_size)
    return acting_.single_agent(config, num_envs=num_envs, buffer_size=buffer_size)


def make_plan(config: DQNConfig, *, before_learn_on_batch: BatchHook | None = None,
              axis_name: str | None = None, num_replicas: int = 1) -> Plan:
    """The ``Plan`` for ``config``; with ``axis_name``, one replica of ``num_replicas`` (see the
    module docstring). ``init`` draws from ``plan_key(key, config.prng_impl)``."""
    if num_replicas > 1 and axis_name is None:
        raise ValueError(f"num_replicas={num_replicas} needs the axis_name of the device axis")
    num_envs, buffer_size, batch_size = split_totals(config, num_replicas)
    if atari.is_atari(config.env) and (config.model.use_lstm or num_replicas > 1):
        raise ValueError(f"env={config.env!r} is an ALE batch of games: "
                         + ("model.use_lstm is not supported with it" if config.model.use_lstm else
                            "it runs on one device (num_devices=1)"))
    acting = make_acting(config, num_envs=num_envs, buffer_size=buffer_size)
    pids = tuple(acting.networks)
    trainable = tuple(config.multiagent.policies_to_train or pids) if config.multiagent is not None else pids
    optimizers = {pid: learner.make_optimizer(acting.configs[pid]) for pid in pids}
    train_steps = {pid: learner.make_train_step(acting.configs[pid], acting.networks[pid], optimizers[pid],
                                                axis_name=axis_name) for pid in pids}
    if config.prioritized_replay:
        bufs = {b: acting.storage(buffers.prioritized(c, alpha=config.prioritized_replay_alpha,
                                                      eps=config.prioritized_replay_eps), c)
                for b, c in acting.capacities.items()}
    else:
        bufs = {b: acting.storage(buffers.uniform(c), c) for b, c in acting.capacities.items()}
    replayed = tuple(b for b in acting.capacities if any(acting.buffer_of[pid] == b for pid in trainable))
    owner = {b: pid for b, pid in acting.priorities_from.items() if pid in trainable}
    schedule = make_schedule(config)
    beta_points = [(0, config.prioritized_replay_beta),
                   (config.prioritized_replay_beta_annealing_timesteps, config.final_prioritized_replay_beta)]
    gather = gatherer(axis_name)

    def params_of(state: TrainState) -> dict[str, Any]:
        return {pid: ls.params for pid, ls in state.learner.items()}

    def epsilon(state: TrainState) -> Array:
        return exploration.behaviour_epsilon(config.exploration_config, state.metrics.num_steps_sampled,
                                             explore=config.explore)

    def record(metrics: Metrics, episodes: rollout.Episodes, per_policy: dict[str, rollout.Episodes]) -> Metrics:
        metrics = record_episodes(metrics, episodes)
        return metrics._replace(policies={pid: record_episodes(metrics.policies[pid], per_policy[pid])
                                          for pid in metrics.policies})

    def store(state: TrainState, _=None) -> tuple[TrainState, None]:
        key, step_key = jax.random.split(state.key)
        actor, stored, episodes, per_policy = acting.fragment(params_of(state), epsilon(state), state.actor, step_key)
        metrics = record(state.metrics, episodes, per_policy)
        metrics = metrics._replace(num_steps_sampled=metrics.num_steps_sampled + schedule.steps_per_store)
        buffer = {b: bufs[b].add(state.buffer[b], items) if mask is None else bufs[b].add(state.buffer[b], items, mask)
                  for b, (items, mask) in stored.items()}
        return state._replace(buffer=buffer, actor=actor, metrics=metrics, key=key), None

    def replay_step(state: TrainState, statistics: bool) -> TrainState:
        """One replay step of every trained policy; with ``statistics`` (static) its learner
        statistics go to ``metrics.learner``, else those stay an earlier step's."""
        key, *keys = jax.random.split(state.key, 1 + len(replayed) + len(trainable))
        sample_keys, policy_keys = keys[:len(replayed)], keys[len(replayed):]
        sampled = state.metrics.num_steps_sampled
        beta = exploration.piecewise_linear(beta_points, sampled)
        samples = {b: bufs[b].sample(state.buffer[b], k, batch_size, beta) for b, k in zip(replayed, sample_keys)}
        learners, infos, buffer = dict(state.learner), dict(state.metrics.learner), dict(state.buffer)
        synced_any = jnp.zeros((), bool)
        for pid, k in zip(trainable, policy_keys):
            hook_key, train_key = jax.random.split(k)
            sample = acting.batch(pid, samples[acting.buffer_of[pid]])
            if before_learn_on_batch is not None:
                sample = before_learn_on_batch(sample, hook_key)
            learners[pid], info = train_steps[pid](learners[pid], sample, env_steps=sampled, key=train_key)
            b = acting.buffer_of[pid]
            if owner.get(b) == pid:
                buffer[b] = bufs[b].update(buffer[b], sample.indices, info.td_error)
            learners[pid], synced = learner.sync_target(
                learners[pid], sampled, target_network_update_freq=acting.configs[pid].target_network_update_freq,
                tau=acting.configs[pid].tau)
            synced_any = synced_any | synced
            if statistics:
                infos[pid] = info._replace(td_error=jnp.zeros((0,), jnp.float32))
        m = state.metrics
        metrics = m._replace(
            num_steps_trained=m.num_steps_trained + replayed_steps(config),
            num_target_updates=m.num_target_updates + synced_any.astype(jnp.int32),
            last_target_update_ts=functools.reduce(jnp.maximum, [learners[pid].last_target_update for pid in trainable]),
            learner=infos,
        )
        return state._replace(learner=learners, buffer=buffer, metrics=metrics, key=key)

    def replay(state: TrainState, _=None) -> tuple[TrainState, None]:
        """One replay step (sample, hook, SGD step, priorities, target sync) that reports its
        learner statistics in ``metrics.learner``."""
        return replay_step(state, True), None

    def replay_quiet(state: TrainState, _=None) -> tuple[TrainState, None]:
        return replay_step(state, False), None

    iteration, run_chunk = make_iteration(schedule, store, replay, replay_quiet)

    def init(key: Array) -> TrainState:
        """Fresh learners, empty buffers, primed actors, then the warm-up stores."""
        key = plan_key(key, config.prng_impl)
        learner_key, key = jax.random.split(key)  # the networks: the same on every replica
        if axis_name is not None:
            key = jax.random.fold_in(key, lax.axis_index(axis_name))
        env_key, prime_key, key = jax.random.split(key, 3)
        actor = acting.init(env_key)
        inputs = acting.network_input(actor)
        learner_keys = [learner_key] if len(pids) == 1 else jax.random.split(learner_key, len(pids))
        learners = {pid: learner.init(acting.networks[pid], optimizers[pid], k, inputs[pid])
                    for pid, k in zip(pids, learner_keys)}
        zero = lambda: jnp.zeros((), jnp.int32)  # noqa: E731
        size = ring_size(config, schedule, num_replicas)
        ring = lambda k=1: Ring(returns=jnp.zeros((size * k,), jnp.float32),  # noqa: E731
                                lengths=jnp.zeros((size * k,), jnp.int32), ring_pos=zero(), episodes_total=zero())
        metrics = Metrics(**ring()._asdict(), num_steps_sampled=zero(), num_steps_trained=zero(),
                          num_target_updates=zero(), last_target_update_ts=zero(),
                          learner={pid: learner.empty_info() for pid in trainable}, **report_markers(),
                          policies={pid: ring(k) for pid, k in acting.ring_agents.items()})
        params = {pid: ls.params for pid, ls in learners.items()}
        shapes = jax.eval_shape(lambda a, k: acting.fragment(params, jnp.float32(0.0), a, k)[1], actor, prime_key)
        # one item of each buffer
        example = {b: jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape[1:], s.dtype), items)
                   for b, (items, _) in shapes.items()}
        state = TrainState(learner=learners, buffer={b: bufs[b].init(example[b]) for b in bufs}, actor=actor,
                           metrics=metrics, key=key, replay_credit=zero())
        if acting.primed_steps:  # fill the n-step look-ahead
            actor, episodes, per_policy = acting.prime(params, epsilon(state), actor, prime_key)
            metrics = record(metrics, episodes, per_policy)._replace(
                num_steps_sampled=jnp.int32(acting.primed_steps * config.num_envs))
            state = state._replace(actor=actor, metrics=metrics)
        return repeat(store, state, schedule.warmup_stores)

    def chunk(state: TrainState) -> tuple[TrainState, dict[str, Array]]:
        """About ``timesteps_per_iteration`` env steps (whole iterations) and their report (RLlib's
        result: the learner statistics of the chunk's last SGD step per policy, the counters since
        the last report, the episodes of RLlib's smoothing window; a multi-agent env's
        ``policy_reward_*`` cover the agent episodes of the same window)."""
        state = run_chunk(state)
        report, window, metrics = close_report(state.metrics, gather, config.metrics_smoothing_episodes)
        for pid, agents in acting.ring_agents.items():
            episodes = episode_report(metrics.policies[pid], gather, window * agents)
            for stat in ("mean", "min", "max"):
                report[f"policy_reward_{stat}/{pid}"] = episodes[f"episode_reward_{stat}"]
        for pid, info in metrics.learner.items():
            report.update({f"learner/{pid}/{k}": v for k, v in info._asdict().items() if k != "td_error"})
        return state._replace(metrics=metrics), report

    chunks = count_chunks(config, schedule)

    def train(key: Array) -> tuple[TrainState, dict[str, Array]]:
        """``total_timesteps`` (rounded up to whole chunks); the reports are stacked per chunk."""
        return lax.scan(lambda s, _: chunk(s), init(key), None, length=chunks)

    return Plan(init=init, store=store, replay=replay, iteration=iteration, chunk=chunk, train=train,
                evaluate=acting.evaluate, act=acting.act, schedule=schedule, acting=acting, num_chunks=chunks)
