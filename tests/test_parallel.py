"""Many devices (4 forced CPU devices, see conftest) and many processes (two local processes
with gloo): replicated params stay bitwise equal, seeds spread over devices equal seeds on one,
layouts are refused before anything compiles, checkpoints move between layouts by a rule.

(The D-device ``pmean`` train step equal to the single-device step on the concatenated batch is
``tests/test_learner.py::test_gradients_are_averaged_across_4_devices``.)"""

import json
import os
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest

from jaxdqn import DQNConfig, ModelConfig, parallel
from jaxdqn.plan import make_plan
from jaxdqn.rllib import from_rllib
from jaxdqn.trainer import Trainer

TINY = dict(buffer_size=2000, learning_starts=64, num_envs_per_worker=4, timesteps_per_iteration=64,
            total_timesteps=1024, model=ModelConfig(fcnet_hiddens=(16,)), hiddens=(16,), train_batch_size=16,
            evaluation_num_episodes=3)
STATS = ("loss", "mean_q", "min_q", "max_q", "mean_td_error", "cur_lr", "grad_gnorm")


def stats(result):
    return result["info"]["learner"]["default_policy"]["learner_stats"]


def rows_equal(tree):
    """Every leaf ``[D, ...]`` has D bitwise-equal rows."""
    return all(bool(np.all(np.asarray(x) == np.asarray(x)[:1])) for x in jax.tree_util.tree_leaves(tree))


def host(x):
    return np.asarray(jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x)


def leaves_equal(a, b):
    return all(bool(np.array_equal(host(x), host(y)))
               for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))


@pytest.fixture(scope="module")
def four():
    """A data-parallel Trainer on 4 devices after 3 iterations, and its results."""
    trainer = Trainer(DQNConfig(**TINY, num_devices=4))
    results = [trainer.train() for _ in range(3)]
    return trainer, results


def test_replicated_state_stays_bitwise_equal_on_every_device(four):
    trainer, results = four
    state = trainer.state
    assert jax.tree_util.tree_leaves(state.learner["default_policy"].params)[0].shape[0] == 4
    assert rows_equal(state.learner)  # params, target, Adam moments, counters
    for counter in ("num_steps_sampled", "num_steps_trained", "num_target_updates", "last_target_update_ts"):
        assert rows_equal(getattr(state.metrics, counter))
    # The envs, replay shards and keys are each device's own.
    obs = np.asarray(state.actor.obs)
    assert all(not np.array_equal(obs[0], obs[d]) for d in range(1, 4))
    assert not rows_equal(state.buffer["default_policy"].storage.storage.obs)


