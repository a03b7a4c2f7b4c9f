"""Pinwheel: Johnson et al.'s spiral arms, seeded."""

import math

import pytest
import torch

from ppl_vae.data import Pinwheel


def test_default_pinwheel_has_four_arms_of_one_hundred_points():
    data = Pinwheel().tensors()
    assert data["x"].shape == (400, 2) and data["x"].dtype == torch.float32
    assert data["y"].shape == (400,) and data["y"].dtype == torch.int64
    assert torch.bincount(data["y"]).tolist() == [100, 100, 100, 100]
    x, y = Pinwheel()[0]
    assert x.shape == (2,) and y.dtype == torch.int64


def test_same_seed_gives_the_same_points_and_another_seed_does_not():
    assert torch.equal(Pinwheel(seed=4).tensors()["x"], Pinwheel(seed=4).tensors()["x"])
    assert not torch.equal(Pinwheel(seed=4).tensors()["x"], Pinwheel(seed=5).tensors()["x"])


def test_arms_follow_johnsons_geometry():
    data = Pinwheel(radial_std=0.0, tangential_std=0.0).tensors()
    radius = data["x"].norm(dim=1)
    torch.testing.assert_close(radius, torch.ones(400))
    angle = torch.atan2(data["x"][:, 1], data["x"][:, 0])
    expected = -(2 * math.pi * data["y"] / 4 + 0.25 * math.e)  # Johnson's einsum rotates clockwise
    wrapped = torch.remainder(angle - expected + math.pi, 2 * math.pi) - math.pi
    torch.testing.assert_close(wrapped, torch.zeros(400), atol=1e-5, rtol=0)


def test_scale_multiplies_the_points():
    torch.testing.assert_close(Pinwheel(scale=10.0).tensors()["x"], 10 * Pinwheel().tensors()["x"])


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"num_classes": 0}, "num_classes"),
        ({"points_per_class": -3}, "points_per_class"),
        ({"radial_std": -0.1}, "radial_std"),
        ({"rate": "fast"}, "rate"),
    ],
)
def test_bad_arguments_are_named(kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        Pinwheel(**kwargs)
