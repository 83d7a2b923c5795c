"""Rollouts: ``E`` environments stepped for a fragment by one loop, for one agent or several
(the agents' dict is a pytree), and the items a fragment's steps make for the replay.

``run_steps`` acts (an ``Act`` closed over the params and epsilon), steps the ``Env`` and keeps
episode returns (per agent) and lengths. ``fragment`` runs ``F`` new steps after the ``P``
steps carried from the previous fragment (``ActorState.pending``) and returns that window
``[P + F, E]``; the caller turns it into items:

- ``n_step_transitions``: with ``P = n - 1``, each of the first ``F`` steps of the window sees
  ``n - 1`` steps ahead, so transitions are exact across fragment boundaries. The n-step return
  of a step stops at its episode's end (``losses.n_step_returns``: ``gamma^k`` for the ``k``
  steps taken, 0 after a termination), so a transition never mixes two episodes. ``prime``
  fills ``pending`` once before the first fragment, so every fragment emits exactly ``F * E``
  transitions (static shapes).
- ``frame_items``: the same transitions with stacked-frame observations stored once.
- ``sequence_items``: recurrent Q-networks' slices; ``P`` is the burn-in of the first slice.

Recurrent actors also carry a ``Memory`` (the recurrent state and whether the current
observation starts an episode, where the network resets the state); their ``Act`` returns
``(actions, recurrent state)`` and every ``RawStep`` records the memory it acted from, so that
sequences start from the right state.
"""

from __future__ import annotations

import functools
import operator
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxdqn import buffers, losses
from jaxdqn.types import Env, FrameItems, FrameRef, SequenceItem, Transition, episode_ended

Array = jax.Array
tree_map = jax.tree_util.tree_map


class RawStep(NamedTuple):
    """Environment steps before item assembly; leaves ``[..., E, ...]``. The step fields are one
    array per field for one agent, a dict agent id -> array for several."""

    obs: Any
    action: Any  # int32
    reward: Any  # float32
    terminated: Any  # bool
    truncated: Any  # bool
    next_obs: Any  # the true successor (the final observation at an episode's end)
    memory: Any = ()  # recurrent actors: the Memory acted from (before the step); () otherwise
    acted: Any = ()  # the step is a transition (``EnvStep.valid``); () where every step is


class Memory(NamedTuple):
    """A recurrent actor's memory, leaves ``[E, ...]``."""

    state: Any  # the recurrent state before acting on ``obs`` (reset by the network where ``first``)
    first: Array  # [E] bool: ``obs`` is an episode's first observation


class ActorState(NamedTuple):
    env_state: Any
    obs: Any  # [E, *obs] (per agent), to act on next
    episode_return: Any  # [E] float32 per agent, of the running episodes
    episode_length: Array  # [E] int32
    pending: RawStep  # leaves [P, E, ...]: the steps carried into the next fragment
    memory: Any = ()  # recurrent actors: Memory, leaves [E, ...]; () for feed-forward ones


class Episodes(NamedTuple):
    """Episodes that ended during a fragment: ``done`` marks where, ``[F, E]``."""

    done: Array  # bool
    episode_return: Any  # float32 per agent, valid where done (``joint_return`` sums the agents)
    episode_length: Array  # int32, valid where done


# (obs [E, ...], key) -> actions [E]; recurrent: (obs, key, memory) -> (actions, recurrent state)
Act = Callable[..., Any]
View = Callable[[RawStep], RawStep]  # what the learner sees of a step (see ``make_view``)


def joint_return(episodes: Episodes) -> Array:
    """The episodes' returns summed over the agents (RLlib's ``episode_reward``)."""
    return functools.reduce(operator.add, jax.tree_util.tree_leaves(episodes.episode_return))


def clip_reward(reward: Array, clip_rewards: Any) -> Array:
    """RLlib's ``clip_rewards``: None / False keep ``reward``; True its sign; ``c`` clips to
    ``[-c, c]``; ``(low, high)`` to ``[low, high]``."""
    if clip_rewards is None or clip_rewards is False:
        return reward
    if clip_rewards is True:
        return jnp.sign(reward)
    low, high = clip_rewards if isinstance(clip_rewards, tuple) else (-clip_rewards, clip_rewards)
    return jnp.clip(reward, low, high)


