"""Rollouts: ``E`` vmapped gymnax environments stepped for a fragment, turned into n-step
transitions that are exact across fragment boundaries.

The actor keeps the last ``n - 1`` raw steps of the previous fragment (``ActorState.pending``):
a fragment of ``F`` new steps is appended to them, and the first ``F`` steps of that window,
each of which now sees ``n - 1`` steps ahead, become transitions. The n-step return of a step
stops at its episode's end (``losses.n_step_returns``: ``gamma^k`` for the ``k`` steps taken, 0
after a termination), so a transition never mixes two episodes. ``prime`` fills ``pending``
once before the first fragment, so every fragment emits exactly ``F * E`` transitions (static
shapes).

Recurrent Q-networks: the actor also carries a ``Memory`` (the recurrent state and whether the
current observation starts an episode, where the network resets the state); the policy then is
``(params, obs, key, memory) -> (actions, recurrent state)`` and every ``RawStep`` records the
memory it acted from, so the store step can cut sequences that start from the right state.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxdqn import buffers, envs, losses
from jaxdqn.types import FrameItems, FrameRef, SequenceItem, Transition, episode_ended

Array = jax.Array


class RawStep(NamedTuple):
    """One environment step before n-step assembly; leaves ``[..., E, ...]``."""

    obs: Array
    action: Array  # int32
    reward: Array  # float32
    terminated: Array  # bool
    truncated: Array  # bool
    next_obs: Array  # the true successor (gymnax's final observation at an episode's end)
    memory: Any = ()  # recurrent actors: the Memory acted from (before the step); () otherwise
    # The step is a transition: multi-agent actors, the agent still played; batched (ALE) envs,
    # the step is not an autoreset one (``envs.EnvStep.valid``). () otherwise (every step is).
    acted: Any = ()


class Memory(NamedTuple):
    """A recurrent actor's memory, leaves ``[E, ...]``."""

    state: Any  # the recurrent state before acting on ``obs`` (reset by the network where ``first``)
    first: Array  # [E] bool: ``obs`` is an episode's first observation


class ActorState(NamedTuple):
    env_state: Any
    obs: Array  # [E, *obs], to act on next
    episode_return: Array  # [E] float32, of the running episodes
    episode_length: Array  # [E] int32
    pending: RawStep  # leaves [n - 1, E, ...]: the look-ahead carried into the next fragment
    memory: Any = ()  # recurrent actors: Memory, leaves [E, ...]; () for feed-forward ones


class Episodes(NamedTuple):
    """Episodes that ended during a fragment: ``done`` marks where, ``[F, E]``."""

    done: Array  # bool
    episode_return: Array  # float32, valid where done
    episode_length: Array  # int32, valid where done


Policy = Callable[..., Any]  # (params, obs [E, *obs], key) -> actions [E]; recurrent: see the module doc
View = Callable[[RawStep], RawStep]  # what the learner sees of a step (see ``make_view``)


def clip_reward(reward: Array, clip_rewards: Any) -> Array:
    """RLlib's ``clip_rewards``: None / False keep ``reward``; True its sign; ``c`` clips to
    ``[-c, c]``; ``(low, high)`` to ``[low, high]``."""
    if clip_rewards is None or clip_rewards is False:
        return reward
    if clip_rewards is True:
        return jnp.sign(reward)
    low, high = clip_rewards if isinstance(clip_rewards, tuple) else (-clip_rewards, clip_rewards)
    return jnp.clip(reward, low, high)


def make_view(*, clip_rewards: Any = None, no_done_at_end: bool = False) -> View | None:
    """The transform from an env step to the step the learner trains on: rewards clipped
    (``clip_rewards``) and, with ``no_done_at_end``, a termination turned into a truncation (it
    bootstraps; the episode still resets). Episode returns are the env's, unclipped. None when
    nothing changes."""
    if (clip_rewards is None or clip_rewards is False) and not no_done_at_end:
        return None

    def view(raw: RawStep) -> RawStep:
        raw = raw._replace(reward=clip_reward(raw.reward, clip_rewards))
        if no_done_at_end:
            raw = raw._replace(terminated=jnp.zeros_like(raw.terminated), truncated=raw.truncated | raw.terminated)
        return raw

    return view


