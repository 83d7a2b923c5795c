"""The ``jaxdqn`` command (shell layer): ``train``, ``evaluate``, ``plot``, ``info``.

``jaxdqn train`` with no arguments trains DQN on CartPole-v1 with the shipped tuned example.
``--config FILE`` takes our YAML or an RLlib tuned-example YAML (``documents``); ``loop`` runs
and reports it, ``sweeps`` the trials of a ``grid_search``. Every usage problem (bad flag, bad
YAML, unknown key, bad value) is one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import pathlib
import sys
from typing import Sequence

from jaxdqn.cli.commands import evaluate, train
from jaxdqn.cli.info import info
from jaxdqn.cli.loop import Interrupted
from jaxdqn.cli.plot import plot
from jaxdqn.cli.usage import UsageError
from jaxdqn.errors import Diverged, SaveError


CACHE_MAX_BYTES = 2**30  # the persistent compilation cache's size; JAX evicts the least recently used


def enable_compilation_cache() -> None:
    """JAX's persistent compilation cache for the command's programs, so a run of a config (or
    shape) compiled before loads its programs instead of compiling them again: the directory of
    ``JAX_COMPILATION_CACHE_DIR`` when set, else ``$XDG_CACHE_HOME/jaxdqn/xla``
    (``~/.cache/jaxdqn/xla``); ``JAXDQN_COMPILATION_CACHE=0`` turns it off."""
    import jax

    if os.environ.get("JAXDQN_COMPILATION_CACHE", "1") == "0" or jax.config.jax_compilation_cache_dir:
        return
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    jax.config.update("jax_compilation_cache_dir", os.path.join(base, "jaxdqn", "xla"))
    if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    if "JAX_COMPILATION_CACHE_MAX_SIZE" not in os.environ:
        jax.config.update("jax_compilation_cache_max_size", CACHE_MAX_BYTES)


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, no usage block
        raise UsageError(message)


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
    t.add_argument("--overwrite", action="store_true", help="delete what --out holds and start again (without "
                   "it, a folder that holds a run is refused)")
    t.add_argument("--quiet", action="store_true", help="no progress bar or table")
    t.add_argument("--logger", action="append", choices=["csv", "tensorboard", "wandb"],
                   help="result output besides result.json (repeatable; default csv): progress.csv, TensorBoard "
                   "event files (pip install 'jaxdqn[tensorboard]'), Weights & Biases runs (pip install "
                   "'jaxdqn[wandb]'; WANDB_MODE=offline keeps them local)")
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

    p = commands.add_parser("plot", help="learning curve PNG of a run folder (mean and spread over seeds) or of a "
                            "sweep's experiment folder (one curve per trial)")
    p.add_argument("run_dir")
    p.add_argument("--metric", default="episode_reward_mean")
    p.add_argument("--x", default="timesteps_total")
    p.add_argument("--output", help="default RUN_DIR/learning_curve.png")
    p.add_argument("--reference", type=float, action="append", default=[],
                   help="a horizontal line at this value (repeatable), e.g. a paper's result")
    p.add_argument("--reference-label", action="append", default=[], help="the label of each --reference")
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
        missing = [m for m in ("rich", "yaml") + (("matplotlib",) if args.command == "plot" else ())
                   if importlib.util.find_spec(m) is None]
        if missing and args.command != "info":
            raise UsageError(f"jaxdqn {args.command} needs {missing[0]} (the [cli] extra): pip install 'jaxdqn[cli]'")
        if args.command in ("train", "evaluate"):
            enable_compilation_cache()
        return args.func(args)
    except UsageError as e:
        print(f"jaxdqn: error: {e}", file=sys.stderr)
        return 2
    except (SaveError, Diverged) as e:  # the run stopped; what it had saved is intact
        print(f"jaxdqn: error: {e}", file=sys.stderr)
        return 1
    except Interrupted as e:
        resume = (f"continue with: jaxdqn train --resume {pathlib.Path(e.path).parent}" if not e.sweep else
                  "a sweep continues through the Python API (jaxdqn.Trainer.from_checkpoint)")
        print(f"jaxdqn: {e}; {resume}", file=sys.stderr)
        return 128 + e.signum
    except KeyboardInterrupt:
        print("jaxdqn: interrupted (nothing saved since the last checkpoint)", file=sys.stderr)
        return 130


def console() -> None:
    """The console script: ``main``, and after an interrupt an exit that skips the interpreter's
    teardown (which can crash while XLA's compiler threads are still at work)."""
    code = main()
    if code > 128:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
