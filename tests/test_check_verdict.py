"""The check's verdict tells a fit from a misfit: on data simulated from the fitted model it says
"no misfit" (calibration, for vectors, images and counts, and around a global latent, with the
library's models and a user's model and guide as callables); on the pinwheel's too wide, too narrow
and too-small-latent fits, on a Poisson fit to overdispersed counts and on a Gaussian fit to
binary images it says "misfit", each finding naming its direction."""
import sys
from pathlib import Path

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import SVI, TraceMeanField_ELBO
from pyro.optim import Adam
from torch import nn

from ppl_vae.checks import posterior_predictive_check
from ppl_vae.models import VAE
from ppl_vae.nn import MLP, mlp_decoder

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments" / "criticism"))
import pinwheel  # noqa: E402

SIMULATIONS = 20
QUICK = {"num_samples": 10, "marginal_samples": 30, "progress": False}


class LinearGaussian(nn.Module):
    """x = W z + sigma eps with z ~ N(0, I): a user's model whose guide is the exact posterior
    N(Sigma W^T x / sigma^2, Sigma), Sigma = (I + W^T W / sigma^2)^-1."""

    def __init__(self, weight: torch.Tensor, sigma: float) -> None:
        super().__init__()
        self.weight, self.sigma = weight, sigma
        precision = torch.eye(weight.shape[1]) + weight.T @ weight / sigma**2
        self.covariance = torch.linalg.inv(precision)

    def model(self, x: torch.Tensor) -> None:
        with pyro.plate("points", x.shape[0]):
            z = pyro.sample("z", dist.Normal(0.0, 1.0).expand([self.weight.shape[1]]).to_event(1))
            pyro.sample("x", dist.Normal(z @ self.weight.T, self.sigma).to_event(1), obs=x)

    def guide(self, x: torch.Tensor) -> None:
        with pyro.plate("points", x.shape[0]):
            pyro.sample("z", dist.MultivariateNormal(x @ self.weight @ self.covariance / self.sigma**2, self.covariance))

    def simulate(self, n: int) -> torch.Tensor:
        z = torch.randn(n, self.weight.shape[1])
        return z @ self.weight.T + self.sigma * torch.randn(n, self.weight.shape[0])


class PoissonVAE(nn.Module):
    """A user's count model: x_nf ~ Poisson(exp(decoder(z_n))), z_n ~ N(0, I), with an amortised
    Gaussian guide; ``overdispersion`` > 0 draws simulated counts from a negative binomial
    with the same means instead (``simulate``)."""

    def __init__(self, features: int, latent: int = 2) -> None:
        super().__init__()
        self.latent = latent
        self.decoder = nn.Linear(latent, features)
        self.encoder = nn.Sequential(nn.Linear(features, 32), nn.ReLU(), nn.Linear(32, 2 * latent))

    def model(self, x: torch.Tensor) -> None:
        pyro.module("decoder", self.decoder)
        with pyro.plate("points", x.shape[0]):
            z = pyro.sample("z", dist.Normal(0.0, 1.0).expand([self.latent]).to_event(1))
            pyro.sample("x", dist.Poisson(self.decoder(z).exp()).to_event(1), obs=x)

    def guide(self, x: torch.Tensor) -> None:
        pyro.module("encoder", self.encoder)
        loc, log_scale = self.encoder(torch.log1p(x)).chunk(2, -1)
        with pyro.plate("points", x.shape[0]):
            pyro.sample("z", dist.Normal(loc, log_scale.exp()).to_event(1))

    @torch.no_grad()
    def simulate(self, n: int, overdispersion: float = 0.0) -> torch.Tensor:
        rate = self.decoder(torch.randn(n, self.latent)).exp()
        if overdispersion == 0:
            return dist.Poisson(rate).sample()
        concentration = 1 / overdispersion
        return dist.GammaPoisson(concentration, concentration / rate).sample()


def train(model: nn.Module, x: torch.Tensor, steps: int, lr: float = 1e-2) -> nn.Module:
    pyro.clear_param_store()
    svi = SVI(model.model, model.guide, Adam({"lr": lr}), TraceMeanField_ELBO())
    for _ in range(steps):
        svi.step(x)
    return model


def poisson_vae() -> PoissonVAE:
    torch.manual_seed(0)
    model = PoissonVAE(features=12)
    with torch.no_grad():
        model.decoder.bias.fill_(1.5)
    model.decoder.requires_grad_(False)
    return train(model, model.simulate(300), steps=400)


def bernoulli_image_vae() -> VAE:
    """A Bernoulli VAE of 6x6 images whose decoder is fixed (weights scaled up, pixels far from
    1/2) and whose guide is trained on its own draws."""
    torch.manual_seed(0)
    decoder = mlp_decoder(2, [16], (1, 6, 6))
    with torch.no_grad():
        for parameter in decoder.parameters():
            parameter.mul_(3.0)
    decoder.requires_grad_(False)
    vae = VAE(MLP([36, 32], final_activation=nn.ReLU()), decoder, 2)
    with torch.no_grad():
        x = vae.sample(300)
    return train(vae, x, steps=300)


