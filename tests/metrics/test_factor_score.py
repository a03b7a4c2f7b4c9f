"""Factor score: both protocols on a tiny fake data set whose images carry their factor values."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ppl_vae.metrics import FactorScoreResult, factor_score

PROTOCOLS = ("standard", "parted")
FAST = {"n_train": 300, "n_eval": 200, "batch_size": 16, "n_variance": 500}


class FakeFactors:
    """DSprites-like factor API; image pixel (0, 0, k) holds the value index of factor k."""

    def __init__(self, factor_sizes: tuple[int, ...] = (1, 3, 4, 5)) -> None:
        self.factor_sizes = factor_sizes
        self.factor_names = tuple(f"factor{k}" for k in range(len(factor_sizes)))

    def sample_factors(self, n: int, generator: torch.Generator) -> torch.Tensor:
        columns = [torch.randint(size, (n,), generator=generator) for size in self.factor_sizes]
        return torch.stack(columns, dim=1)

    def images_from_factors(self, factors: torch.Tensor) -> torch.Tensor:
        images = torch.zeros(factors.shape[0], 1, 64, 64)
        images[:, 0, 0, : factors.shape[1]] = factors.float()
        return images


def factor_values(images: torch.Tensor) -> torch.Tensor:
    """The factor value indices written into fake images: (n, 4)."""
    return images[:, 0, 0, :4]


def noise_encoder(num_dims: int, seed: int = 1):
    """An encoder ignoring its input: standard normal (n, num_dims)."""
    generator = torch.Generator().manual_seed(seed)
    return lambda images: torch.randn(images.shape[0], num_dims, generator=generator)


def linear_encoder(images: torch.Tensor) -> torch.Tensor:
    """A fixed, deterministic, entangled map of the factor values to 3 dimensions."""
    mixing = torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.5, 0.0], [0.3, 1.0, 0.4], [0.0, 0.6, 1.0]])
    return factor_values(images) @ mixing


class CountingEncoder:
    """Wraps an encoder; records how many images each call received."""

    def __init__(self, encode) -> None:
        self.encode = encode
        self.calls: list[int] = []

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        self.calls.append(images.shape[0])
        return self.encode(images)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_perfect_representation_scores_one(protocol):
    result = factor_score(factor_values, FakeFactors(), protocol=protocol, **FAST)

    assert result.score == 1.0
    assert result.protocol == protocol
    assert result.votes.shape == (4, 4)
    assert np.all(result.votes[:, 0] == 0), "the single-valued factor never gets a vote"
    assert np.count_nonzero(result.votes) == 3 and np.all(np.diag(result.votes)[1:] > 0)


def test_result_converts_to_its_score_with_float():
    result = factor_score(linear_encoder, FakeFactors(), **FAST)

    assert isinstance(result, FactorScoreResult)
    assert float(result) == result.score


def test_standard_protocol_scores_noise_near_chance():
    result = factor_score(
        noise_encoder(4), FakeFactors(), n_train=2000, n_eval=2000, batch_size=8, n_variance=500
    )

    assert result.score == pytest.approx(1 / 3, abs=0.05)


def test_parted_protocol_scores_noise_above_chance_on_its_own_votes():
    dataset = FakeFactors((1, 3, 4, 5))
    result = factor_score(noise_encoder(4), dataset, protocol="parted", chunk_size=4)

    purity = result.votes.max(axis=1).sum() / result.votes.sum()
    assert result.score == result.train_accuracy == pytest.approx(purity)
    assert result.score > 1 / 3


@pytest.mark.parametrize(
    "options",
    [{"protocol": "standard"}, {"protocol": "parted", "chunk_size": 4, "max_images_per_value": 8}],
)
def test_same_seed_gives_same_result(options):
    first = factor_score(linear_encoder, FakeFactors(), seed=3, **FAST, **options)
    second = factor_score(linear_encoder, FakeFactors(), seed=3, **FAST, **options)

    assert first.score == second.score
    np.testing.assert_array_equal(first.votes, second.votes)


def test_different_seeds_draw_different_votes():
    first = factor_score(linear_encoder, FakeFactors(), seed=0, **FAST)
    second = factor_score(linear_encoder, FakeFactors(), seed=1, **FAST)

    assert not np.array_equal(first.votes, second.votes)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_constant_dimension_never_receives_a_vote(protocol):
    noise = noise_encoder(3)

    def encode(images):
        return torch.cat([noise(images), torch.full((images.shape[0], 1), 2.0)], dim=1)

    result = factor_score(encode, FakeFactors(), protocol=protocol, chunk_size=4, **FAST)

    assert result.votes[3].sum() == 0
    assert 3 not in result.active_dims


def test_standard_protocol_prunes_dimensions_with_std_below_threshold():
    def encode(images):
        values = factor_values(images)
        return torch.stack([values[:, 1], values[:, 2], 0.02 * values[:, 3]], dim=1)

    result = factor_score(encode, FakeFactors(), **FAST)

    assert result.active_dims == (0, 1)
    assert result.votes[2].sum() == 0
    assert result.votes[:, 3].sum() > 0, "factor 3's votes go to an active dimension"


def test_protocols_differ_on_dimensions_with_std_between_their_thresholds():
    """std(0.05 * factor 3) = 0.07: kept by standard (0.05), its votes dropped by parted (0.1)."""

    def encode(images):
        values = factor_values(images)
        return torch.stack([values[:, 1], values[:, 2], 0.05 * values[:, 3]], dim=1)

    standard = factor_score(encode, FakeFactors(), **FAST)
    parted = factor_score(encode, FakeFactors(), protocol="parted")

    assert standard.active_dims == (0, 1, 2) and standard.votes[2, 3] > 0
    assert parted.active_dims == (0, 1)
    assert parted.votes[:, 3].sum() == 0, "dropped, not passed to the next-best dimension"
    assert standard.score == parted.score == 1.0


def test_parted_chunks_follow_dataset_order_so_slower_factors_are_fixed_too():
    """With chunks of 5, a chunk of shape's (factor 1) images also fixes scale (factor 2)."""

    def encode(images):
        values = factor_values(images)
        shape_with_jitter = values[:, 1] + 0.01 * values[:, 3]
        return torch.stack([shape_with_jitter, values[:, 2], values[:, 3]], dim=1)

    result = factor_score(encode, FakeFactors(), protocol="parted", chunk_size=5)

    assert result.votes[1, 1] == result.votes[:, 1].sum() == 3 * 4


