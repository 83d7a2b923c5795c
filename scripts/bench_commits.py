"""Training speed of two commits, side by side: ``make_train`` at bench_train.py's PureJaxRL
CartPole-v1 configuration (uniform replay, and prioritized), each commit at its own defaults.

Each commit's checkout runs in its own processes (a ``git worktree`` of ``--base``; this
checkout for the other), alternating A B A B for ``--rounds`` rounds; a process compiles both
configurations and times ``--repeats`` runs of each. The table has each commit's median and the
ratio this / base per round (the shared machine's load falls on both alike). ``--prng`` sets
the same ``prng_impl`` in both::

    python scripts/bench_commits.py --base 6e2496f --timesteps 200000 --repeats 3 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile

# Only the API that every commit has: configs by keyword, make_train(config).train(key).
SNIPPET = r"""
import json, statistics, sys, time
import jax
from jaxdqn import DQNConfig, ExplorationConfig, ModelConfig, SimpleQConfig
from jaxdqn.plan import make_train
steps, repeats = int(sys.argv[1]), int(sys.argv[2])
extra = {"prng_impl": sys.argv[3]} if len(sys.argv) > 3 else {}
common = dict(**extra, env="CartPole-v1", total_timesteps=steps, num_envs_per_worker=10, rollout_fragment_length=1,
              train_batch_size=128, buffer_size=10_000, learning_starts=10_000, target_network_update_freq=500,
              td_error_loss_fn="mse", lr=2.5e-4, grad_clip=None, timesteps_per_iteration=10_000,
              model=ModelConfig(fcnet_hiddens=(120, 84), fcnet_activation="relu"),
              exploration_config=ExplorationConfig(final_epsilon=0.05, epsilon_timesteps=steps // 2))
configs = {"uniform": SimpleQConfig(**common),
           "prioritized": DQNConfig(prioritized_replay=True, double_q=False, dueling=False, hiddens=(), **common)}
out = {}
for name, config in configs.items():
    train = jax.jit(make_train(config)).lower(jax.random.key(0)).compile()
    times = []
    for i in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(train(jax.random.key(i)))
        times.append(time.perf_counter() - start)
    out[name] = statistics.median(times)
print(json.dumps(out))
"""


def run(checkout: pathlib.Path, steps: int, repeats: int, prng: str | None) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-c", SNIPPET, str(steps), str(repeats), *([prng] if prng else [])],
                          cwd=checkout,
                          env={**os.environ, "PYTHONPATH": str(checkout)},
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the commit to compare against")
    parser.add_argument("--timesteps", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--prng", help="the same prng_impl for both commits (default: each commit's own)")
    args = parser.parse_args()
    here = pathlib.Path(__file__).resolve().parents[1]
    base = pathlib.Path(tempfile.mkdtemp(prefix="jaxdqn-base-")) / "checkout"
    subprocess.run(["git", "worktree", "add", "--detach", str(base), args.base], cwd=here, check=True,
                   capture_output=True)
    try:
        kernels = here / "jaxdqn" / "buffers" / "libjaxdqn_kernels.so"  # the native kernels, built here
        if kernels.exists():
            shutil.copy(kernels, base / "jaxdqn" / "buffers" / kernels.name)
        rows: dict[str, list[dict[str, float]]] = {"base": [], "this": []}
        for i in range(args.rounds):
            rows["base"].append(run(base, args.timesteps, args.repeats, args.prng))
            rows["this"].append(run(here, args.timesteps, args.repeats, args.prng))
            print(f"round {i + 1}: base {rows['base'][-1]}, this {rows['this'][-1]}", flush=True)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=here, capture_output=True)
    print(f"\n{args.timesteps} env steps, median of {args.repeats} runs per process, {args.rounds} rounds")
    print("| config | base s | this s | this / base per round | median |")
    print("|---|---|---|---|---|")
    for name in rows["base"][0]:
        ratios = [t[name] / b[name] for b, t in zip(rows["base"], rows["this"])]
        print(f"| {name} | {statistics.median(b[name] for b in rows['base']):.2f} | "
              f"{statistics.median(t[name] for t in rows['this']):.2f} | {', '.join(f'{r:.3f}' for r in ratios)} | "
              f"{statistics.median(ratios):.3f} |")


if __name__ == "__main__":
    main()
