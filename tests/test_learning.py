"""Learning thresholds (slow suite: ``python -m pytest -m slow``), 10 seeds each, 100k env steps.

Through ``make_train`` (vmapped seeds in one program) and through the ``jaxdqn`` command with
the shipped tuned examples; RLlib's own CartPole tuned examples run unchanged.
"""

import dataclasses
import json
import pathlib

import jax
import numpy as np
import pytest

from jaxdqn import cli
from jaxdqn.cli import documents
from jaxdqn.config import from_dict
from jaxdqn.plan import make_plan, make_train

pytestmark = pytest.mark.slow
DATA = pathlib.Path(__file__).parent / "data" / "rllib"
CASES = [("dqn", "CartPole-v1", 475.0), ("simple_q", "CartPole-v1", 400.0),
         ("dqn", "Acrobot-v1", -100.0)]


def tuned_config(algo, env):
    name, document = documents.tuned_example(algo, env)
    algo, config, _, _ = documents.document_to_spec(document, name)
    return from_dict(config, algo)


@pytest.mark.parametrize("algo, env, threshold", CASES)
def test_make_train_learns_on_8_of_10_seeds(algo, env, threshold):
    config = tuned_config(algo, env)
    assert config.total_timesteps == 100_000
    _, reports = jax.jit(jax.vmap(make_train(config)))(jax.random.split(jax.random.key(1), 10))
    final = np.asarray(reports["episode_reward_mean"])[:, -1]
    assert int(np.sum(final >= threshold)) >= 8, final


@pytest.mark.parametrize("algo, env, threshold", CASES)
def test_the_command_learns_on_8_of_10_seeds(tmp_path, algo, env, threshold):
    assert cli.main(["train", "--seeds", "10", "--algo", algo, "--env", env, "--out", str(tmp_path), "--quiet"]) == 0
    final = []
    for seed in range(10):
        last = (tmp_path / f"seed_{seed}" / "result.json").read_text().splitlines()[-1]
        result = json.loads(last)
        assert result["timesteps_total"] >= 100_000
        final.append(result["episode_reward_mean"])
    assert sum(r >= threshold for r in final) >= 8, final


@pytest.mark.parametrize("name", ["cartpole-dqn.yaml", "cartpole-simpleq.yaml"])
def test_rllib_tuned_cartpole_examples_reach_150(tmp_path, name):
    assert cli.main(["train", "--config", str(DATA / name), "--out", str(tmp_path), "--quiet"]) == 0
    results = [json.loads(line) for line in (tmp_path / "result.json").read_text().splitlines()]
    assert results[-1]["episode_reward_mean"] >= 150, [r["episode_reward_mean"] for r in results]
    assert results[-1]["timesteps_total"] <= 50_000 + results[-1]["timesteps_this_iter"]


def greedy_returns_of_10_seeds(config):
    """Mean greedy return (``evaluation_num_episodes`` episodes) of 10 vmapped seeds after training."""
    plan = make_plan(config)

    def run(key):
        final, _ = plan.train(key)
        return plan.evaluate({pid: ls.params for pid, ls in final.learner.items()}, jax.random.fold_in(key, 7)).episode_return.mean()

    return np.asarray(jax.jit(jax.vmap(run))(jax.random.split(jax.random.key(1), 10)))


def test_recurrent_dqn_remembers_where_a_feed_forward_one_cannot():
    """MemoryChain (context shown only at the start, asked for 10 steps later): the LSTM with
    sequence replay reaches a greedy return >= 0.9 on 8 of 10 seeds; the same DQN without the LSTM
    stays at chance (|mean| < 0.5) on every seed."""
    config = tuned_config("dqn", "MemoryChain-bsuite")
    assert config.model.use_lstm and config.env_params == (("memory_length", 10),)
    recurrent = greedy_returns_of_10_seeds(config)
    assert int(np.sum(recurrent >= 0.9)) >= 8, recurrent
    feed_forward = config.replace(model=dataclasses.replace(config.model, use_lstm=False), burn_in=0,
                                  train_batch_size=128)
    chance = greedy_returns_of_10_seeds(feed_forward)
    assert np.all(np.abs(chance) < 0.5), chance


@pytest.mark.parametrize("replay_mode, threshold", [("independent", 150.0), ("lockstep", 40.0)])
def test_multi_agent_cartpole_policies_learn_on_8_of_10_seeds(replay_mode, threshold):
    """The shipped multi-agent example (two policies, prioritized independent replay) reaches a
    policy_reward_mean of 150 per policy in 50k env steps; lockstep replay (uniform, as RLlib
    requires) learns too but less steadily on this env (measured 9 of 10 seeds >= 49, one at 11.6),
    so its bar is lower: 40, against about 11 for random play."""
    from jaxdqn.plan import make_plan

    config = tuned_config("dqn", "MultiCartPole-v1")
    if replay_mode == "lockstep":
        config = config.replace(prioritized_replay=False, env_params={**dict(config.env_params), "done_when": "any"},
                                multiagent=dataclasses.replace(config.multiagent, replay_mode="lockstep"))
    _, reports = jax.jit(jax.vmap(make_plan(config).train))(jax.random.split(jax.random.key(1), 10))
    for pid in ("p0", "p1"):
        final = np.asarray(reports[f"policy_reward_mean/{pid}"])[:, -1]
        assert int(np.sum(final >= threshold)) >= 8, (pid, final)


def test_lunarlander_tuned_example_reaches_200_within_500k_on_8_of_10_seeds(tmp_path):
    """Gymnasium's LunarLander-v3 on the host, the shipped tuned example (`jaxdqn train --env
    LunarLander-v3`): one run per seed (host envs are not vmapped); the run stops at
    episode_reward_mean >= 200 (the last 100 training episodes), or at 500k env steps."""
    best = []
    for seed in range(10):
        out = tmp_path / f"seed_{seed}"
        assert cli.main(["train", "--env", "LunarLander-v3", "--set", f"seed={seed}", "--out", str(out), "--quiet"]) == 0
        results = [json.loads(line) for line in (out / "result.json").read_text().splitlines()]
        assert results[-1]["timesteps_total"] <= 500_000 + results[-1]["timesteps_this_iter"]
        best.append(max(r["episode_reward_mean"] for r in results))
    assert sum(b >= 200 for b in best) >= 8, best


def test_minigrid_tuned_example_solves_empty_6x6_on_5_of_5_seeds(tmp_path):
    """MiniGrid's Empty-6x6 on the host, the shipped tuned example: every seed reaches
    episode_reward_mean >= 0.9 (the shortest path pays 0.956) within its 200k env steps."""
    best = []
    for seed in range(5):
        out = tmp_path / f"seed_{seed}"
        assert cli.main(["train", "--env", "minigrid:MiniGrid-Empty-6x6-v0", "--set", f"seed={seed}", "--out", str(out),
                         "--quiet"]) == 0
        results = [json.loads(line) for line in (out / "result.json").read_text().splitlines()]
        best.append(max(r["episode_reward_mean"] for r in results))
    assert all(b >= 0.9 for b in best), best
