"""DCI: disentanglement, completeness and informativeness (Eastwood & Williams 2018), as
disentanglement_lib's ``compute_dci``, with a faster tree model as an option."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from scipy.stats import entropy
from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier

from ppl_vae._progress import Progress
from ppl_vae.metrics._factor_data import (
    BatchedEncoder,
    Encode,
    FactorDataset,
    check_integers,
    sample_codes,
    varying_factors,
)

#: The classifier :func:`dci` fits to predict each factor: ``"gbt"`` (gradient-boosted trees, as
#: disentanglement_lib) or ``"forest"`` (a random forest).
DCIModel = Literal["gbt", "forest"]
MODELS: tuple[str, ...] = ("gbt", "forest")


@dataclass(frozen=True, eq=False)
class DCIResult:
    """Outcome of :func:`dci`.

    :ivar disentanglement: sum over dimensions of (1 - entropy of the dimension's importance
        over the factors, base F') weighted by the dimension's share of the importance, in [0, 1].
    :ivar completeness: sum over factors of (1 - entropy of the factor's importance over the
        dimensions, base D) weighted by the factor's share, in [0, 1].
    :ivar informativeness: mean over the varying factors of the classifiers' accuracy on the
        test images (disentanglement_lib's ``informativeness_test``).
    :ivar informativeness_train: the same on the training images.
    :ivar importance: float64 (D, F): importance of dimension d for predicting factor k (each
        varying factor's column sums to 1, or 0 when no split was made); columns of
        single-valued factors are 0 and take no part in the scores.
    :ivar model: "gbt" or "forest".
    """

    disentanglement: float
    completeness: float
    informativeness: float
    informativeness_train: float
    importance: np.ndarray
    model: str


def dci(
    encode: Encode,
    dataset: FactorDataset,
    *,
    n_train: int = 10000,
    n_test: int = 5000,
    model: DCIModel = "gbt",
    seed: int = 0,
    encode_batch_size: int = 1024,
    progress: bool = True,
) -> DCIResult:
    """Disentanglement, completeness and informativeness of the representation ``encode`` gives.

    disentanglement_lib's definition (its unsupervised study's settings by default):

    1. ``n_train`` and ``n_test`` images with factors drawn uniformly are encoded.
    2. For every factor k with more than one value, a classifier of factor k's value from the
       whole representation is fitted on the training images; its impurity-based feature
       importances form column k of ``importance`` (D, F'), its accuracies the
       informativeness.
    3. Disentanglement: 1 - H_F'(importance[d] / its sum) per dimension (entropy with base F',
       the number of varying factors, 1e-11 added to every entry), averaged with weights
       importance[d].sum() / importance.sum(). Completeness: 1 - H_D(importance[:, k] / its
       sum) per factor, averaged with weights importance[:, k].sum() / importance.sum().
       With an all-zero importance matrix the weights are uniform. A base-1 entropy is
       undefined: with a single varying factor disentanglement is reported as 1.0, and with a
       single dimension completeness is.

    :param encode: as in :func:`~ppl_vae.metrics.mig`.
    :param dataset: see :class:`~ppl_vae.metrics.FactorDataset`.
    :param n_train: images the classifiers are fitted on.
    :param n_test: images they are scored on.
    :param model: the classifier of step 2. ``"gbt"``: scikit-learn's
        ``GradientBoostingClassifier()`` with its defaults, as disentanglement_lib (100
        rounds of one depth-3 tree per class: slow for factors with many values, several
        minutes per dSprites factor on one CPU core). ``"forest"``: a
        ``RandomForestClassifier(n_estimators=50, max_depth=10, max_features=None)`` (50
        multi-class trees on bootstrap samples, every split chosen among all dimensions, so
        that a dimension that predicts a factor exactly takes all of its importance; tens of
        times faster; random forests are one of the two models of the DCI paper). The two give different numbers: say which was used.
    :param seed: seeds the factor draws and the classifiers.
    :param encode_batch_size: images per ``encode`` call.
    :param progress: show the progress of the encoding, then of one fit per factor (bars on a
        terminal, else a start and a finish line with the time).
    :returns: :class:`DCIResult`.
    :raises ValueError: naming the argument: n_train or n_test < 2, encode_batch_size < 1, an
        unknown model, a data set without a varying factor, ``encode`` returning something
        other than a finite 2-D array with one row per image.
    """
    check_integers(n_train=(n_train, 2), n_test=(n_test, 2), encode_batch_size=(encode_batch_size, 1))
    if model not in MODELS:
        raise ValueError(f"model must be one of {MODELS}, got {model!r}")
    varying = varying_factors(dataset)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad(), Progress(n_train + n_test, "DCI: encoding", progress, "images") as bar:
        encoder = BatchedEncoder(encode, dataset, encode_batch_size, bar)
        train_codes, train_factors = sample_codes(encoder, dataset, n_train, generator)
        test_codes, test_factors = sample_codes(encoder, dataset, n_test, generator)
    importance = np.zeros((train_codes.shape[1], train_factors.shape[1]))
    train_accuracy, test_accuracy = [], []
    with Progress(len(varying), f"DCI: fitting ({model})", progress, "factors") as bar:
        for k in varying:
            classifier = _classifier(model, seed)
            classifier.fit(train_codes, train_factors[:, k])
            importance[:, k] = np.abs(classifier.feature_importances_)
            train_accuracy.append(np.mean(classifier.predict(train_codes) == train_factors[:, k]))
            test_accuracy.append(np.mean(classifier.predict(test_codes) == test_factors[:, k]))
            bar.update()
    used = importance[:, varying]
    return DCIResult(
        disentanglement=_weighted_specificity(used),
        completeness=_weighted_specificity(used.T),
        informativeness=float(np.mean(test_accuracy)),
        informativeness_train=float(np.mean(train_accuracy)),
        importance=importance,
        model=model,
    )


def _classifier(model: str, seed: int) -> GradientBoostingClassifier | RandomForestClassifier:
    """A fresh classifier of kind ``model`` (see :func:`dci`)."""
    if model == "gbt":
        return GradientBoostingClassifier(random_state=seed)
    return RandomForestClassifier(n_estimators=50, max_depth=10, max_features=None, random_state=seed, n_jobs=1)


def _weighted_specificity(importance: np.ndarray) -> float:
    """Sum over rows of (1 - entropy of the row, base = number of columns), weighted by the
    rows' shares of the total: disentanglement for (D, F'), completeness for (F', D)."""
    if importance.shape[1] == 1:
        return 1.0
    per_row = 1.0 - entropy(importance.T + 1e-11, base=importance.shape[1])
    weights = importance if importance.sum() > 0 else np.ones_like(importance)
    return float(np.sum(per_row * weights.sum(axis=1) / weights.sum()))
