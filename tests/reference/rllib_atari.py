"""A plain-Python twin of RLlib 1.x's ``wrap_deepmind`` (rllib/env/wrappers/atari_wrappers.py)
over the raw ALE, for checking ``jaxdqn.atari`` against it: ``NoopResetEnv`` (no-op counts
given, not drawn), ``MaxAndSkipEnv``, ``EpisodicLifeEnv``, ``FireResetEnv`` and ``FrameStack``, at the
ALE's own screen size (no ``WarpFrame`` resize) in the ALE's grayscale."""

from __future__ import annotations

import numpy as np


class RawAtari:
    """gym's ``NoFrameskip-v4`` env (one frame per step; ``Deterministic-v4``: ``frameskip`` 4,
    rewards summed, the last frame), grayscale screens."""

    def __init__(self, game: str, seed: int, frameskip: int = 1):
        self.frameskip = frameskip
        import ale_py
        self.ale = ale_py.ALEInterface()
        self.ale.setLoggerMode(ale_py.LoggerMode.Error)
        self.ale.setInt("random_seed", seed)
        self.ale.setFloat("repeat_action_probability", 0.0)
        self.ale.loadROM(ale_py.roms.get_rom_path(game))
        self.actions = self.ale.getMinimalActionSet()
        self.score = 0.0  # MonitorEnv: the raw rewards of the running game

    def reset(self) -> np.ndarray:
        self.ale.reset_game()
        self.score = 0.0
        return self.ale.getScreenGrayscale()

    def step(self, action: int):
        reward = sum(self.ale.act(self.actions[action]) for _ in range(self.frameskip))
        self.score += reward
        return self.ale.getScreenGrayscale(), reward, self.ale.game_over()


class MaxAndSkip:
    def __init__(self, env, skip: int = 4):
        self.env, self.skip = env, skip
        self.buffer = None

    def reset(self):
        obs = self.env.reset()
        self.buffer = np.zeros((2,) + obs.shape, obs.dtype)
        return obs

    def step(self, action: int):
        total, done = 0.0, False
        for i in range(self.skip):
            obs, reward, done = self.env.step(action)
            if i == self.skip - 2:
                self.buffer[0] = obs
            if i == self.skip - 1:
                self.buffer[1] = obs
            total += reward
            if done:
                break
        return self.buffer.max(axis=0), total, done


class NoopReset:
    """``noops``: the number of no-ops of each reset in turn (RLlib draws 1..30)."""

    def __init__(self, env, noops):
        self.env, self.noops = env, iter(noops)

    def reset(self):
        obs = self.env.reset()
        for _ in range(next(self.noops)):
            obs, _, done = self.env.step(0)
            if done:
                obs = self.env.reset()
        return obs

    def step(self, action):
        return self.env.step(action)


class EpisodicLife:
    def __init__(self, env, ale):
        self.env, self.ale = env, ale
        self.lives, self.was_real_done = 0, True

    def step(self, action):
        obs, reward, done = self.env.step(action)
        self.was_real_done = done
        lives = self.ale.lives()
        if 0 < lives < self.lives:
            done = True
        self.lives = lives
        return obs, reward, done

    def reset(self):
        if self.was_real_done:
            obs = self.env.reset()
        else:
            obs, _, _ = self.env.step(0)
        self.lives = self.ale.lives()
        return obs


class FireReset:
    def __init__(self, env):
        self.env = env

    def reset(self):
        self.env.reset()
        obs, _, done = self.env.step(1)
        if done:
            self.env.reset()
        obs, _, done = self.env.step(2)
        if done:
            self.env.reset()
        return obs

    def step(self, action):
        return self.env.step(action)


class FrameStack:
    def __init__(self, env, k: int = 4):
        self.env, self.k, self.frames = env, k, []

    def reset(self):
        obs = self.env.reset()
        self.frames = [obs] * self.k
        return np.stack(self.frames, axis=-1)

    def step(self, action):
        obs, reward, done = self.env.step(action)
        self.frames = self.frames[1:] + [obs]
        return np.stack(self.frames, axis=-1), reward, done


def wrap_deepmind(game: str, seed: int, *, noops=None, deterministic: bool = False):
    """RLlib's stack for a ``NoFrameskip`` id, or a ``Deterministic`` one (frames skipped
    inside the env, no ``MaxAndSkipEnv``); ``noops``: the no-op count of each reset in turn
    (default none). Returns ``(env, raw)``: the outermost wrapper and the raw env (its ``score``)."""
    raw = RawAtari(game, seed, frameskip=4 if deterministic else 1)
    env = NoopReset(raw, noops if noops is not None else iter(int, 1))
    env = EpisodicLife(env if deterministic else MaxAndSkip(env), raw.ale)
    if len(raw.actions) >= 3 and raw.actions[1].name == "FIRE":
        env = FireReset(env)
    return FrameStack(env), raw
