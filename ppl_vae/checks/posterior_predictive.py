"""The posterior predictive check of a fitted model (:func:`posterior_predictive_check`).

Two kinds of replicates of the data x at the replicated sites (the conditioning sites c, e.g.
labels, stay observed):

    per-point:  z^(s) ~ q(z | x, c),  x_rep^(s) ~ p(x | z^(s), c)      s = 1..S
    marginal:   z^(r) ~ p(z),         x_rep^(r) ~ p(x | z^(r), c)      r = 0..R

A global latent theta (outside the plates of the replicated sites: shared by all points) stands
in the marginal replicates at its posterior mean under the guide, ``E_q[theta]`` (the mean of
``GLOBAL_DRAWS`` = 64 draws), fitted to the data as a decoder's weights are, and the points' own
latents are drawn from ``p(z | E_q[theta])``. Drawn from its prior it would make the marginal
check a prior predictive check, which every fitted model fails; drawn from q anew for each
replicate it would move all the points of a replicate together, which the tests, taking the
points as independent, would read as a misfit.

The per-point replicates re-draw each point around its own latent: they show what the
likelihood allows around a point the guide has seen, but they used the point to place z, so
a model that fits looks *too wide* on them (they cluster around the data). Only their excess
spread (the data straying further than the likelihood allows even at their own z: a too narrow
likelihood, too small a latent) and their bias count. The marginal replicates never saw the
data: each point's statistic is exactly one more draw among its replicates when the model
fits, so their spread and bias are tested both ways (:mod:`ppl_vae.checks.pit`).

The verdict (:attr:`PPCResult.misfit`) counts both checks' tests, on every per-point statistic,
on each feature ("features") and, for low-dimensional vectors, on two nearest-neighbour
distances (to the model's draws and to the other data points), with the family-wise level
``level`` (Bonferroni). On held-out data (``held_out=``) the same tests run again, with the
decoder free of the data they judge.

Data-set statistics (one value per class, per pixel, or over the whole data set) are compared
with the per-point replicates through the mid-p value ``P(T(x_rep) > T(x)) + 1/2 P(=)`` (Gelman,
Meng & Stern 1996; Lancaster 1961), as :class:`~ppl_vae.checks.result.StatisticCheck`; they
describe the fit and do not enter the verdict.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch
from pyro import poutine
from pyro.poutine.trace_struct import Trace

from ppl_vae._progress import Progress
from ppl_vae.checks.pit import PITCounter, PITTest
from ppl_vae.checks.replicates import replicate_sites, replicated_sites, statistics_by_site
from ppl_vae.checks.result import PPCResult, StatisticCheck, mid_p_value
from ppl_vae.checks.statistics import Statistic, is_image, is_per_point
from ppl_vae.infer.observations import check_observations_in_support, global_latents
from ppl_vae.models.pair import PyroPair, model_and_guide

#: Vectors with at most this many features get the nearest-neighbour distance tests.
NEIGHBOUR_FEATURES = 64
#: Draws of the guide whose mean places a global latent in the marginal replicates.
GLOBAL_DRAWS = 64
#: Mixed with the check's ``seed`` into the seeds of its random streams, so that they differ
#: from the streams of ``pyro.set_rng_seed(seed)`` and ``np.random.default_rng(seed)``.
_STREAM_TAG = 0x50_50_43
_DISTANCE_SENTENCES = {
    "distance_to_model": (
        "the data lie farther from the model's draws than its own draws do: data where the model puts little mass",
        "the data lie closer to the model's draws than its own draws do: the model spreads over less than it draws",
    ),
    "distance_to_data": (
        "the model's draws lie closer to the data than the data to each other: draws pile onto the data",
        "the model's draws lie farther from the data than the data from each other: mass where there are no data",
    ),
}


def _flat(x: torch.Tensor) -> torch.Tensor:
    return x.detach().float().reshape(x.shape[0], -1).cpu()


def _nearest(points: torch.Tensor, reference: torch.Tensor, exclude_same_index: bool) -> torch.Tensor:
    """``(N,)`` distance from each point ``(N, F)`` to its nearest reference point ``(M, F)``,
    without reference point n for point n when ``exclude_same_index``."""
    distances = torch.cdist(points, reference)
    if exclude_same_index:
        distances.fill_diagonal_(float("inf"))
    return distances.min(1).values


class _Tests:
    """The PIT counters of one check (per-point or marginal) of one data set, by site and name."""

    def __init__(self, check: str, observed: Mapping[str, torch.Tensor], statistics: Mapping[str, Mapping[str, Statistic]],
                 exact: bool, anchor: Mapping[str, torch.Tensor] | None = None) -> None:
        self.check, self.exact = check, exact
        self.statistics = {site: {name: s for name, s in by_name.items() if is_per_point(s)} for site, by_name in statistics.items()}
        self.observed = {site: _flat(x) for site, x in observed.items()}
        self.anchor = {site: _flat(x) for site, x in (anchor or {}).items()}
        self.counters: dict[tuple[str, str], PITCounter] = {}
        for site, x in observed.items():
            for name, value in self._values(site, x, is_data=True).items():
                self.counters[site, name] = PITCounter(value)

    def _values(self, site: str, x: torch.Tensor, is_data: bool) -> dict[str, torch.Tensor]:
        values = {name: statistic(x).detach().float().cpu() for name, statistic in self.statistics[site].items()}
        values["features"] = _flat(x)
        if site in self.anchor:
            values["distance_to_model"] = _nearest(_flat(x), self.anchor[site], exclude_same_index=False)
            values["distance_to_data"] = _nearest(_flat(x), self.observed[site], exclude_same_index=True)
        return values

    def add(self, replicates: Mapping[str, torch.Tensor]) -> None:
        """Count one replicate data set ``{site: (N, ...)}``."""
        for site, x in replicates.items():
            for name, value in self._values(site, x, is_data=False).items():
                self.counters[site, name].add(value)

    def tests(self, rng: np.random.Generator) -> list[PITTest]:
        tests = []
        for (site, name), counter in self.counters.items():
            statistic = self.statistics[site].get(name)
            higher, lower = _DISTANCE_SENTENCES.get(name, (None, None))
            if statistic is not None:
                higher = f"the data are {getattr(statistic, 'higher', 'higher')} than the model's draws"
                lower = f"the data are {getattr(statistic, 'lower', 'lower')} than the model's draws"
            elif name == "features":
                higher, lower = "feature values run higher than the model's draws", "feature values run lower than the model's draws"
            tests.append(PITTest(self.check, site, name, counter.pit(rng), self.exact, higher, lower))
        return tests


class _Draws:
    """What each per-point replicate contributes, collected per site over the S replicates."""

    def __init__(self, sites: tuple[str, ...], keep_replicates: int) -> None:
        self.sites = sites
        self.keep_replicates = keep_replicates
        self.replicas: dict[str, list[torch.Tensor]] = {site: [] for site in sites}
        self.log_likelihood: dict[str, list[torch.Tensor]] = {site: [] for site in sites}
        self.discrepancy_observed: dict[str, list[torch.Tensor]] = {site: [] for site in sites}
        self.discrepancy_replicated: dict[str, list[torch.Tensor]] = {site: [] for site in sites}
        self.latents: dict[str, list[torch.Tensor]] = {}
        self.statistics: list[dict[str, dict[str, torch.Tensor]]] = []

    def add(self, guide_trace: Trace, model_trace: Trace, statistics: Mapping[str, Mapping[str, Statistic]]) -> None:
        """Record one replicate and its statistics ``{site: {name: T(x_rep)}}``."""
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
        self.statistics.append(values)

    def fill(self, result: PPCResult, statistics: Mapping[str, Mapping[str, Statistic]]) -> None:
        """Put the statistic checks, discrepancies, likelihoods, replicates and latents in ``result``."""
        for site in self.sites:
            for name, statistic in statistics[site].items():
                t_obs = statistic(result.observed[site]).cpu().numpy()
                t_rep = torch.stack([values[site][name] for values in self.statistics]).cpu().numpy()
                result.checks[f"{site}/{name}"] = StatisticCheck(
                    t_obs, t_rep, mid_p_value(t_rep, t_obs), getattr(statistic, "element_labels", None)
                )
            realised = torch.stack(self.discrepancy_observed[site]).cpu().numpy()
            simulated = torch.stack(self.discrepancy_replicated[site]).cpu().numpy()
            result.discrepancy_p_values[site] = float(mid_p_value(simulated, realised))
            result.log_likelihood[site] = torch.stack(self.log_likelihood[site])
            if self.replicas[site]:
                result.replicates[site] = torch.stack(self.replicas[site])
        result.latents = {name: torch.stack(values) for name, values in self.latents.items()}


def _replicate(trace: Trace, sites: Sequence[str]) -> dict[str, torch.Tensor]:
    return {site: trace.nodes[site]["value"] for site in sites}


class _EvalMode:
    """Every module of ``pair`` in eval mode for the check, each set back to its own mode after."""

    def __init__(self, pair: PyroPair) -> None:
        self.modules = list(pair.modules()) if isinstance(pair, torch.nn.Module) else []

    def __enter__(self) -> None:
        self.training = [module.training for module in self.modules]
        for module in self.modules:
            module.eval()

    def __exit__(self, *exc: object) -> None:
        for module, training in zip(self.modules, self.training, strict=True):  # parents before children
            module.train(training)


def _check_data(
    model: PyroPair, data: Mapping[str, torch.Tensor], sites: Sequence[str] | None
) -> tuple[tuple[str, ...], dict[str, torch.Tensor], frozenset[str]]:
    """The replicated sites, their observed values and the model's global latents."""
    trace = poutine.trace(model.model).get_trace(**data)
    replicated = replicated_sites(trace, data, sites)
    check_observations_in_support(trace, replicated)
    return replicated, {site: trace.nodes[site]["value"].cpu() for site in replicated}, global_latents(trace, replicated)


