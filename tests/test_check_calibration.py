"""Posterior predictive checks are calibrated: a model is not flagged on data it generated and is
flagged on data it did not; ties and statistics without spread are not extreme; only the data
sites are replicated, each with its own statistics; data outside a likelihood's support are
refused; the result goes to ArviZ with what ``az.loo`` needs."""
import numpy as np
import pytest
import torch
from pyro import poutine
from pyro.infer import TraceMeanField_ELBO

from ppl_vae import fit
from ppl_vae.checks import per_class_mass, pixel_means, point_means, point_roughness, posterior_predictive_check
from ppl_vae.models import VAE, ContrastiveVAE
from ppl_vae.models.parted import PartedVAE
from ppl_vae.nn import MLP, mlp_decoder

FEATURES = 16
pytestmark = pytest.mark.filterwarnings("ignore:.*was not registered in the param store.*")


def frozen_bernoulli_vae(seed: int) -> VAE:
    """A VAE whose decoder (weights scaled up, so that its pixels are far from 0.5) and prior are
    fixed; only the guide trains."""
    torch.manual_seed(seed)
    decoder = mlp_decoder(2, [16], (FEATURES,))
    with torch.no_grad():
        for parameter in decoder.parameters():
            parameter.mul_(3.0)
    decoder.requires_grad_(False)
    return VAE(MLP([FEATURES, 32], final_activation=torch.nn.ReLU()), decoder, 2)


def simulated(vae: VAE, n: int = 400) -> torch.Tensor:
    torch.manual_seed(1)
    with torch.no_grad():
        return vae.sample(n)


def check_after_training_the_guide(x: torch.Tensor):
    vae = frozen_bernoulli_vae(0)
    fitted = fit(vae, TraceMeanField_ELBO(), {"x": x}, steps=300, batch_size=100, lr=1e-2, progress_bar=False).model
    statistics = {"point_means": point_means, "pixel_means": pixel_means, "point_roughness": point_roughness}
    return posterior_predictive_check(fitted, {"x": x}, statistics, num_samples=30)


def test_a_model_on_data_it_generated_is_not_flagged():
    result = check_after_training_the_guide(simulated(frozen_bernoulli_vae(0)))
    assert not result.misfit, result.findings
    assert 0.02 < result.discrepancy_p_values["x"] < 0.98
    for name in ("x/point_means", "x/pixel_means", "x/point_roughness"):
        summary = result.checks[name].summary()
        assert 0.3 < summary["p_value"] < 0.7, name
        assert summary["extreme_fraction"] < 0.15, name


def test_the_same_model_on_data_it_did_not_generate_is_flagged():
    result = check_after_training_the_guide(simulated(frozen_bernoulli_vae(5)))
    assert result.misfit
    assert not 0.02 < result.discrepancy_p_values["x"] < 0.98
    assert result.checks["x/pixel_means"].summary()["extreme_fraction"] > 0.5


def test_a_constant_statistic_gets_one_half_and_is_marked_uninformative():
    vae = frozen_bernoulli_vae(0)
    check = posterior_predictive_check(vae, {"x": simulated(vae, 50)}, {"one": lambda x: torch.tensor(1.0)}, num_samples=5)
    assert float(check.checks["x/one"].p_value) == 0.5
    assert check.checks["x/one"].summary() == pytest.approx(
        {"p_value": 0.5, "extreme_fraction": 0.0, "informative_fraction": 0.0, "informative": False, "mean_abs_gap": 0.0}
    )


def test_an_all_tied_pixel_gets_one_half_and_is_uninformative():
    vae = frozen_bernoulli_vae(0)
    with torch.no_grad():
        vae.decoder[0][-1].bias[0] = -100.0  # the first pixel is off in every draw
    x = simulated(vae, 50)
    assert not x[:, 0].any()
    check = posterior_predictive_check(vae, {"x": x}, {"pixel_means": pixel_means}, num_samples=5).checks["x/pixel_means"]
    assert check.p_value[0] == 0.5
    assert not check.informative[0] and check.informative[1:].any()
    assert check.summary()["informative_fraction"] == pytest.approx(1 - (~check.informative).mean())


def parted_model() -> PartedVAE:
    torch.manual_seed(0)
    return PartedVAE.mlp((1, 8, 8), z_dim=2, num_classes=(3,), u_dims=(2,), hidden=(16,))


