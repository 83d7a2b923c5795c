"""The ``jaxdqn`` command: run folders, RLlib YAML, stop blocks, resume, evaluate, plot, errors."""

import csv
import json
import re
import shutil
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from jaxdqn import cli
from jaxdqn.cli import loop

# Small enough for seconds: iterations of 256 env steps.
SMALL = ["--set", "buffer_size=2000", "--set", "learning_starts=64", "--set", "num_envs_per_worker=4",
         "--set", "timesteps_per_iteration=256", "--set", "model.fcnet_hiddens=[16]", "--set", "hiddens=[16]",
         "--set", "train_batch_size=16", "--set", "training_intensity=1", "--quiet"]
RLLIB_CARTPOLE_DQN = """\
cartpole-dqn:
    env: CartPole-v0
    run: DQN
    stop:
        episode_reward_mean: 150
        timesteps_total: 50000
    config:
        # Works for both torch and tf.
        framework: tf
        n_step: 3
        gamma: 0.95
"""


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def run2(tmp_path_factory):
    """One small 2-seed run, 3 iterations, a checkpoint after each (shared: compiles are slow)."""
    out = tmp_path_factory.mktemp("cli") / "run"
    assert cli.main(["train", "--seeds", "2", "--timesteps", "768", "--out", str(out), "--checkpoint-every", "1",
                     *SMALL]) == 0
    return out


