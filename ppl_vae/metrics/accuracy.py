"""Classification accuracy, and clustering accuracy under the best matching of cluster ids."""
from __future__ import annotations

from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment

from ppl_vae.metrics._arrays import as_label_vector, as_numpy


def _predicted_labels(pred: Any, name: str = "pred") -> np.ndarray:
    """Labels (n,) from scores (n, C) (logits or probabilities: argmax) or labels (n,)."""
    array = as_numpy(pred)
    if array.ndim == 2:
        if array.shape[1] == 0:
            raise ValueError(f"{name} must have at least one column, got shape {array.shape}")
        return array.argmax(axis=1).astype(np.int64)
    return as_label_vector(array, name)


def classification_accuracy(pred: Any, labels: Any) -> float:
    """Share of points whose predicted class equals the label.

    :param pred: logits or probabilities (n, C), reduced by argmax, or predicted labels (n,).
    :param labels: true class indices (n,).
    :raises ValueError: shapes that do not match, no point, or non-integer labels.

    >>> classification_accuracy([0, 1, 1, 2], [0, 1, 2, 2])
    0.75
    >>> classification_accuracy([[0.9, 0.1], [0.2, 0.8]], [0, 0])  # probabilities: argmax
    0.5
    """
    predicted, truth = _paired_labels(pred, labels)
    return float(np.mean(predicted == truth))


def clustering_accuracy(pred: Any, labels: Any) -> float:
    """Accuracy after the one-to-one matching of cluster ids to labels that maximises it.

    For unsupervised q(c|x), whose class indices are an arbitrary permutation of the labels:
    the contingency table of clusters x labels is matched with the Hungarian algorithm
    (scipy.optimize.linear_sum_assignment). With more clusters than labels (or the reverse),
    points of unmatched clusters count as errors. Ids need not be contiguous.

    :param pred: cluster scores (n, K) (argmax) or cluster ids (n,).
    :param labels: true class ids (n,).
    :raises ValueError: shapes that do not match, no point, or non-integer ids.

    >>> clustering_accuracy([2, 2, 0, 0], [0, 0, 1, 1])  # cluster 2 is class 0, cluster 0 class 1
    1.0
    """
    predicted, truth = _paired_labels(pred, labels)
    clusters, cluster_index = np.unique(predicted, return_inverse=True)
    classes, class_index = np.unique(truth, return_inverse=True)
    table = np.zeros((clusters.size, classes.size), dtype=np.int64)
    np.add.at(table, (cluster_index, class_index), 1)
    rows, columns = linear_sum_assignment(table, maximize=True)
    return float(table[rows, columns].sum() / truth.size)


def _paired_labels(pred: Any, labels: Any) -> tuple[np.ndarray, np.ndarray]:
    """(predicted, true) label vectors of the same non-zero length."""
    predicted = _predicted_labels(pred)
    truth = as_label_vector(labels, "labels")
    if predicted.shape != truth.shape:
        raise ValueError(
            f"pred and labels must describe the same points, got {predicted.shape[0]} "
            f"predictions and {truth.shape[0]} labels"
        )
    if truth.size == 0:
        raise ValueError("labels must hold at least one point, got 0")
    return predicted, truth
