"""The ``train`` and ``evaluate`` commands."""

from __future__ import annotations

import argparse
import contextlib
import pathlib
import sys
from typing import Iterator

from jaxdqn.cli.documents import Run, build_run, multi_process
from jaxdqn.cli.folders import FolderLock, check_fresh, check_writable, clear
from jaxdqn.cli.loop import StopSignal, checkpointing, compile_seconds, default_folder, print_summary, run_loop, stop_of
from jaxdqn.cli.sweeps import train_sweep
from jaxdqn.cli.usage import UsageError, as_usage_errors


def start_processes(args: argparse.Namespace, fake_devices: int | None = None) -> None:
    """Forced host devices and ``jax.distributed``, before JAX computes anything."""
    from jaxdqn import distributed as processes

    distributed = multi_process(args)
    local = args.local_devices or fake_devices
    with as_usage_errors():
        if distributed:
            if args.process_id is None and args.num_processes is not None:
                raise UsageError("--num-processes needs --process-id (or neither, for cluster auto-detection)")
            processes.initialize(args.coordinator, args.num_processes, args.process_id, local_device_count=local)
        elif local:
            try:
                processes.force_host_devices(local)
            except RuntimeError as e:
                raise UsageError(str(e)) from None


def train(args: argparse.Namespace) -> int:
    from jaxdqn.logging import check_loggers

    loggers = args.logger or ["csv"]
    with as_usage_errors():
        check_loggers(loggers)
    fake_devices, run = None, None
    if args.resume:
        clash = [f for f in ("config", "algo", "env", "set", "seeds", "overwrite") if getattr(args, f)]
        if clash:
            raise UsageError(f"--resume takes the config from the checkpoint; drop --{clash[0]}")
    else:
        with as_usage_errors():
            run = build_run(args)
        fake_devices = run.fake_devices
    with StopSignal() as stop_signal:  # from here on, Ctrl-C stops cleanly
        return train_from(args, run, fake_devices, loggers, stop_signal)


def train_from(args: argparse.Namespace, run: Run | None, fake_devices: int | None, loggers: list[str],
               stop_signal: StopSignal) -> int:
    """``jaxdqn train`` once its arguments are checked: processes, the run folder, the run."""
    from jaxdqn.config import algo_of

    every, keep, at_end = checkpointing(args, run)
    start_processes(args, fake_devices)  # before anything imports gymnax (which starts JAX)
    import jax

    if args.resume:
        with as_usage_errors():
            resumed = resume_point(args.resume)
        run_dir = pathlib.Path(args.out) if args.out else resumed.resolve().parent
    else:
        run_dir = pathlib.Path(args.out) if args.out else default_folder(run, algo_of(run.config), run.config.env)
    writer = jax.process_index() == 0  # one process writes logs and checkpoints
    fresh = not args.resume or run_dir.resolve() != resumed.resolve().parent
    if args.resume:
        args.resume = str(resumed)  # the intact checkpoint found, once
    with claimed(run_dir, fresh=fresh, overwrite=args.overwrite, writer=writer):
        return train_in(args, run, run_dir, writer, loggers, (every, keep, at_end), stop_signal)


def resume_point(path: str) -> pathlib.Path:
    """The checkpoint ``--resume`` names, or a run folder's newest intact one, saying which newer
    damaged ones it passed over."""
    from jaxdqn import checkpoint

    folder = pathlib.Path(path)
    if checkpoint.PATTERN.match(folder.name) or not folder.is_dir():
        return checkpoint.resolve(folder)
    found, passed_over = checkpoint.newest_intact(folder)
    if found is None:
        return checkpoint.resolve(folder)  # the error: none at all, or every one damaged
    for line in passed_over:
        print(f"jaxdqn: {line}; resuming from {found.name}, the newest intact one", file=sys.stderr)
    return found


