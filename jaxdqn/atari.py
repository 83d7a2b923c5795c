"""Atari 2600 games inside the compiled loop, through ale-py's vector environment (>= 0.12).

``AtariVectorEnv(...).xla()`` gives reset / step functions that run the ALE from inside
``jit`` and ``lax.scan`` (an XLA custom call on the CPU, also usable from a GPU program). The
preprocessing is RLlib 1.x's ``wrap_deepmind`` per gym id: the ALE skips ``frameskip`` frames
per action, max-pooling the last two only where RLlib's ``MaxAndSkipEnv`` does (``NoFrameskip``
ids and ours; ``Deterministic-v4`` and ``-v5`` return the last frame), and resizes to 84x84
grayscale; the rest is done here, in the traced step:

- No-op starts (``NoopResetEnv``): 1 to ``noop_max`` no-ops of the env beneath the frame skip,
  i.e. raw frames for ``NoFrameskip`` ids (drawn by the ALE: 0 to ``noop_max``, one more start
  than RLlib's 1 to ``noop_max``) and ``frameskip``-frame steps for the others (drawn here,
  1 to ``noop_max``, exactly RLlib's).
- FIRE (``FireResetEnv``, games whose action 1 is FIRE): after every reset FIRE, then action
  2; with episodic life also after every lost life, which first takes one no-op step (RLlib's
  ``EpisodicLifeEnv.reset``), so Breakout-type games relaunch the ball.
- The frame stack (``FrameStack``): the newest ``stack_num`` frames, a reset filling it with
  copies of its first frame (after a lost life too, as RLlib's stack resets there).

These reset steps are taken in the loop (actions overridden, see ``program_action``): each is
no transition (``EnvStep.valid`` False: not stored) and adds no length, but its reward counts in
the game's score (RLlib's ``MonitorEnv`` sits beneath these wrappers).

Semantics that differ from a gymnax env, and how the plan handles them:

- The ALE holds the environments' state in C++; the carried state is a handle that orders the
  calls, and a checkpoint holds no game state (a restored run starts new episodes). One
  ``AtariEnv`` is one batch of ``runs x num_envs`` games: the ALE's calls are not vmappable, so
  ``runs`` vmapped runs (seeds, a sweep's trials) step their ``num_envs`` games each in one call
  of the whole batch (``over_runs``: run ``r`` plays games ``r * num_envs`` to
  ``(r + 1) * num_envs - 1``; a game's frames depend only on its own seed and actions, so a run
  plays what it would play alone). Unvmapped, ``runs`` is 1.
- Next-step autoreset: the step after a game's end ignores the action and returns the first
  observation of the next game (reward 0, neither terminated nor truncated). That step is no
  transition; the scored episode (the game) ends there (``EnvStep.episode_end``).
- Episodic life (``episodic_life``, on by default, as RLlib's ``wrap_deepmind`` and DeepMind's
  protocol): each lost life terminates (no bootstrap across it) without ending the scored
  episode, the whole game (the ALE's ``life_loss_info``: it resets only after a game over). A
  termination is then a game over when the next step is the ALE's reset, recognised by its
  ``episode_frame_number`` falling back; a game shorter than its own reset (no-ops at most 30
  frames) would go unrecognised.
- Rewards are the game's; RLlib's ``clip_rewards`` (None: sign clipping for Atari, as RLlib's
  DeepMind preprocessing) clips what is stored, so returns stay the game's scores.
- The episode cap is gym's per id: 400k frames for ``-v4`` ids, 108k for ``-v5`` and ours.

Env names: ``PongNoFrameskip-v4`` / ``PongDeterministic-v4`` (no sticky actions), ``ALE/Pong-v5``
(sticky actions 0.25, Machado et al.), or ``Pong-ALE`` (DeepMind's: as ``NoFrameskip-v4``, capped at
108k frames); ``env_params`` takes the options in ``OPTIONS`` (the ALE's names).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Mapping

import jax
import jax.numpy as jnp
from flax import struct

from jaxdqn.config import atari_game
from jaxdqn.types import EnvStep

Array = jax.Array

# The options env_params may set. None: decided by the id (``default_options``).
OPTIONS = {"repeat_action_probability": 0.0, "full_action_space": False, "noop_max": 30, "frameskip": 4,
           "maxpool": None, "episodic_life": True, "img_height": 84, "img_width": 84, "stack_num": 4,
           "max_num_frames_per_episode": None, "use_fire_reset": True}

NOOP, FIRE = 0, 1


def is_atari(name: Any) -> bool:
    """Whether ``name`` names an Atari game (``config.atari_game``)."""
    return atari_game(name) is not None


def raw_frame_noops(name: str) -> bool:
    """Whether RLlib's no-ops of ``name`` are raw frames: ``MaxAndSkipEnv`` ids (``NoFrameskip``,
    and ours); other ids skip frames inside the env, so a no-op is a ``frameskip``-frame step."""
    return "NoFrameskip" in name or name.endswith("-ALE")


def default_options(name: str) -> dict[str, Any]:
    """The options a name stands for: ``-v5`` is sticky (0.25), ``-v4`` and ours are not; max
    pooling where RLlib skips frames itself; gym's episode cap (``-v4``: 400k frames)."""
    options = dict(OPTIONS)
    if name.startswith("ALE/"):
        options["repeat_action_probability"] = 0.25
    options["maxpool"] = raw_frame_noops(name)
    options["max_num_frames_per_episode"] = 400_000 if name.endswith("-v4") else 108_000
    return options


