"""fit trains a user's Pyro model function with its guide, as ``SVI(model, guide, ...)`` takes
them: an autoguide's parameters are created on the first batch and trained in place, entries an
earlier run left in Pyro's parameter store do not take their place, the run resumes exactly, and
the posterior predictive check takes the same pair."""
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer.autoguide import AutoNormal
from test_engine import Interrupt, InterruptAt

from ppl_vae import fit
from ppl_vae.checks import posterior_predictive_check
from ppl_vae.infer import MeanFieldELBO
from ppl_vae.models import VAE, ModelAndGuide, PyroPair, model_and_guide
from ppl_vae.nn import MLP, mlp_decoder

RATES = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])
SETTINGS = dict(steps=300, batch_size=500, lr=0.05, progress_bar=False, log_every_n_steps=50)


def counts_model(x: torch.Tensor) -> None:
    """Counts (B, 5) at five rates every point shares, a batch of the 500 points of ``counts``."""
    log_rate = pyro.sample("log_rate", dist.Normal(torch.zeros(5), 2.0).to_event(1))
    with pyro.plate("points", 500, subsample_size=x.shape[0]):
        pyro.sample("x", dist.Poisson(log_rate.exp()).to_event(1), obs=x)


@pytest.fixture
def counts() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return {"x": torch.poisson(RATES.expand(500, 5), generator=generator)}


def fitted_rates(guide: AutoNormal) -> torch.Tensor:
    return guide.median()["log_rate"].exp()


def test_a_model_function_and_its_autoguide_are_fitted_in_place(counts):
    guide = AutoNormal(counts_model)
    result = fit(counts_model, MeanFieldELBO(), counts, guide=guide, **SETTINGS)
    assert isinstance(result.model, ModelAndGuide) and list(result.model.parts) == [guide]
    assert torch.allclose(fitted_rates(guide), counts["x"].mean(0), rtol=0.05)
    assert result.history[-1]["elbo_loss"] < result.history[0]["elbo_loss"]


def test_entries_an_earlier_run_left_in_pyros_store_neither_replace_the_guides_parameters_nor_change(counts):
    pyro.clear_param_store()
    stale = pyro.param("AutoNormal.locs.log_rate", torch.full((5,), 3.0)).detach().clone()
    try:
        guide = AutoNormal(counts_model)
        fit(counts_model, MeanFieldELBO(), counts, guide=guide, **SETTINGS)
        assert torch.allclose(fitted_rates(guide), counts["x"].mean(0), rtol=0.05)
        assert torch.equal(pyro.param("AutoNormal.locs.log_rate").detach(), stale)
    finally:
        pyro.clear_param_store()


def test_a_model_function_with_its_guide_resumes_exactly(counts, tmp_path):
    settings = {**SETTINGS, "steps": 40, "batch_size": 100, "checkpoint_every_n_steps": 10, "log_every_n_steps": 10}
    whole = AutoNormal(counts_model)
    straight = fit(counts_model, MeanFieldELBO(), counts, guide=whole, **settings)
    with pytest.raises(Interrupt):
        fit(counts_model, MeanFieldELBO(), counts, guide=AutoNormal(counts_model), run_dir=tmp_path / "run",
            callbacks=[InterruptAt(25)], **settings)
    resumed = AutoNormal(counts_model)
    result = fit(counts_model, MeanFieldELBO(), counts, guide=resumed, run_dir=tmp_path / "run", resume=True, **settings)
    assert result.steps == 40 and result.history == straight.history
    assert torch.equal(resumed.locs.log_rate, whole.locs.log_rate)
    assert torch.equal(resumed.scales.log_rate, whole.scales.log_rate)


def test_the_fitted_pair_is_checked_as_its_model_and_guide_are(counts):
    guide = AutoNormal(counts_model)
    result = fit(counts_model, MeanFieldELBO(), counts, guide=guide, **SETTINGS)
    quick = {"num_samples": 10, "marginal_samples": 30, "progress": False}
    as_pair = posterior_predictive_check(result.model, counts, **quick).summary()
    assert posterior_predictive_check(counts_model, counts, guide=guide, **quick).summary() == as_pair
    assert not as_pair["misfit"]


