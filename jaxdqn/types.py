"""The package's vocabulary: the state pytrees and records every layer speaks.

All states are ``NamedTuple``s of arrays (one kind of pytree for the whole package), built with
keywords. Shapes are per replica; letters: B batch, N capacity, L sequence length, T time, E envs.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax

PyTree = Any
Array = jax.Array


class Transition(NamedTuple):
    """One (n-step) transition as stored for replay.

    ``discount`` is the whole bootstrap factor: ``gamma ** k`` for the ``k`` steps the
    transition spans, 0 when the episode terminated within them (truncation still bootstraps),
    so a target is ``reward + discount * max_a Q(next_obs, a)``.
    """

    obs: Array  # [...obs]
    action: Array  # [] int32
    reward: Array  # [] float32
    discount: Array  # [] float32
    next_obs: Array  # [...obs]


class UniformState(NamedTuple):
    """A FIFO ring of ``capacity`` items.

    ``storage`` has the item's structure with a leading ``[N]`` axis on every leaf.
    """

    storage: PyTree  # leaves [N, ...]
    insert_pos: Array  # [] int32, the next slot to write
    size: Array  # [] int32, number of valid slots, <= N
    num_added: Array  # [] int32, items ever added (RLlib's num_added)


class PrioritizedState(NamedTuple):
    """A FIFO ring plus a sum tree and a min tree over its priorities ``p_i = (|td|+eps)^alpha``.

    ``trees`` is ``[2, M]``: row 0 the sum tree, row 1 the min tree, 16-ary, levels stored root
    first (one array, so that XLA updates both in place; see ``buffers.segment_tree``, which
    also gives the layout). Unwritten leaves hold 0 (sum) and +inf (min), so they are never
    drawn and never set the minimum.
    """

    storage: UniformState
    trees: Array  # [2, M] float32, M ~ 1.07 N
    max_priority: Array  # [] float32, largest p_i ever set; new items enter with it



class FrameRef(NamedTuple):
    """A stored transition whose observations live in a frame ring (``buffers.frames``):
    ``transition.obs`` / ``transition.next_obs`` are int32 step numbers of env ``env``."""

    transition: Transition  # obs, next_obs: [] int32 step numbers
    env: Array  # [] int32


class FrameItems(NamedTuple):
    """What one store of stacked-frame observations adds (``buffers.frames``): ``K`` references
    with steps counted from the fragment's first step, and the fragment's ``T`` steps' frames."""

    refs: FrameRef  # leaves [K, ...]
    frames: Array  # [T, E, H, W] uint8: each step's newest frame (its stack's last)
    depth: Array  # [T, E] int32: how many of each step's stacked frames the rebuild reads (buffers.frames)


class FrameState(NamedTuple):
    """Transitions as references (``items``: the inner buffer's state) plus one ring of frames:
    step ``s`` of env ``e`` at row ``s % P``; each frame is stored once, not in ``2 S`` stacks."""

    items: Any  # UniformState | PrioritizedState of FrameRef items
    frames: Array  # [P, E, H, W] uint8
    depth: Array  # [P, E] int32
    next_step: Array  # [] int32: the first step of the next store's fragment (n-step look-ahead written past it)


class Sample(NamedTuple):
    """A replayed batch."""

    items: PyTree  # leaves [B, ...]
    indices: Array  # [B] int32, slots the items came from (for priority updates)
    weights: Array  # [B] float32, importance weights (all ones for uniform replay)


class SequenceItem(NamedTuple):
    """A time slice of a rollout, as stored for sequence replay (RLlib's timeslices).

    The first ``burn_in`` steps only warm up a recurrent state; ``mask`` is False on padding
    (before the rollout began, after it ended, or burn-in steps from an earlier episode).
    """

    data: PyTree  # leaves [L, ...]
    mask: Array  # [L] bool
    first: Array  # [L] bool, True where an episode starts (the network resets its state there)
    init_state: PyTree  # recurrent state before step 0 of the slice, leaves [...]; () if none


class ReplayBuffer(NamedTuple):
    """A replay buffer as a bundle of pure functions (optax's ``GradientTransformation`` style).

    ``init(example_item) -> state``; ``add(state, items, mask=None) -> state`` with leaves
    ``[K, ...]`` (``mask`` ``[K]``: keep only those items);
    ``sample(state, key, batch_size, beta=...) -> Sample`` (``batch_size`` is a Python int: it is a
    shape); ``update(state, indices, td_errors) -> state`` (a no-op for uniform replay).
    """

    init: Any
    add: Any
    sample: Any
    update: Any


class EnvStep(NamedTuple):
    """The outcome of stepping ``E`` environments once; leaves ``[E, ...]``.

    Every field but ``episode_end`` is one array for a single agent and a dict agent id ->
    array for a multi-agent env (the same code steps both: the agents' dict is a pytree)."""

    obs: PyTree  # observation to act on next (the reset one where an episode ended)
    next_obs: PyTree  # the step's true next observation (before any reset)
    reward: PyTree  # float32
    terminated: PyTree  # bool
    truncated: PyTree  # bool
    # bool: the step is a transition (None: every step is). An ALE batch's autoreset steps are
    # not; a multi-agent agent that has finished its own episode does not act until the joint end.
    valid: PyTree | None = None
    # bool [E]: the scored (joint) episode ended (None: where terminated | truncated). An ALE
    # batch ends it at the autoreset step after a game over, so a lost life can terminate without
    # ending it; a multi-agent env ends it for all agents at once.
    episode_end: Array | None = None


def episode_ended(step: EnvStep) -> Array:
    """Where the scored episode ended at ``step`` (``EnvStep.episode_end``), ``[E]``."""
    return step.terminated | step.truncated if step.episode_end is None else step.episode_end


class Env(NamedTuple):
    """``E`` environments stepped side by side, as pure functions (gymnax envs vmapped, an ALE
    batch, a multi-agent env's copies), one key each: ``reset(keys [E]) -> (obs [E, ...],
    env_state)`` and ``step(keys [E], env_state, action [E]) -> (EnvStep, env_state)``, ended
    episodes reset."""

    reset: Any
    step: Any
