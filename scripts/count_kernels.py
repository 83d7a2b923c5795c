"""Kernels per iteration: what one pass of the compiled loop body launches, for jaxdqn's plan and
for its compute floor (bench_train.py's ``make_floor``) at bench_train.py's PureJaxRL CartPole
config, where one iteration is one store of 10 env steps and one SGD step in both.

On an accelerator every kernel of the loop body is a launch per iteration, so the count is a
cost of its own beside the FLOPs: a loop body of 165 small kernels pays 165 launches per
iteration whatever their size. The count is read from the optimized HLO of each program (the
backend's own fusion decisions: run it where the timings are taken, ``--platform gpu`` on a
GPU): every instruction of the loop body that runs work is one kernel (a fusion, a custom call,
a copy, a dot, a scatter, an unfused elementwise op, ...); parameters, constants, tuples and
bitcasts are not. A ``call`` or ``conditional`` counts what it calls (a conditional its largest
branch); a nested loop is listed on its own with its trip count, and its launches count in
its parent's trips. Two totals: with the nested loops (on XLA:CPU each threefry draw is a loop
of 5 rounds) and the loop body alone (closer to a GPU, where a draw is one fused kernel): a
nested loop of a fixed trip count counts as one kernel there, one of a traced count (the plan's
replays after each store, one here) as its own body. Usage::

    python scripts/count_kernels.py [--platform cpu] [--prioritized] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import sys
from typing import Any

NOT_KERNELS = {"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "after-all", "add-dependency",
               "opt-barrier", "partition-id", "replica-id", "iota"}
HEADER = re.compile(r"^(?:ENTRY )?%?([\w.\-]+) \(.*\) -> .* \{$")
INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%?([\w.\-]+) = .*? ([a-z][\w\-]*)\((.*)$")
CALLED = re.compile(r"(?:condition|body|to_apply|calls|true_computation|false_computation)=%?([\w.\-]+)")
BRANCHES = re.compile(r"branch_computations=\{([^}]*)\}")
TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')


def computations(hlo: str) -> tuple[dict[str, list[tuple[str, str, str]]], str]:
    """Computation name -> its instructions ``(name, opcode, rest of line)``, and the entry's name."""
    comps: dict[str, list[tuple[str, str, str]]] = {}
    entry, current = "", None
    for line in hlo.splitlines():
        header = HEADER.match(line.strip())
        if header:
            current = header.group(1)
            comps[current] = []
            if line.startswith("ENTRY"):
                entry = current
            continue
        if line.strip() == "}":
            current = None
            continue
        match = INSTRUCTION.match(line) if current is not None else None
        if match:
            comps[current].append((match.group(1), match.group(2), match.group(3)))
    return comps, entry


def count(comps: dict[str, list[tuple[str, str, str]]], name: str, loops: list[dict[str, Any]], depth: int) -> int:
    """Kernels one run of computation ``name`` launches outside its nested loops (which go to
    ``loops`` with their own counts)."""
    total = 0
    for inst, opcode, rest in comps.get(name, []):
        if opcode in NOT_KERNELS:
            continue
        if opcode == "while":
            called = dict(re.findall(r"(condition|body)=%?([\w.\-]+)", rest))
            trip = TRIP.search(rest)
            loop = {"while": inst, "depth": depth + 1, "trip_count": int(trip.group(1)) if trip else None}
            loops.append(loop)
            inner: list[dict[str, Any]] = []
            loop["body_kernels"] = count(comps, called["body"], inner, depth + 1)
            loop["condition_kernels"] = count(comps, called["condition"], inner, depth + 1)
            # a trip's launches: its body and condition, and each nested loop's whole run
            children = [child for child in inner if child["depth"] == depth + 2]
            loop["kernels_per_trip"] = loop["body_kernels"] + loop["condition_kernels"] + sum(
                child["kernels_per_trip"] * (child["trip_count"] or 1) for child in children)
            # as a GPU runs it: a nested loop of a fixed trip count (a threefry draw's rounds) is
            # one fused kernel; one of a traced count (the replays after a store) runs its body
            loop["fused_kernels_per_trip"] = loop["body_kernels"] + loop["condition_kernels"] + sum(
                1 if child["trip_count"] else child["fused_kernels_per_trip"] for child in children)
            loops.extend(inner)
        elif opcode == "call":
            total += sum(count(comps, c, loops, depth) for c in CALLED.findall(rest))
        elif opcode == "conditional":
            branches = BRANCHES.search(rest)
            names = ([b.strip().lstrip("%") for b in branches.group(1).split(",")] if branches
                     else CALLED.findall(rest))
            total += max((count(comps, b, loops, depth) for b in names), default=0) + 1  # the predicate's
        else:
            total += 1
    return total


