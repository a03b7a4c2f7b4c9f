"""Pictures of a :class:`~ppl_vae.models.contrastive.ContrastiveVAE`: the salient scatter,
denoised targets ``f([E q(s|x), 0])`` and salient-only samples ``f([s, 0])``, the images
rescaled for display (:func:`~ppl_vae.viz.contrastive.for_display`). ``plot_*`` draw into a notebook's figure,
:func:`save_contrastive_pictures` writes them all."""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ppl_vae.viz.common import (
    plot_image_grid,
    plot_latent_scatter,
    plot_reconstructions,
    save_image_grid,
    save_latent_scatter,
    save_reconstructions,
)

if TYPE_CHECKING:
    from ppl_vae.models.contrastive import ContrastiveVAE

__all__ = [
    "for_display",
    "plot_denoised",
    "plot_salient_embedding",
    "plot_salient_samples",
    "salient_grid",
    "save_contrastive_pictures",
]

DENOISED_TITLE = "target (odd rows) and denoised f([s, 0]), rescaled (even rows)"
SALIENT_TITLE = "salient means by label"
SALIENT_SAMPLES_TITLE = "salient-only samples f([s, 0]), rescaled"


def salient_grid(salient_dim: int, n: int = 8, radius: float = 2.0) -> torch.Tensor:
    """An ``n x n`` grid over the first two salient dimensions (others 0): ``(n * n, D_s)``.

    :param salient_dim: D_s, the dimension of the salient latent s.
    :param n: the number of values along each of the two dimensions.
    :param radius: the values run over [-``radius``, ``radius``]."""
    values = torch.linspace(-radius, radius, n)
    grid = torch.zeros(n * n, salient_dim)
    grid[:, 0] = values.repeat_interleave(n)
    if salient_dim > 1:
        grid[:, 1] = values.repeat(n)
    return grid


def for_display(images: torch.Tensor) -> torch.Tensor:
    """Each image ``(n, C, H, W)`` clipped at 0 and divided by its maximum: a denoised digit keeps
    the faint intensity it has in Grassy-MNIST (``1 / (1 + amplitude)``) and would look black.

    :param images: ``(n, C, H, W)`` images."""
    images = images.clamp_min(0)
    return images / images.amax(dim=(1, 2, 3), keepdim=True).clamp_min(1e-6)


def plot_salient_embedding(
    model: ContrastiveVAE, target: torch.Tensor, labels: torch.Tensor, ax: Axes | None = None
) -> Figure:
    """The salient means E q(s | x) of ``target (n, ...)`` coloured by ``labels (n,)`` (the
    first two salient dimensions).

    :param model: a trained :class:`~ppl_vae.models.ContrastiveVAE`.
    :param target: ``(n, ...)`` target data.
    :param labels: ``(n,)`` labels that colour the points.
    :param ax: the Axes to draw into; ``None`` for a new pyplot figure."""
    with torch.no_grad():
        salient = model.salient_embedding(target)
    return plot_latent_scatter(salient, labels, title=SALIENT_TITLE, ax=ax)


def plot_denoised(model: ContrastiveVAE, target: torch.Tensor, ax: Axes | None = None) -> Figure:
    """Rows of 8 target images ``(n, C, H, W)`` (at most 32), each followed by the row of their
    denoised versions ``f([E q(s|x), 0])`` rescaled by :func:`for_display`.

    :param model: a trained :class:`~ppl_vae.models.ContrastiveVAE`.
    :param target: ``(n, C, H, W)`` target images.
    :param ax: the Axes to draw into; ``None`` for a new pyplot figure."""
    with torch.no_grad():
        denoised = for_display(model.denoise(target[:32]))
    return plot_reconstructions(target[:32], denoised, title=DENOISED_TITLE, ax=ax)


def plot_salient_samples(model: ContrastiveVAE, n: int = 8, radius: float = 2.0, ax: Axes | None = None) -> Figure:
    """Salient-only samples ``f([s, 0])`` on :func:`salient_grid` (``n x n`` over
    +-``radius``), rescaled by :func:`for_display`.

    :param model: a trained :class:`~ppl_vae.models.ContrastiveVAE`.
    :param n: the grid's side: ``n x n`` samples.
    :param radius: the grid's values run over [-``radius``, ``radius``].
    :param ax: the Axes to draw into; ``None`` for a new pyplot figure."""
    with torch.no_grad():
        samples = model.generate_salient(salient_grid(model.salient_dim, n, radius).to(next(model.parameters()).device))
    return plot_image_grid(for_display(samples), n, SALIENT_SAMPLES_TITLE, ax)


@torch.no_grad()
def save_contrastive_pictures(
    model: ContrastiveVAE, target: torch.Tensor, labels: torch.Tensor, pictures: str | os.PathLike
) -> None:
    """Write into ``pictures``: ``salient.png`` (salient means of ``target (n, ...)`` coloured
    by ``labels (n,)``) and, for image targets ``(n, C, H, W)``, ``denoised.png`` and
    ``salient_samples.png`` (on :func:`salient_grid`), each image rescaled by :func:`for_display`.

    :param model: a trained :class:`~ppl_vae.models.ContrastiveVAE`.
    :param target: ``(n, ...)`` target data (images ``(n, C, H, W)`` for the two image files).
    :param labels: ``(n,)`` labels that colour the salient means.
    :param pictures: the directory the pictures are written into."""
    pictures = Path(pictures)
    save_latent_scatter(pictures / "salient.png", model.salient_embedding(target), labels, title=SALIENT_TITLE)
    if target.dim() == 4:
        save_reconstructions(pictures / "denoised.png", target[:32], for_display(model.denoise(target[:32])),
                             title=DENOISED_TITLE)
        samples = model.generate_salient(salient_grid(model.salient_dim).to(target.device))
        save_image_grid(pictures / "salient_samples.png", for_display(samples), title=SALIENT_SAMPLES_TITLE)
