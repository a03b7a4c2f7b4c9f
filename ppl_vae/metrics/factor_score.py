"""Factor (FactorVAE) disentanglement score of Kim & Mnih (2018), in two protocols.

``protocol="standard"`` is disentanglement_lib's ``compute_factor_vae`` with the defaults of
its unsupervised study; ``protocol="parted"`` is the variant in the PartedVAE authors' code.
The docstring of :func:`factor_score` lists every difference between the two.
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np
import torch

from ppl_vae.metrics._arrays import as_numpy

Encode = Callable[[torch.Tensor], "torch.Tensor | np.ndarray"]
FactorProtocol = Literal["standard", "parted"]
PROTOCOLS: tuple[str, ...] = ("standard", "parted")
_SCAN_BLOCK = 65536


class FactorDataset(Protocol):
    """What the Factor score needs from a data set (the API of ``ppl_vae.data.DSprites``).

    The data set must hold every combination of factor values exactly once (dSprites does).
    """

    factor_sizes: Sequence[int]
    factor_names: Sequence[str]

    def sample_factors(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """Draw factor indices uniformly: LongTensor (n, num_factors)."""
        ...

    def images_from_factors(self, factors: torch.Tensor) -> torch.Tensor:
        """Render the images of factor indices (n, num_factors): FloatTensor (n, 1, 64, 64)."""
        ...


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


class _BatchedEncoder:
    """Encodes factor indices via images, at most ``batch_size`` images per ``encode`` call."""

    def __init__(self, encode: Encode, dataset: FactorDataset, batch_size: int) -> None:
        self.encode = encode
        self.dataset = dataset
        self.batch_size = batch_size
        self.num_dims: int | None = None

    def __call__(self, factors: torch.Tensor) -> np.ndarray:
        """Representations float64 (n, D) of factor indices LongTensor (n, num_factors)."""
        parts = [
            self._encode_batch(factors[start : start + self.batch_size])
            for start in range(0, factors.shape[0], self.batch_size)
        ]
        return np.concatenate(parts)

    def _encode_batch(self, factors: torch.Tensor) -> np.ndarray:
        images = self.dataset.images_from_factors(factors)
        representation = as_numpy(self.encode(images))
        self._check(representation, factors.shape[0])
        return representation.astype(np.float64, copy=False)

    def _check(self, representation: np.ndarray, n: int) -> None:
        if representation.ndim != 2 or representation.shape[0] != n:
            raise ValueError(
                f"encode must return a 2-D representation (n, D) with n = {n} images, "
                f"got shape {representation.shape}"
            )
        if self.num_dims is None:
            self.num_dims = representation.shape[1]
        elif representation.shape[1] != self.num_dims:
            raise ValueError(
                f"encode returned {representation.shape[1]} dimensions after {self.num_dims}"
            )


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
    max_images_per_value: int | None = None,
    encode_batch_size: int = 1024,
) -> FactorScoreResult:
    """Factor (FactorVAE) score of the representation ``encode`` gives on ``dataset``.

    :param encode: maps an image batch FloatTensor (n, 1, 64, 64) to a representation (n, D),
        tensor or ndarray (e.g. posterior means). Called under ``torch.no_grad()`` with at
        most ``encode_batch_size`` images.
    :param dataset: see :class:`FactorDataset`. Factors with a single value (dSprites' color)
        are skipped: they never receive a vote.
    :param n_train, n_eval, batch_size, n_variance, prune_threshold: used by the standard
        protocol only (validated for both).
    :param chunk_size, min_std, max_images_per_value: used by the parted protocol only.
    :param seed: seeds a ``torch.Generator`` (for ``sample_factors``) and a numpy Generator (for
        the factor of each vote and the parted subsample); same seed, same score for a
        deterministic ``encode``.
    :param encode_batch_size: images per ``encode`` call; memory is bounded by it, never by the
        data set size.

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
    4. Majority-vote classifier (each dimension -> its most frequent factor, ties and unvoted
       dimensions -> the lowest factor index) fitted on ``n_train`` votes; the score is its
       accuracy on ``n_eval`` freshly drawn votes. No active dimension: score 0.
       disentanglement_lib records the argmin as a position among the active dimensions;
       here it is mapped back to the dimension index (same accuracy, readable ``votes``).

    ``"parted"`` (the PartedVAE authors' evaluation code):

    1. Each dimension is divided by its std over the data (the images encoded below).
    2. For every factor k and every value v, the images with factor k = v, in data set order
       (factor indices lexicographic, the last factor fastest: dSprites' file order), are
       cut into consecutive chunks of ``chunk_size`` images (the last chunk may be shorter;
       a chunk of one image is skipped). Chunks are therefore not random batches: a chunk
       also holds the slowly varying factors fixed.
    3. Each chunk votes for the dimension of least normalised variance; no pruning before the
       argmin (a dimension with zero std never wins). The vote is dropped, not given to
       another dimension, when the winner's std is below ``min_std``; dropped votes are not
       counted in the total.
    4. Score = sum_d max_k votes[d, k] / total votes, on the same votes: no held-out split,
       so chance level is above 1 / num_factors. No vote kept: score 0.
    With ``max_images_per_value=None`` (default) all images are used, each encoded exactly
    once (737,280 for dSprites: the authors' full protocol). An integer m subsamples whole
    chunks at random, without replacement, with the same fraction f = m / (largest number
    of images sharing a value) for every factor, at least one chunk per value: no value
    uses more than m images, and every factor keeps its share of the votes (equal for
    dSprites, as in the full protocol). Each chunk is one of the full protocol's chunks, so
    the vote proportions estimate the full protocol's. The one-chunk minimum over-weights
    factors with many values when f * (images per value) < chunk_size (m below about
    1,334 on dSprites). On dSprites, m = 10,000 encodes about 135,000 images instead of
    737,280 (see benchmarks/factor_score_memory.py for time and memory).

    :returns: :class:`FactorScoreResult`.
    :raises ValueError: naming the argument and its value, for any protocol: n_train, n_eval or
        encode_batch_size < 1; batch_size, n_variance or chunk_size < 2; prune_threshold
        or min_std < 0; max_images_per_value < chunk_size; an unknown protocol; a data
        set without a factor of more than one value; ``encode`` returning something other
        than a 2-D array with one row per image, or a changing number of dimensions.
    """
    _check_arguments(
        n_train=n_train,
        n_eval=n_eval,
        batch_size=batch_size,
        protocol=protocol,
        n_variance=n_variance,
        prune_threshold=prune_threshold,
        chunk_size=chunk_size,
        min_std=min_std,
        max_images_per_value=max_images_per_value,
        encode_batch_size=encode_batch_size,
    )
    sizes = tuple(int(size) for size in dataset.factor_sizes)
    varying = [k for k, size in enumerate(sizes) if size > 1]
    if not varying:
        raise ValueError(f"dataset has no factor with more than one value: {sizes}")
    encoder = _BatchedEncoder(encode, dataset, encode_batch_size)
    generator = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        if protocol == "standard":
            return _standard_score(
                encoder, dataset, sizes, varying, generator, rng,
                n_train=n_train, n_eval=n_eval, batch_size=batch_size,
                n_variance=n_variance, prune_threshold=prune_threshold,
            )
        return _parted_score(
            encoder, sizes, varying, rng,
            chunk_size=chunk_size, min_std=min_std, max_images_per_value=max_images_per_value,
        )


def _check_arguments(**arguments: object) -> None:
    """Raise ValueError naming the first argument out of its range."""
    minimum = {
        "n_train": 1, "n_eval": 1, "batch_size": 2, "n_variance": 2,
        "chunk_size": 2, "encode_batch_size": 1,
    }
    for name, lowest in minimum.items():
        value = arguments[name]
        if not isinstance(value, (int, np.integer)) or value < lowest:
            raise ValueError(f"{name} must be an integer >= {lowest}, got {value!r}")
    if arguments["protocol"] not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {PROTOCOLS}, got {arguments['protocol']!r}")
    for name in ("prune_threshold", "min_std"):
        value = arguments[name]
        if not isinstance(value, numbers.Real) or not value >= 0:
            raise ValueError(f"{name} must be a number >= 0, got {value!r}")
    cap = arguments["max_images_per_value"]
    chunk_size = arguments["chunk_size"]
    if cap is not None and (not isinstance(cap, (int, np.integer)) or cap < chunk_size):
        raise ValueError(
            f"max_images_per_value must be None or an integer >= chunk_size ({chunk_size}), "
            f"got {cap!r}"
        )


def _standard_score(
    encoder: _BatchedEncoder,
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
    classifier = train_votes.argmax(axis=1)
    return FactorScoreResult(
        score=_accuracy(eval_votes, classifier),
        train_accuracy=_accuracy(train_votes, classifier),
        votes=train_votes,
        active_dims=tuple(int(d) for d in active),
        protocol="standard",
    )


def _global_variance(
    encoder: _BatchedEncoder, dataset: FactorDataset, n: int, generator: torch.Generator
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
        encoder: _BatchedEncoder,
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


class _ChunkLayout:
    """Numbering of the parted protocol's chunks: (factor k, value v, chunk j) -> one id.

    The images with factor k = v, in data set order, have position p = index of the other
    factors' values (lexicographic); chunk j holds positions [j * chunk_size, (j+1) *
    chunk_size).
    """

    def __init__(self, sizes: tuple[int, ...], varying: list[int], chunk_size: int) -> None:
        self.sizes = sizes
        self.varying = varying
        self.chunk_size = chunk_size
        self.num_images = math.prod(sizes)
        self.per_value = {k: self.num_images // sizes[k] for k in varying}
        self.chunks_per_value = {k: -(-self.per_value[k] // chunk_size) for k in varying}
        self.offset: dict[int, int] = {}
        factor_of_chunk = []
        for k in varying:
            self.offset[k] = len(factor_of_chunk)
            factor_of_chunk += [k] * (sizes[k] * self.chunks_per_value[k])
        self.factor_of_chunk = np.asarray(factor_of_chunk, dtype=np.int64)

    @property
    def num_chunks(self) -> int:
        """Number of chunks over all factors and values."""
        return self.factor_of_chunk.shape[0]

    def chunk_ids(self, factors: np.ndarray) -> np.ndarray:
        """Chunk id of each image for each varying factor: (n, len(varying)) from (n, F)."""
        columns = []
        for k in self.varying:
            others = [i for i in range(len(self.sizes)) if i != k]
            position = np.ravel_multi_index(
                tuple(factors[:, others].T), tuple(self.sizes[i] for i in others)
            )
            chunk = position // self.chunk_size
            columns.append(self.offset[k] + factors[:, k] * self.chunks_per_value[k] + chunk)
        return np.stack(columns, axis=1)

    def select(self, max_images_per_value: int | None, rng: np.random.Generator) -> np.ndarray:
        """Boolean mask (num_chunks,) of the chunks to use; see ``max_images_per_value``."""
        if max_images_per_value is None:
            return np.ones(self.num_chunks, dtype=bool)
        fraction = min(1.0, max_images_per_value / max(self.per_value.values()))
        selected = np.zeros(self.num_chunks, dtype=bool)
        for k in self.varying:
            available = self.chunks_per_value[k]
            wanted = int(fraction * self.per_value[k] / self.chunk_size)
            take = min(available, max(1, wanted))
            for value in range(self.sizes[k]):
                chosen = rng.choice(available, size=take, replace=False)
                selected[self.offset[k] + value * available + chosen] = True
        return selected


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
        """Variance (ddof 1) per chunk (num_chunks, D); NaN rows for chunks of < 2 images."""
        count = self.count[:, None].astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            centred = self.squares - np.square(self.total) / count
            variance = np.maximum(centred / (count - 1), 0.0)
        variance[self.count < 2] = np.nan
        return variance


def _parted_score(
    encoder: _BatchedEncoder,
    sizes: tuple[int, ...],
    varying: list[int],
    rng: np.random.Generator,
    *,
    chunk_size: int,
    min_std: float,
    max_images_per_value: int | None,
) -> FactorScoreResult:
    """The PartedVAE authors' protocol; see :func:`factor_score`."""
    layout = _ChunkLayout(sizes, varying, chunk_size)
    selected = layout.select(max_images_per_value, rng)
    data_moments, chunk_moments = _accumulate_chunks(encoder, layout, selected)
    data_std = np.sqrt(data_moments.variance())
    used = selected & (chunk_moments.count >= 2)
    winner = _least_variance_dims(chunk_moments.variance()[used], data_std**2)
    keep = data_std[winner] >= min_std
    votes = np.zeros((data_std.shape[0], len(sizes)), dtype=np.int64)
    np.add.at(votes, (winner[keep], layout.factor_of_chunk[used][keep]), 1)
    total = votes.sum()
    score = float(votes.max(axis=1).sum() / total) if total else 0.0
    active = tuple(int(d) for d in np.flatnonzero(data_std >= min_std))
    return FactorScoreResult(score, score, votes, active, "parted")


def _accumulate_chunks(
    encoder: _BatchedEncoder, layout: _ChunkLayout, selected: np.ndarray
) -> tuple[_Moments, _ChunkMoments]:
    """Encode, once each, the images of the selected chunks; moments over all and per chunk.

    Image indices are scanned in blocks of ``_SCAN_BLOCK``: memory is bounded by the block,
    the number of chunks and ``encoder.batch_size`` images, not by the data set size.
    """
    data_moments = _Moments()
    chunk_moments = _ChunkMoments(layout.num_chunks)
    for start in range(0, layout.num_images, _SCAN_BLOCK):
        index = np.arange(start, min(start + _SCAN_BLOCK, layout.num_images))
        factors = np.stack(np.unravel_index(index, layout.sizes), axis=1)
        chunk = layout.chunk_ids(factors)
        needed = selected[chunk].any(axis=1)
        if not needed.any():
            continue
        representation = encoder(torch.as_tensor(factors[needed]))
        data_moments.add(representation)
        for column in range(chunk.shape[1]):
            rows = selected[chunk[needed, column]]
            chunk_moments.add(chunk[needed, column][rows], representation[rows])
    return data_moments, chunk_moments


def _least_variance_dims(chunk_variance: np.ndarray, data_variance: np.ndarray) -> np.ndarray:
    """Argmin over d of chunk variance / data variance, (chunks,); zero-variance d never wins."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = chunk_variance / data_variance
    ratio[:, data_variance == 0] = np.inf
    return ratio.argmin(axis=1)
