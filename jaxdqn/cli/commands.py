"""The ``train`` and ``evaluate`` commands."""

from __future__ import annotations

import argparse
import pathlib
import sys

from jaxdqn.cli.documents import build_run
from jaxdqn.cli.loop import checkpointing, default_folder, print_summary, run_loop, stop_of
from jaxdqn.cli.sweeps import train_sweep
from jaxdqn.cli.usage import UsageError, as_usage_errors


def start_processes(args: argparse.Namespace, fake_devices: int | None = None) -> None:
    """Forced host devices and ``jax.distributed``, before JAX computes anything."""
    from jaxdqn import distributed as processes

    distributed = args.distributed or args.coordinator is not None or args.num_processes is not None
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
    from jaxdqn.config import algo_of, to_dict
    from jaxdqn.logging import check_loggers

    loggers = args.logger or ["csv"]
    with as_usage_errors():
        check_loggers(loggers)
    fake_devices, run = None, None
    if not args.resume:
        with as_usage_errors():
            run = build_run(args)
        fake_devices = run.fake_devices
    every, keep, at_end = checkpointing(args, run)
    start_processes(args, fake_devices)  # before anything imports gymnax (which starts JAX)
    from jaxdqn import checkpoint
    from jaxdqn.logging import RunLogger
    from jaxdqn.trainer import Trainer
    if args.resume:
        clash = [f for f in ("config", "algo", "env", "set", "seeds") if getattr(args, f)]
        if clash:
            raise UsageError(f"--resume takes the config from the checkpoint; drop --{clash[0]}")
        overrides = {"total_timesteps": args.timesteps} if args.timesteps is not None else {}
        with as_usage_errors():
            if checkpoint.read_meta(args.resume).get("trials") is not None:
                raise UsageError(f"--resume {args.resume}: a sweep's checkpoint resumes through the Python API "
                                 "(jaxdqn.Trainer.from_checkpoint), not the command line")
            trainer = Trainer.from_checkpoint(args.resume, **overrides)
        config, seeds, source = trainer.config, trainer.num_seeds, f"checkpoint {args.resume}"
        stop = {"timesteps_total": config.total_timesteps}
        run_dir = pathlib.Path(args.out) if args.out else checkpoint.resolve(args.resume).resolve().parent
    else:
        if run.is_sweep:
            return train_sweep(args, run, loggers, (every, keep, at_end))
        config, seeds, source = run.config, run.seeds, run.source
        stop = stop_of(run, config)
        with as_usage_errors():
            trainer = Trainer(config, num_seeds=seeds)
        run_dir = pathlib.Path(args.out) if args.out else default_folder(run, algo_of(config), config.env)
    writer = trainer.layout.process_index == 0  # one process writes logs and checkpoints
    quiet = args.quiet or not writer
    params = {"algo": algo_of(config), "seeds": seeds or 1, "stop": stop, **to_dict(config)}
    with as_usage_errors():
        logger = RunLogger(run_dir, seeds, loggers, params=params) if writer else None
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, file=sys.stderr))
    say(f"jaxdqn: {algo_of(config)} on {config.env}, {seeds or 1} seed(s), {trainer.layout.describe()}, "
        f"config from {source}; run folder {run_dir}")
    try:
        outcome = run_loop(trainer, stop, [logger], run_dir, every, keep, quiet)
    finally:
        if logger is not None:
            logger.close()
    path = trainer.save(run_dir, keep=keep) if at_end else None
    results, reason = outcome[0]
    print_summary(results, reason, path, quiet=quiet)
    return 0


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
