"""Checkpoints of the complete training state (shell layer), written atomically with orbax.

A checkpoint is a folder ``checkpoint_000007/`` (the training iteration) holding two orbax
items: ``state``, every array of the ``TrainState`` (params, target, optimizer, the replay
buffer with its priorities, env states, counters, the RNG key), and ``meta``, JSON (the config,
the algorithm, the seed count, the iteration, the clock). Orbax writes into a temporary folder
and renames it when complete, so a crash during ``save`` leaves no folder under the final name:
``latest`` only ever sees finished checkpoints, and the previous one stays restorable.

Then ``manifest.json`` records every file's size and CRC-32; a checkpoint counts as finished
only once it has one, and is verified against it before anything is read: a changed or
truncated file is refused naming the file (``DamagedCheckpoint``), and a run folder resolves to
its newest intact checkpoint (``newest_intact`` says which newer ones it passed over). A failed
write (disk full, file size limit, read-only folder) is retried once, then reported as one
``SaveError`` naming the path and the OS error; the partial folder is removed and the earlier
checkpoints are untouched.

The arrays are stored flat, by leaf index, with their paths, shapes and dtypes in ``meta``, so a
restore into another layout is refused with the first difference rather than misread; typed PRNG
keys are stored as their raw ``uint32`` key data and wrapped again; zero-size leaves (which orbax
refuses) are not stored and come back as zeros of their shape.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import pathlib
import re
import shutil
import sys
import time
import warnings
import zlib
from typing import Any, Iterator

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

from jaxdqn.errors import DamagedCheckpoint, SaveError
from jaxdqn.parallel import is_key, key_impl

PREFIX = "checkpoint_"
PATTERN = re.compile(rf"^{PREFIX}(\d+)$")
MANIFEST = "manifest.json"


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

    ``keep`` (>= 1): delete all but the newest ``keep`` finished checkpoints in ``directory``
    after a successful save (``None`` keeps every one). With several processes
    (``jax.distributed``) every process calls it with the same host arrays; orbax has process 0
    write. ``SaveError`` if the write fails twice."""
    if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 1):
        raise ValueError(f"keep={keep!r} is invalid: the number of newest checkpoints to keep, >= 1 (None keeps all)")
    path = path_for(directory, iteration)
    names, leaves = _flat(state)
    meta = {**meta, "layout": _layout(names, leaves), "prng": _key_impls(state)}
    args = ocp.args.Composite(state=ocp.args.StandardSave(_items(leaves)), meta=ocp.args.JsonSave(meta))
    _ignore_closed_loop_callbacks()
    for attempt in (1, 2):
        checkpointer = _checkpointer()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with _orbax_logs_quiet():  # its threads log a traceback each for the error raised here
                try:
                    checkpointer.save(path.absolute(), args=args, force=True)
                finally:
                    checkpointer.close()  # waits for its threads: nothing writes after a failure
            if jax.process_index() == 0:
                write_manifest(path)
            break
        except Exception as e:  # orbax and tensorstore wrap the OS error in their own types
            _remove_partial(path)
            if attempt == 2:
                raise SaveError(f"could not save checkpoint {str(path)!r}: {_os_reason(e)}; the earlier "
                                f"checkpoints in {str(path.parent)!r} are intact") from None
    if keep is not None and jax.process_index() == 0:
        for old in finished(directory)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    return path


@contextlib.contextmanager
def _orbax_logs_quiet() -> Iterator[None]:
    """A failed write without orbax's logged tracebacks (one per thread); the error itself is
    raised as usual."""
    logger = logging.getLogger("absl")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def _ignore_closed_loop_callbacks() -> None:
    """From the first save on: after a failed write, tensorstore's late callbacks into orbax's closed event loop (each a
    ``RuntimeError: Event loop is closed`` printed as an unraisable exception) are dropped; any
    other unraisable exception still reaches the hook before."""
    before = sys.unraisablehook
    if getattr(before, "drops_closed_loop_callbacks", False):
        return

    def hook(unraisable: Any) -> None:
        error = unraisable.exc_value
        if not (isinstance(error, RuntimeError) and "Event loop is closed" in str(error)):
            before(unraisable)

    hook.drops_closed_loop_callbacks = True  # type: ignore[attr-defined]
    sys.unraisablehook = hook


