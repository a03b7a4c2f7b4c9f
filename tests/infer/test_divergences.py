"""Aggregate-posterior divergences: dimension-wise MMD and inclusive KL."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from scipy import stats
from scipy.special import logsumexp

from ppl_vae.distributions import (
    AnisotropicGaussianPrior,
    IsotropicGaussianPrior,
    MixtureOfGaussiansPrior,
    StudentTPrior,
)
from ppl_vae.infer.divergences import (
    DEFAULT_MMD_LENGTH_SCALES,
    aggregate_log_density,
    inclusive_kl,
    mmd_dimensionwise,
)

# --- dimension-wise MMD -------------------------------------------------------------------


def _mmd_by_loops(x, y, length_scales):
    """Direct transcription of Eq. 10 with the unbiased within-sample terms."""
    x, y = x.double().numpy(), y.double().numpy()
    n, m = len(x), len(y)

    def k(a, b):
        return sum((2 * s / (2 * s + (a - b) ** 2)).sum() for s in length_scales)

    within_x = sum(k(x[i], x[j]) for i in range(n) for j in range(n) if i != j) / (n * (n - 1))
    within_y = sum(k(y[i], y[j]) for i in range(m) for j in range(m) if i != j) / (m * (m - 1))
    cross = sum(k(x[i], y[j]) for i in range(n) for j in range(m)) * 2 / (n * m)
    return within_x + within_y - cross


def test_mmd_matches_direct_double_sum():
    x, y = torch.randn(7, 3), torch.randn(5, 3) * 2 + 0.5
    expected = _mmd_by_loops(x, y, DEFAULT_MMD_LENGTH_SCALES)
    assert mmd_dimensionwise(x, y).item() == pytest.approx(expected, rel=1e-5)
    expected_custom = _mmd_by_loops(x, y, (0.3, 3.0))
    assert mmd_dimensionwise(x, y, length_scales=(0.3, 3.0)).item() == pytest.approx(
        expected_custom, rel=1e-5
    )


def test_default_length_scales_are_the_authors_code_values():
    assert DEFAULT_MMD_LENGTH_SCALES == (0.1, 0.2, 0.5, 1.0, 2.0, 5.0)


def test_mmd_is_near_zero_for_samples_of_one_distribution():
    x, y = torch.randn(500, 5), torch.randn(500, 5)
    assert abs(mmd_dimensionwise(x, y).item()) < 0.1


@pytest.mark.parametrize("shift, scale", [(1.0, 1.0), (0.0, 3.0)])
def test_mmd_is_clearly_positive_for_different_distributions(shift, scale):
    x, y = torch.randn(500, 5), torch.randn(500, 5) * scale + shift
    assert mmd_dimensionwise(x, y).item() > 1.0


def test_mmd_only_compares_marginals():
    independent = torch.randn(500, 2)
    common = torch.randn(500, 1)
    perfectly_correlated = common.expand(500, 2)
    assert abs(mmd_dimensionwise(independent, perfectly_correlated).item()) < 0.1


def test_mmd_chunked_over_dimensions_equals_unchunked():
    x, y = torch.randn(60, 7), torch.randn(40, 7) + 0.3
    torch.testing.assert_close(mmd_dimensionwise(x, y, dims_per_chunk=2), mmd_dimensionwise(x, y))


def test_mmd_gradient_flows_to_both_samples():
    x = torch.randn(50, 3, requires_grad=True)
    y = (torch.randn(50, 3) + 1.0).requires_grad_()
    mmd_dimensionwise(x, y).backward()
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    assert torch.isfinite(y.grad).all() and y.grad.abs().sum() > 0


@settings(max_examples=40, deadline=None)
@given(
    arrays(np.float32, (6, 3), elements=st.floats(-50, 50, width=32)),
    arrays(np.float32, (4, 3), elements=st.floats(-50, 50, width=32)),
)
def test_mmd_is_symmetric(x, y):
    x, y = torch.from_numpy(x), torch.from_numpy(y)
    torch.testing.assert_close(
        mmd_dimensionwise(x, y), mmd_dimensionwise(y, x), rtol=1e-4, atol=1e-5
    )


@pytest.mark.parametrize(
    "x, y, match",
    [
        (torch.randn(5, 3), torch.randn(5, 2), "same dimension D"),
        (torch.randn(1, 3), torch.randn(5, 3), "x needs at least 2 samples"),
        (torch.randn(5, 3), torch.randn(1, 3), "y needs at least 2 samples"),
        (torch.randn(5), torch.randn(5, 1), "x must have shape"),
    ],
)
def test_mmd_bad_shapes_raise_value_error(x, y, match):
    with pytest.raises(ValueError, match=match):
        mmd_dimensionwise(x, y)


def test_mmd_rejects_non_positive_length_scales():
    with pytest.raises(ValueError, match="length_scales"):
        mmd_dimensionwise(torch.randn(4, 2), torch.randn(4, 2), length_scales=(1.0, 0.0))


# --- aggregate log-density ------------------------------------------------------------------


def test_aggregate_log_density_matches_scipy_mixture_of_encodings():
    z, loc, scale = torch.randn(6, 3), torch.randn(4, 3), torch.rand(4, 3) + 0.2
    per_encoding = stats.norm.logpdf(z.numpy()[:, None, :], loc.numpy(), scale.numpy()).sum(-1)
    expected = logsumexp(per_encoding, axis=1) - math.log(4)
    np.testing.assert_allclose(aggregate_log_density(z, loc, scale).numpy(), expected, rtol=1e-5)


def test_aggregate_log_density_is_finite_far_from_every_encoding():
    z = torch.tensor([[1e3, -1e3]])
    loc, scale = torch.zeros(3, 2), torch.full((3, 2), 1e-3)
    assert torch.isfinite(aggregate_log_density(z, loc, scale)).all()


def test_aggregate_log_density_chunked_equals_unchunked_with_gradients():
    z = torch.randn(9, 2, requires_grad=True)
    loc = torch.randn(23, 2, requires_grad=True)
    log_scale = (torch.randn(23, 2) * 0.3).requires_grad_()
    chunked = aggregate_log_density(z, loc, log_scale.exp(), chunk_size=5)
    whole = aggregate_log_density(z, loc, log_scale.exp())
    torch.testing.assert_close(chunked, whole)
    grads_chunked = torch.autograd.grad(chunked.sum(), (z, loc, log_scale))
    grads_whole = torch.autograd.grad(whole.sum(), (z, loc, log_scale))
    for a, b in zip(grads_chunked, grads_whole, strict=True):
        torch.testing.assert_close(a, b)


# --- inclusive KL -------------------------------------------------------------------------------


def test_inclusive_kl_is_zero_when_aggregate_equals_prior():
    loc, scale = torch.zeros(100, 2), torch.ones(100, 2)
    kl = inclusive_kl(IsotropicGaussianPrior(2)(), loc, scale, seed=0)
    assert abs(kl.item()) < 1e-5


def test_inclusive_kl_is_near_zero_when_aggregate_matches_prior_in_distribution():
    # q(z) = mean_j N(loc_j, 0.5^2), loc_j ~ N(0, 0.75): marginally N(0, 1).
    generator = torch.Generator().manual_seed(3)
    loc = torch.randn(2000, 2, generator=generator) * math.sqrt(0.75)
    scale = torch.full((2000, 2), 0.5)
    kl = inclusive_kl(IsotropicGaussianPrior(2)(), loc, scale, seed=0)
    assert abs(kl.item()) < 0.05


def test_inclusive_kl_matches_closed_form_for_a_single_gaussian_aggregate():
    mu, sigma = torch.tensor([0.5, -1.0]), torch.tensor([0.8, 1.5])
    expected = (sigma.log() + (1 + mu**2) / (2 * sigma**2) - 0.5).sum()
    kl = inclusive_kl(
        IsotropicGaussianPrior(2)(), mu.expand(3, 2), sigma.expand(3, 2), num_samples=20_000, seed=0
    )
    assert kl.item() == pytest.approx(expected.item(), abs=0.05)


def test_inclusive_kl_is_positive_when_aggregate_differs():
    loc, scale = torch.randn(400, 2) * 0.1 + 2.0, torch.full((400, 2), 0.3)
    assert inclusive_kl(MixtureOfGaussiansPrior.pinwheel()(), loc, scale, seed=0).item() > 1.0


def test_inclusive_kl_chunked_equals_unchunked():
    loc, scale = torch.randn(50, 3), torch.rand(50, 3) + 0.2
    prior = StudentTPrior(3, 4.0)()
    torch.testing.assert_close(
        inclusive_kl(prior, loc, scale, chunk_size=7, seed=1),
        inclusive_kl(prior, loc, scale, seed=1),
    )


def test_inclusive_kl_seed_is_reproducible_and_leaves_global_rng_alone():
    loc, scale = torch.randn(30, 2), torch.ones(30, 2)
    prior = IsotropicGaussianPrior(2)()
    torch.manual_seed(5)
    expected_next = torch.rand(1)
    torch.manual_seed(5)
    first = inclusive_kl(prior, loc, scale, seed=11)
    assert torch.equal(torch.rand(1), expected_next)
    torch.testing.assert_close(inclusive_kl(prior, loc, scale, seed=11), first)


def test_inclusive_kl_gradient_reaches_encodings_and_reparameterised_prior():
    prior = AnisotropicGaussianPrior(2, learn=True)
    loc = torch.randn(40, 2, requires_grad=True)
    scale = (torch.rand(40, 2) + 0.2).requires_grad_()
    inclusive_kl(prior(), loc, scale, num_samples=64, seed=0).backward()
    for tensor in (loc, scale, prior.log_variances):
        assert torch.isfinite(tensor.grad).all() and tensor.grad.abs().sum() > 0


def test_inclusive_kl_score_function_gradient_agrees_with_pathwise_for_mixture_prior():
    """The mixture has no rsample; its means' gradient must still estimate the true one."""
    encodings = torch.Generator().manual_seed(0)
    loc, scale = torch.randn(50, 2, generator=encodings) * 0.8, torch.full((50, 2), 0.4)
    prior = MixtureOfGaussiansPrior.pinwheel(learn=True)
    num_samples, seeds = 20_000, range(3)
    score_function = torch.zeros(4, 2)
    pathwise = torch.zeros(4, 2)
    for seed in seeds:
        (grad,) = torch.autograd.grad(
            inclusive_kl(prior(), loc, scale, num_samples, seed=seed), prior.means
        )
        score_function += grad / len(seeds)
        # Pathwise reference: the weights are fixed, so z = mu_k + sigma_k eps reparameterises.
        generator = torch.Generator().manual_seed(100 + seed)
        k = torch.randint(0, 4, (num_samples,), generator=generator)
        z = prior.means[k] + (0.5 * prior.log_variances[k]).exp() * torch.randn(
            num_samples, 2, generator=generator
        )
        ratio = prior().log_prob(z) - aggregate_log_density(z, loc, scale)
        (grad,) = torch.autograd.grad(ratio.mean(), prior.means)
        pathwise += grad / len(seeds)
    assert pathwise.abs().max() > 0.3
    torch.testing.assert_close(score_function, pathwise, atol=0.1, rtol=0)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"posterior_loc": torch.zeros(5, 3)}, "posterior_loc"),
        ({"posterior_scale": torch.ones(4, 2)}, "posterior_scale"),
        ({"posterior_scale": torch.zeros(5, 2)}, "posterior_scale must be positive"),
        ({"num_samples": 0}, "num_samples"),
        ({"chunk_size": 0}, "chunk_size"),
        ({"prior": IsotropicGaussianPrior(2)().expand((5,))}, "prior must have batch_shape"),
    ],
)
def test_inclusive_kl_bad_inputs_raise_value_error(kwargs, match):
    arguments = {
        "prior": IsotropicGaussianPrior(2)(),
        "posterior_loc": torch.zeros(5, 2),
        "posterior_scale": torch.ones(5, 2),
    }
    arguments.update(kwargs)
    with pytest.raises(ValueError, match=match):
        inclusive_kl(**arguments)
