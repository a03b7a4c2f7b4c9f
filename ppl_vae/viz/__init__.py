"""Pictures of models, training runs and posterior predictive checks.

Every ``plot_*`` function returns its :class:`~matplotlib.figure.Figure`. Given an ``ax``
(or ``axes``) it draws there; otherwise it makes a new figure with pyplot, under whatever
backend the caller configured (in a notebook the inline backend shows it when the cell ends;
a cell whose last line is the call also shows the returned Figure, so end that line with
``;`` or assign the result to show it once). Every ``save_*`` function draws into a figure
pyplot does not know, writes it to a file and needs no display. Nothing here switches
matplotlib's backend.

Modules: :mod:`~ppl_vae.viz.common` (any model), :mod:`~ppl_vae.viz.training` (training
curves), :mod:`~ppl_vae.viz.ppc`, :mod:`~ppl_vae.viz.parted`, :mod:`~ppl_vae.viz.contrastive`.
"""
from ppl_vae.viz._figures import save_figure
from ppl_vae.viz.common import (
    image_grid,
    plot_density_comparison,
    plot_image_grid,
    plot_latent_scatter,
    plot_reconstructions,
    plot_traversals,
    save_density_comparison,
    save_image_grid,
    save_latent_scatter,
    save_model_pictures,
    save_reconstructions,
    save_traversals,
    traversal_images,
)
from ppl_vae.viz.ppc import plot_ppc, save_ppc_plot
from ppl_vae.viz.training import plot_training_curves, save_training_curves

__all__ = [
    "image_grid",
    "plot_density_comparison",
    "plot_image_grid",
    "plot_latent_scatter",
    "plot_ppc",
    "plot_reconstructions",
    "plot_training_curves",
    "plot_traversals",
    "save_density_comparison",
    "save_figure",
    "save_image_grid",
    "save_latent_scatter",
    "save_model_pictures",
    "save_ppc_plot",
    "save_reconstructions",
    "save_training_curves",
    "save_traversals",
    "traversal_images",
]
