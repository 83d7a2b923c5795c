"""Replay-buffer benchmark: jaxdqn's uniform / prioritized buffers against flashbax's.

Inside one jitted ``lax.scan`` of ``--iters`` iterations, each iteration adds 10 CartPole
transitions, samples 128 and (prioritized) writes 128 new priorities. The buffer is first filled
to half its capacity (untimed). Each configuration is compiled once and run ``--runs`` times
from a fresh copy of the filled state (donated, so storage is updated in place), jaxdqn's and
flashbax's runs alternating; the table shows the median microseconds per iteration, the compile
time, and the ratio flashbax / jaxdqn (> 1: jaxdqn is faster). Every field of every sampled
batch is read (``consumed``), as a learner would. Both draw from keys of the execution plan's
default implementation (``--prng``, JAX's threefry).

    pip install -e ".[bench]" && python scripts/bench_buffers.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxdqn import buffers
from jaxdqn.buffers import tree_kernels
from jaxdqn.config import DQNConfig
from jaxdqn.types import Transition

ADD, BATCH, PRIORITY_EPS = 10, 128, 1e-6


def transitions(step: jax.Array, k: int) -> Transition:
    """``k`` CartPole-shaped transitions that depend on ``step`` (nothing constant-folds)."""
    base = (step * k + jnp.arange(k)).astype(jnp.float32)
    obs = jnp.stack([base, base + 1, base + 2, base + 3], 1) * 1e-3
    return Transition(
        obs=obs,
        action=(step + jnp.arange(k, dtype=jnp.int32)) % 2,
        reward=jnp.ones((k,), jnp.float32),
        discount=jnp.ones((k,), jnp.float32),
        next_obs=obs + 1e-3,
    )


def consumed(tree) -> jax.Array:
    """Every leaf of a sampled batch, read (summed): a learner reads every field, and a loop
    that read one would let XLA drop the other fields' gathers (and time less than a sample)."""
    return sum(jnp.sum(x.astype(jnp.float32)) for x in jax.tree_util.tree_leaves(tree))


def td_of(items: Transition, weights: jax.Array) -> jax.Array:
    """A stand-in for the learner's TD errors: depends on what was drawn."""
    return items.obs[:, 0] * weights - 0.5


class Contender(NamedTuple):
    init: Callable  # () -> state
    add: Callable  # (state, Transition[K]) -> state
    iteration: Callable  # (state, key, step) -> (state, scalar)


def switched(on: bool, fn: Callable) -> Callable:
    """``fn`` traced with ``JAXDQN_CPU_KERNELS`` set to ``on`` (the switch is read at trace time)."""
    def traced(*args):
        old = os.environ.get(tree_kernels.SWITCH)
        os.environ[tree_kernels.SWITCH] = "1" if on else "0"
        try:
            return fn(*args)
        finally:
            if old is None:
                del os.environ[tree_kernels.SWITCH]
            else:
                os.environ[tree_kernels.SWITCH] = old
    return traced


def jaxdqn_contender(kind: str, capacity: int, cpu_kernels: bool = True) -> Contender:
    if kind == "uniform":
        buf = buffers.uniform(capacity)
    else:
        buf = buffers.prioritized(capacity, alpha=0.6)
    example = jax.tree_util.tree_map(lambda x: x[0], transitions(jnp.int32(0), 1))

    def iteration(state, key, step):
        state = buf.add(state, transitions(step, ADD))
        s = buf.sample(state, key, BATCH, 0.4)
        state = buf.update(state, s.indices, td_of(s.items, s.weights))
        return state, consumed(s.items)

    return Contender(init=lambda: buf.init(example), add=switched(cpu_kernels, buf.add),
                     iteration=switched(cpu_kernels, iteration))


def flashbax_contender(kind: str, capacity: int) -> Contender:
    import flashbax as fbx

    example = jax.tree_util.tree_map(lambda x: x[0], transitions(jnp.int32(0), 1))
    obs_example = {"obs": example.obs, "action": example.action, "reward": example.reward,
                   "discount": example.discount}
    if kind == "uniform":
        buf = fbx.make_flat_buffer(capacity, 1, BATCH, add_batch_size=ADD)
    else:
        buf = fbx.make_prioritised_flat_buffer(capacity, 1, BATCH, add_batch_size=ADD, priority_exponent=0.6)

    def as_flat(t: Transition):
        # flashbax's flat buffer stores obs and forms (obs, next_obs) pairs itself.
        return {"obs": t.obs, "action": t.action, "reward": t.reward, "discount": t.discount}

    def add(state, items):
        return buf.add(state, as_flat(items))

    def iteration(state, key, step):
        state = add(state, transitions(step, ADD))
        s = buf.sample(state, key)
        first = s.experience.first
        # A transition's worth: (obs, action, reward, discount) and the next obs.
        batch = consumed((first, s.experience.second["obs"]))
        if kind == "uniform":
            return state, batch
        weights = jnp.ones((BATCH,), jnp.float32)  # flashbax leaves importance weights to the user
        td = first["obs"][:, 0] * weights - 0.5
        state = buf.set_priorities(state, s.indices, jnp.abs(td) + PRIORITY_EPS)
        return state, batch

    return Contender(init=lambda: buf.init(obs_example), add=add, iteration=iteration)


