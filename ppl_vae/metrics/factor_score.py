"""Factor (FactorVAE) disentanglement score of Kim & Mnih (2018), in two protocols.

``protocol="standard"`` is disentanglement_lib's ``compute_factor_vae`` with the defaults of
its unsupervised study; ``protocol="parted"`` is the variant in the PartedVAE authors' code.
The docstring of :func:`factor_score` lists every difference between the two.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from ppl_vae._progress import Progress
from ppl_vae.metrics._factor_data import (
    BatchedEncoder,
    Encode,
    FactorDataset,
    check_integers,
    check_non_negative,
    varying_factors,
)

__all__ = ["FactorDataset", "FactorScoreResult", "factor_score"]

FactorProtocol = Literal["standard", "parted"]
PROTOCOLS: tuple[str, ...] = ("standard", "parted")
_SCAN_BLOCK = 65536


@dataclass(frozen=True, eq=False)
class FactorScoreResult:
    """Outcome of :func:`factor_score`; ``float(result)`` is ``result.score``.

    :ivar score: the reported accuracy, in [0, 1]. Standard: accuracy of the majority-vote
        classifier on the held-out evaluation votes. Parted: sum_d max_k votes[d, k] /
        votes.sum() over all (kept) votes.
    :ivar train_accuracy: accuracy of the classifier on the votes it was fitted on (equal to
        ``score`` for the parted protocol, which has no held-out split).
    :ivar votes: int64 array (num_dims, num_factors); votes[d, k] counts the votes in which
        representation dimension d had the least normalised variance while factor k was
        fixed. Standard: the training votes; parted: all kept votes. Columns of factors
        with a single value are zero.
    :ivar active_dims: dimensions allowed to keep a vote. Standard: global std >= prune_threshold;
        parted: std over the data >= min_std.
    :ivar protocol: "standard" or "parted".
    """

    score: float
    train_accuracy: float
    votes: np.ndarray
    active_dims: tuple[int, ...]
    protocol: str

    def __float__(self) -> float:
        return self.score


def factor_score(
    encode: Encode,
    dataset: FactorDataset,
    *,
    n_train: int = 10000,
    n_eval: int = 5000,
    batch_size: int = 64,
    seed: int = 0,
    protocol: FactorProtocol = "standard",
    n_variance: int = 10000,
    prune_threshold: float = 0.05,
    chunk_size: int = 100,
    min_std: float = 0.1,
    num_images: int | None = None,
    encode_batch_size: int = 1024,
    progress: bool = True,
) -> FactorScoreResult:
    """Factor (FactorVAE) score of the representation ``encode`` gives on ``dataset``.

    :param encode: maps an image batch FloatTensor (n, 1, 64, 64) to a representation (n, D),
        tensor or ndarray (e.g. posterior means). Called under ``torch.no_grad()`` with at
        most ``encode_batch_size`` images.
    :param dataset: see :class:`FactorDataset`. Factors with a single value (dSprites' color)
        are skipped: they never receive a vote.
    :param n_train: standard protocol only (validated for both): votes the classifier is fitted on.
    :param n_eval: standard protocol only: held-out votes it is scored on.
    :param batch_size: standard protocol only: images per vote.
    :param seed: seeds a ``torch.Generator`` (for ``sample_factors``) and a numpy Generator (for
        the factor of each vote, and the parted protocol's image order and subset); same
        seed, same score for a deterministic ``encode``.
    :param protocol: ``"standard"`` (disentanglement_lib's) or ``"parted"`` (the PartedVAE
        authors'); see "Protocols" below.
    :param n_variance: standard protocol only: images of the global variance.
    :param prune_threshold: standard protocol only: the smallest std of a dimension that can vote.
    :param chunk_size: parted protocol only (validated for both): images per vote.
    :param min_std: parted protocol only: the smallest std of a winning dimension.
    :param num_images: parted protocol only: a random subset of this many images (``None``: all).
    :param encode_batch_size: images per ``encode`` call; memory is bounded by it, never by the
        data set size.
    :param progress: show the progress of the images encoded: a bar when stderr is a terminal,
        else a start and a finish line with the time.

    Protocols. Both divide each dimension by its std, give each vote to the dimension with
    the least variance among images that share one factor value, and score how
    consistently a dimension is voted for by one factor. They differ in every detail:

    ``"standard"`` (disentanglement_lib ``compute_factor_vae``; prune_dims.threshold 0.05):

    1. Global variance (ddof 1) of each dimension from ``n_variance`` random images.
    2. Pruning before the argmin: dimension d is active when sqrt(global variance) >=
       ``prune_threshold`` (and the variance is not 0). disentanglement_lib compares the
       *std* with the threshold, and so does this code: pruned means a std below 0.05,
       i.e. a variance below 0.0025.
    3. One vote: a factor k drawn uniformly among the factors with more than one value, a
       batch of ``batch_size`` random images in which factor k is set to the first image's
       value, argmin over active d of batch variance / global variance; vote (d, k).
    4. Majority-vote classifier (each dimension -> its most frequent factor among the factors
       with more than one value; ties and unvoted dimensions -> the lowest such factor index,
       as disentanglement_lib's argmax, which runs over the factors that vote: its dSprites
       has no single-valued colour factor) fitted on ``n_train`` votes; the score is its
       accuracy on ``n_eval`` freshly drawn votes. No active dimension: score 0.
       disentanglement_lib records the argmin as a position among the active dimensions;
       here it is mapped back to the dimension index (same accuracy, readable ``votes``).

    ``"parted"`` (the PartedVAE authors' evaluation code, which reads the data set through a
    shuffled loader):

    1. The images (all of them, or a uniform random subset of ``num_images``) are put in
       one random order, as a shuffled loader yields them, and encoded once each; every
       dimension is divided by its std over these images.
    2. For every factor k and every value v, the images with factor k = v, in that random
       order, are cut into consecutive chunks of ``chunk_size`` images; the partial last
       chunk is dropped (floor(n_v / chunk_size) chunks from the n_v images with k = v).
       Each chunk is therefore a random draw over the other factors, like a standard
       vote's batch; a factor whose values each hold fewer than ``chunk_size`` images
       gets no vote.
    3. Each chunk votes for the dimension of least normalised variance; no pruning before the
       argmin (a dimension with zero std never wins). The vote is dropped, not given to
       another dimension, when the winner's std is below ``min_std``; dropped votes are not
       counted in the total.
    4. Score = sum_d max_k votes[d, k] / total votes, on the same votes: no held-out split,
       so the score of an uninformative representation is above 1 / (number of varying
       factors) by a margin that shrinks as the number of votes grows. No vote kept: score 0.

    With ``num_images=None`` (default) all images are used (737,280 for dSprites, about
    7,370 votes per factor: the authors' full protocol); ``num_images=m`` runs the same
    protocol on a random subset of m images (about m / chunk_size votes per factor, every
    factor its share), for a cheaper estimate.

    :returns: :class:`FactorScoreResult`.
    :raises ValueError: naming the argument and its value, for any protocol: n_train, n_eval or
        encode_batch_size < 1; batch_size, n_variance or chunk_size < 2; prune_threshold
        or min_std < 0; num_images < chunk_size or above the data set's size; an unknown
        protocol; a data set without a factor of more than one value; ``encode`` returning
        something other than a finite 2-D array with one row per image, or a changing
        number of dimensions.

    The true factors of a synthetic data set (images that carry their factor values) are a
    perfectly disentangled representation; fewer votes than the defaults make it quick:

    >>> from ppl_vae.metrics.synthetic import SyntheticFactors
    >>> data = SyntheticFactors((3, 6, 8))
    >>> result = factor_score(data.true_factors, data, n_train=500, n_eval=200, n_variance=1000,
    ...                       progress=False)
    >>> result.score, result.active_dims
    (1.0, (0, 1, 2))
    """
    check_integers(
        n_train=(n_train, 1), n_eval=(n_eval, 1), batch_size=(batch_size, 2),
        n_variance=(n_variance, 2), chunk_size=(chunk_size, 2), encode_batch_size=(encode_batch_size, 1),
    )
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")
    check_non_negative(prune_threshold=prune_threshold, min_std=min_std)
    varying = varying_factors(dataset)
    sizes = tuple(int(size) for size in dataset.factor_sizes)
    total = math.prod(sizes)
    if num_images is not None:
        check_integers(num_images=(num_images, chunk_size))
        if num_images > total:
            raise ValueError(f"num_images must be at most the data set's {total} images, got {num_images}")
    generator = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    if protocol == "standard":
        images = n_variance + (n_train + n_eval) * batch_size
    else:
        images = total if num_images is None else num_images
    with torch.no_grad(), Progress(images, f"Factor score ({protocol})", progress, "images") as bar:
        encoder = BatchedEncoder(encode, dataset, encode_batch_size, bar)
        if protocol == "standard":
            return _standard_score(
                encoder, dataset, sizes, varying, generator, rng,
                n_train=n_train, n_eval=n_eval, batch_size=batch_size,
                n_variance=n_variance, prune_threshold=prune_threshold,
            )
        order = rng.permutation(total) if num_images is None else rng.choice(total, num_images, replace=False)
        return _parted_score(encoder, _ShuffledChunks(sizes, varying, chunk_size, order), min_std=min_std)


def _standard_score(
    encoder: BatchedEncoder,
    dataset: FactorDataset,
    sizes: tuple[int, ...],
    varying: list[int],
    generator: torch.Generator,
    rng: np.random.Generator,
    *,
    n_train: int,
    n_eval: int,
    batch_size: int,
    n_variance: int,
    prune_threshold: float,
) -> FactorScoreResult:
    """disentanglement_lib's protocol; see :func:`factor_score`."""
    global_variance = _global_variance(encoder, dataset, n_variance, generator)
    active = np.flatnonzero((np.sqrt(global_variance) >= prune_threshold) & (global_variance > 0))
    num_dims = global_variance.shape[0]
    if active.size == 0:
        votes = np.zeros((num_dims, len(sizes)), dtype=np.int64)
        return FactorScoreResult(0.0, 0.0, votes, (), "standard")
    draw = _VoteDrawer(encoder, dataset, sizes, varying, generator, rng, batch_size)
    train_votes = draw(n_train, global_variance, active)
    eval_votes = draw(n_eval, global_variance, active)
    classifier = majority_vote(train_votes, varying)
    return FactorScoreResult(
        score=_accuracy(eval_votes, classifier),
        train_accuracy=_accuracy(train_votes, classifier),
        votes=train_votes,
        active_dims=tuple(int(d) for d in active),
        protocol="standard",
    )


def majority_vote(votes: np.ndarray, varying: list[int]) -> np.ndarray:
    """The standard protocol's classifier: for each dimension of ``votes`` (D, K) the factor
    among ``varying`` with the most votes, (D,) factor indices. Ties and dimensions without
    votes go to the first factor of ``varying``, as in disentanglement_lib, whose argmax runs
    over the factors that vote (its dSprites has no single-valued colour factor)."""
    columns = np.asarray(varying, dtype=np.int64)
    return columns[votes[:, columns].argmax(axis=1)]


def _global_variance(
    encoder: BatchedEncoder, dataset: FactorDataset, n: int, generator: torch.Generator
) -> np.ndarray:
    """Variance (ddof 1) of each dimension over ``n`` random images, in bounded memory: (D,)."""
    moments = _Moments()
    for start in range(0, n, encoder.batch_size):
        count = min(encoder.batch_size, n - start)
        moments.add(encoder(dataset.sample_factors(count, generator)))
    return moments.variance()


def _accuracy(votes: np.ndarray, classifier: np.ndarray) -> float:
    """Share of ``votes`` (D, K) whose factor is the one ``classifier`` (D,) assigns."""
    total = votes.sum()
    correct = votes[np.arange(votes.shape[0]), classifier].sum()
    return float(correct / total) if total else 0.0


class _VoteDrawer:
    """Draws standard-protocol votes, several votes' images per ``encode`` call."""

    def __init__(
        self,
        encoder: BatchedEncoder,
        dataset: FactorDataset,
        sizes: tuple[int, ...],
        varying: list[int],
        generator: torch.Generator,
        rng: np.random.Generator,
        batch_size: int,
    ) -> None:
        self.encoder = encoder
        self.dataset = dataset
        self.num_factors = len(sizes)
        self.varying = np.asarray(varying)
        self.generator = generator
        self.rng = rng
        self.batch_size = batch_size
        self.votes_per_group = max(1, encoder.batch_size // batch_size)

    def __call__(self, n: int, global_variance: np.ndarray, active: np.ndarray) -> np.ndarray:
        """Vote matrix int64 (D, num_factors) of ``n`` fresh votes."""
        votes = np.zeros((global_variance.shape[0], self.num_factors), dtype=np.int64)
        for start in range(0, n, self.votes_per_group):
            group = min(self.votes_per_group, n - start)
            factor, dims = self._draw_group(group, global_variance, active)
            np.add.at(votes, (dims, factor), 1)
        return votes

    def _draw_group(
        self, group: int, global_variance: np.ndarray, active: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(factor index, winning dimension), each (group,), of ``group`` votes."""
        factor = self.rng.choice(self.varying, size=group)
        factors = self._fixed_factor_batches(torch.as_tensor(factor))
        representation = self.encoder(factors.reshape(group * self.batch_size, -1))
        batches = representation.reshape(group, self.batch_size, -1)
        ratio = batches[:, :, active].var(axis=1, ddof=1) / global_variance[active]
        return factor, active[ratio.argmin(axis=1)]

    def _fixed_factor_batches(self, factor: torch.Tensor) -> torch.Tensor:
        """Factor indices (group, batch_size, F); in batch g factor[g] takes one value."""
        group = factor.shape[0]
        factors = self.dataset.sample_factors(group * self.batch_size, self.generator)
        factors = factors.reshape(group, self.batch_size, self.num_factors).clone()
        rows = torch.arange(group)
        factors[rows, :, factor] = factors[rows, 0, factor].unsqueeze(1)
        return factors


class _Moments:
    """Running count, sum and sum of squares (float64) of representations, per dimension."""

    def __init__(self) -> None:
        self.count = 0
        self.total: np.ndarray | float = 0.0
        self.squares: np.ndarray | float = 0.0

    def add(self, representation: np.ndarray) -> None:
        """Accumulate a batch (n, D)."""
        self.count += representation.shape[0]
        self.total = self.total + representation.sum(axis=0)
        self.squares = self.squares + np.square(representation).sum(axis=0)

    def variance(self) -> np.ndarray:
        """Variance with ddof 1, clipped at 0 against rounding: (D,)."""
        mean = np.asarray(self.total) / self.count
        centred = np.asarray(self.squares) - self.count * np.square(mean)
        return np.maximum(centred / (self.count - 1), 0.0)


class _ShuffledChunks:
    """The parted protocol's chunks over images in one random (loader) order.

    For each varying factor k and value v, the images with k = v, in loader order, are cut
    into chunks of ``chunk_size``; the partial last chunk is dropped. Chunks get ids
    0 .. num_chunks - 1, factor by factor.

    :ivar order: flat image indices (M,), in loader order.
    :ivar chunk_of: per varying factor, int64 (M,): the chunk id of the image at each loader
        position, -1 when it falls in a dropped partial chunk.
    :ivar factor_of_chunk: int64 (num_chunks,): the factor each chunk fixes.
    """

    def __init__(self, sizes: tuple[int, ...], varying: list[int], chunk_size: int, order: np.ndarray) -> None:
        self.sizes = sizes
        self.order = order
        self.chunk_of: list[np.ndarray] = []
        factor_of_chunk: list[np.ndarray] = []
        first_id = 0
        for k in varying:
            values = order // math.prod(sizes[k + 1 :]) % sizes[k]
            chunk, full = _chunks_in_order(values, sizes[k], chunk_size)
            first = first_id + np.concatenate(([0], np.cumsum(full)[:-1]))
            self.chunk_of.append(np.where(chunk < full[values], first[values] + chunk, -1))
            factor_of_chunk.append(np.full(int(full.sum()), k, dtype=np.int64))
            first_id += int(full.sum())
        self.factor_of_chunk = np.concatenate(factor_of_chunk)

    @property
    def num_chunks(self) -> int:
        """Number of (full) chunks over all factors and values."""
        return self.factor_of_chunk.shape[0]


def _chunks_in_order(values: np.ndarray, size: int, chunk_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Chunk number of each position among the positions of its value, in order: (M,); and the
    number of full chunks of each value: (size,)."""
    counts = np.bincount(values, minlength=size)
    by_value = np.argsort(values, kind="stable")
    rank = np.empty_like(by_value)
    rank[by_value] = np.arange(values.shape[0]) - np.repeat(np.cumsum(counts) - counts, counts)
    return rank // chunk_size, counts // chunk_size


class _ChunkMoments:
    """Per-chunk count, sum and sum of squares (float64) of representations (D from the first)."""

    def __init__(self, num_chunks: int) -> None:
        self.count = np.zeros(num_chunks, dtype=np.int64)
        self.total = np.zeros((num_chunks, 0))
        self.squares = np.zeros((num_chunks, 0))

    def add(self, chunk: np.ndarray, representation: np.ndarray) -> None:
        """Accumulate rows of ``representation`` (n, D) into chunks ``chunk`` (n,)."""
        if self.total.shape[1] != representation.shape[1]:
            self.total = np.zeros((self.count.shape[0], representation.shape[1]))
            self.squares = np.zeros_like(self.total)
        np.add.at(self.count, chunk, 1)
        np.add.at(self.total, chunk, representation)
        np.add.at(self.squares, chunk, np.square(representation))

    def variance(self) -> np.ndarray:
        """Variance (ddof 1) per chunk (num_chunks, D); every chunk holds >= 2 images."""
        count = self.count[:, None].astype(np.float64)
        centred = self.squares - np.square(self.total) / count
        return np.maximum(centred / (count - 1), 0.0)


def _parted_score(encoder: BatchedEncoder, chunks: _ShuffledChunks, *, min_std: float) -> FactorScoreResult:
    """The PartedVAE authors' protocol; see :func:`factor_score`."""
    data_moments, chunk_moments = _accumulate_chunks(encoder, chunks)
    data_std = np.sqrt(data_moments.variance())
    votes = np.zeros((data_std.shape[0], len(chunks.sizes)), dtype=np.int64)
    if chunks.num_chunks:
        winner = _least_variance_dims(chunk_moments.variance(), data_std**2)
        keep = data_std[winner] >= min_std
        np.add.at(votes, (winner[keep], chunks.factor_of_chunk[keep]), 1)
    total = votes.sum()
    score = float(votes.max(axis=1).sum() / total) if total else 0.0
    active = tuple(int(d) for d in np.flatnonzero(data_std >= min_std))
    return FactorScoreResult(score, score, votes, active, "parted")


def _accumulate_chunks(encoder: BatchedEncoder, chunks: _ShuffledChunks) -> tuple[_Moments, _ChunkMoments]:
    """Encode each image once, in loader order; moments over all images and per chunk.

    Loader positions are scanned in blocks of ``_SCAN_BLOCK``: memory is bounded by the
    block, the number of chunks and the index arrays of :class:`_ShuffledChunks`, never by
    a representation of the whole data set.
    """
    data_moments = _Moments()
    chunk_moments = _ChunkMoments(chunks.num_chunks)
    for start in range(0, chunks.order.shape[0], _SCAN_BLOCK):
        block = slice(start, start + _SCAN_BLOCK)
        factors = np.stack(np.unravel_index(chunks.order[block], chunks.sizes), axis=1)
        representation = encoder(torch.as_tensor(factors))
        data_moments.add(representation)
        for chunk_of in chunks.chunk_of:
            ids = chunk_of[block]
            kept = ids >= 0
            chunk_moments.add(ids[kept], representation[kept])
    return data_moments, chunk_moments


def _least_variance_dims(chunk_variance: np.ndarray, data_variance: np.ndarray) -> np.ndarray:
    """Argmin over d of chunk variance / data variance, (chunks,); zero-variance d never wins."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = chunk_variance / data_variance
    ratio[:, data_variance == 0] = np.inf
    return ratio.argmin(axis=1)
