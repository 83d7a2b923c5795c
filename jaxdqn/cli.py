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
import importlib.util
import math
import os
import pathlib
import sys
from typing import Any, Mapping, NamedTuple, Sequence

RUN_NAMES = {"dqn": "DQN", "simple_q": "SimpleQ"}  # RLlib's trainable names (Tune's trial folders)
STOP_KEYS = ("episode_reward_mean", "timesteps_total", "training_iteration", "time_total_s")
TUNED = {("dqn", "CartPole-v1"): "cartpole-v1-dqn.yaml", ("simple_q", "CartPole-v1"): "cartpole-v1-simpleq.yaml",
         ("dqn", "Acrobot-v1"): "acrobot-v1-dqn.yaml", ("dqn", "MemoryChain-bsuite"): "memorychain-bsuite-dqn-lstm.yaml",
         ("dqn", "MultiCartPole-v1"): "multicartpole-v1-dqn.yaml",
         **{("dqn", f"{game}-MinAtar"): f"{game.lower()}-minatar-dqn.yaml"
            for game in ("Asterix", "Breakout", "Freeway", "SpaceInvaders", "Seaquest")}}


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


TUNE_KEYS = ("checkpoint_freq", "checkpoint_at_end", "keep_checkpoints_num", "local_dir", "num_samples")


def tune_options(name: str, experiment: Mapping[str, Any], source: str) -> dict[str, Any]:
    """Tune's experiment keys of an RLlib YAML, checked: ``checkpoint_freq`` (iterations between
    checkpoints), ``checkpoint_at_end``, ``keep_checkpoints_num``, ``local_dir`` (the results
    root: the run folder is ``local_dir/<experiment name>``) and ``num_samples`` (repeats of
    every trial: here its seeds, vmapped)."""
    options: dict[str, Any] = {"name": name}
    for key in ("checkpoint_freq", "keep_checkpoints_num", "num_samples"):
        if key in experiment:
            value = experiment[key]
            low = 0 if key == "checkpoint_freq" else 1
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise UsageError(f"{source}: {key}={value!r} is invalid: must be an int >= {low}")
            options[key] = value
    if "checkpoint_at_end" in experiment:
        if not isinstance(experiment["checkpoint_at_end"], bool):
            raise UsageError(f"{source}: checkpoint_at_end={experiment['checkpoint_at_end']!r} is invalid: must be a bool")
        options["checkpoint_at_end"] = experiment["checkpoint_at_end"]
    if "local_dir" in experiment:
        if not isinstance(experiment["local_dir"], str) or not experiment["local_dir"]:
            raise UsageError(f"{source}: local_dir={experiment['local_dir']!r} is invalid: must be a folder path")
        options["local_dir"] = experiment["local_dir"]
    return options


def document_variants(doc: Any, source: str) -> tuple[str, list[tuple[dict[str, Any], dict[str, Any]]],
                                                     dict[str, Any], int | None, dict[str, Any]]:
    """``(algo, variants, stop, seeds, options)`` from one of the two YAML layouts; ``variants``
    is ``[(grid variables, our config dict)]``: one per trial of the RLlib config's
    ``grid_search`` values (Tune's order), one with no variables without them. Our layout keeps
    its ``grid_search`` values in the dict (``build_run`` expands them after ``--set``).
    ``options``: Tune's experiment keys (``tune_options``; ``{}`` for our layout)."""
    from jaxdqn import sweep
    from jaxdqn.config import RLLIB_RUN_NAMES, config_class, to_dict
    from jaxdqn.rllib import from_rllib

    if not isinstance(doc, dict):
        raise UsageError(f"{source}: expected a mapping of config keys, got {type(doc).__name__}")
    if is_rllib_document(doc):
        (name, experiment), = doc.items()
        unknown = set(experiment) - {"env", "run", "stop", "config", *TUNE_KEYS}
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
        variants = []
        fake_devices = None
        with as_usage_errors():
            grid = sweep.expand_grid(rllib)
        for variables, resolved in grid:
            try:
                config = to_dict(from_rllib(resolved, algo))
            except (ValueError, TypeError) as e:
                trial = f"trial {variables}: " if variables else ""
                raise UsageError(f"{source}: {trial}{e}") from None
            if resolved.get("_fake_gpus") and config["num_devices"] != 1:
                fake_devices = config["num_devices"]  # host devices to force (RLlib's _fake_gpus)
            if "timesteps_total" in stop:
                config["total_timesteps"] = int(stop["timesteps_total"])
            variants.append((variables, config))
        options = tune_options(name, experiment, source)
        if fake_devices is not None:
            options["fake_devices"] = fake_devices
        return algo, variants, stop, options.pop("num_samples", None), options
    doc = dict(doc)
    algo = doc.pop("algo", "dqn")
    stop = dict(doc.pop("stop", None) or {})
    seeds = doc.pop("seeds", None)
    config_class(algo)  # validates the name
    return algo, [({}, doc)], stop, seeds, {}


