"""Pictures of a posterior predictive check (:func:`ppl_vae.checks.posterior_predictive_check`)."""
from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ppl_vae.viz._figures import axes_list, new_figure, save_figure

if TYPE_CHECKING:
    from ppl_vae.checks import PPCResult, StatisticCheck

MAX_ELEMENTS_SHOWN_ONE_BY_ONE = 20


def _scalar_panel(ax: Axes, name: str, check: StatisticCheck) -> None:
    """Histogram of T(x_rep) with T(x) marked."""
    ax.hist(check.replicated, bins=15, color="tab:blue", alpha=0.7, label="replicates")
    ax.axvline(float(check.observed), color="tab:red", label="data")
    ax.set_title(f"{name}\np = {float(check.p_value):.2f}", fontsize=9)
    ax.legend(fontsize=7)


def _elementwise_panel(ax: Axes, name: str, check: StatisticCheck) -> None:
    """A few elements (e.g. one per class): each element's replicates and data value,
    standardised by the replicates' mean and standard deviation, so that elements of
    different sizes share one axis; the p-value under each element."""
    replicated = check.replicated.reshape(check.replicated.shape[0], -1)
    observed = check.observed.reshape(-1)
    mean, std = replicated.mean(0), replicated.std(0)
    std = np.where(std > 0, std, 1.0)
    positions = np.arange(observed.size)
    rng = np.random.default_rng(0)
    jitter = rng.uniform(-0.15, 0.15, size=replicated.shape)
    ax.axhspan(-2, 2, color="0.92", zorder=0)
    ax.scatter(positions + jitter, (replicated - mean) / std, s=8, color="tab:blue", alpha=0.6, label="replicates")
    ax.scatter(positions, (observed - mean) / std, marker="D", s=40, color="tab:red", label="data", zorder=3)
    labels = check.element_labels or [str(k) for k in positions]
    crowded = observed.size > 6  # side by side, ten class names and p-values run together
    ax.set_xticks(positions, [f"{label}{' ' if crowded else chr(10)}p={p:.2f}"
                              for label, p in zip(labels, check.p_value.reshape(-1), strict=True)],
                  fontsize=7, rotation=90 if crowded else 0)
    ax.set_ylabel("(T - mean T(x_rep)) / std T(x_rep)", fontsize=8)
    ax.set_title(f"{name}\nshaded: within 2 std of the replicates", fontsize=9)
    ax.legend(fontsize=7)


def _many_elements_panel(ax: Axes, name: str, check: StatisticCheck) -> None:
    """Many elements (e.g. pixels): data against the mean replicate, with the diagonal."""
    rep_mean = check.replicated.mean(0).ravel()
    obs = check.observed.ravel()
    ax.scatter(obs, rep_mean, s=3, alpha=0.5)
    lo, hi = float(min(obs.min(), rep_mean.min())), float(max(obs.max(), rep_mean.max()))
    ax.plot([lo, hi], [lo, hi], color="tab:red", lw=1)
    ax.set_xlabel("data")
    ax.set_ylabel("mean replicate")
    ax.set_title(f"{name}\nextreme fraction = {check.extreme_fraction:.2f}", fontsize=9)


def _draw_ppc(result: PPCResult, axes, detached: bool) -> Figure:
    names = list(result.checks)
    if not names:
        raise ValueError("result holds no statistic check to draw")
    if axes is None:
        _, grid = new_figure((4 * len(names), 3.8), 1, len(names), detached=detached)
        axes = grid[0]
    for ax, name in zip(axes_list(axes, len(names)), names, strict=True):
        check = result.checks[name]
        if check.observed.ndim == 0:
            _scalar_panel(ax, name, check)
        elif check.observed.size <= MAX_ELEMENTS_SHOWN_ONE_BY_ONE:
            _elementwise_panel(ax, name, check)
        else:
            _many_elements_panel(ax, name, check)
    return ax.figure


def plot_ppc(result: PPCResult, axes: Sequence[Axes] | None = None) -> Figure:
    """One panel per statistic of ``result``: for a scalar statistic, the histogram of its
    replicates with the data's value marked; for a statistic of a few elements (at most 20,
    e.g. :func:`~ppl_vae.checks.per_class_mass`), each element's replicates and data value on
    a standardised axis; for more elements (e.g. pixel means), data against mean replicate.

    :param result: the check to draw, from :func:`~ppl_vae.checks.posterior_predictive_check`.
    :param axes: one Axes per statistic, in the order of ``result.checks``; ``None`` for a
        new pyplot figure.
    """
    return _draw_ppc(result, axes, detached=False)


def save_ppc_plot(result: PPCResult, path: str | os.PathLike) -> Path:
    """Write the panels of :func:`plot_ppc` to ``path``.

    :param result: the check to draw, from :func:`~ppl_vae.checks.posterior_predictive_check`.
    :param path: the file to write (its suffix gives the format; folders are created).
    """
    return save_figure(_draw_ppc(result, None, detached=True), path)