def make_view(*, clip_rewards: Any = None, no_done_at_end: bool = False,
              bootstrap_truncations: bool = True) -> View | None:
    """The transform from an env step to the step the learner trains on: rewards clipped
    (``clip_rewards``); with ``no_done_at_end``, a termination turned into a truncation (it
    bootstraps; the episode still resets); without ``bootstrap_truncations``, a truncation
    turned into a termination (RLlib 1.x's TimeLimit done). Episode returns are the env's,
    unclipped. None when nothing changes."""
    if (clip_rewards is None or clip_rewards is False) and not no_done_at_end and bootstrap_truncations:
        return None

    def view(raw: RawStep) -> RawStep:
        raw = raw._replace(reward=tree_map(lambda r: clip_reward(r, clip_rewards), raw.reward))
        if no_done_at_end:
            raw = raw._replace(terminated=tree_map(jnp.zeros_like, raw.terminated),
                               truncated=tree_map(operator.or_, raw.truncated, raw.terminated))
        if not bootstrap_truncations:
            raw = raw._replace(terminated=tree_map(operator.or_, raw.terminated, raw.truncated),
                               truncated=tree_map(jnp.zeros_like, raw.truncated))
        return raw

    return view


def step_keys(key: Array, num_steps: int, num_envs: int) -> tuple[Array, Array]:
    """``(next key, keys [T, 1 + E])``: for each of ``num_steps`` steps an acting key and one key
    per env, in one draw (each generator call is a loop of its own on XLA:CPU)."""
    keys = jax.random.split(key, 1 + num_steps * (1 + num_envs))
    return keys[0], keys[1:].reshape(num_steps, 1 + num_envs)


def run_steps(env: Env, act: Act, actor: ActorState, keys: Array, view: View | None = None
              ) -> tuple[ActorState, RawStep, Episodes]:
    """Step every environment once per row of ``keys`` ``[T, 1 + E]`` (``step_keys``) with
    ``act``; raw steps ``[T, E]`` as the learner sees them (``view``), episodes as the env scored
    them."""
    recurrent = isinstance(actor.memory, Memory)

    def body(actor: ActorState, keys: Array):
        act_key, env_keys = keys[0], keys[1:]
        if recurrent:
            action, state = act(actor.obs, act_key, actor.memory)
        else:
            action = act(actor.obs, act_key)
        out, env_state = env.step(env_keys, actor.env_state, action)
        done = episode_ended(out)
        returns = tree_map(operator.add, actor.episode_return, out.reward)
        counted = 1 if out.valid is None else functools.reduce(operator.or_, jax.tree_util.tree_leaves(out.valid))
        length = actor.episode_length + (1 if out.valid is None else counted.astype(jnp.int32))
        raw = RawStep(obs=actor.obs, action=tree_map(lambda a: a.astype(jnp.int32), action), reward=out.reward,
                      terminated=out.terminated, truncated=out.truncated, next_obs=out.next_obs,
                      memory=actor.memory, acted=() if out.valid is None else out.valid)
        if view is not None:
            raw = view(raw)
        episodes = Episodes(done=done, episode_return=returns, episode_length=length)
        actor = actor._replace(env_state=env_state, obs=out.obs,
                               episode_return=tree_map(lambda r: jnp.where(done, 0.0, r), returns),
                               episode_length=jnp.where(done, 0, length),
                               memory=Memory(state=state, first=done) if recurrent else actor.memory)
        return actor, (raw, episodes)

    if keys.shape[0] == 1:  # no one-trip loop: a while loop with its carry copies on every outer trip
        actor, out = body(actor, keys[0])
        raw, episodes = tree_map(lambda x: x[None], out)
    else:
        actor, (raw, episodes) = lax.scan(body, actor, keys)
    return actor, raw, episodes


