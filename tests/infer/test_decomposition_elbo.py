"""DecompositionELBO: the beta-VAE objective at alpha = 0, the divergence factor, gradients,
terms, whole-data-set aggregation and bad input."""
import math

import pyro
import pytest
import torch
from pyro import poutine
from pyro.infer import TraceMeanField_ELBO
from pyro.poutine.messenger import Messenger
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
from ppl_vae.models.vae import VAE
from ppl_vae.nn import MLP, mlp_decoder

PRIORS = {
    "isotropic (analytic KL)": lambda: IsotropicGaussianPrior(2),
    "learned anisotropic (analytic KL)": lambda: AnisotropicGaussianPrior(2, [0.5, -0.5], learn=True),
    "student-t (Monte Carlo KL)": lambda: StudentTPrior(2, df=3.0),
    "mixture (Monte Carlo KL)": lambda: MixtureOfGaussiansPrior.pinwheel(learn=True),
    "sparse (Monte Carlo KL)": lambda: SparsePrior(2, gamma=0.8),
}
X = torch.linspace(-1, 1, 48).reshape(16, 3)


def networks(seed: int = 1) -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(seed)
    return MLP([3, 8], final_activation=nn.ReLU()), mlp_decoder(2, [8], (3,))


def decomposition_vae(prior: nn.Module, **kwargs) -> DecompositionVAE:
    return DecompositionVAE(*networks(), 2, prior, "gaussian", 0.5, **kwargs)


def _only_z(fn):
    """``fn`` with every site but ``z`` unscaled again: wrapped in ``poutine.scale(4)``, it is the
    beta-VAE of Higgins et al. written the Pyro way (beta as the scale of the latent site)."""

    class UnscaleOthers(Messenger):
        def _process_message(self, msg):
            if msg["type"] == "sample" and msg["name"] != "z":
                msg["scale"] = msg["scale"] / 4.0

    return UnscaleOthers()(fn)


def seeded(fn, *args, seed: int = 0, **kwargs):
    pyro.set_rng_seed(seed)
    return fn(*args, **kwargs)


@pytest.mark.parametrize("name", sorted(PRIORS))
def test_alpha_zero_is_the_beta_vae_objective(name):
    prior = PRIORS[name]()
    model = decomposition_vae(prior)
    beta_vae = VAE(*networks(), 2, prior, "gaussian", 0.5)
    beta_vae.load_state_dict(model.state_dict())
    ours, reference = DecompositionELBO(beta=4.0, alpha=0.0), TraceMeanField_ELBO()
    scaled_model, scaled_guide = (poutine.scale(scale=4.0)(_only_z(fn)) for fn in (beta_vae.model, beta_vae.guide))

    assert seeded(ours.loss, model.model, model.guide, X) == pytest.approx(
        seeded(reference.loss, scaled_model, scaled_guide, X), rel=1e-6
    )
    loss = seeded(ours.differentiable_loss, model.model, model.guide, X)
    expected = seeded(reference.differentiable_loss, scaled_model, scaled_guide, X)
    assert torch.allclose(loss, expected)
    grads = torch.autograd.grad(loss, list(model.parameters()), allow_unused=True)
    expected_grads = torch.autograd.grad(expected, list(beta_vae.parameters()), allow_unused=True)
    for g, e in zip(grads, expected_grads, strict=True):
        assert (g is None and e is None) or torch.allclose(g, e, atol=1e-6)


def test_alpha_zero_beta_one_is_pyros_trace_mean_field_elbo():
    model = decomposition_vae(StudentTPrior(2, df=5.0))
    ours = seeded(DecompositionELBO(beta=1.0, alpha=0.0).loss, model.model, model.guide, X)
    assert ours == seeded(TraceMeanField_ELBO().loss, model.model, model.guide, X)


