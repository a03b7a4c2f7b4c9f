import pyro.distributions as dist
import pytest
import torch

from ppl_vae.distributions import FixedScaleLaplace, FixedScaleNormal
from ppl_vae.models.likelihoods import likelihood

PAIRS = [(FixedScaleNormal, dist.Normal), (FixedScaleLaplace, dist.Laplace)]


@pytest.mark.parametrize("fixed, reference", PAIRS)
def test_log_prob_and_its_gradient_equal_torch_distribution_with_tensor_scale(fixed, reference):
    loc = torch.randn(5, 1, 4, 4, requires_grad=True)
    x = torch.randn(5, 1, 4, 4)
    ours = fixed(loc, 0.3).log_prob(x)
    theirs = reference(loc, torch.tensor(0.3)).log_prob(x)
    torch.testing.assert_close(ours, theirs)
    (grad_ours,) = torch.autograd.grad(ours.sum(), loc)
    (grad_theirs,) = torch.autograd.grad(theirs.sum(), loc)
    torch.testing.assert_close(grad_ours, grad_theirs)


@pytest.mark.parametrize("fixed, reference", PAIRS)
def test_log_prob_broadcasts_value_against_loc_like_torch(fixed, reference):
    loc, x = torch.randn(3), torch.randn(2, 3)
    torch.testing.assert_close(fixed(loc, 2.0).log_prob(x), reference(loc, torch.tensor(2.0)).log_prob(x))


@pytest.mark.parametrize("fixed, _", PAIRS)
def test_expand_keeps_the_fixed_scale_and_class(fixed, _):
    base = fixed(torch.zeros(3), 0.5)
    expanded = base.expand((4, 3))
    assert type(expanded) is fixed
    assert expanded.batch_shape == (4, 3)
    torch.testing.assert_close(expanded.log_prob(torch.ones(4, 3))[2], base.log_prob(torch.ones(3)))


@pytest.mark.parametrize("fixed, reference", PAIRS)
def test_sampling_mean_and_entropy_are_the_parents(fixed, reference):
    loc = torch.randn(200, 3)
    ours, theirs = fixed(loc, 0.2), reference(loc, torch.tensor(0.2))
    torch.testing.assert_close(ours.mean, theirs.mean)
    torch.testing.assert_close(ours.entropy(), theirs.entropy())
    torch.manual_seed(0)
    drawn = ours.rsample()
    torch.manual_seed(0)
    torch.testing.assert_close(drawn, theirs.rsample())


@pytest.mark.parametrize("fixed, _", PAIRS)
@pytest.mark.parametrize("scale", [0.0, -1.0, float("nan"), float("inf"), True, torch.tensor(0.3)])
def test_non_positive_or_non_scalar_scale_is_refused(fixed, _, scale):
    with pytest.raises(ValueError, match="scale must be a finite number > 0"):
        fixed(torch.zeros(2), scale)


@pytest.mark.parametrize("name, fixed", [("gaussian", FixedScaleNormal), ("laplace", FixedScaleLaplace)])
def test_library_likelihoods_use_the_fixed_scale_distributions(name, fixed):
    observation = likelihood(name, torch.zeros(2, 1, 3, 3), event_dim=3, scale=0.1)
    assert isinstance(observation.base_dist, fixed)
    assert observation.log_prob(torch.zeros(2, 1, 3, 3)).shape == (2,)
