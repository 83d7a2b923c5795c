"""The ``jaxdqn`` command (shell layer): ``train``, ``evaluate``, ``plot``, ``info``.

``jaxdqn train`` with no arguments trains DQN on CartPole-v1 with the shipped tuned example.
``--config FILE`` takes our YAML (config keys at the top level, plus optional ``algo``, ``seeds``
and ``stop``; a run's ``params.json`` is one) or an RLlib tuned-example YAML
(``name: {env, run, stop, config}``), run unchanged through ``from_rllib``. Every usage problem
(bad flag, bad YAML, unknown key, bad value) is one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.resources
import math
import pathlib
import sys
from typing import Any, Mapping, Sequence

STOP_KEYS = ("episode_reward_mean", "timesteps_total", "training_iteration")
TUNED = {("dqn", "CartPole-v1"): "cartpole-v1-dqn.yaml", ("simple_q", "CartPole-v1"): "cartpole-v1-simpleq.yaml",
         ("dqn", "Acrobot-v1"): "acrobot-v1-dqn.yaml", ("dqn", "MemoryChain-bsuite"): "memorychain-bsuite-dqn-lstm.yaml",
         ("dqn", "MultiCartPole-v1"): "multicartpole-v1-dqn.yaml"}


class UsageError(Exception):
    """A problem with what the user asked for: reported in one line, exit code 2."""


@contextlib.contextmanager
def as_usage_errors():
    """Bad values found while setting up (config, checkpoint, files) become ``UsageError``s;
    errors during training are not caught, so a bug keeps its traceback."""
    try:
        yield
    except (ValueError, TypeError, FileNotFoundError) as e:
        raise UsageError(str(e)) from None


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, no usage block
        raise UsageError(message)


# --- configuration ------------------------------------------------------------------------------
def yaml_load(text: Any) -> Any:
    """``yaml.safe_load``, reading ``1e-3`` as a float (PyYAML's YAML 1.1 wants ``1.0e-3``; RLlib's
    files and users write both)."""
    import re

    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                    |\.[0-9_]+(?:[eE][-+][0-9]+)?
                    |[-+]?\.(?:inf|Inf|INF)
                    |\.(?:nan|NaN|NAN))$""", re.X),
        list("-+0123456789."))
    return yaml.load(text, Loader=Loader)  # noqa: S506 (a SafeLoader subclass)


def parse_value(text: str) -> Any:
    """A ``--set`` value as YAML: ``3``, ``1e-3``, ``true``, ``[64, 64]``, ``null``, or a string."""
    import yaml

    try:
        return yaml_load(text)
    except yaml.YAMLError as e:
        raise UsageError(f"--set value {text!r} is not valid YAML: {str(e).splitlines()[0]}") from None


def apply_set(config: dict[str, Any], assignment: str) -> None:
    """``key=value`` or ``model.key=value`` into our config dict."""
    if "=" not in assignment:
        raise UsageError(f"--set {assignment!r}: expected key=value, e.g. --set lr=1e-3")
    key, text = assignment.split("=", 1)
    *parents, leaf = key.strip().split(".")
    target = config
    for p in parents:
        node = target.get(p)
        if node is None:
            node = target[p] = {}
        if not isinstance(node, dict):
            raise UsageError(f"--set {key}: {p!r} is not a nested section")
        target = node
    target[leaf] = parse_value(text)


def read_yaml(path: str) -> Any:
    import yaml

    try:
        with open(path) as f:
            return yaml_load(f)
    except FileNotFoundError:
        raise UsageError(f"--config {path!r}: no such file") from None
    except yaml.YAMLError as e:
        raise UsageError(f"--config {path!r} is not valid YAML: {' '.join(str(e).split())}") from None


def tuned_example(algo: str, env: str) -> tuple[str, dict[str, Any]] | None:
    """The shipped tuned YAML for ``(algo, env)``, if there is one: ``(name, document)``."""
    name = TUNED.get((algo, env))
    if name is None:
        return None
    text = importlib.resources.files("jaxdqn").joinpath("tuned_examples", name).read_text()
    return name, yaml_load(text)


def is_rllib_document(doc: Any) -> bool:
    return (isinstance(doc, dict) and len(doc) == 1 and isinstance(next(iter(doc.values())), dict)
            and "run" in next(iter(doc.values())))


