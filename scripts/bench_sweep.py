"""Sweep speed: a grid of ``--values`` learning rates x ``--seeds`` seeds as ONE vmapped program
(``Trainer(..., num_seeds=S, trials=...)``, what ``jaxdqn train`` runs for a grid_search over a
traced key) against the same runs done the usual ways:

- ``one program``: every trial x seed in one compiled program (lr traced);
- ``per-trial programs``: one program per lr, its seeds vmapped (jaxdqn without traced keys);
- ``separate runs``: one program per (lr, seed), as Tune runs its trials (one run per trial).

The config is the shipped DQN CartPole-v1 tuned example with ``lr_schedule`` removed (the lr is
what is swept). Every row's wall time counts everything a user waits for: building, compiling
and running every chunk until ``--timesteps`` env steps per run. Rows are timed round robin
(one repetition of each per round) so the shared machine's load falls on each alike; the
median of ``--repeats`` rounds is reported, with the ratio to ``one program``. Usage::

    python scripts/bench_sweep.py [--timesteps 20000] [--values 4] [--seeds 4] [--repeats 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import importlib.resources
import json
import statistics
import time

import jax

from jaxdqn.cli import documents
from jaxdqn.config import from_dict
from jaxdqn.trainer import Trainer

LRS = [1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-5, 3e-2, 1e-5]


def base_config(timesteps: int):
    doc = documents.yaml_load(importlib.resources.files("jaxdqn").joinpath("tuned_examples", "cartpole-v1-dqn.yaml")
                        .read_text())
    _, config, _, _ = documents.document_to_spec(doc, "cartpole-v1-dqn.yaml")
    config.update(lr_schedule=None, total_timesteps=timesteps, timesteps_per_iteration=max(1000, timesteps // 4))
    return from_dict(config)


def run_to_end(trainer: Trainer, timesteps: int) -> None:
    while trainer.timesteps_total < timesteps:
        trainer.train()
    jax.block_until_ready(trainer.state)


def one_program(config, lrs, seeds, timesteps):
    run_to_end(Trainer(config, num_seeds=seeds, trials=[{"lr": lr} for lr in lrs]), timesteps)


def per_trial_programs(config, lrs, seeds, timesteps):
    for lr in lrs:
        run_to_end(Trainer(config.replace(lr=lr), num_seeds=seeds), timesteps)


def separate_runs(config, lrs, seeds, timesteps):
    for lr in lrs:
        for seed in range(seeds):
            run_to_end(Trainer(config.replace(lr=lr, seed=seed)), timesteps)


ROWS = {"one program": one_program, "per-trial programs": per_trial_programs, "separate runs": separate_runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timesteps", type=int, default=20_000, help="env steps per run")
    parser.add_argument("--values", type=int, default=4, help=f"learning rates swept (at most {len(LRS)})")
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args()
    config = base_config(args.timesteps)
    lrs = LRS[:args.values]
    times: dict[str, list[float]] = {name: [] for name in ROWS}
    for _ in range(args.repeats):
        for name, row in ROWS.items():
            start = time.perf_counter()
            row(config, lrs, args.seeds, args.timesteps)
            times[name].append(time.perf_counter() - start)
    runs = len(lrs) * args.seeds
    base = statistics.median(times["one program"])
    print(f"{len(lrs)} lr values x {args.seeds} seeds = {runs} runs of {args.timesteps} env steps "
          f"(DQN CartPole-v1 tuned example, lr_schedule removed), {jax.device_count()} {jax.default_backend()} "
          f"device(s), median of {args.repeats}")
    print(f"{'row':<20} {'programs':>8} {'wall s':>8} {'x one program':>14} {'env steps/s':>12}")
    programs = {"one program": 1, "per-trial programs": len(lrs), "separate runs": runs}
    out = []
    for name in ROWS:
        wall = statistics.median(times[name])
        out.append({"row": name, "programs": programs[name], "wall_s": wall, "ratio": wall / base,
                    "env_steps_per_s": runs * args.timesteps / wall, "all_s": times[name]})
        print(f"{name:<20} {programs[name]:>8} {wall:>8.1f} {wall / base:>14.2f} {runs * args.timesteps / wall:>12,.0f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rows": out}, f, indent=2)


if __name__ == "__main__":
    main()
