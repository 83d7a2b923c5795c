"""Run folders in Tune's layout (shell layer): ``params.json``, ``result.json``, ``progress.csv``.

``result.json`` holds one complete result dict per line; ``progress.csv`` the same results
flattened with ``/`` between nested keys (``info/learner/default_policy/learner_stats/mean_q``),
one row per iteration. With several seeds each gets its own ``RUN_DIR/seed_<k>/`` with both
files; ``params.json`` (the config) sits at the top of the run folder. Appending is safe across
``--resume``: rows go to the end of existing files, and the CSV header is written once.
"""

from __future__ import annotations

import csv
import json
import math
import os
import pathlib
from typing import Any, Iterable, Mapping


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
    """Appends result dicts to ``result.json`` and ``progress.csv`` in one folder."""

    def __init__(self, directory: str | os.PathLike) -> None:
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
        row = flatten(result)
        new = self._columns is None
        if new:
            self._columns = list(row)
        with open(self.csv_path, "a", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=self._columns, extrasaction="ignore")
            if new:
                writer.writeheader()
            writer.writerow(row)


class RunLogger:
    """One run folder: ``params.json`` and a ``ResultWriter`` per seed (or one, for one seed)."""

    def __init__(self, directory: str | os.PathLike, num_seeds: int | None) -> None:
        self.directory = pathlib.Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        if num_seeds is None:
            self.writers = [ResultWriter(self.directory)]
        else:
            self.writers = [ResultWriter(self.directory / f"seed_{k}") for k in range(num_seeds)]

    def write_params(self, params: Mapping[str, Any]) -> None:
        path = self.directory / "params.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(params, indent=2, default=_json_default) + "\n")
        os.replace(tmp, path)

    def write(self, results: Mapping[str, Any] | Iterable[Mapping[str, Any]]) -> None:
        results = [results] if isinstance(results, Mapping) else list(results)
        for writer, result in zip(self.writers, results, strict=True):
            writer.write(result)


def read_progress(run_dir: str | os.PathLike) -> list[list[dict[str, float]]]:
    """The ``progress.csv`` rows of each seed of a run folder (numbers as floats, NaN for blanks)."""
    run_dir = pathlib.Path(run_dir)
    seed_dirs = sorted(run_dir.glob("seed_*"), key=lambda p: int(p.name.split("_")[1]))
    files = [d / "progress.csv" for d in seed_dirs] or [run_dir / "progress.csv"]
    missing = [str(f) for f in files if not f.exists()]
    if missing:
        raise FileNotFoundError(f"no progress.csv in {str(run_dir)!r} (looked for {missing[0]})")
    seeds = []
    for path in files:
        with open(path, newline="") as f:
            seeds.append([{k: _number(v) for k, v in row.items()} for row in csv.DictReader(f)])
    return seeds


def _number(text: str) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan
