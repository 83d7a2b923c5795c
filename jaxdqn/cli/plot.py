"""``jaxdqn plot``: learning curves of a run folder or of a sweep's experiment folder."""

from __future__ import annotations

import argparse
import pathlib

from jaxdqn.cli.usage import UsageError, as_usage_errors


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