@pytest.mark.parametrize("divergence", ["mmd", "inclusive_kl"])
def test_divergence_enters_loss_as_a_factor_weighted_by_alpha_and_batch_size(divergence):
    model = decomposition_vae(MixtureOfGaussiansPrior.pinwheel())
    with_term = DecompositionELBO(alpha=3.0, divergence=divergence)
    loss = seeded(with_term.loss, model.model, model.guide, X)
    divergence_value = with_term.logged["aggregate_divergence"]
    without = seeded(DecompositionELBO(alpha=0.0, divergence=divergence).loss, model.model, model.guide, X)
    assert divergence_value.abs() > 1e-3
    assert loss == pytest.approx(without + 3.0 * X.shape[0] * float(divergence_value), rel=1e-5)
    differentiable = seeded(with_term.differentiable_loss, model.model, model.guide, X)
    assert float(differentiable.detach()) == pytest.approx(loss, rel=1e-6)


def test_factor_site_is_visible_in_the_model_trace():
    model = decomposition_vae(SparsePrior(2))
    elbo = DecompositionELBO(alpha=2.0, divergence="mmd")
    model_trace, _ = seeded(elbo.traces, model.model, model.guide, X)
    site = model_trace.nodes["aggregate_divergence"]
    assert site["is_observed"] and site["cond_indep_stack"] == ()
    expected = -2.0 * X.shape[0] * elbo.logged["aggregate_divergence"]
    assert torch.allclose(site["log_prob_sum"].detach(), expected)


def test_divergence_is_weighted_by_data_size_when_the_model_has_one():
    model = decomposition_vae(IsotropicGaussianPrior(2), data_size=160)
    with_term = DecompositionELBO(alpha=1.0, divergence="inclusive_kl")
    loss = seeded(with_term.loss, model.model, model.guide, X)
    without = seeded(DecompositionELBO(alpha=0.0, divergence="inclusive_kl").loss, model.model, model.guide, X)
    assert loss - without == pytest.approx(160 * float(with_term.logged["aggregate_divergence"]), rel=1e-4)


@pytest.mark.parametrize("name", sorted(PRIORS))
@pytest.mark.parametrize("alpha", [0.0, 2.5])
def test_loss_decomposes_into_the_logged_terms(name, alpha):
    model = decomposition_vae(PRIORS[name]())
    elbo = DecompositionELBO(beta=1.7, alpha=alpha, divergence="inclusive_kl")
    loss = seeded(elbo.loss, model.model, model.guide, X)
    terms = elbo.logged
    assert set(terms) == {"reconstruction", "kl", "aggregate_divergence"}
    assert all(not t.requires_grad for t in terms.values())
    recomposed = X.shape[0] * (terms["reconstruction"] + 1.7 * terms["kl"] + alpha * terms["aggregate_divergence"])
    assert loss == pytest.approx(float(recomposed), rel=1e-5)


def test_beta_weights_the_kl_and_beta_zero_is_allowed():
    model = decomposition_vae(MixtureOfGaussiansPrior.pinwheel())
    losses = {}
    for beta in (0.0, 1.0, 2.0):
        elbo = DecompositionELBO(beta=beta, alpha=1.0, divergence="inclusive_kl")
        losses[beta] = seeded(elbo.loss, model.model, model.guide, X)
        kl = float(elbo.logged["kl"])
    assert all(math.isfinite(v) for v in losses.values())
    assert losses[2.0] - losses[1.0] == pytest.approx(X.shape[0] * kl, rel=1e-4)
    assert losses[1.0] - losses[0.0] == pytest.approx(X.shape[0] * kl, rel=1e-4)


def prior_grads(model: DecompositionVAE, elbo: DecompositionELBO) -> list[torch.Tensor]:
    loss = seeded(elbo.differentiable_loss, model.model, model.guide, X)
    return torch.autograd.grad(loss, list(model.prior.parameters()))


