"""How often the plan replays: RLlib's ``training_intensity`` as an exact, static schedule.

RLlib alternates its two ops round robin, ``store_op`` and ``replay_op``, with weights derived
from ``training_intensity`` (replayed / sampled env steps). Here the requested intensity is
``replays`` replay steps per ``stores`` store steps, the exact fraction ``p / q`` of the decimal
the user wrote (``0.3`` is 3/10; one replay per store, RLlib's native ratio, when unset), and
each store is followed by the replays it pays for: after ``k`` stores exactly
``floor(k p / q)`` replays have run (RLlib rounds its weights, 2.x, or rounds them
stochastically, 1.x; for ``p / 1`` and ``1 / q`` the two are the same).

When ``q`` is at most ``MAX_STATIC_STORES`` the count after each store is a static pattern of
period ``q`` (``replay_counts``). Otherwise (0.08 with RLlib's defaults is 1 replay per 100
stores) the count comes from a credit carried in the train state (``credit``: each store earns
``p``, each replay costs ``q``).

A report (a chunk) ends as RLlib's ``OncePerTimestepsElapsed`` passes a replay's output: at the
first store with a replay once ``timesteps_per_iteration`` env steps were sampled since the last
report (since 0 for the first: it comes at about max(learning_starts, timesteps_per_iteration)).
"""

from __future__ import annotations

import fractions
import math
from typing import Any, NamedTuple

import numpy as np

MAX_STATIC_STORES = 64  # a replay ratio p / q with q up to this runs as a static pattern


