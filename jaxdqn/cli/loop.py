"""The run loop of ``jaxdqn train``: ``Trainer.train()`` until a stop criterion holds, with a
live progress bar, loggers and checkpoints, and the summary table at the end."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import math
import os
import pathlib
import signal
import sys
import threading
from typing import Any, Mapping

from jaxdqn.cli.documents import STOP_KEYS, Run
from jaxdqn.errors import Diverged


def checkpointing(args: argparse.Namespace, run: Run | None) -> tuple[int, int | None, bool]:
    """``(every, keep, at_end)``: the flags, else the YAML's Tune keys (``checkpoint_freq``,
    ``keep_checkpoints_num``, ``checkpoint_at_end``), else every 0 (never), keep all, at the end."""
    options = run.options if run is not None else {}
    every = args.checkpoint_every if args.checkpoint_every else options.get("checkpoint_freq", 0)
    keep = args.keep if args.keep is not None else options.get("keep_checkpoints_num")
    return every, keep, options.get("checkpoint_at_end", True)


def default_folder(run: Run, algo: str, env: str) -> pathlib.Path:
    """``local_dir/<experiment name>`` for an RLlib YAML with ``local_dir`` (Tune's layout), else
    ``results/<algo>_<env>_<time>``."""
    if "local_dir" in run.options:
        return pathlib.Path(run.options["local_dir"]).expanduser() / run.options["name"]
    return pathlib.Path(f"results/{algo}_{env}_{datetime.datetime.now().strftime('%Y-%m-%d_%H-%M-%S')}")


def stop_of(run: Run, config: Any) -> dict[str, Any]:
    """The stop criteria of a config of ``run``: the run's, ending at its ``total_timesteps``."""
    return {**run.stop, "timesteps_total": run.stop.get("timesteps_total", config.total_timesteps)}


def should_stop(results: list[dict[str, Any]], stop: Mapping[str, Any]) -> str | None:
    """The first stop criterion met by every seed (RLlib's ``stop``: each key is a lower bound)."""
    for key in STOP_KEYS:  # timesteps_total is always set (the run's length)
        if key in stop and all(not math.isnan(r[key]) and r[key] >= stop[key] for r in results):
            return f"{key} >= {stop[key]}"
    return None


def mean_over(results: list[dict[str, Any]], key: str) -> float:
    values = [r[key] for r in results if not math.isnan(r[key])]
    return sum(values) / len(values) if values else math.nan


Q_WARNING = 1e9  # |Q| beyond this is reported once: no tuned task has returns near it


class Interrupted(Exception):
    """Ctrl-C or SIGTERM stopped the run after the iteration it was in; ``path`` is the checkpoint
    saved then."""

    def __init__(self, signum: int, path: str, iteration: int, *, sweep: bool) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name} after iteration {iteration}; checkpoint "
                         f"saved: {path}")
        self.signum, self.path, self.iteration, self.sweep = signum, path, iteration, sweep


