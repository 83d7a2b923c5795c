"""Train on a TPU VM or a TPU pod slice (or any set of accelerators) through the Python API.

Install on every TPU VM host: ``pip install -e ".[cli]" "jax[tpu]"`` (jax's TPU wheels). Then::

    # one TPU VM (e.g. v4-8: 4 chips): 128 seeds spread over every chip, 32 per chip
    python scripts/tpu_train.py --seeds 128 --env CartPole-v1 --timesteps 100000
    # one run, data parallel over every chip: envs, replay and batch split, gradients pmean'd
    python scripts/tpu_train.py --seeds 1 --set num_envs_per_worker=64 --set train_batch_size=512
    # a pod slice: the same command on every host (gcloud ... ssh --worker=all --command=...),
    # with --distributed: jax.distributed finds the other hosts by itself on Cloud TPU
    python scripts/tpu_train.py --distributed --seeds 256

``num_devices="auto"`` takes every chip of every host; process 0 prints and writes the
checkpoint (``--out``).
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=128, help="1: one data-parallel run")
    parser.add_argument("--algo", default="dqn", choices=["dqn", "simple_q"])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--timesteps", type=int, default=100_000)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--distributed", action="store_true", help="multi-host: jax.distributed.initialize()")
    parser.add_argument("--out", help="write the final checkpoint here")
    args = parser.parse_args()
    if args.distributed:
        from jaxdqn import distributed

        distributed.initialize()  # before anything computes; Cloud TPU / SLURM auto-detection

    import jax
    import numpy as np

    from jaxdqn.cli import documents
    from jaxdqn.config import from_dict
    from jaxdqn.trainer import Trainer

    tuned = documents.tuned_example(args.algo, args.env)
    config = {"env": args.env}
    if tuned is not None:
        _, config, _, _ = documents.document_to_spec(tuned[1], tuned[0])
    config = {**config, "total_timesteps": args.timesteps, "num_devices": "auto"}
    for assignment in args.set:
        documents.apply_set(config, assignment)
    trainer = Trainer(from_dict(config, args.algo), num_seeds=None if args.seeds == 1 else args.seeds)
    main_process = jax.process_index() == 0
    if main_process:
        print(f"jax {jax.__version__}: {jax.device_count()} x {jax.devices()[0].device_kind}, "
              f"{jax.process_count()} process(es); {trainer.layout.describe()}")
    start = time.perf_counter()
    while trainer.timesteps_total < trainer.config.total_timesteps:
        out = trainer.train()
        results = out if isinstance(out, list) else [out]
        if main_process:
            returns = np.array([r["episode_reward_mean"] for r in results])
            print(f"{results[0]['timesteps_total']:>9,} steps  return median {np.nanmedian(returns):7.1f} "
                  f"min {np.nanmin(returns):7.1f}  {len(results) * results[0]['num_env_steps_sampled_throughput_per_sec']:,.0f} env steps/s")
    if main_process:
        print(f"done in {time.perf_counter() - start:.1f}s (first iteration includes the compile)")
    if args.out:
        trainer.save(args.out)  # every process calls it; process 0 writes


if __name__ == "__main__":
    main()