def init(env: Env, key: Array, num_envs: int, pending: int, *, recurrent_state: Any = None,
         acted: bool = False) -> ActorState:
    """Fresh episodes and ``pending`` zero steps (``acted`` False where steps carry their
    validity) until ``prime`` or, for sequences, the first fragment fills them.
    ``recurrent_state`` (leaves ``[E, ...]``, the network's initial state) makes a recurrent
    actor: its memory starts there, every env at an episode's first observation; the pending
    steps' memories have ``first`` False, so the slicer masks them."""
    obs, env_state = env.reset(jax.random.split(key, num_envs))
    return waiting(obs, env_state, num_envs, pending, recurrent_state, acted)


def blank(obs: Any, num_envs: int, pending: int, recurrent_state: Any = None, *, acted: bool = False) -> ActorState:
    """An actor whose envs step on the host (``obs``: one observation's ``ShapeDtypeStruct``, a
    dict of them by agent for several): zero observations, no env state, ``pending`` zero steps
    until the host primes them (or, for sequences, the first fragments fill them), as ``init``'s."""
    batch = tree_map(lambda o: jnp.zeros((num_envs,) + tuple(o.shape), o.dtype), obs)
    return waiting(batch, (), num_envs, pending, recurrent_state, acted)


def waiting(obs: Any, env_state: Any, num_envs: int, pending: int, recurrent_state: Any, acted: bool) -> ActorState:
    """An actor at observations ``obs`` (``[E, *obs]``, per agent) with ``pending`` zero steps."""
    memory: Any = ()
    if recurrent_state is not None:
        memory = Memory(state=recurrent_state, first=jnp.ones((num_envs,), bool))
    zeros = lambda x, dtype=None: jnp.zeros((pending,) + jnp.shape(x), dtype or jnp.asarray(x).dtype)  # noqa: E731
    per_env = jnp.zeros((num_envs,))
    steps = RawStep(obs=tree_map(zeros, obs), action=tree_map(lambda o: zeros(per_env, jnp.int32), obs),
                    reward=tree_map(lambda o: zeros(per_env, jnp.float32), obs),
                    terminated=tree_map(lambda o: zeros(per_env, bool), obs),
                    truncated=tree_map(lambda o: zeros(per_env, bool), obs), next_obs=tree_map(zeros, obs),
                    memory=tree_map(zeros, memory), acted=tree_map(lambda o: zeros(per_env, bool), obs) if acted else ())
    return ActorState(env_state=env_state, obs=obs, episode_return=tree_map(lambda o: per_env.astype(jnp.float32), obs),
                      episode_length=jnp.zeros((num_envs,), jnp.int32), pending=steps, memory=memory)


def prime(env: Env, act: Act, actor: ActorState, keys: Array, view: View | None = None) -> tuple[ActorState, Episodes]:
    """Take the first ``P`` steps into ``pending`` (no items yet), ``keys`` ``[P, 1 + E]``."""
    actor, raw, episodes = run_steps(env, act, actor, keys, view)
    return actor._replace(pending=raw), episodes


def extend_window(pending: RawStep, raw: RawStep) -> tuple[RawStep, RawStep]:
    """``(window, new pending)``: the new steps ``raw`` ``[F, E]`` after the carried ``pending``
    ``[P, E]``, and the window's last ``P`` steps, carried into the next fragment."""
    length = jax.tree_util.tree_leaves(raw.reward)[0].shape[0]
    window = tree_map(lambda p, r: jnp.concatenate([p, r]), pending, raw)
    return window, tree_map(lambda w: w[length:], window)


def fragment(env: Env, act: Act, actor: ActorState, keys: Array, view: View | None = None
             ) -> tuple[ActorState, RawStep, Episodes]:
    """Run one step per env and row of ``keys`` ``[F, 1 + E]``: ``(actor, window [P + F, E],
    episodes [F, E])``."""
    actor, raw, episodes = run_steps(env, act, actor, keys, view)
    window, pending = extend_window(actor.pending, raw)
    return actor._replace(pending=pending), window, episodes