@struct.dataclass
class AtariState:
    """The ALE's handle (orders the calls), the last step's outcome per game, the reset steps
    still to take and the frame stack."""

    handle: Array  # uint8[8]
    done: Array  # bool [E]: the last step terminated or truncated
    frame: Array  # int32 [E]: the last step's episode_frame_number
    forced: Array  # int32 [E]: reset steps (no-ops, FIRE, 2) still to take before the agent acts
    stack: Array  # uint8 [E, H, W, S]: the newest S frames


class AtariEnv:
    """A batch of ``num_envs`` ALE games behind ``reset_all`` / ``step_all`` (``envs.EnvStep``)."""

    batched = True

    def __init__(self, name: str, num_envs: int, overrides: Mapping[str, Any] = (), runs: int = 1):
        game = atari_game(name)
        try:
            import ale_py
            from ale_py.vector_env import AtariVectorEnv
        except ImportError:
            raise ValueError(f"env={name!r} is an Atari game: it needs ale-py >= 0.12 "
                             f"(pip install 'jaxdqn[atari]')") from None
        if game not in ale_py.roms.get_all_rom_ids():
            raise ValueError(f"env={name!r}: ALE has no game {game!r}; games: {ale_py.roms.get_all_rom_ids()}")
        options = default_options(name)
        unknown = sorted(set(overrides) - set(options))
        if unknown:
            raise ValueError(f"env_params {unknown} are not ALE options; valid: {sorted(options)}")
        options.update(overrides)
        for key in ("noop_max", "stack_num", "frameskip"):
            if not isinstance(options[key], int) or isinstance(options[key], bool) or options[key] < (key != "noop_max"):
                raise ValueError(f"env_params {key}={options[key]!r} must be an int >= {int(key != 'noop_max')}")
        self.name, self.num_envs, self.options, self.runs = name, num_envs, options, runs
        self.episodic_life = bool(options["episodic_life"])
        self.stack_num = options["stack_num"]
        # No-ops: the ALE draws raw frames (0..noop_max); steps of the skipped env are taken here.
        self.noop_steps = 0 if raw_frame_noops(name) else options["noop_max"]
        ale_options = {k: v for k, v in options.items() if k not in ("episodic_life", "use_fire_reset", "stack_num",
                                                                     "noop_max")}
        # The ALE's own episodic_life would also end the scored episode at each life; its FIRE
        # reset presses FIRE before the no-ops and never after a lost life; its stack starts with
        # zeros: those three are done here instead.
        self.vector = AtariVectorEnv(game, runs * num_envs, reward_clipping=False, grayscale=True, episodic_life=False,
                                     life_loss_info=self.episodic_life, use_fire_reset=False, stack_num=1,
                                     noop_max=options["noop_max"] + 1 if raw_frame_noops(name) else 0,
                                     **ale_options)
        actions = self.vector.ale.get_action_set()
        # RLlib's FireResetEnv: games whose action 1 is FIRE (it requires 3 actions).
        self.fire = bool(options["use_fire_reset"]) and len(actions) >= 3 and actions[1] == ale_py.Action.FIRE
        self.handle, reset, step = self.vector.xla()
        self._reset = over_runs(lambda handle, seeds: reset(handle, seed=seeds), runs, num_envs, name)
        self._step = over_runs(step, runs, num_envs, name)
        _, height, width = self.vector.single_observation_space.shape
        self.obs_shape = (height, width, self.stack_num)
        self.num_actions = int(self.vector.single_action_space.n)

    def start_steps(self, keys: Array) -> Array:
        """The reset steps of a new game, per key ``[E]``: RLlib's no-op steps (1..noop_max, ids
        that skip frames inside the env) and FIRE, 2."""
        fire = 2 if self.fire else 0
        if not self.noop_steps:
            return jnp.full(keys.shape, fire, jnp.int32)
        return jax.vmap(lambda k: jax.random.randint(k, (), 1, self.noop_steps + 1))(keys) + fire

    def reset_all(self, keys: Array) -> tuple[Array, AtariState]:
        """Fresh episodes in every game, each seeded from its key ``[E]``: ``(obs [E, H, W, S]
        uint8, state)``; the games' first steps are their reset steps (``start_steps``)."""
        seeds = (jax.random.key_data(keys)[:, 0] >> 1).astype(jnp.int32)  # 31 random bits of each key
        handle, (frames, info) = self._reset(self.handle, seeds)
        stack = refilled(frames[:, -1], self.stack_num)
        return stack, AtariState(handle=handle, done=jnp.zeros((self.num_envs,), bool),
                                 frame=info["episode_frame_number"].astype(jnp.int32),
                                 forced=self.start_steps(keys), stack=stack)

    def step_all(self, keys: Array, state: AtariState, action: Array) -> tuple[Any, AtariState]:
        """One step of every game, keys ``[E]`` (for no-op starts): ``(envs.EnvStep, state)``; see
        the module docstring for ``valid``."""
        forced = state.forced > 0
        action = jnp.where(forced, program_action(state.forced, self.fire), action.astype(jnp.int32))
        handle, (frames, reward, terminated, truncated, info) = self._step(state.handle, action)
        terminated, truncated = terminated.astype(bool), truncated.astype(bool)
        truncated = truncated & ~terminated
        frame = info["episode_frame_number"].astype(jnp.int32)
        # This step is the ALE's reset: after any end without episodic life; with it, after the
        # termination that was a game over (not a lost life), where the frame count restarts.
        reset = state.done & (frame < state.frame) if self.episodic_life else state.done
        ended = terminated | truncated
        life_lost = terminated & (info["lives"] > 0) if self.episodic_life else jnp.zeros_like(ended)
        after_life = 1 + (2 if self.fire else 0)  # EpisodicLifeEnv's no-op step, then FIRE, 2
        remaining = jnp.where(reset, self.start_steps(keys),
                              jnp.where(ended, jnp.where(life_lost, after_life, 0), jnp.maximum(state.forced - 1, 0)))
        first = (reset | forced) & (remaining == 0)  # the obs the agent acts on first after a reset
        stack = jnp.where(first[:, None, None, None], refilled(frames[:, -1], self.stack_num),
                          jnp.concatenate([state.stack[..., 1:], frames[:, -1, :, :, None]], axis=-1))
        step = EnvStep(obs=stack, next_obs=stack, reward=reward.astype(jnp.float32), terminated=terminated,
                       truncated=truncated, valid=~reset & ~forced, episode_end=reset)
        return step, AtariState(handle=handle, done=ended, frame=frame, forced=remaining, stack=stack)