def fill(contender: Contender, items: int):
    """The state after ``items`` transitions were added, ``ADD`` at a time (untimed)."""

    @jax.jit
    def run(state):
        def body(state, step):
            return contender.add(state, transitions(step, ADD)), None

        return lax.scan(body, state, jnp.arange(items // ADD, dtype=jnp.int32))[0]

    return jax.block_until_ready(run(contender.init()))


def prepare(contender: Contender, capacity: int, iters: int, prng: str) -> tuple[float, Callable[[int], float]]:
    """Fill the buffer to half its capacity and compile the timed loop: ``(compile seconds,
    run(seed) -> seconds per iteration)``, each run from a fresh copy of the filled state."""
    filled = fill(contender, capacity // 2)

    def loop(state, key):
        def body(state, xs):
            step, k = xs
            return contender.iteration(state, k, step)

        steps = jnp.arange(iters, dtype=jnp.int32) + capacity
        state, out = lax.scan(body, state, (steps, jax.random.split(key, iters)))
        return state, out.sum()

    jitted = jax.jit(loop, donate_argnums=0)
    t0 = time.perf_counter()
    compiled = jitted.lower(filled, jax.random.key(0, impl=prng)).compile()
    compile_s = time.perf_counter() - t0

    def run(seed: int) -> float:
        state = jax.tree_util.tree_map(jnp.copy, filled)
        jax.block_until_ready(state)
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(state, jax.random.key(seed, impl=prng)))
        return (time.perf_counter() - t0) / iters

    return compile_s, run


def measure(contenders: dict[str, Contender], capacity: int, iters: int, runs: int, prng: str
            ) -> dict[str, tuple[float, float]]:
    """``name -> (median microseconds per iteration, compile seconds)``; the contenders' runs
    alternate (one run of each per round), so that the shared machine's load hits both alike."""
    prepared = {name: prepare(c, capacity, iters, prng) for name, c in contenders.items()}
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for seed in range(runs):
        for name, (_, run) in prepared.items():
            times[name].append(run(seed))
    return {name: (statistics.median(times[name]) * 1e6, prepared[name][0]) for name in contenders}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--capacities", type=int, nargs="+", default=[10_000, 1_000_000])
    parser.add_argument("--no-flashbax", action="store_true", help="only time jaxdqn")
    parser.add_argument("--prng", default=DQNConfig.prng_impl, choices=["threefry2x32", "rbg", "unsafe_rbg"],
                        help="the keys both contenders draw from (default: the plan's, %(default)s)")
    args = parser.parse_args()

    try:
        import flashbax  # noqa: F401

        with_flashbax = not args.no_flashbax
    except ImportError:
        print("flashbax is not installed (pip install -e '.[bench]'): timing jaxdqn alone")
        with_flashbax = False

    print(f"jax {jax.__version__} on {jax.devices()[0].platform}; {args.iters} iterations of "
          f"add {ADD} + sample {BATCH} (+ update {BATCH}), median of {args.runs} runs, {args.prng} keys\n")
    header = "| buffer | capacity | jaxdqn us/iter | compile s | flashbax us/iter | compile s | flashbax / jaxdqn |"
    print(header)
    print("|---|---|---|---|---|---|---|")
    # On the CPU the prioritized buffer runs its tree as fused kernels when they are built
    # (jaxdqn.buffers.tree_kernels); its XLA program is timed beside it, in the same rounds.
    kernels = jax.devices()[0].platform == "cpu" and buffers.tree_kernels.available()
    if jax.devices()[0].platform == "cpu" and not kernels:
        print("the fused tree kernels are not built (no C++ compiler at install?): XLA program only\n")
    for kind in ("uniform", "prioritized"):
        for capacity in args.capacities:
            contenders = {"jaxdqn": jaxdqn_contender(kind, capacity)}
            if kind == "prioritized" and kernels:
                contenders["jaxdqn, XLA program"] = jaxdqn_contender(kind, capacity, cpu_kernels=False)
            if with_flashbax:
                contenders["flashbax"] = flashbax_contender(kind, capacity)
            result = measure(contenders, capacity, args.iters, args.runs, args.prng)
            for name, label in (("jaxdqn", kind + (" (fused kernels)" if kind == "prioritized" and kernels else "")),
                                ("jaxdqn, XLA program", kind + " (XLA program)")):
                if name not in result:
                    continue
                ours, ours_c = result[name]
                if with_flashbax:
                    theirs, theirs_c = result["flashbax"]
                    row = f"{theirs:.1f} | {theirs_c:.2f} | {theirs / ours:.2f}x"
                else:
                    row = "- | - | -"
                print(f"| {label} | {capacity:,} | {ours:.1f} | {ours_c:.2f} | {row} |", flush=True)


if __name__ == "__main__":
    main()
