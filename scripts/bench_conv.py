"""Convolution speed on the current backend: one SGD step (forward + backward + Adam, batch 32)
of the MinAtar DQN network (conv 3x3x16, dense 128) and of the Nature DQN network (84x84x4,
convs 8x8/4, 4x4/2, 3x3/1, dense 512), computed as ``lax.conv`` and as one matrix product over
the input's patches (``jaxdqn.networks.Conv``'s two paths). XLA:CPU takes the patch path
(``jaxdqn._platform.conv_as_matmul``); this script shows why. Median of ``--repeats`` timed
scans of ``--steps`` steps after a warm-up compile. Usage::

    python scripts/bench_conv.py [--repeats 5] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import jax
import jax.numpy as jnp
import optax

from jaxdqn import DQNConfig, _platform
from jaxdqn.networks import QNetwork

NETWORKS = {
    "MinAtar (10x10x4)": (dict(dueling=False, hiddens=(128,), model={"conv_filters": [[16, 3, 1]], "fcnet_hiddens": []}),
                          (10, 10, 4), 200),
    "Nature DQN (84x84x4)": (dict(dueling=False, hiddens=(512,), model={"fcnet_hiddens": []}), (84, 84, 4), 10),
}


def time_steps(config: dict, obs_shape: tuple[int, ...], steps: int, repeats: int, as_matmul: bool) -> float:
    """Median seconds per SGD step."""
    original = _platform.conv_as_matmul
    _platform.conv_as_matmul = lambda: as_matmul
    try:
        dqn = DQNConfig(**config)
        net = QNetwork(6, dqn.model, dqn.head)
        obs = jax.random.uniform(jax.random.key(0), (32,) + obs_shape)
        params = net.init({"params": jax.random.key(1), "noise": jax.random.key(2)}, obs)
        opt = optax.adam(1e-4)

        def loss(p):
            q, q_next = net.apply(p, obs).q, net.apply(p, obs[::-1]).q
            return jnp.mean((q[:, 0] - 0.99 * jax.lax.stop_gradient(q_next.max(-1))) ** 2)

        def step(carry, _):
            p, s = carry
            u, s = opt.update(jax.grad(loss)(p), s, p)
            return (optax.apply_updates(p, u), s), None

        run = jax.jit(lambda c: jax.lax.scan(step, c, None, length=steps)[0])
        carry = jax.block_until_ready(run((params, opt.init(params))))
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            carry = jax.block_until_ready(run(carry))
            times.append((time.perf_counter() - start) / steps)
        return statistics.median(times)
    finally:
        _platform.conv_as_matmul = original


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json")
    args = parser.parse_args()
    rows = []
    print(f"backend {jax.default_backend()}; SGD step, batch 32, median of {args.repeats}")
    print("| network | lax.conv ms/step | patches @ kernel ms/step | lax.conv / patches |")
    print("|---|---|---|---|")
    for name, (config, shape, steps) in NETWORKS.items():
        conv = time_steps(config, shape, steps, args.repeats, False)
        matmul = time_steps(config, shape, steps, args.repeats, True)
        rows.append({"network": name, "lax_conv_s": conv, "patches_s": matmul})
        print(f"| {name} | {conv * 1e3:.2f} | {matmul * 1e3:.2f} | {conv / matmul:.1f}x |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"backend": jax.default_backend(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
