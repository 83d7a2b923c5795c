"""Process set-up (shell layer): forced CPU devices and ``jax.distributed``.

Both change JAX's process-wide configuration and must run before JAX starts its backends, that
is before the first computation (importing gymnax, and so ``jaxdqn.plan``, already computes), so
they live here, apart from the pure core. ``jaxdqn.parallel`` then lays the plan over whatever
devices JAX sees.
"""

from __future__ import annotations

import os

import jax


def force_host_devices(count: int) -> None:
    """Split the CPU into ``count`` devices (RLlib's ``_fake_gpus``); must run before JAX
    starts its backends (before the first computation), else a ``RuntimeError`` says so."""
    if not isinstance(count, int) or count < 1:
        raise ValueError(f"count={count!r} is invalid: must be an int >= 1")
    try:
        jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError as e:
        raise RuntimeError(f"cannot force {count} host devices: JAX has started already ({e}); call "
                           "force_host_devices first, or set XLA_FLAGS=--xla_force_host_platform_device_count"
                           f"={count} before starting Python") from None
    if "cpu" not in os.environ.get("JAX_PLATFORMS", "cpu"):
        raise RuntimeError(f"forced host devices need the CPU backend; JAX_PLATFORMS={os.environ['JAX_PLATFORMS']!r}")
    jax.config.update("jax_platforms", "cpu")


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None, *, local_device_count: int | None = None) -> None:
    """Join a multi-process run through ``jax.distributed.initialize`` (arguments ``None``: JAX's
    cluster auto-detection / ``JAX_COORDINATOR_ADDRESS``-style environment). On CPUs the
    collectives go through gloo; ``local_device_count`` forces that many CPU devices per process."""
    if local_device_count is not None:
        force_host_devices(local_device_count)
    if jax.config.jax_platforms in (None, "", "cpu") or local_device_count is not None:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=coordinator_address, num_processes=num_processes,
                               process_id=process_id)



__all__ = ["force_host_devices", "initialize"]