class StopSignal:
    """While open: SIGINT (Ctrl-C) or SIGTERM. Once the run loop has ``armed`` it (an iteration
    has finished, so there is a state to save), the first signal asks it to save a checkpoint at
    the end of the current iteration and stop; before that (imports, compile), or at a second
    signal, the process exits at once with ``128 + signal`` (no teardown: the interpreter's can
    crash while XLA compiles). Outside the main thread (signals cannot be caught there) it does
    nothing."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.armed = False
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> "StopSignal":
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self.previous[signum] = signal.signal(signum, self.handle)
        return self

    def handle(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if not self.armed or self.received is not None:
            print(f"\njaxdqn: {name}: stopped at once (nothing saved since the last checkpoint)", file=sys.stderr,
                  flush=True)
            sys.stdout.flush()
            os._exit(128 + signum)
        self.received = signum
        print(f"\njaxdqn: {name}: saving a checkpoint at the end of this iteration, then stopping (Ctrl-C again "
              "stops at once)", file=sys.stderr, flush=True)

    def __exit__(self, *exc: Any) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)


def run_loop(trainer: Any, stop: Mapping[str, Any], loggers: list[Any], run_dir: pathlib.Path, every: int,
             keep: int | None, quiet: bool, label: str = "training", stop_signal: StopSignal | None = None
             ) -> list[tuple[list[dict[str, Any]], str]]:
    """``train()`` until a stop criterion holds, with a live progress bar and checkpoints.

    ``loggers``: one per trial (one for a run without trials). Each trial stops on its own, as
    in Tune: the first iteration at which every seed of it meets a criterion is its last logged
    one (``done: True``); the program runs until every trial has stopped. Returns each trial's
    ``(last results per seed, reason)``. ``stop_signal``: the command's (one of its own if None);
    a signal it received ends the loop with ``Interrupted`` after a checkpoint."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    total = int(stop["timesteps_total"])
    columns = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("return {task.fields[ret]}"), TextColumn("{task.fields[sps]} steps/s"),
               TimeRemainingColumn()]
    outcome: list[tuple[list[dict[str, Any]], str] | None] = [None] * len(loggers)
    warned = False
    signals = contextlib.nullcontext(stop_signal) if stop_signal is not None else StopSignal()
    with Progress(*columns, console=Console(stderr=True), disable=quiet) as progress, signals as stop_signal:
        task = progress.add_task(label, total=total, completed=min(trainer.timesteps_total, total),
                                 ret="-", sps="-")
        while True:
            try:
                out = trainer.train()
            except Diverged as e:
                raise Diverged(f"{e}; {kept_checkpoint(run_dir)}") from None
            stop_signal.armed = True  # from now on a signal saves this state
            per_trial = out if trainer.trials is not None else [out]
            per_trial = [t if isinstance(t, list) else [t] for t in per_trial]
            q = max((abs(s["learner_stats"][k]) for results in per_trial for r in results
                     for s in r.get("info", {}).get("learner", {}).values() for k in ("min_q", "max_q")),
                    default=0.0)
            if q > Q_WARNING and not warned:
                warned = True
                print(f"jaxdqn: warning: |Q| reaches {q:.3g} in iteration {trainer.iteration}: the values are "
                      "diverging (lower lr, or clip gradients with grad_clip)", file=sys.stderr)
            for t, results in enumerate(per_trial):
                if outcome[t] is not None:
                    continue  # stopped earlier: Tune would not report it again
                met = should_stop(results, stop)
                if met:
                    for r in results:
                        r["done"] = True
                    outcome[t] = (results, met)
                if loggers[t] is not None:
                    loggers[t].write(results)
            runs = [r for results in per_trial for r in results]
            first = runs[0]
            mean_return = mean_over(runs, "episode_reward_mean")
            progress.update(task, completed=min(first["timesteps_total"], total),
                            ret="-" if math.isnan(mean_return) else f"{mean_return:.1f}",
                            sps=f"{first['num_env_steps_sampled_throughput_per_sec'] * len(runs):,.0f}")
            if stop_signal.received is not None:
                raise Interrupted(stop_signal.received, trainer.save(run_dir, keep=keep), trainer.iteration,
                                  sweep=trainer.trials is not None or label != "training")
            if every and trainer.iteration % every == 0:
                trainer.save(run_dir, keep=keep)
            if all(o is not None for o in outcome):
                return outcome


def kept_checkpoint(run_dir: pathlib.Path) -> str:
    """Where the last good state is, after a run stopped."""
    from jaxdqn import checkpoint

    found = checkpoint.finished(run_dir)
    return f"the last checkpoint, {found[-1]}, holds the state before it" if found else "no checkpoint was saved"


# jax.monitoring's events of one compile: tracing to a jaxpr, lowering to MLIR, XLA's compile
COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration", "/jax/core/compile/jaxpr_to_mlir_module_duration",
                  "/jax/core/compile/backend_compile_duration")
_COMPILE_SECONDS = [0.0, False]  # seconds so far in this process; whether the listener is registered


def compile_seconds() -> float:
    """Seconds this process has spent compiling JAX programs since the first call (which
    registers a ``jax.monitoring`` listener; a process has one)."""
    import jax

    if not _COMPILE_SECONDS[1]:
        def listen(event: str, duration: float, **kwargs: Any) -> None:
            if event in COMPILE_EVENTS:
                _COMPILE_SECONDS[0] += duration

        jax.monitoring.register_event_duration_secs_listener(listen)
        _COMPILE_SECONDS[1] = True
    return float(_COMPILE_SECONDS[0])


def print_summary(results: list[dict[str, Any]], reason: str, path: str | None, *, quiet: bool,
                  compile_s: float | None = None) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"stopped: {reason}")
    # Short headers for RLlib's episode_reward_mean, episode_len_mean, episodes_total,
    # timesteps_total, training_iteration, time_total_s: the table fits 80 columns.
    for column in ("seed", "reward_mean", "len_mean", "episodes", "timesteps", "iteration", "time_s"):
        table.add_column(column, justify="right")
    for k, r in enumerate(results):
        table.add_row(str(k), f"{r['episode_reward_mean']:.1f}", f"{r['episode_len_mean']:.1f}",
                      str(r["episodes_total"]), str(r["timesteps_total"]), str(r["training_iteration"]),
                      f"{r['time_total_s']:.1f}")
    console = Console(quiet=quiet)
    console.print(table)
    if compile_s is not None:
        console.print(f"compile: {compile_s:.1f} s (tracing, lowering and XLA compiles of this run)")
    print(f"checkpoint: {path}" if path else "no final checkpoint (checkpoint_at_end: false)")