def _global_means(model: PyroPair, data: Mapping[str, torch.Tensor], global_sites: frozenset[str]) -> Trace:
    """A trace of the global latents at their posterior means: each the mean of
    ``GLOBAL_DRAWS`` draws of the guide (a latent that is not floating point, the first
    draw's value)."""
    draws = [poutine.trace(model.guide).get_trace(**data) for _ in range(GLOBAL_DRAWS)]
    means = draws[0]
    for name in [name for name in means.nodes if name not in global_sites]:
        means.remove_node(name)
    for name, node in means.nodes.items():
        if torch.is_floating_point(node["value"]):
            node["value"] = torch.stack([draw.nodes[name]["value"] for draw in draws]).mean(0)
    return means


def _run_checks(model: PyroPair, data: Mapping[str, torch.Tensor], replicated: tuple[str, ...],
                observed: Mapping[str, torch.Tensor], statistics: Mapping[str, Mapping[str, Statistic]],
                num_samples: int, marginal_samples: int, prefix: str, draws: _Draws | None,
                update: Callable[[], None], global_sites: frozenset[str]) -> tuple[_Tests, _Tests, dict[str, torch.Tensor]]:
    """Draw the marginal replicates (the first is the nearest-neighbour anchor), then the
    per-point ones, counting both checks' PITs; ``draws`` collects the per-point replicates."""
    replicate_model = replicate_sites(replicated)(model.model)
    if global_sites:  # the global latents at their posterior means, in every marginal replicate
        replicate_model = poutine.replay(replicate_model, trace=_global_means(model, data, global_sites))
    anchor = _replicate(poutine.trace(replicate_model).get_trace(**data), replicated)
    update()
    neighbours = {site: anchor[site] for site in replicated
                  if not is_image(observed[site]) and observed[site][0].numel() <= NEIGHBOUR_FEATURES}
    marginal = _Tests(f"{prefix}marginal", observed, statistics, exact=True, anchor=neighbours)
    for _ in range(marginal_samples):
        marginal.add(_replicate(poutine.trace(replicate_model).get_trace(**data), replicated))
        update()
    per_point = _Tests(f"{prefix}per-point", observed, statistics, exact=False)
    for _ in range(num_samples):
        guide_trace = poutine.trace(model.guide).get_trace(**data)
        model_trace = poutine.trace(poutine.replay(replicate_model, trace=guide_trace)).get_trace(**data)
        per_point.add(_replicate(model_trace, replicated))
        if draws is not None:
            draws.add(guide_trace, model_trace, statistics)
        update()
    return marginal, per_point, {site: value.cpu() for site, value in anchor.items()}


