"""Run folders in Tune's layout (shell layer): ``params.json``, ``result.json``, ``progress.csv``,
and optional TensorBoard / Weights & Biases output.

``result.json`` holds one complete result dict per line (always written: it is the run's
record); ``progress.csv`` (logger ``csv``) the same results flattened with ``/`` between nested
keys (``info/learner/default_policy/learner_stats/mean_q``), one row per iteration. Logger
``tensorboard`` writes the numeric columns of progress.csv, under the same names, as scalars of
an event file (tensorboardX, no TensorFlow) at step ``timesteps_total``; logger ``wandb`` logs
them to a W&B run (``WANDB_MODE=offline`` keeps it local). With several seeds each gets its own
``RUN_DIR/seed_<k>/`` (and W&B run); ``params.json`` (the config) sits at the top of the run
folder. Appending is safe across ``--resume``: rows go to the end of existing files, and the CSV
header is written once. Everything here runs on the host between compiled chunks.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import math
import numbers
import os
import pathlib
from typing import Any, Iterable, Mapping, Sequence

LOGGERS = ("csv", "tensorboard", "wandb")
LOGGER_PACKAGES = {"tensorboard": ("tensorboardX", "jaxdqn[tensorboard]"), "wandb": ("wandb", "jaxdqn[wandb]")}


def check_loggers(loggers: Sequence[str]) -> None:
    """Refuse an unknown logger or one whose package is not installed (``ValueError``, naming the
    logger and what to install), before anything runs."""
    for name in loggers:
        if name not in LOGGERS:
            raise ValueError(f"logger {name!r} is not supported; supported: {list(LOGGERS)}")
        if name in LOGGER_PACKAGES:
            module, extra = LOGGER_PACKAGES[name]
            if importlib.util.find_spec(module) is None:
                raise ValueError(f"logger {name!r} needs the {module} package: pip install '{extra}'")


def scalars(result: Mapping[str, Any]) -> dict[str, float]:
    """The numeric columns of a result's ``progress.csv`` row (what TensorBoard and W&B get)."""
    return {k: float(v) for k, v in flatten(result).items()
            if isinstance(v, numbers.Real) and not isinstance(v, bool)}


def flatten(result: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts to ``a/b/c`` keys; lists (histograms) are dropped from the CSV."""
    out: dict[str, Any] = {}
    for key, value in result.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{name}/"))
        elif not isinstance(value, (list, tuple)):
            out[name] = value
    return out


def _json_default(x: Any) -> Any:
    if hasattr(x, "item"):
        return x.item()
    raise TypeError(f"{type(x).__name__} is not JSON serialisable")


class ResultWriter:
    """Appends result dicts to ``result.json`` and (``write_csv``) ``progress.csv`` in one folder."""

    def __init__(self, directory: str | os.PathLike, *, write_csv: bool = True) -> None:
        self.write_csv = write_csv
        self.directory = pathlib.Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.json_path = self.directory / "result.json"
        self.csv_path = self.directory / "progress.csv"
        self._columns: list[str] | None = None
        if self.csv_path.exists() and self.csv_path.stat().st_size > 0:
            with open(self.csv_path, newline="") as f:
                self._columns = next(csv.reader(f), None)

    def write(self, result: Mapping[str, Any]) -> None:
        with open(self.json_path, "a") as f:
            f.write(json.dumps(result, default=_json_default) + "\n")
        if not self.write_csv:
            return
        row = flatten(result)
        new = self._columns is None
        if new:
            self._columns = list(row)
        with open(self.csv_path, "a", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=self._columns, extrasaction="ignore")
            if new:
                writer.writeheader()
            writer.writerow(row)


    def close(self) -> None:
        pass


class TensorBoardWriter:
    """A tensorboardX event file in ``directory``: every numeric progress.csv column, by its
    name, at step ``timesteps_total``."""

    def __init__(self, directory: str | os.PathLike) -> None:
        from tensorboardX import SummaryWriter

        self.writer = SummaryWriter(logdir=str(directory))

    def write(self, result: Mapping[str, Any]) -> None:
        step = int(result["timesteps_total"])
        for key, value in scalars(result).items():
            self.writer.add_scalar(key, value, global_step=step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbWriter:
    """One W&B run (``name`` in ``group``, files under ``directory``): every numeric progress.csv
    column at step ``timesteps_total``. The project is ``WANDB_PROJECT`` or ``jaxdqn``; the mode
    W&B's own ``WANDB_MODE`` (``offline``: nothing leaves the machine)."""

    def __init__(self, directory: str | os.PathLike, *, name: str, group: str, config: Mapping[str, Any]) -> None:
        import wandb

        pathlib.Path(directory).mkdir(parents=True, exist_ok=True)
        try:
            self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "jaxdqn"), name=name, group=group,
                                  dir=str(directory), config=json.loads(json.dumps(config, default=_json_default)),
                                  reinit="create_new")
        except wandb.Error as e:  # no API key, bad project, ...: said before anything trains
            raise ValueError(f"logger 'wandb' could not start a run: {' '.join(str(e).split())} (WANDB_MODE=offline "
                             f"logs locally without an account)") from None

    def write(self, result: Mapping[str, Any]) -> None:
        self.run.log(scalars(result), step=int(result["timesteps_total"]))

    def close(self) -> None:
        self.run.finish()


