"""Training curves: every logged term of a run against the training step."""
from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ppl_vae.viz._figures import axes_list, new_figure, save_figure

STEP = "step"
NOT_TERMS = (STEP, "epoch")
Metrics = str | os.PathLike | Sequence[Mapping[str, float]]


def _curves(metrics: Metrics) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """term -> (steps, values) where the term was logged, in order of first appearance."""
    if isinstance(metrics, (str, os.PathLike)):
        from ppl_vae.train import read_training_metrics  # the engine's reader; Lightning loads on first use

        table = {name: np.asarray(values, dtype=float) for name, values in read_training_metrics(metrics).items()}
        steps = table.pop(STEP)
        return {name: (steps[~np.isnan(values)], values[~np.isnan(values)])
                for name, values in table.items() if name not in NOT_TERMS}
    curves: dict[str, tuple[list[float], list[float]]] = {}
    for row in metrics:
        for key, value in row.items():
            if key not in NOT_TERMS and STEP in row:
                steps, values = curves.setdefault(key, ([], []))
                steps.append(row[STEP])
                values.append(value)
    return {key: (np.asarray(s), np.asarray(v)) for key, (s, v) in curves.items()}


def spans_decades(values: np.ndarray, decades: float = 2.0) -> bool:
    """Whether the finite ``values`` are all positive and their max/min ratio is at least
    ``10 ** decades`` (a log scale shows them better)."""
    finite = values[np.isfinite(values)]
    return finite.size > 1 and bool(finite.min() > 0) and math.log10(finite.max() / finite.min()) >= decades


def _draw_curves(metrics: Metrics, ax, detached: bool) -> Figure:
    curves = _curves(metrics)
    if not curves:
        raise ValueError("metrics holds no logged term (only steps or nothing)")
    if ax is None:
        columns = min(3, len(curves))
        rows_count = -(-len(curves) // columns)
        fig, grid = new_figure((4 * columns, 2.8 * rows_count), rows_count, columns, detached=detached)
        for extra in grid.ravel()[len(curves) :]:
            extra.set_visible(False)
        ax = grid.ravel()[: len(curves)]
    if isinstance(ax, Axes):
        for name, (steps, values) in curves.items():
            ax.plot(steps, values, label=name)
        if all(spans_decades(values) for _, values in curves.values()):
            ax.set_yscale("log")
        ax.set_xlabel("step")
        ax.legend(fontsize=7)
        return ax.figure
    for panel, (name, (steps, values)) in zip(axes_list(ax, len(curves), "ax"), curves.items(), strict=True):
        panel.plot(steps, values, marker="." if len(steps) < 30 else None)
        if spans_decades(values):
            panel.set_yscale("log")
        panel.set_title(name, fontsize=9)
        panel.set_xlabel("step")
    return panel.figure


def plot_training_curves(metrics: Metrics, ax: Axes | Sequence[Axes] | None = None) -> Figure:
    """Every logged term against the training step, one panel per term (a log scale where a
    positive term spans two decades or more).

    :param metrics: a run directory or its ``metrics.csv``, or rows such as
        the ``history`` of a :class:`ppl_vae.FitResult` (dicts with ``"step"`` and term values).
    :param ax: one Axes to draw every term into, one Axes per term (in the order the terms
        first appear), or ``None`` for a new pyplot figure.
    """
    return _draw_curves(metrics, ax, detached=False)


def save_training_curves(metrics: Metrics, path: str | os.PathLike) -> Path:
    """Write the panels of :func:`plot_training_curves` to ``path``.

    :param metrics: a run directory or its ``metrics.csv``, or rows such as the ``history`` of
        a :class:`ppl_vae.FitResult`.
    :param path: the file to write (its suffix gives the format; folders are created).
    """
    return save_figure(_draw_curves(metrics, None, detached=True), path)