def run_steps(spec: envs.EnvSpec, policy: Policy, params: Any, actor: ActorState, key: Array,
              num_steps: int, view: View | None = None) -> tuple[ActorState, RawStep, Episodes]:
    """Step every environment ``num_steps`` times with ``policy``; raw steps ``[T, E]`` as the
    learner sees them (``view``), episodes as the env scored them."""

    def body(actor: ActorState, key: Array):
        act_key, env_key = jax.random.split(key)
        recurrent = isinstance(actor.memory, Memory)
        if recurrent:
            action, state = policy(params, actor.obs, act_key, actor.memory)
        else:
            action = policy(params, actor.obs, act_key)
        out, env_state = envs.step(spec, env_key, actor.env_state, action)
        done = episode_ended(out)
        ret = actor.episode_return + out.reward
        length = actor.episode_length + (1 if out.valid is None else out.valid.astype(jnp.int32))
        raw = RawStep(obs=actor.obs, action=action.astype(jnp.int32), reward=out.reward,
                      terminated=out.terminated, truncated=out.truncated, next_obs=out.next_obs,
                      memory=actor.memory, acted=() if out.valid is None else out.valid)
        if view is not None:
            raw = view(raw)
        episodes = Episodes(done=done, episode_return=ret, episode_length=length)
        actor = actor._replace(env_state=env_state, obs=out.obs,
                               episode_return=jnp.where(done, 0.0, ret),
                               episode_length=jnp.where(done, 0, length),
                               memory=Memory(state=state, first=done) if recurrent else actor.memory)
        return actor, (raw, episodes)

    if num_steps == 1:  # no one-trip loop (see plan.repeat)
        actor, out = body(actor, key)
        raw, episodes = jax.tree_util.tree_map(lambda x: x[None], out)
    else:
        actor, (raw, episodes) = lax.scan(body, actor, jax.random.split(key, num_steps))
    return actor, raw, episodes


def init_pending(obs: Array, num_envs: int, n_step: int, memory: Any = ()) -> RawStep:
    """``n_step - 1`` zero steps (``obs`` ``[E, *obs]`` gives the shapes) until ``prime`` or, for
    sequences, the first fragment fills them; a recurrent actor's memories start with ``first``
    False, so the slicer masks these steps."""
    zeros = lambda x: jnp.zeros((n_step - 1,) + jnp.shape(x), jnp.asarray(x).dtype)  # noqa: E731
    return RawStep(
        obs=zeros(obs),
        action=jnp.zeros((n_step - 1, num_envs), jnp.int32),
        reward=jnp.zeros((n_step - 1, num_envs), jnp.float32),
        terminated=jnp.zeros((n_step - 1, num_envs), bool),
        truncated=jnp.zeros((n_step - 1, num_envs), bool),
        next_obs=zeros(obs),
        memory=jax.tree_util.tree_map(zeros, memory),
    )


def init(spec: envs.EnvSpec, key: Array, num_envs: int, n_step: int, *,
         recurrent_state: Any = None) -> ActorState:
    """Fresh episodes with ``init_pending`` look-ahead. ``recurrent_state`` (leaves ``[E, ...]``,
    the network's initial state) makes a recurrent actor: its memory starts there, every env at
    an episode's first observation."""
    obs, env_state = envs.reset(spec, key, num_envs)
    memory: Any = ()
    if recurrent_state is not None:
        memory = Memory(state=recurrent_state, first=jnp.ones((num_envs,), bool))
    pending = init_pending(obs, num_envs, n_step, memory)
    if envs.is_batched(spec):  # steps carry their validity (``RawStep.acted``)
        pending = pending._replace(acted=jnp.zeros((n_step - 1, num_envs), bool))
    return ActorState(env_state=env_state, obs=obs, episode_return=jnp.zeros((num_envs,), jnp.float32),
                      episode_length=jnp.zeros((num_envs,), jnp.int32), pending=pending, memory=memory)


def prime(spec: envs.EnvSpec, policy: Policy, params: Any, actor: ActorState, key: Array,
          view: View | None = None) -> tuple[ActorState, Episodes]:
    """Take the first ``n - 1`` steps into ``pending`` (no transitions yet)."""
    steps = actor.pending.action.shape[0]  # n - 1; a zero-length scan when n == 1
    actor, raw, episodes = run_steps(spec, policy, params, actor, key, steps, view)
    return actor._replace(pending=raw), episodes


def n_step_transitions(window: RawStep, *, count: int, gamma: float, n: int) -> Transition:
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