def false_alarms(model: nn.Module, simulate) -> int:
    """How many of SIMULATIONS data sets drawn from ``model`` it calls a misfit."""
    alarms = 0
    for seed in range(SIMULATIONS):
        torch.manual_seed(100 + seed)
        with torch.no_grad():
            x = simulate()
        alarms += posterior_predictive_check(model, {"x": x}, seed=seed, **QUICK).misfit
    return alarms


def test_vectors_simulated_from_the_model_are_called_a_fit_at_least_nine_times_in_ten():
    torch.manual_seed(0)
    model = LinearGaussian(torch.randn(5, 2), sigma=0.5)
    assert false_alarms(model, lambda: model.simulate(200)) <= SIMULATIONS // 10


def test_images_simulated_from_the_model_are_called_a_fit_at_least_nine_times_in_ten():
    vae = bernoulli_image_vae()
    assert false_alarms(vae, lambda: vae.sample(200)) <= SIMULATIONS // 10


def test_counts_simulated_from_the_model_are_called_a_fit_at_least_nine_times_in_ten():
    model = poisson_vae()
    assert false_alarms(model, lambda: model.simulate(200)) <= SIMULATIONS // 10


def test_a_poisson_fit_to_overdispersed_counts_is_a_misfit_too_narrow_and_less_dispersed():
    model = poisson_vae()
    torch.manual_seed(1)
    counts = model.simulate(200, overdispersion=0.5)
    result = posterior_predictive_check(model, {"x": counts}, **QUICK)
    assert result.misfit
    directions = {(finding.statistic, finding.direction) for finding in result.findings}
    assert ("features", "too narrow") in directions
    assert ("point_dispersion", "higher") in directions
    assert "more dispersed" in str(next(f for f in result.findings if f.statistic == "point_dispersion"))


def test_a_gaussian_fit_to_binary_images_is_a_misfit():
    torch.manual_seed(0)
    images = bernoulli_image_vae().sample(300)
    gaussian = VAE(MLP([36, 32], final_activation=nn.ReLU()), mlp_decoder(2, [16], (1, 6, 6)), 2,
                   likelihood="gaussian", likelihood_scale=0.3)
    train(gaussian, images, steps=500)
    result = posterior_predictive_check(gaussian, {"x": images}, **QUICK)
    assert result.misfit
    assert any(finding.statistic == "features" for finding in result.findings)


@pytest.fixture(scope="module")
def pinwheel_checks():
    return pinwheel.check_fits()


@pytest.mark.parametrize(("fit", "direction"), [("1-d latent", "too narrow"), ("too narrow", "too narrow"), ("too wide", "too wide")])
def test_pinwheel_misfits_are_found_with_their_direction(pinwheel_checks, fit, direction):
    result = pinwheel_checks[fit]
    assert result.misfit and result.verdict.startswith("misfit: ")
    assert direction in {finding.direction for finding in result.findings}


def test_the_good_pinwheel_fit_is_no_misfit(pinwheel_checks):
    result = pinwheel_checks["good"]
    assert not result.misfit and result.findings == []
    assert result.verdict.startswith("no misfit found")
    assert {"marginal", "per-point", "held-out marginal", "held-out per-point"} == {test.check for test in result.tests}


def test_the_verdict_repeats_with_the_seed():
    torch.manual_seed(0)
    model = LinearGaussian(torch.randn(5, 2), sigma=0.5)
    x = model.simulate(100)
    first = posterior_predictive_check(model, {"x": x}, seed=3, **QUICK).summary()
    assert posterior_predictive_check(model, {"x": x}, seed=3, **QUICK).summary() == first
    assert first["verdict"].startswith("no misfit found") and first["misfit"] is False


def test_the_criticism_page_shows_the_pinwheel_table_of_the_script(pinwheel_checks):
    page = (Path(__file__).resolve().parents[1] / "docs" / "criticism.md").read_text()
    start = page.index("| fit | misfit | directions found |")
    shown = page[start:page.index("\n\n", start)]
    assert pinwheel.table_rows(shown) == pinwheel.table_rows(pinwheel.table(pinwheel_checks))


class SharedMean(nn.Module):
    """A user's model with a global latent: x_n ~ N(mu, sigma^2 I) with one mu ~ N(0, 3^2 I)
    shared by all points, and its exact posterior as the guide."""

    def __init__(self, features: int = 3, sigma: float = 1.0) -> None:
        super().__init__()
        self.features, self.sigma = features, sigma

    def model(self, x: torch.Tensor) -> None:
        mu = pyro.sample("mu", dist.Normal(torch.zeros(self.features), 3.0).to_event(1))
        with pyro.plate("points", x.shape[0]):
            pyro.sample("x", dist.Normal(mu, self.sigma).to_event(1), obs=x)

    def guide(self, x: torch.Tensor) -> None:
        precision = 1 / 9 + x.shape[0] / self.sigma**2
        pyro.sample("mu", dist.Normal(x.sum(0) / self.sigma**2 / precision, precision**-0.5).to_event(1))

    def simulate(self, n: int, sigma: float | None = None) -> torch.Tensor:
        mu = 3.0 * torch.randn(self.features)
        return mu + (self.sigma if sigma is None else sigma) * torch.randn(n, self.features)


