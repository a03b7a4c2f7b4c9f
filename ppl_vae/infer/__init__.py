"""Objectives (Pyro ELBO subclasses), divergences, schedules and auxiliary steps."""
from ppl_vae.infer.steps import (
    AuxiliaryStep,
    auxiliary_modules,
    auxiliary_steps,
    objective_terms,
    set_training_step,
)

__all__ = [
    "AuxiliaryStep",
    "auxiliary_modules",
    "auxiliary_steps",
    "objective_terms",
    "set_training_step",
]
