"""What ``jaxdqn train`` runs, read from its flags and documents: our YAML (config keys at the top
level, plus optional ``algo``, ``seeds`` and ``stop``; a run's ``params.json`` is one), an RLlib
tuned-example YAML (``name: {env, run, stop, config}``, run unchanged through ``from_rllib``,
with Tune's experiment keys), the shipped tuned examples, ``--set`` overrides and Tune's
``grid_search`` values (a sweep's trials)."""

from __future__ import annotations

import argparse
import importlib.resources
from typing import Any, Mapping, NamedTuple

from jaxdqn.cli.usage import UsageError, as_usage_errors

RUN_NAMES = {"dqn": "DQN", "simple_q": "SimpleQ"}  # RLlib's trainable names (Tune's trial folders)
STOP_KEYS = ("episode_reward_mean", "timesteps_total", "training_iteration", "time_total_s")
TUNED = {("dqn", "CartPole-v1"): "cartpole-v1-dqn.yaml", ("simple_q", "CartPole-v1"): "cartpole-v1-simpleq.yaml",
         ("dqn", "Acrobot-v1"): "acrobot-v1-dqn.yaml", ("dqn", "MemoryChain-bsuite"): "memorychain-bsuite-dqn-lstm.yaml",
         ("dqn", "MultiCartPole-v1"): "multicartpole-v1-dqn.yaml", ("dqn", "LunarLander-v3"): "lunarlander-v3-dqn.yaml",
         ("dqn", "minigrid:MiniGrid-Empty-6x6-v0"): "minigrid-empty-6x6-dqn.yaml",
         **{("dqn", f"{game}-MinAtar"): f"{game.lower()}-minatar-dqn.yaml"
            for game in ("Asterix", "Breakout", "Freeway", "SpaceInvaders", "Seaquest")}}


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
    except IsADirectoryError:
        raise UsageError(f"--config {path!r} is a folder: give a YAML file (or a run's params.json)") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"--config {path!r} cannot be read: {getattr(e, 'strerror', None) or e}") from None
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


def multi_process(args: argparse.Namespace) -> bool:
    """The flags start a multi-process run (``jax.distributed``)."""
    return bool(getattr(args, "distributed", False) or getattr(args, "coordinator", None) is not None
                or getattr(args, "num_processes", None) is not None)


def build_run(args: argparse.Namespace) -> Run:
    """The run the flags ask for; raises UsageError / ValueError (every trial's config is built,
    so a bad value in any trial is refused before anything compiles)."""
    from jaxdqn import sweep
    from jaxdqn.config import from_dict

    length = [a for a in args.set or [] if a.partition("=")[0].strip() == "total_timesteps"]
    if length and args.timesteps is not None:
        raise UsageError(f"--set {length[-1]} contradicts --timesteps {args.timesteps}: give the run's length once")
    if length:  # the run's length, as --timesteps: the stop block's timesteps_total follows it
        value = parse_value(length[-1].partition("=")[2])
        if not isinstance(value, int) or isinstance(value, bool):
            raise UsageError(f"total_timesteps={value!r} is invalid: must be an int")
        args = argparse.Namespace(**{**vars(args), "timesteps": value,
                                     "set": [a for a in args.set if a not in length]})
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
        if multi_process(args) and "num_devices" not in config:
            config["num_devices"] = "auto"  # a multi-process run spans every process's devices
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
