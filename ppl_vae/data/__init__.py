"""Data sets of the three papers, each a torch ``Dataset`` that can also hand over whole tensors.

Images are float32 in [0, 1] with shape ``(N, C, H, W)``; ``tensors()`` returns a dict of tensors so
that small data sets can live on the GPU during training without DataLoader workers.

>>> from ppl_vae.data import load_dataset
>>> pinwheel = load_dataset("pinwheel", seed=1)
>>> pinwheel.tensors()["x"].shape
torch.Size([400, 2])
"""

from __future__ import annotations

from collections.abc import Callable

from torch.utils.data import Dataset

from ppl_vae.data.base import TensorDictDataset
from ppl_vae.data.celeba import CELEBA_ATTRIBUTES, CelebA
from ppl_vae.data.counts import SyntheticCounts, contrastive_tensors
from ppl_vae.data.dsprites import DSprites, DSpritesRenderer
from ppl_vae.data.grassy_mnist import GrassTexture, GrassyMNIST, grass_texture
from ppl_vae.data.mnist import MNIST, FashionMNIST, find_idx_files, read_idx
from ppl_vae.data.pinwheel import Pinwheel

#: The data sets :func:`load_dataset` builds, by name: name -> class (its constructor).
DATASETS: dict[str, Callable[..., Dataset]] = {
    "dsprites": DSprites,
    "pinwheel": Pinwheel,
    "mnist": MNIST,
    "fashion-mnist": FashionMNIST,
    "grassy-mnist": GrassyMNIST,
    "celeba": CelebA,
}


def load_dataset(name: str, **kwargs: object) -> Dataset:
    """Build a data set by name.

    :param name: one of ``"dsprites"``, ``"pinwheel"``, ``"mnist"``, ``"fashion-mnist"``,
        ``"grassy-mnist"``, ``"celeba"`` (case-insensitive; ``_`` may replace ``-``).
    :param kwargs: passed to the data set's constructor.
    :returns: The data set (see each class for its item and ``tensors()`` shapes).
    :raises ValueError: unknown ``name``.
    """
    key = name.lower().replace("_", "-") if isinstance(name, str) else None
    if key not in DATASETS:
        raise ValueError(f"name: unknown data set {name!r}; valid names are {sorted(DATASETS)}")
    return DATASETS[key](**kwargs)


__all__ = [
    "CELEBA_ATTRIBUTES",
    "DATASETS",
    "MNIST",
    "CelebA",
    "DSprites",
    "DSpritesRenderer",
    "FashionMNIST",
    "GrassTexture",
    "GrassyMNIST",
    "Pinwheel",
    "SyntheticCounts",
    "TensorDictDataset",
    "contrastive_tensors",
    "find_idx_files",
    "grass_texture",
    "load_dataset",
    "read_idx",
]
