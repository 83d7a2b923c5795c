"""EnvPool's batched envs on the host (shell layer): ``env="envpool:<task>"`` of
``jaxdqn.hostenv``, one batch of C++ envs stepped by EnvPool's own threads, seen as the
Gymnasium vector env the host loop steps."""

from __future__ import annotations

from typing import Any

import numpy as np

ENVPOOL = "envpool:"
# RLlib's wrap_deepmind, as EnvPool's Atari options: episodic life, 30 no-op starts, 4 frames
# skipped and stacked, 84x84 grayscale; rewards stay the game's (the learner clips them, as
# clip_rewards=None does for Atari) and episodes are whole games.
ENVPOOL_ATARI = {"episodic_life": True, "reward_clip": False, "noop_max": 30, "frame_skip": 4, "stack_num": 4,
                 "img_height": 84, "img_width": 84}


def _envpool() -> Any:
    try:
        import envpool
    except ImportError as e:  # the extra is missing
        raise ImportError('this env steps through EnvPool: pip install -e ".[envpool]"') from e
    return envpool


class PoolVector:
    """An EnvPool batch as the vector env ``HostEnvs`` steps, with Gymnasium's same-step
    autoreset: an env whose episode ended is reset at once (EnvPool would at its next step,
    ignoring that step's action), its last observation under ``info["final_obs"]``. Atari tasks:
    observations channels-last ``[84, 84, 4]`` (the conv stack's layout), a life lost terminates
    (``terminated``) while the scored episode is the whole game (``info["final_info"]["game_over"]``,
    as ``jaxdqn.hostatari``'s wrappers say it), and rewards are the game's (``info["reward"]``)."""

    def __init__(self, task: str, num_envs: int, num_threads: int, seed: int, options: dict[str, Any]) -> None:
        envpool = _envpool()
        self.task, self.num_envs, self.num_threads, self.options, self.seed = task, num_envs, num_threads, options, seed
        self.atari = task in envpool.list_all_envs() and "stack_num" in envpool.make_spec(task).config._fields
        if self.atari:
            self.options = {**ENVPOOL_ATARI, **options}
        self.pool = self._make(seed)
        space = self.pool.observation_space
        if self.atari:  # channels-last (a Box of the pool's own Gymnasium)
            space = type(space)(0, 255, space.shape[1:] + space.shape[:1], np.uint8)
        self.single_observation_space = self.observation_space = space
        self.single_action_space = self.pool.action_space

    def _make(self, seed: int) -> Any:
        return _envpool().make_gymnasium(self.task, num_envs=self.num_envs, batch_size=self.num_envs,
                                         num_threads=self.num_threads, seed=seed, **self.options)

    def _obs(self, obs: np.ndarray) -> np.ndarray:
        return np.moveaxis(obs, 1, -1) if self.atari else obs

    def reset(self, seed: int | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        if seed is not None and seed != self.seed:  # EnvPool seeds its envs when it makes them
            self.pool.close()
            self.pool, self.seed = self._make(seed), seed
        obs, _ = self.pool.reset()
        return self._obs(obs), {}

    def step(self, action: np.ndarray) -> tuple[Any, ...]:
        obs, reward, terminated, truncated, info = self.pool.step(np.asarray(action, np.int32))
        obs, terminated, truncated = self._obs(obs), np.asarray(terminated, bool), np.asarray(truncated, bool)
        ended = (np.asarray(info["terminated"], bool) if self.atari else terminated) | truncated
        out: dict[str, Any] = {}
        if self.atari:  # a lost life terminates; the game goes on unless it is over
            reward = info["reward"]
            out["final_info"] = {"game_over": np.asarray(info["terminated"], bool), "_game_over": terminated | truncated}
        if ended.any():
            where = np.flatnonzero(ended).astype(np.int32)
            out.update(_final_obs=ended, final_obs=obs.copy())
            obs = obs.copy()
            obs[where] = self._obs(self.pool.reset(where)[0])
        return obs, reward, terminated, truncated, out

    def close(self, **kwargs: Any) -> None:
        self.pool.close()


__all__ = ["ENVPOOL", "ENVPOOL_ATARI", "PoolVector"]
