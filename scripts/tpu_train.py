"""Train many seeds on a TPU VM (or any accelerator) through the Python API, then report.

Install on the TPU VM: ``pip install -e . "jax[tpu]"`` (jax's TPU wheels). Then::

    python scripts/tpu_train.py --seeds 128 --env CartPole-v1 --timesteps 100000

All seeds run in one jitted, vmapped program (``make_train``): independent params, exploration
and replay per seed, no collectives between them. One TPU core runs the whole batch of seeds;
spreading seeds and replay shards over every core of a slice and over several hosts
(``jax.distributed``) is the multi-device issue's ``parallel.py``.
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np

from jaxdqn import cli
from jaxdqn.config import from_dict
from jaxdqn.plan import make_train


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=128)
    parser.add_argument("--algo", default="dqn", choices=["dqn", "simple_q"])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--timesteps", type=int, default=100_000)
    args = parser.parse_args()

    tuned = cli.tuned_example(args.algo, args.env)
    config = {"env": args.env}
    if tuned is not None:
        _, config, _, _ = cli.document_to_spec(tuned[1], tuned[0])
    config = from_dict({**config, "total_timesteps": args.timesteps}, args.algo)
    print(f"jax {jax.__version__} on {jax.devices()}")
    train = jax.jit(jax.vmap(make_train(config)))
    keys = jax.random.split(jax.random.key(config.seed), args.seeds)
    start = time.perf_counter()
    compiled = train.lower(keys).compile()
    print(f"compiled in {time.perf_counter() - start:.1f}s")
    start = time.perf_counter()
    _, reports = jax.block_until_ready(compiled(keys))
    seconds = time.perf_counter() - start
    final = np.asarray(reports["episode_reward_mean"])[:, -1]
    steps = int(np.asarray(reports["timesteps_total"])[0, -1])
    print(f"{args.seeds} seeds x {steps} env steps in {seconds:.1f}s "
          f"({args.seeds * steps / seconds:,.0f} env steps/s in total)")
    print(f"final episode_reward_mean: median {np.median(final):.1f}, min {final.min():.1f}, max {final.max():.1f}")


if __name__ == "__main__":
    main()
