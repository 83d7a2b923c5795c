"""On-device metrics and RLlib's result of a reporting period (``CollectMetrics``).

``Metrics`` holds RLlib's counters, the last completed episodes in a ``Ring`` (and, for a
multi-agent env, a ring of agent episodes per policy, RLlib's ``policy_reward_*``), the learner
statistics of the last SGD step per policy, and the counters at the last report, from which a
report's ``*_this_iter`` values count. ``close_report`` turns them into the report:
``episode_reward_mean/min/max`` and ``episode_len_mean`` over this period's episodes when all
replicas together have at least ``metrics_smoothing_episodes`` of them, else over the last
``metrics_smoothing_episodes``; the first report counts from zero, so it includes the warm-up
and each ``*_this_iter`` sums to its total.

Under data parallelism (``axis_name``) each replica keeps its own rings; reports gather them.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxdqn import learner, rollout

Array = jax.Array
Gather = Callable[[Array], Array]  # x [...] -> every replica's [D, ...]


class Ring(NamedTuple):
    """The last completed episodes (``record``)."""

    returns: Array  # [ring] float32
    lengths: Array  # [ring] int32
    ring_pos: Array  # [] int32
    episodes_total: Array  # [] int32


class Metrics(NamedTuple):
    """Counters (RLlib's names), episodes, learner statistics and the last report's counters."""

    episodes: Ring  # joint episodes (the agents' returns summed)
    policies: dict[str, Ring]  # policy id -> its agents' episodes (policy_reward_*); {} for one agent
    num_steps_sampled: Array  # [] int32
    num_steps_trained: Array  # [] int32
    num_target_updates: Array  # [] int32
    last_target_update_ts: Array  # [] int32
    learner: dict[str, learner.LearnInfo]  # trained policy id -> its last reported SGD step's (td_error [0])
    episodes_at_report: Array  # [] int32, this replica's episodes total at the last report
    sampled_at_report: Array  # [] int32
    trained_at_report: Array  # [] int32


def empty_ring(size: int) -> Ring:
    zero = jnp.zeros((), jnp.int32)
    return Ring(returns=jnp.zeros((size,), jnp.float32), lengths=jnp.zeros((size,), jnp.int32), ring_pos=zero,
                episodes_total=jnp.zeros((), jnp.int32))


def init(ring: int, agents_per_policy: dict[str, int], trained: tuple[str, ...]) -> Metrics:
    """Fresh metrics: rings of ``ring`` episodes (times its agents for a policy's ring), zero
    counters, zero learner statistics for the ``trained`` policies."""
    zero = lambda: jnp.zeros((), jnp.int32)  # noqa: E731 (distinct buffers: each is donated)
    return Metrics(episodes=empty_ring(ring), policies={pid: empty_ring(ring * k) for pid, k in agents_per_policy.items()},
                   num_steps_sampled=zero(), num_steps_trained=zero(), num_target_updates=zero(),
                   last_target_update_ts=zero(), learner={pid: learner.empty_info() for pid in trained},
                   episodes_at_report=zero(), sampled_at_report=zero(), trained_at_report=zero())


def ring_size(smoothing: int, steps_per_report: int, num_replicas: int) -> int:
    """Episodes each replica keeps: its share of ``metrics_smoothing_episodes`` and every
    episode one report can count (at most one per env step of the replica), so that RLlib's
    window of ``max(N, episodes this period)`` always fits."""
    return max(math.ceil(smoothing / num_replicas), math.ceil(steps_per_report / num_replicas))


def resize(ring: Ring, size: int) -> Ring:
    """The ring with room for ``size`` episodes, keeping the newest ones (leaves may carry leading
    run or device axes): a run resumed with another ``timesteps_per_iteration`` reports over the
    same last episodes."""
    old = ring.returns.shape[-1]
    kept = min(old, size)
    order = (ring.ring_pos[..., None] - kept + jnp.arange(kept)) % old  # [..., kept] oldest to newest

    def move(x: Array, empty: float) -> Array:
        fresh = jnp.full(x.shape[:-1] + (size,), empty, x.dtype)
        return fresh.at[..., :kept].set(jnp.take_along_axis(x, order, axis=-1))

    # Slots past the kept episodes hold none (length -1), though episodes_total may exceed them.
    return Ring(returns=move(ring.returns, 0.0), lengths=move(ring.lengths, -1),
                ring_pos=jnp.full_like(ring.ring_pos, kept % size), episodes_total=ring.episodes_total)


def resize_rings(m: Metrics, like: Metrics) -> Metrics:
    """``m``'s rings resized to the sizes of ``like``'s (shapes only are read from ``like``)."""
    return m._replace(episodes=resize(m.episodes, like.episodes.returns.shape[-1]),
                      policies={pid: resize(ring, like.policies[pid].returns.shape[-1])
                                for pid, ring in m.policies.items()})


def record(ring: Ring, done: Array, returns: Array, lengths: Array) -> Ring:
    """Write the episodes that ended (``done``, any shape; time-major order) into the ring."""
    size = ring.returns.shape[0]
    done = done.reshape(-1)
    slot = ring.ring_pos + jnp.cumsum(done) - 1
    slot = jnp.where(done, slot % size, size)  # size: dropped
    return Ring(returns=ring.returns.at[slot].set(returns.reshape(-1), mode="drop"),
                lengths=ring.lengths.at[slot].set(lengths.reshape(-1), mode="drop"),
                ring_pos=(ring.ring_pos + jnp.sum(done)).astype(jnp.int32) % size,
                episodes_total=ring.episodes_total + jnp.sum(done).astype(jnp.int32))


def record_episodes(metrics: Metrics, episodes: rollout.Episodes, per_policy: dict[str, rollout.Episodes]) -> Metrics:
    """The joint episodes that ended, and each policy's agent episodes, into their rings."""
    joint = record(metrics.episodes, episodes.done, rollout.joint_return(episodes), episodes.episode_length)
    return metrics._replace(episodes=joint, policies={
        pid: record(ring, per_policy[pid].done, per_policy[pid].episode_return, per_policy[pid].episode_length)
        for pid, ring in metrics.policies.items()})


def gatherer(axis_name: str | None) -> Gather:
    """``x [...] -> [D, ...]``: every replica's value (``[1, ...]`` without a device axis)."""
    if axis_name is None:
        return lambda x: x[None]
    return lambda x: lax.all_gather(x, axis_name)


def smoothing_window(new_episodes: Array, gather: Gather, smoothing: int) -> Array:
    """RLlib's ``CollectMetrics`` window, per replica: the episodes of this period when all
    replicas together have at least ``smoothing`` of them, else each replica's share of the
    last ``smoothing``. ``new_episodes`` [] is this replica's count."""
    replicas = gather(new_episodes).shape[0]
    enough = jnp.sum(gather(new_episodes)) >= smoothing
    return jnp.where(enough, new_episodes, math.ceil(smoothing / replicas)).astype(jnp.int32)


def episode_report(ring: Ring, gather: Gather, window: Array) -> dict[str, Array]:
    """RLlib's ``episode_reward_mean/min/max``, ``episode_len_mean`` and ``episodes_total`` over
    the last ``window`` [] episodes of each replica's ring, and the window itself as RLlib's
    ``hist_stats``: ``hist/episode_reward`` and ``hist/episode_lengths`` [D * ring], each
    replica's episodes oldest first, NaN where a slot is outside the window."""
    size = ring.returns.shape[0]
    totals = gather(ring.episodes_total)  # [D]
    count = jnp.minimum(jnp.minimum(totals, size), gather(window))  # [D]
    oldest_first = (gather(ring.ring_pos)[:, None] + jnp.arange(size)[None, :]) % size  # [D, ring] slots
    age = size - 1 - jnp.arange(size)[None, :]  # [1, ring]: the slots' ages in that order, 0 newest
    lengths = jnp.take_along_axis(gather(ring.lengths), oldest_first, axis=1)
    valid = (age < count[:, None]) & (lengths >= 0)  # -1: a slot a resize left empty
    returns = jnp.where(valid, jnp.take_along_axis(gather(ring.returns), oldest_first, axis=1), jnp.nan)
    lengths = jnp.where(valid, lengths.astype(jnp.float32), jnp.nan)
    return {
        "episode_reward_mean": jnp.nanmean(returns),
        "episode_reward_min": jnp.nanmin(returns),
        "episode_reward_max": jnp.nanmax(returns),
        "episode_len_mean": jnp.nanmean(lengths),
        "episodes_total": jnp.sum(totals),
        "hist/episode_reward": returns.reshape(-1),
        "hist/episode_lengths": lengths.reshape(-1),
    }


def close_report(m: Metrics, gather: Gather, smoothing: int) -> tuple[dict[str, Array], Metrics]:
    """``(report, metrics)`` at the end of a reporting period: the counters (RLlib's names), the
    period's ``*_this_iter`` counts, the episode statistics of RLlib's window (a policy's ring
    over the same window of joint episodes, one entry per agent), the learner statistics as
    ``learner/<policy>/<stat>``; and the metrics with their report markers moved to now."""
    new_episodes = m.episodes.episodes_total - m.episodes_at_report
    window = smoothing_window(new_episodes, gather, smoothing)
    report = {
        **episode_report(m.episodes, gather, window),
        "episodes_this_iter": jnp.sum(gather(new_episodes)),
        "timesteps_this_iter": m.num_steps_sampled - m.sampled_at_report,
        "num_steps_trained_this_iter": m.num_steps_trained - m.trained_at_report,
        "timesteps_total": m.num_steps_sampled,
        "num_steps_sampled": m.num_steps_sampled,
        "num_steps_trained": m.num_steps_trained,
        "num_target_updates": m.num_target_updates,
        "last_target_update_ts": m.last_target_update_ts,
    }
    for pid, ring in m.policies.items():
        agents = ring.returns.shape[0] // m.episodes.returns.shape[0]
        episodes = episode_report(ring, gather, window * agents)
        for stat in ("mean", "min", "max"):
            report[f"policy_reward_{stat}/{pid}"] = episodes[f"episode_reward_{stat}"]
        report[f"hist/policy_{pid}_reward"] = episodes["hist/episode_reward"]
    for pid, info in m.learner.items():
        report.update({f"learner/{pid}/{k}": v for k, v in info._asdict().items() if k != "td_error"})
    m = m._replace(episodes_at_report=m.episodes.episodes_total, sampled_at_report=m.num_steps_sampled,
                   trained_at_report=m.num_steps_trained)
    return report, m
