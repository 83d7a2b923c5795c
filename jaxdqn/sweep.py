"""Hyper-parameter sweeps: Tune's ``grid_search`` expanded into trials, and the trials that
differ only in values run as one vmapped program.

``expand_grid(doc)`` resolves every ``{"grid_search": [...]}`` of a config document into trials,
in Tune's order (the grid keys sorted by path, the first varying fastest). Trials then fall into
*programs* (``group_trials``): two trials share a program when every key in which they differ is
one of ``TRACED_KEYS`` (the config's keys with ``traced`` metadata, the plan's ``Hyperparams``:
learning rate, discount, epsilon schedule, target period, Polyak ``tau``, prioritized-replay
exponents, ...) or ``seed`` (the trial's init keys). Any other difference (network sizes, batch, buffer, n-step, training
intensity, env ...) changes shapes or the static schedule, so such trials compile apart
(RLlib's atari-duel-ddqn.yaml sweeps four games: four programs, run in turn). The trials of one
Atari game share a program as any others: its ALE batch holds every run's games
(``atari.over_runs``).

Inside a program the config stays static and concrete (every trial's was checked when it was
built); a trial's values travel beside it: ``hyperparams(config, values)`` is the config's
``Hyperparams`` with one trial's values (tracers under ``vmap``), and the plan built with them
is the plan of that trial: a trial of a sweep draws the same random stream and takes the same
steps as ``Trainer(trial_config, num_seeds=S)`` (to float rounding: a traced value is not
constant-folded).
"""

from __future__ import annotations

import copy
import itertools
from typing import Any, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxdqn.config import NESTED, DQNConfig, Hyperparams, to_dict, traced_keys

# Config keys whose value the plan may take as a traced array (``nested.key`` for sub-configs).
# Each is tested to give the same run traced as written out (tests/test_sweep.py).
TRACED_KEYS = frozenset(traced_keys())
INT_KEYS = frozenset(k for k in TRACED_KEYS  # step counts: traced as int32
                     if type(DQNConfig().hyperparams._asdict()[k.rpartition(".")[2]]) is int)
SEED_KEY = "seed"  # differs per trial through the init keys, not through the plan
GRID = "grid_search"


def _grid_paths(node: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], list[Any]]]:
    if isinstance(node, Mapping):
        if GRID in node:
            values = node[GRID]
            if len(node) != 1 or not isinstance(values, (list, tuple)) or not values:
                where = ".".join(path) or "<top>"
                raise ValueError(f"{where}: a grid_search must be {{grid_search: [v1, v2, ...]}} with a "
                                 f"non-empty list and no other key, got {dict(node)!r}")
            return [(path, list(values))]
        return [found for k, v in node.items() for found in _grid_paths(v, path + (str(k),))]
    return []


