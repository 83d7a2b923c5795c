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
- ``plan_key`` / ``PHILOX``: the plan's random stream is the config's ``prng_impl``, Philox-4x32
  by default (XLA:CPU runs threefry as rolled loops), written here with its 32-bit ``mulhi`` as
  one uint64 product: jax 0.10's own Philox draws the same numbers but its ``lax.mulhi`` does not
  lower in multi-device programs (``pmap``, ``shard_map``), and the stream must be the same in
  every layout.
- ``fence``: keeps XLA:CPU from re-computing tree reads after an in-place tree write (which
  makes it copy the trees every step).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.extend.random
import jax.numpy as jnp
import numpy as np
from jax import lax

Array = jax.Array


def conv_as_matmul() -> bool:
    """Whether convolutions are computed as patches @ kernel (on XLA:CPU) rather than ``lax.conv``."""
    return jax.default_backend() == "cpu"


# Philox-4x32-10 (Salmon et al. 2011, Random123), with jax's key schedule, counters and output
# mixing: ``seed``, ``split``, ``fold_in`` and ``random_bits`` draw what jax's "philox4x32" draws,
# bit for bit (tests/test_plan.py compares them), from arithmetic every backend lowers anywhere.
_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)  # round multipliers
_W0, _W1 = np.uint32(0x9E3779B9), np.uint32(0xBB67AE85)  # key schedule (Weyl) increments
_SHIFT32 = np.uint64(32)


def _mulhilo(a: Array, m: np.uint64) -> tuple[Array, Array]:
    """``(high, low)`` uint32 words of the 64-bit product of uint32 ``a`` and the multiplier ``m``.

    One widened multiply: the uint64 lives only inside this computation (whatever
    ``jax_enable_x64`` says), and narrowing a uint64 keeps its low 32 bits."""
    with jax.enable_x64(True):
        wide = lax.convert_element_type(a, jnp.uint64) * m
        return (lax.convert_element_type(wide >> _SHIFT32, jnp.uint32),
                lax.convert_element_type(wide, jnp.uint32))


def _philox(k0: Any, k1: Any, x0: Any, x1: Any, x2: Any, x3: Any) -> tuple[Array, Array, Array, Array]:
    """Ten Philox-4x32 rounds of counter ``(x0, x1, x2, x3)`` under key ``(k0, k1)`` (uint32, broadcast)."""
    k0, k1, x0, x1, x2, x3 = (jnp.asarray(v, jnp.uint32) for v in (k0, k1, x0, x1, x2, x3))
    for round_ in range(10):
        if round_:
            k0, k1 = k0 + _W0, k1 + _W1
        (hi0, lo0), (hi1, lo1) = _mulhilo(x0, _M0), _mulhilo(x2, _M1)
        x0, x1, x2, x3 = hi1 ^ x1 ^ k0, lo1, hi0 ^ x3 ^ k1, lo0
    return x0, x1, x2, x3


def _computed_once(key: Array, words: Array) -> Array:
    """``words`` unchanged, divided by a 1 that XLA cannot fold (it comes from the key).

    Why: XLA fuses cheap elementwise producers into every consumer, so a draw's ten rounds
    (integer products, xors) were compiled and run once per op that used the draw, several
    times over in each plan iteration. A division by a value XLA cannot prove constant is an
    "expensive" op that fusion never duplicates: the rounds end in one fusion, computed once,
    and the draw is read from memory by its consumers. One integer division per word costs
    little beside the rounds' twenty products."""
    one = jnp.maximum(jnp.minimum(key[0], jnp.uint32(1)), jnp.uint32(1))
    return lax.div(words, one)


def _counters(shape: tuple[int, ...]) -> tuple[Array, Array]:
    """The 64-bit flat index of every position of ``shape`` as (high, low) uint32 words."""
    size = math.prod(shape)
    if size >= 2**32:
        raise NotImplementedError(f"{size} random values in one draw; at most 2**32 - 1")
    return jnp.zeros(shape, jnp.uint32), lax.iota(jnp.uint32, size).reshape(shape)


