"""Posterior predictive checks for any model in the library.

The model's observed sites split into the *replicated* sites, the data x the check criticises
(by default the sites that observe one of the tensors passed as data), and the *conditioning*
sites c, which stay observed (PartedVAE's labels, for instance). For S replicates::

    z^(s)     ~ q(z | x, c)                 the guide, run on the data
    x_rep^(s) ~ p(x | z^(s), c)             the model, replaying z^(s), with only the
                                            replicated sites unobserved      s = 1..S

A statistic T (per site; a scalar or a vector such as one value per image or per class) is
compared between the data and the replicates element by element through the mid-p posterior
predictive p-value

    p = P(T(x_rep) > T(x)) + 1/2 P(T(x_rep) = T(x)),

estimated over the S replicates (Gelman, Meng & Stern 1996; the mid-p value of Lancaster 1961),
so a statistic that the replicates tie with the data, e.g. a pixel that is 0 in the data and in
every replicate, gets p = 1/2, not an extreme value. Values near 0 flag a T(x) larger than the
model reproduces, near 1 a smaller one. An element whose replicates have no spread (all S
values equal) cannot be judged from them and is marked uninformative. The realised
discrepancy ``D(x, z) = -log p(x | z, c)``, evaluated with the likelihood at each draw of z,
gives a p-value ``P(D(x_rep, z) > D(x, z)) + 1/2 P(=)`` that needs no chosen statistic.

Plain Pyro does the same with :class:`pyro.infer.Predictive` on a model whose data sites are
unobserved; ``Predictive(model.model, guide=model.guide, ...)(x)`` returns x itself at an
observed site, as Pyro does for every observed site.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from pyro import poutine
from pyro.poutine.messenger import Messenger
from pyro.poutine.trace_struct import Trace

from ppl_vae._progress import Progress
from ppl_vae.infer.observations import check_observations_in_support

Statistic = Callable[[torch.Tensor], torch.Tensor]
#: Two-sided mid-p values below this count as extreme in :attr:`StatisticCheck.extreme_fraction`.
EXTREME_LEVEL = 0.05


def mean_intensity(x: torch.Tensor) -> torch.Tensor:
    """Mean value over every point and feature: ``(N, ...) -> ()``. One number over the whole
    data set has little spread across replicates, so any bias reads as p near 0 or 1; prefer
    :func:`point_means`.

    :param x: ``(N, ...)`` data or one replicate of it.
    """
    return x.float().mean()


def point_means(x: torch.Tensor) -> torch.Tensor:
    """Mean over the features of each point (an image's mean intensity): ``(N, ...) -> (N,)``.

    :param x: ``(N, ...)`` data or one replicate of it.
    """
    return x.float().reshape(x.shape[0], -1).mean(1)


def pixel_means(x: torch.Tensor) -> torch.Tensor:
    """Mean over points of each feature (pixel): ``(N, ...) -> (prod(...),)``.

    :param x: ``(N, ...)`` data or one replicate of it.
    """
    return x.float().reshape(x.shape[0], -1).mean(0)


def point_roughness(x: torch.Tensor) -> torch.Tensor:
    """Mean absolute difference between neighbouring features of each point: ``(N, ...) ->
    (N,)``. For images ``(N, [C,] H, W)`` the neighbours are the horizontally and vertically
    adjacent pixels; for vectors ``(N, F)``, features ``f`` and ``f + 1``. Independent draws
    from blurred means (a factorised likelihood) are rougher than strokes, which this shows.

    :param x: ``(N, ...)`` data or one replicate of it, at least two features along the last axis.
    :raises ValueError: a point with fewer than two features along its last axis.
    """
    if x.dim() < 2 or x.shape[-1] < 2:
        raise ValueError(f"point_roughness needs points with >= 2 features along the last axis, got shape {tuple(x.shape)}")
    x = x.float()
    horizontal = (x[..., 1:] - x[..., :-1]).abs().reshape(x.shape[0], -1)
    if x.dim() < 3:
        return horizontal.mean(1)
    vertical = (x[..., 1:, :] - x[..., :-1, :]).abs().reshape(x.shape[0], -1)
    return torch.cat([horizontal, vertical], dim=1).mean(1)


class per_class_mass:  # noqa: N801 (a statistic, called like the functions above)
    """A statistic giving, for each class k, the mean total mass (sum over features) of the
    points labelled k: ``(N, ...) -> (K,)``.

    :param labels: ``(N,)`` int class of each point; the classes in increasing order name the
        statistic's elements (its ``element_labels``).
    """

    def __init__(self, labels: torch.Tensor | Sequence[int]) -> None:
        self.labels = torch.as_tensor(labels).long()
        if self.labels.dim() != 1:
            raise ValueError(f"labels must have shape (N,), got {tuple(self.labels.shape)}")
        self.classes = torch.unique(self.labels)
        self.element_labels = tuple(f"class {int(k)}" for k in self.classes)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """``(N, ...) -> (K,)``: the mean of ``x_n.sum()`` over the points n of each class."""
        if x.shape[0] != self.labels.shape[0]:
            raise ValueError(f"labels has {self.labels.shape[0]} entries but the data has {x.shape[0]} points")
        mass = x.float().reshape(x.shape[0], -1).sum(1)
        labels = self.labels.to(x.device)
        return torch.stack([mass[labels == k].mean() for k in self.classes])


def default_statistics(observed: torch.Tensor) -> dict[str, Statistic]:
    """The statistics a site gets when none are named for it: :func:`point_means` (one p-value
    per point), :func:`pixel_means` (one per feature) and, for points with at least two
    features along their last axis, :func:`point_roughness`.

    :param observed: the site's data ``(N, ...)``.
    """
    statistics: dict[str, Statistic] = {"point_means": point_means, "pixel_means": pixel_means}
    if observed.dim() >= 2 and observed.shape[-1] >= 2:
        statistics["point_roughness"] = point_roughness
    return statistics


def mid_p_value(replicated: np.ndarray, observed: np.ndarray) -> np.ndarray:
    """``P(T_rep > T_obs) + 1/2 P(T_rep = T_obs)`` over the first axis of ``replicated``
    ``(S, *shape)``, per element of ``observed`` ``shape``: an array of ``shape``.

    :param replicated: ``(S, *shape)`` the statistic of S replicated data sets.
    :param observed: ``shape``, the statistic of the observed data.
    """
    return (replicated > observed).mean(0) + 0.5 * (replicated == observed).mean(0)


@dataclass
class StatisticCheck:
    """One statistic at one replicated site.

    :param observed: T(x), shape ``E`` (``()`` for a scalar statistic).
    :param replicated: T(x_rep) for each replicate, ``(num_samples, *E)``.
    :param p_value: the mid-p value ``P(T(x_rep) > T(x)) + 1/2 P(T(x_rep) = T(x))`` per
        element, shape ``E``.
    :param element_labels: names of the elements of a vector statistic (e.g. its classes).
    """

    observed: np.ndarray
    replicated: np.ndarray
    p_value: np.ndarray
    element_labels: tuple[str, ...] | None = None

    @property
    def informative(self) -> np.ndarray:
        """Per element (shape ``E``), whether its replicates vary at all: an element whose S
        replicates are all equal says nothing a p-value can calibrate."""
        return np.asarray(self.replicated.max(0) > self.replicated.min(0))

    @property
    def extreme(self) -> np.ndarray:
        """Per element (shape ``E``): informative and with a two-sided p-value
        ``2 min(p, 1 - p)`` below 0.05 (``EXTREME_LEVEL``)."""
        two_sided = 2 * np.minimum(self.p_value, 1 - self.p_value)
        return np.asarray((two_sided < EXTREME_LEVEL) & self.informative)

    @property
    def extreme_fraction(self) -> float:
        """Fraction of the informative elements that are extreme (0 when none is informative)."""
        informative = self.informative
        return float(self.extreme.sum() / informative.sum()) if informative.any() else 0.0

    def summary(self) -> dict[str, float | bool]:
        """JSON-ready figures: ``p_value``, the mean p-value over the informative elements (0.5
        when none is); ``extreme_fraction``; ``informative_fraction``, the fraction of elements
        whose replicates vary; ``informative``, whether any does; and ``mean_abs_gap``, the mean
        over elements of ``|mean_s T(x_rep^(s)) - T(x)|``."""
        informative = self.informative
        p_values = np.asarray(self.p_value)[informative]
        gap = np.abs(self.replicated.mean(0) - self.observed)
        return {
            "p_value": float(p_values.mean()) if p_values.size else 0.5,
            "extreme_fraction": self.extreme_fraction,
            "informative_fraction": float(np.mean(informative)),
            "informative": bool(informative.any()),
            "mean_abs_gap": float(np.mean(gap)),
        }


@dataclass
class PPCResult:
    """What :func:`posterior_predictive_check` found.

    :param checks: by ``"site/statistic"``.
    :param discrepancy_p_values: by site, the mid-p value of the realised discrepancy.
    :param observed: the data by site, ``(N, ...)``.
    :param replicates: the first ``keep_replicates`` replicates by site, ``(K, N, ...)``.
    :param latents: the guide's draws by latent site, ``(S, ...)`` (one per replicate).
    :param log_likelihood: by site, ``log p(x_n | z_n^(s), c_n)`` per replicate and point,
        ``(S, N)`` (the site's batch shape after S).
    :param sites: the replicated sites, in the model's order.
    """

    checks: dict[str, StatisticCheck] = field(default_factory=dict)
    discrepancy_p_values: dict[str, float] = field(default_factory=dict)
    observed: dict[str, torch.Tensor] = field(default_factory=dict)
    replicates: dict[str, torch.Tensor] = field(default_factory=dict)
    latents: dict[str, torch.Tensor] = field(default_factory=dict)
    log_likelihood: dict[str, torch.Tensor] = field(default_factory=dict)
    sites: tuple[str, ...] = ()

    def summary(self) -> dict[str, dict[str, float | bool] | float]:
        """All figures as a JSON-ready dict: :meth:`StatisticCheck.summary` by
        ``"site/statistic"`` and the discrepancy p-value as ``"site/discrepancy_p_value"``."""
        out: dict[str, dict[str, float | bool] | float] = {k: c.summary() for k, c in self.checks.items()}
        for site, p in self.discrepancy_p_values.items():
            out[f"{site}/discrepancy_p_value"] = p
        return out

    def to_inference_data(self) -> Any:
        """The check as an :class:`arviz.InferenceData` (needs ArviZ: ``pip install
        'ppl_vae[arviz]'``), one chain of S draws:

        - ``posterior``: the guide's draws of each latent site, ``(1, S, ...)``;
        - ``log_likelihood``: per site, ``log p(x_n | z_n^(s), c_n)``, ``(1, S, N)``, so
          ``az.loo`` and ``az.compare`` run (the draws come from the amortised guide, one
          z_n per point, so read the Pareto k diagnostics: they flag points where q is a
          poor proposal);
        - ``observed_data`` and ``posterior_predictive``: each statistic ``"site/name"`` as a
          variable ``"site.name"``, T(x) and T(x_rep) ``(1, S, ...)``; and each site whose
          every replicate was kept (``keep_replicates >= num_samples``) as a variable named
          after it, the data and the replicates.

        Per-point statistics (:func:`point_means`, :func:`point_roughness`) give
        ``az.plot_ppc(idata, var_names=["x.point_means"])`` the distribution over the points of
        the data's and of each replicate's values; ``az.plot_bpv(idata, var_names=[...])``
        shows their u-values (uniform for a model that reproduces them). ``plot_bpv`` and
        ``plot_ppc`` of a scalar statistic have one observed value to draw: use a vector one.
        ArviZ's ``kind="t_stat"`` p-value is the lower tail ``P(T(x_rep) <= T(x))``, about
        ``1 - p`` of ours.
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
        posterior = {name: draws.float().cpu().numpy()[None] for name, draws in self.latents.items()}
        log_likelihood = {site: values.float().cpu().numpy()[None] for site, values in self.log_likelihood.items()}
        return az.from_dict(
            posterior=posterior or None,
            posterior_predictive=predictive,
            observed_data=observed,
            log_likelihood=log_likelihood or None,
        )


class replicate_sites(Messenger):  # noqa: N801 (a Pyro effect handler, used like poutine's)
    """Unobserve the named sample sites and nothing else, as ``poutine.uncondition`` does for
    every site: at each named observed site the model samples a replicate, the observation is
    kept in ``msg["infer"]["obs"]`` and ``msg["infer"]["was_observed"]`` is set.

    :param sites: the names of the sites to replicate.
    """

    def __init__(self, sites: Iterable[str]) -> None:
        super().__init__()
        self.sites = frozenset(sites)

    def _pyro_sample(self, msg: dict[str, Any]) -> None:
        if msg["name"] in self.sites and msg["is_observed"]:
            msg["is_observed"] = False
            msg["infer"]["obs"] = msg["value"]
            msg["infer"]["was_observed"] = True
            msg["value"] = None
            msg["done"] = False


def _holds_data(value: Any, data: Mapping[str, Any]) -> bool:
    """Whether ``value`` is one of the tensors of ``data`` (the same object or equal)."""
    if not isinstance(value, torch.Tensor):
        return False
    return any(
        isinstance(tensor, torch.Tensor)
        and (value is tensor or (value.shape == tensor.shape and torch.equal(value, tensor.to(value))))
        for tensor in data.values()
    )


def data_sites(trace: Trace, data: Mapping[str, Any]) -> tuple[str, ...]:
    """The observed sample sites of a model's ``trace`` whose observed value is one of the
    tensors of ``data``, in the model's order: the default replicated sites. A site that
    observes something derived from the data (PartedVAE's one-hot classes from ``y``) is not
    among them and stays observed in the replicates.

    :param trace: a trace of the model run on ``data``.
    :param data: the tensors the model was given, by name.
    """
    return tuple(
        name
        for name, node in trace.nodes.items()
        if node["type"] == "sample" and node["is_observed"] and _holds_data(node["value"], data)
    )


def _replicated_sites(trace: Trace, data: Mapping[str, Any], sites: Sequence[str] | None) -> tuple[str, ...]:
    observed = [name for name, node in trace.nodes.items() if node["type"] == "sample" and node["is_observed"]]
    if sites is None:
        found = data_sites(trace, data)
        if not found:
            raise ValueError(
                f"no observed site of the model holds one of the data tensors {sorted(data)} (observed sites: "
                f"{observed}): name the sites to replicate with sites="
            )
        return found
    if isinstance(sites, str):
        sites = [sites]
    unknown = [site for site in sites if site not in observed]
    if unknown or not sites:
        raise ValueError(f"sites must name observed sites of the model, one of {observed}; got {list(sites)}")
    return tuple(sites)


def _statistics_by_site(
    statistics: Mapping[str, Statistic] | Mapping[str, Mapping[str, Statistic]] | None,
    sites: tuple[str, ...],
    observed: Mapping[str, torch.Tensor],
) -> dict[str, dict[str, Statistic]]:
    """Each replicated site's statistics: those named for it, else :func:`default_statistics`."""
    if statistics is None:
        return {site: default_statistics(observed[site]) for site in sites}
    if not isinstance(statistics, Mapping):
        raise ValueError(f"statistics must be a mapping, got {type(statistics).__name__}")
    values = list(statistics.values())
    if values and all(callable(v) and not isinstance(v, Mapping) for v in values):
        if len(sites) > 1:
            raise ValueError(
                f"statistics maps names to statistics but {len(sites)} sites are replicated {list(sites)}: give "
                "{site: {name: statistic}} so that each statistic applies to the site it was made for"
            )
        return {sites[0]: dict(statistics)}
    if not all(isinstance(v, Mapping) for v in values):
        raise ValueError("statistics must map names to statistics, or sites to {name: statistic}, not a mix")
    unknown = sorted(set(statistics) - set(sites))
    if unknown:
        raise ValueError(f"statistics names sites {unknown} that are not replicated; replicated sites: {list(sites)}")
    return {site: dict(statistics[site]) if site in statistics else default_statistics(observed[site]) for site in sites}


class _Draws:
    """What each replicate contributes, collected per site over the S replicates."""

    def __init__(self, sites: tuple[str, ...], keep_replicates: int) -> None:
        self.sites = sites
        self.keep_replicates = keep_replicates
        self.replicas: dict[str, list[torch.Tensor]] = {site: [] for site in sites}
        self.log_likelihood: dict[str, list[torch.Tensor]] = {site: [] for site in sites}
        self.discrepancy_observed: dict[str, list[torch.Tensor]] = {site: [] for site in sites}
        self.discrepancy_replicated: dict[str, list[torch.Tensor]] = {site: [] for site in sites}
        self.latents: dict[str, list[torch.Tensor]] = {}

    def add(self, guide_trace: Trace, model_trace: Trace, statistics: Mapping[str, Mapping[str, Statistic]]) -> dict:
        """Record one replicate; return its statistics ``{site: {name: T(x_rep)}}``."""
        for name, node in guide_trace.nodes.items():
            if node["type"] == "sample" and not node["is_observed"]:
                self.latents.setdefault(name, []).append(node["value"].detach().cpu())
        values = {}
        for site in self.sites:
            node = model_trace.nodes[site]
            fn, observed, replicate = node["fn"], node["infer"]["obs"], node["value"]
            log_likelihood = fn.log_prob(observed)
            self.log_likelihood[site].append(log_likelihood.cpu())
            self.discrepancy_observed[site].append(-log_likelihood.sum())
            self.discrepancy_replicated[site].append(-fn.log_prob(replicate).sum())
            if len(self.replicas[site]) < self.keep_replicates:
                self.replicas[site].append(replicate.cpu())
            values[site] = {name: statistic(replicate) for name, statistic in statistics[site].items()}
        return values


@torch.no_grad()
def posterior_predictive_check(
    model: torch.nn.Module,
    data: Mapping[str, torch.Tensor],
    statistics: Mapping[str, Statistic] | Mapping[str, Mapping[str, Statistic]] | None = None,
    num_samples: int = 20,
    seed: int = 0,
    keep_replicates: int = 0,
    progress: bool = True,
    sites: Sequence[str] | None = None,
) -> PPCResult:
    """Posterior predictive check of a fitted model on ``data`` (see :mod:`ppl_vae.checks`).

    :param model: any module with ``model(**data)`` / ``guide(**data)`` (every model here).
    :param data: the batch keyword arguments, e.g. ``{"x": x (N, 1, 28, 28)}`` or, for
        PartedVAE with labels, ``{"x": x, "y": y (N,)}`` (the classes stay the given ones).
    :param statistics: ``{name: T}`` for a single replicated site, or ``{site: {name: T}}``;
        each T maps a site's values ``(N, ...)`` to a scalar or a vector and applies only to
        the site it is given for. A replicated site without statistics gets
        :func:`default_statistics`. Use :class:`per_class_mass` for labelled data.
    :param num_samples: S, the number of replicate data sets (one z ~ q(z | x) each).
    :param seed: seed of the draws (the result repeats exactly).
    :param keep_replicates: how many replicate data sets to return (for pictures; all of them
        for :meth:`PPCResult.to_inference_data` to hold the data itself).
    :param progress: show the progress over the replicates: a bar when stderr is a terminal,
        else a start and a finish line with the time.
    :param sites: the observed sites to replicate; default: those that observe a tensor of
        ``data`` (:func:`data_sites`). Every other observed site stays observed.
    :returns: mid-p values ``P(T(x_rep) > T(x)) + 1/2 P(T(x_rep) = T(x))`` per element.
    :raises ValueError: bad arguments, no site to replicate, or data outside the support of a
        replicated site's likelihood (e.g. grey levels under a Bernoulli likelihood).
    """
    if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 2:
        raise ValueError(f"num_samples must be an integer >= 2, got {num_samples!r}")
    if not data:
        raise ValueError("data must name at least one tensor")
    was_training = model.training
    model.eval()
    result = PPCResult()
    try:
        with poutine.seed(rng_seed=seed):
            prior_trace = poutine.trace(model.model).get_trace(**data)
            replicated = _replicated_sites(prior_trace, data, sites)
            check_observations_in_support(prior_trace, replicated)
            result.sites = replicated
            result.observed = {site: prior_trace.nodes[site]["value"].cpu() for site in replicated}
            by_site = _statistics_by_site(statistics, replicated, result.observed)
            draws = _Draws(replicated, keep_replicates)
            per_replicate = []
            replicate_model = replicate_sites(replicated)(model.model)
            with Progress(num_samples, "posterior predictive check", progress, "replicates") as bar:
                for _ in range(num_samples):
                    guide_trace = poutine.trace(model.guide).get_trace(**data)
                    model_trace = poutine.trace(poutine.replay(replicate_model, trace=guide_trace)).get_trace(**data)
                    per_replicate.append(draws.add(guide_trace, model_trace, by_site))
                    bar.update()
    finally:
        model.train(was_training)
    for site in replicated:
        for name, statistic in by_site[site].items():
            t_obs = statistic(result.observed[site]).cpu().numpy()
            t_rep = torch.stack([values[site][name] for values in per_replicate]).cpu().numpy()
            result.checks[f"{site}/{name}"] = StatisticCheck(
                t_obs, t_rep, mid_p_value(t_rep, t_obs), getattr(statistic, "element_labels", None)
            )
        realised = torch.stack(draws.discrepancy_observed[site]).cpu().numpy()
        simulated = torch.stack(draws.discrepancy_replicated[site]).cpu().numpy()
        result.discrepancy_p_values[site] = float(np.mean(simulated > realised) + 0.5 * np.mean(simulated == realised))
        result.log_likelihood[site] = torch.stack(draws.log_likelihood[site])
        if draws.replicas[site]:
            result.replicates[site] = torch.stack(draws.replicas[site])
    result.latents = {name: torch.stack(values) for name, values in draws.latents.items()}
    return result
