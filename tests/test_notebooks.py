"""Every notebook in notebooks/ executes top to bottom at small settings.

Notebooks read ``PPL_VAE_NOTEBOOK_SMALL=1`` in their first cell and shrink data and steps.
"""
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


@pytest.mark.notebook
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes_at_small_settings(path, tmp_path, monkeypatch):
    monkeypatch.setenv("PPL_VAE_NOTEBOOK_SMALL", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors


def test_notebooks_folder_is_not_empty():
    assert NOTEBOOKS, "notebooks/ holds no notebook"
