"""Objectives (Pyro ELBO subclasses) and their composable terms, divergences, schedules and
auxiliary steps."""
from ppl_vae.infer.baselines import (
    DIPCovariance,
    FactorTotalCorrelation,
    KLDecomposition,
    annealed_beta_vae,
    beta_tcvae,
    beta_vae,
    dip_vae,
    factor_vae,
    info_vae,
)
from ppl_vae.infer.contrastive import ContrastiveELBO, TotalCorrelation, discriminator_loss, permute_shared
from ppl_vae.infer.decomposition import AggregateDivergence, DecompositionELBO
from ppl_vae.infer.distributed import LOCAL_BATCH, GlobalBatch
from ppl_vae.infer.divergences import aggregate_log_density, inclusive_kl, mmd_dimensionwise
from ppl_vae.infer.iteration import TrainingIteration
from ppl_vae.infer.mean_field import MeanFieldELBO
from ppl_vae.infer.parted import (
    AggregateClassKL,
    BhattacharyyaPenalty,
    ClassCapacity,
    ClassEntropy,
    ClassTerm,
    PartedELBO,
    classification_loss,
)
from ppl_vae.infer.steps import AuxiliaryStep, TrainingLoss, auxiliary_modules, auxiliary_steps
from ppl_vae.infer.terms import Capacity, Term, TermSites
from ppl_vae.infer.total_correlation import DensityRatioTotalCorrelation, density_ratio_loss, permute_factors
from ppl_vae.schedules import LinearCapacity, LinearSchedule
from ppl_vae.variables import ClassVariable

__all__ = [
    "AggregateClassKL",
    "AggregateDivergence",
    "BhattacharyyaPenalty",
    "Capacity",
    "ClassCapacity",
    "ClassEntropy",
    "ClassTerm",
    "ClassVariable",
    "DIPCovariance",
    "DensityRatioTotalCorrelation",
    "FactorTotalCorrelation",
    "KLDecomposition",
    "Term",
    "TermSites",
    "TotalCorrelation",
    "TrainingIteration",
    "TrainingLoss",
    "AuxiliaryStep",
    "ContrastiveELBO",
    "DecompositionELBO",
    "GlobalBatch",
    "LOCAL_BATCH",
    "LinearCapacity",
    "LinearSchedule",
    "MeanFieldELBO",
    "PartedELBO",
    "aggregate_log_density",
    "annealed_beta_vae",
    "beta_tcvae",
    "beta_vae",
    "density_ratio_loss",
    "dip_vae",
    "factor_vae",
    "info_vae",
    "permute_factors",
    "auxiliary_modules",
    "auxiliary_steps",
    "classification_loss",
    "discriminator_loss",
    "inclusive_kl",
    "mmd_dimensionwise",
    "permute_shared",
]