def document_to_spec(doc: Any, source: str) -> tuple[str, dict[str, Any], dict[str, Any], int | None]:
    """``(algo, our config dict, stop, seeds)`` from a YAML document of one trial."""
    algo, variants, stop, seeds, _ = document_variants(doc, source)
    if len(variants) != 1:
        raise UsageError(f"{source} has grid_search values ({len(variants)} trials): run it with jaxdqn train")
    return algo, variants[0][1], stop, seeds


class Run(NamedTuple):
    """What ``jaxdqn train`` runs: one config, or a sweep's trials (``[(grid variables, config)]``)."""

    trials: list[tuple[dict[str, Any], Any]]
    stop: dict[str, Any]
    seeds: int | None
    source: str
    fake_devices: int | None
    options: dict[str, Any]  # Tune's experiment keys (``tune_options``)

    @property
    def config(self) -> Any:
        return self.trials[0][1]

    @property
    def grid_keys(self) -> list[str]:
        """The dotted keys of the grid, in the order they first appear."""
        return list(dict.fromkeys(k for variables, _ in self.trials for k in variables))

    @property
    def is_sweep(self) -> bool:
        return len(self.trials) > 1 or bool(self.trials[0][0])


def build_run(args: argparse.Namespace) -> Run:
    """The run the flags ask for; raises UsageError / ValueError (every trial's config is built,
    so a bad value in any trial is refused before anything compiles)."""
    from jaxdqn import sweep
    from jaxdqn.config import from_dict

    if args.config:
        algo, variants, stop, seeds, options = document_variants(read_yaml(args.config), args.config)
        source = args.config
        if args.algo is not None and args.algo != algo:
            raise UsageError(f"--algo {args.algo} contradicts {args.config} (algo {algo})")
    else:
        algo = args.algo or "dqn"
        env = args.env or "CartPole-v1"
        tuned = tuned_example(algo, env)
        if tuned is not None:
            name, doc = tuned
            algo, variants, stop, seeds, options = document_variants(doc, name)
            source = f"tuned example {name}"
        else:
            variants, stop, seeds, source, options = [({}, {"env": env})], {}, None, "library defaults", {}
    if args.timesteps is not None:
        stop["timesteps_total"] = args.timesteps
    if args.seeds is not None:
        seeds = args.seeds
    bad = sorted(set(stop) - set(STOP_KEYS))
    if bad:
        raise UsageError(f"stop key {bad[0]!r} is not supported; supported: {list(STOP_KEYS)}")
    for key, value in stop.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise UsageError(f"stop {key}={value!r} is invalid: must be a number (a lower bound; grid_search "
                             f"is for config keys)")
    if seeds is not None and (not isinstance(seeds, int) or seeds < 1):
        raise UsageError(f"seeds={seeds!r} is invalid: must be an int >= 1")
    trials = []
    for outer, config in variants:
        if args.env is not None:
            config["env"] = args.env
        if args.timesteps is not None:
            config["total_timesteps"] = args.timesteps
        for assignment in args.set or []:
            apply_set(config, assignment)
        with as_usage_errors():
            grid = sweep.expand_grid(config)
        for inner, resolved in grid:
            variables = {**outer, **inner}
            try:
                trials.append((variables, from_dict(resolved, algo)))
            except (ValueError, TypeError) as e:
                raise UsageError(f"trial {variables}: {e}" if variables else str(e)) from None
    return Run(trials=trials, stop=stop, seeds=None if seeds in (None, 1) else seeds, source=source,
               fake_devices=options.get("fake_devices"), options=options)


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


def trial_folder(algo: str, env: str, index: int, variables: Mapping[str, Any]) -> str:
    """A trial's folder name in Tune's layout: ``DQN_CartPole-v1_00003_3_lr=0.001``."""
    from jaxdqn import sweep

    name = f"{RUN_NAMES[algo]}_{env}_{index:05d}_{sweep.trial_name(index, variables)}"
    return name.replace("/", "_")[:200]


def train_sweep(args: argparse.Namespace, run: Run, loggers: list[str], checkpoints: tuple[int, int | None, bool]
                ) -> int:
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
    experiment = pathlib.Path(args.out) if args.out else default_folder(run, algo, run.config.env)
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
                               program_dir, every, keep, quiet, label=f"program {k + 1}/{len(programs)}")
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


def _mean(results: list[dict[str, Any]], key: str) -> float:
    values = [r[key] for r in results if not math.isnan(r[key])]
    return sum(values) / len(values) if values else math.nan


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
                          _mean(results, "episode_reward_mean"), min(rewards), max(rewards),
                          _mean(results, "episode_len_mean"), results[0]["timesteps_total"],
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
                      f"{_mean(results, 'episode_reward_mean'):.1f}", f"{min(rewards):.1f}-{max(rewards):.1f}",
                      str(results[0]["timesteps_total"]), reason)
    Console(quiet=quiet).print(table)
    print(f"experiment: {experiment} (summary.csv; jaxdqn plot {experiment})")


