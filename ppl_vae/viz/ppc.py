"""Pictures of a posterior predictive check (:func:`ppl_vae.checks.posterior_predictive_check`)."""
from __future__ import annotations

import os
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ppl_vae.viz._figures import as_numpy, axes_list, new_figure, save_figure

if TYPE_CHECKING:
    from ppl_vae.checks import PITTest, PPCResult, StatisticCheck

MAX_ELEMENTS_SHOWN_ONE_BY_ONE = 20
PANELS_PER_ROW = 4


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
    ax.plot([lo, hi], [lo, hi], color="tab:red", lw=1, label="diagonal: replicates agree with the data")
    ax.set_xlabel("data")
    ax.set_ylabel("mean replicate")
    ax.legend(fontsize=7)
    ax.set_title(f"{name}\nextreme fraction = {check.extreme_fraction:.2f}", fontsize=9)


def _pit_panel(ax: Axes, tests: Sequence[PITTest]) -> None:
    """The PITs of one check at one site, a step histogram per statistic, over the band in
    which a fitting model's histogram lies (95% of bins, binomial)."""
    bins = np.linspace(0, 1, 11)
    points = tests[0].points
    low, high = (np.asarray(_binomial_band(points, 0.1)) / points) * 10
    ax.axhspan(low, high, color="0.9", zorder=0, label="a fitting model (95%)")
    ax.axhline(1.0, color="0.5", lw=0.8)
    for test in tests:
        density, _ = np.histogram(test.pit.ravel(), bins=bins, density=True)
        ax.stairs(density, bins, label=test.statistic, lw=1.5)
    ax.set_xlim(0, 1)
    ax.set_xlabel("PIT: where each point falls among its replicates")
    ax.set_ylabel("density")
    ax.set_title(f"{tests[0].site}, {tests[0].check} check\nflat = the data are one more draw", fontsize=9)
    ax.legend(fontsize=6, ncol=2)


def _scatter_panel(ax: Axes, site: str, observed: np.ndarray, drawn: np.ndarray) -> None:
    """Two-dimensional points: the data over one data set of the model's draws (z from the prior)."""
    ax.scatter(drawn[:, 0], drawn[:, 1], s=4, color="tab:blue", alpha=0.5, label="model's draws (z from the prior)")
    ax.scatter(observed[:, 0], observed[:, 1], s=4, color="tab:red", alpha=0.7, label="data")
    ax.set_title(f"{site}: data and the model's draws", fontsize=9)
    ax.legend(fontsize=7)


def _binomial_band(n: int, p: float) -> tuple[float, float]:
    """The central 95% range of a Binomial(n, p) count."""
    from scipy import stats

    return float(stats.binom.ppf(0.025, n, p)), float(stats.binom.ppf(0.975, n, p))


def _panels(result: PPCResult) -> list:
    """Each panel as a function of its Axes: the verdict's (data and draws for 2-d points, the
    PITs of each check and site), then one per statistic."""
    panels = []
    for site, drawn in result.marginal_replicates.items():
        observed = result.observed.get(site)
        if observed is not None and observed[0].numel() == 2:
            flat = [as_numpy(values).reshape(values.shape[0], 2) for values in (observed, drawn)]
            panels.append(lambda ax, site=site, flat=flat: _scatter_panel(ax, site, *flat))
    groups: dict[tuple[str, str], list[PITTest]] = {}
    for test in result.tests:
        groups.setdefault((test.check, test.site), []).append(test)
    panels += [lambda ax, tests=tests: _pit_panel(ax, tests) for tests in groups.values()]
    for name, check in result.checks.items():
        if check.observed.ndim == 0:
            panels.append(lambda ax, name=name, check=check: _scalar_panel(ax, name, check))
        elif check.observed.size <= MAX_ELEMENTS_SHOWN_ONE_BY_ONE:
            panels.append(lambda ax, name=name, check=check: _elementwise_panel(ax, name, check))
        else:
            panels.append(lambda ax, name=name, check=check: _many_elements_panel(ax, name, check))
    return panels


def _draw_ppc(result: PPCResult, axes, detached: bool) -> Figure:
    panels = _panels(result)
    if not panels:
        raise ValueError("result holds no check to draw")
    if axes is None:
        columns = min(PANELS_PER_ROW, len(panels))
        rows = -(-len(panels) // columns)
        fig, grid = new_figure((3.6 * columns, 3.4 * rows + 0.4), rows, columns, detached=detached)
        listed = list(grid.ravel())
        for ax in listed[len(panels):]:
            ax.set_visible(False)
        listed = listed[:len(panels)]
    else:
        listed = axes_list(axes, len(panels))
        fig = listed[0].figure
    for ax, panel in zip(listed, panels, strict=True):
        panel(ax)
    if result.tests and axes is None:
        fig.suptitle(textwrap.fill(result.verdict, 40 * min(PANELS_PER_ROW, len(panels))),
                     fontsize=10, color="tab:red" if result.misfit else "black")
    return fig


def plot_ppc(result: PPCResult, axes: Sequence[Axes] | None = None) -> Figure:
    """The check's verdict as the title, then a panel for each part: for two-dimensional points,
    the data over one data set of the model's draws; for each check and site, the histogram of
    the PITs of its statistics (flat, inside the grey band, for a model that fits; a U for a
    predictive too narrow, a hump for one too wide, a slope for a bias); then one panel per
    statistic: for a scalar, the histogram of its replicates with the data's value marked; for a
    few elements (at most 20, e.g. :func:`~ppl_vae.checks.per_class_mass`), each element's
    replicates and data value on a standardised axis; for more (pixel means), data against
    mean replicate, with the diagonal where they agree.

    In a notebook, end the line with ``;`` (``plot_ppc(check);``): the figure shows once.

    :param result: the check to draw, from :func:`~ppl_vae.checks.posterior_predictive_check`.
    :param axes: one Axes per panel, in the order above; ``None`` for a new pyplot figure
        (at most four panels a row).
    """
    return _draw_ppc(result, axes, detached=False)


def save_ppc_plot(result: PPCResult, path: str | os.PathLike) -> Path:
    """Write the panels of :func:`plot_ppc` to ``path``.

    :param result: the check to draw, from :func:`~ppl_vae.checks.posterior_predictive_check`.
    :param path: the file to write (its suffix gives the format; folders are created).
    """
    return save_figure(_draw_ppc(result, None, detached=True), path)
