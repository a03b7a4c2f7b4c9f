"""Notebooks execute with a real kernel and show their figures.

Every notebook in notebooks/ runs top to bottom at small settings (they read
``PPL_VAE_NOTEBOOK_SMALL=1`` in their first cell and shrink data and steps), and each of its
plotting cells has an image output; a notebook made here checks that importing the library
leaves pyplot showing figures and that every ``plot_*`` function shows one.
"""
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
PLOTTING = re.compile(r"plt\.show\(\)|\bplot_\w+\(")


@pytest.fixture
def kernel_environment(monkeypatch):
    """The kernel imports this checkout's ppl_vae, shows figures inline and uses one thread."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("PPL_VAE_NOTEBOOK_SMALL", "1")


def execute(notebook: nbformat.NotebookNode, path: Path) -> nbformat.NotebookNode:
    NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path)}}).execute()
    return notebook


def errors(notebook: nbformat.NotebookNode) -> list:
    return [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", []) if o.get("output_type") == "error"]


def has_image(cell: nbformat.NotebookNode) -> bool:
    return any("image/png" in output.get("data", {}) for output in cell.get("outputs", []))


@pytest.mark.notebook
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes_at_small_settings_and_shows_its_figures(path, tmp_path, kernel_environment):
    notebook = execute(nbformat.read(path, as_version=4), tmp_path)
    assert not errors(notebook)
    plotting = [cell for cell in notebook.cells if cell.cell_type == "code" and PLOTTING.search(cell.source)]
    assert [cell.source[:60] for cell in plotting if not has_image(cell)] == []


FIGURE_CELLS = {
    "pyplot after importing the library": (
        "import ppl_vae.viz\nimport ppl_vae.recipes\nimport matplotlib.pyplot as plt\n"
        "plt.plot([0, 1], [1, 0])\nplt.show()"
    ),
    "image grid": "import torch\nfrom ppl_vae.viz import plot_image_grid\nplot_image_grid(torch.rand(6, 1, 8, 8), nrow=3);",
    "training curves": (
        "from ppl_vae.viz import plot_training_curves\n"
        "history = [{'step': s, 'elbo_loss': 1000.0 / s, 'kl': 0.1 * s} for s in range(1, 50)]\n"
        "fig = plot_training_curves(history)"
    ),
    "posterior predictive check": (
        "from ppl_vae.checks import per_class_mass, posterior_predictive_check, mean_intensity\n"
        "from ppl_vae.models import VAE\nfrom ppl_vae.nn import MLP, mlp_decoder\nfrom ppl_vae.viz import plot_ppc\n"
        "model = VAE(MLP([4, 8], final_activation=torch.nn.ReLU()), mlp_decoder(2, [8], (4,)), 2, "
        "likelihood='gaussian', likelihood_scale=1.0)\n"
        "x = torch.randn(30, 4)\n"
        "ppc = posterior_predictive_check(model, {'x': x}, {'mean': mean_intensity, "
        "'mass': per_class_mass(torch.arange(30) % 3)}, num_samples=5, progress=False)\n"
        "plot_ppc(ppc);"
    ),
    "latent scatter into a given ax": (
        "import matplotlib.pyplot as plt\nfrom ppl_vae.viz import plot_latent_scatter\n"
        "fig, ax = plt.subplots()\nplot_latent_scatter(torch.randn(20, 2), torch.arange(20) % 2, ax=ax);"
    ),
}


def test_every_plotting_cell_shows_an_image_after_importing_the_library(tmp_path, kernel_environment):
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in FIGURE_CELLS.values()])
    execute(notebook, tmp_path)
    assert not errors(notebook)
    assert [name for name, cell in zip(FIGURE_CELLS, notebook.cells, strict=True) if not has_image(cell)] == []


def test_notebooks_folder_is_not_empty():
    assert NOTEBOOKS, "notebooks/ holds no notebook"
