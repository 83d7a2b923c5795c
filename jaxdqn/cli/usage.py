"""What the command reports as a usage problem: one line on stderr, exit code 2."""

from __future__ import annotations

import contextlib


class UsageError(Exception):
    """A problem with what the user asked for: reported in one line, exit code 2."""


@contextlib.contextmanager
def as_usage_errors():
    """Bad values found while setting up (config, checkpoint, files) become ``UsageError``s;
    errors during training are not caught, so a bug keeps its traceback."""
    try:
        yield
    except (ValueError, TypeError, FileNotFoundError) as e:
        raise UsageError(str(e)) from None
