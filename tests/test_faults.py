"""Faults a user meets, each kept as a test so that the count cannot slide back: run folders that
hold another run or are in use, damaged checkpoints, failed saves, interrupts, torn logs and
filesystem mistakes. (Bad config values: tests/test_config.py, test_cli.py's usage errors.)"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from jaxdqn import checkpoint, cli
from jaxdqn.cli.folders import FolderLock
from jaxdqn.logging import read_progress

SMALL = ["--set", "buffer_size=2000", "--set", "learning_starts=64", "--set", "num_envs_per_worker=4",
         "--set", "timesteps_per_iteration=256", "--set", "model.fcnet_hiddens=[16]", "--set", "hiddens=[16]",
         "--set", "train_batch_size=16", "--set", "training_intensity=1", "--quiet"]


def rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def one_line_error(capsys, code, argv):
    assert cli.main(argv) == code
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    return err


@pytest.fixture(scope="module")
def run3(tmp_path_factory):
    """One seed, 3 iterations, a checkpoint after each."""
    out = tmp_path_factory.mktemp("faults") / "run"
    assert cli.main(["train", "--timesteps", "768", "--out", str(out), "--checkpoint-every", "1", *SMALL]) == 0
    return out


def test_a_folder_that_holds_a_run_is_refused_unless_overwrite(run3, tmp_path, capsys):
    out = tmp_path / "run"
    shutil.copytree(run3, out)
    before = sorted(p.name for p in out.iterdir())
    err = one_line_error(capsys, 2, ["train", "--timesteps", "256", "--out", str(out), *SMALL])
    assert "already holds a run (checkpoint_000001" in err and "--resume" in err and "--overwrite" in err
    assert sorted(p.name for p in out.iterdir()) == before  # nothing touched
    assert cli.main(["train", "--timesteps", "256", "--out", str(out), "--overwrite", *SMALL]) == 0
    assert [r["training_iteration"] for r in rows(out / "result.json")] == [1]
    assert [p.name for p in checkpoint.finished(out)] == ["checkpoint_000001"]
    err = one_line_error(capsys, 2, ["train", "--resume", str(out), "--overwrite"])
    assert "drop --overwrite" in err


def test_a_folder_in_use_by_another_process_is_refused_naming_it(tmp_path, capsys):
    out = tmp_path / "run"
    holder = FolderLock(out).acquire()  # another open file description: flock conflicts as across processes
    try:
        err = one_line_error(capsys, 2, ["train", "--timesteps", "256", "--out", str(out), *SMALL])
        assert f"is in use by process {os.getpid()} on " in err
    finally:
        holder.release()
    assert not (out / "result.json").exists()


def test_resume_cuts_the_logs_back_to_the_checkpoint_and_drops_a_torn_line(run3, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(run3, out)
    shutil.rmtree(out / "checkpoint_000003")  # the run died after logging iteration 3, before its save
    with open(out / "progress.csv", "a") as f:
        f.write("3.5,12")  # a kill in the middle of a row
    with open(out / "result.json", "a") as f:
        f.write('{"training_iteration": 4, "episode_rew')
    assert read_progress(out)[0][-1]["training_iteration"] == 3  # readers skip the torn line
    assert cli.main(["train", "--resume", str(out), "--timesteps", "1024", "--quiet"]) == 0
    iterations = [r["training_iteration"] for r in rows(out / "result.json")]
    assert iterations == [1, 2, 3, 4]  # 3 once: the row logged before the crash was cut
    assert [row["training_iteration"] for row in read_progress(out)[0]] == [1, 2, 3, 4]
    assert (out / "progress.csv").read_text().count("\n") == 5  # header and four whole rows


def test_a_damaged_newest_checkpoint_is_passed_over_saying_so(run3, tmp_path, capsys):
    out = tmp_path / "run"
    shutil.copytree(run3, out)
    newest = out / "checkpoint_000003"
    damaged = max((p for p in (newest / "state").rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    data = bytearray(damaged.read_bytes())
    data[100:164] = np.random.default_rng(1).integers(0, 256, 64, dtype=np.uint8).tobytes()
    damaged.write_bytes(bytes(data))
    capsys.readouterr()
    err = one_line_error(capsys, 2, ["evaluate", str(newest)])  # a named checkpoint: refused
    assert f"checkpoint {str(newest)!r} is damaged: {damaged.relative_to(newest)} does not match its checksum" in err
    assert cli.main(["train", "--resume", str(out), "--timesteps", "1024", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "checkpoint_000003' is damaged" in err and "resuming from checkpoint_000002" in err
    assert [r["training_iteration"] for r in rows(out / "result.json")] == [1, 2, 3, 4]


def test_a_failed_save_stops_the_run_with_one_line_and_exit_1(tmp_path):
    """The file size limit stands in for a full disk: the write fails with EFBIG."""
    out = tmp_path / "run"
    script = f"""
