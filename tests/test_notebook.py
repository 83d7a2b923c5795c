"""The quickstart notebook runs top to bottom (slow suite)."""

import pathlib

import pytest

pytestmark = pytest.mark.slow
NOTEBOOK = pathlib.Path(__file__).parents[1] / "examples" / "quickstart.ipynb"


def test_quickstart_notebook_runs_top_to_bottom(tmp_path):
    import nbclient
    import nbformat

    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(notebook, timeout=900, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = "".join(o.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                      for o in cell.get("outputs", []))
    assert "iter 6:" in outputs and "True" in outputs  # trained, and the restored run matches

