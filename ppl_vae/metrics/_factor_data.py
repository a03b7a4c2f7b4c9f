"""What the disentanglement metrics share: the data set API, batched encoding, argument checks."""
from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np
import torch

from ppl_vae._progress import Progress
from ppl_vae.metrics._arrays import as_numpy, check_finite

#: What the disentanglement metrics call to represent images: ``(n, C, H, W)`` float images in
#: [0, 1] -> ``(n, D)`` representations (a torch tensor or a numpy array), e.g. the posterior means.
Encode = Callable[[torch.Tensor], "torch.Tensor | np.ndarray"]


class FactorDataset(Protocol):
    """What the disentanglement metrics need from a data set (the API of ``ppl_vae.data.DSprites``).

    The parted Factor-score protocol also needs the data set to hold every combination of
    factor values exactly once (dSprites does).
    """

    factor_sizes: Sequence[int]
    factor_names: Sequence[str]

    def sample_factors(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """Draw factor indices uniformly: LongTensor (n, num_factors).

        :param n: number of factor combinations to draw.
        :param generator: the torch random generator to draw with.
        """
        ...

    def images_from_factors(self, factors: torch.Tensor) -> torch.Tensor:
        """Render the images of factor indices (n, num_factors): FloatTensor (n, 1, 64, 64).

        :param factors: ``(n, num_factors)`` int64 factor indices, each below its factor's size.
        """
        ...


class BatchedEncoder:
    """Encodes factor indices via images, at most ``batch_size`` images per ``encode`` call.

    Checks every representation (2-D, one row per image, a fixed number of dimensions,
    finite) and advances ``bar`` by the number of images encoded.
    """

    def __init__(self, encode: Encode, dataset: FactorDataset, batch_size: int, bar: Progress | None = None) -> None:
        self.encode = encode
        self.dataset = dataset
        self.batch_size = batch_size
        self.bar = bar
        self.num_dims: int | None = None

    def __call__(self, factors: torch.Tensor) -> np.ndarray:
        """Representations float64 (n, D) of factor indices LongTensor (n, num_factors)."""
        parts = [
            self._encode_batch(factors[start : start + self.batch_size])
            for start in range(0, factors.shape[0], self.batch_size)
        ]
        return np.concatenate(parts)

    def _encode_batch(self, factors: torch.Tensor) -> np.ndarray:
        images = self.dataset.images_from_factors(factors)
        representation = as_numpy(self.encode(images))
        self._check(representation, factors.shape[0])
        if self.bar is not None:
            self.bar.update(factors.shape[0])
        return representation.astype(np.float64, copy=False)

    def _check(self, representation: np.ndarray, n: int) -> None:
        if representation.ndim != 2 or representation.shape[0] != n:
            raise ValueError(
                f"encode must return a 2-D representation (n, D) with n = {n} images, "
                f"got shape {representation.shape}"
            )
        if self.num_dims is None:
            self.num_dims = representation.shape[1]
        elif representation.shape[1] != self.num_dims:
            raise ValueError(
                f"encode returned {representation.shape[1]} dimensions after {self.num_dims}"
            )
        check_finite(representation, "the representation returned by encode")


def varying_factors(dataset: FactorDataset) -> list[int]:
    """Indices of the factors with more than one value; ValueError naming ``dataset`` if none."""
    sizes = tuple(int(size) for size in dataset.factor_sizes)
    varying = [k for k, size in enumerate(sizes) if size > 1]
    if not varying:
        raise ValueError(f"dataset has no factor with more than one value: {sizes}")
    return varying


def sample_codes(
    encoder: BatchedEncoder, dataset: FactorDataset, n: int, generator: torch.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Representations float64 (n, D) and factor indices int64 (n, F) of ``n`` random images.

    Drawn and encoded ``encoder.batch_size`` images at a time (disentanglement_lib's
    ``generate_batch_factor_code``).
    """
    codes, factors = [], []
    for start in range(0, n, encoder.batch_size):
        batch = dataset.sample_factors(min(encoder.batch_size, n - start), generator)
        codes.append(encoder(batch))
        factors.append(batch.cpu().numpy().astype(np.int64))
    return np.concatenate(codes), np.concatenate(factors)


def check_integers(**arguments: tuple[object, int]) -> None:
    """ValueError naming the first argument that is not an integer >= its minimum.

    :param arguments: name -> (value, minimum). Booleans are refused.
    """
    for name, (value, lowest) in arguments.items():
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lowest:
            raise ValueError(f"{name} must be an integer >= {lowest}, got {value!r}")


def check_non_negative(**arguments: object) -> None:
    """ValueError naming the first argument that is not a finite real number >= 0."""
    for name, value in arguments.items():
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= value < float("inf"):
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
