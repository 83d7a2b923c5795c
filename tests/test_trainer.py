"""The Trainer: RLlib's result dict, checkpoints that resume bit for bit, atomic saves, refusals."""

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

from jaxdqn import DQNConfig, ModelConfig, checkpoint
from jaxdqn.plan import make_plan
from jaxdqn.trainer import Trainer

TINY = dict(buffer_size=2000, learning_starts=64, num_envs_per_worker=4, timesteps_per_iteration=256,
            total_timesteps=2048, model=ModelConfig(fcnet_hiddens=(16,)), hiddens=(16,), train_batch_size=16,
            evaluation_num_episodes=3)
CONFIG = DQNConfig(**TINY)  # prioritized, double, dueling: priorities and both networks are in the state
STATS = ("loss", "mean_q", "min_q", "max_q", "mean_td_error", "cur_lr", "grad_gnorm")
EPISODES = ("episode_reward_mean", "episode_reward_min", "episode_reward_max", "episode_len_mean",
            "episodes_this_iter", "episodes_total", "timesteps_total")


def comparable(result):
    """What must match between two runs of the same state: episodes, counters, learner stats."""
    out = {k: result[k] for k in EPISODES + ("training_iteration",)}
    out.update({k: result["info"][k] for k in ("num_steps_sampled", "num_steps_trained", "num_target_updates")})
    out.update(result["info"]["learner"]["default_policy"]["learner_stats"])
    return out


