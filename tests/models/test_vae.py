"""The baseline VAE: Pyro sites and shapes, beta in the objective, data-size scaling, plain SVI training."""
import pyro
import pytest
import torch
from pyro import poutine
from pyro.infer import SVI, Trace_ELBO, TraceMeanField_ELBO

from ppl_vae.distributions import StudentTPrior
from ppl_vae.infer import MeanFieldELBO
from ppl_vae.models import VAE
from ppl_vae.nn import MLP, ConvDecoder, ConvEncoder, mlp_decoder


def mlp_vae(**kwargs) -> VAE:
    torch.manual_seed(0)
    return VAE(MLP([6, 16], final_activation=torch.nn.ReLU()), mlp_decoder(2, [16], (6,)), 2, likelihood="gaussian", likelihood_scale=1.0, **kwargs)


def test_model_and_guide_have_matching_latent_and_observed_sites():
    vae = VAE(ConvEncoder(28), ConvDecoder(3, 28), 3)
    x = (torch.rand(5, 1, 28, 28) > 0.5).float()
    guide = poutine.trace(vae.guide).get_trace(x)
    model = poutine.trace(poutine.replay(vae.model, trace=guide)).get_trace(x)
    assert guide.nodes["z"]["value"].shape == (5, 3)
    assert model.nodes["x"]["is_observed"] and model.nodes["x"]["fn"].event_shape == (1, 28, 28)
    model.compute_log_prob()
    assert model.nodes["x"]["log_prob"].shape == (5,)


def test_the_objectives_beta_scales_the_kl_term_only():
    x = torch.randn(8, 6)
    base = mlp_vae()
    pyro.set_rng_seed(1)
    loss_1 = MeanFieldELBO().loss(base.model, base.guide, x)
    pyro.set_rng_seed(1)
    assert loss_1 == pytest.approx(TraceMeanField_ELBO().loss(base.model, base.guide, x), rel=1e-6)
    pyro.set_rng_seed(1)
    loss_4 = MeanFieldELBO(beta=4.0).loss(base.model, base.guide, x)
    guide = poutine.trace(base.guide).get_trace(x)
    model = poutine.trace(poutine.replay(base.model, trace=guide)).get_trace(x)
    kl = torch.distributions.kl_divergence(guide.nodes["z"]["fn"], model.nodes["z"]["fn"]).sum().item()
    assert loss_4 - loss_1 == pytest.approx(3 * kl, rel=1e-4)


def test_data_size_scales_the_minibatch_to_the_whole_data_set():
    x = torch.randn(8, 6)
    plain, scaled = mlp_vae(), mlp_vae(data_size=80)
    pyro.set_rng_seed(0)
    small = TraceMeanField_ELBO().loss(plain.model, plain.guide, x)
    pyro.set_rng_seed(0)
    assert TraceMeanField_ELBO().loss(scaled.model, scaled.guide, x) == pytest.approx(10 * small, rel=1e-5)


def test_plain_svi_trains_with_any_elbo_and_a_non_gaussian_prior():
    x = torch.randn(64, 2) @ torch.randn(2, 6)
    for elbo in (Trace_ELBO(), TraceMeanField_ELBO()):
        pyro.clear_param_store()
        vae = mlp_vae(prior=StudentTPrior(2, df=3.0))
        svi = SVI(vae.model, vae.guide, pyro.optim.Adam({"lr": 1e-2}), elbo)
        losses = [svi.step(x) for _ in range(80)]
        assert sum(losses[-10:]) < 0.8 * sum(losses[:10])


def test_accessors_return_data_shaped_tensors():
    vae = VAE(ConvEncoder(28), ConvDecoder(3, 28), 3)
    x = torch.rand(4, 1, 28, 28)
    assert vae.encode(x).shape == (4, 3)
    reconstruction = vae.reconstruct(x)
    assert reconstruction.shape == x.shape and reconstruction.min() >= 0 and reconstruction.max() <= 1
    assert vae.sample(6).shape == (6, 1, 28, 28)


def test_bad_settings_name_the_argument():
    with pytest.raises(ValueError, match="beta"):
        MeanFieldELBO(beta=-1.0)
    with pytest.raises(ValueError, match="prior has dimension 3"):
        mlp_vae(prior=StudentTPrior(3, df=3.0))
    with pytest.raises(ValueError, match="likelihood must be one of"):
        VAE(ConvEncoder(28), ConvDecoder(3, 28), 3, likelihood="poisson")
    with pytest.raises(ValueError, match="likelihood_scale"):
        VAE(ConvEncoder(28), ConvDecoder(3, 28), 3, likelihood="laplace")
