"""The plan's cost per random-stream implementation: one chunk of a CartPole DQN plan with the
portable Philox (``_platform.PHILOX``, the default: it lowers in every device layout), jax's own
Philox (the same numbers; it does not lower in multi-device programs) and threefry (JAX's
default), interleaved, median of ``--repeats``; and the seconds XLA takes to compile that chunk
(every run and every test pays it once per program).

    python scripts/bench_prng.py --repeats 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import jax

import jaxdqn._platform as platform
from jaxdqn import DQNConfig, ModelConfig
from jaxdqn.plan import make_plan

CONFIG = DQNConfig(env="CartPole-v1", buffer_size=10_000, learning_starts=1000, num_envs_per_worker=4,
                   rollout_fragment_length=1, timesteps_per_iteration=20_000, total_timesteps=100_000,
                   train_batch_size=64, training_intensity=16, model=ModelConfig(fcnet_hiddens=(64, 64)),
                   hiddens=(64,))
SPECS = {"portable philox4x32": platform.PHILOX, "jax philox4x32": "philox4x32", "threefry2x32": "threefry2x32"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    chunks, compile_s = {}, {}
    original = platform.prng_spec
    try:
        for name, spec in SPECS.items():
            platform.prng_spec = lambda impl, spec=spec: spec  # the plan's keys of this implementation
            platform.key_dtype.cache_clear()
            plan = make_plan(CONFIG)
            state = jax.block_until_ready(jax.jit(plan.init)(jax.random.key(0)))
            lowered = jax.jit(plan.chunk).lower(state)
            start = time.perf_counter()
            chunk = lowered.compile()
            compile_s[name] = time.perf_counter() - start
            state = jax.block_until_ready(chunk(state)[0])  # warm
            chunks[name] = (chunk, state)
    finally:
        platform.prng_spec = original
        platform.key_dtype.cache_clear()
    times: dict[str, list[float]] = {name: [] for name in chunks}
    for _ in range(args.repeats):
        for name, (chunk, state) in chunks.items():
            start = time.perf_counter()
            jax.block_until_ready(chunk(state)[0])
            times[name].append(time.perf_counter() - start)
    medians = {name: statistics.median(t) for name, t in times.items()}
    for name, seconds in medians.items():
        print(f"{name:>20}: {seconds:.3f} s per chunk of {CONFIG.timesteps_per_iteration} env steps "
              f"({seconds / medians['jax philox4x32']:.2f}x jax's Philox); compiled in {compile_s[name]:.1f} s")
    print(json.dumps({"seconds_per_chunk": medians, "compile_seconds": compile_s}))


if __name__ == "__main__":
    main()
