"""DecompositionVAE: prior validation, shapes, plain SVI with every prior, evaluation accessors."""
import math

import pyro
import pytest
import torch
from pyro.infer import SVI
from torch import nn

from ppl_vae.distributions import (
    AnisotropicGaussianPrior,
    IsotropicGaussianPrior,
    MixtureOfGaussiansPrior,
    SparsePrior,
    StudentTPrior,
)
from ppl_vae.infer.decomposition import DecompositionELBO
from ppl_vae.models.decomposition import DecompositionVAE
from ppl_vae.nn import MLP, mlp_decoder

PRIORS = {
    "isotropic": lambda: IsotropicGaussianPrior(2),
    "learned-anisotropic": lambda: AnisotropicGaussianPrior(2, learn=True),
    "student-t": lambda: StudentTPrior(2, df=3.0),
    "learned-mixture": lambda: MixtureOfGaussiansPrior.pinwheel(learn=True),
    "sparse": lambda: SparsePrior(2, gamma=0.8),
}


def small_model(prior: nn.Module | None = None, latent_dim: int = 2, **kwargs) -> DecompositionVAE:
    encoder = MLP([3, 8], final_activation=nn.ReLU())
    decoder = mlp_decoder(latent_dim, [8], (3,))
    return DecompositionVAE(encoder, decoder, latent_dim, prior, "gaussian", 0.5, **kwargs)


def test_prior_of_another_dimension_is_rejected():
    with pytest.raises(ValueError, match="latent_dim is 2"):
        small_model(IsotropicGaussianPrior(3))


def test_prior_with_batch_shape_is_rejected():
    class BatchedPrior(nn.Module):
        dim = 2

        def forward(self):
            return pyro.distributions.Normal(torch.zeros(4, 2), 1.0).to_event(1)

    with pytest.raises(ValueError, match="batch shape"):
        small_model(BatchedPrior())


def test_default_prior_is_standard_normal():
    model = small_model()
    prior = model.prior()
    assert torch.equal(prior.mean, torch.zeros(2)) and torch.equal(prior.variance, torch.ones(2))


def test_latent_site_has_batch_and_event_shapes_and_no_model_beta():
    model = small_model(StudentTPrior(2, df=4.0))
    x = torch.randn(5, 3)
    guide_trace = pyro.poutine.trace(model.guide).get_trace(x)
    model_trace = pyro.poutine.trace(pyro.poutine.replay(model.model, trace=guide_trace)).get_trace(x)
    site = model_trace.nodes["z"]
    assert site["fn"].batch_shape == (5,) and site["fn"].event_shape == (2,)
    assert site["scale"] == 1.0
    assert guide_trace.nodes["z"]["value"].shape == (5, 2)


def test_posterior_returns_means_and_positive_scales():
    loc, scale = small_model().posterior(torch.randn(7, 3))
    assert loc.shape == scale.shape == (7, 2)
    assert (scale > 0).all()


def test_reconstruction_log_likelihood_is_exact_when_the_decoder_ignores_z():
    model = small_model()
    for p in model.decoder.parameters():
        nn.init.zeros_(p)
    x = torch.randn(4, 3)
    expected = torch.distributions.Normal(0.0, 0.5).log_prob(x).sum(-1)
    got = model.reconstruction_log_likelihood(x, num_samples=3)
    assert got.shape == (4,)
    assert torch.allclose(got, expected, atol=1e-5)


def test_reconstruction_log_likelihood_rejects_zero_samples():
    with pytest.raises(ValueError, match="num_samples"):
        small_model().reconstruction_log_likelihood(torch.randn(2, 3), num_samples=0)


@pytest.mark.parametrize("name", sorted(PRIORS))
def test_plain_svi_loop_lowers_the_loss_with_every_prior(name):
    model = small_model(PRIORS[name]())
    x = torch.randn(32, 3) * 0.5 + 1.0
    svi = SVI(model.model, model.guide, pyro.optim.Adam({"lr": 1e-2}), DecompositionELBO(alpha=1.0, divergence="mmd"))
    losses = [svi.step(x) for _ in range(60)]
    assert all(math.isfinite(v) for v in losses)
    assert sum(losses[-10:]) < sum(losses[:10])
