"""How a config key is declared: its check (which also coerces the value to a hashable form)
and how it is classified, both on the dataclass field.

``key(default, check, ...)`` declares one field of a frozen config dataclass and
``check_fields(config)`` (called first in ``__post_init__``) runs every field's check. The
classifications are metadata of the field, read where they matter:

- ``traced``: the plan may take the value as a traced array (a sweep's vmapped trials get it
  through ``Hyperparams``, beside the static config);
- ``policy``: a policy of a multi-agent run may override it;
- ``resumable``: it may differ between a checkpoint and the config that resumes it (how long or
  how often the shell does things, never the state or a step's arithmetic);
- ``rllib``: other names RLlib gives the key (its later 1.x and Ray 2 names).

Every refusal is a ``ValueError`` that starts with ``key=value`` and says what is allowed.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from typing import Any, Callable, Mapping, get_args

Check = Callable[[str, Any], Any]  # (key, value) -> the value to store; raises ValueError


def fail(key: str, value: Any, allowed: str) -> None:
    raise ValueError(f"{key}={value!r} is invalid: {allowed}")


def unknown_key(key: str, known: set[str], what: str = "unknown config key") -> None:
    """Refuse ``key``, suggesting the closest of ``known``."""
    close = difflib.get_close_matches(key, sorted(known), n=3)
    hint = f" Did you mean {close}?" if close else ""
    raise ValueError(f"{what} {key!r}.{hint} Remove it, or see jaxdqn.DQNConfig for the supported keys.")


def is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def key(default: Any = dataclasses.MISSING, check: Check | None = None, *, factory: Any = None,
        traced: bool = False, policy: bool = False, resumable: bool = False, rllib: tuple[str, ...] = ()) -> Any:
    """A config field: its default (or ``factory``), its check and its classification."""
    metadata = {"check": check, "traced": traced, "policy": policy, "resumable": resumable, "rllib": tuple(rllib)}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def redefault(cls: type, name: str, default: Any) -> Any:
    """``cls``'s field ``name`` with another default (a subclass's, e.g. SimpleQ's)."""
    return dataclasses.field(default=default, metadata=cls.__dataclass_fields__[name].metadata)


def check_fields(config: Any, prefix: str = "") -> None:
    """Run every field's check, storing what it returns (frozen dataclasses are set through
    ``object.__setattr__``, as ``dataclasses`` itself does); ``prefix`` names a section's keys
    in messages (``"model."``)."""
    for field in dataclasses.fields(config):
        check = field.metadata.get("check")
        if check is not None:
            object.__setattr__(config, field.name, check(prefix + field.name, getattr(config, field.name)))


def classified(cls: type, flag: str) -> tuple[str, ...]:
    """The names of ``cls``'s fields with the classification ``flag`` (``traced``, ``policy``,
    ``resumable``)."""
    return tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get(flag))


def section(key_: str, value: Any, cls: type, what: str = "unknown config key") -> Any:
    """The one coercion of a nested section: an instance of ``cls`` as it is, a mapping checked
    for unknown keys (named with ``key_.``, closest match suggested) and built into ``cls``."""
    if isinstance(value, cls):
        return value
    names = {f.name for f in dataclasses.fields(cls)}
    if not isinstance(value, Mapping):
        fail(key_, value, f"must be a mapping of {sorted(names)}")
    for k in value:
        if k not in names:
            unknown_key(f"{key_}.{k}", {f"{key_}.{n}" for n in names}, what)
    return cls(**dict(value))


# --- checks ------------------------------------------------------------------------------------
def integer(low: int, high: float = math.inf) -> Check:
    def check(key_: str, value: Any) -> Any:
        if not is_int(value) or not low <= value <= high:
            fail(key_, value, f"must be an int {f'[{low}, {high}]' if high != math.inf else f'>= {low}'}")
        return value
    return check


def number(low: float, high: float = math.inf, *, open_low: bool = False) -> Check:
    def check(key_: str, value: Any) -> Any:
        if not (is_number(value) and (value > low if open_low else value >= low) and value <= high):
            bounds = (f"> {low}" if open_low else f">= {low}") + (f" and <= {high}" if high != math.inf else "")
            fail(key_, value, f"must be a number {bounds}")
        return value
    return check


def boolean(key_: str, value: Any) -> Any:
    if not isinstance(value, bool):
        fail(key_, value, "must be a bool")
    return value


def one_of(literal: Any, hint: str = "") -> Check:
    """One of the values of a ``Literal`` type."""
    allowed = get_args(literal)

    def check(key_: str, value: Any) -> Any:
        if value not in allowed:
            fail(key_, value, f"supported: {list(allowed)}{hint}")
        return value
    return check


def optional(inner: Check) -> Check:
    """``None``, or what ``inner`` accepts."""
    return lambda key_, value: None if value is None else inner(key_, value)


def positive_ints(key_: str, value: Any) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        fail(key_, value, "must be a list of positive ints")
    out = tuple(value)
    if not all(is_int(v) and v > 0 for v in out):
        fail(key_, value, "must be a list of positive ints")
    return out


def schedule(key_: str, value: Any) -> tuple[tuple[int, float], ...] | None:
    """RLlib's ``[[timestep, value], ...]``, timesteps non-decreasing and >= 0, values finite
    and >= 0; None for none."""
    if value is None:
        return None
    try:
        points = tuple((int(t), float(v)) for t, v in value)
    except (TypeError, ValueError):
        fail(key_, value, "must be a list of [timestep, value] pairs")
    if not points or any(t < 0 for t, _ in points) or any(b[0] < a[0] for a, b in zip(points, points[1:])):
        fail(key_, value, "must be a non-empty list of [timestep, value] pairs, timesteps >= 0 and non-decreasing")
    if any(not math.isfinite(v) or v < 0 for _, v in points):
        fail(key_, value, "values must be finite and >= 0")
    return points


def nested(cls: type, what: str = "unknown config key") -> Check:
    """A nested section (``section``)."""
    return lambda key_, value: section(key_, value, cls, what)
