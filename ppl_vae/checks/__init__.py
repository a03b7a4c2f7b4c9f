"""Posterior predictive checks for any model in the library: does data simulated from a fit look
like the data?

:func:`posterior_predictive_check` draws replicates of the data from the fitted model, with z
from the guide (per point) and from the prior (marginal), and tests whether the data are one
more draw among them. Its :class:`PPCResult` leads with a verdict (``misfit``) and findings,
each naming the site, the statistic, the direction (too wide, too narrow, higher, lower) and
an effect size. The statistics (:mod:`ppl_vae.checks.statistics`) default by kind of data:
images, vectors, counts.
"""
from ppl_vae.checks.pit import Finding, PITTest
from ppl_vae.checks.posterior_predictive import posterior_predictive_check
from ppl_vae.checks.replicates import data_sites, replicate_sites
from ppl_vae.checks.result import PPCResult, StatisticCheck, mid_p_value
from ppl_vae.checks.statistics import (
    data_kind,
    default_statistics,
    feature,
    mean_intensity,
    per_class_mass,
    per_point,
    pixel_means,
    point_dispersion,
    point_means,
    point_roughness,
    zero_fraction,
)

__all__ = [
    "Finding",
    "PITTest",
    "PPCResult",
    "StatisticCheck",
    "data_kind",
    "data_sites",
    "default_statistics",
    "feature",
    "mean_intensity",
    "mid_p_value",
    "per_class_mass",
    "per_point",
    "pixel_means",
    "point_dispersion",
    "point_means",
    "point_roughness",
    "posterior_predictive_check",
    "replicate_sites",
    "zero_fraction",
]
