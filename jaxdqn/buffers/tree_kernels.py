"""The sum/min tree's descent and leaf writes as two fused CPU kernels (XLA FFI custom calls).

On XLA:CPU a prioritized ``sample`` + ``update`` through ``segment_tree`` is some 40-70 small
kernels, each paying a dispatch around a handful of random cache-line
reads. ``csrc/tree_kernels.cc`` does the same work in two calls, with the same float32
arithmetic in the same order, so results are bitwise those of ``segment_tree``
(``tests/test_tree_kernels.py`` checks it). The library (a plain shared library, loaded with
ctypes and registered through ``jax.ffi``) is built when the package is installed
(``setup.py``); where it is missing (no C++ compiler at install time) ``available()`` is False
and the buffers use ``segment_tree``'s XLA program. ``JAXDQN_CPU_KERNELS=0`` chooses XLA's
program where the kernels are built (comparisons, benchmarks). CPU only: other platforms
always use XLA. This module is the one core module that reads the environment and a file: it is
the native library's loader.

Both calls take a batch of independent trees in leading axes (``vmap`` broadcasts every
argument to it), and ``set_leaves`` writes the trees in place (its output aliases its input).

A third call, ``gather_rows``, reads sampled items out of a large ring's storage leaves in one
go, on the calling thread (``uniform_replay.gather`` says when and why).
"""

from __future__ import annotations

import ctypes
import functools
import importlib.resources
import os

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array

LIBRARY = "libjaxdqn_kernels.so"  # a plain shared library in this package (setup.py builds it)
SWITCH = "JAXDQN_CPU_KERNELS"  # "0" keeps the CPU on XLA's program even where the kernels are built
DRAW, SET = "jaxdqn_tree_draw", "jaxdqn_tree_set"
GATHER_ROWS = "jaxdqn_gather_rows"


def library_path() -> str:
    """Where the built library is (or would be)."""
    return str(importlib.resources.files("jaxdqn.buffers").joinpath(LIBRARY))


@functools.lru_cache(maxsize=None)
def _load() -> tuple[bool, str]:
    """``(loaded, why not)``; registers the kernels with XLA:CPU when it loads."""
    path = library_path()
    if not os.path.isfile(path):
        return False, f"not built ({path} is missing: no working C++17 compiler when jaxdqn was installed)"
    try:
        library = ctypes.cdll.LoadLibrary(path)
    except OSError as error:  # built for another system or toolchain: XLA's program, as if not built
        return False, f"{path} does not load ({error})"
    jax.ffi.register_ffi_target(DRAW, jax.ffi.pycapsule(library.JaxdqnTreeDraw), platform="cpu")
    jax.ffi.register_ffi_target(SET, jax.ffi.pycapsule(library.JaxdqnTreeSet), platform="cpu")
    jax.ffi.register_ffi_target(GATHER_ROWS, jax.ffi.pycapsule(library.JaxdqnGatherRows), platform="cpu")
    return True, ""


def available() -> bool:
    """Whether the compiled kernels exist and load; registers them with XLA:CPU on the first call."""
    return _load()[0]


def switched_on() -> bool:
    """The ``JAXDQN_CPU_KERNELS`` switch (default on); read when a buffer's program is traced."""
    value = os.environ.get(SWITCH, "1").strip().lower()
    if value not in ("0", "1", "false", "true", "off", "on"):
        raise ValueError(f"{SWITCH}={value!r} is invalid: use 1 (the fused CPU kernels where built) or 0 "
                         f"(XLA's program)")
    return value in ("1", "true", "on")


def enabled() -> bool:
    """Whether a CPU buffer program traced now uses the kernels: switched on, and built."""
    return switched_on() and available()


def status() -> str:
    """One line for ``jaxdqn info``: built or not (and why), switched on or off."""
    loaded, why = _load()
    if not loaded:
        return f"{why}; prioritized replay runs XLA's program on the CPU (same results, slower at large capacities)"
    if not switched_on():
        return f"built ({library_path()}), switched off by {SWITCH}={os.environ[SWITCH]}"
    return f"built ({library_path()}), used on the CPU"


def require() -> None:
    """Refuse to build a call to kernels that are not built (and register them if they are)."""
    if not available():
        raise RuntimeError(f"the fused tree kernels are {_load()[1]}: reinstall jaxdqn with a C++17 compiler on "
                           f"the PATH, or set {SWITCH}=0 for the buffers' XLA program")


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

