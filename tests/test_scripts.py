"""The benchmark scripts still run (tiny sizes; the numbers themselves are not checked here).
Behind the ``bench`` marker: ``python -m pytest -m bench``."""

import json
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


def test_bench_conv_runs_and_prints_both_networks():
    out = subprocess.run([sys.executable, "scripts/bench_conv.py", "--repeats", "1"],
                         cwd=ROOT, capture_output=True, text=True, timeout=900, check=True).stdout
    rows = [line.split("|") for line in out.splitlines() if line.startswith(("| MinAtar", "| Nature"))]
    assert [r[1].strip() for r in rows] == ["MinAtar (10x10x4)", "Nature DQN (84x84x4)"], out
    assert all(float(r[2]) > 0 and float(r[3]) > 0 for r in rows), out


def test_bench_minatar_runs_and_prints_its_rows():
    out = subprocess.run([sys.executable, "scripts/bench_minatar.py", "--timesteps", "200", "--seeds", "2",
                          "--repeats", "1"], cwd=ROOT, capture_output=True, text=True, timeout=900, check=True).stdout
    rows = [line.split("|")[1].strip() for line in out.splitlines() if line.startswith(("| floor", "| jaxdqn"))]
    assert rows == ["floor", "jaxdqn", "jaxdqn x2 seeds"], out


def test_minatar_benchmark_script_trains_plots_and_tabulates(tmp_path):
    env = {**__import__("os").environ, "FRAMES": "200", "SEEDS": "2", "GAMES": "Freeway", "OUT": str(tmp_path / "runs"),
           "PLOTS": str(tmp_path / "plots")}
    out = subprocess.run(["bash", "scripts/minatar_benchmark.sh"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=900, check=True).stdout
    assert (tmp_path / "plots" / "freeway-minatar.png").read_bytes()[:4] == b"\x89PNG"
    table = [line for line in out.splitlines() if line.startswith("| Freeway")]
    assert len(table) == 1 and len(table[0].split("|")[3].split(",")) == 2, out  # one final return per seed


def test_bench_atari_runs_and_prints_its_rows(tmp_path):
    out = subprocess.run([sys.executable, "scripts/bench_atari.py", "--envs", "1", "--steps", "200", "--iterations", "1",
                          "--seeds", "2", "--host", "--json", str(tmp_path / "rows.json")],
                         cwd=ROOT, capture_output=True, text=True, timeout=900, check=True).stdout
    rows = [line.split("|")[1].strip() for line in out.splitlines() if line.startswith(("| ALE", "| DQN", "| floor"))]
    import importlib.util

    host = ["DQN on EnvPool"] if importlib.util.find_spec("envpool") is not None else []
    host += ["DQN on Gymnasium's ALE"] if importlib.util.find_spec("cv2") is not None else []
    assert rows == ["ALE only", "floor", "DQN (pong-dqn.yaml)", "DQN x2 seeds", "DQN, whole stacks"] + host, out
    saved = {row["row"]: row for row in json.loads((tmp_path / "rows.json").read_text())["rows"]}
    assert saved["floor"]["per_floor"] == 1.0
    # time per env step / floor = floor's rate / the row's rate per seed
    seeds = saved["DQN x2 seeds"]
    assert seeds["per_floor"] == pytest.approx(saved["floor"]["env_steps_per_s"] / (seeds["env_steps_per_s"] / 2))


def test_bench_prng_runs_and_prints_every_implementation():
    out = subprocess.run([sys.executable, "scripts/bench_prng.py", "--repeats", "1"],
                         cwd=ROOT, capture_output=True, text=True, timeout=900, check=True).stdout
    medians = json.loads(out.splitlines()[-1])["seconds_per_chunk"]
    assert set(medians) == {"threefry2x32", "rbg", "unsafe_rbg"}, out
    assert all(seconds > 0 for seconds in medians.values()), out


def test_count_kernels_runs_and_prints_both_programs():
    out = subprocess.run([sys.executable, "scripts/count_kernels.py"], cwd=ROOT, capture_output=True, text=True,
                         timeout=600, check=True).stdout
    counts = [line for line in out.splitlines() if line.startswith("kernels per iteration")]
    assert len(counts) == 2 and all(float(line.rsplit("ratio ", 1)[1]) > 0 for line in counts), out


def test_bench_hostenv_runs_and_prints_its_rows():
    out = subprocess.run(
        [sys.executable, "scripts/bench_hostenv.py", "--contenders", "jaxdqn", "--envs-list", "CartPole-v1",
         "--rounds", "1", "--warmup", "1000", "--timesteps", "1000"],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=True,
    ).stdout
    rows = [line.split("|") for line in out.splitlines() if line.startswith("| CartPole-v1")]
    assert [r[2].strip() for r in rows] == ["jaxdqn"], out
    assert float(rows[0][3]) > 0 and float(rows[0][6]) >= float(rows[0][3]), out  # outside the env: faster


def test_profile_minatar_runs_and_counts_kernels_per_frame(tmp_path):
    out = subprocess.run([sys.executable, "scripts/profile_minatar.py", "--frames", "50", "--top", "5", "--out",
                          str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=900, check=True).stdout
    header = [line for line in out.splitlines() if line.startswith("Breakout-MinAtar")]
    counts = [int(x) for x in header[0].split("floor ")[1].replace("jaxdqn ", "").split(", ")]
    assert len(counts) == 2 and all(c > 0 for c in counts), out
    rows = [line for line in out.splitlines() if line.startswith("| ") and not line.startswith("| kernel")]
    assert len(rows) == 5, out
