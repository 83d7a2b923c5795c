"""Scaling: env steps/s and SGD steps/s over devices (data parallel) and over vmapped seeds.

CartPole-v1 DQN at PureJaxRL's settings (see ``bench_train.py``) with 16 envs (so that 1, 2
and 4 devices split them evenly), buffer 10k, batch 128, one SGD step per 10 env steps,
uniform replay, MSE, Adam 2.5e-4, a (120, 84) MLP. Rows:

- ``devices D``: one run, ``num_devices=D`` forced CPU devices (or real accelerators with
  ``--platform gpu``), totals split over the devices, gradients ``pmean``ed (strong scaling:
  the same total work);
- ``seeds S``: ``S`` independent runs ``vmap``ped on one device (reported in total env steps/s
  over all seeds, and per seed-run);
- ``seeds S on D devices``: ``S / D`` vmapped seeds per device, no collectives.

Every row runs in a fresh process (the forced device count is fixed when JAX starts): compile
time (lower + compile), then the median wall time of ``--repeats`` runs with fresh keys. Usage::

    python scripts/bench_scaling.py [--timesteps 50000] [--repeats 3] [--json FILE] [--platform cpu]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROWS = [("devices", 1, None), ("devices", 2, None), ("devices", 4, None),
        ("seeds", 1, 1), ("seeds", 1, 8), ("seeds", 1, 32), ("seeds", 4, 32)]
NUM_ENVS, BATCH, BUFFER, STARTS = 16, 128, 10_000, 10_000


def worker(devices: int, seeds: int | None, timesteps: int, repeats: int) -> dict:
    import jax
    import numpy as np

    from jaxdqn import DQNConfig, ExplorationConfig, ModelConfig, parallel
    from jaxdqn.plan import make_plan

    # SimpleQ's network and replay, at a training_intensity (a DQN key: RLlib's SimpleQ has none).
    config = DQNConfig(
        prioritized_replay=False, double_q=False, dueling=False, hiddens=(),
        env="CartPole-v1", total_timesteps=timesteps, num_envs_per_worker=NUM_ENVS, rollout_fragment_length=1,
        train_batch_size=BATCH, training_intensity=BATCH / 10, buffer_size=BUFFER, learning_starts=STARTS,
        target_network_update_freq=500, td_error_loss_fn="mse", lr=2.5e-4, grad_clip=None,
        timesteps_per_iteration=10_000, num_devices=devices,
        model=ModelConfig(fcnet_hiddens=(120, 84), fcnet_activation="relu"),
        exploration_config=ExplorationConfig(final_epsilon=0.05, epsilon_timesteps=timesteps // 2))
    layout = parallel.make_layout(config, seeds)  # refuses what these devices cannot hold

    keys = lambda k: parallel.layout_keys(k, devices, seeds)  # noqa: E731

    stacked = (lambda f: jax.vmap(f)) if seeds is not None else (lambda f: f)
    if layout.data_parallel:
        plan = make_plan(config, axis_name=parallel.AXIS, num_replicas=devices)
        train = jax.pmap(plan.train, axis_name=parallel.AXIS, devices=jax.devices()[:devices])
    elif devices > 1:
        plan = make_plan(config)
        train = jax.pmap(stacked(plan.train), axis_name=parallel.AXIS, devices=jax.devices()[:devices])
    else:
        plan = make_plan(config)
        train = jax.jit(stacked(plan.train))
    start = time.perf_counter()
    compiled = train.lower(keys(0)).compile() if hasattr(train, "lower") else None
    compile_s = time.perf_counter() - start
    run = compiled if compiled is not None else train
    times, final = [], None
    for r in range(repeats):
        k = keys(r + 1)
        start = time.perf_counter()
        _, reports = run(k)
        returns = jax.block_until_ready(reports["episode_reward_mean"])
        sampled, trained = (int(np.asarray(reports[key])[..., -1].ravel()[0])
                            for key in ("num_steps_sampled", "num_steps_trained"))
        times.append(time.perf_counter() - start)
        final = float(jax.numpy.nanmean(returns[..., -1]))
    env_steps, sgd_steps = sampled, trained // config.train_batch_size  # one run's, all devices'
    runs = seeds or 1
    seconds = statistics.median(times)
    return {"row": layout.describe(), "devices": devices, "seeds": runs, "compile_s": compile_s, "run_s": seconds,
            "env_steps_per_s": runs * env_steps / seconds, "sgd_steps_per_s": runs * sgd_steps / seconds,
            "env_steps_per_s_per_seed": env_steps / seconds, "final_return": final,
            "device_kind": jax.devices()[0].device_kind, "jax": jax.__version__}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--timesteps", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--platform", default="cpu", help="cpu: forced host devices; gpu/tpu: real ones")
    parser.add_argument("--worker", nargs=2, type=int, metavar=("DEVICES", "SEEDS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        devices, seeds = args.worker
        print(json.dumps(worker(devices, seeds or None, args.timesteps, args.repeats)))
        return
    rows = []
    print(f"{'row':45s} {'compile s':>9s} {'run s':>8s} {'env steps/s':>12s} {'SGD steps/s':>12s} "
          f"{'per seed':>10s} {'return':>7s}")
    for _, devices, seeds in ROWS:
        env = dict(os.environ)
        if args.platform == "cpu":
            env["JAX_PLATFORMS"] = "cpu"
            env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
        cmd = [sys.executable, __file__, "--worker", str(devices), str(seeds or 0), "--timesteps",
               str(args.timesteps), "--repeats", str(args.repeats)]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if out.returncode != 0:
            print(f"{devices} devices, {seeds} seeds: failed: {out.stderr.strip().splitlines()[-1]}")
            continue
        row = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(f"{row['row']:45s} {row['compile_s']:9.1f} {row['run_s']:8.2f} {row['env_steps_per_s']:12,.0f} "
              f"{row['sgd_steps_per_s']:12,.0f} {row['env_steps_per_s_per_seed']:10,.0f} {row['final_return']:7.1f}",
              flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