def test_data_simulated_from_a_model_with_a_global_latent_are_called_a_fit_at_least_nine_times_in_ten():
    """The shared mean stands at its posterior mean in the marginal replicates: drawn from its
    prior (a prior predictive check), every one of these data sets would be a misfit."""
    model = SharedMean()
    assert false_alarms(model, lambda: model.simulate(200)) <= SIMULATIONS // 10


def test_a_model_with_a_global_latent_is_a_misfit_on_data_twice_as_spread_as_it_says():
    model = SharedMean()
    torch.manual_seed(1)
    result = posterior_predictive_check(model, {"x": model.simulate(200, sigma=2.0)}, **QUICK)
    assert result.misfit and "too narrow" in {finding.direction for finding in result.findings}


def counts_model(x: torch.Tensor) -> None:
    """A user's Pyro model as a plain function: counts at five rates every point shares."""
    log_rate = pyro.sample("log_rate", dist.Normal(torch.zeros(5), 2.0).to_event(1))
    with pyro.plate("points", x.shape[0]):
        pyro.sample("x", dist.Poisson(log_rate.exp()).to_event(1), obs=x)


def test_a_users_model_function_with_an_autoguide_is_checked_with_guide_and_told_from_overdispersed_counts():
    from pyro.infer.autoguide import AutoNormal

    rates = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])
    torch.manual_seed(1)
    counts = dist.Poisson(rates).sample((300,))
    pyro.clear_param_store()
    guide = AutoNormal(counts_model)
    svi = SVI(counts_model, guide, Adam({"lr": 0.05}), TraceMeanField_ELBO())
    for _ in range(1000):
        svi.step(counts)
    assert not posterior_predictive_check(counts_model, {"x": counts}, guide=guide, **QUICK).misfit
    assert guide.training  # the autoguide is put back in training mode after the check
    overdispersed = dist.GammaPoisson(2.0, 2.0 / rates).sample((300,))
    result = posterior_predictive_check(counts_model, {"x": overdispersed}, guide=guide, **QUICK)
    assert result.misfit and "too narrow" in {finding.direction for finding in result.findings}


def test_counts_simulated_right_after_seeding_with_the_checks_own_seed_are_called_a_fit():
    """The check's streams derive from ``seed``: seeded with 0 itself, the replicates of these
    counts replayed the data's draws, and the nearest-neighbour test called the fit a misfit."""
    from pyro.infer.autoguide import AutoNormal

    pyro.set_rng_seed(0)
    counts = dist.Poisson(torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])).sample((300,))
    pyro.clear_param_store()
    guide = AutoNormal(counts_model)
    svi = SVI(counts_model, guide, Adam({"lr": 0.05}), TraceMeanField_ELBO())
    for _ in range(1000):
        svi.step(counts)
    assert not posterior_predictive_check(counts_model, {"x": counts}, guide=guide, seed=0, **QUICK).misfit


def test_a_negative_or_fractional_seed_is_refused_naming_seed():
    for seed in (-1, 0.5):
        with pytest.raises(ValueError, match=r"seed must be an integer >= 0"):
            posterior_predictive_check(counts_model, {"x": torch.ones(4, 5)}, guide=counts_model, seed=seed, **QUICK)


def test_a_model_and_guide_given_as_callables_are_checked_as_the_module_that_holds_them():
    torch.manual_seed(0)
    model = LinearGaussian(torch.randn(5, 2), sigma=0.5)
    x = model.simulate(100)
    as_module = posterior_predictive_check(model, {"x": x}, seed=3, **QUICK).summary()
    assert posterior_predictive_check(model.model, {"x": x}, guide=model.guide, seed=3, **QUICK).summary() == as_module


def test_a_model_function_without_its_guide_is_refused_naming_guide():
    with pytest.raises(TypeError, match=r"given with its guide \(guide=\); got function 'counts_model', which has no "
                                        r"model\(\) method"):
        posterior_predictive_check(counts_model, {"x": torch.ones(4, 5)}, **QUICK)
    with pytest.raises(TypeError, match="model and guide must be callables"):
        posterior_predictive_check(counts_model, {"x": torch.ones(4, 5)}, guide="AutoNormal", **QUICK)


def test_the_latents_of_a_model_whose_data_lie_in_no_plate_are_all_drawn_from_the_prior():
    from pyro import poutine

    from ppl_vae.infer.observations import global_latents

    def plated(x):
        mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
        with pyro.plate("points", x.shape[0]):
            z = pyro.sample("z", dist.Normal(mu, 1.0))
            pyro.sample("x", dist.Normal(z, 1.0), obs=x)

    def unplated(x):
        z = pyro.sample("z", dist.Normal(0.0, 1.0).expand([x.shape[0]]).to_event(1))
        pyro.sample("x", dist.Normal(z, 1.0).to_event(1), obs=x)

    x = torch.zeros(4)
    assert global_latents(poutine.trace(plated).get_trace(x), ["x"]) == {"mu"}
    assert global_latents(poutine.trace(unplated).get_trace(x), ["x"]) == frozenset()
