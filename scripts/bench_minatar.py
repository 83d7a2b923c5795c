"""MinAtar training speed: the shipped Breakout-MinAtar tuned example (the paper's protocol: one
env, sticky actions, one SGD step of 32 per frame, centred RMSProp) against its compute floor.

Rows (5000 frames of warm-up, then ``--timesteps`` frames of learning per seed, as
``make_train`` runs them):

- ``floor``: a scan of only the wrapped env step + greedy action per frame and, once learning
  starts, one SGD step (same network, RMSProp) on a fixed batch per frame: what any DQN at this
  protocol must pay. No replay, no exploration, no target network, no metrics. The fixed batch
  passes an optimization barrier with the params every step, so that XLA computes its float
  conversion and convolution patches every step, as for a sampled batch, instead of hoisting
  them out of the loop (which it did before: a floor cheaper than any DQN).
- ``jaxdqn``: ``jaxdqn.make_train`` of the tuned example, one seed.
- ``jaxdqn xN seeds``: ``jax.vmap`` over ``--seeds`` seeds in one program (N times the work;
  frames/s counts every seed's frames).

All rows are compiled first, then timed round robin (``bench_train.time_runs``); the median of
``--repeats`` runs is reported. Usage::

    python scripts/bench_minatar.py [--timesteps 30000] [--seeds 4] [--repeats 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.resources
import json
import statistics
from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax
from bench_train import compile_it, stacked_seeds, time_runs

from jaxdqn import envs
from jaxdqn._platform import plan_key
from jaxdqn.cli import documents
from jaxdqn.config import DQNConfig, from_dict
from jaxdqn.learner import make_optimizer
from jaxdqn.networks import QNetwork
from jaxdqn.plan import make_train


def tuned_config(timesteps: int) -> DQNConfig:
    name = "breakout-minatar-dqn.yaml"
    doc = documents.yaml_load(importlib.resources.files("jaxdqn").joinpath("tuned_examples", name).read_text())
    algo, config, _, _ = documents.document_to_spec(doc, name)
    config = from_dict(config, algo)
    return dataclasses.replace(config, total_timesteps=config.learning_starts + timesteps)


def floor_sgd(config: DQNConfig, network: QNetwork, optimizer: optax.GradientTransformation
              ) -> Callable[[Any, Any, Any], tuple[Any, Any]]:
    """A floor's SGD step ``(params, opt_state, batch) -> (params, opt_state)`` of ``config``'s
    loss on a fixed ``batch = (obs, action, reward, next_obs)``: the online forward with its
    gradient, the target's forward (the params stand in: the same cost), the double-Q
    selector's where ``config.double_q``, Huber (or MSE), ``optimizer``."""
    q = lambda params, obs: network.apply(params, obs).q  # noqa: E731
    td_loss = optax.huber_loss if config.td_error_loss_fn == "huber" else optax.squared_error

    def sgd(params, opt_state, batch):
        # The batch is fixed, a DQN's is new every step: tied to the params here, so that XLA
        # cannot hoist its conversion and patch extraction out of the loop as loop-invariant.
        params, batch = jax.lax.optimization_barrier((params, batch))
        obs, action, reward, next_obs = batch

        def loss(p):
            q_tm1 = jnp.take_along_axis(q(p, obs), action[:, None], axis=-1)[:, 0]
            q_t = q(jax.lax.stop_gradient(p), next_obs)
            if config.double_q:
                picked = jnp.argmax(q(jax.lax.stop_gradient(p), next_obs), axis=-1)
                q_t = jnp.take_along_axis(q_t, picked[:, None], axis=-1)[:, 0]
            else:
                q_t = jnp.max(q_t, axis=-1)
            return jnp.mean(td_loss(q_tm1, jax.lax.stop_gradient(reward + config.gamma * q_t)))

        updates, opt_state = optimizer.update(jax.grad(loss)(params), opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    return sgd


def make_floor(config: DQNConfig) -> Callable[[jax.Array], Any]:
    """Env step + greedy action every frame; one SGD step per frame after the warm-up."""
    spec = envs.make_env(config.env, config.env_params)
    network = QNetwork(spec.num_actions, config.model, config.head)
    optimizer = make_optimizer(config.optimizer, lr=config.lr, adam_epsilon=config.adam_epsilon,
                               grad_clip=config.grad_clip, grad_clip_mode=config.grad_clip_mode)
    batch_size = config.train_batch_size

    def act(params, obs, env_state, key):
        key, step_key = jax.random.split(key)  # one draw, as the plan's
        action = jnp.argmax(network.apply(params, obs).q, axis=-1)
        out, env_state = envs.step(spec, step_key[None], env_state, action)
        return out.obs, env_state, key

    sgd = floor_sgd(config, network, optimizer)

    def run(key):
        reset_key, init_key, batch_key, key = jax.random.split(plan_key(key, config.prng_impl), 4)
        obs, env_state = envs.reset(spec, reset_key[None])
        params = network.init({"params": init_key, "noise": init_key}, obs)
        opt_state = optimizer.init(params)
        k1, k2, k3 = jax.random.split(batch_key, 3)
        shape = (batch_size,) + spec.obs_shape
        batch = (jax.random.bernoulli(k1, 0.1, shape).astype(jnp.float32),
                 jax.random.randint(k2, (batch_size,), 0, spec.num_actions),
                 jnp.ones((batch_size,)), jax.random.bernoulli(k3, 0.1, shape).astype(jnp.float32))

        def warm(carry, _):
            obs, env_state, key, params = carry
            return (*act(params, obs, env_state, key), params), None

        def learn(carry, _):
            obs, env_state, key, params, opt_state = carry
            obs, env_state, key = act(params, obs, env_state, key)
            params, opt_state = sgd(params, opt_state, batch)
            return (obs, env_state, key, params, opt_state), None

        carry, _ = jax.lax.scan(warm, (obs, env_state, key, params), None, length=config.learning_starts)
        # total_timesteps counts the warm-up's frames too, as make_train does
        carry, _ = jax.lax.scan(learn, (*carry, opt_state), None, length=config.total_timesteps - config.learning_starts)
        return carry[3], carry[0]  # the observations too, or XLA drops the env as dead code

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--timesteps", type=int, default=30_000)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args()
    config = tuned_config(args.timesteps)
    train = make_train(config)
    rows = {"floor": (make_floor(config), 1), "jaxdqn": (train, 1),
            f"jaxdqn x{args.seeds} seeds": (stacked_seeds(train, args.seeds), args.seeds)}
    compiled, compile_s = {}, {}
    for name, (fn, _) in rows.items():
        compile_s[name], compiled[name] = compile_it(fn)
    times, _ = time_runs(compiled, {name: args.repeats for name in rows})
    floor = statistics.median(times["floor"])
    print(f"backend {jax.default_backend()}; Breakout-MinAtar tuned example, {args.timesteps:,} frames per seed, "
          f"median of {args.repeats}")
    print("| row | compile s | run s | frames/s (all seeds) | SGD steps/s (all seeds) | time per seed / floor |")
    print("|---|---|---|---|---|---|")
    out = []
    for name, (_, seeds) in rows.items():
        run_s = statistics.median(times[name])
        frames = (config.learning_starts + args.timesteps) * seeds
        sgd = args.timesteps * seeds
        out.append({"row": name, "compile_s": compile_s[name], "run_s": run_s, "frames_per_s": frames / run_s,
                    "seeds": seeds})
        print(f"| {name} | {compile_s[name]:.1f} | {run_s:.2f} | {frames / run_s:,.0f} | {sgd / run_s:,.0f} | "
              f"{run_s / seeds / floor:.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"backend": jax.default_backend(), "timesteps": args.timesteps, "rows": out}, f, indent=1)


if __name__ == "__main__":
    main()
