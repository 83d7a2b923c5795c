"""Where the MinAtar plan's time goes against its floor: a ``jax.profiler`` trace of one chunk of
``--frames`` learning frames of the Breakout-MinAtar tuned example (after its warm-up) and of the
same number of learning frames of ``bench_minatar.py``'s floor, with XLA:CPU's kernels counted
and timed per frame, the kernel kinds where the two differ most first. Usage::

    python scripts/profile_minatar.py [--frames 1000] [--top 25] [--out /tmp/jaxdqn-profile]
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import glob
import gzip
import json
import re
import shutil

import jax
from bench_minatar import make_floor, tuned_config

from jaxdqn.plan import make_plan

# Trace events that are not kernels: Python frames, executors, thread-pool markers.
NOT_KERNELS = ("$", "end:", "Thread", "Slinky", "np.asarray", "Pjit", "Execute", "ThunkExecutor", "Allocate",
               "CommonPjRt", "Handle inputs")


def kernels(folder: str) -> tuple[collections.Counter, collections.Counter]:
    """(microseconds, count) per kernel kind (the name without its number) in a trace folder."""
    path = glob.glob(f"{folder}/**/*.trace.json.gz", recursive=True)[0]
    micros, count = collections.Counter(), collections.Counter()
    for event in json.load(gzip.open(path))["traceEvents"]:
        name = event.get("name", "")
        if event.get("ph") == "X" and not name.startswith(NOT_KERNELS) and "Thunk" not in name:
            kind = re.sub(r"\.\d+(\.clone)?$", "", name)
            micros[kind] += event["dur"]
            count[kind] += 1
    return micros, count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=1000)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--out", default="/tmp/jaxdqn-profile")
    args = parser.parse_args()
    n = args.frames
    config = dataclasses.replace(tuned_config(n), timesteps_per_iteration=n)
    floor = jax.jit(make_floor(dataclasses.replace(config, learning_starts=0, total_timesteps=n)))
    plan = make_plan(config)
    chunk = jax.jit(plan.chunk, donate_argnums=0)
    key = jax.random.key(0)
    jax.block_until_ready(floor(key))
    state = jax.jit(plan.start)(key)
    trained = 0
    while trained == 0:  # the warm-up's chunks, until one has trained
        state, report = chunk(state)
        trained = int(report["num_steps_trained"])
    state, _ = jax.block_until_ready(chunk(state))  # compiled and past the warm-up
    rows = {}
    for name, run in (("floor", lambda: floor(key)), ("jaxdqn", lambda: chunk(state))):
        folder = f"{args.out}/{name}"
        shutil.rmtree(folder, ignore_errors=True)
        with jax.profiler.trace(folder):
            out = jax.block_until_ready(run())
        if name == "jaxdqn":
            state = out[0]
        rows[name] = kernels(folder)
    (fm, fc), (jm, jc) = rows["floor"], rows["jaxdqn"]
    print(f"Breakout-MinAtar tuned example, {n} learning frames; per frame: kernels floor {sum(fc.values()) / n:.0f}, "
          f"jaxdqn {sum(jc.values()) / n:.0f}")
    print("| kernel kind | floor per frame | jaxdqn per frame | floor us per frame | jaxdqn us per frame |")
    print("|---|---|---|---|---|")
    kinds = sorted(set(fc) | set(jc), key=lambda k: -(jm[k] - fm[k]))
    for kind in [k for k in kinds if k != "while"][:args.top]:
        print(f"| {kind} | {fc[kind] / n:.2f} | {jc[kind] / n:.2f} | {fm[kind] / n:.1f} | {jm[kind] / n:.1f} |")


if __name__ == "__main__":
    main()
