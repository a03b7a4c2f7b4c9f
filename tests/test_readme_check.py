"""The README's posterior predictive check, run as written on a run of ``ppl-vae train vae``
(MNIST, shortened), gives p-values that are neither all 0 nor all 1."""
import re
from pathlib import Path

import matplotlib
import pytest

from ppl_vae.recipes import RECIPES
from ppl_vae.recipes.base import train_recipe
from ppl_vae.recipes.configs import VAEConfig
from ppl_vae.train import TrainConfig

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_check_snippet() -> str:
    """The first Python block of the README's "Posterior predictive checks" section."""
    section = README.read_text().split("## Posterior predictive checks", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.mark.filterwarnings("ignore:MNIST could not be loaded")
def test_the_readme_check_on_a_trained_mnist_vae_gives_p_values_neither_all_0_nor_all_1(tmp_path):
    matplotlib.use("Agg")
    config = VAEConfig(dataset="mnist", num_train=1000, hidden=64,
                       train=TrainConfig(steps=200, batch_size=64, lr=1e-3, progress_bar=False))
    train_recipe(RECIPES["vae"], config, tmp_path / "vae-mnist")
    snippet = readme_check_snippet()
    assert '"runs/vae-mnist"' in snippet
    namespace: dict = {}
    exec(snippet.replace('"runs/vae-mnist"', repr(str(tmp_path / "vae-mnist"))), namespace)  # noqa: S102
    summary = namespace["check"].summary()
    p_values = [value["p_value"] for value in summary.values() if isinstance(value, dict)]
    p_values.append(summary["x/discrepancy_p_value"])
    assert any(0.05 < p < 0.95 for p in p_values), summary
    assert 0.2 < summary["x/point_means"]["p_value"] < 0.8 and 0.2 < summary["x/pixel_means"]["p_value"] < 0.8
