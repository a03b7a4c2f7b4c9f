"""The models ``ppl-vae train MODEL`` knows, by name, without importing them.

A :class:`Recipe` names its config class (light, :mod:`ppl_vae.recipes.configs`) and a
function that imports the module that builds it (``from ppl_vae.recipes import parted``: a
reader or an IDE follows it there); that module (torch, Pyro and the models) is imported only
when a run is built or a demo config is asked for.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ppl_vae.recipes.configs import ContrastiveConfig, DecompositionConfig, PartedConfig, VAEConfig

if TYPE_CHECKING:
    from torch import nn

    from ppl_vae.recipes.base import Experiment


class RecipeModule(Protocol):
    """What a recipe's module defines (:mod:`ppl_vae.recipes.vae` and its siblings): the
    functions :class:`Recipe` calls after its ``load`` has imported the module."""

    def build(self, config: Any) -> Experiment:
        """The model, objective, training data and evaluation of ``config``.

        :param config: an instance of the recipe's config class (e.g. ``VAEConfig``).
        """

    def build_untrained(self, config: Any, model_inputs: Mapping[str, Any]) -> tuple[nn.Module, Any]:
        """The untrained model and objective of ``config``, without loading data.

        :param config: an instance of the recipe's config class.
        :param model_inputs: the facts about the training data the model's sizes depend on, as
            a run saved them (the ``model_inputs`` of an :class:`~ppl_vae.recipes.Experiment`).
        """

    def demo(self) -> Any:
        """Settings that train on a CPU in about a minute: an instance of the recipe's config
        class."""


@dataclass(frozen=True)
class Recipe:
    """A named way to build an experiment.

    :param name: the CLI's ``MODEL`` argument.
    :param config_class: a dataclass with a ``train: TrainConfig`` field.
    :param load: imports and returns the recipe's module (a :class:`RecipeModule`), whose
        ``build(config) -> Experiment`` builds it, whose
        ``build_untrained(config, model_inputs) -> (model, objective)`` builds the untrained model
        without loading data (``model_inputs``: the ``model_inputs`` of an
        :class:`~ppl_vae.recipes.Experiment`, as saved with a run), and whose ``demo() -> config``
        gives settings that train on a CPU in about a minute.
    :param description: one line for ``ppl-vae list``.
    """

    name: str
    config_class: type
    load: Callable[[], RecipeModule]
    description: str

    def build(self, config: Any) -> Experiment:
        """The model, objective, training data and evaluation of ``config``.

        :param config: an instance of the recipe's ``config_class``.
        """
        return self.load().build(config)

    def build_model(self, config: Any, model_inputs: Mapping[str, Any]) -> tuple[nn.Module, Any]:
        """The untrained model and objective of ``config``, without loading data.

        :param config: an instance of the recipe's ``config_class``.
        :param model_inputs: the facts about the training data the model's sizes depend on, as
            a run saved them (the ``model_inputs`` of an :class:`~ppl_vae.recipes.Experiment`).
        """
        return self.load().build_untrained(config, model_inputs)

    def demo(self) -> Any:
        """The small demo config."""
        return self.load().demo()


def _vae() -> RecipeModule:
    from ppl_vae.recipes import vae

    return vae


def _parted() -> RecipeModule:
    from ppl_vae.recipes import parted

    return parted


def _contrastive() -> RecipeModule:
    from ppl_vae.recipes import contrastive

    return contrastive


def _decomposition() -> RecipeModule:
    from ppl_vae.recipes import decomposition

    return decomposition


#: The recipes by name (the CLI's ``MODEL`` argument): ``"vae"``, ``"parted"``, ``"contrastive"``,
#: ``"decomposition"``.
RECIPES: dict[str, Recipe] = {
    recipe.name: recipe
    for recipe in (
        Recipe("vae", VAEConfig, _vae, "VAE: plain ELBO, beta-VAE, FactorVAE, beta-TCVAE, DIP-VAE, InfoVAE (objective)"),
        Recipe(
            "parted",
            PartedConfig,
            _parted,
            "PartedVAE: semi-supervised class-related (c, u) and class-independent (z) factors",
        ),
        Recipe(
            "contrastive",
            ContrastiveConfig,
            _contrastive,
            "contrastive VAE: salient vs shared features of target and background (Abid & Zou 2019)",
        ),
        Recipe(
            "decomposition",
            DecompositionConfig,
            _decomposition,
            "Decomposition VAE: structured priors + alpha D(q(z), p(z)) (DecompositionELBO)",
        ),
    )
}
