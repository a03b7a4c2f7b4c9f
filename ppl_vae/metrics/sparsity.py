"""Hoyer sparsity of representations, as in the Decomposition VAE paper (Mathieu et al. 2019)."""
from __future__ import annotations

from typing import Any

import numpy as np

from ppl_vae.metrics._arrays import as_float_matrix, check_finite


def hoyer_sparsity(z: Any) -> float:
    """Mean Hoyer sparsity of representations ``z`` (n, D), each dimension divided by its std.

    Every dimension is divided by its std over the n points (no centring: zeros stay zeros);
    then each point scores (sqrt(D) - ||z||_1 / ||z||_2) / (sqrt(D) - 1), which is 1 for a
    point with a single non-zero coordinate and 0 for one whose coordinates all have the same
    magnitude; the result is the mean over points, in [0, 1].

    Degenerate cases, without NaN:

    - a dimension with zero std (constant over the data, hence uninformative) is set to 0
      after normalisation; D stays the number of columns of ``z``;
    - a point that is all zeros after that has no defined sparsity and is left out of the
      mean; if no point is left, the result is 0.0.

    :param z: torch tensor or array-like (n, D), D >= 2, e.g. posterior means.
    :raises ValueError: ``z`` not 2-D, with no row, with D < 2, or holding NaN or inf.

    >>> import torch
    >>> hoyer_sparsity(torch.eye(4))  # one non-zero coordinate per point
    1.0
    >>> round(hoyer_sparsity(torch.tensor([[1.0, 1.0], [2.0, 2.0]])), 6)  # coordinates of equal size
    0.0
    """
    points = as_float_matrix(z, "z")
    check_finite(points, "z")
    n, num_dims = points.shape
    if num_dims < 2:
        raise ValueError(f"z must have D >= 2 dimensions, got D = {num_dims}")
    if n == 0:
        raise ValueError("z must have at least one row, got 0")
    normalised = _divide_by_std(points)
    peak = np.abs(normalised).max(axis=1)
    nonzero = peak > 0
    if not nonzero.any():
        return 0.0
    rows = normalised[nonzero] / peak[nonzero, None]
    l1 = np.abs(rows).sum(axis=1)
    l2 = np.sqrt(np.square(rows).sum(axis=1))
    root = np.sqrt(num_dims)
    per_point = (root - l1 / l2) / (root - 1)
    return float(np.clip(per_point, 0.0, 1.0).mean())


def _divide_by_std(points: np.ndarray) -> np.ndarray:
    """Each column divided by its std (ddof 0); constant columns become 0: (n, D).

    Constancy is tested exactly (max == min): the computed std of a constant column can be a
    rounding error instead of 0. Columns are first divided by their largest magnitude, which
    leaves the result unchanged but keeps the std of tiny values from underflowing.
    """
    informative = np.ptp(points, axis=0) > 0
    columns = points[:, informative] / np.abs(points[:, informative]).max(axis=0)
    normalised = np.zeros_like(points)
    normalised[:, informative] = columns / columns.std(axis=0)
    return normalised
