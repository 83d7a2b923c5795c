"""Run folders of ``jaxdqn train``: checked before anything compiles, refused when they hold
another run (unless ``--resume`` or ``--overwrite``), and locked while a process writes them."""

from __future__ import annotations

import os
import pathlib
import shutil
import socket
import tempfile
from typing import Any

from jaxdqn.cli.usage import UsageError

LOCK = ".lock"


def check_writable(path: pathlib.Path, flag: str = "--out") -> None:
    """``path`` can be a run folder: not a file, not under a file, in a folder this process may
    write; a ``UsageError`` naming the problem otherwise."""
    if path.exists() and not path.is_dir():
        raise UsageError(f"{flag} {str(path)!r} is a file, not a folder")
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise UsageError(f"{flag} {str(path)!r} cannot be created: {str(existing)!r} is a file")
    try:  # os.access is not enough: root passes it, a read-only mount does not
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as e:
        raise UsageError(f"{flag} {str(path)!r} cannot be written: {e.strerror} ({str(existing)!r})") from None


def holds_a_run(path: pathlib.Path) -> list[str]:
    """What in ``path`` belongs to a run (empty for a missing or empty folder)."""
    if not path.is_dir():
        return []
    return sorted(p.name for p in path.iterdir() if p.name != LOCK)


def check_fresh(path: pathlib.Path, *, overwrite: bool) -> None:
    """A new run's folder must be empty; ``overwrite`` clears it first (after taking its lock)."""
    found = holds_a_run(path)
    if found and not overwrite:
        shown = ", ".join(found[:3]) + (", ..." if len(found) > 3 else "")
        raise UsageError(f"--out {str(path)!r} already holds a run ({shown}): continue it with --resume "
                         f"{str(path)!r}, or pass --overwrite to delete it and start again")


def clear(path: pathlib.Path) -> None:
    """Delete everything in ``path`` but its lock (``--overwrite``)."""
    for entry in path.iterdir():
        if entry.name == LOCK:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


class FolderLock:
    """An exclusive ``flock`` on ``<folder>/.lock`` for as long as this process writes the folder;
    a second process is refused naming the holder (its pid and host, written into the file).
    The kernel drops the lock when the holder exits, killed or not, so no stale lock remains."""

    def __init__(self, folder: pathlib.Path) -> None:
        self.path = folder / LOCK
        self.file: Any = None

    def acquire(self) -> "FolderLock":
        try:
            import fcntl
        except ImportError:  # not POSIX: no lock, as before
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.file = open(self.path, "a+")
        try:
            fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self.file.seek(0)
            holder = self.file.read().strip() or "another process"
            self.file.close()
            self.file = None
            raise UsageError(f"run folder {str(self.path.parent)!r} is in use by {holder}; wait for it to "
                             f"end, or choose another --out") from None
        self.file.seek(0)
        self.file.truncate()
        self.file.write(f"process {os.getpid()} on {socket.gethostname()}\n")
        self.file.flush()
        return self

    def release(self, *, remove_folder: bool = False) -> None:
        """Drop the lock; a folder left holding nothing but it loses the lock file, and the
        folder itself with ``remove_folder`` (a run refused before it wrote anything)."""
        if self.file is None:
            return
        if not holds_a_run(self.path.parent):
            self.path.unlink(missing_ok=True)
            if remove_folder:
                self.path.parent.rmdir()
        self.file.close()  # closing drops the flock
        self.file = None
