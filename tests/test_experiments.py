"""Experiment tooling from the command line: grid_search sweeps in Tune's folder layout, their
summary and plot, per-trial stopping, and the TensorBoard / W&B / CSV loggers."""

import csv
import json
import math
import pathlib
import struct

import pytest

from jaxdqn import cli, logging
from jaxdqn.cli import loop

SMALL = ["--set", "buffer_size=2000", "--set", "learning_starts=64", "--set", "num_envs_per_worker=4",
         "--set", "timesteps_per_iteration=256", "--set", "model.fcnet_hiddens=[16]", "--set", "hiddens=[16]",
         "--set", "train_batch_size=16", "--set", "training_intensity=1", "--set", "lr_schedule=null", "--quiet"]
RLLIB_SWEEP = """\
cartpole-sweep:
    env: CartPole-v1
    run: DQN
    stop:
        timesteps_total: 512
    config:
        lr: {grid_search: [0.001, 0.0001]}
        exploration_config:
            final_epsilon: {grid_search: [0.02, 0.1]}
        n_step: 1
        buffer_size: 2000
        learning_starts: 64
        timesteps_per_iteration: 256
        hiddens: [16]
        model: {fcnet_hiddens: [16]}
        train_batch_size: 16
"""


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def lines(path):
    return [json.loads(line) for line in pathlib.Path(path).read_text().splitlines()]


def test_a_grid_sweep_runs_every_trial_in_tune_folders_with_a_summary_and_a_plot(tmp_path, capsys):
    out = tmp_path / "exp"
    argv = ["train", "--timesteps", "512", "--seeds", "2", "--out", str(out), *SMALL,
            "--set", "lr={grid_search: [0.001, 0.0001]}", "--set", "hiddens={grid_search: [[8], [16]]}"]
    assert cli.main(argv) == 0
    # Tune's order: the grid keys sorted (hiddens, lr), the first varying fastest.
    expected = [([8], 0.001), ([16], 0.001), ([8], 0.0001), ([16], 0.0001)]
    summary = rows(out / "summary.csv")
    assert [(json.loads(r["hiddens"]), float(r["lr"])) for r in summary] == expected
    for index, (hiddens, lr) in enumerate(expected):
        folder = out / summary[index]["trial"]
        assert folder.name.startswith(f"DQN_CartPole-v1_{index:05d}_{index}_hiddens=")
        params = json.loads((folder / "params.json").read_text())
        assert params["hiddens"] == hiddens and params["lr"] == pytest.approx(lr) and params["seeds"] == 2
        finals = []
        for seed in (0, 1):
            results = lines(folder / f"seed_{seed}" / "result.json")
            assert [r["training_iteration"] for r in results] == [1, 2]
            assert results[-1]["done"] is True and results[0]["done"] is False
            assert results[-1]["config"]["lr"] == pytest.approx(lr)
            assert len(rows(folder / f"seed_{seed}" / "progress.csv")) == 2
            finals.append(results[-1]["episode_reward_mean"])
        assert float(summary[index]["episode_reward_mean"]) == pytest.approx(sum(finals) / 2)
        assert float(summary[index]["episode_reward_mean_min_over_seeds"]) == pytest.approx(min(finals))
    # Trials 0 and 2 (hiddens [8]) are one program, 1 and 3 another: each has its checkpoint.
    assert {r["checkpoint"].split("/")[-2] for r in summary} == {"program_0", "program_1"}
    assert summary[0]["checkpoint"] == summary[2]["checkpoint"]
    # The experiment's plot: one curve per trial.
    assert cli.main(["plot", str(out)]) == 0
    png = out / "learning_curve.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert cli.main(["evaluate", summary[0]["checkpoint"], "--episodes", "2"]) == 0
    printed = capsys.readouterr().out
    assert "trial 1 seed 1: episode_reward_mean" in printed


