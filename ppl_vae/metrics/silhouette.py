"""Silhouette score of an embedding against labels (scikit-learn), as in the Contrastive VAE paper."""
from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.metrics import silhouette_score

from ppl_vae.metrics._arrays import as_float_matrix, as_label_vector


def silhouette(
    embedding: Any,
    labels: Any,
    standardize: bool = False,
    sample_size: int | None = None,
    seed: int = 0,
) -> float:
    """Mean silhouette coefficient (Euclidean) of ``embedding`` (n, D) grouped by ``labels`` (n,).

    The Contrastive VAE paper scores raw latent means (``standardize=False``, the default).
    Euclidean distances depend on each axis's scale, so a model that shrinks one axis (a
    contrastive VAE often does, to a spread of about 0.03) is scored almost on the other
    axes alone; ``standardize=True`` divides every dimension by its std (zero-std
    dimensions are left unscaled) and generally changes the number: report which was used.

    :param embedding: torch tensor or array-like (n, D).
    :param labels: integer labels (n,), with 2 <= number of distinct labels <= n - 1.
    :param standardize: divide each dimension by its std over the n points first.
    :param sample_size: score a random subset of this many points (scikit-learn's
        ``sample_size``), drawn with ``seed``; None uses every point (O(n^2) memory).
    :param seed: random state of the subset.
    :raises ValueError: shapes that do not match or a number of distinct labels out of range.

    >>> import torch
    >>> two_groups = torch.tensor([[0.0, 0.0], [0.0, 0.1], [5.0, 5.0], [5.0, 5.1]])
    >>> round(silhouette(two_groups, [0, 0, 1, 1]), 3)
    0.986
    """
    points = as_float_matrix(embedding, "embedding")
    groups = as_label_vector(labels, "labels")
    if groups.shape[0] != points.shape[0]:
        raise ValueError(
            f"embedding and labels must describe the same points, got {points.shape[0]} "
            f"rows and {groups.shape[0]} labels"
        )
    num_groups = np.unique(groups).size
    if not 2 <= num_groups <= points.shape[0] - 1:
        raise ValueError(
            f"labels must have between 2 and n - 1 = {points.shape[0] - 1} distinct values, "
            f"got {num_groups}"
        )
    if standardize:
        points = _standardized(points)
    return float(silhouette_score(points, groups, sample_size=sample_size, random_state=seed))


def _standardized(points: np.ndarray) -> np.ndarray:
    """Each column centred and divided by its std; zero-std columns only centred: (n, D)."""
    std = points.std(axis=0)
    return (points - points.mean(axis=0)) / np.where(std > 0, std, 1.0)
