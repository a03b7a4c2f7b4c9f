"""The pinwheel data set of Johnson et al. (2016), used by the Decomposition VAE paper."""

from __future__ import annotations

import numpy as np
import torch

from ppl_vae._validation import finite, positive_integer
from ppl_vae.data.base import TensorDictDataset


class Pinwheel(TensorDictDataset):
    """Spiral arms of 2-D points ("pinwheel"), generated with Johnson et al.'s (2016, SVAE) formula.

    Each point starts as ``f = (1 + radial_std * e0, tangential_std * e1)`` with ``e ~ N(0, I)``; the
    point of class ``k`` is ``f`` rotated clockwise by ``2 pi k / num_classes + rate * exp(f[0])``
    (Johnson's ``einsum('ti,tij->tj', f, R)`` with ``R = [[cos, -sin], [sin, cos]]``), which bends the
    arms into spirals. Johnson's code multiplies the result by 10 and shuffles it; here the
    output is multiplied by ``scale`` (default 1, points at radius about 1; pass ``scale=10`` for
    Johnson's figures) and kept in class order (all points of class 0, then class 1, ...). With
    ``scale=10`` the points equal Johnson's ``make_pinwheel_data`` after ``np.random.seed(seed)``
    before his final permutation.

    Items are ``(x, y)``; ``tensors()`` returns ``{"x": (N, 2) float32, "y": (N,) int64}`` with
    ``N = num_classes * points_per_class``.

    :param num_classes: number of arms (default 4, as in the Decomposition paper).
    :param points_per_class: points per arm (default 100).
    :param radial_std: standard deviation along the arm (default 0.1).
    :param tangential_std: standard deviation across the arm (default 0.3).
    :param rate: how strongly the arms bend (default 0.25).
    :param seed: seed of the ``numpy.random.RandomState`` that draws the noise (default 0).
    :param scale: factor applied to the points (default 1.0).
    """

    def __init__(
        self,
        num_classes: int = 4,
        points_per_class: int = 100,
        radial_std: float = 0.1,
        tangential_std: float = 0.3,
        rate: float = 0.25,
        seed: int = 0,
        scale: float = 1.0,
    ) -> None:
        positive_integer("num_classes", num_classes)
        positive_integer("points_per_class", points_per_class)
        for name, value in (("radial_std", radial_std), ("tangential_std", tangential_std), ("scale", scale)):
            finite(name, value, low=0)
        finite("rate", rate)
        rng = np.random.RandomState(seed)
        rads = np.linspace(0, 2 * np.pi, num_classes, endpoint=False)
        features = rng.randn(num_classes * points_per_class, 2) * np.array([radial_std, tangential_std])
        features[:, 0] += 1.0
        labels = np.repeat(np.arange(num_classes), points_per_class)
        angles = rads[labels] + rate * np.exp(features[:, 0])
        rotations = np.stack([np.cos(angles), -np.sin(angles), np.sin(angles), np.cos(angles)])
        rotations = np.reshape(rotations.T, (-1, 2, 2))
        points = scale * np.einsum("ti,tij->tj", features, rotations)
        super().__init__(
            {"x": torch.from_numpy(points.astype(np.float32)), "y": torch.from_numpy(labels.astype(np.int64))}
        )
        self.num_classes = num_classes
