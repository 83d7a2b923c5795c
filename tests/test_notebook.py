"""The quickstart notebook: its install cell on a fresh runtime (default suite), and the whole
notebook top to bottom (slow suite)."""

import pathlib
import sys

import pytest

NOTEBOOK = pathlib.Path(__file__).parents[1] / "examples" / "quickstart.ipynb"


def install_cell() -> str:
    import nbformat

    return nbformat.read(NOTEBOOK, as_version=4).cells[1].source


def run_install_cell(monkeypatch, source: str) -> list:
    """The cell as on a runtime without jaxdqn: ``find_spec`` says so, pip is recorded, not run."""
    import importlib.util
    import subprocess

    calls = []
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "jaxdqn" else real(name, *a))
    monkeypatch.setattr(subprocess, "check_call", lambda argv: calls.append(argv))
    monkeypatch.delenv("JAXDQN_SOURCE", raising=False)
    exec(install_cell().replace('JAXDQN_SOURCE = ""', f"JAXDQN_SOURCE = {source!r}"), {})
    return calls


def test_the_install_cell_without_a_source_stops_with_one_sentence(monkeypatch):
    with pytest.raises(SystemExit, match="jaxdqn is not installed: set JAXDQN_SOURCE in the first cell"):
        run_install_cell(monkeypatch, "")


def test_the_install_cell_installs_what_the_user_has(monkeypatch, tmp_path):
    wheel = tmp_path / "jaxdqn-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"")
    assert run_install_cell(monkeypatch, str(wheel)) == [
        [sys.executable, "-m", "pip", "install", "-q", f"{wheel}[cli]"]]
    url = "git+https://example.org/me/jaxdqn.git"
    assert run_install_cell(monkeypatch, url) == [[sys.executable, "-m", "pip", "install", "-q", f"jaxdqn[cli] @ {url}"]]
    checkout = pathlib.Path(__file__).parents[1]
    assert run_install_cell(monkeypatch, str(checkout))[0][-1] == f"{checkout}[cli]"


@pytest.mark.slow
def test_quickstart_notebook_runs_top_to_bottom(tmp_path):
    import nbclient
    import nbformat

    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(notebook, timeout=900, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = "".join(o.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                      for o in cell.get("outputs", []))
    assert "iter 6:" in outputs and "True" in outputs  # trained, and the restored run matches