class RecordsClasses(torch.nn.Module):
    """A PartedVAE whose model records the value of ``c0`` and whether it was observed."""

    def __init__(self, inner: PartedVAE) -> None:
        super().__init__()
        self.inner = inner
        self.classes: list[tuple[torch.Tensor, bool]] = []

    def model(self, **data):
        trace = poutine.trace(self.inner.model).get_trace(**data)
        self.classes.append((trace.nodes["c0"]["value"], trace.nodes["c0"]["is_observed"]))

    def guide(self, **data):
        return self.inner.guide(**data)


def test_labels_stay_observed_in_partedvae_replicates():
    x = (torch.rand(12, 1, 8, 8, generator=torch.Generator().manual_seed(2)) > 0.5).float()
    y = torch.arange(12) % 3
    spy = RecordsClasses(parted_model())
    result = posterior_predictive_check(spy, {"x": x, "y": y}, num_samples=4, marginal_samples=2)
    assert result.sites == ("x",)
    assert all(name.startswith("x/") for name in result.checks)
    assert set(result.discrepancy_p_values) == {"x"}
    assert len(spy.classes) == 1 + 3 + 4  # the trace that finds the sites, the marginal replicates, the per-point ones
    for value, observed in spy.classes:
        assert observed
        assert torch.equal(value.argmax(-1), y)


def test_naming_a_label_site_as_data_replicates_it():
    x = (torch.rand(12, 1, 8, 8, generator=torch.Generator().manual_seed(2)) > 0.5).float()
    result = posterior_predictive_check(parted_model(), {"x": x, "y": torch.arange(12) % 3}, sites=["x", "c0"], num_samples=3)
    assert result.sites == ("x", "c0")
    with pytest.raises(ValueError, match="sites must name observed sites"):
        posterior_predictive_check(parted_model(), {"x": x}, sites=["y"], num_samples=2)


def contrastive_data():
    generator = torch.Generator().manual_seed(0)
    return (torch.rand(20, 6, generator=generator) > 0.5).float(), (torch.rand(10, 6, generator=generator) > 0.5).float()


def test_a_statistic_given_for_one_site_is_not_applied_to_the_others():
    torch.manual_seed(0)
    model = ContrastiveVAE.mlp((6,), hidden=8)
    target, background = contrastive_data()
    mass = per_class_mass(torch.arange(20) % 2)
    result = posterior_predictive_check(
        model, {"target": target, "background": background}, {"target_x": {"mass": mass}}, num_samples=3
    )
    assert result.sites == ("target_x", "background_x")
    assert "target_x/mass" in result.checks and "background_x/mass" not in result.checks
    assert "background_x/feature_0" in result.checks and "target_x/feature_0" not in result.checks


def test_statistics_without_a_site_are_refused_when_several_sites_are_replicated():
    torch.manual_seed(0)
    target, background = contrastive_data()
    with pytest.raises(ValueError, match=r"2 sites are replicated .*\{site: \{name: statistic\}\}"):
        posterior_predictive_check(
            ContrastiveVAE.mlp((6,), hidden=8), {"target": target, "background": background}, {"m": point_means}, num_samples=2
        )


def test_a_bernoulli_model_given_grey_data_names_site_likelihood_and_range():
    grey = torch.rand(10, FEATURES, generator=torch.Generator().manual_seed(0)) * 0.5 + 0.25
    with pytest.raises(ValueError, match=r"site 'x': the Bernoulli likelihood's support is boolean values, but the "
                                         r"observed data range over \[0\.2\d*, 0\.7\d*\].*binari"):
        posterior_predictive_check(frozen_bernoulli_vae(0), {"x": grey}, num_samples=2)


def test_loo_runs_on_the_inference_data():
    az = pytest.importorskip("arviz")
    vae = frozen_bernoulli_vae(0)
    x = simulated(vae, 40)
    idata = posterior_predictive_check(vae, {"x": x}, num_samples=8).to_inference_data()
    assert idata.posterior["z"].shape == (1, 8, 40, 2)
    assert idata.log_likelihood["x"].shape == (1, 8, 40)
    assert idata.posterior_predictive["x.point_means"].shape == (1, 8, 40)
    loo = az.loo(idata, pointwise=True)
    assert np.isfinite(loo.elpd_loo) and loo.loo_i.shape == (40,)
