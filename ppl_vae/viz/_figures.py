"""Where figures come from: pyplot (as the caller configured it) for pictures to look at,
a detached :class:`~matplotlib.figure.Figure` for pictures written to files."""
from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ppl_vae._files import write_atomically


def as_numpy(x: torch.Tensor | np.ndarray) -> np.ndarray:
    """A tensor or array as a NumPy array on the CPU."""
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def new_figure(figsize: tuple[float, float], nrows: int = 1, ncols: int = 1, detached: bool = False) -> tuple[Figure, np.ndarray]:
    """A figure with an ``(nrows, ncols)`` array of axes, laid out by matplotlib's constrained
    layout (titles and labels of neighbouring panels do not overlap).

    :param detached: ``False``: made by :func:`matplotlib.pyplot.subplots` with the backend the
        caller configured (a notebook shows it when the cell ends); ``True``: a
        :class:`~matplotlib.figure.Figure` that pyplot does not know (nothing shows, nothing
        to close), for :func:`save_figure`.
    """
    if detached:
        fig = Figure(figsize=figsize, layout="constrained")
        axes = fig.subplots(nrows, ncols, squeeze=False)
    else:
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(nrows, ncols, figsize=figsize, squeeze=False, layout="constrained")
    return fig, axes


def axes_list(ax: Axes | Sequence[Axes] | np.ndarray, count: int, argument: str = "axes") -> list[Axes]:
    """``ax`` as a list of ``count`` axes; a wrong number raises ``ValueError`` naming ``argument``."""
    listed = [ax] if isinstance(ax, Axes) else list(np.asarray(ax, dtype=object).ravel())
    if len(listed) != count:
        raise ValueError(f"{argument} must hold {count} Axes, got {len(listed)}")
    return listed


def save_figure(fig: Figure, path: str | os.PathLike) -> Path:
    """Lay out ``fig``, write it to ``path`` (folders created, format from the suffix, 100
    dpi) and return the path. A figure pyplot knows is closed afterwards.

    The file is written atomically (through a temporary file and a rename): a symbolic link
    at ``path`` is replaced, never written through, and one leading outside its folder is
    refused (``UnsafePathError``, a ``ValueError``).

    :param fig: the figure to write.
    :param path: the file to write (its suffix gives the format: ``.png``, ``.pdf``, ``.svg``, ...).
    """
    path = Path(path)
    engine = getattr(fig, "get_layout_engine", lambda: None)()
    if engine is None:
        fig.tight_layout()
    image_format = path.suffix[1:].lower() or None
    write_atomically(path, lambda handle: fig.savefig(handle, format=image_format, dpi=100), binary=True)
    if fig.canvas.manager is not None:
        import matplotlib.pyplot as plt

        plt.close(fig)
    return path
