"""Classification accuracy and clustering accuracy under the best matching of ids."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ppl_vae.metrics import classification_accuracy, clustering_accuracy


def test_classification_accuracy_of_labels():
    assert classification_accuracy([0, 1, 2, 2], [0, 1, 1, 2]) == 0.75


def test_classification_accuracy_takes_argmax_of_logits_or_probabilities():
    logits = torch.tensor([[2.0, -1.0], [0.1, 0.3], [5.0, 4.0]])

    assert classification_accuracy(logits, torch.tensor([0, 1, 1])) == pytest.approx(2 / 3)
    assert classification_accuracy(logits.softmax(dim=1), [0, 1, 1]) == pytest.approx(2 / 3)


def test_clustering_accuracy_of_permuted_labels_is_one():
    labels = np.array([0, 0, 1, 1, 2, 2, 2])
    permutation = np.array([2, 0, 1])

    assert clustering_accuracy(permutation[labels], labels) == 1.0
    assert classification_accuracy(permutation[labels], labels) < 1.0


def test_clustering_accuracy_matches_clusters_one_to_one():
    """Both clusters mostly hold class 0, but only one of them may be matched to it."""
    pred = [0, 0, 0, 1, 1, 1]
    labels = [0, 0, 1, 0, 0, 1]

    assert clustering_accuracy(pred, labels) == pytest.approx(3 / 6)


def test_clustering_accuracy_counts_unmatched_clusters_as_errors():
    pred = [7, 7, 3, 3, 5]
    labels = [0, 0, 1, 1, 1]

    assert clustering_accuracy(pred, labels) == pytest.approx(4 / 5)


def test_clustering_accuracy_takes_argmax_of_scores():
    scores = np.array([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7]])

    assert clustering_accuracy(scores, [0, 1, 0]) == 1.0


@pytest.mark.parametrize("metric", [classification_accuracy, clustering_accuracy])
def test_mismatched_lengths_raise_value_error(metric):
    with pytest.raises(ValueError, match="pred and labels"):
        metric([0, 1, 1], [0, 1])


@pytest.mark.parametrize("metric", [classification_accuracy, clustering_accuracy])
def test_non_integer_labels_raise_value_error(metric):
    with pytest.raises(ValueError, match="labels"):
        metric([0, 1], [0.5, 1.0])


@pytest.mark.parametrize("metric", [classification_accuracy, clustering_accuracy])
def test_empty_input_raises_value_error(metric):
    with pytest.raises(ValueError, match="labels"):
        metric(np.array([], dtype=int), np.array([], dtype=int))
