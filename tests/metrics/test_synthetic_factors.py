"""SyntheticFactors: the oracle data set of the metric tests and benchmarks."""
import pytest
import torch

from ppl_vae.metrics.synthetic import DSPRITES_FACTOR_SIZES, SyntheticFactors


def test_images_carry_the_factors_they_were_drawn_from():
    dataset = SyntheticFactors()
    factors = dataset.sample_factors(500, torch.Generator().manual_seed(0))

    images = dataset.images_from_factors(factors)

    assert images.shape == (500, 1, 64, 64)
    assert torch.equal(dataset.true_factors(images).long(), factors)
    assert dataset.factor_sizes == DSPRITES_FACTOR_SIZES
    assert torch.all(factors.max(dim=0).values < torch.tensor(DSPRITES_FACTOR_SIZES))


@pytest.mark.parametrize(
    ("arguments", "match"),
    [
        ({"factor_sizes": ()}, "factor_sizes"),
        ({"factor_sizes": (3, 0)}, "factor_sizes"),
        ({"factor_sizes": (3, True)}, "factor_sizes"),
        ({"factor_sizes": (2,) * 65}, "factor_sizes"),
        ({"factor_sizes": (2, 3), "factor_names": ("a",)}, "factor_names"),
    ],
)
def test_bad_sizes_or_names_raise_value_error_naming_them(arguments, match):
    with pytest.raises(ValueError, match=match):
        SyntheticFactors(**arguments)