def test_an_rllib_yaml_with_grid_search_runs_as_one_program(tmp_path, capsys):
    path = tmp_path / "sweep.yaml"
    path.write_text(RLLIB_SWEEP)
    out = tmp_path / "exp"
    assert cli.main(["train", "--config", str(path), "--out", str(out)]) == 0
    assert "4 trials x 1 seed(s) as 1 program(s)" in capsys.readouterr().err
    summary = rows(out / "summary.csv")
    assert len({r["checkpoint"] for r in summary}) == 1
    assert [(float(r["exploration_config.final_epsilon"]), float(r["lr"])) for r in summary] == [
        (0.02, 0.001), (0.1, 0.001), (0.02, 0.0001), (0.1, 0.0001)]
    for r in summary:
        params = json.loads((out / r["trial"] / "params.json").read_text())
        assert params["exploration_config"]["final_epsilon"] == pytest.approx(float(r["exploration_config.final_epsilon"]))
        results = lines(out / r["trial"] / "result.json")  # one seed: no seed folders
        assert results[-1]["timesteps_total"] >= 512


def test_grid_errors_name_the_trial_and_come_before_training(tmp_path, capsys):
    out = tmp_path / "exp"
    assert cli.main(["train", "--out", str(out), *SMALL, "--set", "gamma={grid_search: [0.9, 2]}"]) == 2
    assert "trial {'gamma': 2}: gamma=2 is invalid" in capsys.readouterr().err
    assert cli.main(["train", "--out", str(out), *SMALL, "--set", "lr={grid_search: []}"]) == 2
    assert "a grid_search must be" in capsys.readouterr().err
    # RLlib's rule (lr_schedule decides the rate) would make an lr sweep a no-op: refused.
    assert cli.main(["train", "--out", str(out), "--set", "lr={grid_search: [0.1, 0.2]}", "--quiet"]) == 2
    assert "lr differs between trials, but lr_schedule is set" in capsys.readouterr().err
    doc = tmp_path / "stop.yaml"
    doc.write_text("algo: dqn\nstop: {episode_reward_mean: {grid_search: [100, 200]}}\n")
    assert cli.main(["train", "--config", str(doc), "--out", str(out), "--quiet"]) == 2
    assert "stop episode_reward_mean={'grid_search': [100, 200]} is invalid: must be a number" in \
        capsys.readouterr().err
    assert not out.exists()


class ScriptedTrainer:
    """Stands in for a Trainer in ``run_loop``: two trials, one seed each, with given returns."""

    trials = [{"lr": 1}, {"lr": 2}]

    def __init__(self, returns):
        self.returns = returns
        self.iteration = 0
        self.timesteps_total = 0

    def train(self):
        self.iteration += 1
        self.timesteps_total += 100
        return [[{"episode_reward_mean": r[self.iteration - 1], "timesteps_total": self.timesteps_total,
                  "training_iteration": self.iteration, "num_env_steps_sampled_throughput_per_sec": 1.0,
                  "done": False}] for r in self.returns]

    def save(self, *args, **kwargs):
        raise AssertionError("no checkpoints asked for")


class ListLogger:
    def __init__(self):
        self.written = []

    def write(self, results):
        self.written.append([dict(r) for r in results])


def test_each_trial_stops_on_its_own_as_in_tune(tmp_path):
    trainer = ScriptedTrainer([[10, 160, 170, 180, 190], [10, 20, 30, 155, 200]])
    loggers = [ListLogger(), ListLogger()]
    outcome = loop.run_loop(trainer, {"episode_reward_mean": 150, "timesteps_total": 10_000}, loggers, tmp_path,
                           0, None, True)
    assert trainer.iteration == 4  # until the last trial stops
    assert [len(logger.written) for logger in loggers] == [2, 4]
    assert loggers[0].written[-1][0]["done"] is True and loggers[0].written[0][0]["done"] is False
    assert [o[0][0]["training_iteration"] for o in outcome] == [2, 4]
    assert all(o[1] == "episode_reward_mean >= 150" for o in outcome)


def tfrecords(path):
    """The records of a TFRecord file: uint64 length, its crc, the bytes, their crc."""
    data = path.read_bytes()
    pos, out = 0, []
    while pos < len(data):
        (length,) = struct.unpack("<Q", data[pos:pos + 8])
        out.append(data[pos + 12:pos + 12 + length])
        pos += 12 + length + 4
    return out