@pytest.mark.parametrize(
    ("protocol", "batch_size"), [("standard", 16), ("standard", 64), ("parted", 16)]
)
def test_encode_never_receives_more_than_encode_batch_size_images(protocol, batch_size):
    encoder = CountingEncoder(factor_values)
    options = {**FAST, "batch_size": batch_size}

    result = factor_score(encoder, FakeFactors(), protocol=protocol, encode_batch_size=50, **options)

    assert max(encoder.calls) <= 50
    assert result.score == 1.0


def test_encode_runs_without_gradient_tracking():
    def encode(images):
        assert not torch.is_grad_enabled()
        return factor_values(images)

    factor_score(encode, FakeFactors(), **FAST)


def test_encode_may_return_a_numpy_array():
    result = factor_score(lambda images: factor_values(images).numpy(), FakeFactors(), **FAST)

    assert result.score == 1.0


def test_parted_full_protocol_encodes_each_image_once():
    dataset = FakeFactors((1, 3, 4, 5))
    encoder = CountingEncoder(factor_values)

    result = factor_score(encoder, dataset, protocol="parted", chunk_size=4)

    assert sum(encoder.calls) == math.prod(dataset.factor_sizes)
    chunks = [size * math.ceil(60 // size / 4) for size in (3, 4, 5)]
    assert result.votes.sum(axis=0)[1:].tolist() == chunks


def test_parted_subsample_caps_images_per_value_with_equal_fraction_per_factor():
    dataset = FakeFactors((1, 2, 4, 8))
    encoder = CountingEncoder(factor_values)

    result = factor_score(
        encoder, dataset, protocol="parted", chunk_size=2, max_images_per_value=8
    )

    assert sum(encoder.calls) < math.prod(dataset.factor_sizes)
    assert result.votes.sum(axis=0)[1:].tolist() == [2 * 4, 4 * 2, 8 * 1]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_no_informative_dimension_scores_zero(protocol):
    result = factor_score(
        lambda images: torch.ones(images.shape[0], 2), FakeFactors(), protocol=protocol, **FAST
    )

    assert result.score == 0.0
    assert result.active_dims == ()
    assert result.votes.sum() == 0


@pytest.mark.parametrize(
    ("argument", "value"),
    [
        ("n_train", 0),
        ("n_eval", 0),
        ("batch_size", 0),
        ("protocol", "kim_mnih"),
        ("encode_batch_size", 0),
        ("n_variance", 1),
        ("chunk_size", 1),
        ("prune_threshold", -1.0),
        ("max_images_per_value", 50),
    ],
)
def test_bad_argument_raises_value_error_naming_it(argument, value):
    with pytest.raises(ValueError, match=f"{argument}.*{value}"):
        factor_score(factor_values, FakeFactors(), **{argument: value})


@pytest.mark.parametrize(
    "encode",
    [
        lambda images: factor_values(images).sum(dim=1),
        lambda images: factor_values(images)[:-1],
        lambda images: factor_values(images)[:, :, None],
    ],
    ids=["one-dimensional", "missing-row", "three-dimensional"],
)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_encode_returning_a_wrong_shape_raises_value_error(encode, protocol):
    with pytest.raises(ValueError, match="encode"):
        factor_score(encode, FakeFactors(), protocol=protocol, **FAST)


def test_dataset_without_varying_factor_raises_value_error():
    with pytest.raises(ValueError, match="dataset"):
        factor_score(factor_values, FakeFactors((1, 1)), **FAST)
