"""A synthetic factor data set for testing and benchmarking the disentanglement metrics.

Its images carry their own factor values, so ``SyntheticFactors.true_factors`` is a
perfect (oracle) representation and the time of a metric is the metric's, not a renderer's.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

DSPRITES_FACTOR_SIZES: tuple[int, ...] = (1, 3, 6, 40, 32, 32)


class SyntheticFactors:
    """The factor API of ``ppl_vae.data.DSprites`` on images that hold their factor indices.

    Image i is zeros except pixel (0, 0, k), which holds the value index of factor k.

    :param factor_sizes: number of values of each factor (at most 64 factors); dSprites' by
        default.
    :param factor_names: one name per factor; ``factor0``, ``factor1``, ... by default.
    :raises ValueError: a size below 1, more than 64 factors, or names of another length.
    """

    def __init__(
        self, factor_sizes: Sequence[int] = DSPRITES_FACTOR_SIZES, factor_names: Sequence[str] | None = None
    ) -> None:
        sizes = tuple(factor_sizes)
        if not 1 <= len(sizes) <= 64 or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in sizes):
            raise ValueError(f"factor_sizes must be 1 to 64 integers >= 1, got {factor_sizes!r}")
        names = tuple(factor_names) if factor_names is not None else tuple(f"factor{k}" for k in range(len(sizes)))
        if len(names) != len(sizes):
            raise ValueError(f"factor_names must name the {len(sizes)} factors, got {factor_names!r}")
        self.factor_sizes = sizes
        self.factor_names = names

    def sample_factors(self, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """Factor indices drawn uniformly and independently: LongTensor (n, F)."""
        columns = [torch.randint(size, (n,), generator=generator) for size in self.factor_sizes]
        return torch.stack(columns, dim=1)

    def images_from_factors(self, factors: torch.Tensor) -> torch.Tensor:
        """Images FloatTensor (n, 1, 64, 64) of factor indices (n, F)."""
        factors = torch.as_tensor(factors)
        images = torch.zeros(factors.shape[0], 1, 64, 64)
        images[:, 0, 0, : factors.shape[1]] = factors.float()
        return images

    def true_factors(self, images: torch.Tensor) -> torch.Tensor:
        """The factor indices written into ``images`` (n, 1, 64, 64), as floats: (n, F)."""
        return images[:, 0, 0, : len(self.factor_sizes)]