def loop_counts(compiled_text: str) -> list[dict[str, Any]]:
    comps, entry = computations(compiled_text)
    loops: list[dict[str, Any]] = []
    entry_kernels = count(comps, entry, loops, 0)
    return [{"while": "(entry)", "depth": 0, "trip_count": 1, "body_kernels": entry_kernels,
             "condition_kernels": 0, "kernels_per_trip": entry_kernels, "fused_kernels_per_trip": entry_kernels}] + loops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--platform", default="cpu")
    parser.add_argument("--prioritized", action="store_true", help="the plan with prioritized replay")
    parser.add_argument("--json", help="write the loops of both programs here")
    args = parser.parse_args()
    import jax

    jax.config.update("jax_platforms", args.platform)
    sys.path.insert(0, str(pathlib.Path(__file__).parent))
    from bench_train import make_floor, purejaxrl_config

    from jaxdqn.plan import make_plan

    config = purejaxrl_config(100_000, prioritized=args.prioritized)
    plan = make_plan(config)
    state = jax.eval_shape(plan.init, jax.random.key(0))
    programs = {
        "jaxdqn chunk": jax.jit(plan.chunk).lower(state).compile().as_text(),
        "floor": jax.jit(make_floor(config)).lower(jax.random.key(0)).compile().as_text(),
    }
    out: dict[str, Any] = {"platform": args.platform, "device_kind": jax.devices()[0].device_kind,
                           "prioritized": args.prioritized, "programs": {}}
    for name, text in programs.items():
        loops = loop_counts(text)
        out["programs"][name] = loops
        print(f"{name}:")
        for loop in loops:
            trips = "?" if loop["trip_count"] is None else loop["trip_count"]
            print(f"  {'  ' * loop['depth']}{loop['while']}: {loop['kernels_per_trip']} kernels per trip "
                  f"(body {loop['body_kernels']}, condition {loop['condition_kernels']}, nested loops the rest), "
                  f"trips {trips}")
    # One iteration: the plan's chunk loop (one store + its replay) against the floor's learning
    # loop (one env step of every env + one SGD step): the outermost loop with the most kernels
    # per trip, its nested loops' launches included (XLA:CPU runs each threefry draw as a loop).
    per_iteration = {name: max((loop["kernels_per_trip"] for loop in loops if loop["depth"] == 1), default=0)
                     for name, loops in out["programs"].items()}
    body_only = {name: max((loop["fused_kernels_per_trip"] for loop in loops
                            if loop["kernels_per_trip"] == per_iteration[name] and loop["depth"] == 1), default=0)
                 for name, loops in out["programs"].items()}
    out["per_iteration"], out["per_iteration_body_only"] = per_iteration, body_only
    for label, counts in (("with nested loops", per_iteration), ("loop body only", body_only)):
        print(f"kernels per iteration, {label}: jaxdqn {counts['jaxdqn chunk']}, floor {counts['floor']}, "
              f"ratio {counts['jaxdqn chunk'] / max(counts['floor'], 1):.2f}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
