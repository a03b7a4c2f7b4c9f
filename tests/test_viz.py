"""Pictures: plot_* return Figures (into a given ax or a new pyplot figure), save_* write files,
nothing switches matplotlib's backend, training curves read a run's metrics.csv."""
import subprocess
import sys

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from ppl_vae.checks import PPCResult, StatisticCheck
from ppl_vae.viz import (
    plot_density_comparison,
    plot_image_grid,
    plot_latent_scatter,
    plot_ppc,
    plot_reconstructions,
    plot_training_curves,
    plot_traversals,
    save_image_grid,
    save_ppc_plot,
    save_training_curves,
)


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_importing_the_library_leaves_the_backend_alone():
    code = (
        "import matplotlib; matplotlib.use('svg'); import ppl_vae.viz, ppl_vae.recipes, ppl_vae.checks; "
        "print(matplotlib.get_backend())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "svg"


def test_plot_functions_draw_into_the_given_ax_and_return_its_figure():
    fig, axes = plt.subplots(1, 4)
    images = torch.rand(4, 1, 6, 6)
    assert plot_image_grid(images, nrow=2, ax=axes[0]) is fig
    assert plot_reconstructions(images, images, ax=axes[1]) is fig
    assert plot_traversals(lambda z: torch.rand(z.shape[0], 1, 6, 6), torch.zeros(3), ax=axes[2]) is fig
    assert plot_latent_scatter(torch.randn(10, 2), torch.arange(10) % 2, ax=axes[3]) is fig
    assert all(ax.has_data() for ax in axes)


def test_plot_functions_without_ax_make_a_pyplot_figure():
    fig = plot_density_comparison(torch.randn(200, 2), torch.randn(200, 2))
    assert isinstance(fig, Figure) and fig in map(plt.figure, plt.get_fignums())
    assert len(fig.axes) >= 2


def test_save_functions_write_files_and_leave_pyplot_empty(tmp_path):
    path = save_image_grid(tmp_path / "sub" / "grid.png", torch.rand(4, 1, 6, 6), nrow=2, title="t")
    assert path.stat().st_size > 0 and plt.get_fignums() == []


def write_metrics(path, rows):
    path.write_text("\n".join(rows) + "\n")


def test_training_curves_from_a_file_skip_the_steps_where_a_term_was_not_logged(tmp_path):
    write_metrics(tmp_path / "metrics.csv", ["step,kl,loss", "10,1.5,", "20,,3.0", "30,0.5,2.0"])
    fig, ax = plt.subplots()
    plot_training_curves(tmp_path, ax=ax)
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines["kl"].get_xdata()) == [10, 30] and list(lines["kl"].get_ydata()) == [1.5, 0.5]
    assert list(lines["loss"].get_xdata()) == [20, 30]


def test_training_curves_errors_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="metrics.csv"):
        plot_training_curves(tmp_path)
    write_metrics(tmp_path / "metrics.csv", ["a,b", "1,2"])
    with pytest.raises(ValueError, match="metrics.csv is not a metrics table"):
        plot_training_curves(tmp_path / "metrics.csv")


def test_training_curves_have_one_panel_per_term_and_log_scale_across_decades(tmp_path):
    rows = ["step,elbo_loss,kl"] + [f"{s},{1e4 / s},{0.5 + 0.01 * s}" for s in range(1, 101)]
    write_metrics(tmp_path / "metrics.csv", rows)
    fig = plot_training_curves(tmp_path)
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == ["elbo_loss", "kl"]
    assert [ax.get_yscale() for ax in panels] == ["log", "linear"]
    assert save_training_curves(tmp_path, tmp_path / "pictures" / "curves.png").stat().st_size > 0


def test_training_curves_into_one_ax_take_fit_history():
    history = [{"step": 1, "loss": 3.0, "kl": 1.0}, {"step": 2, "loss": 2.0, "kl": 0.5}]
    fig, ax = plt.subplots()
    assert plot_training_curves(history, ax=ax) is fig
    assert sorted(line.get_label() for line in ax.get_lines()) == ["kl", "loss"]


def test_training_curves_without_terms_say_so():
    with pytest.raises(ValueError, match="no logged term"):
        plot_training_curves([{"step": 1}])


def ppc_result(classes: int) -> PPCResult:
    rng = np.random.default_rng(0)
    replicated = rng.normal(size=(20, classes)) + np.arange(classes) * 100
    observed = replicated.mean(0) + 0.5
    return PPCResult(checks={
        "x/mean": StatisticCheck(np.array(0.1), rng.normal(size=20), np.array(0.4)),
        "x/per_class_mass": StatisticCheck(observed, replicated, (replicated >= observed).mean(0),
                                           tuple(f"class {k}" for k in range(classes))),
        "x/pixel_means": StatisticCheck(rng.normal(size=50), rng.normal(size=(20, 50)), rng.uniform(size=50)),
    })


def test_ppc_panel_of_a_few_classes_shows_each_class_with_its_p_value(tmp_path):
    fig = plot_ppc(ppc_result(3))
    per_class = fig.axes[1]
    labels = [tick.get_text() for tick in per_class.get_xticklabels()]
    assert labels[0].startswith("class 0\np=") and len(labels) == 3
    replicate_points = next(c for c in per_class.collections if c.get_label() == "replicates").get_offsets()
    assert len(replicate_points) == 20 * 3  # every replicate of every class, not one mean point
    assert np.ptp(np.asarray(replicate_points)[:, 1]) > 1  # standardised: classes 100 apart share one axis
    assert save_ppc_plot(ppc_result(3), tmp_path / "ppc.png").stat().st_size > 0


