"""Posterior predictive checks: replicates come from the model, p-values behave."""
import re
import sys

import numpy as np
import pytest
import torch
from pyro.infer import TraceMeanField_ELBO

from ppl_vae import fit
from ppl_vae.checks import mean_intensity, mid_p_value, per_class_mass, pixel_means, posterior_predictive_check
from ppl_vae.models import VAE
from ppl_vae.nn import MLP, mlp_decoder
from ppl_vae.viz import save_ppc_plot


def gaussian_vae(scale: float) -> VAE:
    torch.manual_seed(0)
    return VAE(MLP([6, 16], final_activation=torch.nn.ReLU()), mlp_decoder(2, [16], (6,)), 2, likelihood="gaussian", likelihood_scale=scale)


@pytest.fixture
def x():
    generator = torch.Generator().manual_seed(0)
    signal = torch.randn(200, 2, generator=generator) @ torch.randn(2, 6, generator=generator)
    return signal + 0.3 * torch.randn(200, 6, generator=generator)


def test_fitted_model_passes_and_a_miscalibrated_noise_scale_fails(x):
    fitted = fit(gaussian_vae(0.3), TraceMeanField_ELBO(), {"x": x}, steps=300, batch_size=64, lr=1e-2, progress_bar=False).model
    result = posterior_predictive_check(fitted, {"x": x}, num_samples=30)
    assert not result.misfit, result.findings
    assert 0.02 < result.checks["x/feature_0"].summary()["p_value"] < 0.98
    assert 0.02 < result.discrepancy_p_values["x"] < 0.98
    too_wide = gaussian_vae(5.0)
    too_wide.load_state_dict(fitted.state_dict())
    wide = posterior_predictive_check(too_wide, {"x": x}, num_samples=30)
    assert wide.discrepancy_p_values["x"] == 1.0
    assert wide.misfit and {finding.direction for finding in wide.findings} >= {"too wide"}


def test_user_statistics_vector_statistics_and_replicates(x, tmp_path):
    labels = torch.arange(200) % 4
    result = posterior_predictive_check(
        gaussian_vae(1.0), {"x": x}, statistics={"mass": per_class_mass(labels), "means": pixel_means}, num_samples=5, keep_replicates=2
    )
    assert result.checks["x/mass"].observed.shape == (4,)
    assert result.checks["x/mass"].replicated.shape == (5, 4)
    assert result.checks["x/means"].p_value.shape == (6,)
    assert result.replicates["x"].shape == (2, 200, 6)
    assert not torch.equal(result.replicates["x"][0], x)
    assert save_ppc_plot(result, tmp_path / "ppc.png").stat().st_size > 0
    summary = result.summary()
    assert list(summary)[:3] == ["misfit", "verdict", "findings"]
    assert {key for key in summary if key.startswith("x/")} == {"x/mass", "x/means", "x/discrepancy_p_value"}


def test_same_seed_gives_the_same_check(x):
    a = posterior_predictive_check(gaussian_vae(1.0), {"x": x}, num_samples=4, seed=7).summary()
    b = posterior_predictive_check(gaussian_vae(1.0), {"x": x}, num_samples=4, seed=7).summary()
    assert a == b


def test_bad_check_input_names_the_argument(x):
    with pytest.raises(ValueError, match="num_samples"):
        posterior_predictive_check(gaussian_vae(1.0), {"x": x}, num_samples=1)
    with pytest.raises(ValueError, match="labels has 3 entries"):
        posterior_predictive_check(gaussian_vae(1.0), {"x": x}, statistics={"m": per_class_mass(torch.arange(3))}, num_samples=2)


def test_per_class_mass_names_its_elements_after_the_classes(x):
    labels = torch.arange(200) % 4 + 3
    result = posterior_predictive_check(gaussian_vae(1.0), {"x": x}, statistics={"mass": per_class_mass(labels)}, num_samples=3)
    assert result.checks["x/mass"].element_labels == ("class 3", "class 4", "class 5", "class 6")


def test_p_value_is_the_mid_p_upper_tail(x):
    check = posterior_predictive_check(gaussian_vae(1.0), {"x": x}, {"m": mean_intensity}, num_samples=6).checks["x/m"]
    above, tied = (check.replicated > check.observed).mean(), (check.replicated == check.observed).mean()
    assert check.p_value == pytest.approx(above + 0.5 * tied)


