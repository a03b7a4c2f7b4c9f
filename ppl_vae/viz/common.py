"""Pictures for any model: image grids, reconstructions, latent traversals, latent scatters,
q(z) vs p(z).

Each ``plot_*`` function draws into the ``ax`` (or ``axes``) it is given, or into a new pyplot
figure, and returns the Figure; each ``save_*`` function draws into a figure pyplot does not
know and writes it to a file.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ppl_vae.viz._figures import as_numpy, axes_list, new_figure, save_figure

RECONSTRUCTIONS_TITLE = "data (odd rows) and reconstructions (even rows)"
TRAVERSALS_TITLE = "latent traversals (one row per dimension)"


def image_grid(images: torch.Tensor | np.ndarray, nrow: int, pad: int = 1) -> np.ndarray:
    """Tile ``images (n, C, H, W)`` (C = 1 or 3) into one ``(rows*(H+pad), nrow*(W+pad)[, 3])``
    array in [0, 1], row by row.

    :param images: ``(n, C, H, W)`` images, values in [0, 1] (others are clipped).
    :param nrow: images per row of the grid.
    :param pad: pixels of white between neighbouring images and around the grid.
    """
    images = as_numpy(images)
    if images.ndim != 4 or images.shape[1] not in (1, 3):
        raise ValueError(f"images must have shape (n, 1 or 3, H, W), got {images.shape}")
    if nrow < 1:
        raise ValueError(f"nrow must be >= 1, got {nrow}")
    n, c, h, w = images.shape
    rows = -(-n // nrow)
    grid = np.ones((rows * (h + pad) + pad, nrow * (w + pad) + pad, c), dtype=np.float32)
    for i in range(n):
        r, col = divmod(i, nrow)
        top, left = pad + r * (h + pad), pad + col * (w + pad)
        grid[top : top + h, left : left + w] = np.clip(images[i].transpose(1, 2, 0), 0, 1)
    return grid[..., 0] if c == 1 else grid


def _grid_figsize(grid: np.ndarray, title: str | None, labelled: bool) -> tuple[float, float]:
    height, width = grid.shape[:2]
    scale = 6.0 / max(height, width)
    return max(width * scale, 2) + (0.6 if labelled else 0), max(height * scale, 2) + (0.4 if title else 0)


def _label_rows(ax: Axes, grid: np.ndarray, row_labels: Sequence[str]) -> None:
    """Name each row of image ``grid`` at its left, through the y ticks (the frame stays hidden)."""
    row_height = grid.shape[0] / len(row_labels)
    ax.set_yticks([(r + 0.5) * row_height for r in range(len(row_labels))], list(row_labels), fontsize=8)
    ax.set_xticks([])
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)


def _show_grid(
    grid: np.ndarray,
    ax: Axes | None,
    title: str | None,
    detached: bool = False,
    row_labels: Sequence[str] | None = None,
) -> Figure:
    if ax is None:
        fig, axes = new_figure(_grid_figsize(grid, title, row_labels is not None), detached=detached)
        ax = axes[0, 0]
    ax.imshow(grid, cmap="gray", vmin=0, vmax=1, interpolation="nearest")
    if row_labels is None:
        ax.axis("off")
    else:
        _label_rows(ax, grid, row_labels)
    if title:
        ax.set_title(title)
    return ax.figure


def _checked_row_labels(row_labels: Sequence[str] | None, num_images: int, nrow: int) -> Sequence[str] | None:
    rows = -(-num_images // nrow)
    if row_labels is not None and len(row_labels) != rows:
        raise ValueError(f"row_labels must name each of the {rows} rows, got {len(row_labels)} labels")
    return row_labels


def plot_image_grid(
    images: torch.Tensor | np.ndarray,
    nrow: int = 8,
    title: str | None = None,
    ax: Axes | None = None,
    row_labels: Sequence[str] | None = None,
) -> Figure:
    """Show ``images (n, C, H, W)`` as a grid of ``nrow`` columns; ``row_labels`` (one per
    row) name the rows at their left.

    :param images: ``(n, C, H, W)`` images in [0, 1], C = 1 or 3.
    :param nrow: images per row.
    :param title: title above the grid; ``None`` for none.
    :param ax: the Axes to draw into; ``None`` for a new pyplot figure.
    :param row_labels: a name for each row of the grid, shown at its left; ``None`` for none.
    """
    row_labels = _checked_row_labels(row_labels, len(images), nrow)
    return _show_grid(image_grid(images, nrow), ax, title, row_labels=row_labels)


def save_image_grid(
    path: str | os.PathLike,
    images: torch.Tensor | np.ndarray,
    nrow: int = 8,
    title: str | None = None,
    row_labels: Sequence[str] | None = None,
) -> Path:
    """Write ``images (n, C, H, W)`` as a grid PNG; ``row_labels`` as in :func:`plot_image_grid`.

    :param path: the file to write (its suffix gives the format; folders are created).
    :param images: ``(n, C, H, W)`` images in [0, 1], C = 1 or 3.
    :param nrow: images per row.
    :param title: title above the grid; ``None`` for none.
    :param row_labels: a name for each row of the grid; ``None`` for none.
    """
    row_labels = _checked_row_labels(row_labels, len(images), nrow)
    return save_figure(_show_grid(image_grid(images, nrow), None, title, detached=True, row_labels=row_labels), path)


def reconstruction_rows(data: torch.Tensor, reconstructions: torch.Tensor) -> torch.Tensor:
    """Rows of 8 data images, each followed by the row of their reconstructions (at most 32
    pairs): ``(2 * n, C, H, W)`` from two ``(n', C, H, W)``."""
    n = min(len(data), 32) // 8 * 8 or min(len(data), 8)
    rows = []
    for start in range(0, n, 8):
        rows += [data[start : start + 8], reconstructions[start : start + 8]]
    return torch.cat([r.detach().cpu() for r in rows])


def plot_reconstructions(
    data: torch.Tensor, reconstructions: torch.Tensor, title: str = RECONSTRUCTIONS_TITLE, ax: Axes | None = None
) -> Figure:
    """Show rows of data ``(n, C, H, W)`` interleaved with their reconstructions, 8 per row.

    :param data: ``(n, C, H, W)`` images; the first 32 (at most) are shown.
    :param reconstructions: ``(n, C, H, W)`` reconstructions of ``data``, in its order.
    :param title: title above the grid.
    :param ax: the Axes to draw into; ``None`` for a new pyplot figure.
    """
    return plot_image_grid(reconstruction_rows(data, reconstructions), min(8, len(data)), title, ax)


def save_reconstructions(
    path: str | os.PathLike, data: torch.Tensor, reconstructions: torch.Tensor, title: str = RECONSTRUCTIONS_TITLE
) -> Path:
    """Write rows of data ``(n, C, H, W)`` interleaved with their reconstructions, 8 per row.

    :param path: the file to write (its suffix gives the format; folders are created).
    :param data: ``(n, C, H, W)`` images; the first 32 (at most) are shown.
    :param reconstructions: ``(n, C, H, W)`` reconstructions of ``data``, in its order.
    :param title: title above the grid.
    """
    return save_image_grid(path, reconstruction_rows(data, reconstructions), nrow=min(8, len(data)), title=title)


def traversal_images(
    decode: Callable[[torch.Tensor], torch.Tensor],
    base: torch.Tensor,
    dims: Sequence[int],
    values: torch.Tensor,
) -> torch.Tensor:
    """Decode ``base (D,)`` with one dimension at a time set to each of ``values (K,)``.

    Returns ``(len(dims) * K, C, H, W)``: one row per dimension.

    :param decode: latent codes ``(K, D)`` -> images ``(K, C, H, W)`` (e.g. a model's ``decode``).
    :param base: ``(D,)`` the code the traversals start from.
    :param dims: the dimensions to traverse, one row each.
    :param values: ``(K,)`` the values each traversed dimension takes.
    """
    rows = []
    for d in dims:
        z = base.expand(len(values), -1).clone()
        z[:, d] = values
        rows.append(decode(z))
    return torch.cat(rows)


def _traversal_grid(decode, base, dims, values, dim_names) -> tuple[torch.Tensor, int, list[str]]:
    """The traversal images, their number of columns and the name of each row."""
    dims = list(range(base.shape[-1])) if dims is None else list(dims)
    values = torch.linspace(-2.5, 2.5, 8) if values is None else values
    if dim_names is None:
        dim_names = [f"z[{d}]" for d in range(base.shape[-1])]
    elif len(dim_names) != base.shape[-1]:
        raise ValueError(f"dim_names must name each of the {base.shape[-1]} dimensions of base, got {len(dim_names)}")
    with torch.no_grad():
        images = traversal_images(decode, base, dims, values.to(base))
    return images, len(values), [dim_names[d] for d in dims]


def plot_traversals(
    decode: Callable[[torch.Tensor], torch.Tensor],
    base: torch.Tensor,
    dims: Sequence[int] | None = None,
    values: torch.Tensor | None = None,
    title: str = TRAVERSALS_TITLE,
    ax: Axes | None = None,
    dim_names: Sequence[str] | None = None,
) -> Figure:
    """Show ``decode`` around ``base (D,)``, one row per dimension in ``dims`` (default: all)
    over ``values (K,)`` (default: 8 steps over [-2.5, 2.5]), each row labelled with its
    dimension's name in ``dim_names`` (D names; default ``z[0]``, ``z[1]``, ...).

    :param decode: latent codes ``(K, D)`` -> images ``(K, C, H, W)`` (e.g. a model's ``decode``).
    :param base: ``(D,)`` the code the traversals start from.
    :param dims: the dimensions to traverse, one row each; ``None`` for all D.
    :param values: ``(K,)`` the values each traversed dimension takes; ``None`` for 8 steps
        over [-2.5, 2.5].
    :param title: title above the grid.
    :param ax: the Axes to draw into; ``None`` for a new pyplot figure.
    :param dim_names: a name for each of the D dimensions, labelling its row; ``None`` for
        ``z[0]``, ``z[1]``, ...
    """
    images, nrow, row_labels = _traversal_grid(decode, base, dims, values, dim_names)
    return plot_image_grid(images, nrow, title, ax, row_labels)


def save_traversals(
    path: str | os.PathLike,
    decode: Callable[[torch.Tensor], torch.Tensor],
    base: torch.Tensor,
    dims: Sequence[int] | None = None,
    values: torch.Tensor | None = None,
    title: str = TRAVERSALS_TITLE,
    dim_names: Sequence[str] | None = None,
) -> Path:
    """Write the traversal grid of :func:`plot_traversals`, rows labelled as there.

    :param path: the file to write (its suffix gives the format; folders are created).
    :param decode: latent codes ``(K, D)`` -> images ``(K, C, H, W)``.
    :param base: ``(D,)`` the code the traversals start from.
    :param dims: the dimensions to traverse, one row each; ``None`` for all D.
    :param values: ``(K,)`` the values each traversed dimension takes; ``None`` for 8 steps
        over [-2.5, 2.5].
    :param title: title above the grid.
    :param dim_names: a name for each of the D dimensions; ``None`` for ``z[0]``, ``z[1]``, ...
    """
    images, nrow, row_labels = _traversal_grid(decode, base, dims, values, dim_names)
    return save_image_grid(path, images, nrow=nrow, title=title, row_labels=row_labels)


def _latent_scatter(z, labels, title: str, ax: Axes | None, detached: bool) -> Figure:
    z = as_numpy(z)
    if z.ndim != 2:
        raise ValueError(f"z must have shape (n, D), got {z.shape}")
    if ax is None:
        _, axes = new_figure((5, 5), detached=detached)
        ax = axes[0, 0]
    y = z[:, 1] if z.shape[1] > 1 else np.zeros(len(z))
    if labels is None:
        ax.scatter(z[:, 0], y, s=4, alpha=0.6)
    else:
        labels = as_numpy(labels)
        for label in np.unique(labels):
            mask = labels == label
            ax.scatter(z[mask, 0], y[mask], s=4, alpha=0.6, label=str(label))
        ax.legend(markerscale=3, fontsize=8)
    ax.set_title(title)
    ax.set_xlabel("dim 0")
    ax.set_ylabel("dim 1")
    return ax.figure


def plot_latent_scatter(
    z: torch.Tensor | np.ndarray,
    labels: torch.Tensor | np.ndarray | None = None,
    title: str = "latent means",
    ax: Axes | None = None,
) -> Figure:
    """Scatter the first two dimensions of ``z (n, D)``, coloured by ``labels (n,)``.

    :param z: ``(n, D)`` codes, e.g. posterior means (against zeros when D = 1).
    :param labels: ``(n,)`` a label per point, one colour and legend entry each; ``None`` for one colour.
    :param title: title of the plot.
    :param ax: the Axes to draw into; ``None`` for a new pyplot figure.
    """
    return _latent_scatter(z, labels, title, ax, detached=False)


def save_latent_scatter(
    path: str | os.PathLike,
    z: torch.Tensor | np.ndarray,
    labels: torch.Tensor | np.ndarray | None = None,
    title: str = "latent means",
) -> Path:
    """Write the scatter of :func:`plot_latent_scatter`.

    :param path: the file to write (its suffix gives the format; folders are created).
    :param z: ``(n, D)`` codes, e.g. posterior means.
    :param labels: ``(n,)`` a label per point; ``None`` for one colour.
    :param title: title of the plot.
    """
    return save_figure(_latent_scatter(z, labels, title, None, detached=True), path)


def _density_comparison(q, p, title: str, bins: int, axes, detached: bool) -> Figure:
    q, p = as_numpy(q)[:, :2], as_numpy(p)[:, :2]
    if axes is None:
        fig, grid = new_figure((9, 4.5), 1, 2, detached=detached)
        axes = grid[0]
    axes = axes_list(axes, 2)
    both = np.concatenate([q, p])
    lo, hi = np.percentile(both, 0.5, axis=0), np.percentile(both, 99.5, axis=0)
    extent = [[lo[0], hi[0]], [lo[1], hi[1]]] if q.shape[1] == 2 else None
    for ax, samples, name in zip(axes, (q, p), ("q(z)", "p(z)"), strict=True):
        if samples.shape[1] == 2:
            ax.hist2d(samples[:, 0], samples[:, 1], bins=bins, range=extent, cmap="viridis")
        else:
            ax.hist(samples[:, 0], bins=bins)
        ax.set_title(name)
    fig = axes[0].figure
    fig.suptitle(title)
    return fig


def plot_density_comparison(
    posterior_samples: torch.Tensor | np.ndarray,
    prior_samples: torch.Tensor | np.ndarray,
    title: str = "aggregate posterior q(z) vs prior p(z)",
    bins: int = 60,
    axes: Sequence[Axes] | None = None,
) -> Figure:
    """Side-by-side 2-D histograms of q(z) and p(z) samples ``(n, D)`` on shared axes (the
    first two dimensions; a 1-D histogram when D = 1), in two new panels or the two ``axes``.

    :param posterior_samples: ``(n, D)`` samples of the aggregate posterior q(z).
    :param prior_samples: ``(m, D)`` samples of the prior p(z).
    :param title: title above both panels.
    :param bins: histogram bins per axis.
    :param axes: two Axes, for q(z) then p(z); ``None`` for a new pyplot figure.
    """
    return _density_comparison(posterior_samples, prior_samples, title, bins, axes, detached=False)


def save_density_comparison(
    path: str | os.PathLike,
    posterior_samples: torch.Tensor | np.ndarray,
    prior_samples: torch.Tensor | np.ndarray,
    title: str = "aggregate posterior q(z) vs prior p(z)",
    bins: int = 60,
) -> Path:
    """Write the histograms of :func:`plot_density_comparison`.

    :param path: the file to write (its suffix gives the format; folders are created).
    :param posterior_samples: ``(n, D)`` samples of the aggregate posterior q(z).
    :param prior_samples: ``(m, D)`` samples of the prior p(z).
    :param title: title above both panels.
    :param bins: histogram bins per axis.
    """
    return save_figure(_density_comparison(posterior_samples, prior_samples, title, bins, None, detached=True), path)


@torch.no_grad()
def save_model_pictures(
    model: torch.nn.Module, x: torch.Tensor, labels: torch.Tensor | None, pictures: str | os.PathLike
) -> None:
    """The standard pictures of a model with ``encode``, ``decode``, ``reconstruct`` and
    ``sample``, written into ``pictures``: for images ``x (n, C, H, W)``,
    ``reconstructions.png``, ``samples.png`` (64 from the prior) and ``traversals.png``
    (around the first image's code); for any data, ``latents.png`` (the means of ``x``
    coloured by ``labels (n,)``).

    :param model: a model with ``encode``, ``decode``, ``reconstruct`` and ``sample``
        (:class:`~ppl_vae.models.VAE`, :class:`~ppl_vae.models.PartedVAE`, ...).
    :param x: ``(n, C, H, W)`` images, or ``(n, F)`` data (then only ``latents.png``).
    :param labels: ``(n,)`` a label per point colouring the latent scatter; ``None`` for one colour.
    :param pictures: the folder to write into (created if missing).
    """
    pictures = Path(pictures)
    if x.dim() == 4:
        save_reconstructions(pictures / "reconstructions.png", x[:32], model.reconstruct(x[:32]))
        save_image_grid(pictures / "samples.png", model.sample(64, mean=True), nrow=8, title="samples from the prior")
        save_traversals(pictures / "traversals.png", model.decode, model.encode(x[:1])[0])
    save_latent_scatter(pictures / "latents.png", model.encode(x), labels)