def run_child(code: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """Python in a fresh process (same environment: the forced devices of conftest included)."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, env=os.environ.copy())


def test_train_returns_rllib_results_equal_to_the_plan_chunk():
    trainer = Trainer(CONFIG)
    results = [trainer.train() for _ in range(2)]
    plan = make_plan(CONFIG)
    state = jax.jit(plan.init)(jax.random.split(jax.random.key(CONFIG.seed), 1)[0])  # one run = seed 0
    chunk = jax.jit(plan.chunk)
    for i, result in enumerate(results, start=1):
        state, report = chunk(state)
        assert result["training_iteration"] == i
        assert result["episode_reward_mean"] == pytest.approx(float(report["episode_reward_mean"]), nan_ok=True)
        assert result["timesteps_total"] == int(report["num_steps_sampled"])
        stats = result["info"]["learner"]["default_policy"]["learner_stats"]
        assert set(stats) == set(STATS)
        assert stats["mean_q"] == float(report["learner/default_policy/mean_q"])
        assert result["info"]["num_target_updates"] == int(report["num_target_updates"])
        # RLlib's policy_reward_* leave out default_policy: {} for a single agent
        assert result["policy_reward_mean"] == result["policy_reward_min"] == result["policy_reward_max"] == {}
    assert list(trainer.params) == ["default_policy"] == list(trainer.get_weights(["default_policy"]))
    with pytest.raises(ValueError, match="policies=\\['p9'\\]"):
        trainer.get_weights(["p9"])
    assert results[1]["timesteps_total"] - results[0]["timesteps_total"] == results[1]["timesteps_this_iter"] >= 256
    assert results[1]["time_total_s"] == pytest.approx(results[0]["time_total_s"] + results[1]["time_this_iter_s"])
    assert results[1]["num_env_steps_sampled_throughput_per_sec"] > 0
    json.dumps(results)  # plain Python values only


def test_the_state_is_donated_between_calls():
    trainer = Trainer(CONFIG)
    trainer.train()
    storage = trainer.state.buffer["default_policy"].storage.storage.obs
    trainer.train()
    assert storage.is_deleted()


def test_save_restore_in_a_fresh_process_continues_bit_for_bit(tmp_path):
    trainer = Trainer(CONFIG)
    for _ in range(3):
        trainer.train()
    path = trainer.save(tmp_path)
    assert pathlib.Path(path).name == "checkpoint_000003"
    uninterrupted = [comparable(trainer.train()) for _ in range(2)]
    params = jax.tree_util.tree_leaves(trainer.params)

    out = tmp_path / "child.npz"
    child = run_child(f"""
        import json, numpy as np, jax
        from jaxdqn.trainer import Trainer
        from tests.test_trainer import comparable
        t = Trainer.from_checkpoint({str(path)!r})
        assert t.iteration == 3, t.iteration
        results = [comparable(t.train()) for _ in range(2)]
        leaves = jax.tree_util.tree_leaves(t.params)
        np.savez({str(out)!r}, *[np.asarray(x) for x in leaves], results=json.dumps(results))
    """)
    assert child.returncode == 0, child.stderr[-3000:]
    restored = np.load(out)
    assert json.loads(str(restored["results"])) == json.loads(json.dumps(uninterrupted))
    for i, leaf in enumerate(params):
        np.testing.assert_array_equal(restored[f"arr_{i}"], np.asarray(leaf))


def test_a_crash_during_save_leaves_the_previous_checkpoint(tmp_path):
    child = run_child(f"""
        import os, signal
        from orbax.checkpoint._src.path import atomicity
        from jaxdqn.trainer import Trainer
        from tests.test_trainer import CONFIG
        t = Trainer(CONFIG)
        t.train()
        t.save({str(tmp_path)!r})
        t.train()
        async def crash(*args, **kwargs):  # everything written, the commit (rename) not done
            os.kill(os.getpid(), signal.SIGKILL)
        atomicity.AtomicRenameTemporaryPath.finalize = crash
        t.save({str(tmp_path)!r})
        print("not reached")
    """)
    assert child.returncode == -9, (child.returncode, child.stderr[-2000:])
    assert "not reached" not in child.stdout
    assert [p.name for p in checkpoint.finished(tmp_path)] == ["checkpoint_000001"]
    assert any("tmp" in p.name for p in tmp_path.iterdir())  # the save was cut off midway
    trainer = Trainer.from_checkpoint(tmp_path)
    assert trainer.iteration == 1
    assert trainer.train()["training_iteration"] == 2


def test_restore_refuses_a_different_config_saying_what_differs(tmp_path):
    trainer = Trainer(CONFIG)
    trainer.train()
    path = trainer.save(tmp_path)
    other = Trainer(CONFIG.replace(lr=1e-3, n_step=3))
    with pytest.raises(ValueError, match=r"lr: checkpoint 0.0005, now 0.001.*n_step: checkpoint 1, now 3"):
        other.restore(path)
    with pytest.raises(ValueError, match=r"num_seeds: checkpoint None, now 2"):
        Trainer(CONFIG, num_seeds=2).restore(path)
    with pytest.raises(ValueError, match=r"cannot change when resuming"):
        Trainer.from_checkpoint(path, lr=0.1)
    # Keys that only change how long the shell runs may differ.
    longer = Trainer(CONFIG.replace(total_timesteps=10_000, evaluation_num_episodes=5))
    longer.restore(path)
    assert longer.iteration == 1
    with pytest.raises(FileNotFoundError, match="no finished checkpoint"):
        Trainer(CONFIG).restore(tmp_path / "nowhere")


def test_keep_retains_the_newest_checkpoints(tmp_path):
    trainer = Trainer(CONFIG)
    for _ in range(4):
        trainer.train()
        trainer.save(tmp_path, keep=2)
    assert [p.name for p in checkpoint.finished(tmp_path)] == ["checkpoint_000003", "checkpoint_000004"]
    assert checkpoint.resolve(tmp_path).name == "checkpoint_000004"


def test_compute_single_action_is_the_greedy_action_of_the_q_network():
    trainer = Trainer(CONFIG)
    trainer.train()
    obs = np.random.default_rng(0).normal(size=(20, 4)).astype(np.float32)
    q = trainer.plan.networks["default_policy"].apply(trainer.params["default_policy"], obs, deterministic=True).q
    expected = np.argmax(np.asarray(q), axis=-1)
    assert [trainer.compute_single_action(o, explore=False) for o in obs] == expected.tolist()
    # explore=True: epsilon-greedy at the current epsilon (~0.98 after 320 of 10k steps), a fresh draw per call.
    explored = [trainer.compute_single_action(obs[0], explore=True) for _ in range(400)]
    assert 0.4 < np.mean(explored) < 0.6
    # explore=None takes the config's explore (RLlib's default True; False: greedy)
    assert 0.4 < np.mean([trainer.compute_single_action(obs[0]) for _ in range(400)]) < 0.6
    greedy = Trainer(CONFIG.replace(explore=False))
    q = greedy.plan.networks["default_policy"].apply(greedy.params["default_policy"], obs, deterministic=True).q
    assert [greedy.compute_single_action(o) for o in obs] == np.argmax(np.asarray(q), axis=-1).tolist()
    with pytest.raises(ValueError, match=r"observation has shape \(3,\)"):
        trainer.compute_single_action(np.zeros(3))


def test_compute_single_action_explores_a_noisy_network_through_fresh_noise():
    """RLlib's exploring forward pass of a noisy network samples the noise: with epsilon at 0,
    ``explore=True`` draws actions from noisy Q-values (they vary over calls where the mean
    network's are constant), ``explore=False`` takes the mean weights; without noisy layers
    ``explore=True`` at epsilon 0 is the greedy action."""
    no_epsilon = {"initial_epsilon": 0.0, "final_epsilon": 0.0}
    noisy = Trainer(CONFIG.replace(noisy=True, sigma0=2.0, exploration_config=no_epsilon))
    obs = np.random.default_rng(1).normal(size=(6, 4)).astype(np.float32)
    greedy = [noisy.compute_single_action(o, explore=False) for o in obs]
    explored = [[noisy.compute_single_action(o, explore=True) for _ in range(30)] for o in obs]
    assert [len(set(a)) for a in explored] != [1] * len(obs), explored
    assert [noisy.compute_single_action(o, explore=False) for o in obs] == greedy
    plain = Trainer(CONFIG.replace(exploration_config=no_epsilon))
    assert [plain.compute_single_action(o, explore=True) for o in obs] == [
        plain.compute_single_action(o, explore=False) for o in obs]


def test_evaluate_runs_greedy_episodes():
    trainer = Trainer(CONFIG)
    result = trainer.evaluate()["evaluation"]
    returns = result["hist_stats"]["episode_reward"]
    assert len(returns) == result["episodes_this_iter"] == 3
    assert result["episode_reward_mean"] == pytest.approx(np.mean(returns))
    assert result["episode_reward_min"] == min(returns) >= 1  # CartPole pays 1 per step


def test_seeds_run_stacked_and_differ():
    trainer = Trainer(CONFIG, num_seeds=3)
    results = trainer.train()
    assert [r["training_iteration"] for r in results] == [1, 1, 1]
    assert len({r["info"]["learner"]["default_policy"]["learner_stats"]["loss"] for r in results}) == 3
    assert len(trainer.evaluate()) == 3
    # Seed k of a stacked Trainer is split(key(seed), S)[k]: the same run as make_plan alone
    # with that key (parallel.layout_keys).
    plan = make_plan(CONFIG)
    state = jax.jit(plan.init)(jax.random.split(jax.random.key(CONFIG.seed), 3)[1])
    _, report = jax.jit(plan.chunk)(state)
    assert results[1]["timesteps_total"] == int(report["num_steps_sampled"])
    assert results[1]["info"]["learner"]["default_policy"]["learner_stats"]["loss"] == pytest.approx(
        float(report["learner/default_policy/loss"]), rel=1e-5)


def test_one_run_is_seed_0_of_a_stacked_run():
    """One PRNG implementation in every layout, and one run's key is seed 0's: the warm-up (env
    steps and exploration draws only) stores the same transitions bit for bit, and training
    reports the same statistics up to float rounding (vmap batches the matmuls differently)."""
    one, stacked = Trainer(CONFIG), Trainer(CONFIG, num_seeds=2)
    seed_0 = jax.tree_util.tree_map(lambda x: x[0], stacked.state.buffer)
    for x, y in zip(jax.tree_util.tree_leaves(one.state.buffer), jax.tree_util.tree_leaves(seed_0), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    a, b = one.train(), stacked.train()[0]
    assert a["episodes_total"] == b["episodes_total"] and a["timesteps_total"] == b["timesteps_total"]
    for k, v in a["info"]["learner"]["default_policy"]["learner_stats"].items():
        assert v == pytest.approx(b["info"]["learner"]["default_policy"]["learner_stats"][k], rel=1e-4, abs=1e-6), k


def test_bad_arguments_are_refused_before_anything_compiles():
    with pytest.raises(ValueError, match="num_seeds=0 is invalid"):
        Trainer(CONFIG, num_seeds=0)
    with pytest.raises(ValueError, match="unknown config key 'lrr'"):
        Trainer({"lrr": 0.1})
    with pytest.raises(ValueError, match="algo='ppo' is invalid"):
        Trainer({"lr": 0.1}, algo="ppo")