def test_a_guide_beside_a_model_with_its_own_guide_method_is_refused(counts):
    vae = VAE(MLP([5, 8]), mlp_decoder(2, [8], (5,)), latent_dim=2)
    with pytest.raises(TypeError, match=r"^model VAE has its own guide\(\) method; give it alone, or give its model "
                                        r"method \(model.model\) with guide=$"):
        fit(vae, MeanFieldELBO(), counts, guide=AutoNormal(vae.model), **SETTINGS)
    with pytest.raises(TypeError, match=r"model and guide must be callables .* got function and str$"):
        fit(counts_model, MeanFieldELBO(), counts, guide="AutoNormal", **SETTINGS)


def test_every_module_of_a_checked_pair_goes_back_to_its_own_mode(counts):
    guide = AutoNormal(counts_model)
    pair = ModelAndGuide(counts_model, guide)
    pair.guide(**counts)
    guide.locs.train(False)  # one submodule in eval mode, the rest training
    posterior_predictive_check(pair, counts, num_samples=5, marginal_samples=5, progress=False)
    assert [module.training for module in pair.modules()] == [True, True, True, False, True]


def test_a_run_of_a_model_function_reloads_into_a_new_pair_once_its_guide_has_run(counts, tmp_path):
    from ppl_vae import load_run
    from ppl_vae.train import CheckpointError

    guide = AutoNormal(counts_model)
    fit(counts_model, MeanFieldELBO(), counts, guide=guide, run_dir=tmp_path / "run", **{**SETTINGS, "steps": 20})
    fresh = ModelAndGuide(counts_model, AutoNormal(counts_model))
    with pytest.raises(CheckpointError, match=r"parameters the model and guide have not created yet .*locs.log_rate.*"
                                              r"call the guide once on a few data points"):
        load_run(tmp_path / "run", model=fresh)
    fresh.guide(x=counts["x"][:2])
    run = load_run(tmp_path / "run", model=fresh)
    assert torch.equal(run.model.parts[0].locs.log_rate, guide.locs.log_rate)


def test_a_guide_function_whose_parameters_live_only_in_pyros_store_is_refused_naming_them(counts):
    def guide(x):
        loc = pyro.param("loc", torch.zeros(5))
        pyro.sample("log_rate", dist.Normal(loc, 1.0).to_event(1))

    with pytest.raises(ValueError, match=r"creates pyro.param sites \['loc'\] that fit would not train .* an autoguide"):
        fit(counts_model, MeanFieldELBO(), counts, guide=guide, **SETTINGS)


def test_a_library_model_and_a_pair_of_callables_are_pyro_pairs_and_a_bare_function_is_not():
    vae = VAE(MLP([5, 8]), mlp_decoder(2, [8], (5,)), latent_dim=2)
    assert isinstance(vae, PyroPair) and model_and_guide(vae) is vae
    assert isinstance(model_and_guide(counts_model, AutoNormal(counts_model)), PyroPair)
    assert not isinstance(counts_model, PyroPair)


def regression_model(X: torch.Tensor, y: torch.Tensor, data_size: int | None = None) -> None:
    """y = X w + noise, X (N, 3), y (N,); with ``data_size`` its plate says the data's size
    (Pyro's minibatch idiom: the sites of a batch of B points are scaled by data_size / B)."""
    w = pyro.sample("w", dist.Normal(0.0, 3.0).expand([3]).to_event(1))
    sigma = pyro.sample("sigma", dist.HalfNormal(1.0))
    with pyro.plate("points", data_size or X.shape[0], subsample_size=X.shape[0]):
        pyro.sample("y", dist.Normal(X @ w, sigma), obs=y)


@pytest.fixture
def regression() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    X = torch.randn(200, 3, generator=generator)
    return {"X": X, "y": X @ torch.tensor([1.0, -2.0, 0.5]) + 0.3 * torch.randn(200, generator=generator)}


def test_bare_tensors_of_one_length_for_a_model_function_are_refused_before_anything_is_written(regression, tmp_path):
    with pytest.raises(ValueError, match=r"\['X', 'y'\] are tensors of the same length \(200 rows\).*"
                                         r"data=\{'data': \{'X': X, 'y': y\}\}.*data=\{'X': \{'X': X\}, 'y': \{'y': y\}\}"):
        fit(regression_model, MeanFieldELBO(), regression, guide=AutoNormal(regression_model),
            run_dir=tmp_path / "run", **SETTINGS)
    assert not (tmp_path / "run").exists()


