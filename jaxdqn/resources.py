"""What a run needs from the machine (shell layer): its state sized against the memory before
anything is allocated, and a warning where the fused CPU kernels are missing."""

from __future__ import annotations

import warnings
from typing import Any

import jax

from jaxdqn import parallel
from jaxdqn.config import DQNConfig


LARGE_PRIORITIZED = 100_000  # items from which the fused CPU tree kernels pay most (docs/benchmarks.md)


def warn_without_kernels(config: DQNConfig) -> None:
    """Warn (once per process: Python's default filter) when a large prioritized buffer will run
    on the CPU without the fused tree kernels: the same results, several times slower."""
    from jaxdqn.buffers import tree_kernels

    if (config.prioritized_replay and config.buffer_size >= LARGE_PRIORITIZED and jax.default_backend() == "cpu"
            and not tree_kernels.enabled()):
        warnings.warn(f"prioritized replay of buffer_size={config.buffer_size} on the CPU runs without the fused "
                      f"tree kernels: the fused CPU tree kernels are {tree_kernels.status()}", RuntimeWarning,
                      stacklevel=3)


def available_memory(device: Any) -> tuple[int, str] | None:
    """``(bytes, what they are)`` that one run's state may take on ``device``: an accelerator's
    allocator limit, or the host's available memory for the CPU (Linux); None where unknown."""
    try:
        stats = device.memory_stats() or {}
    except Exception:  # noqa: BLE001 - a backend without memory statistics
        stats = {}
    if "bytes_limit" in stats:
        return int(stats["bytes_limit"]), f"{device.platform.upper()} memory of one device"
    if device.platform == "cpu":
        try:
            with open("/proc/meminfo") as f:
                fields = dict(line.split(":", 1) for line in f)
            return int(fields["MemAvailable"].split()[0]) * 1024, "available host memory"
        except (OSError, KeyError, ValueError):
            return None
    return None


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def check_memory(config: DQNConfig, runner: parallel.Runner) -> None:
    """Refuse, before anything is allocated or compiled, a run whose state (replay storage above
    all) cannot fit in memory, naming ``buffer_size`` and the largest that would fit: a 1M-item
    buffer of 84x84x4 frames (obs and next_obs) is 56 GB, which otherwise ends as an
    out-of-memory crash minutes into a run. CPU devices of one process share the host's memory."""
    layout = runner.layout
    template = runner.template()
    nbytes = lambda tree: sum(x.size * x.dtype.itemsize for x in jax.tree_util.tree_leaves(tree))  # noqa: E731
    device = jax.local_devices()[0]
    share = layout.num_processes if device.platform == "cpu" else layout.num_devices
    state, buffer = nbytes(template) / share, nbytes(template.buffer) / share
    limit = available_memory(device)
    if limit is None or state <= limit[0]:
        return
    # Replay storage grows in proportion to buffer_size (the trees of prioritized replay up to a
    # power of two): scale it down to what is left beside the rest of the state.
    fits = int(config.buffer_size * max(0.0, limit[0] - (state - buffer)) / max(buffer, 1.0))
    fits -= fits % 10 ** max(0, len(str(fits)) - 3)  # three significant digits, rounded down: a margin
    raise ValueError(f"buffer_size={config.buffer_size} (RLlib's replay_buffer_config.capacity) does not fit: the "
                     f"training state needs {_gib(state)} ({_gib(buffer)} of it replay storage) but the "
                     f"{limit[1]} is {_gib(limit[0])}; lower buffer_size to about {fits} or less"
                     f"{', or run fewer seeds' if layout.num_seeds else ''}")