def extend_window(pending: RawStep, raw: RawStep) -> tuple[RawStep, RawStep]:
    """``(window, new pending)``: the new steps ``raw`` ``[F, E]`` after the carried ``pending``
    ``[P, E]``, and the window's last ``P`` steps, carried into the next fragment."""
    length = raw.action.shape[0]
    window = jax.tree_util.tree_map(lambda p, r: jnp.concatenate([p, r]), pending, raw)
    return window, jax.tree_util.tree_map(lambda w: w[length:], window)


def fragment(spec: envs.EnvSpec, policy: Policy, params: Any, actor: ActorState, key: Array, *,
             length: int, gamma: float, n: int, view: View | None = None,
             assemble: Callable[..., Any] = n_step_transitions) -> tuple[ActorState, Any, Episodes, Array | None]:
    """Run ``length`` steps per env; return ``length * E`` n-step transitions, the episodes, and
    which transitions to store ``[length * E]`` (None: all; a batched env's autoreset steps are
    none: an n-step window that starts at a valid step ends at the episode's end before them).
    ``assemble``: how the window becomes items (``frame_items``: stacked frames stored once)."""
    actor, raw, episodes = run_steps(spec, policy, params, actor, key, length, view)
    window, pending = extend_window(actor.pending, raw)
    transitions = assemble(window, count=length, gamma=gamma, n=n)
    mask = None if isinstance(window.acted, tuple) else window.acted[:length].reshape(-1)
    return actor._replace(pending=pending), transitions, episodes, mask


def frame_items(window: RawStep, *, count: int, gamma: float, n: int) -> FrameItems:
    """``n_step_transitions`` of a window of stacked frames (``[W, E, H, Wd, S]``), stored once
    (``buffers.frames``): references ``[count * E]`` whose obs / next_obs are step numbers
    counted from the window's first step, and the newest frame and episode depth of the window's
    ``W + 1`` observations (its steps' and the last step's successor)."""
    length, num_envs = window.reward.shape
    steps = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32)[:, None], (length, num_envs))
    refs = n_step_transitions(window._replace(obs=steps, next_obs=steps + 1), count=count, gamma=gamma, n=n)
    observations = jnp.concatenate([window.obs, window.next_obs[-1:]])  # [W + 1, E, H, Wd, S]
    blank = jnp.all(observations == 0, axis=(2, 3)).astype(jnp.int32)  # [W + 1, E, S]
    padding = jnp.sum(jnp.cumprod(blank, axis=-1), axis=-1)  # leading all-zero frames: the episode's padding
    return FrameItems(refs=FrameRef(transition=refs, env=jnp.tile(jnp.arange(num_envs, dtype=jnp.int32), count)),
                      frames=observations[..., -1], depth=observations.shape[-1] - padding)


def sequence_fragment(spec: envs.EnvSpec, policy: Policy, params: Any, actor: ActorState, key: Array, *,
                      length: int, seq_len: int, burn_in: int, gamma: float, zero_init_states: bool,
                      view: View | None = None) -> tuple[ActorState, SequenceItem, Episodes]:
    """A recurrent actor's ``fragment``: ``length`` steps per env cut into sequence items
    (``sequence_items``); the last ``burn_in`` steps stay pending as the next slice's burn-in."""
    actor, raw, episodes = run_steps(spec, policy, params, actor, key, length, view)
    window, pending = extend_window(actor.pending, raw)
    items = sequence_items(window, seq_len=seq_len, burn_in=burn_in, gamma=gamma, zero_init_states=zero_init_states)
    return actor._replace(pending=pending), items, episodes


def sequence_items(window: RawStep, *, seq_len: int, burn_in: int, gamma: float,
                   zero_init_states: bool) -> SequenceItem:
    """Sequence items (``SequenceItem`` of one-step ``Transition``s) of a recurrent actor's window.

    ``window`` is ``[burn_in + F, E]``: the last ``burn_in`` steps of the previous fragment (the
    burn-in of the first new slice) and ``F`` new steps. Each slice stores the recurrent state the
    actor had before its first step (none with ``zero_init_states``: the loss starts from zeros); ``first`` comes from
    the recorded memories. The n-step sums are the loss's job (``learner.make_sequence_loss``).
    """
    transitions = Transition(obs=window.obs, action=window.action, reward=window.reward,
                             discount=jnp.where(window.terminated, 0.0, gamma).astype(jnp.float32),
                             next_obs=window.next_obs)
    return buffers.timeslice(transitions, window.memory.first, seq_len=seq_len, burn_in=burn_in, start=burn_in,
                             states=None if zero_init_states else window.memory.state, zero_init_states=False)