def _assign(doc: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        doc = doc[key]
    doc[path[-1]] = value


def expand_grid(doc: Mapping[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Every trial of a document with ``grid_search`` values: ``[(variables, resolved document)]``.

    ``variables`` maps the dotted path of each grid key to the trial's value. Tune's order: the
    paths sorted, the first varying fastest. A document without grid search is one trial with
    no variables."""
    grids = sorted(_grid_paths(doc))
    if not grids:
        return [({}, copy.deepcopy(dict(doc)))]
    trials = []
    # itertools.product varies its last factor fastest; Tune varies the first grid key fastest.
    for combo in itertools.product(*(values for _, values in reversed(grids))):
        resolved = copy.deepcopy(dict(doc))
        variables = {}
        for (path, _), value in zip(reversed(grids), combo):
            _assign(resolved, path, value)
            variables[".".join(path)] = value
        trials.append(({k: variables[k] for k in (".".join(p) for p, _ in grids)}, resolved))
    return trials


def flat_keys(config: DQNConfig) -> dict[str, Any]:
    """The config as ``{dotted key: value}``, sub-configs (``config.NESTED``: ``model``,
    ``exploration_config``, ...) one level down; other values (lists, ``multiagent``) whole."""
    out = {}
    for key, value in to_dict(config).items():
        if key in NESTED:
            out.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            out[key] = value
    return out


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def differing_keys(configs: Sequence[DQNConfig]) -> list[str]:
    """The dotted keys in which the configs do not all agree, sorted."""
    flats = [flat_keys(c) for c in configs]
    keys = set().union(*flats)
    return sorted(k for k in keys if any(f.get(k) != flats[0].get(k) for f in flats[1:]))


def _traceable(key: str, values: Sequence[Any]) -> bool:
    return key in TRACED_KEYS and all(_is_number(v) for v in values)


PRIORITY_KEYS = ("prioritized_replay_alpha", "prioritized_replay_beta", "final_prioritized_replay_beta",
                 "prioritized_replay_beta_annealing_timesteps", "prioritized_replay_eps")


def check_effective(configs: Sequence[DQNConfig], differing: Sequence[str]) -> None:
    """Refuse a swept key that has no effect in some trial (its trials would be the same run
    under different names): ``lr`` beside an ``lr_schedule`` (RLlib's rule: the schedule sets
    the rate), prioritized-replay keys without ``prioritized_replay``, epsilon keys with
    ``explore=False``."""
    for key in differing:
        if key == "lr" and any(c.lr_schedule is not None for c in configs):
            raise ValueError("lr differs between trials, but lr_schedule is set and decides the learning rate "
                             "(RLlib's rule): sweep lr_schedule, or set lr_schedule: null")
        if key in PRIORITY_KEYS and any(not c.prioritized_replay for c in configs):
            raise ValueError(f"{key} differs between trials, but prioritized_replay is False in some of them, "
                             f"where it has no effect")
        if key.startswith("exploration_config.") and any(not c.explore for c in configs):
            raise ValueError(f"{key} differs between trials, but explore is False in some of them, where "
                             f"it has no effect")


def group_trials(configs: Sequence[DQNConfig]) -> list[list[int]]:
    """Trial indices grouped into programs (order kept): trials share a program when they differ
    only in ``TRACED_KEYS`` (numbers in every trial: ``grad_clip`` None against 40 is a change
    of structure) and ``seed``. A swept key without effect is refused (``check_effective``)."""
    if any(type(c) is not type(configs[0]) for c in configs):
        raise ValueError("the trials of a sweep must all be of one algorithm")
    flats = [flat_keys(c) for c in configs]
    differing = differing_keys(configs)
    check_effective(configs, differing)
    def signature(flat: Mapping[str, Any]) -> str:
        # A traced key counts only as "a number" (its value is traced); None against a number,
        # and every other key, by value.
        return repr([(k, "<traced>" if k in TRACED_KEYS and _is_number(flat.get(k)) else flat.get(k))
                     for k in differing if k != SEED_KEY])

    groups: dict[str, list[int]] = {}
    for i, flat in enumerate(flats):
        groups.setdefault(signature(flat), []).append(i)
    return list(groups.values())


def trial_values(configs: Sequence[DQNConfig]) -> dict[str, np.ndarray]:
    """``{dotted key: [T] array}`` of the traced keys in which the trials of one program differ
    (float32; int32 for step counts). A difference outside ``TRACED_KEYS`` and ``seed`` raises a
    ``ValueError`` naming the key (such trials belong to separate programs: ``group_trials``)."""
    flats = [flat_keys(c) for c in configs]
    values = {}
    differing = differing_keys(configs)
    check_effective(configs, differing)
    for key in differing:
        if key == SEED_KEY:
            continue
        column = [f.get(key) for f in flats]
        if not _traceable(key, column):
            raise ValueError(f"{key} differs between trials ({column}) and changes the program: such trials "
                             f"run as separate programs; traced keys: {sorted(TRACED_KEYS)}")
        values[key] = np.asarray(column, np.int32 if key in INT_KEYS else np.float32)
    return values


def hyperparams(config: DQNConfig, values: Mapping[str, Any]) -> Hyperparams:
    """``config``'s ``Hyperparams`` with ``values`` (``{dotted key: scalar}``, tracers under
    ``vmap``) in place of its own."""
    for key in values:
        if key not in TRACED_KEYS:
            raise ValueError(f"{key} cannot be traced; traced keys: {sorted(TRACED_KEYS)}")
    return config.hyperparams.replace(values)


def per_trial(config: DQNConfig, values: Mapping[str, Any], fn: Any, *args: Any) -> Any:
    """``fn(trial's Hyperparams, *args)`` for every row of ``values`` (``[R]`` arrays) and of
    ``args`` (leading axis ``[R]``), vmapped; ``fn(config.hyperparams, *args)`` when ``values``
    is empty."""
    if not values:
        return fn(config.hyperparams, *args)
    return jax.vmap(lambda v, *a: fn(hyperparams(config, v), *a))({k: jnp.asarray(v) for k, v in values.items()},
                                                                   *args)


def trial_name(index: int, variables: Mapping[str, Any]) -> str:
    """Tune's experiment tag: ``<index>_<key>=<value>,...`` (the last part of each dotted key)."""
    def clean(v: Any) -> str:
        return f"{v:.5g}" if isinstance(v, float) else str(v).replace("/", "_").replace(" ", "")

    tag = ",".join(f"{k.rpartition('.')[2]}={clean(v)}" for k, v in variables.items())
    return f"{index}_{tag}" if tag else str(index)


__all__ = ["GRID", "INT_KEYS", "SEED_KEY", "TRACED_KEYS", "differing_keys", "expand_grid", "flat_keys",
           "group_trials", "hyperparams", "per_trial", "trial_name", "trial_values"]