def test_totals_are_split_and_counters_count_all_devices(four):
    trainer, results = four
    state, config = trainer.state, trainer.config
    assert state.actor.obs.shape[:2] == (4, config.num_envs // 4)
    assert state.buffer["default_policy"].storage.storage.obs.shape[:2] == (4, config.buffer_size // 4)
    s = trainer.plan.schedule
    assert s.steps_per_store == config.num_envs * config.rollout_fragment_length  # all devices' steps
    per_iteration = s.steps_per_chunk
    assert [r["timesteps_total"] for r in results] == [results[0]["timesteps_total"] + k * per_iteration
                                                        for k in range(3)]
    trained = int(s.replay_counts(s.stores_per_chunk).sum()) * config.train_batch_size  # the total batch
    assert results[2]["info"]["num_steps_trained"] - results[1]["info"]["num_steps_trained"] == trained
    # Episodes are gathered from every device: the total is the sum of the devices' counts.
    assert results[-1]["episodes_total"] == int(np.sum(np.asarray(state.metrics.episodes.episodes_total)))
    assert results[-1]["episodes_total"] > int(np.asarray(state.metrics.episodes.episodes_total)[0])
    assert set(stats(results[-1])) == set(STATS)


def test_one_iteration_equals_the_plan_pmapped_by_hand(four):
    """The Runner adds nothing to the plan: init + chunk under a plain pmap give the same report."""
    trainer, results = four
    config = trainer.config
    plan = make_plan(config, axis_name=parallel.AXIS, num_replicas=4)
    keys = jax.numpy.stack([jax.random.split(jax.random.key(config.seed), 1)[0]] * 4)  # one run = seed 0
    state = jax.pmap(plan.init, axis_name=parallel.AXIS)(keys)
    chunk = jax.pmap(plan.chunk, axis_name=parallel.AXIS)
    state, first = chunk(state)
    _, report = chunk(state)
    assert stats(results[0])["loss"] == float(first["learner/default_policy/loss"][0])
    assert stats(results[1])["loss"] == float(report["learner/default_policy/loss"][0])
    assert results[1]["episodes_total"] == int(report["episodes_total"][0]) > 0
    assert results[1]["episode_reward_mean"] == float(report["episode_reward_mean"][0])


SEEDS = DQNConfig(**{**TINY, "train_batch_size": 15})  # 15: seeds train whole runs, nothing is split


def test_seeds_spread_over_devices_equal_seeds_on_one_device_and_move_between_device_counts(tmp_path):
    on_one = Trainer(SEEDS, num_seeds=4)
    on_two = Trainer(SEEDS.replace(num_devices=2), num_seeds=4)
    assert on_two.layout.seeds_per_device == 2
    a, b = on_one.train(), on_two.train()
    for x, y in zip(a, b):
        assert x["episode_reward_mean"] == pytest.approx(y["episode_reward_mean"], rel=1e-5)
        assert stats(x)["loss"] == pytest.approx(stats(y)["loss"], rel=1e-4)
    assert len({r["episode_reward_mean"] for r in b}) > 1  # the seeds differ
    params = on_two.params  # [S, ...], seed order kept
    assert jax.tree_util.tree_leaves(params)[0].shape[0] == 4
    for x, y in zip(jax.tree_util.tree_leaves(on_one.params), jax.tree_util.tree_leaves(params)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-4, atol=1e-5)

    # A seed checkpoint moves exactly: [2, 2, ...] on 2 devices -> [4, 1, ...] on 4, or [4] on 1.
    path = on_two.save(tmp_path)
    saved = jax.device_get(on_two.params)
    after = [stats(r) for r in on_two.train()]
    moved = Trainer(SEEDS.replace(num_devices=4), num_seeds=4)
    moved.restore(path)
    assert jax.tree_util.tree_leaves(moved.state.learner["default_policy"].params)[0].shape[:2] == (4, 1)
    assert leaves_equal(moved.params, saved)
    for x, y in zip(after, moved.train()):
        assert stats(y) == pytest.approx(x, rel=1e-4)
    on_one.restore(path)  # the same compiled one-device program as above
    assert leaves_equal(on_one.params, saved)


@pytest.mark.parametrize("change, seeds, match", [
    (dict(num_devices=8), None, r"num_devices=8 is invalid: only 4 cpu device\(s\).*xla_force_host_platform"),
    (dict(num_devices=4, buffer_size=2002), None, r"buffer_size=2002 is invalid with num_devices=4.*2000 or 2004"),
    (dict(num_devices=4, train_batch_size=18), None, r"train_batch_size=18 is invalid with num_devices=4"),
    (dict(num_devices=4, num_envs_per_worker=6), None, r"num_envs_per_worker=6 is invalid with num_devices=4"),
    (dict(num_devices=4, num_envs_per_worker=3, num_workers=2), None, r"num_workers \* num_envs_per_worker=6"),
    (dict(num_devices=4), 6, r"num_seeds=6 is invalid with num_devices=4.*multiple of 4"),
])
def test_wrong_layouts_fail_before_anything_compiles(change, seeds, match):
    with jax.log_compiles(True), pytest.raises(ValueError, match=match):
        Trainer(DQNConfig(**{**TINY, **change}), num_seeds=seeds)


@pytest.mark.parametrize("value", [0, -1, 1.5, "all", True])
def test_num_devices_is_an_int_or_auto(value):
    with pytest.raises(ValueError, match="num_devices=.* must be an int >= 1 or 'auto'"):
        DQNConfig(num_devices=value)


def test_auto_uses_every_visible_device():
    assert Trainer(DQNConfig(**TINY, num_devices="auto")).layout.num_devices == jax.device_count() == 4


def test_rllib_num_gpus_maps_to_devices():
    assert from_rllib({"num_gpus": 2, "_fake_gpus": True}).num_devices == 2
    assert from_rllib({"num_gpus": 1}).num_devices == 1
    assert from_rllib({"num_gpus": 0.5}).num_devices == 1


def test_a_4_device_checkpoint_restores_on_4_devices_bit_for_bit(tmp_path):
    config = DQNConfig(**TINY, num_devices=4)
    trainer = Trainer(config)
    for _ in range(3):
        trainer.train()
    path = trainer.save(tmp_path)
    uninterrupted = [trainer.train() for _ in range(2)]
    restored = Trainer(config)
    restored.restore(path)
    resumed = [restored.train() for _ in range(2)]
    for a, b in zip(uninterrupted, resumed):
        assert stats(a) == stats(b)
        assert a["episode_reward_mean"] == b["episode_reward_mean"] and a["timesteps_total"] == b["timesteps_total"]
    assert leaves_equal(trainer.state, restored.state)


def test_a_4_device_checkpoint_is_refused_on_2_devices_unless_learner_only(tmp_path):
    trainer = Trainer(DQNConfig(**TINY, num_devices=4))
    trainer.train()
    path = trainer.save(tmp_path)
    two = Trainer(DQNConfig(**TINY, num_devices=2))
    with pytest.raises(ValueError, match=r"num_devices: .* over 4 device\(s\).*runs on 2.*"
                                         r"xla_force_host_platform_device_count=4.*learner_only=True"):
        two.restore(path)
    two.restore(path, learner_only=True)  # a warm start: the learner, on each of the 2 devices
    state = two.state
    assert jax.tree_util.tree_leaves(state.learner["default_policy"].params)[0].shape[0] == 2
    assert rows_equal(state.learner)
    assert leaves_equal(two.params, trainer.params)
    assert int(np.asarray(state.learner["default_policy"].num_updates)[0]) == int(np.asarray(trainer.state.learner["default_policy"].num_updates)[0])
    one = Trainer.from_checkpoint(path, num_devices=1, learner_only=True)
    assert leaves_equal(one.params, trainer.params)
    two.train()  # and it trains on


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_in_two_processes(config: dict, tmp_path) -> list[dict]:
    """``jaxdqn train --config`` (``config`` written as JSON, which is YAML) as 2 local processes
    x 2 forced CPU devices (gloo) into ``tmp_path / "run"``: the results process 0 wrote."""
    (tmp_path / "config.yaml").write_text(json.dumps(config))
    port, run = free_port(), tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # the processes force their own 2
    procs = [subprocess.Popen(
        [sys.executable, "-m", "jaxdqn.cli", "train", "--quiet", "--config", str(tmp_path / "config.yaml"),
         "--out", str(run), "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2", "--process-id",
         str(i), "--local-devices", "2"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for i in range(2)]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    return [json.loads(line) for line in (run / "result.json").read_text().splitlines()]


def test_two_processes_with_two_devices_each_train_in_lockstep(tmp_path):
    """``jaxdqn train`` as 2 local processes x 2 CPU devices (gloo): one program over 4 devices.
    All 4 devices end with the same params, process 0 alone writes the run folder, and the first
    iteration matches the same config on 4 devices of one process (to float tolerance: the
    all-reduce runs over gloo instead of in-process). The config does not set num_devices: a
    multi-process command uses every device ("auto")."""
    config = {**TINY, "model": {"fcnet_hiddens": [16]}, "hiddens": [16],
              "timesteps_per_iteration": 32, "total_timesteps": 256}
    run = tmp_path / "run"
    results = train_in_two_processes(config, tmp_path)
    assert len(results) >= 2 and results[-1]["timesteps_total"] >= 256
    assert json.loads((run / "params.json").read_text())["num_devices"] == "auto"

    restored = Trainer.from_checkpoint(run)  # the gathered global state, on this process's 4 devices
    assert restored.layout.num_devices == 4
    assert rows_equal(restored.state.learner)
    assert not rows_equal(restored.state.actor.obs)  # 4 different env batches: both processes ran theirs
    single = Trainer(DQNConfig(**{**TINY, "timesteps_per_iteration": 32, "total_timesteps": 256,
                                  "num_devices": 4}))
    first = single.train()
    assert first["timesteps_total"] == results[0]["timesteps_total"]
    assert first["episodes_total"] == results[0]["episodes_total"]
    assert stats(results[0]) == pytest.approx(stats(first), rel=1e-4, abs=1e-6)
    # Greedy evaluation needs only the params: the 4-device checkpoint evaluates on one device.
    from jaxdqn import cli

    assert cli.main(["evaluate", str(run), "--episodes", "2"]) == 0


def test_an_rllib_yaml_with_fake_gpus_runs_on_forced_host_devices(tmp_path):
    """RLlib's ``num_gpus: 2, _fake_gpus: true`` (its multi-GPU learner on fake GPUs) becomes two
    forced CPU devices, data parallel, started by the command before JAX computes anything."""
    (tmp_path / "fake.yaml").write_text(
        "cartpole-dqn:\n  env: CartPole-v1\n  run: DQN\n  stop: {timesteps_total: 128}\n"
        "  config: {num_gpus: 2, _fake_gpus: true, framework: torch, learning_starts: 32, "
        "timesteps_per_iteration: 64, train_batch_size: 8, num_envs_per_worker: 2, buffer_size: 1000, "
        "model: {fcnet_hiddens: [8]}, hiddens: [8]}\n")
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # one CPU device unless forced
    out = subprocess.run([sys.executable, "-m", "jaxdqn.cli", "train", "--config", str(tmp_path / "fake.yaml"),
                          "--out", str(tmp_path / "run")], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "2 devices, data parallel" in out.stderr
    from jaxdqn import checkpoint

    assert checkpoint.read_meta(tmp_path / "run")["num_devices"] == 2
