"""The code on the user guide's pages (and the README) runs as written.

Every ```python block of a page runs, in order, in one namespace per page, in a temporary
working directory. A block whose first line is ``# not run in tests: REASON`` (visible on the
page, e.g. one that needs a GPU) is skipped. Shell blocks: every ``ppl-vae`` command line is
parsed by the command line's own parser and its settings are checked against the model's
config (as ``ppl-vae`` does before it loads any data); the cheap ones (``--help``, ``list``)
are run.
"""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import matplotlib
import pytest

ROOT = Path(__file__).resolve().parents[1]
GUIDE_PAGES = [
    "README.md",
    "docs/index.md",
    "docs/installation.md",
    "docs/getting_started.md",
    "docs/cli.md",
    "docs/datasets.md",
    "docs/criticism.md",
    "docs/scale_out.md",
    "docs/composing.md",
    "docs/parted.md",
]
NOT_RUN = "# not run in tests:"
SUBCOMMANDS = ("train", "sweep", "evaluate", "demo", "list")
FENCE = re.compile(r"^```(?P<language>[\w-]*)\n(?P<body>.*?)^```", re.S | re.M)


def code_blocks(page: str, language: str) -> list[str]:
    """The fenced blocks of ``page`` in ``language``, in page order."""
    return [m.group("body") for m in FENCE.finditer((ROOT / page).read_text(encoding="utf-8"))
            if m.group("language") == language]


def runnable(blocks: list[str]) -> list[str]:
    return [block for block in blocks if not block.lstrip().startswith(NOT_RUN)]


def command_lines(page: str) -> list[list[str]]:
    """The ``ppl-vae`` command lines of the page's bash blocks, as argument lists (continued
    lines joined, comments dropped, ``torchrun ... -m ppl_vae.cli`` and ``srun ppl-vae``
    included)."""
    commands = []
    for block in code_blocks(page, "bash"):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            for i, word in enumerate(words):
                if word.endswith("ppl-vae") or (word == "ppl_vae.cli" and i > 0 and words[i - 1] == "-m"):
                    commands.append(words[i + 1:])
                    break
    return commands


def test_the_marker_of_blocks_not_run_is_understood():
    blocks = ["# not run in tests: needs a CUDA GPU\nimport torch\n", "x = 1\n"]
    assert runnable(blocks) == ["x = 1\n"]
    assert any(block.lstrip().startswith(NOT_RUN) for block in code_blocks("docs/scale_out.md", "python"))


@pytest.fixture
def vae_mnist_run(tmp_path):
    """A short run of the recipe the criticism page checks, where its block looks for it."""
    from ppl_vae.recipes import RECIPES
    from ppl_vae.recipes.base import train_recipe
    from ppl_vae.recipes.configs import VAEConfig
    from ppl_vae.train import TrainConfig

    config = VAEConfig(dataset="mnist", num_train=1000, hidden=64,
                       train=TrainConfig(steps=200, batch_size=64, lr=1e-3, progress_bar=False))
    train_recipe(RECIPES["vae"], config, tmp_path / "runs" / "vae-mnist")


def run_page(page: str, directory: Path, monkeypatch) -> dict:
    matplotlib.use("Agg")
    monkeypatch.chdir(directory)
    namespace: dict = {"__name__": "__guide__"}
    for block in runnable(code_blocks(page, "python")):
        exec(compile(block, f"{page} (python block)", "exec"), namespace)  # noqa: S102
    import matplotlib.pyplot as plt

    plt.close("all")
    return namespace


@pytest.mark.filterwarnings("ignore:MNIST could not be loaded")
@pytest.mark.parametrize("page", [page for page in GUIDE_PAGES if page != "docs/criticism.md"])
def test_the_python_blocks_of_a_guide_page_run(page, tmp_path, monkeypatch):
    run_page(page, tmp_path, monkeypatch)


@pytest.mark.filterwarnings("ignore:MNIST could not be loaded")
def test_the_check_of_the_criticism_page_runs_on_a_trained_mnist_vae_with_p_values_neither_all_0_nor_all_1(
        vae_mnist_run, tmp_path, monkeypatch):
    assert '"runs/vae-mnist"' in code_blocks("docs/criticism.md", "python")[0]
    namespace = run_page("docs/criticism.md", tmp_path, monkeypatch)
    summary = namespace["check"].summary()
    p_values = [value["p_value"] for value in summary.values() if isinstance(value, dict)]
    p_values.append(summary["x/discrepancy_p_value"])
    assert any(0.05 < p < 0.95 for p in p_values), summary
    assert 0.2 < summary["x/point_means"]["p_value"] < 0.8 and 0.2 < summary["x/pixel_means"]["p_value"] < 0.8


@pytest.mark.parametrize("page", GUIDE_PAGES)
def test_the_ppl_vae_commands_of_a_guide_page_parse_with_valid_settings(page):
    from ppl_vae.cli import _command_line_settings, _parse_grid, _parse_sets, _recipe, build_parser
    from ppl_vae.recipes.settings import setting_value, with_overrides

    parser = build_parser()
    for words in command_lines(page):
        if "--help" in words:  # run by the next test
            continue
        args = parser.parse_args(words)
        command = next(word for word in words if word in SUBCOMMANDS)
        if getattr(args, "model", None) is None:
            continue
        recipe = _recipe(args.model)
        if command == "sweep":
            _parse_grid(args.grid, recipe.config_class)
            for name, value in _parse_sets(args.set).items():
                setting_value(recipe.config_class, name, value)
            continue
        args.config = None  # a settings file of the page's example is not in the repository
        settings = _command_line_settings(args, recipe.config_class)
        with_overrides(recipe.demo() if args.demo_settings else recipe.config_class(), settings)


@pytest.mark.parametrize("page", GUIDE_PAGES)
def test_the_cheap_ppl_vae_commands_of_a_guide_page_run(page):
    for words in command_lines(page):
        if "--help" in words or words == ["list"]:
            done = subprocess.run([sys.executable, "-m", "ppl_vae.cli", *words], capture_output=True, text=True,
                                  timeout=60, cwd=ROOT)
            assert done.returncode == 0, (words, done.stderr)


def test_every_guide_page_has_commands_or_code_that_these_tests_see():
    for page in GUIDE_PAGES:
        assert command_lines(page) or runnable(code_blocks(page, "python")), page
