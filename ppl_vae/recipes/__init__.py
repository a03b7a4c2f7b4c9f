"""The models ``ppl-vae train MODEL`` knows, by name.

:data:`RECIPES`, the configs and the settings functions import nothing heavy; building,
training (:func:`train_recipe`) loads torch, Pyro and Lightning on first use. A finished run
is reloaded with :func:`ppl_vae.load_run` and re-evaluated with :func:`ppl_vae.runs.evaluate_run`.
"""
from __future__ import annotations

from typing import Any

from ppl_vae.recipes.registry import RECIPES, Recipe, RecipeModule
from ppl_vae.recipes.settings import SettingError, config_from_dict, config_to_dict, with_overrides

_BASE = ("Experiment", "train_recipe")


def __getattr__(name: str) -> Any:
    if name not in _BASE:
        raise AttributeError(f"module 'ppl_vae.recipes' has no attribute {name!r}")
    from ppl_vae.recipes import base

    return getattr(base, name)


__all__ = [
    "RECIPES",
    "Experiment",
    "Recipe",
    "RecipeModule",
    "SettingError",
    "config_from_dict",
    "config_to_dict",
    "train_recipe",
    "with_overrides",
]
