"""Atari 2600 games inside the compiled loop, through ale-py's vector environment (>= 0.12).

``AtariVectorEnv(...).xla()`` gives reset / step functions that run the ALE from inside
``jit`` and ``lax.scan`` (an XLA custom call on the CPU, also usable from a GPU program), with
DeepMind-style preprocessing done by the ALE itself: 84x84 grayscale, a stack of 4 frames, an
action repeated over 4 frames (max-pooled), up to 30 no-ops at reset, FIRE at reset.

Semantics that differ from a gymnax env, and how the plan handles them:

- The ALE holds the environments' state in C++; the carried state is a handle that orders the
  calls. One ``AtariEnv`` is one batch of ``num_envs`` games, so seeds cannot be vmapped (a seed
  is a process) and a checkpoint holds no game state (a restored run starts new episodes).
- Next-step autoreset: the step after a game's end ignores the action and returns the first
  observation of the next game (reward 0, neither terminated nor truncated). That step is no
  transition: ``EnvStep.valid`` is False there and the store step drops it (``buffers.add``'s
  mask); the scored episode (the game) ends there (``EnvStep.episode_end``), adding neither
  reward nor length.
- Episodic life (``episodic_life``, on by default, as RLlib's ``wrap_deepmind`` and DeepMind's
  protocol): each lost life terminates (no bootstrap across it) without ending the scored
  episode, the whole game (the ALE's ``life_loss_info``: it resets only after a game over). A
  termination is then a game over when the next step is the ALE's reset, recognised by its
  ``episode_frame_number`` falling back; a game shorter than its own reset (no-ops and FIRE, at
  most about 130 frames) would go unrecognised.
- Rewards are the game's; RLlib's ``clip_rewards`` (None: sign clipping for Atari, as RLlib's
  DeepMind preprocessing) clips what is stored, so returns stay the game's scores.

Env names: ``PongNoFrameskip-v4`` / ``PongDeterministic-v4`` (no sticky actions), ``ALE/Pong-v5``
(sticky actions 0.25, Machado et al.), or ``Pong-ALE``; ``env_params`` takes ALE's own options
(``repeat_action_probability``, ``full_action_space``, ``noop_max``, ``frameskip``,
``episodic_life``, ``img_height``, ``img_width``, ``stack_num``, ``max_num_frames_per_episode``).
"""

from __future__ import annotations

from typing import Any, Mapping

import jax
import jax.numpy as jnp
from flax import struct

from jaxdqn.config import atari_game
from jaxdqn.types import EnvStep

Array = jax.Array

# ALE's options that env_params may set, with the defaults of DeepMind's preprocessing.
OPTIONS = {"repeat_action_probability": 0.0, "full_action_space": False, "noop_max": 30, "frameskip": 4,
           "episodic_life": True, "img_height": 84, "img_width": 84, "stack_num": 4,
           "max_num_frames_per_episode": 108_000, "use_fire_reset": True}


def is_atari(name: Any) -> bool:
    """Whether ``name`` names an Atari game (``config.atari_game``)."""
    return atari_game(name) is not None


def default_options(name: str) -> dict[str, Any]:
    """The options a name stands for: ``-v5`` is sticky (0.25), ``-v4`` and ours are not."""
    options = dict(OPTIONS)
    if name.startswith("ALE/"):
        options["repeat_action_probability"] = 0.25
    return options


@struct.dataclass
class AtariState:
    """The ALE's handle (orders the calls) and the last step's outcome per game."""

    handle: Array  # uint8[8]
    done: Array  # bool [E]: the last step terminated or truncated
    frame: Array  # int32 [E]: the last step's episode_frame_number


class AtariEnv:
    """A batch of ``num_envs`` ALE games behind ``reset_all`` / ``step_all`` (``envs.EnvStep``)."""

    batched = True

    def __init__(self, name: str, num_envs: int, overrides: Mapping[str, Any] = ()):
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
        self.name, self.num_envs, self.options = name, num_envs, options
        self.episodic_life = bool(options["episodic_life"])
        ale_options = {k: v for k, v in options.items() if k != "episodic_life"}
        # The ALE's own episodic_life would also end the scored episode at each life.
        self.vector = AtariVectorEnv(game, num_envs, reward_clipping=False, grayscale=True, maxpool=True,
                                     episodic_life=False, life_loss_info=self.episodic_life, **ale_options)
        self.handle, self._reset, self._step = self.vector.xla()
        stack, height, width = self.vector.single_observation_space.shape
        self.obs_shape = (height, width, stack)
        self.num_actions = int(self.vector.single_action_space.n)

    def reset_all(self, keys: Array) -> tuple[Array, AtariState]:
        """Fresh episodes in every game, each seeded from its key ``[E]``: ``(obs [E, H, W, S]
        uint8, state)``."""
        seeds = (jax.random.key_data(keys)[:, 0] >> 1).astype(jnp.int32)  # 31 random bits of each key
        handle, (obs, info) = self._reset(self.handle, seed=seeds)
        return channels_last(obs), AtariState(handle=handle, done=jnp.zeros((self.num_envs,), bool),
                                              frame=info["episode_frame_number"].astype(jnp.int32))

    def step_all(self, state: AtariState, action: Array) -> tuple[Any, AtariState]:
        """One step of every game: ``(envs.EnvStep, state)``; see the module docstring for ``valid``."""
        handle, (obs, reward, terminated, truncated, info) = self._step(state.handle, action.astype(jnp.int32))
        obs = channels_last(obs)
        terminated, truncated = terminated.astype(bool), truncated.astype(bool)
        truncated = truncated & ~terminated
        frame = info["episode_frame_number"].astype(jnp.int32)
        # This step is the ALE's reset: after any end without episodic life; with it, after the
        # termination that was a game over (not a lost life), where the frame count restarts.
        reset = state.done & (frame < state.frame) if self.episodic_life else state.done
        step = EnvStep(obs=obs, next_obs=obs, reward=reward.astype(jnp.float32), terminated=terminated,
                       truncated=truncated, valid=~reset, episode_end=reset)
        return step, AtariState(handle=handle, done=terminated | truncated, frame=frame)


def channels_last(obs: Array) -> Array:
    """ALE's ``[E, stack, H, W]`` frames as images ``[E, H, W, stack]``."""
    return jnp.moveaxis(obs, 1, -1)
