"""Atari through Gymnasium's ALE on the host (shell layer): RLlib 1.x's ``wrap_deepmind``,
written as Gymnasium wrappers, for ``env="gymnasium:<ALE id>"`` (``gymnasium:PongNoFrameskip-v4``,
``gymnasium:PongDeterministic-v4``, ``gymnasium:ALE/Pong-v5``).

The order and semantics are RLlib's: no-op starts (1 to ``noop_max``), for ``NoFrameskip`` ids
4 frames skipped with the last two max-pooled, episodic life (a lost life terminates; the next
reset is a no-op step unless the game is over), FIRE then action 2 after a reset for games with
FIRE, frames to ``dim x dim`` grayscale (area interpolation) and the newest ``framestack``
stacked, channels last. Two choices follow the compiled loop's ALE env (``jaxdqn.atari``) so
that both paths see the same frames: the grayscale frames are the ALE's own (RLlib converts RGB
with OpenCV's weights), and the episode the metrics score is the whole game (RLlib's monitor
sits beneath these wrappers: the same). Rewards stay the game's; the learner clips them.
"""

from __future__ import annotations

import re
from typing import Any

import gymnasium
import numpy as np

NOOP, FIRE = 0, 1


def registered(gym_id: str) -> tuple[str, dict[str, Any]]:
    """The id ale-py registers for ``gym_id`` and the options that make it that game:
    ``<Game>Deterministic-v4`` (gym's, gone from ale-py 0.9 on) is ``<Game>NoFrameskip-v4``
    with 4 frames per step and gym's 100k-step cap; other ids are themselves."""
    match = re.fullmatch(r"(\w+)Deterministic-v4", gym_id)
    if match is None:
        return gym_id, {}
    return f"{match.group(1)}NoFrameskip-v4", {"frameskip": 4, "max_episode_steps": 100_000}


def is_ale(gym_id: str) -> bool:
    """Whether Gymnasium's ``gym_id`` is an ALE game (registering ale-py's ids first)."""
    try:
        import ale_py
    except ImportError:
        return False
    gymnasium.register_envs(ale_py)
    spec = gymnasium.registry.get(registered(gym_id)[0])
    return spec is not None and str(spec.entry_point).startswith("ale_py")


def wrap_deepmind(gym_id: str, options: dict[str, Any]) -> Any:
    """Gymnasium's ALE game ``gym_id`` with RLlib's DeepMind preprocessing. ``options`` (a
    config's ``env_params``): ``img_height`` / ``img_width`` (RLlib's ``model.dim``, 84),
    ``stack_num`` (4), ``noop_max`` (30), ``episodic_life`` (True); the rest go to
    ``gymnasium.make``."""
    import ale_py

    gymnasium.register_envs(ale_py)  # in a worker process too
    options = dict(options)
    height, width = options.pop("img_height", 84), options.pop("img_width", 84)
    stack, noop_max = options.pop("stack_num", 4), options.pop("noop_max", 30)
    episodic = options.pop("episodic_life", True)
    ale_id, implied = registered(gym_id)
    env = gymnasium.make(ale_id, obs_type="grayscale", **{**implied, **options})
    env = NoopReset(env, noop_max)
    if "NoFrameskip" in gym_id:
        env = MaxAndSkip(env, 4)
    env = EpisodicLife(env, episodic)
    if "FIRE" in env.unwrapped.get_action_meanings():
        env = FireReset(env)
    return FrameStack(WarpFrame(env, height, width), stack)


class NoopReset(gymnasium.Wrapper):
    """RLlib's ``NoopResetEnv``: after a reset, 1 to ``noop_max`` no-ops (none for 0)."""

    def __init__(self, env: Any, noop_max: int) -> None:
        super().__init__(env)
        self.noop_max = noop_max

    def reset(self, **kwargs: Any) -> Any:
        obs, info = self.env.reset(**kwargs)
        if self.noop_max == 0:
            return obs, info
        for _ in range(int(self.unwrapped.np_random.integers(1, self.noop_max + 1))):
            obs, _, terminated, truncated, info = self.env.step(NOOP)
            if terminated or truncated:
                obs, info = self.env.reset()
        return obs, info


