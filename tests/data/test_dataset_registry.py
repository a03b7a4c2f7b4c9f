"""load_dataset: names map to the data set classes; unknown names list the valid ones."""

import pytest

from ppl_vae.data import DATASETS, MNIST, CelebA, DSprites, FashionMNIST, GrassyMNIST, Pinwheel, load_dataset


def test_registry_covers_every_data_set():
    assert DATASETS == {
        "dsprites": DSprites,
        "pinwheel": Pinwheel,
        "mnist": MNIST,
        "fashion-mnist": FashionMNIST,
        "grassy-mnist": GrassyMNIST,
        "celeba": CelebA,
    }


def test_load_dataset_passes_keyword_arguments():
    data = load_dataset("pinwheel", num_classes=3, points_per_class=5)
    assert isinstance(data, Pinwheel) and len(data) == 15
    assert isinstance(load_dataset("dsprites"), DSprites)


def test_names_are_case_and_separator_insensitive():
    assert isinstance(load_dataset("PinWheel"), Pinwheel)
    with pytest.raises(FileNotFoundError, match="CelebA"):
        load_dataset("CELEBA", root="/nonexistent")
    with pytest.raises(FileNotFoundError, match="idx_dir"):
        load_dataset("Fashion_MNIST", idx_dir="/nonexistent")


@pytest.mark.parametrize("name", ["cifar10", None])
def test_unknown_names_list_the_valid_ones(name):
    with pytest.raises(ValueError, match=r"name: unknown data set .*'dsprites', 'fashion-mnist', 'grassy-mnist'"):
        load_dataset(name)
