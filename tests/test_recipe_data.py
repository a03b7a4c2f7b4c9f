"""The recipes' data loading lets the MNIST loader's own offline-fallback warning through
(no blanket warning filter around it)."""
import pytest
import torchvision

from ppl_vae.recipes.common import load_training_data
from ppl_vae.recipes.configs import ContrastiveConfig, PartedConfig
from ppl_vae.recipes.contrastive import load_contrastive_data
from ppl_vae.recipes.parted import mnist_pools
from ppl_vae.train import TrainConfig


class FailingTorchvision:
    """Stands in for a torchvision data set class when there is no network."""

    mirrors, resources = [], []

    def __init__(self, *args, **kwargs):
        raise RuntimeError("Error downloading train-images-idx3-ubyte.gz: no network")


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setattr(torchvision.datasets, "MNIST", FailingTorchvision)
    monkeypatch.delenv("PPL_VAE_MNIST_DIR", raising=False)


FALLBACK = "MNIST could not be loaded through torchvision .*falling back to the real 5,000-image MNIST subset"


@pytest.mark.parametrize("load", [
    lambda: load_training_data("mnist", num_train=10, seed=0),
    lambda: mnist_pools(PartedConfig(dataset="mnist", num_train=10, num_eval=10, train=TrainConfig(steps=1))),
    lambda: load_contrastive_data(ContrastiveConfig(num_target=10)),
], ids=["load_training_data", "mnist_pools", "load_contrastive_data"])
def test_the_recipes_let_the_mnist_fallback_warning_through(offline, load):
    with pytest.warns(UserWarning, match=FALLBACK):
        load()


def test_pinwheel_gives_the_papers_400_points_or_num_train_points_from_every_arm():
    import torch

    assert load_training_data("pinwheel", None, seed=0).x.shape == (400, 2)
    data = load_training_data("pinwheel", 1001, seed=0)
    assert data.x.shape == (1001, 2) and data.labels.bincount().tolist() == [250, 250, 251, 250]
    assert torch.equal(load_training_data("pinwheel", 1001, seed=0).x, data.x)
    assert not torch.equal(load_training_data("pinwheel", 1001, seed=1).x, data.x)
