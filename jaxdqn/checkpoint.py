"""Checkpoints of the complete training state (shell layer), written atomically with orbax.

A checkpoint is a folder ``checkpoint_000007/`` (the training iteration) holding two orbax
items: ``state``, every array of the ``TrainState`` (params, target, optimizer, the replay
buffer with its priorities, env states, counters, the RNG key), and ``meta``, JSON (the config,
the algorithm, the seed count, the iteration, the clock). Orbax writes into a temporary folder
and renames it when complete, so a crash during ``save`` leaves no folder under the final name:
``latest`` only ever sees finished checkpoints, and the previous one stays restorable.

The arrays are stored flat, by leaf index, with their paths, shapes and dtypes in ``meta``, so a
restore into another layout is refused with the first difference rather than misread; typed PRNG
keys are stored as their raw ``uint32`` key data and wrapped again; zero-size leaves (which orbax
refuses) are not stored and come back as zeros of their shape.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

from jaxdqn.parallel import is_key, key_impl

PREFIX = "checkpoint_"
PATTERN = re.compile(rf"^{PREFIX}(\d+)$")


def _flat(tree: Any) -> tuple[list[str], list[Any]]:
    """Leaf paths (``jax.tree_util.keystr``) and leaves, typed keys as their raw key data
    (``ShapeDtypeStruct`` leaves give ``ShapeDtypeStruct``s)."""
    with_paths, _ = jax.tree_util.tree_flatten_with_path(tree)
    names = [jax.tree_util.keystr(path) for path, _ in with_paths]
    # Key data as host arrays: tiny, and serializable in a multi-process run (a gathered key is
    # a host-local jax.Array there, which orbax refuses).
    raw = lambda x: jax.random.key_data(x) if is_key(x) else x  # noqa: E731
    leaves = [jax.eval_shape(raw, x) if isinstance(x, jax.ShapeDtypeStruct)
              else np.asarray(raw(x)) if is_key(x) else x for _, x in with_paths]
    return names, leaves


def _items(leaves: list[Any]) -> dict[str, Any]:
    """The non-empty leaves by index (orbax refuses zero-size arrays; they carry no data)."""
    return {f"leaf_{i:05d}": x for i, x in enumerate(leaves) if x.size > 0}


def _layout(names: list[str], leaves: list[Any]) -> list[list[Any]]:
    return [[n, list(x.shape), str(x.dtype)] for n, x in zip(names, leaves)]


def _key_impls(tree: Any) -> dict[str, str]:
    """The PRNG implementation of every typed-key leaf, by leaf path (their data alone does not
    tell a threefry key from a Philox one: both are ``uint32[2]``)."""
    with_paths, _ = jax.tree_util.tree_flatten_with_path(tree)
    return {jax.tree_util.keystr(path): key_impl(x) for path, x in with_paths if is_key(x)}


def _checkpointer() -> ocp.Checkpointer:
    return ocp.Checkpointer(ocp.CompositeCheckpointHandler())


def path_for(directory: str | os.PathLike, iteration: int) -> pathlib.Path:
    """``directory/checkpoint_<iteration:06d>``."""
    return pathlib.Path(directory) / f"{PREFIX}{iteration:06d}"


def save(directory: str | os.PathLike, iteration: int, state: Any, meta: dict[str, Any],
         *, keep: int | None = None) -> pathlib.Path:
    """Write ``state`` (any pytree of arrays) and ``meta`` (JSON) atomically; returns the path.

    ``keep``: delete all but the newest ``keep`` finished checkpoints in ``directory`` after a
    successful save (``None`` keeps every one). With several processes (``jax.distributed``)
    every process calls it with the same host arrays; orbax has process 0 write."""
    path = path_for(directory, iteration)
    path.parent.mkdir(parents=True, exist_ok=True)
    names, leaves = _flat(state)
    meta = {**meta, "layout": _layout(names, leaves), "prng": _key_impls(state)}
    args = ocp.args.Composite(state=ocp.args.StandardSave(_items(leaves)), meta=ocp.args.JsonSave(meta))
    checkpointer = _checkpointer()
    checkpointer.save(path.absolute(), args=args, force=True)
    if keep is not None and jax.process_index() == 0:
        for old in finished(directory)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    return path


def finished(directory: str | os.PathLike) -> list[pathlib.Path]:
    """The finished checkpoints in ``directory``, oldest first (temporary folders ignored)."""
    directory = pathlib.Path(directory)
    if not directory.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in directory.iterdir() if p.is_dir() and (m := PATTERN.match(p.name))]
    return [p for _, p in sorted(found)]


def resolve(path: str | os.PathLike) -> pathlib.Path:
    """A checkpoint folder, or the newest finished one in a run folder; ``FileNotFoundError``
    saying what was looked for otherwise."""
    path = pathlib.Path(path)
    if PATTERN.match(path.name) and path.is_dir():
        return path
    if path.is_dir():
        found = finished(path)
        if found:
            return found[-1]
    raise FileNotFoundError(f"no finished checkpoint at {str(path)!r}: expected a "
                            f"'{PREFIX}NNNNNN' folder or a run folder that holds one")


def read_meta(path: str | os.PathLike) -> dict[str, Any]:
    """The JSON metadata of a checkpoint (no arrays are read)."""
    path = resolve(path)
    return dict(_checkpointer().restore(path.absolute(), args=ocp.args.Composite(meta=ocp.args.JsonRestore())).meta)


def restore(path: str | os.PathLike, template: Any) -> tuple[Any, dict[str, Any]]:
    """``(state, meta)`` from a checkpoint; ``template`` is a pytree of arrays or
    ``jax.ShapeDtypeStruct`` with the checkpoint's structure, shapes and dtypes (typed keys
    included); a checkpoint of another layout is refused with the first difference."""
    path = resolve(path)
    names, leaves = _flat(jax.eval_shape(lambda t: t, template))
    meta = read_meta(path)
    saved, wanted = meta.get("layout"), _layout(names, leaves)
    if saved != wanted:
        first = next((f"{a} vs {b}" for a, b in zip(saved or [], wanted) if a != b),
                     f"{len(saved or [])} arrays vs {len(wanted)}")
        raise ValueError(f"checkpoint {str(path)!r} holds another state layout (saved vs expected: {first})")
    saved_prng = meta.get("prng", {})  # checkpoints without it hold threefry keys (the only kind then)
    for name, impl in _key_impls(template).items():
        if saved_prng.get(name, "threefry2x32") != impl:
            raise ValueError(f"checkpoint {str(path)!r} holds a {saved_prng.get(name, 'threefry2x32')} key at "
                             f"{name}; this run draws from {impl} keys (see jaxdqn._platform.plan_key)")
    abstract = _items([jax.ShapeDtypeStruct(x.shape, x.dtype) for x in leaves])
    restored = _checkpointer().restore(path.absolute(), args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract)))
    arrays = dict(restored.state)
    out = []
    for i, (t, x) in enumerate(zip(jax.tree_util.tree_leaves(template), leaves)):
        value = arrays.get(f"leaf_{i:05d}", jnp.zeros(x.shape, x.dtype))
        if is_key(t):
            value = jax.random.wrap_key_data(value, impl=key_impl(t))  # the template's PRNG
        out.append(value)
    return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(template), out), meta
