"""Atari throughput inside the compiled loop (ale-py's XLA vector env) against its compute floor,
at RLlib's pong-dqn.yaml config (PongDeterministic-v4, 42x42 frames, prioritized replay, double
dueling Q, one SGD step of 32 per fragment of 4 env steps of every game: RLlib's native ratio).
Rows, each with ``--envs`` games (1 and 8 by default):

- ``ALE only``: a scan of the ALE step with random actions (no network, no replay): what any
  agent pays for the emulator and its preprocessing;
- ``floor``: a scan of the ALE step and the greedy action of the config's network every env
  step, and one SGD step of that network on a fixed batch per fragment (the online, target and
  double-Q selector forwards, the gradient, clipping and Adam): what any DQN at this config
  must pay. No replay, no exploration, no target copy, no metrics. The batch passes an
  optimization barrier with the params every step, so that its conversion is not hoisted out
  of the loop as loop-invariant (a sampled batch's never is);
- ``DQN (pong-dqn.yaml)``: ``Trainer.train()`` iterations of ``--steps`` env steps;
- ``DQN xS seeds``: ``Trainer(config, num_seeds=S)`` (``--seeds``): S runs' games in one ALE
  batch, one vmapped learner; its ratio is per seed (S times the work);
- ``DQN, whole stacks``: each transition's obs and next_obs stacks stored whole
  (``worker.stores_frames_once`` patched off): the cost or gain of rebuilding stacks when sampling;
- ``DQN on EnvPool`` (``env=envpool:Pong-v5``, games stepping in EnvPool's threads on the host)
  and ``DQN on Gymnasium's ALE`` (``env=gymnasium:PongDeterministic-v4``, jaxdqn.hostatari's
  wrap_deepmind), where installed.

Every row is compiled and run once first (the DQN rows' first iteration holds the warm-up of
``learning_starts`` = 1000 steps); then ``--iterations`` rounds time one iteration of every row
in turn (interleaved, so the shared machine's load falls on every row alike) and the median is
reported, with ``time / floor`` per env step (per seed-run for the seeds row). Every env step is
4 emulator frames. Usage::

    python scripts/bench_atari.py [--envs 1 8] [--steps 2000] [--iterations 5] [--seeds 4] [--json FILE]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import time
from typing import Any, Callable
from unittest import mock

import jax
import jax.numpy as jnp
from bench_minatar import floor_sgd

from jaxdqn import envs, worker
from jaxdqn.cli import documents
from jaxdqn.config import DQNConfig, from_dict
from jaxdqn.learner import make_optimizer
from jaxdqn.networks import QNetwork
from jaxdqn.trainer import Trainer

# One timed iteration: () -> (env steps taken, of every seed; seconds).
Iteration = Callable[[], tuple[int, float]]


def pong_config(num_envs: int, steps: int, env: str | None = None) -> DQNConfig:
    doc = documents.yaml_load(open("tests/data/rllib/pong-dqn.yaml").read())
    algo, config, _, _ = documents.document_to_spec(doc, "pong-dqn.yaml")
    config.update(num_envs_per_worker=num_envs, timesteps_per_iteration=steps, learning_starts=1000)
    if env is not None:
        config["env"] = env
    return from_dict(config, algo)


def timed_scan(run: Callable[[Any, jax.Array], Any], state: Any, steps: int) -> Iteration:
    """An iteration of a jitted ``run(state, key) -> state`` over ``steps`` env steps."""
    run = jax.jit(run, donate_argnums=0)
    state = jax.tree_util.tree_map(jnp.copy, state)  # no buffer twice (reset's obs is its stack too)
    box = [jax.block_until_ready(run(state, jax.random.key(0)))]  # compile and one run

    def iteration() -> tuple[int, float]:
        start = time.perf_counter()
        box[0] = jax.block_until_ready(run(box[0], jax.random.key(len(box))))
        return steps, time.perf_counter() - start

    return iteration


def ale_only(config: DQNConfig, steps: int) -> Iteration:
    num_envs = config.num_envs
    spec = envs.make_env(config.env, config.env_params, num_envs=num_envs)

    def run(state, key):
        def body(state, key):
            act_key, step_key = jax.random.split(key)  # the step's keys draw the no-op starts after a reset
            action = jax.random.randint(act_key, (num_envs,), 0, spec.num_actions)
            out, state = envs.step(spec, jax.random.split(step_key, num_envs), state, action)
            return state, out.reward

        return jax.lax.scan(body, state, jax.random.split(key, steps // num_envs))[0]

    _, state = envs.reset(spec, jax.random.split(jax.random.key(0), num_envs))
    return timed_scan(run, state, steps)


def floor(config: DQNConfig, steps: int) -> Iteration:
    """See the module docstring: env step + greedy act per step, one SGD step per fragment."""
    num_envs, length = config.num_envs, config.rollout_fragment_length
    spec = envs.make_env(config.env, config.env_params, num_envs=num_envs)
    network = QNetwork(spec.num_actions, config.model, config.head)
    optimizer = make_optimizer(config.optimizer, lr=config.lr, adam_epsilon=config.adam_epsilon,
                               grad_clip=config.grad_clip, grad_clip_mode=config.grad_clip_mode)
    q = lambda params, obs: network.apply(params, obs).q  # noqa: E731
    batch_size = config.train_batch_size
    sgd = floor_sgd(config, network, optimizer)

    def run(carry, key):
        def act_step(carry, key):
            obs, env_state, params, opt_state, batch = carry
            action = jnp.argmax(q(params, obs), axis=-1)
            out, env_state = envs.step(spec, jax.random.split(key, num_envs), env_state, action)
            return (out.obs, env_state, params, opt_state, batch), None

        def fragment(carry, key):
            carry, _ = jax.lax.scan(act_step, carry, jax.random.split(key, length))
            obs, env_state, params, opt_state, batch = carry
            return (obs, env_state, *sgd(params, opt_state, batch), batch), None

        return jax.lax.scan(fragment, carry, jax.random.split(key, steps // (length * num_envs)))[0]

    reset_key, init_key, batch_key = jax.random.split(jax.random.key(0), 3)
    obs, env_state = envs.reset(spec, jax.random.split(reset_key, num_envs))
    params = network.init({"params": init_key, "noise": init_key}, obs)
    k1, k2, k3 = jax.random.split(batch_key, 3)
    shape = (batch_size,) + spec.obs_shape
    batch = (jax.random.randint(k1, shape, 0, 256, jnp.int32).astype(jnp.uint8),
             jax.random.randint(k2, (batch_size,), 0, spec.num_actions), jnp.ones((batch_size,)),
             jax.random.randint(k3, shape, 0, 256, jnp.int32).astype(jnp.uint8))
    return timed_scan(run, (obs, env_state, params, optimizer.init(params), batch), steps)


def trainer_iterations(config: DQNConfig, num_seeds: int | None = None) -> Iteration:
    trainer = Trainer(config, num_seeds=num_seeds)
    trainer.train()  # the warm-up and the compile

    def iteration() -> tuple[int, float]:
        start = time.perf_counter()
        results = trainer.train()
        seconds = time.perf_counter() - start
        results = results if isinstance(results, list) else [results]
        return sum(r["timesteps_this_iter"] for r in results), seconds

    return iteration


def dqn(config: DQNConfig, steps: int) -> Iteration:
    return trainer_iterations(config)


def dqn_seeds(seeds: int) -> Callable[[DQNConfig, int], Iteration]:
    return lambda config, steps: trainer_iterations(config, seeds)


def dqn_whole_stacks(config: DQNConfig, steps: int) -> Iteration:
    with mock.patch.object(worker, "stores_frames_once", lambda spec: False):
        return trainer_iterations(config)


def on_host(env: str) -> Callable[[DQNConfig, int], Iteration]:
    return lambda config, steps: trainer_iterations(config.replace(env=env))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--host", action="store_true", help="also the EnvPool and Gymnasium ALE rows")
    parser.add_argument("--json")
    args = parser.parse_args()
    out = []
    print(f"backend {jax.default_backend()}; pong-dqn.yaml (PongDeterministic-v4, 42x42), 4 frames per env step, "
          f"{args.steps} env steps per iteration, median of {args.iterations} interleaved")
    print("| row | games | env steps/s | time per env step / floor |")
    print("|---|---|---|---|")
    for num_envs in args.envs:
        steps = args.steps - args.steps % (4 * num_envs)
        config = pong_config(num_envs, steps)
        rows: dict[str, Callable[[DQNConfig, int], Iteration]] = {
            "ALE only": ale_only, "floor": floor, "DQN (pong-dqn.yaml)": dqn,
            f"DQN x{args.seeds} seeds": dqn_seeds(args.seeds), "DQN, whole stacks": dqn_whole_stacks}
        if args.host and importlib.util.find_spec("envpool") is not None:
            rows["DQN on EnvPool"] = on_host("envpool:Pong-v5")
        if args.host and importlib.util.find_spec("cv2") is not None:
            rows["DQN on Gymnasium's ALE"] = on_host("gymnasium:PongDeterministic-v4")
        iterations = {name: make(config, steps) for name, make in rows.items()}
        rates: dict[str, list[float]] = {name: [] for name in rows}
        for _ in range(args.iterations):
            for name, iteration in iterations.items():
                taken, seconds = iteration()
                rates[name].append(taken / seconds)
        rate = {name: statistics.median(r) for name, r in rates.items()}
        for name in rows:
            seeds = args.seeds if name.endswith("seeds") else 1
            ratio = rate["floor"] / (rate[name] / seeds)
            out.append({"row": name, "envs": num_envs, "env_steps_per_s": rate[name], "per_floor": ratio,
                        "rates": rates[name]})
            print(f"| {name} | {num_envs} | {rate[name]:,.0f} | {ratio:.2f} |", flush=True)
        del iterations
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"backend": jax.default_backend(), "steps": args.steps, "iterations": args.iterations,
                       "rows": out}, f, indent=1)


if __name__ == "__main__":
    main()
