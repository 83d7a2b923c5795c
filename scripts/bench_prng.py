"""The plan's cost per random-stream implementation (``prng_impl``): one chunk of a CartPole DQN
plan with each of JAX's implementations, interleaved, median of ``--repeats``; and the seconds
XLA takes to compile that chunk. ``threefry2x32`` is the default (the same numbers under
``vmap`` and in every device layout); ``rbg`` and ``unsafe_rbg`` draw with XLA's
RngBitGenerator.

    python scripts/bench_prng.py --repeats 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import jax

from jaxdqn import DQNConfig, ModelConfig
from jaxdqn.plan import make_plan

CONFIG = DQNConfig(env="CartPole-v1", buffer_size=10_000, learning_starts=1000, num_envs_per_worker=4,
                   rollout_fragment_length=1, timesteps_per_iteration=20_000, total_timesteps=100_000,
                   train_batch_size=64, training_intensity=16, model=ModelConfig(fcnet_hiddens=(64, 64)),
                   hiddens=(64,))
IMPLS = ("threefry2x32", "rbg", "unsafe_rbg")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    chunks, compile_s = {}, {}
    for impl in IMPLS:
        plan = make_plan(CONFIG.replace(prng_impl=impl))
        state = jax.block_until_ready(jax.jit(plan.init)(jax.random.key(0)))
        lowered = jax.jit(plan.chunk).lower(state)
        start = time.perf_counter()
        chunk = lowered.compile()
        compile_s[impl] = time.perf_counter() - start
        state = jax.block_until_ready(chunk(state)[0])  # warm
        chunks[impl] = (chunk, state)
    times: dict[str, list[float]] = {impl: [] for impl in chunks}
    for _ in range(args.repeats):
        for impl, (chunk, state) in chunks.items():
            start = time.perf_counter()
            jax.block_until_ready(chunk(state)[0])
            times[impl].append(time.perf_counter() - start)
    medians = {impl: statistics.median(t) for impl, t in times.items()}
    for impl, seconds in medians.items():
        print(f"{impl:>14}: {seconds:.3f} s per chunk of {CONFIG.timesteps_per_iteration} env steps "
              f"({seconds / medians['threefry2x32']:.2f}x threefry); compiled in {compile_s[impl]:.1f} s")
    print(json.dumps({"seconds_per_chunk": medians, "compile_seconds": compile_s}))


if __name__ == "__main__":
    main()
