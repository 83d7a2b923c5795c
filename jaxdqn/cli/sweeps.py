"""``jaxdqn train`` of a ``grid_search`` sweep: its trials as programs, Tune's folders and the
summary."""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
from typing import Any, Mapping

from jaxdqn.cli.documents import RUN_NAMES, Run
from jaxdqn.cli.loop import StopSignal, mean_over, run_loop, stop_of
from jaxdqn.cli.usage import as_usage_errors


def trial_folder(algo: str, env: str, index: int, variables: Mapping[str, Any]) -> str:
    """A trial's folder name in Tune's layout: ``DQN_CartPole-v1_00003_3_lr=0.001``."""
    from jaxdqn import sweep

    name = f"{RUN_NAMES[algo]}_{env}_{index:05d}_{sweep.trial_name(index, variables)}"
    return name.replace("/", "_")[:200]


def train_sweep(args: argparse.Namespace, run: Run, experiment: pathlib.Path, loggers: list[str],
                checkpoints: tuple[int, int | None, bool], stop_signal: StopSignal | None = None) -> int:
    """Every trial of a ``grid_search`` sweep: the trials that differ only in traced keys as one
    vmapped program each (``sweep.group_trials``), one Tune-style folder per trial, then a
    summary table (``summary.csv`` too)."""
    from jaxdqn import sweep
    from jaxdqn.config import algo_of, to_dict
    from jaxdqn.logging import RunLogger
    from jaxdqn.trainer import Trainer

    configs = [c for _, c in run.trials]
    algo, seeds = algo_of(run.config), run.seeds
    with as_usage_errors():
        programs = sweep.group_trials(configs)
        trainers = []
        for members in programs:  # every program is checked before any compiles
            keys = sweep.differing_keys([configs[i] for i in members])
            overrides = [{k: sweep.flat_keys(configs[i])[k] for k in keys} for i in members]
            # A program of one trial is a plain run (an Atari trial is always one: no vmapped trials).
            trainers.append(Trainer(configs[members[0]], num_seeds=seeds,
                                    trials=overrides if len(members) > 1 else None))
    every, keep, at_end = checkpoints
    writer = trainers[0].layout.process_index == 0
    quiet = args.quiet or not writer
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, file=sys.stderr))
    say(f"jaxdqn: {algo} sweep of {len(configs)} trials x {seeds or 1} seed(s) as {len(programs)} program(s) "
        f"(trials differing only in traced keys share one), config from {run.source}; experiment folder "
        f"{experiment}")
    folders = [experiment / trial_folder(algo, c.env, i, v) for i, (v, c) in enumerate(run.trials)]
    loggers_of: dict[int, Any] = {}
    try:
        with as_usage_errors():  # every logger starts (W&B runs included) before anything trains
            for members in programs:
                stop = stop_of(run, configs[members[0]])
                for i in members:
                    params = {"algo": algo, "seeds": seeds or 1, "stop": stop, **to_dict(configs[i])}
                    loggers_of[i] = (RunLogger(folders[i], seeds, loggers, params=params, group=experiment.name)
                                     if writer else None)
        summary = []
        for k, members in enumerate(programs):
            trainer, trainers[k] = trainers[k], None  # a finished program's state (its replay) is freed
            say(f"program {k + 1}/{len(programs)}: trials {members}, {trainer.layout.describe()}")
            program_dir = experiment / f"program_{k}"
            outcome = run_loop(trainer, stop_of(run, configs[members[0]]), [loggers_of[i] for i in members],
                               program_dir, every, keep, quiet, label=f"program {k + 1}/{len(programs)}", stop_signal=stop_signal)
            path = trainer.save(program_dir, keep=keep) if at_end else ""
            del trainer
            for i, (results, reason) in zip(members, outcome):
                summary.append((i, results, reason, path))
    finally:
        for logger in loggers_of.values():
            if logger is not None:
                logger.close()
    summary.sort(key=lambda row: row[0])
    if writer:
        write_summary(experiment / "summary.csv", run, folders, summary)
    print_sweep_summary(run, summary, experiment, quiet=quiet)
    return 0


def write_summary(path: pathlib.Path, run: Run, folders: list[pathlib.Path], summary: list[Any]) -> None:
    """One row per trial: its folder, grid variables, and final results (means over seeds)."""
    import csv

    names = run.grid_keys
    columns = ["trial", *names, "episode_reward_mean", "episode_reward_mean_min_over_seeds",
               "episode_reward_mean_max_over_seeds", "episode_len_mean", "timesteps_total", "training_iteration",
               "time_total_s", "stop", "checkpoint"]
    tmp = path.with_suffix(".csv.tmp")
    with open(tmp, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(columns)
        for i, results, reason, checkpoint_path in summary:
            rewards = [r["episode_reward_mean"] for r in results]
            out.writerow([folders[i].name, *(run.trials[i][0].get(n, "") for n in names),
                          mean_over(results, "episode_reward_mean"), min(rewards), max(rewards),
                          mean_over(results, "episode_len_mean"), results[0]["timesteps_total"],
                          results[0]["training_iteration"], results[0]["time_total_s"], reason, checkpoint_path])
    os.replace(tmp, path)


def print_sweep_summary(run: Run, summary: list[Any], experiment: pathlib.Path, *, quiet: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    names = run.grid_keys
    table = Table(title=f"{len(summary)} trials, {run.seeds or 1} seed(s) each")
    for column in ("trial", *names, "reward_mean", "min-max", "timesteps", "stop"):
        table.add_column(column, justify="right")
    for i, results, reason, _ in summary:
        rewards = [r["episode_reward_mean"] for r in results]
        table.add_row(str(i), *(str(run.trials[i][0].get(n, "")) for n in names),
                      f"{mean_over(results, 'episode_reward_mean'):.1f}", f"{min(rewards):.1f}-{max(rewards):.1f}",
                      str(results[0]["timesteps_total"]), reason)
    Console(quiet=quiet).print(table)
    print(f"experiment: {experiment} (summary.csv; jaxdqn plot {experiment})")