def _philox_seed(seed: Array) -> Array:
    high = (lax.shift_right_logical(seed, lax.convert_element_type(32, seed.dtype)) if seed.dtype.itemsize > 4
            else jnp.zeros((), seed.dtype))  # a 32-bit seed has no high word
    out = _philox(0, 0, lax.convert_element_type(high, jnp.uint32), lax.convert_element_type(seed, jnp.uint32), 0, 0)
    return jnp.stack(out[:2])


def _philox_split(key: Array, shape: tuple[int, ...]) -> Array:
    high, low = _counters(tuple(shape))
    zeros = jnp.zeros(shape, jnp.uint32)
    out = _philox(key[0], key[1], zeros, zeros, high, low)
    return _computed_once(key, jnp.stack(out[:2], axis=len(shape)))


def _philox_fold_in(key: Array, data: Any) -> Array:
    return _computed_once(key, jnp.stack(_philox(key[0], key[1], 0, 0, 0, jnp.asarray(data, jnp.uint32))[:2]))


def _philox_bits(key: Array, bit_width: int, shape: tuple[int, ...]) -> Array:
    high, low = _counters(tuple(shape))
    zeros = jnp.zeros(shape, jnp.uint32)
    out = _philox(key[0], key[1], high, low, zeros, zeros)
    if bit_width == 64:
        wide = [lax.convert_element_type(x, jnp.uint64) for x in _computed_once(key, jnp.stack(out[:2]))]
        return (wide[0] << jnp.uint64(32)) | wide[1]
    mixed = _computed_once(key, out[0] ^ out[1] ^ out[2] ^ out[3])
    return mixed if bit_width == 32 else lax.convert_element_type(mixed, {8: jnp.uint8, 16: jnp.uint16}[bit_width])


PHILOX = jax.extend.random.define_prng_impl(
    key_shape=(2,), seed=_philox_seed, split=_philox_split, random_bits=_philox_bits, fold_in=_philox_fold_in,
    name="philox4x32_portable", tag="px4")


def prng_spec(impl: str) -> Any:
    """What ``jax.random`` takes as ``impl=`` for a config's ``prng_impl``."""
    return PHILOX if impl == "philox4x32" else impl


@functools.lru_cache(maxsize=None)
def key_dtype(impl: str) -> Any:
    """The dtype of typed keys of a config's ``prng_impl``."""
    return jax.eval_shape(lambda: jax.random.key(0, impl=prng_spec(impl))).dtype


def plan_key(key: Array, impl: str) -> Array:
    """The key the plan draws everything from: ``key`` if it is an ``impl`` key already, else an
    ``impl`` key derived from ``key`` (a typed key of any implementation, or a raw ``uint32[2]``
    one) by one draw of its 64 bits.

    Why not JAX's default threefry: on the CPU, XLA lowers every threefry call as a rolled
    five-trip while loop, and a plan iteration makes about fifteen of them (key splits, epsilon
    draws, env resets, replay indices); their loop overhead cost about a third of an iteration at
    PureJaxRL's CartPole settings. Philox-4x32 is a counter-based generator with the same 64-bit
    keys and real ``split`` / ``fold_in`` semantics, lowered unrolled on every backend, and its
    streams are the same on every backend, under ``vmap`` and in every device layout (``PHILOX``
    lowers under ``pmap``). ``prng_impl="threefry2x32"`` keeps JAX's default generator: the
    rolled loops are a CPU-only lowering, so accelerators lose nothing with it."""
    spec = prng_spec(impl)
    typed = jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)
    if typed and key.dtype == key_dtype(impl):
        return key
    if impl == "threefry2x32" and not typed:
        return jax.random.wrap_key_data(key, impl=impl)  # a raw threefry key: the same bits
    return jax.random.wrap_key_data(jax.random.bits(key, (2,), jnp.uint32), impl=spec)


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