class RunLogger:
    """One run folder: ``params.json`` and, per seed (or one, for one seed), ``result.json`` plus
    the chosen ``loggers`` (``csv``, ``tensorboard``, ``wandb``). ``name`` / ``group`` name the
    W&B runs (the run folder's name and its parent's by default)."""

    def __init__(self, directory: str | os.PathLike, num_seeds: int | None, loggers: Sequence[str] = ("csv",),
                 *, params: Mapping[str, Any] | None = None, name: str | None = None,
                 group: str | None = None) -> None:
        check_loggers(loggers)
        self.directory = pathlib.Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        if params is not None:
            self.write_params(params)
        folders = [self.directory] if num_seeds is None else [self.directory / f"seed_{k}" for k in range(num_seeds)]
        name = name or self.directory.resolve().name
        group = group or self.directory.resolve().parent.name
        self.writers: list[list[Any]] = []
        for k, folder in enumerate(folders):
            sinks: list[Any] = [ResultWriter(folder, write_csv="csv" in loggers)]
            if "tensorboard" in loggers:
                sinks.append(TensorBoardWriter(folder))
            if "wandb" in loggers:
                run_name = name if num_seeds is None else f"{name}/seed_{k}"
                sinks.append(WandbWriter(folder, name=run_name, group=group, config=params or {}))
            self.writers.append(sinks)

    def write_params(self, params: Mapping[str, Any]) -> None:
        path = self.directory / "params.json"
        write_atomically(path, json.dumps(params, indent=2, default=_json_default) + "\n")

    def write(self, results: Mapping[str, Any] | Iterable[Mapping[str, Any]]) -> None:
        results = [results] if isinstance(results, Mapping) else list(results)
        for sinks, result in zip(self.writers, results, strict=True):
            for sink in sinks:
                sink.write(result)

    def close(self) -> None:
        for sinks in self.writers:
            for sink in sinks:
                sink.close()


def read_progress(run_dir: str | os.PathLike) -> list[list[dict[str, float]]]:
    """The ``progress.csv`` rows of each seed of a run folder (numbers as floats, NaN for blanks)."""
    run_dir = pathlib.Path(run_dir)
    seed_dirs = sorted(run_dir.glob("seed_*"), key=lambda p: int(p.name.split("_")[1]))
    folders = seed_dirs or [run_dir]
    seeds = []
    for folder in folders:
        path = folder / "progress.csv"
        if path.exists():
            reader = csv.DictReader(_whole_lines(path))
            # A row glued to a torn one has more fields than the header (key None) or fewer (None values).
            rows = [row for row in reader if None not in row and None not in row.values()]
            seeds.append([{k: _number(v) for k, v in row.items()} for row in rows])
        elif (folder / "result.json").exists():  # a run logged without the csv logger
            rows = [flatten(r) for line in _whole_lines(folder / "result.json") if (r := _json_row(line))]
            seeds.append([{k: _number(v) for k, v in row.items()} for row in rows])
        else:
            raise FileNotFoundError(f"no progress.csv in {str(run_dir)!r} (looked for {path})")
    return seeds


def cut_logs(run_dir: str | os.PathLike, iteration: int) -> None:
    """Every ``result.json`` and ``progress.csv`` of a run folder (its seeds' too) cut back to
    the rows of ``training_iteration <= iteration``, torn and garbled lines dropped, so that a run
    resumed from that iteration's checkpoint logs each later iteration exactly once."""
    run_dir = pathlib.Path(run_dir)
    for path in run_dir.glob("**/result.json"):
        _rewrite(path, [line for line in _whole_lines(path)
                        if (row := _json_row(line)) and _number(row.get("training_iteration")) <= iteration])
    for path in run_dir.glob("**/progress.csv"):
        lines = _whole_lines(path)
        if lines:
            rows = csv.DictReader(lines)
            keep = [line for line, row in zip(lines[1:], rows) if None not in row and None not in row.values()
                    and _number(row.get("training_iteration")) <= iteration]
            _rewrite(path, lines[:1] + keep)


def _rewrite(path: pathlib.Path, lines: list[str]) -> None:
    write_atomically(path, "".join(line + "\n" for line in lines))


def write_atomically(path: pathlib.Path, text: str) -> None:
    """``text`` into ``path`` through a temporary file and a rename: a reader sees the old file or
    the new one, never a part."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _whole_lines(path: pathlib.Path) -> list[str]:
    """A log's lines that end in a newline: a last line without one was torn by a kill or a full
    disk mid-write, and is skipped."""
    return path.read_text(errors="replace").split("\n")[:-1]


def _json_row(line: str) -> dict[str, Any] | None:
    try:
        row = json.loads(line)
    except ValueError:  # a torn or garbled line
        return None
    return row if isinstance(row, dict) else None


def _number(text: Any) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan
