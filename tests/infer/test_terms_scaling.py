"""A term's value scales as the ELBO does under Pyro's features: a capacity with C(t) = 0 on a
latent with a closed-form KL is ``|mean_n KL_n| * N``, which is that latent's own KL in the
ELBO, so the objective with the capacity in place of the KL must be Pyro's
:class:`~pyro.infer.TraceMeanField_ELBO` exactly: under a subsampled plate (N the data-set size),
``poutine.scale``, and particles sequential or vectorised."""
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro import poutine
from pyro.infer import TraceMeanField_ELBO

from ppl_vae.infer import Capacity, LinearCapacity, MeanFieldELBO

DATA = torch.randn(10, 2, generator=torch.Generator().manual_seed(3))


def model(subsample_size: int | None = None, scale: float = 1.0) -> None:
    with pyro.plate("data", 10, subsample_size=subsample_size) as index, poutine.scale(scale=scale):
        z = pyro.sample("z", dist.Normal(torch.zeros(len(index), 2), 1.0).to_event(1))
        pyro.sample("x", dist.Normal(z, 0.5).to_event(1), obs=DATA[index])


def guide(subsample_size: int | None = None, scale: float = 1.0) -> None:
    loc = pyro.param("loc", torch.linspace(-1, 1, 20).reshape(10, 2))
    with pyro.plate("data", 10, subsample_size=subsample_size) as index, poutine.scale(scale=scale):
        pyro.sample("z", dist.Normal(loc[index], 0.4).to_event(1))


def _loss_and_grad(elbo, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    pyro.set_rng_seed(11)
    loss = elbo.differentiable_loss(model, guide, **kwargs)
    (grad,) = torch.autograd.grad(loss, [pyro.param("loc").unconstrained()])
    return loss.detach(), grad


SETTINGS = {
    "one_particle": {},
    "particles": {"num_particles": 3},
    "vectorized_particles": {"num_particles": 3, "vectorize_particles": True, "max_plate_nesting": 1},
    "vectorized_particles_guessed_nesting": {"num_particles": 3, "vectorize_particles": True},
}


@pytest.mark.parametrize("settings", sorted(SETTINGS))
@pytest.mark.parametrize(("subsample_size", "scale"), [(None, 1.0), (4, 1.0), (4, 2.5)],
                         ids=["full_batch", "subsampled", "subsampled_and_scaled"])
def test_a_capacity_scales_as_the_kl_it_replaces(settings, subsample_size, scale):
    guide()
    capacity = Capacity("z", gamma=1.0, capacity=LinearCapacity(0.0, 0.0, 10))
    elbo = MeanFieldELBO(terms=[capacity], **SETTINGS[settings])
    ours = _loss_and_grad(elbo, subsample_size=subsample_size, scale=scale, step=0)
    pyros = _loss_and_grad(TraceMeanField_ELBO(**SETTINGS[settings]), subsample_size=subsample_size, scale=scale)
    torch.testing.assert_close(ours, pyros)


@pytest.mark.parametrize("scale", [1.0, 2.5])
def test_a_terms_logged_value_stays_per_point_under_scaling_and_vectorized_particles(scale):
    """The capacity's KL is logged per point: the mean of the closed-form KLs, whatever the
    plate's scale and however many particles are vectorised."""
    guide()
    expected = torch.distributions.kl_divergence(
        dist.Normal(pyro.param("loc"), 0.4).to_event(1), dist.Normal(torch.zeros(10, 2), 1.0).to_event(1)
    ).mean()
    for settings in ({}, {"num_particles": 4, "vectorize_particles": True, "max_plate_nesting": 1}):
        elbo = MeanFieldELBO(terms=[Capacity("z", gamma=2.0, capacity=LinearCapacity(0.0, 0.0, 10))], **settings)
        elbo.differentiable_loss(model, guide, scale=scale, step=0)
        torch.testing.assert_close(elbo.logged["capacity_z/kl"], expected.detach())


MASK = torch.tensor([True, False, True, True, False, True, True, True, False, True])


def masked_model(mask: torch.Tensor) -> None:
    with pyro.plate("data", 10), poutine.mask(mask=mask):
        z = pyro.sample("z", dist.Normal(torch.zeros(10, 2), 1.0).to_event(1))
        pyro.sample("x", dist.Normal(z, 0.5).to_event(1), obs=DATA)


def masked_guide(mask: torch.Tensor) -> None:
    loc = pyro.param("loc", torch.linspace(-1, 1, 20).reshape(10, 2))
    with pyro.plate("data", 10), poutine.mask(mask=mask):
        pyro.sample("z", dist.Normal(loc, 0.4).to_event(1))


@pytest.mark.parametrize("settings", ["one_particle", "vectorized_particles"])
def test_a_capacity_counts_only_the_points_a_users_mask_keeps_as_the_kl_it_replaces(settings):
    """With C(t) = 0 the capacity is the masked points' KL, which Pyro's ELBO counts: the
    objective is Pyro's exactly, and the logged KL is the mean over the unmasked points."""
    masked_guide(MASK)
    capacity = Capacity("z", gamma=1.0, capacity=LinearCapacity(0.0, 0.0, 10))
    ours = MeanFieldELBO(terms=[capacity], **SETTINGS[settings])
    pyro.set_rng_seed(11)
    loss = ours.differentiable_loss(masked_model, masked_guide, MASK, step=0)
    pyro.set_rng_seed(11)
    expected = TraceMeanField_ELBO(**SETTINGS[settings]).differentiable_loss(masked_model, masked_guide, MASK)
    torch.testing.assert_close(loss, expected)
    kls = torch.distributions.kl_divergence(dist.Normal(pyro.param("loc"), 0.4).to_event(1),
                                            dist.Normal(torch.zeros(10, 2), 1.0).to_event(1))
    torch.testing.assert_close(ours.logged["capacity_z/kl"], kls[MASK].mean().detach())


def test_a_term_that_takes_no_mask_refuses_a_masked_site_by_name():
    from ppl_vae.infer import KLDecomposition

    masked_guide(MASK)
    elbo = MeanFieldELBO(terms=[KLDecomposition("z", data_size=10)])
    with pytest.raises(ValueError, match="the guide's site 'z' is masked \\(poutine.mask\\)"):
        elbo.differentiable_loss(masked_model, masked_guide, MASK)