class MaxAndSkip(gymnasium.Wrapper):
    """RLlib's ``MaxAndSkipEnv``: each action repeated ``skip`` frames, the last two max-pooled."""

    def __init__(self, env: Any, skip: int) -> None:
        super().__init__(env)
        self.skip = skip

    def step(self, action: Any) -> Any:
        total, frames, terminated, truncated, info = 0.0, [], False, False, {}
        for i in range(self.skip):
            obs, reward, terminated, truncated, info = self.env.step(action)
            if i >= self.skip - 2:
                frames.append(obs)
            total += float(reward)
            if terminated or truncated:
                break
        return np.max(np.stack(frames), axis=0) if frames else obs, total, terminated, truncated, info


class EpisodicLife(gymnasium.Wrapper):
    """RLlib's ``EpisodicLifeEnv``: a lost life terminates; the reset after it is a no-op step
    unless the game is over (or the reset is seeded: a caller starting new games, as a restart
    or an evaluation does). ``info["game_over"]`` says which termination ended the game."""

    def __init__(self, env: Any, enabled: bool) -> None:
        super().__init__(env)
        self.enabled, self.lives, self.game_over = enabled, 0, True

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = terminated or truncated
        lives = self.unwrapped.ale.lives()
        lost = self.enabled and 0 < lives < self.lives
        self.lives = lives
        return obs, reward, terminated or lost, truncated, {**info, "game_over": self.game_over}

    def reset(self, **kwargs: Any) -> Any:
        if self.game_over or kwargs.get("seed") is not None:  # a seeded reset asks for a new game
            obs, info = self.env.reset(**kwargs)
        else:
            obs, _, _, _, info = self.env.step(NOOP)
        self.lives = self.unwrapped.ale.lives()
        return obs, info


class FireReset(gymnasium.Wrapper):
    """RLlib's ``FireResetEnv``: FIRE, then action 2, after every reset."""

    def reset(self, **kwargs: Any) -> Any:
        self.env.reset(**kwargs)
        obs, _, terminated, truncated, info = self.env.step(FIRE)
        if terminated or truncated:
            self.env.reset(**kwargs)
        obs, _, terminated, truncated, info = self.env.step(2)
        if terminated or truncated:
            obs, info = self.env.reset(**kwargs)
        return obs, info


class WarpFrame(gymnasium.Wrapper):
    """RLlib's ``WarpFrame`` on the ALE's grayscale frames: ``height x width`` by area."""

    def __init__(self, env: Any, height: int, width: int) -> None:
        super().__init__(env)
        self.size = (width, height)
        self.observation_space = gymnasium.spaces.Box(0, 255, (height, width), np.uint8)

    def _warp(self, frame: np.ndarray) -> np.ndarray:
        import cv2

        return cv2.resize(frame, self.size, interpolation=cv2.INTER_AREA)

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self._warp(obs), reward, terminated, truncated, info

    def reset(self, **kwargs: Any) -> Any:
        obs, info = self.env.reset(**kwargs)
        return self._warp(obs), info


class FrameStack(gymnasium.Wrapper):
    """RLlib's ``FrameStack``: the newest ``k`` frames, channels last; a reset fills it with
    copies of its first frame."""

    def __init__(self, env: Any, k: int) -> None:
        super().__init__(env)
        self.k = k
        height, width = env.observation_space.shape
        self.observation_space = gymnasium.spaces.Box(0, 255, (height, width, k), np.uint8)
        self.frames = np.zeros((height, width, k), np.uint8)

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.frames = np.concatenate([self.frames[..., 1:], obs[..., None]], axis=-1)
        return self.frames.copy(), reward, terminated, truncated, info

    def reset(self, **kwargs: Any) -> Any:
        obs, info = self.env.reset(**kwargs)
        self.frames = np.repeat(obs[..., None], self.k, axis=-1)
        return self.frames.copy(), info


__all__ = ["EpisodicLife", "FireReset", "FrameStack", "MaxAndSkip", "NoopReset", "WarpFrame", "is_ale",
           "wrap_deepmind"]
