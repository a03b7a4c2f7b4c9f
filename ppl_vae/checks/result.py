"""What a posterior predictive check returns: its verdict, findings, tests and statistics."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ppl_vae.checks.pit import Finding, PITTest, findings_of

#: Two-sided mid-p values below this count as extreme in :attr:`StatisticCheck.extreme_fraction`.
EXTREME_LEVEL = 0.05


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
    """What :func:`posterior_predictive_check` found. Read :attr:`PPCResult.verdict` first: whether any
    test found a misfit, and the :attr:`PPCResult.findings` that say where and which way.

    :param checks: the statistics compared with the per-point replicates, by ``"site/statistic"``.
    :param discrepancy_p_values: by site, the mid-p value of the realised discrepancy.
    :param observed: the data by site, ``(N, ...)``.
    :param replicates: the first ``keep_replicates`` per-point replicates by site, ``(K, N, ...)``.
    :param latents: the guide's draws by latent site, ``(S, ...)`` (one per replicate).
    :param log_likelihood: by site, ``log p(x_n | z_n^(s), c_n)`` per replicate and point,
        ``(S, N)`` (the site's batch shape after S).
    :param sites: the replicated sites, in the model's order.
    :param tests: the PIT tests the verdict counts (:class:`~ppl_vae.checks.pit.PITTest`).
    :param level: the family-wise false-alarm rate of the verdict: a model that generated the
        data is called a misfit with probability at most ``level``.
    :param marginal_replicates: by site, one data set drawn with z from the prior, ``(N, ...)``.
    """

    checks: dict[str, StatisticCheck] = field(default_factory=dict)
    discrepancy_p_values: dict[str, float] = field(default_factory=dict)
    observed: dict[str, torch.Tensor] = field(default_factory=dict)
    replicates: dict[str, torch.Tensor] = field(default_factory=dict)
    latents: dict[str, torch.Tensor] = field(default_factory=dict)
    log_likelihood: dict[str, torch.Tensor] = field(default_factory=dict)
    sites: tuple[str, ...] = ()
    tests: list[PITTest] = field(default_factory=list)
    level: float = 0.05
    marginal_replicates: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def test_count(self) -> int:
        """How many tests the verdict counts: spread and bias of each marginal test, the excess
        spread of each per-point one."""
        return sum(2 if test.exact else 1 for test in self.tests)

    @property
    def findings(self) -> list[Finding]:
        """Every finding of ``tests`` at family-wise level ``level`` (Bonferroni over
        :attr:`PPCResult.test_count`), the strongest first."""
        found = [finding for test in self.tests for finding in findings_of(test, self.test_count, self.level)]
        return sorted(found, key=lambda finding: finding.p_value)

    @property
    def misfit(self) -> bool:
        """Whether any test found the data unlike the model's replicates (:attr:`PPCResult.findings`)."""
        return bool(self.findings)

    @property
    def verdict(self) -> str:
        """One line: ``"misfit: ..."`` with the strongest finding, or ``"no misfit found ..."``."""
        if not self.tests:
            return "no test ran"
        findings = self.findings
        points = max(test.points for test in self.tests)
        if not findings:
            return (f"no misfit found: {self.test_count} tests on {points} points, "
                    f"family-wise level {self.level:g}")
        more = f" (and {len(findings) - 1} more)" if len(findings) > 1 else ""
        return f"misfit: {findings[0]}{more}"

    def __repr__(self) -> str:
        lines = [f"PPCResult({self.verdict})"]
        lines += [f"  - {finding}" for finding in self.findings[1:]]
        return "\n".join(lines)

    def summary(self) -> dict[str, Any]:
        """All figures as a JSON-ready dict, the verdict first: ``"misfit"`` (bool),
        ``"verdict"`` and ``"findings"`` (sentences); each test's
        :meth:`~ppl_vae.checks.pit.PITTest.summary` by ``"check/site/statistic"``;
        :meth:`StatisticCheck.summary` by ``"site/statistic"``; and the discrepancy p-value as
        ``"site/discrepancy_p_value"``."""
        out: dict[str, Any] = {"misfit": self.misfit, "verdict": self.verdict,
                               "findings": [str(finding) for finding in self.findings]}
        out.update({f"{test.check}/{test.site}/{test.statistic}": test.summary() for test in self.tests})
        out.update({key: check.summary() for key, check in self.checks.items()})
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
