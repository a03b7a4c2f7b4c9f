"""Pictures for any model: image grids, latent traversals, latent scatters, q(z) vs p(z).

Every function writes a PNG and returns its path; none needs a display (Agg backend).
"""
from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402


def _numpy(x: torch.Tensor | np.ndarray) -> np.ndarray:
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def image_grid(images: torch.Tensor | np.ndarray, nrow: int, pad: int = 1) -> np.ndarray:
    """Tile ``images (n, C, H, W)`` (C = 1 or 3) into one ``(rows*(H+pad), nrow*(W+pad)[, 3])``
    array in [0, 1], row by row."""
    images = _numpy(images)
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


def save_image_grid(
    path: str | os.PathLike, images: torch.Tensor | np.ndarray, nrow: int = 8, title: str | None = None
) -> Path:
    """Write ``images (n, C, H, W)`` as a grid PNG."""
    grid = image_grid(images, nrow)
    height, width = grid.shape[:2]
    scale = 6.0 / max(height, width)
    fig, ax = plt.subplots(figsize=(max(width * scale, 2), max(height * scale, 2) + (0.4 if title else 0)))
    ax.imshow(grid, cmap="gray", vmin=0, vmax=1, interpolation="nearest")
    ax.axis("off")
    if title:
        ax.set_title(title)
    return save_figure(fig, path)


def save_reconstructions(
    path: str | os.PathLike, data: torch.Tensor, reconstructions: torch.Tensor, title: str = "data (odd rows) and reconstructions (even rows)"
) -> Path:
    """Interleave rows of data and reconstructions ``(n, C, H, W)``, 8 per row."""
    n = min(len(data), 32) // 8 * 8 or min(len(data), 8)
    rows = []
    for start in range(0, n, 8):
        rows += [data[start : start + 8], reconstructions[start : start + 8]]
    return save_image_grid(path, torch.cat([r.detach().cpu() for r in rows]), nrow=min(8, n), title=title)


def traversal_images(
    decode: Callable[[torch.Tensor], torch.Tensor],
    base: torch.Tensor,
    dims: Sequence[int],
    values: torch.Tensor,
) -> torch.Tensor:
    """Decode ``base (D,)`` with one dimension at a time set to each of ``values (K,)``.

    Returns ``(len(dims) * K, C, H, W)``: one row per dimension.
    """
    rows = []
    for d in dims:
        z = base.expand(len(values), -1).clone()
        z[:, d] = values
        rows.append(decode(z))
    return torch.cat(rows)


def save_traversals(
    path: str | os.PathLike,
    decode: Callable[[torch.Tensor], torch.Tensor],
    base: torch.Tensor,
    dims: Sequence[int] | None = None,
    values: torch.Tensor | None = None,
    title: str = "latent traversals (one row per dimension)",
) -> Path:
    """Write a traversal grid of ``decode`` around ``base (D,)`` (default: every
    dimension over [-2.5, 2.5] in 8 steps)."""
    dims = list(range(base.shape[-1])) if dims is None else list(dims)
    values = torch.linspace(-2.5, 2.5, 8) if values is None else values
    with torch.no_grad():
        images = traversal_images(decode, base, dims, values.to(base))
    return save_image_grid(path, images, nrow=len(values), title=title)


def save_latent_scatter(
    path: str | os.PathLike,
    z: torch.Tensor | np.ndarray,
    labels: torch.Tensor | np.ndarray | None = None,
    title: str = "latent means",
) -> Path:
    """Scatter the first two dimensions of ``z (n, D)``, coloured by ``labels (n,)``."""
    z = _numpy(z)
    if z.ndim != 2:
        raise ValueError(f"z must have shape (n, D), got {z.shape}")
    y = z[:, 1] if z.shape[1] > 1 else np.zeros(len(z))
    fig, ax = plt.subplots(figsize=(5, 5))
    if labels is None:
        ax.scatter(z[:, 0], y, s=4, alpha=0.6)
    else:
        labels = _numpy(labels)
        for label in np.unique(labels):
            mask = labels == label
            ax.scatter(z[mask, 0], y[mask], s=4, alpha=0.6, label=str(label))
        ax.legend(markerscale=3, fontsize=8)
    ax.set_title(title)
    ax.set_xlabel("dim 0")
    ax.set_ylabel("dim 1")
    return save_figure(fig, path)


def save_density_comparison(
    path: str | os.PathLike,
    posterior_samples: torch.Tensor | np.ndarray,
    prior_samples: torch.Tensor | np.ndarray,
    title: str = "aggregate posterior q(z) vs prior p(z)",
    bins: int = 60,
) -> Path:
    """Side-by-side 2-D histograms of q(z) and p(z) samples ``(n, 2)`` on shared axes
    (the first two dimensions when D > 2)."""
    q, p = _numpy(posterior_samples)[:, :2], _numpy(prior_samples)[:, :2]
    both = np.concatenate([q, p])
    lo, hi = np.percentile(both, 0.5, axis=0), np.percentile(both, 99.5, axis=0)
    extent = [[lo[0], hi[0]], [lo[1], hi[1]]] if q.shape[1] == 2 else None
    fig, axes = plt.subplots(1, 2, figsize=(9, 4.5))
    for ax, samples, name in zip(axes, (q, p), ("q(z)", "p(z)"), strict=False):
        if samples.shape[1] == 2:
            ax.hist2d(samples[:, 0], samples[:, 1], bins=bins, range=extent, cmap="viridis")
        else:
            ax.hist(samples[:, 0], bins=bins)
        ax.set_title(name)
    fig.suptitle(title)
    return save_figure(fig, path)


def save_figure(fig: plt.Figure, path: str | os.PathLike) -> Path:
    """Lay out ``fig``, write it to ``path`` (folders created, format from the suffix, 100
    dpi), close it, and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
