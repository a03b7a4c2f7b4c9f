"""The models ``ppl-vae train MODEL`` knows, by name."""
from ppl_vae.recipes import contrastive, decomposition, parted, vae
from ppl_vae.recipes.base import (
    Experiment,
    Recipe,
    config_from_dict,
    config_to_dict,
    evaluate_run,
    train_recipe,
    with_overrides,
)

RECIPES: dict[str, Recipe] = {recipe.name: recipe for recipe in (vae.RECIPE, parted.RECIPE, contrastive.RECIPE, decomposition.RECIPE)}

__all__ = [
    "RECIPES",
    "Experiment",
    "Recipe",
    "config_from_dict",
    "config_to_dict",
    "evaluate_run",
    "train_recipe",
    "with_overrides",
]
