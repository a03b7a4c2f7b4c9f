"""Priors p(z) and distribution utilities for ppl_vae's models.

Prior modules (``nn.Module`` subclasses with ``.dim`` and ``forward() -> TorchDistribution`` of
event shape ``(dim,)``) live in :mod:`ppl_vae.distributions.priors`; the Bhattacharyya
coefficient between diagonal Gaussians in :mod:`ppl_vae.distributions.bhattacharyya`; the
fixed-scale Gaussian and Laplace likelihoods in :mod:`ppl_vae.distributions.fixed_scale`.
"""

from ppl_vae.distributions.bhattacharyya import bhattacharyya_coefficient, bhattacharyya_distance
from ppl_vae.distributions.fixed_scale import FixedScaleLaplace, FixedScaleNormal
from ppl_vae.distributions.priors import (
    SPARSE_SIGMA0_AUTHORS_CODE,
    SPARSE_SIGMA0_PAPER_TEXT,
    AnisotropicGaussianPrior,
    ClassConditionalGaussianPrior,
    IsotropicGaussianPrior,
    MixtureOfGaussiansPrior,
    PriorModule,
    SparsePrior,
    StudentTPrior,
    trace_normalised_variances,
)

__all__ = [
    "SPARSE_SIGMA0_AUTHORS_CODE",
    "SPARSE_SIGMA0_PAPER_TEXT",
    "AnisotropicGaussianPrior",
    "ClassConditionalGaussianPrior",
    "FixedScaleLaplace",
    "FixedScaleNormal",
    "IsotropicGaussianPrior",
    "MixtureOfGaussiansPrior",
    "PriorModule",
    "SparsePrior",
    "StudentTPrior",
    "bhattacharyya_coefficient",
    "bhattacharyya_distance",
    "trace_normalised_variances",
]
