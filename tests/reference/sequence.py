"""A naive twin of the time slicer: RLlib's ``timeslice_along_seq_lens_with_overlap`` rules as
plain loops over (slice, env, position)."""

from __future__ import annotations

import numpy as np


def timeslice_loops(data, first, *, seq_len, burn_in, start=0, states=None, zero_init_states=True):
    """``data`` [T, E, ...] numpy; returns (data [K*E, L, ...], mask, first, init_state)."""
    t_len, num_envs = first.shape
    stride = seq_len - burn_in
    count = int(np.ceil((t_len - start) / stride))
    out = np.zeros((count * num_envs, seq_len) + data.shape[2:], data.dtype)
    mask = np.zeros((count * num_envs, seq_len), bool)
    out_first = np.zeros((count * num_envs, seq_len), bool)
    init = None if states is None else np.zeros((count * num_envs,) + states.shape[2:], states.dtype)
    for k in range(count):
        train_begin = start + k * stride
        for e in range(num_envs):
            item = k * num_envs + e
            for pos in range(seq_len):
                t = train_begin - burn_in + pos
                if not 0 <= t < t_len:
                    continue
                if pos < burn_in:
                    # a burn-in step from an earlier episode than the first training step is dropped
                    later = [first[u, e] for u in range(t + 1, train_begin + 1) if 0 <= u < t_len]
                    if any(later):
                        continue
                out[item, pos] = data[t, e]
                mask[item, pos] = True
                out_first[item, pos] = first[t, e]
            if states is not None and not zero_init_states and mask[item, 0]:
                init[item] = states[train_begin - burn_in, e]
    return out, mask, out_first, init
