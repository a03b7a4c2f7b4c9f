"""No NaN or inf for extreme but legal inputs, and metric ranges, as properties (hypothesis)."""
import pyro
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from pyro.infer import TraceMeanField_ELBO

from ppl_vae.distributions import MixtureOfGaussiansPrior, SparsePrior, StudentTPrior
from ppl_vae.infer import inclusive_kl, mmd_dimensionwise
from ppl_vae.metrics import clustering_accuracy, silhouette
from ppl_vae.models import VAE
from ppl_vae.nn import ConvDecoder, ConvEncoder

extreme = st.floats(min_value=-1e4, max_value=1e4, allow_nan=False)
tiny_to_huge = st.floats(min_value=1e-6, max_value=1e3)


@settings(max_examples=40, deadline=None)
@given(st.lists(extreme, min_size=2, max_size=2))
def test_heavy_tailed_mixture_and_sparse_priors_have_finite_log_density_far_out(z):
    z = torch.tensor(z)
    for prior in (StudentTPrior(2, df=0.5), MixtureOfGaussiansPrior.pinwheel(), SparsePrior(2, gamma=0.99, sigma0=1e-3)):
        assert torch.isfinite(prior().log_prob(z))


@settings(max_examples=30, deadline=None)
@given(st.floats(min_value=-1e3, max_value=1e3), tiny_to_huge)
def test_inclusive_kl_is_finite_for_far_and_tiny_encodings(shift, scale):
    loc = torch.full((16, 2), shift)
    kl = inclusive_kl(StudentTPrior(2, df=3.0)(), loc, torch.full((16, 2), scale), num_samples=32, seed=0)
    assert torch.isfinite(kl)


@settings(max_examples=30, deadline=None)
@given(st.floats(min_value=-1e3, max_value=1e3), st.floats(min_value=1e-4, max_value=1e3))
def test_mmd_is_finite_and_symmetric_for_distant_or_collapsed_samples(shift, spread):
    generator = torch.Generator().manual_seed(0)
    x = spread * torch.randn(20, 3, generator=generator)
    y = shift + torch.randn(24, 3, generator=generator)
    forward, backward = mmd_dimensionwise(x, y), mmd_dimensionwise(y, x)
    assert torch.isfinite(forward) and torch.allclose(forward, backward, atol=1e-5)


def test_vae_loss_is_finite_for_all_zero_and_all_one_images_and_saturated_decoders():
    torch.manual_seed(0)
    vae = VAE(ConvEncoder(28), ConvDecoder(3, 28), 3)
    with torch.no_grad():
        vae.decoder.deconv[-1].bias.fill_(80.0)
    for x in (torch.zeros(4, 1, 28, 28), torch.ones(4, 1, 28, 28)):
        loss = TraceMeanField_ELBO().differentiable_loss(vae.model, vae.guide, x)
        loss.backward()
        assert torch.isfinite(loss)
        assert all(torch.isfinite(p.grad).all() for p in vae.parameters() if p.grad is not None)
        vae.zero_grad()
        pyro.clear_param_store()


@settings(max_examples=25, deadline=None)
@given(st.integers(min_value=2, max_value=5), st.integers(min_value=0, max_value=10_000))
def test_silhouette_is_in_range_and_clustering_accuracy_ignores_label_names(num_classes, seed):
    generator = torch.Generator().manual_seed(seed)
    labels = torch.arange(60) % num_classes
    embedding = torch.randn(60, 2, generator=generator) + labels.unsqueeze(1).float()
    assert -1.0 <= silhouette(embedding, labels) <= 1.0
    renamed = (labels + 1) % num_classes
    assert clustering_accuracy(renamed, labels) == 1.0