class Schedule(NamedTuple):
    """The static shape of a plan (all replicas together)."""

    steps_per_store: int  # env steps one store adds: rollout_fragment_length * num_envs
    stores: int  # q of the ratio p / q (in lowest terms)
    replays: int  # p
    # Stores before the first round: the first round's store is the one that brings the buffer
    # to learning_starts items, and its replays follow (RLlib's replay op returns nothing before).
    warmup_stores: int
    timesteps_per_iteration: int  # env steps sampled between two reports, at least
    warmup_steps: int  # env steps before the first chunk: the warm-up's stores and the n-step priming

    @property
    def credit(self) -> bool:
        """Whether the replay count after a store comes from the carried credit."""
        return self.stores > MAX_STATIC_STORES

    @property
    def period(self) -> int:
        """Stores after which the pattern repeats (a plan ``iteration``): ``stores``, or 1 for a
        credit schedule."""
        return 1 if self.credit else self.stores

    @property
    def stores_per_chunk(self) -> int:
        """The fewest stores between two reports: ``timesteps_per_iteration`` env steps."""
        return max(1, -(-self.timesteps_per_iteration // self.steps_per_store))

    @property
    def steps_per_chunk(self) -> int:
        """The fewest env steps between two reports (whole stores)."""
        return self.stores_per_chunk * self.steps_per_store

    @property
    def gaps(self) -> np.ndarray:
        """[period] stores from a period phase to the next store with a replay (0 where the store
        at that phase replays; all 0 for a credit schedule, whose chunks end without waiting)."""
        if self.credit:
            return np.zeros(1, np.int32)
        counts = np.tile(self.replay_counts(self.stores), 2)
        return np.array([np.flatnonzero(counts[k:])[0] for k in range(self.stores)], np.int32)

    @property
    def max_chunk_stores(self) -> int:
        """The most stores one chunk can take (the warm-up's not counted)."""
        return self.stores_per_chunk + int(self.gaps.max())

    def phase(self, sampled: Any) -> Any:
        """The pattern's phase (stores since the warm-up, modulo the period) once ``sampled``
        env steps are sampled (a Python or traced int)."""
        return (sampled - self.warmup_steps) // self.steps_per_store % self.period

    @property
    def primed_steps(self) -> int:
        """Env steps sampled before any store (the n-step look-ahead): a fresh state's count."""
        return self.warmup_steps - self.warmup_stores * self.steps_per_store

    def warmup_left(self, sampled: Any) -> Any:
        """Warm-up stores still to run once ``sampled`` env steps are sampled (a Python or
        traced int): all of them in a fresh state (only the n-step look-ahead sampled)."""
        left = self.warmup_stores - (sampled - self.primed_steps) // self.steps_per_store
        return max(0, left) if isinstance(left, int) else left.clip(0)

    def chunk_stores(self, sampled: Any, since_report: Any, gaps: Any = None) -> Any:
        """Stores of the chunk that starts once ``sampled`` env steps are sampled,
        ``since_report`` of them since the last report (a Python or traced int; ``gaps``: the
        table as an array for a traced call)."""
        fewest = -(-(self.timesteps_per_iteration - since_report) // self.steps_per_store)
        fewest = max(1, fewest) if isinstance(fewest, int) else fewest.clip(1)
        gaps = self.gaps if gaps is None else gaps
        return fewest + gaps[(self.phase(sampled) + fewest - 1) % self.period]

    def chunk_clocks(self, chunks: int) -> np.ndarray:
        """``[chunks, 2]`` int32: the env steps sampled, and sampled at the last report, as each
        of the first ``chunks`` chunks of a fresh run starts (its n-step look-ahead primed)."""
        clocks, sampled, at_report = [], self.primed_steps, 0
        for _ in range(chunks):
            clocks.append((sampled, at_report))
            after = sampled + self.warmup_left(sampled) * self.steps_per_store
            sampled = after + self.chunk_stores(after, after - at_report) * self.steps_per_store
            at_report = sampled
        return np.array(clocks, np.int32).reshape(chunks, 2)

    def replay_counts(self, count: int) -> np.ndarray:
        """The replays after each of ``count`` stores from a period's start (static pattern)."""
        k = np.arange(count + 1, dtype=np.int64)
        return np.diff(k * self.replays // self.stores).astype(np.int32)


def replay_ratio(training_intensity: float | None, steps_per_store: int, replayed_steps: int) -> fractions.Fraction:
    """Replay steps per store step: ``training_intensity * steps_per_store / replayed_steps`` (1
    without ``training_intensity``: RLlib's native ratio), as the exact fraction of the decimal
    the user wrote, its terms bounded so that the credit fits an int32."""
    if training_intensity is None:
        return fractions.Fraction(1)
    exact = fractions.Fraction(repr(float(training_intensity))) * steps_per_store / replayed_steps
    limit = 1_000_000
    ratio = exact.limit_denominator(limit)
    while ratio.numerator + ratio.denominator >= 2**30 and limit > 1:
        limit //= 10
        ratio = exact.limit_denominator(limit)
    if ratio == 0 or ratio.numerator + ratio.denominator >= 2**30:
        raise ValueError(f"training_intensity={training_intensity} is invalid: it gives "
                         f"{float(exact):.3g} replay steps per store step of {steps_per_store} env steps; "
                         f"use a value between {replayed_steps / steps_per_store / 1e6:.3g} and "
                         f"{replayed_steps / steps_per_store * 1e8:.3g}")
    return ratio


def make_schedule(*, steps_per_store: int, replayed_steps: int, training_intensity: float | None,
                  learning_starts: int, timesteps_per_iteration: int, primed_steps: int = 0) -> Schedule:
    """The schedule of stores of ``steps_per_store`` env steps and replays of ``replayed_steps``
    (the train batch, times the sequence length for sequences); a chunk is about
    ``timesteps_per_iteration`` env steps, the first one ends once that many are sampled
    (``primed_steps``: the n-step look-ahead's, sampled before any store)."""
    ratio = replay_ratio(training_intensity, steps_per_store, replayed_steps)
    warmup = max(0, math.ceil(learning_starts / steps_per_store) - 1)
    return Schedule(steps_per_store=steps_per_store, stores=ratio.denominator, replays=ratio.numerator,
                    warmup_stores=warmup, timesteps_per_iteration=timesteps_per_iteration,
                    warmup_steps=warmup * steps_per_store + primed_steps)


def count_chunks(total_timesteps: int, schedule: Schedule) -> int:
    """Chunks that ``train`` runs for ``total_timesteps`` env steps in all, the warm-up's
    included: the last one the first to end at or past it. The chunks after the first repeat
    with the pattern's phase (at most ``period`` apart), so whole cycles are counted at once."""
    sps = schedule.steps_per_store
    sampled = schedule.warmup_steps + schedule.chunk_stores(schedule.warmup_steps, schedule.warmup_steps) * sps
    chunks, seen = 1, {}
    while sampled < total_timesteps:
        phase = schedule.phase(sampled)
        if phase in seen:  # a cycle of chunks: skip the whole ones that still end before the total
            cycle_chunks, cycle_steps = chunks - seen[phase][0], sampled - seen[phase][1]
            skip = max(0, (total_timesteps - sampled) // cycle_steps - 1)
            chunks, sampled, seen = chunks + skip * cycle_chunks, sampled + skip * cycle_steps, {}
            phase = schedule.phase(sampled)
        seen[phase] = (chunks, sampled)
        sampled += schedule.chunk_stores(sampled, 0) * sps
        chunks += 1
    return chunks


def pay(credit: Any, schedule: Schedule) -> tuple[Any, Any]:
    """``(replays, credit left)`` after one more store, for a credit schedule."""
    credit = credit + schedule.replays
    count = credit // schedule.stores
    return count, credit - count * schedule.stores
