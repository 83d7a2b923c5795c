"""Replay of stacked-frame observations with every frame stored once (Atari).

An Atari observation is a stack of the last ``S`` frames (``[H, W, S]`` uint8), so a transition
stored as ``(obs, next_obs)`` holds ``2 S`` frames of which ``S + 1`` overlap its neighbours': a
1M-transition buffer of 84x84x4 stacks is 56 GB. Here an item is a ``FrameRef``: the transition
with its observations replaced by step numbers, and a ring of frames holds each step's newest
frame once per env (1M transitions: about 7 GB). A stack is rebuilt when sampled:

    stack(s, e)[..., j] = frames[s - min(S - 1 - j, depth[s, e] - 1), e]

``depth`` counts a stack's frames from the last of its leading run of equal frames: a
reset fills the stack with copies of its first frame (RLlib's ``FrameStack``: ``[f0, f0, f0,
f0]``, depth 1), so the rebuild repeats the episode's first frame instead of reaching into the
previous episode. A stack whose leading frames merely look alike rebuilds the same either way,
so ``depth`` is read off the stack itself (``rollout.frame_items``). The rebuilt stacks equal the
stored ones exactly when each step's stack continues the previous step's within an episode,
which ``atari.AtariEnv``'s stacking does (tests/test_frames.py checks it on real games, and
checks the rebuild against the stacks).

``make_frame_replay(inner, ...)`` wraps a uniform or prioritized buffer of ``FrameRef`` items;
``add`` takes ``FrameItems`` (the fragment's ``K`` references, steps counted from its first
step, and the newest frame and depth of its ``T = L + n`` steps: the last ``n`` are written
again, identically, by the next store) and ``sample`` returns whole ``Transition``s, as the
plain buffer would. The frame ring keeps ``P = ceil(N / E) * 17 / 16 + T + S`` steps per env:
``N`` items span ``N / E`` steps of ``E`` envs, plus the steps whose items were not stored
(reset steps: the autoreset, no-ops and FIRE of each game, the no-op and FIRE after each lost
life). A sampled item whose frames were overwritten (possible only where more than 1/16 of
the steps were unstored, as in the short games of random play) gets importance weight 0, so it
never trains.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxdqn.types import FrameItems, FrameState, ReplayBuffer, Sample

Array = jax.Array


def ring_steps(capacity: int, num_envs: int, fragment_length: int, n_step: int, stack: int) -> int:
    """``P``: the steps per env the frame ring keeps (see the module docstring)."""
    span = -(-capacity // num_envs)
    return span + -(-span // 16) + fragment_length + n_step + stack


def stacks(state: FrameState, steps: Array, env: Array, stack: int) -> Array:
    """The observations of ``steps`` ``[B]`` of envs ``env`` ``[B]``: ``[B, H, W, S]`` uint8."""
    rows = state.frames.shape[0]
    j = jnp.arange(stack, dtype=jnp.int32)
    depth = state.depth[steps % rows, env]  # [B]
    back = jnp.minimum(stack - 1 - j[None, :], depth[:, None] - 1)  # [B, S]: the leading copies repeat one frame
    frames = state.frames[(steps[:, None] - back) % rows, env[:, None]]  # [B, S, H, W]
    return jnp.moveaxis(frames, 1, -1)


def make_frame_replay(inner: ReplayBuffer, *, capacity: int, num_envs: int, fragment_length: int, n_step: int,
                      stack: int) -> ReplayBuffer:
    """``inner`` (of ``capacity`` ``FrameRef`` items) with the frames kept once per step: the
    stores of ``num_envs`` envs, ``fragment_length`` steps each, n-step look-ahead ``n_step``,
    observations of ``stack`` frames."""
    rows = ring_steps(capacity, num_envs, fragment_length, n_step, stack)

    def init(example: FrameItems) -> FrameState:
        """An empty buffer; ``example``: one item's references, one step's frames ``[E, H, W]``."""
        if example.frames.shape[0] != num_envs:
            raise ValueError(f"example frames must be [E={num_envs}, H, W], got {list(example.frames.shape)}")
        zero = lambda: jnp.zeros((), jnp.int32)  # noqa: E731 - distinct buffers, donated apart
        return FrameState(items=inner.init(example.refs),
                          frames=jnp.zeros((rows,) + example.frames.shape, example.frames.dtype),
                          depth=jnp.zeros((rows, num_envs), jnp.int32), next_step=zero())

    def add(state: FrameState, items: FrameItems, mask: Array | None = None) -> FrameState:
        """Write the fragment's frames at its steps' rows, its references (steps made absolute)
        into ``inner``; the next fragment starts ``K / E`` steps later."""
        steps_written = items.frames.shape[0]
        k = items.refs.env.shape[0]
        if items.frames.shape[1] != num_envs or k % num_envs or steps_written != k // num_envs + n_step:
            raise ValueError(f"items must be K = L x {num_envs} references and [L + {n_step}, {num_envs}, H, W] "
                             f"frames, got K={k} and frames {list(items.frames.shape)}")
        row = (state.next_step + jnp.arange(steps_written, dtype=jnp.int32)) % rows
        frames = state.frames.at[row].set(items.frames, unique_indices=True)
        depth = state.depth.at[row].set(items.depth, unique_indices=True)
        t = items.refs.transition
        refs = items.refs._replace(transition=t._replace(obs=t.obs + state.next_step,
                                                         next_obs=t.next_obs + state.next_step))
        inner_state = inner.add(state.items, refs) if mask is None else inner.add(state.items, refs, mask)
        return FrameState(items=inner_state, frames=frames, depth=depth, next_step=state.next_step + k // num_envs)

    def sample(state: FrameState, key: Array, batch_size: int, beta: float = 0.0) -> Sample:
        """``inner``'s draw with its stacks rebuilt: ``Sample`` of ``Transition``s."""
        drawn = inner.sample(state.items, key, batch_size, beta)
        refs = drawn.items
        t = refs.transition
        # Its oldest frame is still in the ring (which ends n_step steps past the next fragment's start).
        intact = t.obs - (stack - 1) >= state.next_step + n_step - rows
        items = t._replace(obs=stacks(state, t.obs, refs.env, stack), next_obs=stacks(state, t.next_obs, refs.env, stack))
        return Sample(items=items, indices=drawn.indices, weights=drawn.weights * intact.astype(drawn.weights.dtype))

    def update(state: FrameState, indices: Array, td_errors: Array) -> FrameState:
        return state._replace(items=inner.update(state.items, indices, td_errors))

    return ReplayBuffer(init=init, add=add, sample=sample, update=update)


__all__ = ["make_frame_replay", "ring_steps", "stacks"]
