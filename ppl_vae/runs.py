"""Reload a finished training run: :func:`load_run`."""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyro
import torch
from torch import nn

MODEL_PREFIX = "model."


@dataclass(frozen=True)
class LoadedRun:
    """What :func:`load_run` returns.

    :param model: the trained model, in eval mode, on the requested device.
    :param config: the run's settings: the recipe's config dataclass for a recipe run, the
        :class:`~ppl_vae.TrainConfig` for a :func:`ppl_vae.fit` run.
    :param run_dir: the run directory.
    :param settings: everything ``config.json`` holds (versions, start time, extra settings).
    :param recipe: the recipe's name (``None`` for a ``fit`` run).
    :param objective: the recipe's objective as built (``None`` for a ``fit`` run); networks of
        its auxiliary steps (the contrastive discriminator) start untrained, their trained
        weights stay in the checkpoint under ``auxiliary.``.
    :param data: the training data (recipe runs loaded with ``with_data=True``).
    :param experiment: the rebuilt :class:`~ppl_vae.recipes.Experiment` (recipe runs loaded
        with ``with_data=True``; its ``evaluate`` writes the recipe's pictures).
    """

    model: nn.Module
    config: Any
    run_dir: Path
    settings: dict[str, Any]
    recipe: str | None = None
    objective: Any = None
    data: Mapping[str, Any] | None = None
    experiment: Any = None


def _load_weights(model: nn.Module, checkpoint_path: Path) -> None:
    """Load the model's part of a Lightning checkpoint's state dict into ``model``."""
    from ppl_vae.train.checkpoint import CheckpointError, read_checkpoint

    checkpoint = read_checkpoint(checkpoint_path)
    state = {k[len(MODEL_PREFIX) :]: v for k, v in checkpoint["state_dict"].items() if k.startswith(MODEL_PREFIX)}
    try:
        model.load_state_dict(state)
    except RuntimeError as error:
        raise CheckpointError(f"checkpoint {checkpoint_path} does not fit the model: {error}") from error


def load_run(
    run_dir: str | os.PathLike,
    model: nn.Module | None = None,
    device: str | torch.device = "cpu",
    with_data: bool = False,
    recipes: Mapping[str, Any] | None = None,
) -> LoadedRun:
    """Reload the trained model of a run directory from its last checkpoint.

    - A run of ``ppl-vae train`` (or :func:`~ppl_vae.recipes.train_recipe`): ``config.json``
      names the recipe; the model is rebuilt from the saved settings (and the shapes and sizes
      of the training data saved with them), without loading the data unless ``with_data``.
    - A run of ``ppl_vae.fit(..., run_dir=...)``: pass ``model``, a module built as for that
      run (same class and settings); its weights are replaced by the checkpoint's.

    Example::

        run = ppl_vae.load_run("runs/parted")
        z = run.model.encode(images)

    :param run_dir: the run directory (``config.json`` and ``checkpoints/last.ckpt``).
    :param model: the untrained model of a ``fit`` run; for a recipe run, a model to load the
        weights into instead of the one the recipe builds.
    :param device: where the returned model lives (``"cpu"``, ``"cuda"``, a torch device).
    :param with_data: also rebuild the recipe's training data (:attr:`LoadedRun.data`, and
        :attr:`LoadedRun.experiment` for re-evaluation); the same seeded data the run
        trained on.
    :param recipes: recipes by name (default :data:`ppl_vae.recipes.RECIPES`).
    :raises FileNotFoundError: ``run_dir`` does not exist or holds no ``config.json`` or no
        checkpoint.
    :raises ppl_vae.train.CheckpointError: the checkpoint is corrupt or does not fit the model.
    :raises ValueError: a ``fit`` run without ``model``, an unknown recipe, or ``with_data``
        for a ``fit`` run.
    """
    from ppl_vae.recipes.settings import config_from_dict
    from ppl_vae.train import RunDirectory, TrainConfig

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run_dir {run_dir} does not exist")
    run = RunDirectory(run_dir, overwrite=True)  # opens the run as it is: nothing is written over
    settings = run.read_config()
    if not run.last_checkpoint.is_file():
        raise FileNotFoundError(f"run_dir {run_dir} holds no checkpoint {run.last_checkpoint}: did its training start?")
    name = settings.get("recipe")
    objective = data = experiment = None
    if name is None:
        if with_data:
            raise ValueError(f"{run_dir} is a run of ppl_vae.fit, not of a recipe: it has no training data to rebuild")
        if model is None:
            raise ValueError(
                f"{run.config_path} names no recipe: a run of ppl_vae.fit; pass model=, the untrained "
                "model built as for that run"
            )
        config = config_from_dict(TrainConfig, settings["train"])
    else:
        if recipes is None:
            from ppl_vae.recipes import RECIPES

            recipes = RECIPES
        if name not in recipes:
            raise ValueError(f"{run.config_path} names recipe {name!r}; known recipes: {sorted(recipes)}")
        recipe = recipes[name]
        config = config_from_dict(recipe.config_class, settings["config"])
        if with_data:
            pyro.set_rng_seed(config.train.seed)  # as train_recipe built it
            experiment = recipe.build(config)
            built, objective, data = experiment.model, experiment.objective, experiment.train_data
        else:
            if "model_inputs" not in settings:
                raise ValueError(f"{run.config_path} lacks the model_inputs this version saves; load it with with_data=True")
            built, objective = recipe.build_model(config, settings["model_inputs"])
        model = built if model is None else model
    _load_weights(model, run.last_checkpoint)
    model.to(device).eval()
    return LoadedRun(model, config, run_dir, settings, name, objective, data, experiment)


def evaluate_run(run_dir: str | os.PathLike, recipes: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Re-evaluate a finished recipe run (``ppl-vae evaluate``): rebuild it with its data, load
    ``last.ckpt``, write metrics and pictures. Trains nothing.

    :param run_dir: the run directory.
    :param recipes: recipes by name (default :data:`ppl_vae.recipes.RECIPES`).
    :returns: the figures the recipe's evaluation returns.
    """
    from ppl_vae.recipes.base import evaluate_and_save
    from ppl_vae.train import RunDirectory

    loaded = load_run(run_dir, with_data=True, recipes=recipes)
    run = RunDirectory(run_dir, resume=True)
    return evaluate_and_save(loaded.experiment, loaded.model, run, history=None, seed=loaded.config.train.seed)
