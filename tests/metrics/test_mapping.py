"""The authors' Student-t -> normal map of codes before scoring."""
import numpy as np
import pytest
import torch
from scipy import stats

from ppl_vae.metrics import StudentTToNormal, student_t_to_normal


def test_codes_are_mapped_through_the_t_cdf_then_the_inverse_normal_cdf_as_the_authors_do():
    codes = np.array([[-3.0, -0.5, 0.0, 0.7, 2.5]])
    expected = stats.norm.ppf(stats.t.cdf(codes, 9.0))
    assert np.allclose(student_t_to_normal(codes, 9.0), expected, atol=1e-12)


def test_far_tails_stay_finite_and_ordered_where_the_cdf_rounds_to_one():
    mapped = student_t_to_normal(torch.tensor([[40.0, 1e6, -1e6]]), 3.0)
    assert np.isfinite(mapped).all()
    assert mapped[0, 1] > mapped[0, 0] > 0 > mapped[0, 2]


def test_t_distributed_codes_become_standard_normal():
    draws = stats.t.rvs(3.0, size=(20_000, 1), random_state=np.random.default_rng(0))
    assert stats.kstest(student_t_to_normal(draws, 3.0)[:, 0], "norm").pvalue > 0.01


def test_the_wrapped_encoder_maps_what_the_encoder_returns():
    encode = StudentTToNormal(lambda images: images.flatten(1), 9.0)
    images = torch.linspace(-2, 2, 6).reshape(2, 3)
    assert np.allclose(encode(images), stats.norm.ppf(stats.t.cdf(images.numpy(), 9.0)), atol=1e-6)


@pytest.mark.parametrize("df", [0.0, -1.0, True, "9"])
def test_a_bad_df_is_refused_naming_it(df):
    with pytest.raises(ValueError, match="df must be a positive number"):
        StudentTToNormal(lambda images: images, df)
