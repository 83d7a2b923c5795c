"""The sum/min tree's descent and leaf writes as two fused CPU kernels (XLA FFI custom calls).

On XLA:CPU a prioritized ``sample`` + ``update`` through ``segment_tree`` is some 40-70 small
kernels, each paying about a microsecond of dispatch around a handful of random cache-line
reads. ``csrc/tree_kernels.cc`` does the same work in two calls, with the same float32
arithmetic in the same order, so results are bitwise those of ``segment_tree``
(``tests/test_tree_kernels.py`` checks it). The library is built when the package is installed
(``setup.py``); where it is missing (no C++ compiler at install time) ``available()`` is False
and the buffers use ``segment_tree``'s XLA program. CPU only: other platforms always use XLA.

Both calls take a batch of independent trees in leading axes (``vmap`` broadcasts every
argument to it), and ``set_leaves`` writes the trees in place (its output aliases its input).

A third call, ``gather_rows``, reads sampled items out of a large ring's storage leaves in one
go, on the calling thread (``uniform_replay.gather`` says when and why).
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array

LIBRARY = "jaxdqn.buffers._tree_kernels"
DRAW, SET = "jaxdqn_tree_draw", "jaxdqn_tree_set"
GATHER_ROWS = "jaxdqn_gather_rows"


@functools.lru_cache(maxsize=None)
def available() -> bool:
    """Whether the compiled kernels exist; registers them with XLA:CPU on the first call."""
    try:
        spec = importlib.util.find_spec(LIBRARY)
    except ImportError:
        return False
    if spec is None or spec.origin is None:
        return False
    try:
        library = ctypes.cdll.LoadLibrary(spec.origin)
    except OSError:  # built for another system or toolchain: use XLA's program, as if not built
        return False
    jax.ffi.register_ffi_target(DRAW, jax.ffi.pycapsule(library.JaxdqnTreeDraw), platform="cpu")
    jax.ffi.register_ffi_target(SET, jax.ffi.pycapsule(library.JaxdqnTreeSet), platform="cpu")
    jax.ffi.register_ffi_target(GATHER_ROWS, jax.ffi.pycapsule(library.JaxdqnGatherRows), platform="cpu")
    return True


def require() -> None:
    """Refuse to build a call to kernels that are not built (and register them if they are)."""
    if not available():
        raise RuntimeError(
            f"the fused tree kernels ({LIBRARY}) are not built: reinstall jaxdqn with a C++17 "
            "compiler on the PATH, or use the buffers' XLA program (cpu_kernels=False)"
        )


def draw(trees: Array, mass: Array, *, capacity: int) -> tuple[Array, Array, Array]:
    """``segment_tree.find_prefix_sum`` and ``segment_tree.minimum`` in one call.

    ``trees`` ``[2, M]``, ``mass`` ``[B]`` -> ``(leaf [B] int32, p[leaf] [B], p_min [])``.
    """
    require()
    batch = mass.shape[:-1]
    return jax.ffi.ffi_call(
        DRAW,
        (
            jax.ShapeDtypeStruct(mass.shape, jnp.int32),
            jax.ShapeDtypeStruct(mass.shape, jnp.float32),
            jax.ShapeDtypeStruct(batch, jnp.float32),
        ),
        vmap_method="broadcast_all",
    )(trees, mass.astype(jnp.float32), capacity=np.int64(capacity))


def set_leaves(trees: Array, slots: Array, values: Array, *, capacity: int) -> Array:
    """``segment_tree.set_leaves`` in one call: write ``values`` ``[K]`` at leaf ``slots`` ``[K]``.

    A slot named twice keeps its last value (the writes are sequential), so no
    ``last_write_wins`` sort is needed first. Slots outside ``[0, capacity)`` are an error.
    """
    require()
    return jax.ffi.ffi_call(
        SET,
        jax.ShapeDtypeStruct(trees.shape, trees.dtype),
        vmap_method="broadcast_all",
        input_output_aliases={0: 0},
    )(trees, slots.astype(jnp.int32), values.astype(jnp.float32), capacity=np.int64(capacity))


def gather_rows(stores: tuple[Array, ...], slots: Array) -> tuple[Array, ...]:
    """``store[slots]`` for each store ``[N, ...]`` -> ``[K, ...]``; ``slots`` ``[K]`` in ``[0, N)``.

    One call for all stores, every row prefetched before any is copied (XLA:CPU runs one
    gather per store, each split across its thread pool when the store is 512 KiB or more:
    see ``csrc/tree_kernels.cc``). Slots outside ``[0, N)`` are an error.
    """
    require()
    if not stores:
        return ()
    batch, k = slots.shape[:-1], slots.shape[-1]
    out = tuple(jax.ShapeDtypeStruct(batch + (k,) + s.shape[len(batch) + 1 :], s.dtype) for s in stores)
    return tuple(
        jax.ffi.ffi_call(GATHER_ROWS, out, vmap_method="broadcast_all")(slots.astype(jnp.int32), *stores)
    )