def test_tensorboard_events_hold_the_progress_csv_columns(tmp_path):
    pytest.importorskip("tensorboardX")
    from tensorboardX.proto import event_pb2

    out = tmp_path / "run"
    assert cli.main(["train", "--timesteps", "768", "--out", str(out), *SMALL, "--logger", "tensorboard",
                     "--logger", "csv"]) == 0
    table = rows(out / "progress.csv")
    (events,) = list(out.glob("events.out.tfevents.*"))
    scalars = {}
    for record in tfrecords(events):
        event = event_pb2.Event.FromString(record)
        for value in event.summary.value:
            scalars[(value.tag, event.step)] = value.simple_value
    assert len(table) == 3
    for row in table:
        step = int(row["timesteps_total"])
        for key in ("episode_reward_mean", "info/learner/default_policy/learner_stats/mean_q",
                    "info/num_target_updates", "time_this_iter_s"):
            expected = float(row[key])
            got = scalars[(key, step)]
            assert (math.isnan(got) and math.isnan(expected)) or got == pytest.approx(expected, rel=1e-6)
    numeric = {k for k, v in table[0].items() if v not in ("", "True", "False") and k not in ("date",)}
    assert {tag for tag, step in scalars if step == int(table[0]["timesteps_total"])} == numeric


def test_tensorboard_alone_keeps_result_json_and_the_plot(tmp_path):
    pytest.importorskip("tensorboardX")
    out = tmp_path / "run"
    assert cli.main(["train", "--timesteps", "512", "--out", str(out), *SMALL, "--logger", "tensorboard"]) == 0
    assert not (out / "progress.csv").exists() and len(lines(out / "result.json")) == 2
    assert cli.main(["plot", str(out)]) == 0  # read from result.json


def test_wandb_offline_logs_the_same_columns(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    out = tmp_path / "run"
    assert cli.main(["train", "--timesteps", "512", "--seeds", "2", "--out", str(out), *SMALL,
                     "--logger", "wandb"]) == 0
    for seed in (0, 1):
        runs = list((out / f"seed_{seed}" / "wandb").glob("offline-run-*"))
        assert len(runs) == 1
        (log,) = list(runs[0].glob("*.wandb"))
        blob = log.read_bytes()
        for key in (b"episode_reward_mean", b"info/learner/default_policy/learner_stats/mean_q",
                    b"timesteps_total"):
            assert key in blob
        assert len(lines(out / f"seed_{seed}" / "result.json")) == 2


def test_a_logger_without_its_package_is_a_usage_error(tmp_path, monkeypatch, capsys):
    real = logging.importlib.util.find_spec
    monkeypatch.setattr(logging.importlib.util, "find_spec",
                        lambda name, *a: None if name == "tensorboardX" else real(name, *a))
    assert cli.main(["train", "--out", str(tmp_path / "run"), *SMALL, "--logger", "tensorboard"]) == 2
    assert "logger 'tensorboard' needs the tensorboardX package: pip install 'jaxdqn[tensorboard]'" in \
        capsys.readouterr().err
    assert not (tmp_path / "run").exists()
    with pytest.raises(ValueError, match=r"logger 'mlflow' is not supported; supported: \['csv', 'tensorboard', 'wandb'\]"):
        logging.check_loggers(["mlflow"])


def test_tunes_experiment_keys_are_honoured(tmp_path):
    """num_samples repeats every trial (here: vmapped seeds), checkpoint_freq / keep_checkpoints_num
    / checkpoint_at_end drive the checkpoints, local_dir/<name> is the run folder."""
    path = tmp_path / "exp.yaml"
    local = tmp_path / "ray_results"
    path.write_text(RLLIB_SWEEP.replace("lr: {grid_search: [0.001, 0.0001]}", "lr: 0.001").replace(
        "final_epsilon: {grid_search: [0.02, 0.1]}", "final_epsilon: 0.02").replace(
        "    stop:", f"    num_samples: 2\n    checkpoint_freq: 1\n    keep_checkpoints_num: 1\n"
                    f"    checkpoint_at_end: true\n    local_dir: {local}\n    stop:"))
    assert cli.main(["train", "--config", str(path), "--quiet"]) == 0
    run = local / "cartpole-sweep"
    assert json.loads((run / "params.json").read_text())["seeds"] == 2
    assert [len(lines(run / f"seed_{k}" / "result.json")) for k in (0, 1)] == [2, 2]
    assert [p.name for p in run.glob("checkpoint_*")] == ["checkpoint_000002"]
    path.write_text(path.read_text().replace("checkpoint_freq: 1", "checkpoint_freq: -1"))
    assert cli.main(["train", "--config", str(path), "--quiet"]) == 2