def document_to_spec(doc: Any, source: str) -> tuple[str, dict[str, Any], dict[str, Any], int | None]:
    """``(algo, our config dict, stop, seeds)`` from one of the two YAML layouts."""
    from jaxdqn.config import RLLIB_RUN_NAMES, config_class, to_dict

    if not isinstance(doc, dict):
        raise UsageError(f"{source}: expected a mapping of config keys, got {type(doc).__name__}")
    if is_rllib_document(doc):
        (name, experiment), = doc.items()
        unknown = set(experiment) - {"env", "run", "stop", "config", "checkpoint_freq", "checkpoint_at_end",
                                     "num_samples", "local_dir", "keep_checkpoints_num"}
        if unknown:
            raise UsageError(f"{source}: experiment {name!r} has unsupported key {sorted(unknown)[0]!r}")
        run = experiment["run"]
        if run not in RLLIB_RUN_NAMES:
            raise UsageError(f"{source}: run={run!r} is not supported; supported: ['DQN', 'SimpleQ']")
        algo = RLLIB_RUN_NAMES[run]
        rllib = dict(experiment.get("config") or {})
        if "env" in experiment:
            rllib["env"] = experiment["env"]
        stop = dict(experiment.get("stop") or {})
        config = to_dict(config_class(algo).from_rllib(rllib))
        if rllib.get("_fake_gpus") and config["num_devices"] != 1:
            config["_fake_devices"] = config["num_devices"]  # taken out again in train()
        if "timesteps_total" in stop:
            config["total_timesteps"] = int(stop["timesteps_total"])
        return algo, config, stop, None
    doc = dict(doc)
    algo = doc.pop("algo", "dqn")
    stop = dict(doc.pop("stop", None) or {})
    seeds = doc.pop("seeds", None)
    config_class(algo)  # validates the name
    return algo, doc, stop, seeds


def build_run(args: argparse.Namespace) -> tuple[Any, dict[str, Any], int | None, str, int | None]:
    """``(config, stop, seeds, source, fake_devices)`` from the flags (``fake_devices``: host
    devices to force for RLlib's ``_fake_gpus``); raises UsageError / ValueError."""
    from jaxdqn.config import from_dict

    if args.config:
        algo, config, stop, seeds = document_to_spec(read_yaml(args.config), args.config)
        source = args.config
        if args.algo is not None and args.algo != algo:
            raise UsageError(f"--algo {args.algo} contradicts {args.config} (algo {algo})")
    else:
        algo = args.algo or "dqn"
        env = args.env or "CartPole-v1"
        tuned = tuned_example(algo, env)
        if tuned is not None:
            name, doc = tuned
            algo, config, stop, seeds = document_to_spec(doc, name)
            source = f"tuned example {name}"
        else:
            config, stop, seeds, source = {"env": env}, {}, None, "library defaults"
    if args.env is not None:
        config["env"] = args.env
    if args.timesteps is not None:
        config["total_timesteps"] = args.timesteps
        stop["timesteps_total"] = args.timesteps
    for assignment in args.set or []:
        apply_set(config, assignment)
    if args.seeds is not None:
        seeds = args.seeds
    bad = sorted(set(stop) - set(STOP_KEYS))
    if bad:
        raise UsageError(f"stop key {bad[0]!r} is not supported; supported: {list(STOP_KEYS)}")
    if seeds is not None and (not isinstance(seeds, int) or seeds < 1):
        raise UsageError(f"seeds={seeds!r} is invalid: must be an int >= 1")
    fake_devices = config.pop("_fake_devices", None)
    config = from_dict(config, algo)
    stop.setdefault("timesteps_total", config.total_timesteps)
    return config, stop, (None if seeds in (None, 1) else seeds), source, fake_devices


def should_stop(results: list[dict[str, Any]], stop: Mapping[str, Any]) -> str | None:
    """The first stop criterion met by every seed (RLlib's ``stop``: each key is a lower bound)."""
    for key in STOP_KEYS:  # timesteps_total is always set (the run's length)
        if key in stop and all(not math.isnan(r[key]) and r[key] >= stop[key] for r in results):
            return f"{key} >= {stop[key]}"
    return None


# --- commands ------------------------------------------------------------------------------------
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

    fake_devices = None
    if not args.resume:
        with as_usage_errors():
            config, stop, seeds, source, fake_devices = build_run(args)
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
            trainer = Trainer.from_checkpoint(args.resume, **overrides)
        config, seeds, source = trainer.config, trainer.num_seeds, f"checkpoint {args.resume}"
        stop = {"timesteps_total": config.total_timesteps}
        run_dir = pathlib.Path(args.out) if args.out else checkpoint.resolve(args.resume).resolve().parent
    else:
        with as_usage_errors():
            trainer = Trainer(config, num_seeds=seeds)
        stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        run_dir = pathlib.Path(args.out or f"results/{algo_of(config)}_{config.env}_{stamp}")
    writer = trainer.layout.process_index == 0  # one process writes logs and checkpoints
    quiet = args.quiet or not writer
    logger = RunLogger(run_dir, seeds) if writer else None
    if logger is not None:
        logger.write_params({"algo": algo_of(config), "seeds": seeds or 1, "stop": stop, **to_dict(config)})
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, file=sys.stderr))
    say(f"jaxdqn: {algo_of(config)} on {config.env}, {seeds or 1} seed(s), {trainer.layout.describe()}, "
        f"config from {source}; run folder {run_dir}")

    results, reason = run_loop(trainer, stop, logger, run_dir, args.checkpoint_every, args.keep, quiet)
    path = trainer.save(run_dir, keep=args.keep)
    print_summary(results, reason, path, quiet=quiet)
    return 0