@pytest.mark.parametrize(
    "prior, divergence",
    [
        (lambda: AnisotropicGaussianPrior(2, [0.3, -0.3], learn=True), "mmd"),
        (lambda: StudentTPrior(2, df=4.0, learn=True), "inclusive_kl"),
        (lambda: MixtureOfGaussiansPrior.pinwheel(learn=True), "inclusive_kl"),
    ],
)
def test_gradients_reach_learned_prior_parameters_through_the_kl_and_the_divergence(prior, divergence):
    model = decomposition_vae(prior())
    through_kl = prior_grads(model, DecompositionELBO(alpha=0.0, divergence=divergence))
    assert all(torch.isfinite(g).all() and g.abs().sum() > 0 for g in through_kl)
    # beta = 0 removes the KL: what is left on the prior comes from the divergence alone.
    through_divergence = prior_grads(model, DecompositionELBO(beta=0.0, alpha=5.0, divergence=divergence))
    assert all(torch.isfinite(g).all() and g.abs().sum() > 0 for g in through_divergence)


def test_whole_data_set_aggregate_matches_the_minibatch_one_when_they_are_the_same_points():
    model = decomposition_vae(MixtureOfGaussiansPrior.pinwheel())
    minibatch = DecompositionELBO(alpha=1.0, divergence="inclusive_kl")
    chunked = DecompositionELBO(alpha=1.0, divergence="inclusive_kl", chunk_size=5)
    expected = seeded(minibatch.loss, model.model, model.guide, X)
    assert seeded(chunked.loss, model.model, model.guide, X, aggregate_data={"x": X}) == pytest.approx(expected, rel=1e-5)



def test_uint8_aggregate_data_is_encoded_on_the_scale_of_the_training_batches():
    """uint8 storage means [0, 255] -> [0, 1] for the training batches; the whole-data
    aggregate must read the same images on the same scale."""
    model = decomposition_vae(IsotropicGaussianPrior(2))
    elbo = DecompositionELBO(alpha=1.0, divergence="inclusive_kl", chunk_size=5)
    levels = torch.tensor([0, 64, 128, 255], dtype=torch.uint8)
    stored = levels[torch.randint(4, X.shape, generator=torch.Generator().manual_seed(1))]
    as_floats = stored.float() / 255.0
    expected = seeded(elbo.loss, model.model, model.guide, X, aggregate_data={"x": as_floats})
    assert seeded(elbo.loss, model.model, model.guide, X, aggregate_data={"x": stored}) == pytest.approx(expected, rel=1e-6)

def test_whole_data_set_aggregate_reaches_the_encoder_through_points_outside_the_batch():
    model = decomposition_vae(IsotropicGaussianPrior(2))
    elbo = DecompositionELBO(beta=0.0, alpha=1.0, divergence="inclusive_kl")
    minus_reference = DecompositionELBO(beta=0.0, alpha=0.0, divergence="inclusive_kl")
    with_aggregate = seeded(elbo.differentiable_loss, model.model, model.guide, X[:4], aggregate_data={"x": X + 3.0})
    reference = seeded(minus_reference.differentiable_loss, model.model, model.guide, X[:4])
    (grad,) = torch.autograd.grad(with_aggregate - reference, [model.head.loc.weight])
    assert grad.abs().sum() > 0


def test_checkpointed_chunks_give_the_gradients_of_encoding_everything_at_once(monkeypatch):
    """Activation checkpointing of the aggregate's chunks bounds memory without changing
    the loss or any gradient (the recomputation replays the same random state)."""
    import ppl_vae.infer.decomposition as decomposition

    model = decomposition_vae(StudentTPrior(2, df=3.0))
    elbo = DecompositionELBO(alpha=1.0, divergence="inclusive_kl", chunk_size=5)
    params = [p for p in model.parameters() if p.requires_grad]

    def loss_and_grads():
        loss = seeded(elbo.differentiable_loss, model.model, model.guide, X[:6], aggregate_data={"x": X + 1.0})
        return loss.detach(), torch.autograd.grad(loss, params)

    checkpointed = loss_and_grads()
    monkeypatch.setattr(decomposition, "checkpoint", lambda fn, *args, **kwargs: fn(*args))
    plain = loss_and_grads()
    torch.testing.assert_close(checkpointed[0], plain[0])
    for ours, reference in zip(checkpointed[1], plain[1], strict=True):
        torch.testing.assert_close(ours, reference)


