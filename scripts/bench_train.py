"""Training speed: jaxdqn's execution plan against the compute floor and rejax's DQN.

The configuration is PureJaxRL's CartPole-v1 DQN: 10 envs, buffer 10k, batch 128, learning
starts 10k, one SGD step per 10 env steps, hard target sync every 500 env steps, MSE loss,
Adam 2.5e-4 (no clipping), no double / dueling / PER, epsilon 1 -> 0.05 over half the run, a
(120, 84) ReLU MLP, 500k env steps. Rows:

- ``floor``: a scan of only the vmapped env step + greedy action, and one SGD step of the same
  network on a fixed batch for every 10 env steps after learning starts: what any DQN must pay
  (drawing from the same random keys as jaxdqn: the config's ``prng_impl``).
- ``jaxdqn``: ``jaxdqn.make_train`` at that config (uniform replay), one seed.
- ``jaxdqn PER``: the same with prioritized replay (alpha 0.6, beta 0.4).
- ``jaxdqn x8 seeds``: ``jax.vmap`` over 8 seeds, reported per seed-run (8x the work).
- ``rejax``: ``rejax.DQN`` (PyPI, ``pip install rejax``) at the closest config it allows: its
  MLP is (64, 64) and it runs one greedy evaluation of 128 episodes at the end.

Each row: compile time (lower + compile), median wall time of ``--repeats`` runs (one run for
the 8-seed row, 8x the work), env steps/s, SGD steps/s and time relative to the floor. All rows
are compiled first, then timed round robin (one run of every row per round), so that the
shared machine's changing load falls on every row alike. Usage::

    python scripts/bench_train.py [--timesteps 500000] [--repeats 3] [--no-rejax] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxdqn import DQNConfig, ExplorationConfig, ModelConfig, SimpleQConfig, envs
from jaxdqn._platform import plan_key
from jaxdqn.networks import QNetwork
from jaxdqn.plan import make_train

NUM_ENVS, BATCH, BUFFER, STARTS, TARGET_FREQ, LR = 10, 128, 10_000, 10_000, 500, 2.5e-4


def purejaxrl_config(timesteps: int, prioritized: bool = False) -> DQNConfig:
    common = dict(
        env="CartPole-v1", total_timesteps=timesteps, num_envs_per_worker=NUM_ENVS,
        rollout_fragment_length=1, train_batch_size=BATCH,  # RLlib's native ratio: BATCH / NUM_ENVS
        buffer_size=BUFFER, learning_starts=STARTS, target_network_update_freq=TARGET_FREQ,
        td_error_loss_fn="mse", lr=LR, grad_clip=None, timesteps_per_iteration=10_000,
        model=ModelConfig(fcnet_hiddens=(120, 84), fcnet_activation="relu"),
        exploration_config=ExplorationConfig(final_epsilon=0.05, epsilon_timesteps=timesteps // 2),
    )
    if prioritized:
        return DQNConfig(prioritized_replay=True, double_q=False, dueling=False, hiddens=(), **common)
    return SimpleQConfig(**common)


def make_floor(config: DQNConfig) -> Callable[[jax.Array], Any]:
    """Env step + greedy action for every step; one SGD step (same network, loss, optimizer) on
    a fixed batch per 10 env steps once learning starts. No replay, no exploration, no metrics."""
    spec = envs.make_env(config.env)
    network = QNetwork(spec.num_actions, config.model, config.head)
    optimizer = optax.adam(config.lr)
    iterations = config.total_timesteps // NUM_ENVS
    warmup = config.learning_starts // NUM_ENVS

    def env_step(carry):
        obs, env_state, key = carry[:3]
        key, *env_keys = jax.random.split(key, 1 + NUM_ENVS)  # one draw, as the plan's
        action = jnp.argmax(network.apply(carry[3], obs).q, axis=-1)
        out, env_state = envs.step(spec, jnp.stack(env_keys), env_state, action)
        return out.obs, env_state, key

    def sgd(params, target, opt_state, batch):
        obs, action, reward, next_obs = batch

        def loss(p):
            q = jnp.take_along_axis(network.apply(p, obs).q, action[:, None], axis=-1)[:, 0]
            y = reward + config.gamma * jnp.max(network.apply(target, next_obs).q, axis=-1)
            return jnp.mean((q - jax.lax.stop_gradient(y)) ** 2)

        grads = jax.grad(loss)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    def run(key):
        # The plan's own random stream (keys of its prng_impl, see _platform.plan_key), so that the floor pays
        # for its env resets and key splits what jaxdqn pays, not threefry's CPU loops.
        reset_key, init_key, batch_key, key = jax.random.split(plan_key(key, config.prng_impl), 4)
        obs, env_state = envs.reset(spec, jax.random.split(reset_key, NUM_ENVS))
        params = network.init(init_key, obs)
        opt_state = optimizer.init(params)
        k1, k2, k3 = jax.random.split(batch_key, 3)
        batch = (jax.random.normal(k1, (BATCH,) + spec.obs_shape),
                 jax.random.randint(k2, (BATCH,), 0, spec.num_actions),
                 jnp.ones((BATCH,)), jax.random.normal(k3, (BATCH,) + spec.obs_shape))

        def warm(carry, _):
            return (*env_step(carry), carry[3]), None

        def learn(carry, _):
            obs, env_state, key, params, opt_state = carry
            obs, env_state, key = env_step((obs, env_state, key, params))
            params, opt_state = sgd(params, params, opt_state, batch)
            return (obs, env_state, key, params, opt_state), None

        carry, _ = jax.lax.scan(warm, (obs, env_state, key, params), None, length=warmup)
        carry, _ = jax.lax.scan(learn, (*carry, opt_state), None, length=iterations - warmup)
        # The observations too: returning only the params (which the fixed batch makes independent
        # of the env) let XLA drop the env step and the acting from the learning loop as dead code.
        return carry[3], carry[0]

    return run


class FiveTupleEnv:
    """gymnax 1.0's env behind the 0.x ``step -> (obs, state, reward, done, info)`` API that
    rejax 0.1 expects (``done = terminated | truncated``, as rejax's own gymnax would give)."""

    def __init__(self, env: Any) -> None:
        self.env = env

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "env":  # copy/pickle probe before __init__ ran
            raise AttributeError(name)
        return getattr(self.env, name)

    def step(self, key, state, action, params=None):
        obs, state, reward, terminated, truncated, info = self.env.step(key, state, action, params)
        return obs, state, reward, jnp.logical_or(terminated, truncated), info

    def reset(self, key, params=None):
        return self.env.reset(key, params)


def make_rejax(timesteps: int) -> Callable[[jax.Array], Any]:
    import gymnax
    from rejax import DQN  # benchmark-only dependency

    env, env_params = gymnax.make("CartPole-v1")
    algo = DQN.create(
        env=FiveTupleEnv(env), env_params=env_params, num_envs=NUM_ENVS, buffer_size=BUFFER, fill_buffer=STARTS, batch_size=BATCH,
        learning_rate=LR, total_timesteps=timesteps, eval_freq=timesteps, skip_initial_evaluation=True,
        target_update_freq=TARGET_FREQ, polyak=0.0, ddqn=False, num_epochs=1, eps_start=1.0, eps_end=0.05,
        exploration_fraction=0.5, gamma=0.99, agent_kwargs={"activation": "relu"},
    )
    return algo.train


def compile_it(fn: Callable[[jax.Array], Any]) -> tuple[float, Callable[[jax.Array], Any]]:
    """(compile seconds: lower + compile, the compiled function)."""
    start = time.perf_counter()
    compiled = jax.jit(fn).lower(jax.random.key(0)).compile()
    return time.perf_counter() - start, compiled


def timed(fn: Callable[[jax.Array], Any], key: jax.Array) -> tuple[float, Any]:
    """(wall seconds of one call, its output), waiting for the device."""
    start = time.perf_counter()
    out = jax.block_until_ready(fn(key))
    return time.perf_counter() - start, out


def stacked_seeds(train: Callable[[jax.Array], Any], seeds: int) -> Callable[[jax.Array], Any]:
    """``train`` over ``seeds`` independent seeds in one program (``jax.vmap``)."""
    return lambda key: jax.vmap(train)(jax.random.split(key, seeds))


def time_runs(compiled: dict[str, Callable[[jax.Array], Any]], runs: dict[str, int]
              ) -> tuple[dict[str, list[float]], dict[str, Any]]:
    """Wall times of ``runs[name]`` runs of each compiled row, taken round robin (one run of
    every row per round), so that a change in the shared machine's load hits every row alike
    rather than whichever row happened to run then; and each row's last output."""
    times: dict[str, list[float]] = {name: [] for name in compiled}
    outputs: dict[str, Any] = {}
    for i in range(max(runs.values())):
        for name, fn in compiled.items():
            if i < runs[name]:
                seconds, outputs[name] = timed(fn, jax.random.key(i))
                times[name].append(seconds)
    return times, outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--timesteps", type=int, default=500_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-rejax", action="store_true", help="skip the rejax row")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()

    steps = args.timesteps
    sgd_steps = (steps - STARTS) // NUM_ENVS
    train = make_train(purejaxrl_config(steps))
    # name: (function, seeds, final return from its output)
    jaxdqn_return = lambda out: float(np.mean(np.asarray(out[1]["episode_reward_mean"])[..., -1]))  # noqa: E731
    specs: dict[str, tuple[Callable, int, Callable[[Any], float] | None]] = {
        "floor": (make_floor(purejaxrl_config(steps)), 1, None),
        "jaxdqn": (train, 1, jaxdqn_return),
        "jaxdqn PER": (make_train(purejaxrl_config(steps, prioritized=True)), 1, jaxdqn_return),
        # The stacked-seed row does 8x the work: one run of it is as long as 8 of the others.
        "jaxdqn x8 seeds": (stacked_seeds(train, 8), 8, jaxdqn_return),
    }
    if not args.no_rejax:
        specs["rejax"] = (make_rejax(steps), 1, lambda out: float(np.mean(np.asarray(out[1][1]))))
    compile_s, compiled = {}, {}
    for name, (fn, _, _) in specs.items():
        compile_s[name], compiled[name] = compile_it(fn)
        print(f"  {name}: compile {compile_s[name]:.1f}s", flush=True)
    runs = {name: args.repeats if seeds == 1 else 1 for name, (_, seeds, _) in specs.items()}
    times, outputs = time_runs(compiled, runs)
    rows: list[dict[str, Any]] = []
    for name, (_, seeds, returns) in specs.items():
        run_s = statistics.median(times[name])
        per_seed = run_s / seeds
        rows.append(dict(name=name, compile_s=compile_s[name], run_s=run_s, runs=[round(t, 3) for t in times[name]],
                         seeds=seeds, env_steps_per_s=steps / per_seed, sgd_steps_per_s=sgd_steps / per_seed,
                         final_return=None if returns is None else returns(outputs[name])))
        print(f"  {name}: runs {', '.join(f'{t:.2f}' for t in times[name])} s", flush=True)

    floor = rows[0]["run_s"]
    print(f"\nCartPole-v1, PureJaxRL DQN config, {steps} env steps, median of {args.repeats}, "
          f"{jax.devices()[0].device_kind} ({jax.default_backend()})")
    print(f"| {'run':<16} | compile s | run s (per seed) | env steps/s | SGD steps/s | time / floor | final return |")
    print(f"|{'-' * 18}|-----------|------------------|-------------|-------------|--------------|--------------|")
    for r in rows:
        per_seed = r["run_s"] / r["seeds"]
        ret = "" if r["final_return"] is None else f"{r['final_return']:.0f}"
        print(f"| {r['name']:<16} | {r['compile_s']:9.1f} | {per_seed:16.2f} | {r['env_steps_per_s']:11,.0f} | "
              f"{r['sgd_steps_per_s']:11,.0f} | {per_seed / floor:12.2f} | {ret:>12} |")
    uniform = rows[1]["run_s"]
    print(f"\nPER / uniform: {rows[2]['run_s'] / uniform:.2f}x;  8 seeds / (8 x one seed): "
          f"{rows[3]['run_s'] / (8 * uniform):.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
