"""Where XLA's backends differ enough to change how the core writes a computation, and the
plan's random stream.

The library's semantics never depend on the platform, only the way a result is computed does,
and each choice is checked against the plain formulation in the tests. The replay buffers keep
their own choices in ``buffers.dispatch``.

- ``conv_as_matmul``: XLA:CPU lowers a convolution's gradient to a generic loop nest that is one
  to two orders of magnitude slower than the same arithmetic as one matrix product over the
  input's patches (im2col); GPUs and TPUs have convolution units and keep ``lax.conv``
  (``scripts/bench_conv.py``, docs/benchmarks.md).
- ``plan_key``: the plan draws from keys of the config's ``prng_impl``, one of JAX's own
  implementations (threefry by default), the same in every device layout.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

Array = jax.Array


def conv_as_matmul() -> bool:
    """Whether convolutions are computed as patches @ kernel (on XLA:CPU) rather than ``lax.conv``."""
    return jax.default_backend() == "cpu"


@functools.lru_cache(maxsize=None)
def key_dtype(impl: str) -> Any:
    """The dtype of typed keys of a config's ``prng_impl``."""
    return jax.eval_shape(lambda: jax.random.key(0, impl=impl)).dtype


@functools.lru_cache(maxsize=None)
def key_words(impl: str) -> int:
    """uint32 words of a key's data of ``impl``."""
    return jax.eval_shape(lambda: jax.random.key_data(jax.random.key(0, impl=impl))).shape[-1]


def plan_key(key: Array, impl: str) -> Array:
    """The key the plan draws everything from: ``key`` if it is an ``impl`` key already; a raw
    threefry key (``uint32[2]``) wrapped as it is; otherwise an ``impl`` key drawn from ``key``."""
    typed = jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)
    if typed and key.dtype == key_dtype(impl):
        return key
    if impl == "threefry2x32" and not typed:
        return jax.random.wrap_key_data(key, impl=impl)
    return jax.random.wrap_key_data(jax.random.bits(key, (key_words(impl),), jnp.uint32), impl=impl)