def _remove_partial(path: pathlib.Path) -> None:
    """The folder of a failed save, and orbax's temporary ones beside it. Tensorstore's writer
    threads can still be ending a failed write (a file appearing mid-removal leaves its folder):
    removal is retried until nothing is left, for up to about two seconds."""
    for _ in range(40):
        left = [p for p in [path, *path.parent.glob(f"{path.name}.orbax-checkpoint-tmp*")] if p.exists()]
        if not left:
            return
        for partial in left:
            shutil.rmtree(partial, ignore_errors=True)
        time.sleep(0.05)


def _os_reason(error: BaseException) -> str:
    """The OS error under an exception chain (orbax and tensorstore wrap it), in one line."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, OSError) and seen.strerror:
            return seen.strerror
        seen = seen.__cause__ or seen.__context__
    text = " ".join(str(error).split())
    found = re.search(r"\[OS error[^\]]*\]|No space left on device|File too large|Read-only file system|"
                      r"Permission denied|Disk quota exceeded", text)
    return found.group(0) if found else (text[:200] or type(error).__name__)


def _crc(path: pathlib.Path) -> int:
    crc = 0
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            crc = zlib.crc32(block, crc)
    return crc


def _files(path: pathlib.Path) -> list[pathlib.Path]:
    return sorted(p for p in path.rglob("*") if p.is_file() and p.name != MANIFEST)


def write_manifest(path: pathlib.Path) -> None:
    """``path/manifest.json``: every file's size and CRC-32, written atomically last."""
    files = {str(p.relative_to(path)): [p.stat().st_size, _crc(p)] for p in _files(path)}
    tmp = path / (MANIFEST + ".tmp")
    with open(tmp, "w") as f:
        json.dump({"files": files}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path / MANIFEST)


def verify(path: str | os.PathLike) -> None:
    """``DamagedCheckpoint`` naming the first file of ``path`` that differs from its manifest."""
    path = pathlib.Path(path)
    stat = (path / MANIFEST).stat() if (path / MANIFEST).is_file() else None
    problem = _problem(str(path.absolute()), stat and (stat.st_mtime_ns, stat.st_size))
    if problem:
        raise DamagedCheckpoint(f"checkpoint {str(path)!r} is damaged: {problem}")


@functools.lru_cache(maxsize=64)
def _problem(path_name: str, stamp: tuple[int, int] | None) -> str | None:
    """What is wrong with a checkpoint, or None; cached per manifest (a restore reads it twice)."""
    path = pathlib.Path(path_name)
    if stamp is None:
        return (f"it has no {MANIFEST} (a save that did not finish, or a checkpoint of jaxdqn before "
                f"checkpoint format 6)")
    try:
        files = json.loads((path / MANIFEST).read_text())["files"]
    except (ValueError, KeyError, TypeError):
        return f"{MANIFEST} is unreadable"
    for name, (size, crc) in files.items():
        file = path / name
        if not file.is_file():
            return f"{name} is missing"
        if file.stat().st_size != size:
            return f"{name} has {file.stat().st_size} bytes, {size} were written (truncated or changed)"
        if _crc(file) != crc:
            return f"{name} does not match its checksum (its contents changed)"
    return None


def finished(directory: str | os.PathLike) -> list[pathlib.Path]:
    """The finished checkpoints in ``directory``, oldest first (temporary folders ignored)."""
    directory = pathlib.Path(directory)
    if not directory.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in directory.iterdir() if p.is_dir() and (m := PATTERN.match(p.name))]
    return [p for _, p in sorted(found)]


def newest_intact(directory: str | os.PathLike) -> tuple[pathlib.Path | None, list[str]]:
    """The newest finished checkpoint of ``directory`` that passes ``verify``, and why each newer
    one was passed over (one line each)."""
    passed_over = []
    for path in reversed(finished(directory)):
        try:
            verify(path)
        except DamagedCheckpoint as e:
            passed_over.append(str(e))
            continue
        return path, passed_over
    return None, passed_over


def resolve(path: str | os.PathLike) -> pathlib.Path:
    """A checkpoint folder (verified), or the newest intact one in a run folder (newer damaged
    ones are passed over with a warning); ``FileNotFoundError`` saying what was looked for, or
    ``DamagedCheckpoint``, otherwise."""
    path = pathlib.Path(path)
    if PATTERN.match(path.name) and path.is_dir():
        verify(path)
        return path
    if path.is_dir():
        found, passed_over = newest_intact(path)
        if found is not None:
            for line in passed_over:
                warnings.warn(f"{line}; using {found.name}, the newest intact one", stacklevel=2)
            return found
        if passed_over:
            raise DamagedCheckpoint(f"no intact checkpoint in {str(path)!r}: " + "; ".join(passed_over))
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
