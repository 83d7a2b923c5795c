"""A learning smoke test in the default suite: a change that breaks learning cannot land. A small
budget and a modest bar (a random policy scores about 22 on CartPole-v1); the real thresholds
are the slow suite's (tests/test_learning.py)."""

import jax
import numpy as np
import pytest

from jaxdqn.plan import make_train
from tests.test_learning import tuned_config


@pytest.mark.parametrize("algo, timesteps, bar", [("dqn", 20_000, 100.0), ("simple_q", 30_000, 75.0)])
def test_cartpole_learns_past_a_modest_bar_on_2_of_2_seeds(algo, timesteps, bar):
    config = tuned_config(algo, "CartPole-v1").replace(total_timesteps=timesteps)
    _, reports = jax.jit(jax.vmap(make_train(config)))(jax.random.split(jax.random.key(0), 2))
    final = np.asarray(reports["episode_reward_mean"])[:, -1]
    assert (final >= bar).all(), final