def run_loop(trainer: Any, stop: Mapping[str, Any], logger: Any, run_dir: pathlib.Path, every: int,
             keep: int | None, quiet: bool) -> tuple[list[dict[str, Any]], str]:
    """``train()`` until a stop criterion holds, with a live progress bar and checkpoints."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    total = int(stop["timesteps_total"])
    columns = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("return {task.fields[ret]}"), TextColumn("{task.fields[sps]} steps/s"),
               TimeRemainingColumn()]
    with Progress(*columns, console=Console(stderr=True), disable=quiet) as progress:
        task = progress.add_task("training", total=total, completed=min(trainer.timesteps_total, total),
                                 ret="-", sps="-")
        while True:
            out = trainer.train()
            results = out if isinstance(out, list) else [out]
            if logger is not None:
                logger.write(results)
            first = results[0]
            mean_return = sum(r["episode_reward_mean"] for r in results) / len(results)
            progress.update(task, completed=min(first["timesteps_total"], total),
                            ret="-" if math.isnan(mean_return) else f"{mean_return:.1f}",
                            sps=f"{first['num_env_steps_sampled_throughput_per_sec'] * len(results):,.0f}")
            if every and trainer.iteration % every == 0:
                trainer.save(run_dir, keep=keep)
            met = should_stop(results, stop)
            if met:
                return results, met


def print_summary(results: list[dict[str, Any]], reason: str, path: str, *, quiet: bool) -> None:
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
    print(f"checkpoint: {path}")


def evaluate(args: argparse.Namespace) -> int:
    from jaxdqn import checkpoint
    from jaxdqn.trainer import Trainer

    overrides = {"evaluation_num_episodes": args.episodes} if args.episodes else {}
    with as_usage_errors():
        # Greedy episodes need only the params: any checkpoint evaluates on one device.
        meta = checkpoint.read_meta(args.checkpoint)
        sharded = meta.get("num_seeds") is None and meta.get("num_devices", 1) > 1
        trainer = Trainer.from_checkpoint(args.checkpoint, num_devices=1, learner_only=sharded, **overrides)
    out = trainer.evaluate()
    results = out if isinstance(out, list) else [out]
    for k, r in enumerate(results):
        e = r["evaluation"]
        print(f"seed {k}: episode_reward_mean {e['episode_reward_mean']:.2f} (min {e['episode_reward_min']:.1f}, "
              f"max {e['episode_reward_max']:.1f}), episode_len_mean {e['episode_len_mean']:.1f}, "
              f"{e['episodes_this_iter']} greedy episodes")
    return 0


def plot(args: argparse.Namespace) -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from jaxdqn.logging import read_progress

    run_dir = pathlib.Path(args.run_dir)
    if not run_dir.is_dir():
        raise UsageError(f"{args.run_dir!r} is not a run folder")
    with as_usage_errors():
        seeds = read_progress(run_dir)
    for key in (args.x, args.metric):
        if seeds[0] and key not in seeds[0][0]:
            raise UsageError(f"column {key!r} is not in progress.csv; try episode_reward_mean / timesteps_total")
    rows = min(len(s) for s in seeds)
    if rows == 0:
        raise UsageError(f"{args.run_dir!r} has no results yet")
    x = np.array([r[args.x] for r in seeds[0][:rows]])
    y = np.array([[r[args.metric] for r in s[:rows]] for s in seeds])  # [S, rows]
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    if len(seeds) > 1:
        for curve in y:
            ax.plot(x, curve, color="tab:blue", alpha=0.2, linewidth=0.8)
        ax.fill_between(x, np.nanmin(y, 0), np.nanmax(y, 0), color="tab:blue", alpha=0.15, label="min-max over seeds")
    ax.plot(x, np.nanmean(y, 0), color="tab:blue", linewidth=2,
            label=f"mean over {len(seeds)} seeds" if len(seeds) > 1 else args.metric)
    ax.set_xlabel(args.x)
    ax.set_ylabel(args.metric)
    ax.set_title(run_dir.resolve().name)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    out = pathlib.Path(args.output) if args.output else run_dir / "learning_curve.png"
    fig.savefig(out)
    print(out)
    return 0


def info(args: argparse.Namespace | None = None) -> int:
    """Print the version, the JAX backend and its devices: the first check on a new machine."""
    import jax

    import jaxdqn

    print(f"jaxdqn {jaxdqn.__version__}")
    print(f"jax {jax.__version__}, backend {jax.default_backend()}")
    for device in jax.devices():
        print(f"  {device.id}: {device.device_kind} ({device.platform})")
    return 0


def make_parser() -> Parser:
    parser = Parser(prog="jaxdqn", description="DQN-family agents in JAX (RLlib's DQN / SimpleQ).")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    commands = parser.add_subparsers(dest="command", parser_class=Parser)

    t = commands.add_parser("train", help="train (default: DQN on CartPole-v1, the tuned example)")
    t.add_argument("--algo", choices=["dqn", "simple_q"], help="default dqn (or the --config file's)")
    t.add_argument("--env", help="a gymnax environment name, e.g. CartPole-v1, Acrobot-v1, Breakout-MinAtar")
    t.add_argument("--timesteps", type=int, help="total env steps (per seed)")
    t.add_argument("--seeds", type=int, help="independent seeds trained at once with vmap")
    t.add_argument("--config", help="our YAML, a params.json, or an RLlib tuned-example YAML")
    t.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a key (repeatable): "
                   "--set lr=1e-3 --set model.fcnet_hiddens=[64,64]")
    t.add_argument("--out", help="run folder (default results/<algo>_<env>_<time>)")
    t.add_argument("--checkpoint-every", type=int, default=0, metavar="N",
                   help="save every N iterations (a final checkpoint is always written)")
    t.add_argument("--keep", type=int, metavar="N", help="keep only the newest N checkpoints")
    t.add_argument("--resume", metavar="PATH", help="continue from a checkpoint (or a run folder's newest)")
    t.add_argument("--quiet", action="store_true", help="no progress bar or table")
    d = t.add_argument_group("devices and processes (--set num_devices=N|auto picks the devices)")
    d.add_argument("--local-devices", type=int, metavar="N",
                   help="split the CPU into N devices (RLlib's _fake_gpus; tests of multi-device runs)")
    d.add_argument("--coordinator", metavar="HOST:PORT", help="multi-process run: process 0's address")
    d.add_argument("--num-processes", type=int, metavar="N", help="multi-process run: how many processes")
    d.add_argument("--process-id", type=int, metavar="I", help="multi-process run: this process's index")
    d.add_argument("--distributed", action="store_true", help="multi-process run with JAX's auto-detection "
                   "(JAX_COORDINATOR_ADDRESS, SLURM, Open MPI, Cloud TPU, Kubernetes) of what is not given")
    t.set_defaults(func=train)

    e = commands.add_parser("evaluate", help="greedy episodes of a checkpoint")
    e.add_argument("checkpoint", help="a checkpoint_* folder or a run folder (its newest checkpoint)")
    e.add_argument("--episodes", type=int, help="default: the config's evaluation_num_episodes")
    e.set_defaults(func=evaluate)

    p = commands.add_parser("plot", help="learning curve PNG of a run folder (mean and spread over seeds)")
    p.add_argument("run_dir")
    p.add_argument("--metric", default="episode_reward_mean")
    p.add_argument("--x", default="timesteps_total")
    p.add_argument("--output", help="default RUN_DIR/learning_curve.png")
    p.set_defaults(func=plot)

    i = commands.add_parser("info", help="version, JAX backend and devices")
    i.set_defaults(func=info)
    return parser


def check(args: argparse.Namespace) -> None:
    for flag in ("timesteps", "seeds", "keep", "episodes", "local_devices", "num_processes"):
        value = getattr(args, flag, None)
        if value is not None and value < 1:
            raise UsageError(f"--{flag.replace('_', '-')} {value} is invalid: must be >= 1")
    if getattr(args, "checkpoint_every", 0) < 0:
        raise UsageError(f"--checkpoint-every {args.checkpoint_every} is invalid: must be >= 0")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``jaxdqn`` console script."""
    parser = make_parser()
    try:
        args = parser.parse_args(argv)
        if args.version:
            import jaxdqn

            print(jaxdqn.__version__)
            return 0
        if args.command is None:
            parser.print_help()
            return 2
        check(args)
        return args.func(args)
    except UsageError as e:
        print(f"jaxdqn: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("jaxdqn: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
