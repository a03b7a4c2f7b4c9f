"""Recipes: what ``ppl-vae train MODEL`` builds, trains and evaluates.

A recipe turns a config dataclass (model, data and training settings, saved as JSON
with every run) into an :class:`Experiment`: a model, its objective, its training
tensors and an ``evaluate`` function that writes pictures and returns figures. The few facts
about the training data that the model's construction needs (shapes, sizes) are saved with
the run too, so that :func:`ppl_vae.load_run` rebuilds the model without the data.
"""
from __future__ import annotations

import dataclasses
import os
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyro
import torch
from torch import nn

from ppl_vae.runs import load_run
from ppl_vae.train import RunDirectory, TrainConfig, fit
from ppl_vae.viz import save_training_curves


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
    """

    model: nn.Module
    objective: Any
    train_data: Mapping[str, Any]
    evaluate: Callable[[nn.Module, Path], dict[str, Any]]
    model_inputs: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True)
class Recipe:
    """A named way to build an experiment.

    :param name: the CLI's ``MODEL`` argument.
    :param config_class: a dataclass with a ``train: TrainConfig`` field.
    :param build: ``config -> Experiment``.
    :param demo: ``() -> config`` with settings that train on a CPU in about a minute.
    :param description: one line for ``ppl-vae train --help``.
    :param build_model: ``(config, model_inputs) -> (model, objective)``, untrained, without
        loading data (``model_inputs``: :attr:`Experiment.model_inputs` as saved with the run).
    """

    name: str
    config_class: type
    build: Callable[[Any], Experiment]
    demo: Callable[[], Any]
    description: str
    build_model: Callable[[Any, Mapping[str, Any]], tuple[nn.Module, Any]]


def config_to_dict(config: Any) -> dict[str, Any]:
    """A recipe config as a JSON-ready dict."""
    return dataclasses.asdict(config)


def config_from_dict(config_class: type, values: Mapping[str, Any]) -> Any:
    """Build ``config_class`` from a (possibly nested, possibly partial) dict; unknown keys
    raise ``ValueError`` naming them."""
    fields = {f.name: f for f in dataclasses.fields(config_class)}
    unknown = set(values) - set(fields)
    if unknown:
        raise ValueError(
            f"unknown settings {sorted(unknown)} for {config_class.__name__}; valid: {sorted(fields)}"
        )
    hints = typing.get_type_hints(config_class)
    kwargs = {}
    for name, value in values.items():
        hint = hints.get(name)
        if dataclasses.is_dataclass(hint) and isinstance(value, Mapping):
            value = config_from_dict(hint, value)
        elif isinstance(value, list):
            value = tuple(value)
        kwargs[name] = value
    return config_class(**kwargs)


def with_overrides(config: Any, overrides: Mapping[str, Any]) -> Any:
    """A copy of ``config`` with dotted-key overrides such as ``{"train.steps": 100, "beta": 4}``."""
    values = config_to_dict(config)
    for key, value in overrides.items():
        target = values
        *parents, leaf = key.split(".")
        for parent in parents:
            if not isinstance(target.get(parent), dict):
                raise ValueError(f"unknown setting {key!r}: {parent!r} is not a group of settings")
            target = target[parent]
        if leaf not in target:
            raise ValueError(f"unknown setting {key!r}; valid: {sorted(_dotted_keys(values))}")
        target[leaf] = value
    return config_from_dict(type(config), values)


def _dotted_keys(values: Mapping[str, Any], prefix: str = "") -> list[str]:
    keys = []
    for key, value in values.items():
        if isinstance(value, dict):
            keys += _dotted_keys(value, f"{prefix}{key}.")
        else:
            keys.append(f"{prefix}{key}")
    return keys


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
        extra_config={"recipe": recipe.name, "config": config_to_dict(config), "model_inputs": experiment.model_inputs},
    )
    if result.global_rank != 0:
        return {}
    return _evaluate_and_save(experiment, result.model, result.run_dir, result.history, config.train.seed)


def _evaluate_and_save(
    experiment: Experiment, model: nn.Module, run: RunDirectory, history, seed: int
) -> dict[str, Any]:
    """Evaluate with a fixed seed (Monte Carlo figures repeat exactly), draw the training
    curves of ``metrics.csv`` (``pictures/training_curves.png``) and save metrics.json."""
    model.eval()
    pyro.set_rng_seed(seed)
    with torch.no_grad():
        figures = experiment.evaluate(model, run.pictures)
    if (run.path / "metrics.csv").is_file():
        save_training_curves(run.path, run.pictures / "training_curves.png")
    if history:
        figures = {"final_losses": {k: v for k, v in history[-1].items()}, **figures}
    run.write_metrics(figures)
    return figures


def evaluate_run(run_dir: str | os.PathLike, recipes: Mapping[str, Recipe]) -> dict[str, Any]:
    """Re-evaluate a finished run: rebuild it with its data, load ``last.ckpt``, write metrics
    and pictures. Trains nothing."""
    loaded = load_run(run_dir, with_data=True, recipes=recipes)
    run = RunDirectory(run_dir, resume=True)
    return _evaluate_and_save(loaded.experiment, loaded.model, run, history=None, seed=loaded.config.train.seed)
