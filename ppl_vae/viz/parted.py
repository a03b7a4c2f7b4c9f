"""Pictures of a :class:`~ppl_vae.models.parted.PartedVAE`: class traversals, attribute
transfer, samples of each class prior and the learned class priors p(u | c)."""
from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ppl_vae.viz._figures import axes_list, new_figure, save_figure
from ppl_vae.viz.common import plot_image_grid, save_image_grid, save_reconstructions, save_traversals

if TYPE_CHECKING:
    from ppl_vae.models.parted import PartedVAE

__all__ = [
    "attribute_transfer_images",
    "class_code",
    "class_sample_images",
    "class_traversal_images",
    "latent_names",
    "plot_attribute_transfer",
    "plot_class_priors",
    "plot_class_samples",
    "plot_class_traversals",
    "save_parted_pictures",
]

CLASS_TRAVERSALS_TITLE = "u set to each class prior's mean (columns)"
ATTRIBUTE_TRANSFER_TITLE = "attribute transfer: z from the left column, c and u from the top row"
CLASS_SAMPLES_TITLE = "samples from each class prior (rows)"


@torch.no_grad()
def class_traversal_images(model: PartedVAE, x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """For each image of ``x (n, C, H, W)`` (a row), its z decoded with u set to each class
    prior's mean of the first variable (a column): ``((n * K, C, H, W), K)``.

    :param model: a trained :class:`~ppl_vae.models.PartedVAE`.
    :param x: ``(n, C, H, W)`` images."""
    z, u = model.split_latent(model.encode(x))
    loc = model.class_priors[0].loc
    rows = []
    for i in range(x.shape[0]):
        u_k = u[i].expand(loc.shape[0], -1).clone()
        u_k[:, : loc.shape[1]] = loc
        rows.append(model.decode(z[i].expand(loc.shape[0], -1), u_k))
    return torch.cat(rows), loc.shape[0]


def plot_class_traversals(model: PartedVAE, x: torch.Tensor, ax: Axes | None = None) -> Figure:
    """Show :func:`class_traversal_images` of ``x (n, C, H, W)``.

    :param model: a trained :class:`~ppl_vae.models.PartedVAE`.
    :param x: ``(n, C, H, W)`` images, one row each.
    :param ax: the Axes to draw into; ``None`` for a new pyplot figure."""
    images, nrow = class_traversal_images(model, x)
    return plot_image_grid(images, nrow, CLASS_TRAVERSALS_TITLE, ax)


def latent_names(model: PartedVAE) -> list[str]:
    """The name of each dimension of the representation ``[z, u0, u1, ...]`` of
    :meth:`~ppl_vae.models.parted.PartedVAE.encode`: ``z[0]``, ..., then ``u0[0]``, ...
    (``latent_dim`` names), for the rows of a traversal (``dim_names`` of
    :func:`~ppl_vae.viz.plot_traversals`).

    :param model: a :class:`~ppl_vae.models.PartedVAE`."""
    names = [f"z[{d}]" for d in range(model.z_dim)]
    for i, size in enumerate(model.u_dims):
        names += [f"u{i}[{d}]" for d in range(size)]
    return names


def class_code(model: PartedVAE, k: int) -> torch.Tensor:
    """Class k for the first variable, class 0 for the others: ``(V,)`` or a scalar (one
    variable), as :meth:`~ppl_vae.models.PartedVAE.sample` takes it.

    :param model: a :class:`~ppl_vae.models.PartedVAE`.
    :param k: a class of the first variable, in [0, L_0)."""
    if model.num_variables == 1:
        return torch.tensor(k)
    code = torch.zeros(model.num_variables, dtype=torch.long)
    code[0] = k
    return code


@torch.no_grad()
def class_sample_images(model: PartedVAE, per_class: int = 8) -> torch.Tensor:
    """``per_class`` samples from each class prior of the first variable, one class after the
    other: ``(K * per_class, C, H, W)``.

    :param model: a trained :class:`~ppl_vae.models.PartedVAE`.
    :param per_class: the number of samples of each class (the likelihood's means)."""
    return torch.cat([model.sample(per_class, c=class_code(model, k), mean=True) for k in range(model.num_classes[0])])


def plot_class_samples(model: PartedVAE, per_class: int = 8, ax: Axes | None = None) -> Figure:
    """Show :func:`class_sample_images`, one row per class.

    :param model: a trained :class:`~ppl_vae.models.PartedVAE`.
    :param per_class: the number of samples of each class (a row).
    :param ax: the Axes to draw into; ``None`` for a new pyplot figure."""
    return plot_image_grid(class_sample_images(model, per_class), per_class, CLASS_SAMPLES_TITLE, ax)


@torch.no_grad()
def attribute_transfer_images(model: PartedVAE, x: torch.Tensor, n: int = 6) -> torch.Tensor:
    """Grid ``((n + 1) ** 2, C, H, W)`` of images ``x`` (at least n): the top row's images give
    (c, u), the left column's give z; cell (i, j) decodes [z of row image i, u of column image j].

    :param model: a trained :class:`~ppl_vae.models.PartedVAE`.
    :param x: ``(n', C, H, W)`` images, n' >= n: the first n give the top row, the next n
        (when n' >= 2 n; else the first n in reverse order) the left column.
    :param n: the number of images in the top row and in the left column."""
    sources, targets = x[:n], x[n : 2 * n] if x.shape[0] >= 2 * n else x[:n].flip(0)
    z_rows, _ = model.split_latent(model.encode(targets))
    _, u_columns = model.split_latent(model.encode(sources))
    cells = [torch.zeros_like(x[:1]), *sources.split(1)]
    for i in range(n):
        cells.append(targets[i : i + 1])
        cells.append(model.decode(z_rows[i].expand(n, -1), u_columns))
    return torch.cat(cells)


def plot_attribute_transfer(model: PartedVAE, x: torch.Tensor, n: int = 6, ax: Axes | None = None) -> Figure:
    """Show :func:`attribute_transfer_images` of ``x (n', C, H, W)``.

    :param model: a trained :class:`~ppl_vae.models.PartedVAE`.
    :param x: ``(n', C, H, W)`` images, n' >= n.
    :param n: the number of images in the top row and in the left column.
    :param ax: the Axes to draw into; ``None`` for a new pyplot figure."""
    return plot_image_grid(attribute_transfer_images(model, x, n), n + 1, ATTRIBUTE_TRANSFER_TITLE, ax)


def _class_priors(model: PartedVAE, axes, detached: bool) -> Figure:
    if axes is None:
        _, grid = new_figure((4.5 * model.num_variables, 4), 1, model.num_variables, detached=detached)
        axes = grid[0]
    for i, (ax, prior) in enumerate(zip(axes_list(axes, model.num_variables), model.class_priors, strict=True)):
        loc = prior.loc.detach().cpu().numpy()
        std = np.exp(0.5 * prior.log_variance.detach().cpu().numpy())
        for k in range(loc.shape[0]):
            if loc.shape[1] == 1:
                grid = np.linspace(loc.min() - 3 * std.max(), loc.max() + 3 * std.max(), 300)
                density = np.exp(-0.5 * ((grid - loc[k, 0]) / std[k, 0]) ** 2) / (std[k, 0] * math.sqrt(2 * math.pi))
                ax.plot(grid, density, label=f"c = {k}")
            else:
                angle = np.linspace(0, 2 * math.pi, 100)
                ax.plot(loc[k, 0] + std[k, 0] * np.cos(angle), loc[k, 1] + std[k, 1] * np.sin(angle))
                ax.annotate(str(k), loc[k, :2])
        if loc.shape[1] == 1:
            ax.set_title(f"class priors p(u{i} | c{i}), u{i} of 1 dimension", fontsize=9)
            ax.set_xlabel(f"u{i}[0]")
            ax.set_ylabel("density")
            ax.legend(fontsize=7)
        else:
            ax.set_title(f"class priors p(u{i} | c{i}): dimensions 0 and 1 of {loc.shape[1]}\n"
                         "mean (class number) and 1-std ellipse", fontsize=9)
            ax.set_xlabel(f"u{i}[0]")
            ax.set_ylabel(f"u{i}[1]")
    return ax.figure


def plot_class_priors(model: PartedVAE, axes: Sequence[Axes] | None = None) -> Figure:
    """The learned p(u_i | c_i = k) of each class variable i (a panel each): densities when u_i
    has one dimension, otherwise means with one-standard-deviation ellipses in its first two
    dimensions, ``u_i[0]`` and ``u_i[1]`` (the title says how many u_i has; the others are
    not shown).

    :param model: a trained :class:`~ppl_vae.models.PartedVAE`.
    :param axes: one Axes per class variable to draw into; ``None`` for a new pyplot figure."""
    return _class_priors(model, axes, detached=False)


@torch.no_grad()
def save_parted_pictures(model: PartedVAE, x: torch.Tensor, pictures: str | os.PathLike, traversal_range: float = 2.5) -> None:
    """PartedVAE's pictures of images ``x (n, C, H, W)`` (n >= 8), written into ``pictures``:

    - ``reconstructions.png``;
    - ``class_traversals.png``: per image (row), its z with u set to each class prior's mean (column);
    - ``latent_traversals.png``: every z and u dimension of one image over +-``traversal_range``,
      each row named (:func:`latent_names`);
    - ``attribute_transfer.png``: top row gives c and u, left column gives z;
    - ``class_samples.png``: one row of samples from each class prior (first variable);
    - ``class_priors.png``: the learned class priors p(u | c), first two u dimensions.

    :param model: a trained :class:`~ppl_vae.models.PartedVAE`. It is put in evaluation mode while drawing, then
        back in the mode it was in.
    :param x: ``(n, C, H, W)`` images, n >= 8 (the first 32 are reconstructed, the first 8
        traversed).
    :param pictures: the directory the pictures are written into.
    :param traversal_range: the latent traversals' values run over
        [-``traversal_range``, ``traversal_range``].
    """
    pictures = Path(pictures)
    was_training = model.training
    model.eval()
    save_reconstructions(pictures / "reconstructions.png", x[:32], model.reconstruct(x[:32]))
    images, nrow = class_traversal_images(model, x[:8])
    save_image_grid(pictures / "class_traversals.png", images, nrow=nrow, title=CLASS_TRAVERSALS_TITLE)
    values = torch.linspace(-traversal_range, traversal_range, 8)
    save_traversals(pictures / "latent_traversals.png", lambda latent: model.decode(*model.split_latent(latent)),
                    model.encode(x[:1])[0], values=values, title="latent traversals: z, then u (rows)",
                    dim_names=latent_names(model))
    save_image_grid(pictures / "class_samples.png", class_sample_images(model), nrow=8, title=CLASS_SAMPLES_TITLE)
    save_image_grid(pictures / "attribute_transfer.png", attribute_transfer_images(model, x), nrow=7,
                    title=ATTRIBUTE_TRANSFER_TITLE)
    save_figure(_class_priors(model, None, detached=True), pictures / "class_priors.png")
    model.train(was_training)