def test_train_writes_a_tune_style_run_folder_per_seed(run2, tmp_path):
    out = run2
    params = json.loads((out / "params.json").read_text())
    assert params["algo"] == "dqn" and params["seeds"] == 2 and params["n_step"] == 3  # the tuned example
    assert params["buffer_size"] == 2000 and params["model"]["fcnet_hiddens"] == [16]
    for seed in (0, 1):
        results = lines(out / f"seed_{seed}" / "result.json")
        assert [r["training_iteration"] for r in results] == [1, 2, 3]
        assert results[-1]["timesteps_total"] >= 768
        with open(out / f"seed_{seed}" / "progress.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        assert len(rows) == 3
        assert float(rows[-1]["info/learner/default_policy/learner_stats/mean_q"]) == pytest.approx(
            results[-1]["info"]["learner"]["default_policy"]["learner_stats"]["mean_q"])
    seed0, seed1 = (lines(out / f"seed_{k}" / "result.json")[-1] for k in (0, 1))
    assert seed0["info"]["learner"] != seed1["info"]["learner"]
    assert [p.name for p in sorted(out.glob("checkpoint_*"))] == [f"checkpoint_00000{i}" for i in (1, 2, 3)]
    # params.json is itself a config file: the same run again.
    again = tmp_path / "again"
    assert cli.main(["train", "--config", str(out / "params.json"), "--out", str(again), "--quiet"]) == 0
    assert json.loads((again / "params.json").read_text()) == params
    assert lines(again / "seed_1" / "result.json")[-1]["episode_reward_mean"] == seed1["episode_reward_mean"]


def test_an_rllib_tuned_example_runs_unchanged_and_its_stop_block_is_honoured(tmp_path):
    path = tmp_path / "cartpole-dqn.yaml"
    # RLlib's own file, with the stop bounds lowered so that the test takes seconds.
    path.write_text(RLLIB_CARTPOLE_DQN.replace("episode_reward_mean: 150", "training_iteration: 2")
                    .replace("timesteps_total: 50000", "timesteps_total: 100000"))
    out = tmp_path / "run"
    assert cli.main(["train", "--config", str(path), "--out", str(out), "--quiet",
                     "--set", "timesteps_per_iteration=300", "--set", "buffer_size=2000"]) == 0
    params = json.loads((out / "params.json").read_text())
    assert (params["gamma"], params["n_step"], params["env"]) == (0.95, 3, "CartPole-v0")
    assert params["stop"] == {"training_iteration": 2, "timesteps_total": 100000}
    assert params["lr"] == 5e-4 and params["prioritized_replay"] is True  # RLlib's DQN defaults
    assert [r["training_iteration"] for r in lines(out / "result.json")] == [1, 2]
    # episode_reward_mean is a lower bound too: met by CartPole's first episodes (>= 8 steps).
    path.write_text(RLLIB_CARTPOLE_DQN.replace("episode_reward_mean: 150", "episode_reward_mean: 1"))
    out = tmp_path / "run2"
    assert cli.main(["train", "--config", str(path), "--out", str(out), "--quiet",
                     "--set", "timesteps_per_iteration=300", "--set", "buffer_size=2000"]) == 0
    results = lines(out / "result.json")
    assert results[-1]["episode_reward_mean"] >= 1
    assert all(not r["episode_reward_mean"] >= 1 for r in results[:-1])


def test_resume_continues_the_run_folder(run2, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(run2, out)
    assert cli.main(["train", "--resume", str(out), "--timesteps", "1024", "--quiet", "--keep", "2"]) == 0
    for seed in (0, 1):
        results = lines(out / f"seed_{seed}" / "result.json")
        assert [r["training_iteration"] for r in results] == [1, 2, 3, 4]
        steps = [r["timesteps_total"] for r in results]
        assert steps == sorted(steps) and steps[-1] >= 1024
        assert results[3]["episodes_total"] == results[2]["episodes_total"] + results[3]["episodes_this_iter"]
    assert [p.name for p in sorted(out.glob("checkpoint_*"))] == ["checkpoint_000003", "checkpoint_000004"]
    # (Bit-for-bit continuation across processes: tests/test_trainer.py.)


def test_evaluate_and_plot(run2, tmp_path, capsys):
    capsys.readouterr()
    assert cli.main(["evaluate", str(run2), "--episodes", "2"]) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    assert len(printed) == 2 and all("2 greedy episodes" in line for line in printed)
    png = tmp_path / "curve.png"
    assert cli.main(["plot", str(run2), "--output", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    image = matplotlib.image.imread(png)
    assert image.shape[0] > 300 and image.shape[1] > 500
    assert np.std(image[..., :3]) > 0.05  # something was drawn


def test_plot_draws_reference_lines(run2, tmp_path, monkeypatch):
    """``--reference`` draws a labelled horizontal line per value (a paper's result)."""
    import matplotlib.axes

    drawn = []
    original = matplotlib.axes.Axes.axhline
    monkeypatch.setattr(matplotlib.axes.Axes, "axhline",
                        lambda self, y, **kw: drawn.append((y, kw.get("label"))) or original(self, y, **kw))
    args = ["plot", str(run2), "--output", str(tmp_path / "c.png"), "--reference", "10", "--reference-label",
            "paper, 5M frames", "--reference", "17.5"]
    assert cli.main(args) == 0
    assert drawn == [(10.0, "paper, 5M frames"), (17.5, "reference 17.5")]


ERRORS = [
    (["train", "--bogus"], "unrecognized arguments: --bogus"),
    (["train", "--algo", "ppo"], "invalid choice: 'ppo'"),
    (["train", "--seeds", "0"], "--seeds 0 is invalid"),
    (["train", "--set", "lr"], "expected key=value"),
    (["train", "--set", "lrr=0.1"], "unknown config key 'lrr'. Did you mean ['lr']"),
    (["train", "--set", "lr=-1"], "lr=-1 is invalid: must be a number > 0"),
    (["train", "--set", "model.fcnet_hidens=[8]"], "unknown config key 'model.fcnet_hidens'"),
    (["train", "--env", "NoSuchEnv-v0"], "env='NoSuchEnv-v0' is not a gymnax environment; valid: ["),
    (["train", "--config", "/no/such/file.yaml"], "no such file"),
    (["train", "--resume", "/no/such/run"], "no finished checkpoint at '/no/such/run'"),
    (["train", "--resume", "/no/such/run", "--algo", "dqn"], "drop --algo"),
    (["evaluate", "/no/such/run"], "no finished checkpoint"),
    (["plot", "/no/such/run"], "is not a run folder"),
    (["train", "--local-devices", "0"], "--local-devices 0 is invalid: must be >= 1"),
    (["train", "--num-processes", "2"], "--num-processes needs --process-id"),
    (["train", "--set", "num_devices=8"],
     f"num_devices=8 is invalid: only {jax.device_count()} {jax.default_backend()} device(s) are visible"),
    pytest.param(["train", "--set", "num_devices=4", "--set", "train_batch_size=30"],
                 "train_batch_size=30 is invalid with num_devices=4",
                 marks=pytest.mark.skipif(jax.device_count() < 4, reason="needs 4 devices of the default backend "
                                          "(conftest forces 4 CPU devices; a GPU machine has fewer)")),
    (["train", "--set", "num_devices=all"], "num_devices='all' is invalid: must be an int >= 1 or 'auto'"),
]


@pytest.mark.parametrize("argv, message", ERRORS,
                         ids=[" ".join(e.values[0] if hasattr(e, "values") else e[0]) for e in ERRORS])
def test_usage_errors_are_one_line_and_exit_2(argv, message, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    assert err.startswith("jaxdqn: error: ") and message in err, err


@pytest.mark.parametrize("text, message", [
    ("a: [1, 2\n", "is not valid YAML"),
    ("- 1\n- 2\n", "expected a mapping"),
    ("exp:\n  run: PPO\n  env: CartPole-v1\n", "run='PPO' is not supported"),
    ("exp:\n  run: DQN\n  config:\n    num_sgd_iter: 3\n", "unknown or unsupported RLlib config key 'num_sgd_iter'"),
    ("stop:\n  episode_len_mean: 10\n", "stop key 'episode_len_mean' is not supported"),
    ("algo: simple_q\nn_step: 3\n", "SimpleQ requires n_step=1"),
])
def test_bad_config_files_are_one_line_errors(tmp_path, capsys, text, message):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    assert cli.main(["train", "--config", str(path), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and message in err, err


def test_the_console_script_trains_end_to_end(tmp_path):
    out = tmp_path / "run"
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "jaxdqn.cli", "train", "--seeds", "2", "--timesteps", "512",
                           "--out", str(out), *SMALL[:-1]], capture_output=True, text=True, timeout=300)
    elapsed = time.perf_counter() - started
    assert done.returncode == 0, done.stderr[-2000:]
    assert "stopped: timesteps_total" in done.stdout and "checkpoint_000002" in done.stdout
    compile_s = float(re.search(r"compile: ([0-9.]+) s", done.stdout).group(1))  # the summary's compile time
    assert 0.0 < compile_s < elapsed
    assert "tuned example cartpole-v1-dqn.yaml" in done.stderr
    assert len(lines(out / "seed_1" / "result.json")) == 2


def test_train_runs_the_multi_agent_tuned_example_with_per_policy_results(tmp_path):
    assert cli.main(["train", "--env", "MultiCartPole-v1", "--timesteps", "256", "--out", str(tmp_path),
                     *SMALL]) == 0
    params = json.loads((tmp_path / "params.json").read_text())
    assert params["multiagent"]["policy_mapping_fn"] == {"agent_0": "p0", "agent_1": "p1"}
    result = lines(tmp_path / "result.json")[-1]
    assert set(result["policy_reward_mean"]) == {"p0", "p1"}
    assert set(result["info"]["learner"]) == {"p0", "p1"}
    with open(tmp_path / "progress.csv", newline="") as f:
        row = list(csv.DictReader(f))[-1]
    assert float(row["policy_reward_mean/p1"]) == pytest.approx(result["policy_reward_mean"]["p1"])


def test_stop_on_time_total_s_as_rllib():
    """RLlib's stop keys are lower bounds on the result: ``time_total_s`` too (pong-dqn.yaml's)."""
    results = [{"time_total_s": 7.5, "timesteps_total": 100, "episode_reward_mean": 1.0, "training_iteration": 2},
               {"time_total_s": 9.0, "timesteps_total": 100, "episode_reward_mean": 3.0, "training_iteration": 2}]
    assert loop.should_stop(results, {"time_total_s": 7, "timesteps_total": 1000}) == "time_total_s >= 7"
    assert loop.should_stop(results, {"time_total_s": 8, "timesteps_total": 1000}) is None  # every seed must meet it


@pytest.mark.parametrize("env, want", [
    ({}, "{xdg}/jaxdqn/xla"),
    ({"JAX_COMPILATION_CACHE_DIR": "{xdg}/mine"}, "{xdg}/mine"),
    ({"JAXDQN_COMPILATION_CACHE": "0"}, "None"),
])
def test_train_and_evaluate_keep_their_programs_in_jaxs_persistent_cache(tmp_path, env, want):
    """``jaxdqn train`` / ``evaluate`` use JAX's persistent compilation cache (a second run of a
    config loads its programs): the user's JAX_COMPILATION_CACHE_DIR, else
    $XDG_CACHE_HOME/jaxdqn/xla; JAXDQN_COMPILATION_CACHE=0 turns it off."""
    import os

    base = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT"))}
    extra = {k: v.format(xdg=tmp_path) for k, v in env.items()}
    code = ("import jax; from jaxdqn.cli import enable_compilation_cache as e; e(); c = jax.config; "
            "print(c.jax_compilation_cache_dir, c.jax_persistent_cache_min_compile_time_secs, "
            "c.jax_compilation_cache_max_size)")
    done = subprocess.run([sys.executable, "-c", code], env={**base, **extra, "XDG_CACHE_HOME": str(tmp_path)},
                          capture_output=True, text=True, check=True)
    directory, min_seconds, max_size = done.stdout.split()
    assert directory == want.format(xdg=tmp_path)
    if not env:
        assert (float(min_seconds), int(max_size)) == (0.5, cli.CACHE_MAX_BYTES)