def _streams(seed: int) -> tuple[int, np.random.Generator]:
    """The check's torch/Pyro seed and NumPy generator, both derived from ``seed``.

    Seeding with ``seed`` itself would replay the stream of data simulated right after
    ``pyro.set_rng_seed(seed)``: replicates of Poisson counts would then copy the data.
    """
    sequence = np.random.SeedSequence([_STREAM_TAG, seed])
    return int(sequence.generate_state(1)[0]), np.random.default_rng(sequence)  # < 2**32, as np.random.seed takes


def _positive_int(name: str, value: object, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
    return value


@torch.no_grad()
def posterior_predictive_check(
    model: torch.nn.Module | Callable,
    data: Mapping[str, torch.Tensor],
    statistics: Mapping[str, Statistic] | Mapping[str, Mapping[str, Statistic]] | None = None,
    num_samples: int = 20,
    seed: int = 0,
    keep_replicates: int = 0,
    progress: bool = True,
    sites: Sequence[str] | None = None,
    *,
    guide: Callable | None = None,
    marginal_samples: int = 50,
    held_out: Mapping[str, torch.Tensor] | None = None,
    level: float = 0.05,
) -> PPCResult:
    """Posterior predictive check of a fitted model on ``data`` (see
    :mod:`ppl_vae.checks.posterior_predictive`): ``result.verdict`` first, then
    ``result.findings``.

    Example: binary data that are all ones, which an untrained VAE (its pixels near 1/2) could
    not have drawn:

    >>> import torch
    >>> from ppl_vae.models import VAE
    >>> from ppl_vae.nn import MLP, mlp_decoder
    >>> vae = VAE(MLP([4, 16]), mlp_decoder(2, [16], (4,)), latent_dim=2)
    >>> check = posterior_predictive_check(vae, {"x": torch.ones(64, 4)}, num_samples=10,
    ...                                    marginal_samples=10, progress=False)
    >>> check.sites, check.misfit
    (('x',), True)
    >>> print(check.verdict)  # the strongest finding; check.findings lists them all  # doctest: +ELLIPSIS
    misfit: x/... (marginal check): ... higher than the model's draws (...)...

    :param model: any object with ``model(**data)`` / ``guide(**data)`` methods (every model
        here), or, with ``guide`` given, a Pyro model callable (a function, a method).
    :param data: the batch keyword arguments, e.g. ``{"x": x (N, 1, 28, 28)}`` or, for
        PartedVAE with labels, ``{"x": x, "y": y (N,)}`` (the classes stay the given ones): the
        model's arguments themselves, not :func:`~ppl_vae.fit`'s groups (a model fitted on
        ``{"data": {"X": X, "y": y}}`` is checked on ``{"X": X, "y": y}``).
    :param statistics: ``{name: T}`` for a single replicated site, or ``{site: {name: T}}``;
        each T maps a site's values ``(N, ...)`` to a scalar or a vector and applies only to
        the site it is given for. A replicated site without statistics gets
        :func:`~ppl_vae.checks.statistics.default_statistics`. Per-point statistics (marked with
        :func:`~ppl_vae.checks.statistics.per_point`) enter the verdict; use
        :class:`~ppl_vae.checks.statistics.per_class_mass` for labelled data.
    :param num_samples: S, the per-point replicates (one z ~ q(z | x) each).
    :param seed: seed of the draws, an integer >= 0 (the result repeats exactly). The check
        seeds the global random generators with a number derived from it (not ``seed`` itself,
        whose stream data simulated after ``pyro.set_rng_seed(seed)`` may share) and restores
        them after.
    :param keep_replicates: how many per-point replicate data sets to return (for pictures; all
        of them for :meth:`PPCResult.to_inference_data` to hold the data itself).
    :param progress: show the progress over the replicates: a bar when stderr is a terminal,
        else a start and a finish line with the time.
    :param sites: the observed sites to replicate; default: those that observe a tensor of
        ``data`` (:func:`~ppl_vae.checks.replicates.data_sites`). Every other observed site
        stays observed.
    :param guide: the guide of the model callable ``model`` (a function, an autoguide such as
        ``AutoNormal(model)``), as Pyro's ``Predictive(model, guide=guide)`` takes it; ``None``
        when ``model`` has a ``guide`` method. The two are checked as a
        :class:`~ppl_vae.models.ModelAndGuide`. Every module of ``model`` (of the pair) is in
        eval mode during the check and back in its own mode after.
    :param marginal_samples: R, the marginal replicates (z from the prior), besides the one
        that anchors the nearest-neighbour distances.
    :param held_out: data the model was not fitted on, with the same keys as ``data``: both
        checks run on it too (tests named ``"held-out marginal"``, ``"held-out per-point"``).
    :param level: the family-wise false-alarm rate of the verdict, in (0, 1).
    :raises TypeError: a ``model`` without ``model`` and ``guide`` methods and no ``guide``
        (:func:`~ppl_vae.models.model_and_guide`).
    :raises ValueError: bad arguments, no site to replicate, or data outside the support of a
        replicated site's likelihood (e.g. grey levels under a Bernoulli likelihood).
    """
    _positive_int("num_samples", num_samples, 2)
    _positive_int("marginal_samples", marginal_samples, 2)
    if not data:
        raise ValueError("data must name at least one tensor")
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
        raise ValueError(f"level must be a number in (0, 1), got {level!r}")
    if held_out is not None and set(held_out) != set(data):
        raise ValueError(f"held_out must have the keys of data {sorted(data)}, got {sorted(held_out)}")
    torch_seed, rng = _streams(_positive_int("seed", seed, 0))
    pair = model_and_guide(model, guide)
    result = PPCResult(level=float(level))
    data_sets = [("", data)] + ([("held-out ", held_out)] if held_out is not None else [])
    with _EvalMode(pair), poutine.seed(rng_seed=torch_seed):
        replicated, result.observed, global_sites = _check_data(pair, data, sites)
        result.sites = replicated
        by_site = statistics_by_site(statistics, replicated, result.observed)
        draws = _Draws(replicated, keep_replicates)
        total = len(data_sets) * (1 + marginal_samples + num_samples)
        with Progress(total, "posterior predictive check", progress, "replicates") as bar:
            for prefix, tensors in data_sets:
                observed = result.observed if not prefix else _check_data(pair, tensors, replicated)[1]
                marginal, per_point, anchor = _run_checks(
                    pair, tensors, replicated, observed, by_site, num_samples, marginal_samples, prefix,
                    draws if not prefix else None, bar.update, global_sites)
                result.tests += marginal.tests(rng) + per_point.tests(rng)
                if not prefix:
                    result.marginal_replicates = anchor
    draws.fill(result, by_site)
    return result