import resource, signal, sys
from jaxdqn import cli
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, resource.RLIM_INFINITY))
sys.exit(cli.main({["train", "--timesteps", "2048", "--out", str(out), "--checkpoint-every", "1", *SMALL]!r}))
"""
    env = {**os.environ, "JAX_ENABLE_COMPILATION_CACHE": "false"}  # its files would meet the limit too
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 1, done.stderr[-3000:]
    err = done.stderr.strip().splitlines()
    assert len(err) == 1 and "could not save checkpoint" in err[0] and "File too large" in err[0], err
    failed = err[0].split("could not save checkpoint '")[1].split("'")[0]
    assert failed.startswith(str(out / "checkpoint_00000")) and not os.path.exists(failed)
    for path in out.glob("checkpoint_*"):  # what was saved before is intact
        checkpoint.verify(path)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_saves_a_checkpoint_and_says_how_to_resume(tmp_path, signum):
    out = tmp_path / "run"
    process = subprocess.Popen([sys.executable, "-m", "jaxdqn.cli", "train", "--timesteps", "10000000", "--out",
                                str(out), *SMALL], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 240
        while not (out / "result.json").exists() or not (out / "result.json").read_text().count("\n"):
            assert time.time() < deadline and process.poll() is None
            time.sleep(0.2)
        process.send_signal(signum)
        _, err = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 128 + signum, err[-2000:]
    saved = checkpoint.finished(out)
    assert len(saved) == 1 and "Traceback" not in err
    assert f"checkpoint saved: {saved[0]}; continue with: jaxdqn train --resume {out}" in err
    iteration = checkpoint.read_meta(saved[0])["iteration"]
    assert rows(out / "result.json")[-1]["training_iteration"] == iteration


def test_an_interrupt_before_the_first_iteration_exits_at_once_with_130(tmp_path):
    out = tmp_path / "run"
    process = subprocess.Popen([sys.executable, "-m", "jaxdqn.cli", "train", "--timesteps", "10000000", "--out",
                                str(out), *SMALL], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 240
        while not (out / "params.json").exists():  # the run folder is claimed: the plan compiles next
            assert time.time() < deadline and process.poll() is None
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130, err[-2000:]
    assert "SIGINT: stopped at once (nothing saved since the last checkpoint)" in err and "Traceback" not in err


@pytest.mark.parametrize("make, flag, message", [
    (lambda p: p.write_text("x"), "--out", "is a file, not a folder"),
    (lambda p: (p.parent / "file").write_text("x"), "--out", "cannot be created: "),
    (lambda p: p.mkdir(), "--config", "is a folder: give a YAML file"),
])
def test_filesystem_mistakes_are_usage_errors_before_anything_compiles(tmp_path, capsys, make, flag, message):
    path = tmp_path / "target"
    make(path)
    target = tmp_path / "file" / "run" if "created" in message else path
    argv = ["train", flag, str(target), *SMALL]
    started = time.perf_counter()
    err = one_line_error(capsys, 2, argv)
    assert message in err and time.perf_counter() - started < 5  # no compile before the check


def test_an_unwritable_out_folder_is_a_usage_error(tmp_path, capsys, monkeypatch):
    import tempfile

    def refuse(*args, **kwargs):  # root ignores permission bits, so the refusal is simulated
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "TemporaryFile", refuse)
    err = one_line_error(capsys, 2, ["train", "--out", str(tmp_path / "run"), *SMALL])
    assert "cannot be written: Permission denied" in err


def test_a_diverged_run_stops_and_its_state_is_neither_saved_nor_evaluated(tmp_path):
    import jax
    import jax.numpy as jnp

    from jaxdqn import Diverged, Trainer
    from tests.test_trainer import CONFIG

    trainer = Trainer(CONFIG)
    trainer.train()
    good = trainer.save(tmp_path)
    state = trainer.state  # a blown-up step, as lr=1e38 makes one: one weight becomes NaN
    poisoned = jax.tree_util.tree_map(lambda x: x, state.learner)
    params = poisoned["default_policy"].params
    leaves, tree = jax.tree_util.tree_flatten(params)
    leaves[0] = leaves[0].at[(0,) * leaves[0].ndim].set(jnp.nan)
    poisoned["default_policy"] = poisoned["default_policy"]._replace(params=jax.tree_util.tree_unflatten(tree, leaves))
    trainer._state = state._replace(learner=poisoned)
    with pytest.raises(Diverged, match=r"training diverged in iteration 2: policy default_policy's (loss|grad_gnorm) "
                                       r"is nan"):
        trainer.train()
    with pytest.raises(Diverged, match="cannot save: the learner's parameters hold non-finite values"):
        trainer.save(tmp_path)
    with pytest.raises(Diverged, match="cannot evaluate"):
        trainer.evaluate()
    assert [str(p) for p in checkpoint.finished(tmp_path)] == [good]


def test_the_command_stops_a_diverged_run_with_one_line_and_exit_1(tmp_path, capsys):
    out = tmp_path / "run"
    err = one_line_error(capsys, 1, ["train", "--timesteps", "1024", "--out", str(out), "--set", "lr=1e38",
                                     "--set", "lr_schedule=null", "--checkpoint-every", "1", *SMALL])
    assert "training diverged in iteration" in err and "lower lr" in err
    kept = checkpoint.finished(out)
    assert ("no checkpoint was saved" in err) if not kept else (f"the last checkpoint, {kept[-1]}" in err)
    logged = rows(out / "result.json") if (out / "result.json").exists() else []
    assert len(logged) == len(kept)  # the diverged iteration is neither logged nor saved
    assert all(np.isfinite(r["info"]["learner"]["default_policy"]["learner_stats"]["loss"]) for r in logged)


@pytest.mark.parametrize("argv, message", [
    (["--timesteps", "100000000000000000000000"], "total_timesteps=100000000000000000000000 is invalid: must be an int "
     "[1, 2000000000]"),
    (["--set", "n_step=100000"], "n_step=100000 is invalid: must be an int [1, 1000]"),
    (["--set", "training_intensity=1e9"], "asks for 1.5625e+07 SGD steps per env step with train_batch_size=64"),
    (["--set", "prioritized_replay_beta=3.0"], "prioritized_replay_beta=3.0 is invalid: must be a number >= 0.0 and "
     "<= 1.0"),
    (["--set", "final_prioritized_replay_beta=-1"], "final_prioritized_replay_beta=-1 is invalid"),
    (["--timesteps", "2000", "--set", "total_timesteps=500"], "--set total_timesteps=500 contradicts --timesteps "
     "2000: give the run's length once"),
    (["--keep", "0"], "--keep 0 is invalid: must be >= 1"),
    (["--keep", "-1"], "--keep -1 is invalid: must be >= 1"),
])
def test_values_that_would_hang_or_run_forever_are_refused_with_the_limit(argv, message, capsys, tmp_path):
    err = one_line_error(capsys, 2, ["train", "--out", str(tmp_path / "run"), "--quiet", *argv])
    assert message in err, err


def test_set_total_timesteps_is_the_run_length_params_json_records(tmp_path):
    out = tmp_path / "run"
    assert cli.main(["train", "--out", str(out), *SMALL, "--set", "total_timesteps=600"]) == 0
    params = json.loads((out / "params.json").read_text())
    assert params["total_timesteps"] == 600 and params["stop"]["timesteps_total"] == 600
    steps = [r["timesteps_total"] for r in rows(out / "result.json")]
    assert steps[-1] >= 600 and all(s < 600 for s in steps[:-1])  # the stop follows it


def test_resume_with_another_timesteps_per_iteration(tmp_path):
    """docs/guide.md: resumable keys may change on resume; the episode rings are resized."""
    from jaxdqn import Trainer
    from tests.test_trainer import CONFIG

    trainer = Trainer(CONFIG)
    first = trainer.train()
    path = trainer.save(tmp_path)
    resumed = Trainer.from_checkpoint(path, timesteps_per_iteration=1024)
    again = resumed.train()
    assert again["training_iteration"] == 2 and again["timesteps_this_iter"] >= 1024
    assert again["episodes_total"] == first["episodes_total"] + again["episodes_this_iter"]
    # (A smaller ring keeps the newest episodes: test_a_resized_ring_keeps_the_newest_episodes_in_order.)


@pytest.mark.parametrize("old, new, written", [(8, 20, 5), (8, 20, 13), (20, 8, 3), (20, 8, 47), (8, 8, 30)])
def test_a_resized_ring_keeps_the_newest_episodes_in_order(old, new, written):
    import jax.numpy as jnp

    from jaxdqn import metrics

    ring = metrics.empty_ring(old)
    returns = np.arange(1, written + 1, dtype=np.float32)
    for start in range(0, written, 3):  # a few episodes at a time, as steps end them
        chunk = returns[start:start + 3]
        ring = metrics.record(ring, jnp.ones(len(chunk), bool), jnp.asarray(chunk), jnp.asarray(chunk, jnp.int32))
    resized = metrics.resize(ring, new)
    report = metrics.episode_report(resized, lambda x: x[None], jnp.int32(new))
    newest = returns[-min(old, new, written):]
    assert float(report["episode_reward_mean"]) == pytest.approx(newest.mean())
    assert float(report["episode_reward_min"]) == newest.min() and int(report["episodes_total"]) == written
    ring2 = metrics.record(resized, jnp.ones(1, bool), jnp.asarray([100.0]), jnp.asarray([100], jnp.int32))
    report2 = metrics.episode_report(ring2, lambda x: x[None], jnp.int32(1))
    assert float(report2["episode_reward_mean"]) == 100.0  # the next episode lands after the newest


@pytest.mark.parametrize("batch, devices, suggested", [(3, 4, "such as 4 or 8"), (30, 4, "such as 28 or 32")])
def test_a_divisibility_error_suggests_two_distinct_values(batch, devices, suggested):
    from jaxdqn import DQNConfig
    from jaxdqn.plan import split_totals

    with pytest.raises(ValueError, match=f"train_batch_size={batch} is invalid with num_devices={devices}.*{suggested}"):
        split_totals(DQNConfig(train_batch_size=batch, buffer_size=4000, num_envs_per_worker=4), devices)


class BlowingUpTrainer:
    """Stands in for a Trainer in ``run_loop``: one seed whose Q values grow 1000x per iteration."""

    trials = None

    def __init__(self):
        self.iteration = 0
        self.timesteps_total = 0

    def train(self):
        self.iteration += 1
        self.timesteps_total += 100
        q = 10.0 ** (3 * self.iteration)
        stats = {"min_q": -q, "max_q": q}
        return {"episode_reward_mean": 1.0, "timesteps_total": self.timesteps_total,
                "training_iteration": self.iteration, "num_env_steps_sampled_throughput_per_sec": 1.0,
                "info": {"learner": {"default_policy": {"learner_stats": stats}}}}


def test_q_values_running_away_are_reported_once_while_still_finite(tmp_path, capsys):
    from jaxdqn.cli import loop

    loop.run_loop(BlowingUpTrainer(), {"timesteps_total": 600}, [None], tmp_path, 0, None, True)
    err = capsys.readouterr().err
    assert err.count("warning: |Q| reaches") == 1 and "|Q| reaches 1e+12 in iteration 4" in err
    assert "lower lr" in err
