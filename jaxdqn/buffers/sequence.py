"""Cutting rollouts into overlapping time slices for sequence replay (recurrent Q-networks).

This is RLlib's ``timeslice_along_seq_lens_with_overlap`` with static shapes: a rollout of
``T`` steps from each of ``E`` environments becomes ``ceil((T - start) / (L - burn_in))`` slices
per environment, each ``L = seq_len`` steps long, consecutive slices overlapping by ``burn_in``
steps. Slots before the rollout or after its end are zero padding (mask False). Burn-in steps that
belong to an earlier episode than the slice's first training step are zeroed and masked too, as
in RLlib, and the slice's initial recurrent state is then zero. Unlike RLlib, a slice's training
part may cross an episode boundary (fixed strides keep shapes static): ``first`` marks where the
network must reset its state.

Example (RLlib's docstring, ``T=12``, ``seq_len=8``, ``burn_in=3``; Z = padding)::

    slice 0: Z Z Z | 0 1 2 3 4
    slice 1: 2 3 4 | 5 6 7 8 9
    slice 2: 7 8 9 | 10 11 Z Z Z
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxdqn.types import PyTree, SequenceItem

Array = jax.Array


def check_slicing(seq_len: int, burn_in: int, start: int, length: int) -> None:
    """Refuse slicing arguments that leave no training step or no slice."""
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
        raise ValueError(f"seq_len (replay_sequence_length) must be an int >= 1, got {seq_len!r}")
    if isinstance(burn_in, bool) or not isinstance(burn_in, int) or not 0 <= burn_in < seq_len:
        raise ValueError(
            f"burn_in must be an int in [0, seq_len={seq_len}) so that a slice trains on at "
            f"least one step, got {burn_in!r}"
        )
    if isinstance(start, bool) or not isinstance(start, int) or not 0 <= start < length:
        raise ValueError(f"start must be an int in [0, T={length}), got {start!r}")


def slice_times(length: int, *, seq_len: int, burn_in: int, start: int = 0) -> np.ndarray:
    """Static ``[K, L]`` time index of every slice slot (may fall outside ``[0, T)``)."""
    stride = seq_len - burn_in
    count = -(-(length - start) // stride)
    return start - burn_in + stride * np.arange(count)[:, None] + np.arange(seq_len)[None, :]


def timeslice(
    rollout: PyTree,
    first: Array,
    *,
    seq_len: int,
    burn_in: int = 0,
    start: int = 0,
    states: PyTree | None = None,
    zero_init_states: bool = True,
) -> SequenceItem:
    """Cut a time-major rollout into ``K * E`` sequence items.

    Args:
      rollout: pytree, leaves ``[T, E, ...]``.
      first: ``[T, E]`` bool, True where step ``t`` is the first of an episode.
      seq_len: ``L``, steps per slice including the burn-in (RLlib's ``replay_sequence_length``).
      burn_in: steps of overlap with the previous slice, used only to warm up the state.
      start: time index of the first training step of slice 0. Prepend the last ``burn_in`` steps
        of the previous fragment and pass ``start=burn_in`` to keep burn-in across fragments.
      states: optional pytree, leaves ``[T, E, ...]``: the recurrent state *before* step ``t``.
      zero_init_states: if True (or ``states`` is None), every slice starts from a zero state.

    Returns:
      ``SequenceItem`` with leaves ``[K * E, L, ...]`` (slice-major: item ``k * E + e``), ``mask``
      and ``first`` ``[K * E, L]`` and ``init_state`` leaves ``[K * E, ...]`` (``()`` if no states).
    """
    first = jnp.asarray(first, bool)
    if first.ndim != 2:
        raise ValueError(f"first must have shape [T, E], got {list(first.shape)}")
    length, num_envs = first.shape
    check_slicing(seq_len, burn_in, start, length)
    for path, leaf in jax.tree_util.tree_flatten_with_path(rollout)[0]:
        if jnp.shape(leaf)[:2] != (length, num_envs):
            raise ValueError(
                f"rollout{jax.tree_util.keystr(path)} must have leading shape [T={length}, "
                f"E={num_envs}] like first, got {list(jnp.shape(leaf))}"
            )

    times = slice_times(length, seq_len=seq_len, burn_in=burn_in, start=start)  # [K, L]
    count = times.shape[0]
    in_range = jnp.asarray((times >= 0) & (times < length))[:, :, None]  # [K, L, 1]
    clipped = np.clip(times, 0, length - 1)

    def to_items(x: Array) -> Array:  # [K, L, E, ...] -> [K * E, L, ...]
        x = jnp.swapaxes(x, 1, 2)
        return x.reshape((count * num_envs,) + x.shape[2:])

    first_kle = first[clipped] & in_range  # [K, L, E]
    # A burn-in step is kept only if no episode starts after it, up to the first training step.
    starts_after = jnp.flip(jnp.cumsum(jnp.flip(first_kle[:, 1 : burn_in + 1], 1), 1), 1) > 0
    same_episode = jnp.concatenate(
        [~starts_after, jnp.ones((count, seq_len - burn_in, num_envs), bool)], axis=1
    )
    mask_kle = in_range & same_episode  # [K, L, E]

    def pick(leaf: Array) -> Array:
        x = jnp.asarray(leaf)[clipped]  # [K, L, E, ...]
        m = mask_kle.reshape(mask_kle.shape + (1,) * (x.ndim - 3))
        return to_items(jnp.where(m, x, jnp.zeros((), x.dtype)))

    data = jax.tree_util.tree_map(pick, rollout)
    mask = to_items(mask_kle)
    if states is None:
        init_state: PyTree = ()
    else:
        keep = mask[:, 0] & (not zero_init_states)  # [K * E]

        def initial(leaf: Array) -> Array:
            x = to_items(jnp.asarray(leaf)[clipped])[:, 0]  # [K * E, ...]
            return jnp.where(keep.reshape(keep.shape + (1,) * (x.ndim - 1)), x, 0).astype(x.dtype)

        init_state = jax.tree_util.tree_map(initial, states)
    return SequenceItem(data=data, mask=mask, first=to_items(first_kle & mask_kle), init_state=init_state)
