"""Atari throughput inside the compiled loop (ale-py's XLA vector env): env steps per second of

- ``ALE only``: a scan of the ALE step with random actions (no network, no replay): the floor
  any agent pays for the emulator and its preprocessing;
- ``DQN``: RLlib's pong-dqn.yaml config (42x42 frames, prioritized replay, one SGD step of 32
  per 4 env steps per env, RLlib's native ratio), timed over ``--iterations`` iterations of
  ``--steps`` env steps after the first (which holds the warm-up and the compile);
- ``DQN, whole stacks``: the same with each transition's obs and next_obs stacks stored whole
  (the replay before frames were stored once: ``worker.stores_frames_once`` patched off), the
  cost or gain of rebuilding stacks when sampling;
- ``DQN on EnvPool``: the same config with ``env=envpool:Pong-v5`` (the documented switch: the
  games step on the host in EnvPool's threads, one jitted action call per env step, one jitted
  store + replay call per fragment), where EnvPool is installed;
- ``DQN on Gymnasium's ALE``: the same with ``env=gymnasium:PongDeterministic-v4`` (Gymnasium's
  ALE with ``jaxdqn.hostatari``'s wrap_deepmind, in the trainer's process), where OpenCV is
  installed;

each with ``--envs`` games (1 and 8 by default; an ALE batch is one program, so "seeds" are games
here). Every env step is 4 emulator frames. Median over iterations. Usage::

    python scripts/bench_atari.py [--envs 1 8] [--steps 2000] [--iterations 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import time
from unittest import mock

import jax

from jaxdqn import envs, worker
from jaxdqn.cli import documents
from jaxdqn.config import from_dict
from jaxdqn.trainer import Trainer


def pong_config(num_envs: int, steps: int, env: str | None = None):
    doc = documents.yaml_load(open("tests/data/rllib/pong-dqn.yaml").read())
    algo, config, _, _ = documents.document_to_spec(doc, "pong-dqn.yaml")
    config.update(num_envs_per_worker=num_envs, timesteps_per_iteration=steps, learning_starts=1000)
    if env is not None:
        config["env"] = env
    return from_dict(config, algo)


def ale_only(num_envs: int, steps: int, iterations: int) -> float:
    spec = envs.make_env("PongDeterministic-v4", {"img_height": 42, "img_width": 42}, num_envs=num_envs)

    def run(state, key):
        def body(state, key):
            act_key, step_key = jax.random.split(key)  # the step's keys draw the no-op starts after a reset
            action = jax.random.randint(act_key, (num_envs,), 0, spec.num_actions)
            out, state = envs.step(spec, jax.random.split(step_key, num_envs), state, action)
            return state, out.reward

        return jax.lax.scan(body, state, jax.random.split(key, steps))

    run = jax.jit(run)
    _, state = envs.reset(spec, jax.random.split(jax.random.key(0), num_envs))
    state, _ = jax.block_until_ready(run(state, jax.random.key(1)))
    times = []
    for i in range(iterations):
        start = time.perf_counter()
        state, _ = jax.block_until_ready(run(state, jax.random.key(i + 2)))
        times.append(time.perf_counter() - start)
    return steps * num_envs / statistics.median(times)


def dqn(num_envs: int, steps: int, iterations: int, env: str | None = None) -> float:
    trainer = Trainer(pong_config(num_envs, steps, env))
    trainer.train()  # warm-up and compile
    rates = [trainer.train()["num_env_steps_sampled_throughput_per_sec"] for _ in range(iterations)]
    return statistics.median(rates)


def dqn_whole_stacks(num_envs: int, steps: int, iterations: int) -> float:
    with mock.patch.object(worker, "stores_frames_once", lambda spec: False):
        return dqn(num_envs, steps, iterations)


def dqn_envpool(num_envs: int, steps: int, iterations: int) -> float:
    return dqn(num_envs, steps, iterations, env="envpool:Pong-v5")


def dqn_gymnasium(num_envs: int, steps: int, iterations: int) -> float:
    return dqn(num_envs, steps, iterations, env="gymnasium:PongDeterministic-v4")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args()
    rows = []
    print(f"backend {jax.default_backend()}; PongDeterministic-v4, 42x42, 4 frames per env step")
    print("| row | games | env steps/s | frames/s |")
    print("|---|---|---|---|")
    for num_envs in args.envs:
        rows_of = [("ALE only", ale_only), ("DQN (pong-dqn.yaml)", dqn), ("DQN, whole stacks", dqn_whole_stacks)]
        if importlib.util.find_spec("envpool") is not None:
            rows_of.append(("DQN on EnvPool", dqn_envpool))
        if importlib.util.find_spec("cv2") is not None:
            rows_of.append(("DQN on Gymnasium's ALE", dqn_gymnasium))
        for name, fn in rows_of:
            rate = fn(num_envs, args.steps, args.iterations)
            rows.append({"row": name, "envs": num_envs, "env_steps_per_s": rate})
            print(f"| {name} | {num_envs} | {rate:,.0f} | {4 * rate:,.0f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"backend": jax.default_backend(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