def agent_steps(window: RawStep, agent: str) -> RawStep:
    """One agent's steps of a multi-agent window (whose step fields are dicts by agent)."""
    return window._replace(**{f: getattr(window, f)[agent] for f in
                              ("obs", "action", "reward", "terminated", "truncated", "next_obs", "acted")})


def n_step_transitions(window: RawStep, *, count: int, gamma: Any, n: int) -> Transition:
    """Transitions ``[count * E]`` for the first ``count`` steps of ``window`` (``[count + n - 1, E]``)."""
    returns, discounts, steps = jax.vmap(
        lambda r, te, tr: losses.n_step_returns(r, te, tr, gamma=gamma, n=n), in_axes=1, out_axes=1
    )(window.reward, window.terminated, window.truncated)  # [W, E] each
    length, num_envs = window.reward.shape
    last = jnp.arange(length)[:, None] + steps - 1  # [W, E]: the step whose successor bootstraps
    next_obs = jnp.take_along_axis(
        window.next_obs, last.reshape(last.shape + (1,) * (window.next_obs.ndim - 2)), axis=0
    )

    def head(x: Array) -> Array:  # the first ``count`` steps, flattened time-major to [count * E]
        return x[:count].reshape((count * num_envs,) + x.shape[2:])

    return Transition(obs=head(window.obs), action=head(window.action), reward=head(returns),
                      discount=head(discounts), next_obs=head(next_obs))


def stored_mask(window: RawStep, count: int) -> Array | None:
    """Which of the first ``count`` steps' items ``[count * E]`` to store (None: all): a batched
    env's autoreset steps and a finished agent's steps are none (an n-step window that starts at
    a valid step ends at the episode's end before them)."""
    return None if isinstance(window.acted, tuple) else window.acted[:count].reshape(-1)


def frame_items(window: RawStep, *, count: int, gamma: Any, n: int) -> FrameItems:
    """``n_step_transitions`` of a window of stacked frames (``[W, E, H, Wd, S]``), stored once
    (``buffers.frames``): references ``[count * E]`` whose obs / next_obs are step numbers
    counted from the window's first step, and the newest frame and depth (``buffers.frames``) of
    the window's ``W + 1`` observations (its steps' and the last step's successor)."""
    length, num_envs = window.reward.shape
    steps = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32)[:, None], (length, num_envs))
    refs = n_step_transitions(window._replace(obs=steps, next_obs=steps + 1), count=count, gamma=gamma, n=n)
    observations = jnp.concatenate([window.obs, window.next_obs[-1:]])  # [W + 1, E, H, Wd, S]
    same = jnp.all(observations == observations[..., :1], axis=(2, 3)).astype(jnp.int32)  # [W + 1, E, S]
    copies = jnp.sum(jnp.cumprod(same, axis=-1), axis=-1)  # the leading run of one frame (a reset's copies)
    return FrameItems(refs=FrameRef(transition=refs, env=jnp.tile(jnp.arange(num_envs, dtype=jnp.int32), count)),
                      frames=observations[..., -1], depth=observations.shape[-1] - copies + 1)


def sequence_items(window: RawStep, *, seq_len: int, burn_in: int, gamma: Any,
                   zero_init_states: bool) -> SequenceItem:
    """Sequence items (``SequenceItem`` of one-step ``Transition``s) of a recurrent actor's window.

    ``window`` is ``[burn_in + F, E]``: the last ``burn_in`` steps of the previous fragment (the
    burn-in of the first new slice) and ``F`` new steps. Each slice stores the recurrent state
    the actor had before its first step (none with ``zero_init_states``: the loss starts from
    zeros); ``first`` comes from the recorded memories. The n-step sums are the loss's job
    (``learner.make_sequence_loss``).
    """
    transitions = Transition(obs=window.obs, action=window.action, reward=window.reward,
                             discount=jnp.where(window.terminated, 0.0, gamma).astype(jnp.float32),
                             next_obs=window.next_obs)
    return buffers.timeslice(transitions, window.memory.first, seq_len=seq_len, burn_in=burn_in, start=burn_in,
                             states=None if zero_init_states else window.memory.state, zero_init_states=False)
