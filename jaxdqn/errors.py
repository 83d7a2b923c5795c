"""What a run stops on that is not a bug: the shell's exceptions, importable without JAX."""

from __future__ import annotations


class DamagedCheckpoint(ValueError):
    """A checkpoint whose files do not match its manifest (changed, truncated, missing)."""


class SaveError(OSError):
    """A checkpoint could not be written (after one retry); the earlier ones are intact."""


class Diverged(ArithmeticError):
    """Training produced a non-finite loss, Q value or parameter."""