def over_runs(call: Callable[[Array, Array], Any], runs: int, num_envs: int, name: str
              ) -> Callable[[Array, Array], Any]:
    """``call(handle, x [runs * E]) -> (handle, outputs [runs * E, ...])``, one call of an ALE
    batch, as each of ``runs`` vmapped runs sees it: ``(handle, x [E]) -> (handle, outputs [E,
    ...])``. Under a vmap of ``runs``, the runs' ``x [runs, E]`` are one call's ``[runs * E]`` (the
    ALE's own ``vmap_method`` would call the batch once per run, each time with every game);
    unvmapped (``runs`` must then be 1) it is ``call``."""

    @jax.custom_batching.custom_vmap
    def one_run(handle: Array, x: Array) -> Any:
        if runs == 1:
            return call(handle, x)
        # Traced only for the output shapes; executed only where a caller forgot the vmap.
        handle_shape, shapes = jax.eval_shape(lambda h, x: call(h, jnp.tile(x, (runs,) + (1,) * (x.ndim - 1))),
                                              handle, x)
        shapes = handle_shape, jax.tree_util.tree_map(
            lambda s: jax.ShapeDtypeStruct((num_envs,) + s.shape[1:], s.dtype), shapes)
        return jax.pure_callback(functools.partial(unvmapped_call, name, runs), shapes, handle, x)

    @one_run.def_vmap
    def all_runs(axis_size: int, in_batched: list[bool], handle: Array, x: Array) -> tuple[Any, Any]:
        if axis_size != runs:
            raise ValueError(f"this {name} batch holds the games of {runs} vmapped runs, not {axis_size}")
        handle_batched, x_batched = in_batched
        handle = handle[0] if handle_batched else handle  # one batch: every run carries the same handle
        x = x if x_batched else jnp.broadcast_to(x, (runs,) + x.shape)
        handle, outputs = call(handle, x.reshape((runs * num_envs,) + x.shape[2:]))
        outputs = jax.tree_util.tree_map(lambda y: y.reshape((runs, num_envs) + y.shape[1:]), outputs)
        handle = jnp.broadcast_to(handle, (runs,) + handle.shape)
        return (handle, outputs), jax.tree_util.tree_map(lambda _: True, (handle, outputs))

    return one_run


def unvmapped_call(name: str, runs: int, *args: Any) -> Any:
    raise ValueError(f"this {name} batch holds the games of {runs} runs: step it under jax.vmap over the {runs} runs")


def program_action(remaining: Array, fire: bool) -> Array:
    """The action of a reset step with ``remaining`` steps left (this one included): no-ops,
    then FIRE and action 2 (RLlib's ``FireResetEnv``) where the game has FIRE."""
    if not fire:
        return jnp.full_like(remaining, NOOP)
    return jnp.where(remaining == 2, FIRE, jnp.where(remaining == 1, 2, NOOP))


def refilled(frame: Array, stack: int) -> Array:
    """A new stack ``[E, H, W, S]`` of ``stack`` copies of ``frame`` ``[E, H, W]`` (RLlib's
    ``FrameStack.reset``)."""
    return jnp.repeat(frame[..., None], stack, axis=-1)
