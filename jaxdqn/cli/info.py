"""``jaxdqn info``: the version, the JAX backend and its devices, the native kernels."""

from __future__ import annotations

import argparse


def info(args: argparse.Namespace | None = None) -> int:
    """Print the version, the JAX backend and its devices: the first check on a new machine."""
    import jax

    import jaxdqn

    print(f"jaxdqn {jaxdqn.__version__}")
    print(f"jax {jax.__version__}, backend {jax.default_backend()}")
    for device in jax.devices():
        print(f"  {device.id}: {device.device_kind} ({device.platform})")
    from jaxdqn.buffers import tree_kernels

    print(f"fused CPU tree kernels: {tree_kernels.status()}")
    return 0
