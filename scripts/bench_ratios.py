"""Interleaved speed ratios at bench_train's configuration: jaxdqn / floor, prioritized /
uniform (rows alternating, one run of each per round) and 8 vmapped seeds / 8 x one seed.

``bench_train.py`` times whole rows; on a shared machine a load change during one row moves its
ratio. Here every round runs each contender back to back, and the ratios are taken per round,
then the median. Usage: ``python scripts/bench_ratios.py [--timesteps 300000] [--rounds 5]
[--seed-timesteps 150000] [--seed-rounds 3]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import jax

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_train import compile_it, make_floor, purejaxrl_config, stacked_seeds, timed  # noqa: E402

from jaxdqn.plan import make_train  # noqa: E402


def seconds(fn, key) -> float:
    return timed(fn, key)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--timesteps", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed-timesteps", type=int, default=150_000)
    parser.add_argument("--seed-rounds", type=int, default=3)
    args = parser.parse_args()

    floor = compile_it(make_floor(purejaxrl_config(args.timesteps)))[1]
    uniform = compile_it(make_train(purejaxrl_config(args.timesteps)))[1]
    prioritized = compile_it(make_train(purejaxrl_config(args.timesteps, prioritized=True)))[1]
    vs_floor, per_vs_uniform = [], []
    for i in range(args.rounds):
        key = jax.random.key(i)
        t_floor, t_uniform, t_per = seconds(floor, key), seconds(uniform, key), seconds(prioritized, key)
        vs_floor.append(t_uniform / t_floor)
        per_vs_uniform.append(t_per / t_uniform)
        print(f"round {i}: floor {t_floor:.2f} s, jaxdqn {t_uniform:.2f} s, prioritized {t_per:.2f} s", flush=True)

    train = make_train(purejaxrl_config(args.seed_timesteps))
    one = compile_it(train)[1]
    eight = compile_it(stacked_seeds(train, 8))[1]
    seeds = []
    for i in range(args.seed_rounds):
        key = jax.random.key(i)
        before = seconds(one, key)
        t_eight = seconds(eight, key)
        t_one = (before + seconds(one, jax.random.fold_in(key, 1))) / 2  # one seed, around the 8-seed run
        seeds.append(t_eight / (8 * t_one))
        print(f"seed round {i}: one seed {t_one:.2f} s, 8 seeds {t_eight:.2f} s", flush=True)

    fmt = lambda xs: ", ".join(f"{x:.2f}" for x in xs)  # noqa: E731
    print(f"jaxdqn / floor: {fmt(vs_floor)} (median {statistics.median(vs_floor):.2f})")
    print(f"prioritized / uniform: {fmt(per_vs_uniform)} (median {statistics.median(per_vs_uniform):.2f})")
    print(f"8 seeds / (8 x one seed): {fmt(seeds)} (median {statistics.median(seeds):.2f})")


if __name__ == "__main__":
    main()