def test_ppc_into_given_axes_needs_one_per_statistic():
    fig, axes = plt.subplots(1, 2)
    with pytest.raises(ValueError, match="axes must hold 3 Axes"):
        plot_ppc(ppc_result(3), axes=axes)



def test_parted_pictures_are_written_and_drawn_into_given_axes(tmp_path):
    from ppl_vae.models.parted import PartedVAE
    from ppl_vae.viz.parted import (
        plot_attribute_transfer,
        plot_class_priors,
        plot_class_samples,
        plot_class_traversals,
        save_parted_pictures,
    )

    torch.manual_seed(0)
    model = PartedVAE.mlp((1, 8, 8), z_dim=2, num_classes=3, u_dims=2, hidden=(16,))
    x = torch.rand(12, 1, 8, 8)
    save_parted_pictures(model, x, tmp_path)
    assert {p.name for p in tmp_path.iterdir()} == {
        "reconstructions.png", "class_traversals.png", "latent_traversals.png",
        "attribute_transfer.png", "class_samples.png", "class_priors.png",
    }
    assert plt.get_fignums() == [] and model.training
    fig, axes = plt.subplots(1, 4)
    assert plot_class_traversals(model, x[:4], ax=axes[0]) is fig
    assert plot_class_samples(model, 2, ax=axes[1]) is fig
    assert plot_attribute_transfer(model, x, ax=axes[2]) is fig
    assert plot_class_priors(model, axes=[axes[3]]) is fig


def test_contrastive_pictures_are_written(tmp_path):
    from ppl_vae.models.contrastive import ContrastiveVAE
    from ppl_vae.viz.contrastive import for_display, save_contrastive_pictures

    torch.manual_seed(0)
    model = ContrastiveVAE.mlp((1, 8, 8), 2, 2, hidden=16, likelihood="gaussian", likelihood_scale=0.5)
    save_contrastive_pictures(model, torch.rand(16, 1, 8, 8), torch.arange(16) % 3, tmp_path)
    assert {p.name for p in tmp_path.iterdir()} == {"salient.png", "denoised.png", "salient_samples.png"}
    shown = for_display(torch.full((2, 1, 4, 4), 0.25))
    assert torch.allclose(shown, torch.ones_like(shown))


def test_traversal_rows_are_named_after_their_dimensions():
    decode = lambda z: torch.sigmoid(z.sum(1)).reshape(-1, 1, 1, 1).expand(-1, 1, 4, 4)  # noqa: E731
    fig = plot_traversals(decode, torch.zeros(3), dims=[0, 2], values=torch.linspace(-1, 1, 5))
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["z[0]", "z[2]"]
    fig = plot_traversals(decode, torch.zeros(3), dim_names=["a", "b", "c"])
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["a", "b", "c"]
    with pytest.raises(ValueError, match="dim_names must name each of the 3 dimensions"):
        plot_traversals(decode, torch.zeros(3), dim_names=["a"])
    with pytest.raises(ValueError, match="row_labels must name each of the 2 rows"):
        plot_image_grid(torch.rand(16, 1, 4, 4), 8, row_labels=["one"])


def test_parted_traversal_rows_say_which_are_z_and_which_u_and_class_priors_name_their_dimensions():
    from ppl_vae.models.parted import PartedVAE
    from ppl_vae.viz.parted import latent_names, plot_class_priors

    model = PartedVAE.mlp((1, 8, 8), z_dim=2, num_classes=[3, 2], u_dims=[3, 1], hidden=(16,))
    assert latent_names(model) == ["z[0]", "z[1]", "u0[0]", "u0[1]", "u0[2]", "u1[0]"]
    fig = plot_class_priors(model)
    two_d, one_d = fig.axes
    assert "dimensions 0 and 1 of 3" in two_d.get_title()
    assert (two_d.get_xlabel(), two_d.get_ylabel()) == ("u0[0]", "u0[1]")
    assert "of 1 dimension" in one_d.get_title() and one_d.get_xlabel() == "u1[0]"


def test_contrastive_plots_draw_into_given_axes_with_images_scaled_for_display():
    from ppl_vae.models.contrastive import ContrastiveVAE
    from ppl_vae.viz.contrastive import plot_denoised, plot_salient_embedding, plot_salient_samples

    torch.manual_seed(0)
    model = ContrastiveVAE.mlp((1, 8, 8), 2, 2, hidden=16, likelihood="gaussian", likelihood_scale=0.5)
    target = torch.rand(16, 1, 8, 8)
    fig, axes = plt.subplots(1, 3)
    assert plot_salient_embedding(model, target, torch.arange(16) % 3, ax=axes[0]) is fig
    assert plot_denoised(model, target, ax=axes[1]) is fig
    assert plot_salient_samples(model, n=4, ax=axes[2]) is fig
    for ax in axes[1:]:
        shown = ax.images[0].get_array()
        assert shown.max() == pytest.approx(1.0)  # every image rescaled to its maximum
