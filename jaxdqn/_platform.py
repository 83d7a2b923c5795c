"""Where XLA's backends, XLA:CPU above all, differ enough to change how a computation is written.

One rationale for everything here: the library's semantics never depend on the platform, only
the way a result is computed does, and each choice is checked against the plain formulation in
the tests (bitwise, or to float rounding where the arithmetic is reordered). Nothing outside
this module picks a formulation by platform, except where a kernel has two compilations of the
same arithmetic chosen by ``lax.platform_dependent`` (prioritized replay's tree descent: rolled
and fenced on the CPU, unrolled elsewhere; the fused CPU tree kernels, ``buffers.tree_kernels``).

- ``conv_as_matmul``: XLA:CPU lowers a convolution's gradient to a generic loop nest that is one
  to two orders of magnitude slower than the same arithmetic as one matrix product over the
  input's patches (im2col); GPUs and TPUs have convolution units and keep ``lax.conv``
  (``scripts/bench_conv.py``, docs/benchmarks.md).
- ``plan_key`` / ``layout_prng``: the plan's random stream is Philox-4x32 where it can be (XLA:CPU
  runs threefry as rolled loops), threefry under ``pmap`` (where Philox does not lower).
- ``fence``: keeps XLA:CPU from re-computing tree reads after an in-place tree write (which
  makes it copy the trees every step).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

Array = jax.Array
PRNG_IMPL = "philox4x32"  # the plan's random stream (see ``plan_key``)


def conv_as_matmul() -> bool:
    """Whether convolutions are computed as patches @ kernel (on XLA:CPU) rather than ``lax.conv``."""
    return jax.default_backend() == "cpu"


def plan_key(key: Array, impl: str | None = PRNG_IMPL) -> Array:
    """The key the plan draws everything from: an ``impl`` key (Philox-4x32 by default) derived
    from ``key`` (a typed key of any implementation, or a raw ``uint32[2]`` one) by one draw of
    its 64 bits; ``impl=None`` keeps ``key``.

    Why not JAX's default threefry: on the CPU, XLA lowers every threefry call as a rolled
    five-trip while loop, and a plan iteration makes about fifteen of them (key splits, epsilon
    draws, env resets, replay indices); their loop overhead cost about a third of an iteration at
    PureJaxRL's CartPole settings. Philox-4x32 is a counter-based generator with the same 64-bit
    keys and real ``split`` / ``fold_in`` semantics, lowered unrolled on every backend, and its
    streams are the same on every backend and under ``vmap``. A data-parallel plan (``axis_name``
    set) keeps its key, and so must any plan run inside ``pmap`` (build it with
    ``prng_impl=None``; ``parallel`` does it (``layout_prng``) for every multi-device or multi-seed layout, so
    that a seed gives the same run on any device count): jax 0.10 cannot lower Philox's
    ``mulhi`` under a device axis. The rolled loops are a CPU-only lowering, so accelerators
    lose nothing there."""
    if impl is None or (jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)
                        and str(jax.random.key_impl(key)) == impl):
        return key
    return jax.random.wrap_key_data(jax.random.bits(key, (2,), jnp.uint32), impl=impl)


def layout_prng(num_devices: int, num_seeds: int | None) -> dict[str, Any]:
    """The ``make_plan`` keyword for a layout's random stream: one run on one device draws from
    Philox keys (``plan_key``, the default); inside ``pmap`` Philox does not lower, and a
    seed must give the same run on any device count, so every other layout keeps threefry keys."""
    return {} if num_devices == 1 and num_seeds is None else {"prng_impl": None}


def fence(values: tuple[Array, ...]) -> tuple[Array, ...]:
    """``values`` unchanged, materialized by a one-trip ``while_loop`` that XLA cannot see through.

    Why (prioritized replay's sum trees): XLA updates the trees in place only if every read of their old contents is done before
    the write. A sample's indices and weights come out of cheap fusions over tree reads, and XLA
    freely re-computes (fuses) such producers into each consumer: into the next priority
    update's level loops, or into whatever the caller does with the batch, after the write. It
    then keeps the old trees alive by copying them every step (measured on the CPU: 8.6 MB per
    step at capacity 1M, 4x the cost of the whole sample). A loop is never fused, so its outputs
    are computed once, before anything that uses them. Its trip count depends on the data
    (``min(values[0][0], 0)``, 0 when the first array holds non-negative indices, as here, but
    XLA cannot know it) and its body
    keeps the values only under a condition that never holds, so XLA can neither unroll the loop
    nor hoist the values out of it.
    """
    start = jnp.minimum(values[0].reshape(-1)[0].astype(jnp.int32), 0)

    def body(carry):
        trip, values = carry
        return trip + 1, tuple(jnp.where(trip < 0, v + 1, v) for v in values)

    return lax.while_loop(lambda carry: carry[0] < 1, body, (start, tuple(values)))[1]
