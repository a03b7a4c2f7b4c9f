"""The models ``ppl-vae train MODEL`` knows, by name, without importing them.

A :class:`Recipe` names its config class (light, :mod:`ppl_vae.recipes.configs`) and the
module that builds it; that module (torch, Pyro and the models) is imported only when a
run is built or a demo config is asked for.
"""
from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ppl_vae.recipes.configs import ContrastiveConfig, DecompositionConfig, PartedConfig, VAEConfig

if TYPE_CHECKING:
    from torch import nn

    from ppl_vae.recipes.base import Experiment


@dataclass(frozen=True)
class Recipe:
    """A named way to build an experiment.

    :param name: the CLI's ``MODEL`` argument.
    :param config_class: a dataclass with a ``train: TrainConfig`` field.
    :param module: the module whose ``build(config) -> Experiment`` builds it, whose
        ``build_untrained(config, model_inputs) -> (model, objective)`` builds the untrained model
        without loading data (``model_inputs``: the ``model_inputs`` of an
        :class:`~ppl_vae.recipes.Experiment`, as saved with a run), and whose ``demo() -> config`` gives settings that train on a CPU in
        about a minute.
    :param description: one line for ``ppl-vae list``.
    """

    name: str
    config_class: type
    module: str
    description: str

    def build(self, config: Any) -> Experiment:
        """The model, objective, training data and evaluation of ``config``.

        :param config: an instance of the recipe's ``config_class``.
        """
        return importlib.import_module(self.module).build(config)

    def build_model(self, config: Any, model_inputs: Mapping[str, Any]) -> tuple[nn.Module, Any]:
        """The untrained model and objective of ``config``, without loading data.

        :param config: an instance of the recipe's ``config_class``.
        :param model_inputs: the facts about the training data the model's sizes depend on, as
            a run saved them (the ``model_inputs`` of an :class:`~ppl_vae.recipes.Experiment`).
        """
        return importlib.import_module(self.module).build_untrained(config, model_inputs)

    def demo(self) -> Any:
        """The small demo config."""
        return importlib.import_module(self.module).demo()


#: The recipes by name (the CLI's ``MODEL`` argument): ``"vae"``, ``"parted"``, ``"contrastive"``,
#: ``"decomposition"``.
RECIPES: dict[str, Recipe] = {
    recipe.name: recipe
    for recipe in (
        Recipe("vae", VAEConfig, "ppl_vae.recipes.vae", "plain VAE / beta-VAE (TraceMeanField_ELBO)"),
        Recipe(
            "parted",
            PartedConfig,
            "ppl_vae.recipes.parted",
            "PartedVAE: semi-supervised class-related (c, u) and class-independent (z) factors",
        ),
        Recipe(
            "contrastive",
            ContrastiveConfig,
            "ppl_vae.recipes.contrastive",
            "contrastive VAE: salient vs shared features of target and background (Abid & Zou 2019)",
        ),
        Recipe(
            "decomposition",
            DecompositionConfig,
            "ppl_vae.recipes.decomposition",
            "Decomposition VAE: structured priors + alpha D(q(z), p(z)) (DecompositionELBO)",
        ),
    )
}