def train_in(args: argparse.Namespace, run: Run | None, run_dir: pathlib.Path, writer: bool, loggers: list[str],
             checkpoints: tuple[int, int | None, bool], stop_signal: StopSignal) -> int:
    """``jaxdqn train`` in its claimed run folder."""
    from jaxdqn import checkpoint
    from jaxdqn.config import algo_of, to_dict
    from jaxdqn.logging import RunLogger, cut_logs
    from jaxdqn.trainer import Trainer

    every, keep, at_end = checkpoints
    compiled_before = compile_seconds()
    if args.resume:
        resumed = checkpoint.resolve(args.resume)
        overrides = {"total_timesteps": args.timesteps} if args.timesteps is not None else {}
        with as_usage_errors():
            if checkpoint.read_meta(resumed).get("trials") is not None:
                raise UsageError(f"--resume {args.resume}: a sweep's checkpoint resumes through the Python API "
                                 "(jaxdqn.Trainer.from_checkpoint), not the command line")
            trainer = Trainer.from_checkpoint(resumed, **overrides)
        config, seeds, source = trainer.config, trainer.num_seeds, f"checkpoint {resumed}"
        stop = {"timesteps_total": config.total_timesteps}
        if writer:
            cut_logs(run_dir, trainer.iteration)  # rows after the checkpoint are logged again
    else:
        if run.is_sweep:
            return train_sweep(args, run, run_dir, loggers, (every, keep, at_end), stop_signal)
        config, seeds, source = run.config, run.seeds, run.source
        stop = stop_of(run, config)
        with as_usage_errors():
            trainer = Trainer(config, num_seeds=seeds)
    quiet = args.quiet or not writer
    params = {"algo": algo_of(config), "seeds": seeds or 1, "stop": stop, **to_dict(config)}
    with as_usage_errors():
        logger = RunLogger(run_dir, seeds, loggers, params=params) if writer else None
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, file=sys.stderr))
    say(f"jaxdqn: {algo_of(config)} on {config.env}, {seeds or 1} seed(s), {trainer.layout.describe()}, "
        f"config from {source}; run folder {run_dir}")
    try:
        outcome = run_loop(trainer, stop, [logger], run_dir, every, keep, quiet, stop_signal=stop_signal)
    finally:
        if logger is not None:
            logger.close()
    path = trainer.save(run_dir, keep=keep) if at_end else None
    results, reason = outcome[0]
    print_summary(results, reason, path, quiet=quiet, compile_s=compile_seconds() - compiled_before)
    return 0


@contextlib.contextmanager
def claimed(run_dir: pathlib.Path, *, fresh: bool, overwrite: bool, writer: bool) -> Iterator[None]:
    """The run folder checked (writable; empty for a new run, unless ``overwrite`` clears it) and
    locked, before anything compiles; released at the end. Only the writing process claims it."""
    if not writer:
        yield
        return
    check_writable(run_dir)
    if fresh:
        check_fresh(run_dir, overwrite=overwrite)
    existed = run_dir.exists()
    lock = FolderLock(run_dir).acquire()
    try:
        if fresh and overwrite:
            clear(run_dir)
        yield
    finally:
        lock.release(remove_folder=not existed)


def evaluate(args: argparse.Namespace) -> int:
    from jaxdqn import checkpoint
    from jaxdqn.trainer import Trainer

    overrides = {"evaluation_num_episodes": args.episodes} if args.episodes else {}
    with as_usage_errors():
        # Greedy episodes need only the params: any checkpoint evaluates on one device.
        meta = checkpoint.read_meta(args.checkpoint)
        sharded = meta.get("num_seeds") is None and meta.get("trials") is None and meta.get("num_devices", 1) > 1
        trainer = Trainer.from_checkpoint(args.checkpoint, num_devices=1, learner_only=sharded, **overrides)
    out = trainer.evaluate()
    per_trial = out if trainer.trials is not None else [out]
    labelled = [(f"trial {t} " if trainer.trials is not None else "", r if isinstance(r, list) else [r])
                for t, r in enumerate(per_trial)]
    for prefix, results in labelled:
        for k, r in enumerate(results):
            e = r["evaluation"]
            print(f"{prefix}seed {k}: episode_reward_mean {e['episode_reward_mean']:.2f} (min "
                  f"{e['episode_reward_min']:.1f}, max {e['episode_reward_max']:.1f}), episode_len_mean "
                  f"{e['episode_len_mean']:.1f}, {e['episodes_this_iter']} greedy episodes")
    return 0