def test_svi_evaluate_loss_reports_the_trained_objective():
    model = decomposition_vae(SparsePrior(2))
    elbo = DecompositionELBO(alpha=10.0, divergence="mmd")
    svi = pyro.infer.SVI(model.model, model.guide, pyro.optim.Adam({"lr": 1e-3}), elbo)
    assert seeded(svi.evaluate_loss, X) == pytest.approx(float(seeded(elbo.differentiable_loss, model.model, model.guide, X).detach()), rel=1e-6)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"alpha": -1.0}, "alpha must be a finite number >= 0, got -1.0"),
        ({"beta": -0.5}, "beta must be a finite number >= 0, got -0.5"),
        ({"alpha": float("nan")}, "alpha"),
        ({"beta": "1"}, "beta"),
        ({"divergence": "kl"}, "divergence must be one of"),
        ({"chunk_size": 0}, "chunk_size"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DecompositionELBO(**kwargs)


def test_missing_latent_site_raises_value_error():
    model = decomposition_vae(IsotropicGaussianPrior(2))
    with pytest.raises(ValueError, match="no sample site 'w'"):
        DecompositionELBO(alpha=1.0, latent="w").loss(model.model, model.guide, X)


def test_inclusive_kl_needs_a_normal_guide():
    def model(x):
        with pyro.plate("data", x.shape[0]):
            pyro.sample("z", pyro.distributions.Normal(0.0, 1.0).expand([x.shape[0], 2]).to_event(1))

    def guide(x):
        with pyro.plate("data", x.shape[0]):
            pyro.sample("z", pyro.distributions.Laplace(0.0, 1.0).expand([x.shape[0], 2]).to_event(1))

    with pytest.raises(ValueError, match="diagonal Normal"):
        DecompositionELBO(alpha=1.0, divergence="inclusive_kl").loss(model, guide, X)


def test_engine_logs_the_terms():
    from ppl_vae import fit

    model = decomposition_vae(MixtureOfGaussiansPrior.pinwheel())
    result = fit(
        model,
        DecompositionELBO(alpha=1.0, divergence="inclusive_kl"),
        {"x": X},
        steps=4,
        batch_size=16,
        log_every_n_steps=2,
        progress_bar=False,
    )
    assert {"reconstruction", "kl", "aggregate_divergence", "elbo_loss"} <= set(result.history[-1])


@pytest.mark.parametrize(
    "divergence, aggregate_data, match",
    [
        ("mmd", {"x": X}, "inclusive KL only"),
        ("inclusive_kl", {}, "aggregate_data must map"),
        ("inclusive_kl", {"x": X, "y": X[:3]}, "same number of rows"),
    ],
)
def test_a_bad_whole_data_aggregate_raises_value_error_naming_it(divergence, aggregate_data, match):
    model = decomposition_vae(IsotropicGaussianPrior(2))
    elbo = DecompositionELBO(alpha=1.0, divergence=divergence)
    with pytest.raises(ValueError, match=match):
        elbo.differentiable_loss(model.model, model.guide, X, aggregate_data=aggregate_data)


def test_the_whole_data_aggregate_is_an_argument_the_objective_keeps_nothing_of():
    model = decomposition_vae(IsotropicGaussianPrior(2))
    elbo = DecompositionELBO(alpha=1.0, divergence="inclusive_kl", chunk_size=5)
    with_aggregate = seeded(elbo.loss, model.model, model.guide, X[:4], aggregate_data={"x": X + 3.0})
    minibatch = seeded(elbo.loss, model.model, model.guide, X[:4])
    assert with_aggregate != pytest.approx(minibatch, rel=1e-3)
    assert seeded(DecompositionELBO(alpha=1.0, divergence="inclusive_kl").loss, model.model, model.guide, X[:4]) == minibatch


def _sites(loc: torch.Tensor, scale: torch.Tensor, noise: torch.Tensor, particle_plate: bool):
    """What a term reads when the guide draws z = loc + scale * noise (``noise (B, D)``, or
    ``(P, B, D)`` for P particles drawn at once in a plate left of the data plate) and the
    prior is N(0, I)."""
    import pyro.distributions as dist

    from ppl_vae.infer import TermSites

    z = loc + scale * noise

    def plates():
        if particle_plate:
            with pyro.plate("particles", noise.shape[0], dim=-2), pyro.plate("data", noise.shape[-2], dim=-1):
                yield
        else:
            with pyro.plate("data", noise.shape[-2]):
                yield

    def guide():
        for _ in plates():
            pyro.sample("z", dist.Normal(loc, scale).to_event(1), obs=z)

    def model():
        for _ in plates():
            pyro.sample("z", dist.Normal(torch.zeros_like(z), 1.0).to_event(1), obs=z)

    guide_trace, model_trace = poutine.trace(guide).get_trace(), poutine.trace(model).get_trace()
    return TermSites(guide_trace, {k: v for k, v in model_trace.nodes.items() if v["type"] == "sample"}, None, guide)


@pytest.mark.parametrize("divergence", ["mmd", "inclusive_kl"])
def test_the_aggregate_divergence_over_vectorized_particles_is_the_mean_over_each_particles_batch(divergence, monkeypatch):
    """Under ``vectorize_particles`` each particle's samples and prior draws make their own
    aggregate posterior; the value is the mean over particles, as sequential particles give it."""
    from ppl_vae.infer import AggregateDivergence, decomposition

    particles, batch, dim = 3, 8, 2
    generator = torch.Generator().manual_seed(4)
    loc = torch.randn(batch, dim, generator=generator, dtype=torch.float64).requires_grad_()
    scale = (0.3 + torch.rand(batch, dim, generator=generator, dtype=torch.float64)).requires_grad_()
    noise, draws = (torch.randn(particles, batch, dim, generator=generator, dtype=torch.float64) for _ in range(2))
    term = AggregateDivergence("z", 1.0, divergence)

    monkeypatch.setattr(decomposition, "_prior_draws", lambda prior: draws)
    value, _ = term.evaluate(_sites(loc, scale, noise, particle_plate=True))
    each = []
    for p in range(particles):
        monkeypatch.setattr(decomposition, "_prior_draws", lambda prior, p=p: draws[p])
        each.append(term.evaluate(_sites(loc, scale, noise[p], particle_plate=False))[0])
    expected = torch.stack(each).mean()

    torch.testing.assert_close(value, expected)
    for mine, theirs in zip(torch.autograd.grad(value, (loc, scale), retain_graph=True),
                            torch.autograd.grad(expected, (loc, scale)), strict=True):
        torch.testing.assert_close(mine, theirs)


@pytest.mark.parametrize("divergence", ["mmd", "inclusive_kl"])
def test_decomposition_elbo_trains_a_users_model_with_vectorized_particles(divergence):
    """The library's models draw one sample at a time; a user's own model may vectorise particles."""
    import pyro.distributions as dist

    encoder, decoder = nn.Linear(3, 4), nn.Linear(2, 3)

    def model(x):
        pyro.module("decoder", decoder)
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.StudentT(5.0, torch.zeros(2), 1.0).to_event(1))
            pyro.sample("x", dist.Normal(decoder(z), 0.5).to_event(1), obs=x)

    def guide(x):
        pyro.module("encoder", encoder)
        loc, log_scale = encoder(x).chunk(2, dim=-1)
        with pyro.plate("data", x.shape[0]):
            pyro.sample("z", dist.Normal(loc, log_scale.exp()).to_event(1))

    elbo = DecompositionELBO(alpha=1.0, divergence=divergence, num_particles=3, vectorize_particles=True,
                             max_plate_nesting=1)
    loss = elbo.differentiable_loss(model, guide, X)
    assert torch.isfinite(loss) and loss.requires_grad
