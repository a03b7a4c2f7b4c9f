"""Posterior predictive checks for any model in the library.

For data x and a fitted model/guide pair, replicates are drawn from

    x_rep ~ p(x_rep | z),   z ~ q(z | x)

by running the guide on x and the model with its observations unconditioned
(``pyro.poutine.uncondition``), as :class:`pyro.infer.Predictive` does. A statistic
T is then compared between the data and the replicates through the posterior
predictive p-value ``P(T(x_rep) >= T(x))`` (Gelman, Meng & Stern 1996): values near 0
or 1 flag a feature of the data the model does not reproduce. The realised
discrepancy ``D(x, z) = -log p(x | z)`` gives a p-value that needs no chosen statistic.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from pyro import poutine

Statistic = Callable[[torch.Tensor], torch.Tensor]


def mean_intensity(x: torch.Tensor) -> torch.Tensor:
    """Mean value over every point and feature: ``(N, ...) -> ()``."""
    return x.float().mean()


def pixel_means(x: torch.Tensor) -> torch.Tensor:
    """Mean over points of each feature (pixel): ``(N, ...) -> (prod(...),)``."""
    return x.float().reshape(x.shape[0], -1).mean(0)


def per_class_mass(labels: torch.Tensor) -> Statistic:
    """A statistic giving, for each class k, the mean total mass (sum over features) of
    the points labelled k: ``(N, ...) -> (K,)``; ``labels (N,)`` int."""
    labels = torch.as_tensor(labels).long()
    classes = torch.unique(labels)

    def statistic(x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] != labels.shape[0]:
            raise ValueError(f"labels has {labels.shape[0]} entries but the data has {x.shape[0]} points")
        mass = x.float().reshape(x.shape[0], -1).sum(1)
        return torch.stack([mass[labels.to(x.device) == k].mean() for k in classes])

    return statistic


DEFAULT_STATISTICS: dict[str, Statistic] = {"mean_intensity": mean_intensity, "pixel_means": pixel_means}


@dataclass
class StatisticCheck:
    """One statistic at one observed site.

    :param observed: T(x), shape ``S`` (``()`` for a scalar statistic).
    :param replicated: T(x_rep) for each replicate, ``(num_samples, *S)``.
    :param p_value: ``P(T(x_rep) >= T(x))`` per element, shape ``S``.
    """

    observed: np.ndarray
    replicated: np.ndarray
    p_value: np.ndarray

    @property
    def extreme_fraction(self) -> float:
        """Fraction of elements with a two-sided p-value below 0.05."""
        two_sided = 2 * np.minimum(self.p_value, 1 - self.p_value)
        return float(np.mean(two_sided < 0.05))

    def summary(self) -> dict[str, float]:
        """JSON-ready figures: the p-value (or its mean for vector statistics), the fraction of
        extreme elements and the mean absolute gap between data and replicates."""
        gap = np.abs(self.replicated.mean(0) - self.observed)
        return {
            "p_value": float(np.mean(self.p_value)),
            "extreme_fraction": self.extreme_fraction,
            "mean_abs_gap": float(np.mean(gap)),
        }


@dataclass
class PPCResult:
    """Checks by ``"site/statistic"`` and discrepancy p-values by site."""

    checks: dict[str, StatisticCheck] = field(default_factory=dict)
    discrepancy_p_values: dict[str, float] = field(default_factory=dict)
    replicates: dict[str, torch.Tensor] = field(default_factory=dict)

    def summary(self) -> dict[str, dict[str, float] | float]:
        """All figures as a JSON-ready dict."""
        out: dict[str, dict[str, float] | float] = {k: c.summary() for k, c in self.checks.items()}
        for site, p in self.discrepancy_p_values.items():
            out[f"{site}/discrepancy_p_value"] = p
        return out


def _replicate(model, data: Mapping[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    guide_trace = poutine.trace(model.guide).get_trace(**data)
    model_trace = poutine.trace(poutine.replay(poutine.uncondition(model.model), trace=guide_trace)).get_trace(**data)
    sites = {}
    for name, site in model_trace.nodes.items():
        if site["type"] == "sample" and site["infer"].get("was_observed"):
            fn, observed, replicate = site["fn"], site["infer"]["obs"], site["value"]
            discrepancy_obs = -fn.log_prob(observed).sum()
            discrepancy_rep = -fn.log_prob(replicate).sum()
            sites[name] = {"value": replicate, "observed": observed, "d_obs": discrepancy_obs, "d_rep": discrepancy_rep}
    return sites


@torch.no_grad()
def posterior_predictive_check(
    model: torch.nn.Module,
    data: Mapping[str, torch.Tensor],
    statistics: Mapping[str, Statistic] | None = None,
    num_samples: int = 20,
    seed: int = 0,
    keep_replicates: int = 0,
) -> PPCResult:
    """Posterior predictive check of a fitted model on ``data``.

    :param model: any module with ``model(**data)`` / ``guide(**data)`` (every model here).
    :param data: the batch keyword arguments, e.g. ``{"x": x (N, 1, 28, 28)}``; every
        observed site of the model is checked.
    :param statistics: name -> T, each mapping a site's values ``(N, ...)`` to a scalar or
        a vector; defaults to :data:`DEFAULT_STATISTICS`. Use :func:`per_class_mass` for
        labelled data.
    :param num_samples: number of replicate data sets (one z ~ q(z|x) each).
    :param keep_replicates: how many replicate data sets to return (for pictures).
    """
    if num_samples < 2:
        raise ValueError(f"num_samples must be >= 2, got {num_samples}")
    if not data:
        raise ValueError("data must name at least one tensor")
    statistics = dict(DEFAULT_STATISTICS if statistics is None else statistics)
    was_training = model.training
    model.eval()
    replicated: dict[str, list] = {}
    observed: dict[str, torch.Tensor] = {}
    d_obs: dict[str, list] = {}
    d_rep: dict[str, list] = {}
    replicates: dict[str, list] = {}
    with poutine.seed(rng_seed=seed):
        for s in range(num_samples):
            for site, values in _replicate(model, data).items():
                observed[site] = values["observed"]
                replicated.setdefault(site, []).append({n: t(values["value"]) for n, t in statistics.items()})
                d_obs.setdefault(site, []).append(values["d_obs"])
                d_rep.setdefault(site, []).append(values["d_rep"])
                if s < keep_replicates:
                    replicates.setdefault(site, []).append(values["value"].cpu())
    model.train(was_training)
    if not observed:
        raise ValueError("the model has no observed sites for this data: nothing to check")
    result = PPCResult()
    for site, per_sample in replicated.items():
        for name, statistic in statistics.items():
            t_obs = statistic(observed[site]).cpu().numpy()
            t_rep = torch.stack([sample[name] for sample in per_sample]).cpu().numpy()
            result.checks[f"{site}/{name}"] = StatisticCheck(t_obs, t_rep, (t_rep >= t_obs).mean(0))
        realised = torch.stack(d_obs[site])
        simulated = torch.stack(d_rep[site])
        result.discrepancy_p_values[site] = float((simulated >= realised).float().mean())
    result.replicates = {site: torch.stack(r) for site, r in replicates.items()}
    return result


def save_ppc_plot(result: PPCResult, path: str | os.PathLike) -> Path:
    """Histograms of every scalar statistic's replicates with the observed value marked,
    and, for vector statistics, observed against mean replicated elements."""
    from ppl_vae.viz import plt, save_figure

    names = list(result.checks)
    fig, axes = plt.subplots(1, len(names), figsize=(4 * len(names), 3.5), squeeze=False)
    for ax, name in zip(axes[0], names, strict=False):
        check = result.checks[name]
        if check.observed.ndim == 0:
            ax.hist(check.replicated, bins=15, color="tab:blue", alpha=0.7, label="replicates")
            ax.axvline(float(check.observed), color="tab:red", label="data")
            ax.set_title(f"{name}\np = {float(check.p_value):.2f}", fontsize=9)
            ax.legend(fontsize=7)
        else:
            rep_mean = check.replicated.mean(0).ravel()
            obs = check.observed.ravel()
            ax.scatter(obs, rep_mean, s=3, alpha=0.5)
            lo, hi = float(min(obs.min(), rep_mean.min())), float(max(obs.max(), rep_mean.max()))
            ax.plot([lo, hi], [lo, hi], color="tab:red", lw=1)
            ax.set_xlabel("data")
            ax.set_ylabel("mean replicate")
            ax.set_title(f"{name}\nextreme fraction = {check.extreme_fraction:.2f}", fontsize=9)
    return save_figure(fig, path)