def test_mid_p_value_counts_ties_half():
    replicated = np.array([[0.0, 1.0], [0.0, 2.0], [0.0, 3.0], [0.0, 0.5]])
    assert mid_p_value(replicated, np.array([0.0, 1.0])).tolist() == [0.5, 0.625]


def test_inference_data_round_trip_through_arviz(x, tmp_path):
    az = pytest.importorskip("arviz")
    labels = torch.arange(200) % 3
    statistics = {"mean": mean_intensity, "mass": per_class_mass(labels)}
    result = posterior_predictive_check(gaussian_vae(1.0), {"x": x}, statistics, num_samples=8, keep_replicates=8)
    idata = result.to_inference_data()
    assert idata.posterior_predictive["x"].shape == (1, 8, 200, 6)
    assert idata.posterior_predictive["x.mass"].shape == (1, 8, 3)
    torch.testing.assert_close(torch.as_tensor(idata.observed_data["x"].values), x)
    assert idata.observed_data["x.mean"].values.item() == pytest.approx(float(result.checks["x/mean"].observed))
    az.plot_ppc(idata, var_names=["x"], num_pp_samples=4)
    axes = az.plot_bpv(idata, kind="t_stat", t_stat="mean", var_names=["x.mean"])
    assert axes is not None
    idata.to_netcdf(tmp_path / "ppc.nc")
    again = az.from_netcdf(tmp_path / "ppc.nc")
    assert again.posterior_predictive["x.mass"].shape == (1, 8, 3)


def test_inference_data_leaves_out_sites_whose_replicates_were_not_all_kept(x):
    pytest.importorskip("arviz")
    idata = posterior_predictive_check(gaussian_vae(1.0), {"x": x}, num_samples=4, keep_replicates=2).to_inference_data()
    assert "x" not in idata.posterior_predictive
    assert "x.feature_0" in idata.posterior_predictive


def test_progress_is_a_bar_on_a_terminal_two_timed_lines_elsewhere_and_nothing_when_off(x, capsys, monkeypatch):
    posterior_predictive_check(gaussian_vae(1.0), {"x": x}, num_samples=2, marginal_samples=3)
    started, finished = capsys.readouterr().err.splitlines()
    assert re.fullmatch(r"\[\d\d:\d\d:\d\d\] posterior predictive check: started, 6 replicates", started)
    assert re.fullmatch(r"\[\d\d:\d\d:\d\d\] posterior predictive check: done in \d+\.\d s", finished)
    posterior_predictive_check(gaussian_vae(1.0), {"x": x}, num_samples=2, progress=False)
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    posterior_predictive_check(gaussian_vae(1.0), {"x": x}, num_samples=2)
    err = capsys.readouterr().err
    assert "posterior predictive check" in err and "started" not in err


def test_per_point_statistics_give_arviz_ppc_and_bpv_panels_with_data_and_replicates(x):
    az = pytest.importorskip("arviz")
    import matplotlib

    matplotlib.use("Agg")
    from ppl_vae.checks import point_means

    result = posterior_predictive_check(gaussian_vae(1.0), {"x": x}, {"point_means": point_means}, num_samples=8)
    idata = result.to_inference_data()

    ppc_axes = np.ravel(az.plot_ppc(idata, var_names=["x.point_means"], num_pp_samples=8))
    bpv_axes = np.ravel(az.plot_bpv(idata, var_names=["x.point_means"]))

    drawn = [line for line in ppc_axes[0].get_lines() if len(line.get_xdata()) > 1]
    assert len(drawn) >= 10, "the observed density, one per replicate and their mean"
    assert bpv_axes[0].get_lines() or bpv_axes[0].collections, "a u-value panel with something drawn"


def test_bad_verdict_settings_name_the_argument(x):
    with pytest.raises(ValueError, match="marginal_samples must be an integer >= 2"):
        posterior_predictive_check(gaussian_vae(1.0), {"x": x}, num_samples=2, marginal_samples=1)
    with pytest.raises(ValueError, match=r"level must be a number in \(0, 1\)"):
        posterior_predictive_check(gaussian_vae(1.0), {"x": x}, num_samples=2, level=1.5)
    with pytest.raises(ValueError, match=r"held_out must have the keys of data \['x'\]"):
        posterior_predictive_check(gaussian_vae(1.0), {"x": x}, num_samples=2, held_out={"y": x})
