"""Recipes: what ``ppl-vae train MODEL`` builds, trains and evaluates.

A recipe turns a config dataclass (model, data and training settings, saved as JSON
with every run) into an :class:`Experiment`: a model, its objective, its training
tensors and an ``evaluate`` function that writes pictures and returns figures.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyro
import torch
from torch import nn

from ppl_vae.recipes.registry import Recipe
from ppl_vae.recipes.settings import config_from_dict, config_to_dict
from ppl_vae.train import RunDirectory, TrainConfig, fit
from ppl_vae.train.checkpoint import CheckpointError, read_checkpoint


@dataclass
class Experiment:
    """A model ready to train.

    :param model: the model (``model``/``guide`` methods).
    :param objective: its Pyro ELBO.
    :param train_data: the named training tensors :func:`ppl_vae.fit` takes.
    :param evaluate: ``evaluate(model, pictures_dir) -> figures``: writes PNGs into
        ``pictures_dir`` and returns JSON-ready metrics.
    """

    model: nn.Module
    objective: Any
    train_data: Mapping[str, Any]
    evaluate: Callable[[nn.Module, Path], dict[str, Any]]


def train_recipe(
    recipe: Recipe,
    config: Any,
    run_dir: str | os.PathLike,
    resume: bool = False,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Build (seeded by ``config.train.seed``, so a resumed run rebuilds the same model and
    data), train and evaluate; writes the run directory and returns the figures. Under data
    parallelism only rank 0 evaluates (the others return ``{}``)."""
    if not isinstance(getattr(config, "train", None), TrainConfig):
        raise TypeError(f"{type(config).__name__} must have a 'train: TrainConfig' field")
    pyro.set_rng_seed(config.train.seed)
    experiment = recipe.build(config)
    result = fit(
        experiment.model,
        experiment.objective,
        experiment.train_data,
        config.train,
        run_dir=run_dir,
        resume=resume,
        overwrite=overwrite,
        extra_config={"recipe": recipe.name, "config": config_to_dict(config)},
    )
    if result.global_rank != 0:
        return {}
    return _evaluate_and_save(experiment, result.model, result.run_dir, result.history, config.train.seed)


def _evaluate_and_save(
    experiment: Experiment, model: nn.Module, run: RunDirectory, history, seed: int
) -> dict[str, Any]:
    """Evaluate with a fixed seed (Monte Carlo figures repeat exactly) and save metrics.json."""
    model.eval()
    pyro.set_rng_seed(seed)
    with torch.no_grad():
        figures = experiment.evaluate(model, run.pictures)
    if history:
        figures = {"final_losses": {k: v for k, v in history[-1].items()}, **figures}
    run.write_metrics(figures)
    return figures


def load_run(run_dir: str | os.PathLike, recipes: Mapping[str, Recipe]) -> tuple[Recipe, Any, Experiment]:
    """Rebuild a run's experiment from its ``config.json`` and load its last checkpoint."""
    run = RunDirectory(run_dir, resume=True)
    saved = run.read_config()
    name = saved.get("recipe")
    if name not in recipes:
        raise ValueError(f"{run.config_path} names recipe {name!r}; known recipes: {sorted(recipes)}")
    recipe = recipes[name]
    config = config_from_dict(recipe.config_class, saved["config"])
    pyro.set_rng_seed(config.train.seed)
    experiment = recipe.build(config)
    checkpoint = read_checkpoint(run.last_checkpoint)
    prefix = "model."
    state = {k[len(prefix) :]: v for k, v in checkpoint["state_dict"].items() if k.startswith(prefix)}
    try:
        experiment.model.load_state_dict(state)
    except RuntimeError as error:
        raise CheckpointError(
            f"checkpoint {run.last_checkpoint} does not fit the model its config builds: {error}"
        ) from error
    return recipe, config, experiment


def evaluate_run(run_dir: str | os.PathLike, recipes: Mapping[str, Recipe]) -> dict[str, Any]:
    """Re-evaluate a finished run: rebuild, load ``last.ckpt``, write metrics and pictures."""
    _, config, experiment = load_run(run_dir, recipes)
    run = RunDirectory(run_dir, resume=True)
    return _evaluate_and_save(experiment, experiment.model, run, history=None, seed=config.train.seed)
