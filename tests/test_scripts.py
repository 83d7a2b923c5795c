"""The benchmark scripts still run (tiny sizes; the numbers themselves are not checked here).
Behind the ``bench`` marker: ``python -m pytest -m bench``."""

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.bench
ROOT = Path(__file__).resolve().parents[1]


def test_bench_buffers_runs_and_prints_its_table():
    out = subprocess.run(
        [sys.executable, "scripts/bench_buffers.py", "--iters", "20", "--runs", "1", "--capacities", "256",
         "--no-flashbax"],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=True,
    ).stdout
    rows = [line for line in out.splitlines() if line.startswith("| uniform") or line.startswith("| prioritized")]
    from jaxdqn.buffers import tree_kernels

    expected = (["uniform", "prioritized (fused kernels)", "prioritized (XLA program)"] if tree_kernels.available()
                else ["uniform", "prioritized"])
    assert [r.split("|")[1].strip() for r in rows] == expected, out
    assert all(float(r.split("|")[3]) > 0 for r in rows), out  # microseconds per iteration


def test_bench_ratios_runs_and_prints_its_ratios():
    out = subprocess.run(
        [sys.executable, "scripts/bench_ratios.py", "--timesteps", "12000", "--rounds", "1",
         "--seed-timesteps", "11000", "--seed-rounds", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=900, check=True,
    ).stdout
    lines = {line.split(":")[0]: line for line in out.splitlines() if "median" in line}
    assert set(lines) == {"jaxdqn / floor", "prioritized / uniform", "8 seeds / (8 x one seed)"}, out
    assert all(float(line.split("median ")[1].rstrip(")")) > 0 for line in lines.values()), out


def test_bench_sweep_runs_and_prints_its_rows():
    out = subprocess.run(
        [sys.executable, "scripts/bench_sweep.py", "--timesteps", "1000", "--values", "2", "--seeds", "1",
         "--repeats", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=900, check=True,
    ).stdout
    rows = {line.split("  ")[0]: line.split() for line in out.splitlines()
            if line.startswith(("one program", "per-trial", "separate"))}
    assert set(rows) == {"one program", "per-trial programs", "separate runs"}, out
    assert [int(rows[name][-4]) for name in ("one program", "per-trial programs", "separate runs")] == [1, 2, 2], out
