"""How often the plan replays: RLlib's ``training_intensity`` as an exact, static schedule.

RLlib alternates its two ops round robin, ``store_op`` and ``replay_op``, with weights derived
from ``training_intensity`` (replayed / sampled env steps). Here the requested intensity is
``replays`` replay steps per ``stores`` store steps, the exact fraction ``p / q`` of the decimal
the user wrote (``0.3`` is 3/10; one replay per store, RLlib's native ratio, when unset), and
each store is followed by the replays it pays for: after ``k`` stores exactly
``floor(k p / q)`` replays have run (RLlib rounds its weights, 2.x, or rounds them
stochastically, 1.x; for ``p / 1`` and ``1 / q`` the two are the same).

When ``q`` is at most ``MAX_STATIC_STORES`` the count after each store is a static pattern of
period ``q`` (``replay_counts``) and a reporting chunk is a whole number of periods. Otherwise
(0.08 with RLlib's defaults is 1 replay per 100 stores) the count comes from a credit carried
in the train state (``credit``: each store earns ``p``, each replay costs ``q``).
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
    stores_per_chunk: int  # stores per report (a multiple of ``stores`` for a static pattern)

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
    def steps_per_chunk(self) -> int:
        return self.stores_per_chunk * self.steps_per_store

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
                  learning_starts: int, timesteps_per_iteration: int) -> Schedule:
    """The schedule of stores of ``steps_per_store`` env steps and replays of ``replayed_steps``
    (the train batch, times the sequence length for sequences); a chunk is about
    ``timesteps_per_iteration`` env steps."""
    ratio = replay_ratio(training_intensity, steps_per_store, replayed_steps)
    period = 1 if ratio.denominator > MAX_STATIC_STORES else ratio.denominator  # Schedule.period
    chunk = period * max(1, math.ceil(timesteps_per_iteration / (period * steps_per_store)))
    return Schedule(steps_per_store=steps_per_store, stores=ratio.denominator, replays=ratio.numerator,
                    warmup_stores=max(0, math.ceil(learning_starts / steps_per_store) - 1), stores_per_chunk=chunk)


def count_chunks(total_timesteps: int, schedule: Schedule, warmup_steps: int = 0) -> int:
    """Chunks that ``train`` runs after ``warmup_steps`` env steps of warm-up (``learning_starts``'s
    stores, the n-step priming): ``total_timesteps`` of them all, rounded up to whole chunks, as
    the Trainer counts its first iteration's steps."""
    return max(1, math.ceil((total_timesteps - warmup_steps) / schedule.steps_per_chunk))


def pay(credit: Any, schedule: Schedule) -> tuple[Any, Any]:
    """``(replays, credit left)`` after one more store, for a credit schedule."""
    credit = credit + schedule.replays
    count = credit // schedule.stores
    return count, credit - count * schedule.stores
