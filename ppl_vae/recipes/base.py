"""Recipes: what ``ppl-vae train MODEL`` builds, trains and evaluates.

A recipe turns a config dataclass (model, data and training settings, saved as JSON
with every run) into an :class:`Experiment`: a model, its objective, its training
tensors and an ``evaluate`` function that writes pictures and returns figures. The few facts
about the training data that the model's construction needs (shapes, sizes) are saved with
the run too, so that :func:`ppl_vae.load_run` rebuilds the model without the data.
"""
from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyro
import torch
from torch import nn

from ppl_vae._devices import available_device
from ppl_vae._files import read_json
from ppl_vae.recipes.settings import config_to_dict
from ppl_vae.train import RunDirectory, TrainConfig, fit
from ppl_vae.viz import save_training_curves

if TYPE_CHECKING:
    from ppl_vae.recipes.registry import Recipe

LOG = logging.getLogger("ppl_vae.recipes")


@dataclass
class Experiment:
    """A model ready to train.

    :param model: the model (``model``/``guide`` methods).
    :param objective: its Pyro ELBO.
    :param train_data: the named training tensors :func:`ppl_vae.fit` takes.
    :param evaluate: ``evaluate(model, pictures_dir) -> figures``: writes PNGs into
        ``pictures_dir`` and returns JSON-ready metrics.
    :param model_inputs: JSON-ready facts about the training data that the recipe's
        ``build_model`` needs to rebuild ``model`` without the data (shapes, sizes).
    :param elbo_arguments: keyword arguments of the objective on every training step
        (:func:`ppl_vae.fit`'s ``elbo_arguments``, e.g. the whole-data aggregate).
    :param evaluation: what ``evaluate`` computes, in a few words (logged before it runs).
    """

    model: nn.Module
    objective: Any
    train_data: Mapping[str, Any]
    evaluate: Callable[[nn.Module, Path], dict[str, Any]]
    model_inputs: dict[str, Any] = field(default_factory=dict)
    elbo_arguments: dict[str, Any] = field(default_factory=dict)
    evaluation: str = "metrics and pictures"


def train_recipe(
    recipe: Recipe,
    config: Any,
    run_dir: str | os.PathLike,
    resume: bool = False,
    overwrite: bool = False,
    threads: int | None = None,
) -> dict[str, Any]:
    """Build (seeded by ``config.train.seed``, so a resumed run rebuilds the same model and
    data), train and evaluate; writes the run directory and returns the figures. Under data
    parallelism only rank 0 evaluates (the others return ``{}``).

    :param recipe: the recipe, e.g. ``RECIPES["parted"]``.
    :param config: the recipe's config dataclass (with a ``train`` :class:`~ppl_vae.train.TrainConfig`).
    :param run_dir: where config, checkpoints, metrics and pictures go.
    :param resume: continue the run in ``run_dir`` from its last checkpoint (as :func:`ppl_vae.fit`).
    :param overwrite: allow ``run_dir`` to hold an earlier run.
    :param threads: torch CPU threads to train with (as :func:`ppl_vae.fit`).
    """
    if not isinstance(getattr(config, "train", None), TrainConfig):
        raise TypeError(f"{type(config).__name__} must have a 'train: TrainConfig' field")
    available_device(config.train.device)  # before the recipe builds anything on it
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
        extra_config={"recipe": recipe.name, "config": config_to_dict(config), "model_inputs": experiment.model_inputs},
        elbo_arguments=experiment.elbo_arguments,
        threads=threads,
    )
    if result.global_rank != 0:
        return {}
    if result.already_finished and result.run_dir.metrics_path.is_file():
        figures = read_json(result.run_dir.metrics_path, "run metrics")  # a finished run resumed changes no file
        if not isinstance(figures, dict):
            raise ValueError(
                f"run metrics {result.run_dir.metrics_path} must hold a JSON object of figures, got a "
                f"{type(figures).__name__}: remove it and run `ppl-vae evaluate {result.run_dir.path}`"
            )
        return figures
    return evaluate_and_save(experiment, result.model, result.run_dir, result.history, config.train.seed)


def evaluate_and_save(
    experiment: Experiment, model: nn.Module, run: RunDirectory, history, seed: int
) -> dict[str, Any]:
    """Evaluate with a fixed seed (Monte Carlo figures repeat exactly), draw the training
    curves of ``metrics.csv`` (``pictures/training_curves.png``) and save metrics.json. Logs
    (logger ``ppl_vae.recipes``, level INFO) what it evaluates and how long it took."""
    model.eval()
    pyro.set_rng_seed(seed)
    LOG.info("evaluating: %s", experiment.evaluation)
    start = time.perf_counter()
    with torch.no_grad():
        figures = experiment.evaluate(model, run.pictures)
    LOG.info("evaluated in %.1f s; metrics and pictures in %s", time.perf_counter() - start, run.path)
    if (run.path / "metrics.csv").is_file():
        save_training_curves(run.path, run.pictures / "training_curves.png")
    if history:
        figures = {"final_losses": {k: v for k, v in history[-1].items()}, **figures}
    run.write_metrics(figures)
    return figures
