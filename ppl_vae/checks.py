"""Posterior predictive checks for any model in the library.

For data x and a fitted model/guide pair, replicates are drawn from the posterior predictive
distribution

    x_rep ~ p(x_rep | z),   z ~ q(z | x):

:class:`pyro.infer.Predictive` draws z from the guide on x; the model, conditioned on each draw
(as Predictive conditions a model on a guide's samples) and with its observations
unconditioned (``pyro.poutine.uncondition``: our models observe x whenever they are given x,
and the guide needs x), samples a replicate at each observed site and gives the likelihood
p(x | z) at that draw, which the discrepancy below needs and Predictive does not return. A statistic
T is then compared between the data and the replicates through the posterior predictive
p-value, the upper tail

    p = P(T(x_rep) >= T(x) | x)

(Gelman, Meng & Stern 1996): values near 0 or 1 flag a feature of the data the model does not
reproduce. ArviZ's ``plot_bpv(kind="t_stat")`` reports the lower tail P(T(x_rep) <= T(x)),
which is ``1 - p`` for a continuous statistic. The realised discrepancy
``D(x, z) = -log p(x | z)``, evaluated with the likelihood at each draw of z, gives a
p-value that needs no chosen statistic.
"""
from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from pyro import poutine
from pyro.infer import Predictive
from tqdm import tqdm

Statistic = Callable[[torch.Tensor], torch.Tensor]


def mean_intensity(x: torch.Tensor) -> torch.Tensor:
    """Mean value over every point and feature: ``(N, ...) -> ()``."""
    return x.float().mean()


def pixel_means(x: torch.Tensor) -> torch.Tensor:
    """Mean over points of each feature (pixel): ``(N, ...) -> (prod(...),)``."""
    return x.float().reshape(x.shape[0], -1).mean(0)


class per_class_mass:  # noqa: N801 (a statistic, called like the functions above)
    """A statistic giving, for each class k, the mean total mass (sum over features) of the
    points labelled k: ``(N, ...) -> (K,)``.

    :param labels: ``(N,)`` int class of each point; the classes in increasing order name the
        statistic's elements (:attr:`element_labels`).
    """

    def __init__(self, labels: torch.Tensor | Sequence[int]) -> None:
        self.labels = torch.as_tensor(labels).long()
        if self.labels.dim() != 1:
            raise ValueError(f"labels must have shape (N,), got {tuple(self.labels.shape)}")
        self.classes = torch.unique(self.labels)
        self.element_labels = tuple(f"class {int(k)}" for k in self.classes)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] != self.labels.shape[0]:
            raise ValueError(f"labels has {self.labels.shape[0]} entries but the data has {x.shape[0]} points")
        mass = x.float().reshape(x.shape[0], -1).sum(1)
        labels = self.labels.to(x.device)
        return torch.stack([mass[labels == k].mean() for k in self.classes])


DEFAULT_STATISTICS: dict[str, Statistic] = {"mean_intensity": mean_intensity, "pixel_means": pixel_means}


@dataclass
class StatisticCheck:
    """One statistic at one observed site.

    :param observed: T(x), shape ``S`` (``()`` for a scalar statistic).
    :param replicated: T(x_rep) for each replicate, ``(num_samples, *S)``.
    :param p_value: the upper tail ``P(T(x_rep) >= T(x))`` per element, shape ``S``.
    :param element_labels: names of the elements of a vector statistic (e.g. its classes).
    """

    observed: np.ndarray
    replicated: np.ndarray
    p_value: np.ndarray
    element_labels: tuple[str, ...] | None = None

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
    """Checks by ``"site/statistic"``, discrepancy p-values by site, the observed values by
    site and the first ``keep_replicates`` replicates by site (``(K, N, ...)``)."""

    checks: dict[str, StatisticCheck] = field(default_factory=dict)
    discrepancy_p_values: dict[str, float] = field(default_factory=dict)
    replicates: dict[str, torch.Tensor] = field(default_factory=dict)
    observed: dict[str, torch.Tensor] = field(default_factory=dict)

    def summary(self) -> dict[str, dict[str, float] | float]:
        """All figures as a JSON-ready dict."""
        out: dict[str, dict[str, float] | float] = {k: c.summary() for k, c in self.checks.items()}
        for site, p in self.discrepancy_p_values.items():
            out[f"{site}/discrepancy_p_value"] = p
        return out

    def to_inference_data(self) -> Any:
        """The check as an :class:`arviz.InferenceData` (needs the ``arviz`` extra).

        Each statistic ``"site/name"`` becomes a variable ``"site.name"``: T(x) in
        ``observed_data``, T(x_rep) in ``posterior_predictive`` with dims ``(chain=1, draw,
        ...)``. Each site whose every replicate was kept (``keep_replicates >= num_samples``)
        is also a variable with the data in ``observed_data`` and the replicates in
        ``posterior_predictive``. ``az.plot_ppc(idata, var_names=[...])`` and
        ``az.plot_bpv(idata, kind="t_stat", var_names=[...])`` then work; note that
        ``plot_bpv`` reports the lower tail ``P(T(x_rep) <= T(x))``, ``1 - p`` of our p-values
        for a continuous statistic.
        """
        try:
            import arviz as az
        except ImportError as error:
            raise ImportError("to_inference_data needs ArviZ: pip install 'ppl_vae[arviz]'") from error
        observed: dict[str, np.ndarray] = {}
        predictive: dict[str, np.ndarray] = {}
        num_samples = None
        for key, check in self.checks.items():
            name = key.replace("/", ".")
            observed[name] = np.asarray(check.observed)
            predictive[name] = np.asarray(check.replicated)[None]
            num_samples = check.replicated.shape[0]
        for site, replicates in self.replicates.items():
            if replicates.shape[0] == num_samples and site in self.observed:
                observed[site] = self.observed[site].float().cpu().numpy()
                predictive[site] = replicates.float().cpu().numpy()[None]
        return az.from_dict(posterior_predictive=predictive, observed_data=observed)