def test_rows_given_as_one_group_stay_together_and_a_regression_is_recovered(regression):
    def model(X: torch.Tensor, y: torch.Tensor) -> None:
        regression_model(X, y, data_size=200)

    guide = AutoNormal(model)
    fit(model, MeanFieldELBO(), {"data": regression}, guide=guide,
        **{**SETTINGS, "steps": 600, "batch_size": 50, "lr": 0.02})
    fitted = guide.median()
    assert torch.allclose(fitted["w"], torch.tensor([1.0, -2.0, 0.5]), atol=0.1)
    assert abs(float(fitted["sigma"]) - 0.3) < 0.1


def test_unpaired_groups_of_one_length_given_a_group_each_train_a_model_function(regression):
    def unpaired_model(X: torch.Tensor, y: torch.Tensor) -> None:
        loc = pyro.sample("loc", dist.Normal(0.0, 3.0))
        with pyro.plate("ys", y.shape[0]):
            pyro.sample("y", dist.Normal(loc, 3.0), obs=y)

    result = fit(unpaired_model, MeanFieldELBO(), {"X": {"X": regression["X"]}, "y": {"y": regression["y"]}},
                 guide=AutoNormal(unpaired_model), **{**SETTINGS, "steps": 2})
    assert result.steps == 2


def weights_model(X: torch.Tensor, y: torch.Tensor, data_size: int | None = None) -> None:
    """``regression_model`` at a known noise scale 0.3; with ``data_size`` its plate says the
    data's size, Pyro's minibatch idiom."""
    w = pyro.sample("w", dist.Normal(0.0, 3.0).expand([3]).to_event(1))
    with pyro.plate("points", data_size or X.shape[0], subsample_size=X.shape[0]):
        pyro.sample("y", dist.Normal(X @ w, 0.3), obs=y)


def test_minibatches_that_a_model_with_global_latents_counts_as_the_whole_data_are_warned_about(regression):
    with pytest.warns(UserWarning, match=r"global latents \['w'\] are fitted on batches of 20 of 200 rows, but its "
                                         r"observed sites \['y'\] count each batch once.*"
                                         r"pyro.plate\('points', 200, subsample_size=len\(batch\)\)"):
        fit(weights_model, MeanFieldELBO(), {"data": regression}, guide=AutoNormal(weights_model),
            **{**SETTINGS, "steps": 2, "batch_size": 20})


def test_a_plate_that_says_the_datas_size_gets_the_whole_datas_posterior_from_minibatches(regression, recwarn):
    def model(X: torch.Tensor, y: torch.Tensor) -> None:
        weights_model(X, y, data_size=200)

    guide = AutoNormal(model)
    fit(model, MeanFieldELBO(), {"data": regression}, guide=guide, **{**SETTINGS, "steps": 1500, "batch_size": 20})
    assert not [w for w in recwarn if "global latents" in str(w.message)]
    X = regression["X"]
    exact_sd = (X.T @ X / 0.09 + torch.eye(3) / 9).inverse().diag().sqrt()  # the conjugate posterior's
    ratio = guide.scales.w.detach() / exact_sd  # one batch's posterior would be sqrt(10) = 3.2 times as wide
    assert bool(((ratio > 0.7) & (ratio < 1.35)).all()), ratio


def test_a_network_a_model_function_registers_with_pyro_module_is_trained_when_given_to_the_pair():
    decoder = torch.nn.Linear(2, 4)

    def model(x: torch.Tensor) -> None:
        pyro.module("decoder", decoder)
        with pyro.plate("points", x.shape[0]):
            z = pyro.sample("z", dist.Normal(torch.zeros(2), 1.0).to_event(1))
            pyro.sample("x", dist.Normal(decoder(z), 0.5).to_event(1), obs=x)

    data = {"x": torch.randn(64, 4) * 0.1 + torch.tensor([3.0, -1.0, 0.0, 2.0])}
    with pytest.raises(ValueError, match=r"\['decoder'\] are networks registered with pyro.module: give them to "
                                         r"the pair, fit\(ModelAndGuide\(model, guide, modules=\[...\]\), ...\)$"):
        fit(model, MeanFieldELBO(), data, guide=AutoNormal(model), **{**SETTINGS, "steps": 2})
    pair = ModelAndGuide(model, AutoNormal(model), modules=[decoder])
    fit(pair, MeanFieldELBO(), data, **{**SETTINGS, "steps": 300, "batch_size": 64})
    assert torch.allclose(decoder.bias.detach(), data["x"].mean(0), atol=0.3)  # learnt: was near 0
    with pytest.raises(TypeError, match=r"^modules\[0\] must be an nn.Module, got function$"):
        ModelAndGuide(model, AutoNormal(model), modules=[model])
