"""The beta-VAE disentanglement metric (Higgins et al. 2017), as disentanglement_lib's
``compute_beta_vae_sklearn``."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.multiclass import OneVsRestClassifier

from ppl_vae._progress import Progress
from ppl_vae.metrics._factor_data import (
    BatchedEncoder,
    Encode,
    FactorDataset,
    check_integers,
    varying_factors,
)


@dataclass(frozen=True, eq=False)
class BetaVAEResult:
    """Outcome of :func:`beta_vae_score`; ``float(result)`` is ``result.score``.

    :ivar score: accuracy of the classifier on the ``n_eval`` evaluation points.
    :ivar train_accuracy: its accuracy on the ``n_train`` points it was fitted on.
    """

    score: float
    train_accuracy: float

    def __float__(self) -> float:
        return self.score


def beta_vae_score(
    encode: Encode,
    dataset: FactorDataset,
    *,
    n_train: int = 10000,
    n_eval: int = 5000,
    batch_size: int = 64,
    seed: int = 0,
    encode_batch_size: int = 1024,
    progress: bool = True,
) -> BetaVAEResult:
    """beta-VAE metric of the representation ``encode`` gives on ``dataset``.

    disentanglement_lib's definition (its unsupervised study's settings by default):

    1. One point: a factor k drawn uniformly among the factors with more than one value; two
       batches of ``batch_size`` images with factors drawn uniformly, the second batch's
       factor k set to the first's, image by image; the point's features are the mean over
       the batch of ``|representation(first) - representation(second)|`` ``(D,)``, its label k.
    2. A logistic regression with disentanglement_lib's settings, scikit-learn's
       ``LogisticRegression`` defaults of its time (scikit-learn 0.20: the liblinear solver,
       one-vs-rest over the factors, C = 1, ``max_iter=100``), is fitted on ``n_train``
       points; the score is its accuracy on ``n_eval`` fresh points.
       Chance level is 1 / (number of varying factors).

    Encodes 2 x batch_size x (n_train + n_eval) images (1.92 million with the defaults).

    :param encode: as in :func:`~ppl_vae.metrics.mig`.
    :param dataset: see :class:`~ppl_vae.metrics.FactorDataset`.
    :param n_train: points the classifier is fitted on.
    :param n_eval: fresh points it is scored on.
    :param batch_size: images per batch of a point.
    :param seed: seeds the factor draws, the factor of each point and the classifier.
    :param encode_batch_size: images per ``encode`` call (the images of several points go in
        one call when it allows).
    :param progress: show the progress of the images encoded (a bar on a terminal, else a
        start and a finish line with the time).
    :returns: :class:`BetaVAEResult`.
    :raises ValueError: naming the argument: n_train, n_eval or encode_batch_size < 1,
        batch_size < 1, a data set without a varying factor, ``encode`` returning something
        other than a finite 2-D array with one row per image; scikit-learn's error when
        the training points hold a single label (raise ``n_train``).
    """
    check_integers(
        n_train=(n_train, 1), n_eval=(n_eval, 1), batch_size=(batch_size, 1), encode_batch_size=(encode_batch_size, 1)
    )
    varying = varying_factors(dataset)
    generator = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    with torch.no_grad(), Progress(2 * batch_size * (n_train + n_eval), "beta-VAE metric", progress, "images") as bar:
        encoder = BatchedEncoder(encode, dataset, encode_batch_size, bar)
        draw = _PointDrawer(encoder, dataset, varying, generator, rng, batch_size)
        train_points, train_labels = draw(n_train)
        eval_points, eval_labels = draw(n_eval)
    classifier = logistic_regression(seed)
    classifier.fit(train_points, train_labels)
    return BetaVAEResult(
        score=float(classifier.score(eval_points, eval_labels)),
        train_accuracy=float(classifier.score(train_points, train_labels)),
    )


def logistic_regression(seed: int) -> OneVsRestClassifier:
    """disentanglement_lib's classifier: ``LogisticRegression(random_state=seed)`` with the
    defaults of scikit-learn 0.20, which it was written against: one binary liblinear
    regression per factor (one-vs-rest, written out here, as today's liblinear refuses more
    than two classes), C = 1, tolerance 1e-4, at most 100 iterations; the prediction is the
    factor of the largest decision value."""
    return OneVsRestClassifier(LogisticRegression(solver="liblinear", C=1.0, tol=1e-4, max_iter=100, random_state=seed))


class _PointDrawer:
    """Draws beta-VAE metric points, the images of several points per ``encode`` call."""

    def __init__(
        self,
        encoder: BatchedEncoder,
        dataset: FactorDataset,
        varying: list[int],
        generator: torch.Generator,
        rng: np.random.Generator,
        batch_size: int,
    ) -> None:
        self.encoder = encoder
        self.dataset = dataset
        self.varying = np.asarray(varying)
        self.generator = generator
        self.rng = rng
        self.batch_size = batch_size
        self.points_per_group = max(1, encoder.batch_size // (2 * batch_size))

    def __call__(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Features float64 (n, D) and labels int64 (n,) of ``n`` fresh points."""
        features, labels = [], []
        for start in range(0, n, self.points_per_group):
            group = min(self.points_per_group, n - start)
            factor = self.rng.choice(self.varying, size=group)
            features.append(self._features(torch.as_tensor(factor)))
            labels.append(factor)
        return np.concatenate(features), np.concatenate(labels)

    def _features(self, factor: torch.Tensor) -> np.ndarray:
        """Mean absolute representation differences (group, D) of pairs of batches that share
        factor[g] in point g."""
        group, size = factor.shape[0], self.batch_size
        first = self.dataset.sample_factors(group * size, self.generator).reshape(group, size, -1)
        second = self.dataset.sample_factors(group * size, self.generator).reshape(group, size, -1).clone()
        rows = torch.arange(group)
        second[rows, :, factor] = first[rows, :, factor]
        both = torch.cat([first, second]).reshape(2 * group * size, -1)
        representation = self.encoder(both).reshape(2, group, size, -1)
        return np.abs(representation[0] - representation[1]).mean(axis=1)
