"""Silhouette of an embedding against labels, raw or standardised."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.metrics import silhouette_score

from ppl_vae.metrics import silhouette


def clusters(spread: tuple[float, float], separation: float, n: int = 60) -> tuple:
    """Two Gaussian clusters (n, 2) apart along the first axis; labels (n,)."""
    rng = np.random.default_rng(0)
    labels = np.repeat([0, 1], n // 2)
    points = rng.normal(size=(n, 2)) * spread
    points[:, 0] += separation * labels
    return points, labels


def test_well_separated_clusters_score_near_one():
    points, labels = clusters((0.1, 0.1), separation=20.0)

    assert silhouette(points, labels) > 0.95


def test_raw_embedding_matches_scikit_learn():
    points, labels = clusters((1.0, 1.0), separation=2.0)

    assert silhouette(points, labels) == pytest.approx(silhouette_score(points, labels))


def test_standardizing_changes_the_score_of_anisotropic_embeddings():
    """Separated along a narrow axis, lost in a wide noisy one: standardising helps a lot."""
    points, labels = clusters((0.03, 10.0), separation=0.3)

    raw = silhouette(points, labels)
    standardized = silhouette(points, labels, standardize=True)

    assert raw < 0.1
    assert standardized > 0.4


def test_subsample_is_reproducible_with_seed():
    points, labels = clusters((1.0, 1.0), separation=2.0, n=200)

    first = silhouette(points, labels, sample_size=50, seed=4)

    assert first == silhouette(points, labels, sample_size=50, seed=4)
    assert first != silhouette(points, labels)


def test_accepts_torch_tensors():
    points, labels = clusters((0.1, 0.1), separation=20.0)

    assert silhouette(torch.as_tensor(points), torch.as_tensor(labels)) > 0.95


@pytest.mark.parametrize("labels", [np.zeros(6, dtype=int), np.arange(6)])
def test_number_of_distinct_labels_out_of_range_raises_value_error(labels):
    with pytest.raises(ValueError, match="labels"):
        silhouette(np.random.default_rng(0).normal(size=(6, 2)), labels)


def test_mismatched_lengths_raise_value_error():
    with pytest.raises(ValueError, match="embedding and labels"):
        silhouette(np.zeros((5, 2)), [0, 1, 0, 1])
