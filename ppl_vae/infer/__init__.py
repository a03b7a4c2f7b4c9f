"""Objectives (Pyro ELBO subclasses), divergences, schedules and auxiliary steps."""
from ppl_vae.infer.contrastive import ContrastiveELBO, discriminator_loss, permute_shared
from ppl_vae.infer.decomposition import DecompositionELBO
from ppl_vae.infer.divergences import aggregate_log_density, inclusive_kl, mmd_dimensionwise
from ppl_vae.infer.steps import (
    AuxiliaryStep,
    auxiliary_modules,
    auxiliary_steps,
    objective_terms,
    set_training_step,
)

__all__ = [
    "AuxiliaryStep",
    "ContrastiveELBO",
    "DecompositionELBO",
    "aggregate_log_density",
    "auxiliary_modules",
    "auxiliary_steps",
    "discriminator_loss",
    "inclusive_kl",
    "mmd_dimensionwise",
    "objective_terms",
    "permute_shared",
    "set_training_step",
]
