"""Where XLA's backends differ enough to change how a computation is written (private).

One rationale for every entry: the library's semantics never depend on the platform, only the
way a result is computed does, and every choice here is checked against the plain formulation
in the tests (bitwise, or to float rounding where the arithmetic is reordered).

- ``conv_as_matmul``: XLA:CPU lowers a convolution's gradient to a generic loop nest that is one
  to two orders of magnitude slower than the same arithmetic as one matrix product over the
  input's patches (im2col); GPUs and TPUs have convolution units and keep ``lax.conv``.
  ``docs/benchmarks.md`` has the measured ratios (``scripts/bench_conv.py``).
"""

from __future__ import annotations

import jax


def conv_as_matmul() -> bool:
    """Whether convolutions are computed as patches @ kernel (on XLA:CPU) rather than ``lax.conv``."""
    return jax.default_backend() == "cpu"
