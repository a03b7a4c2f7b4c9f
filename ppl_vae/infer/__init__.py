"""Objectives (Pyro ELBO subclasses), divergences, schedules and auxiliary steps."""
from ppl_vae.infer.contrastive import ContrastiveELBO, discriminator_loss, permute_shared
from ppl_vae.infer.decomposition import DecompositionELBO
from ppl_vae.infer.distributed import all_gather, global_batch, shared_permutation
from ppl_vae.infer.divergences import aggregate_log_density, inclusive_kl, mmd_dimensionwise
from ppl_vae.infer.mean_field import MeanFieldELBO
from ppl_vae.infer.parted import PartedELBO, classification_loss
from ppl_vae.infer.replay import ReplayedLoss, replay_obstacle
from ppl_vae.infer.schedules import LinearCapacity, LinearSchedule
from ppl_vae.infer.steps import (
    AuxiliaryStep,
    auxiliary_modules,
    auxiliary_steps,
    objective_terms,
    set_training_step,
)

__all__ = [
    "all_gather",
    "global_batch",
    "shared_permutation",
    "AuxiliaryStep",
    "ContrastiveELBO",
    "DecompositionELBO",
    "LinearCapacity",
    "LinearSchedule",
    "MeanFieldELBO",
    "PartedELBO",
    "ReplayedLoss",
    "aggregate_log_density",
    "auxiliary_modules",
    "auxiliary_steps",
    "classification_loss",
    "discriminator_loss",
    "inclusive_kl",
    "mmd_dimensionwise",
    "objective_terms",
    "permute_shared",
    "replay_obstacle",
    "set_training_step",
]