def run_loop(trainer: Any, stop: Mapping[str, Any], loggers: list[Any], run_dir: pathlib.Path, every: int,
             keep: int | None, quiet: bool, label: str = "training") -> list[tuple[list[dict[str, Any]], str]]:
    """``train()`` until a stop criterion holds, with a live progress bar and checkpoints.

    ``loggers``: one per trial (one for a run without trials). Each trial stops on its own, as
    in Tune: the first iteration at which every seed of it meets a criterion is its last logged
    one (``done: True``); the program runs until every trial has stopped. Returns each trial's
    ``(last results per seed, reason)``."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    total = int(stop["timesteps_total"])
    columns = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("return {task.fields[ret]}"), TextColumn("{task.fields[sps]} steps/s"),
               TimeRemainingColumn()]
    outcome: list[tuple[list[dict[str, Any]], str] | None] = [None] * len(loggers)
    with Progress(*columns, console=Console(stderr=True), disable=quiet) as progress:
        task = progress.add_task(label, total=total, completed=min(trainer.timesteps_total, total),
                                 ret="-", sps="-")
        while True:
            out = trainer.train()
            per_trial = out if trainer.trials is not None else [out]
            per_trial = [t if isinstance(t, list) else [t] for t in per_trial]
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
            mean_return = _mean(runs, "episode_reward_mean")
            progress.update(task, completed=min(first["timesteps_total"], total),
                            ret="-" if math.isnan(mean_return) else f"{mean_return:.1f}",
                            sps=f"{first['num_env_steps_sampled_throughput_per_sec'] * len(runs):,.0f}")
            if every and trainer.iteration % every == 0:
                trainer.save(run_dir, keep=keep)
            if all(o is not None for o in outcome):
                return outcome


def print_summary(results: list[dict[str, Any]], reason: str, path: str | None, *, quiet: bool) -> None:
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
    print(f"checkpoint: {path}" if path else "no final checkpoint (checkpoint_at_end: false)")



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


def experiment_trials(folder: pathlib.Path) -> list[tuple[str, pathlib.Path]]:
    """The trial folders of a sweep's experiment folder, with their labels (``3_lr=0.001``);
    ``[]`` for a run folder."""
    import re

    if (folder / "result.json").exists() or (folder / "progress.csv").exists() or any(folder.glob("seed_*")):
        return []
    found = []
    for sub in sorted(p for p in folder.iterdir() if p.is_dir() and (p / "params.json").exists()):
        match = re.search(r"_\d{5}_(.*)$", sub.name)
        found.append((match.group(1) if match else sub.name, sub))
    return sorted(found, key=lambda t: int(t[0].split("_")[0]) if t[0].split("_")[0].isdigit() else 0)


def plot(args: argparse.Namespace) -> int:
    """A run folder: its curve, mean and min-max over seeds. A sweep's experiment folder: one
    curve per trial (mean over seeds, min-max band)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from jaxdqn.logging import read_progress

    run_dir = pathlib.Path(args.run_dir)
    if not run_dir.is_dir():
        raise UsageError(f"{args.run_dir!r} is not a run folder")
    trials = experiment_trials(run_dir)
    with as_usage_errors():
        curves = [(label, read_progress(folder)) for label, folder in trials] or [(None, read_progress(run_dir))]
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for n, (label, seeds) in enumerate(curves):
        for key in (args.x, args.metric):
            if seeds[0] and key not in seeds[0][0]:
                raise UsageError(f"column {key!r} is not in progress.csv; try episode_reward_mean / timesteps_total")
        rows = min(len(s) for s in seeds)
        if rows == 0:
            raise UsageError(f"{args.run_dir!r} has no results yet")
        x = np.array([r[args.x] for r in seeds[0][:rows]])
        y = np.array([[r[args.metric] for r in s[:rows]] for s in seeds])  # [S, rows]
        color = colors[n % len(colors)]
        if len(seeds) > 1:
            if label is None:
                for curve in y:
                    ax.plot(x, curve, color=color, alpha=0.2, linewidth=0.8)
            ax.fill_between(x, np.nanmin(y, 0), np.nanmax(y, 0), color=color, alpha=0.15,
                            label="min-max over seeds" if label is None else None)
        name = f"mean over {len(seeds)} seeds" if len(seeds) > 1 else args.metric
        ax.plot(x, np.nanmean(y, 0), color=color, linewidth=2, label=name if label is None else label)
    for value, text in zip(args.reference, args.reference_label + [None] * len(args.reference)):
        ax.axhline(value, color="black", linestyle="--", linewidth=1, label=text or f"reference {value:g}")
    ax.set_xlabel(args.x)
    ax.set_ylabel(args.metric + (f" (mean over {len(curves[0][1])} seeds)" if trials and len(curves[0][1]) > 1 else ""))
    ax.set_title(run_dir.resolve().name)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize="small")
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
    from jaxdqn.buffers import tree_kernels

    print(f"fused CPU tree kernels: {tree_kernels.status()}")
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
        return args.func(args)
    except UsageError as e:
        print(f"jaxdqn: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("jaxdqn: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
