"""SAP score (Kumar et al. 2018), as disentanglement_lib's ``compute_sap`` for discrete factors."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from sklearn.svm import LinearSVC

from ppl_vae._progress import Progress
from ppl_vae.metrics._factor_data import (
    BatchedEncoder,
    Encode,
    FactorDataset,
    check_integers,
    sample_codes,
    varying_factors,
)


@dataclass(frozen=True, eq=False)
class SAPResult:
    """Outcome of :func:`sap_score`; ``float(result)`` is ``result.score``.

    :ivar score: mean over the varying factors of (best - second best accuracy over the
        dimensions), in [0, 1].
    :ivar accuracy: float64 (D, F): held-out accuracy of a linear SVM predicting factor k from
        dimension d alone; columns of single-valued factors are 0.
    """

    score: float
    accuracy: np.ndarray

    def __float__(self) -> float:
        return self.score


def sap_score(
    encode: Encode,
    dataset: FactorDataset,
    *,
    n_train: int = 10000,
    n_test: int = 5000,
    seed: int = 0,
    encode_batch_size: int = 1024,
    progress: bool = True,
) -> SAPResult:
    """Separated Attribute Predictability of the representation ``encode`` gives on ``dataset``.

    disentanglement_lib's definition for discrete factors (its unsupervised study's settings
    by default):

    1. ``n_train`` and ``n_test`` images with factors drawn uniformly are encoded.
    2. For every dimension d and factor k, a linear SVM on dimension d alone
       (``sklearn.svm.LinearSVC(C=0.01, class_weight="balanced")``, one-vs-rest, solved in
       the primal) is fitted to factor k's values on the training images; its accuracy on
       the test images is ``accuracy[d, k]``.
    3. Per factor: best minus second best accuracy over d (second best 0 with a single
       dimension); the score is the mean over the factors with more than one value.

    The score of a perfect representation is below 1: the second best dimension of a factor
    with m values predicts it at chance, about 1/m (balanced classes), so a factor's gap is
    at most about 1 - 1/m; and a one-vs-rest linear classifier on one dimension cannot single
    out the middle values of a factor even when the dimension encodes it exactly, so the
    best accuracy falls below 1 for factors with many values (dSprites' posX and posY have
    32, orientation 40). Compare SAP between representations, not with 1.

    :param encode: as in :func:`~ppl_vae.metrics.mig`.
    :param dataset: see :class:`~ppl_vae.metrics.FactorDataset`.
    :param n_train: images the classifiers are fitted on.
    :param n_test: images they are scored on.
    :param seed: seeds the factor draws.
    :param encode_batch_size: images per ``encode`` call.
    :param progress: show the progress of the encoding, then of the D x F fits (bars on a
        terminal, else a start and a finish line with the time).
    :returns: :class:`SAPResult`.
    :raises ValueError: naming the argument: n_train or n_test < 2, encode_batch_size < 1, a
        data set without a varying factor, ``encode`` returning something other than a
        finite 2-D array with one row per image; scikit-learn's error when a training sample
        holds a single value of a varying factor (raise ``n_train``).
    """
    check_integers(n_train=(n_train, 2), n_test=(n_test, 2), encode_batch_size=(encode_batch_size, 1))
    varying = varying_factors(dataset)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad(), Progress(n_train + n_test, "SAP: encoding", progress, "images") as bar:
        encoder = BatchedEncoder(encode, dataset, encode_batch_size, bar)
        train_codes, train_factors = sample_codes(encoder, dataset, n_train, generator)
        test_codes, test_factors = sample_codes(encoder, dataset, n_test, generator)
    num_dims = train_codes.shape[1]
    accuracy = np.zeros((num_dims, train_factors.shape[1]))
    with Progress(num_dims * len(varying), "SAP: fitting", progress, "classifiers") as bar:
        for d in range(num_dims):
            for k in varying:
                classifier = LinearSVC(C=0.01, class_weight="balanced", dual=False)
                classifier.fit(train_codes[:, d : d + 1], train_factors[:, k])
                accuracy[d, k] = np.mean(classifier.predict(test_codes[:, d : d + 1]) == test_factors[:, k])
                bar.update()
    top = np.sort(np.vstack([accuracy[:, varying], np.zeros(len(varying))]), axis=0)[::-1]
    return SAPResult(float(np.mean(top[0] - top[1])), accuracy)
