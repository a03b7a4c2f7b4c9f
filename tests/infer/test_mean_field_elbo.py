from contextlib import nullcontext

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro import poutine
from pyro.infer import TraceMeanField_ELBO

from ppl_vae.infer.mean_field import MeanFieldELBO

DATA = torch.randn(6, 3)


def model(x: torch.Tensor, subsample_size: int | None = None) -> None:
    """Analytic-KL site z (Normal/Normal), Monte Carlo site w (Student-t prior), an observed
    site, a factor, a subsampled plate with a data-set scale and a mask."""
    loc = pyro.param("prior_loc", torch.zeros(3))
    with pyro.plate("data", 6, subsample_size=subsample_size) as index:
        with poutine.scale(scale=2.5):
            z = pyro.sample("z", dist.Normal(loc, 1.0).to_event(1))
        w = pyro.sample("w", dist.StudentT(4.0, 0.0, 1.0).expand([len(index)]))
        with poutine.mask(mask=index % 2 == 0):
            pyro.sample("x", dist.Normal(z + w.unsqueeze(-1), 0.5).to_event(1), obs=x[index])
    pyro.factor("penalty", -(loc**2).sum())


def guide(x: torch.Tensor, subsample_size: int | None = None) -> None:
    z_loc = pyro.param("z_loc", torch.randn(6, 3))
    w_loc = pyro.param("w_loc", torch.randn(6))
    with pyro.plate("data", 6, subsample_size=subsample_size) as index:
        with poutine.scale(scale=2.5):
            pyro.sample("z", dist.Normal(z_loc[index], 0.7).to_event(1))
        pyro.sample("w", dist.Normal(w_loc[index], 0.3))
        pyro.sample("auxiliary", dist.Normal(torch.zeros(len(index)), 1.0), infer={"is_auxiliary": True})


def _loss_and_grads(elbo, subsample_size: int | None, validate: bool) -> tuple[torch.Tensor, list[torch.Tensor]]:
    pyro.set_rng_seed(3)
    with pyro.validation_enabled(validate):
        loss = elbo.differentiable_loss(model, guide, DATA, subsample_size)
    params = [pyro.param(name).unconstrained() for name in ("prior_loc", "z_loc", "w_loc")]
    return loss, list(torch.autograd.grad(loss, params))


@pytest.mark.parametrize("subsample_size", [None, 4])
@pytest.mark.parametrize("validate", [False, True])
def test_loss_and_gradients_equal_pyros_trace_mean_field_elbo(subsample_size, validate):
    guide(DATA)
    poutine.trace(model).get_trace(DATA)
    ours, our_grads = _loss_and_grads(MeanFieldELBO(num_particles=3), subsample_size, validate)
    theirs, their_grads = _loss_and_grads(TraceMeanField_ELBO(num_particles=3), subsample_size, validate)
    torch.testing.assert_close(ours, theirs)
    for mine, pyros in zip(our_grads, their_grads, strict=True):
        torch.testing.assert_close(mine, pyros)


def test_loss_is_the_differentiable_loss_as_a_float():
    guide(DATA)
    elbo = MeanFieldELBO()
    pyro.set_rng_seed(1)
    value = elbo.loss(model, guide, DATA)
    pyro.set_rng_seed(1)
    assert isinstance(value, float)
    assert value == pytest.approx(float(elbo.differentiable_loss(model, guide, DATA).detach()))


@pytest.mark.parametrize("validate", [False, True])
def test_a_guide_that_misses_a_latent_model_site_fails_naming_it(validate):
    def partial_guide(x, subsample_size=None):
        with pyro.plate("data", 6):
            pyro.sample("z", dist.Normal(torch.zeros(6, 3), 1.0).to_event(1))

    with pyro.validation_enabled(validate), pytest.warns(UserWarning) if validate else nullcontext():
        with pytest.raises(KeyError, match="'w'"):
            MeanFieldELBO().differentiable_loss(model, partial_guide, DATA)


def _objectives() -> dict:
    """Each library objective with a small model and batch of its own."""
    from ppl_vae.distributions import StudentTPrior
    from ppl_vae.infer import ContrastiveELBO, DecompositionELBO, PartedELBO
    from ppl_vae.models import ContrastiveVAE, DecompositionVAE, PartedVAE
    from ppl_vae.nn import MLP, mlp_decoder

    torch.manual_seed(0)
    image = torch.rand(8, 1, 4, 4)
    decomposition = DecompositionVAE(
        MLP([16, 8], final_activation=torch.nn.ReLU()), mlp_decoder(3, [8], (1, 4, 4)), 3, prior=StudentTPrior(3, df=4.0)
    )
    return {
        "decomposition_mmd": (decomposition, DecompositionELBO(beta=2.0, alpha=1.5), {"x": image}),
        "decomposition_inclusive_kl": (
            decomposition, DecompositionELBO(alpha=1.0, divergence="inclusive_kl"), {"x": image}
        ),
        "parted": (PartedVAE.mlp((1, 4, 4), z_dim=2, num_classes=3, u_dims=2, hidden=(8,)), PartedELBO(), {"x": image}),
        "contrastive": (
            ContrastiveVAE.mlp((1, 4, 4), 2, 2, hidden=8, likelihood="gaussian", likelihood_scale=0.3),
            ContrastiveELBO(gamma=1.0, discriminator="mlp"),
            {"target": image, "background": torch.rand(6, 1, 4, 4)},
        ),
    }


@pytest.mark.parametrize("name", ["decomposition_mmd", "decomposition_inclusive_kl", "parted", "contrastive"])
def test_library_objectives_train_the_same_with_and_without_validation(name):
    """Validation only checks: loss, logged terms and every parameter's gradient are the same
    with and without it."""
    model, objective, batch = _objectives()[name]
    results = []
    for validate in (True, False):
        pyro.set_rng_seed(5)
        with pyro.validation_enabled(validate):
            loss = objective.differentiable_loss(model.model, model.guide, **batch, step=3)
        terms = {key: value.clone() for key, value in objective.logged.items()}
        params = [p for p in model.parameters() if p.requires_grad]
        grads = torch.autograd.grad(loss, params, allow_unused=True)
        results.append((loss.detach(), terms, grads))
    (loss_on, terms_on, grads_on), (loss_off, terms_off, grads_off) = results
    torch.testing.assert_close(loss_off, loss_on)
    assert terms_off.keys() == terms_on.keys()
    for key in terms_on:
        torch.testing.assert_close(terms_off[key], terms_on[key])
    assert sum(g is not None for g in grads_on) > 0
    for off, on in zip(grads_off, grads_on, strict=True):
        assert (off is None) == (on is None)
        if on is not None:
            torch.testing.assert_close(off, on)


@pytest.mark.parametrize("name", ["decomposition_mmd", "parted", "contrastive"])
def test_training_loss_returns_the_loss_and_logged_values_of_differentiable_loss_and_leaves_logged_alone(name):
    model, objective, batch = _objectives()[name]
    pyro.set_rng_seed(5)
    loss = objective.differentiable_loss(model.model, model.guide, **batch, step=3)
    logged = dict(objective.logged)
    pyro.set_rng_seed(5)
    result = objective.training_loss(model.model, model.guide, **batch, step=3)
    torch.testing.assert_close(result.loss, loss)
    assert result.loss.requires_grad
    assert result.logged.keys() == logged.keys()
    for key, value in logged.items():
        torch.testing.assert_close(result.logged[key], value)
    assert objective.logged.keys() == logged.keys() and all(objective.logged[k] is v for k, v in logged.items())
    assert set(result.step_arguments) == ({"discriminator"} if name == "contrastive" else set())