def _progress(iterable, total: int, enabled: bool, description: str):
    """``iterable`` with a tqdm bar when ``enabled`` and stderr is a terminal."""
    return tqdm(iterable, total=total, desc=description, disable=not (enabled and sys.stderr.isatty()), leave=False)


@torch.no_grad()
def posterior_predictive_check(
    model: torch.nn.Module,
    data: Mapping[str, torch.Tensor],
    statistics: Mapping[str, Statistic] | None = None,
    num_samples: int = 20,
    seed: int = 0,
    keep_replicates: int = 0,
    progress: bool = True,
) -> PPCResult:
    """Posterior predictive check of a fitted model on ``data``.

    :param model: any module with ``model(**data)`` / ``guide(**data)`` (every model here).
    :param data: the batch keyword arguments, e.g. ``{"x": x (N, 1, 28, 28)}``; every
        observed site of the model is checked.
    :param statistics: name -> T, each mapping a site's values ``(N, ...)`` to a scalar or
        a vector; defaults to :data:`DEFAULT_STATISTICS`. Use :class:`per_class_mass` for
        labelled data.
    :param num_samples: number of replicate data sets (one z ~ q(z|x) each).
    :param seed: seed of the draws (the result repeats exactly).
    :param keep_replicates: how many replicate data sets to return (for pictures; all of them
        for :meth:`PPCResult.to_inference_data` to hold the data itself).
    :param progress: a progress bar over the replicates (shown only when stderr is a terminal).
    :returns: p-values are the upper tail ``P(T(x_rep) >= T(x))`` (see the module docstring).
    """
    if num_samples < 2:
        raise ValueError(f"num_samples must be >= 2, got {num_samples}")
    if not data:
        raise ValueError("data must name at least one tensor")
    statistics = dict(DEFAULT_STATISTICS if statistics is None else statistics)
    was_training = model.training
    model.eval()
    result = PPCResult()
    replicated: dict[str, list[dict[str, torch.Tensor]]] = {}
    d_obs: dict[str, list[torch.Tensor]] = {}
    d_rep: dict[str, list[torch.Tensor]] = {}
    replicates: dict[str, list[torch.Tensor]] = {}
    try:
        with poutine.seed(rng_seed=seed):
            draws = Predictive(model.guide, num_samples=num_samples, return_sites=None)(**data)
            guide_trace = poutine.trace(model.guide).get_trace(**data)
            shapes = {name: guide_trace.nodes[name]["value"].shape for name in draws}  # Predictive may add dims of size 1
            replicate_model = poutine.uncondition(model.model)
            for s in _progress(range(num_samples), num_samples, progress, "posterior predictive check"):
                latent = {name: draws[name][s].reshape(shape) for name, shape in shapes.items()}
                trace = poutine.trace(poutine.condition(replicate_model, latent)).get_trace(**data)
                for site, node in trace.nodes.items():
                    if node["type"] != "sample" or not node["infer"].get("was_observed"):
                        continue
                    fn, observed, replicate = node["fn"], node["infer"]["obs"], node["value"]
                    result.observed[site] = observed.cpu()
                    replicated.setdefault(site, []).append({n: t(replicate) for n, t in statistics.items()})
                    d_obs.setdefault(site, []).append(-fn.log_prob(observed).sum())
                    d_rep.setdefault(site, []).append(-fn.log_prob(replicate).sum())
                    if s < keep_replicates:
                        replicates.setdefault(site, []).append(replicate.cpu())
    finally:
        model.train(was_training)
    if not replicated:
        raise ValueError("the model has no observed sites for this data: nothing to check")
    for site, per_sample in replicated.items():
        for name, statistic in statistics.items():
            t_obs = statistic(result.observed[site]).cpu().numpy()
            t_rep = torch.stack([sample[name] for sample in per_sample]).cpu().numpy()
            result.checks[f"{site}/{name}"] = StatisticCheck(
                t_obs, t_rep, (t_rep >= t_obs).mean(0), getattr(statistic, "element_labels", None)
            )
        realised, simulated = torch.stack(d_obs[site]), torch.stack(d_rep[site])
        result.discrepancy_p_values[site] = float((simulated >= realised).float().mean())
    result.replicates = {site: torch.stack(r) for site, r in replicates.items()}
    return result
