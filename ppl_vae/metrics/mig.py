"""Mutual Information Gap (Chen et al. 2018), as disentanglement_lib's ``compute_mig``."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from sklearn.metrics import mutual_info_score

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
class MIGResult:
    """Outcome of :func:`mig`; ``float(result)`` is ``result.score``.

    :ivar score: mean over the varying factors of ``gaps``, in [0, 1].
    :ivar mutual_information: float64 (D, F): I(discretised dimension d; factor k) in nats,
        estimated on the sample; columns of single-valued factors are 0.
    :ivar factor_entropy: float64 (F,): H(factor k) on the sample, nats.
    :ivar gaps: float64 (F,): (largest - second largest mutual information) / entropy per
        factor; 0 for single-valued factors (left out of the mean).
    """

    score: float
    mutual_information: np.ndarray
    factor_entropy: np.ndarray
    gaps: np.ndarray

    def __float__(self) -> float:
        return self.score


def mig(
    encode: Encode,
    dataset: FactorDataset,
    *,
    n_train: int = 10000,
    num_bins: int = 20,
    seed: int = 0,
    encode_batch_size: int = 1024,
    progress: bool = True,
) -> MIGResult:
    """Mutual Information Gap of the representation ``encode`` gives on ``dataset``.

    disentanglement_lib's definition (its unsupervised study's settings by default):

    1. ``n_train`` images with factors drawn uniformly are encoded.
    2. Each dimension is discretised into ``num_bins`` equal-width bins between its minimum
       and maximum on the sample (``np.histogram`` edges).
    3. I(dimension d; factor k) and H(factor k) are plug-in estimates on the sample
       (``sklearn.metrics.mutual_info_score``).
    4. Per factor: (largest - second largest mutual information over d) / H(factor k); the
       score is the mean over the factors with more than one value (disentanglement_lib's
       dSprites has no color factor; here single-valued factors are skipped). With a single
       dimension the second largest is taken as 0.

    :param encode: maps an image batch FloatTensor (n, 1, 64, 64) to a representation (n, D),
        tensor or ndarray; called under ``torch.no_grad()`` with at most
        ``encode_batch_size`` images.
    :param dataset: see :class:`~ppl_vae.metrics.FactorDataset`.
    :param n_train: images encoded.
    :param num_bins: histogram bins per dimension.
    :param seed: seeds the factor draws.
    :param encode_batch_size: images per ``encode`` call (memory is bounded by it and by
        ``n_train`` x D).
    :param progress: show the progress of the images encoded (a bar on a terminal, else a
        start and a finish line with the time).
    :returns: :class:`MIGResult`.
    :raises ValueError: naming the argument: n_train < 2, num_bins < 2, encode_batch_size < 1,
        a data set without a varying factor, ``encode`` returning something other than a
        finite 2-D array with one row per image.
    """
    check_integers(n_train=(n_train, 2), num_bins=(num_bins, 2), encode_batch_size=(encode_batch_size, 1))
    varying = varying_factors(dataset)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad(), Progress(n_train, "MIG", progress, "images") as bar:
        encoder = BatchedEncoder(encode, dataset, encode_batch_size, bar)
        codes, factors = sample_codes(encoder, dataset, n_train, generator)
    binned = _histogram_discretise(codes, num_bins)
    num_dims, num_factors = codes.shape[1], factors.shape[1]
    information = np.zeros((num_dims, num_factors))
    entropy = np.zeros(num_factors)
    gaps = np.zeros(num_factors)
    for k in varying:
        entropy[k] = mutual_info_score(factors[:, k], factors[:, k])
        information[:, k] = [mutual_info_score(factors[:, k], binned[:, d]) for d in range(num_dims)]
        top = np.sort(np.append(information[:, k], 0.0))[::-1]
        gaps[k] = (top[0] - top[1]) / entropy[k] if entropy[k] > 0 else 0.0
    return MIGResult(float(gaps[varying].mean()), information, entropy, gaps)


def _histogram_discretise(codes: np.ndarray, num_bins: int) -> np.ndarray:
    """Bin index of each value of each column of ``codes`` (n, D), equal-width bins: int (n, D)."""
    binned = np.empty(codes.shape, dtype=np.int64)
    for d in range(codes.shape[1]):
        edges = np.histogram(codes[:, d], num_bins)[1]
        binned[:, d] = np.digitize(codes[:, d], edges[:-1])
    return binned
