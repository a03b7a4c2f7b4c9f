"""Reload a finished training run: :func:`load_run`."""
from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyro
import torch
from torch import nn

from ppl_vae._devices import available_device
from ppl_vae._validation import shown
from ppl_vae.models.pair import ModelAndGuide

MODEL_PREFIX = "model."
MAX_MODEL_INPUT = 2**24
"""Largest number in a run's ``model_inputs`` and largest number of elements its shapes describe."""
MAX_LAYER_WIDTH = 2**16
"""Largest ``hidden`` width or latent dimension (a setting named ``hidden`` or ending in ``_dim``) of a saved run."""
MAX_PARAMETERS = 2**27
"""Most parameters (512 MiB of float32) a saved run's model may have; larger ones are refused before they are built."""


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
    uncreated = sorted(set(state) - set(model.state_dict()))
    if isinstance(model, ModelAndGuide) and uncreated:
        raise CheckpointError(
            f"checkpoint {checkpoint_path} holds parameters the model and guide have not created yet "
            f"({shown(', '.join(uncreated), 200)}): an autoguide creates its parameters on its first call, so "
            "call the guide once on a few data points (model.guide(x=x[:2])) before load_run"
        )
    try:
        model.load_state_dict(state)
    except RuntimeError as error:
        raise CheckpointError(f"checkpoint {checkpoint_path} does not fit the model: {error}") from error


def _section(settings: Mapping[str, Any], key: str, config_path: Path) -> Mapping[str, Any]:
    """``settings[key]``, a mapping of settings, or a ``ValueError`` naming the file."""
    if not isinstance(settings.get(key), Mapping):
        found = "nothing" if key not in settings else f"a {type(settings[key]).__name__}"
        raise ValueError(f"{config_path} needs a mapping of settings under {key!r}, got {found}")
    return settings[key]


def _numbers(value: Any) -> list[Any]:
    """The numbers in a JSON value, at any depth (bools are not numbers)."""
    if isinstance(value, Mapping):
        return [number for item in value.values() for number in _numbers(item)]
    if isinstance(value, list):
        return [number for item in value for number in _numbers(item)]
    return [value] if isinstance(value, (int, float)) and not isinstance(value, bool) else []


def _check_model_inputs(model_inputs: Any, config_path: Path) -> None:
    """Refuse ``model_inputs`` that are not a mapping, hold a number above
    :data:`MAX_MODEL_INPUT`, or a shape (list of numbers) of more elements than that."""
    if not isinstance(model_inputs, Mapping):
        raise ValueError(f"{config_path}: model_inputs must be a mapping, got a {type(model_inputs).__name__}")
    for key, value in model_inputs.items():
        numbers = _numbers(value)
        elements = math.prod(numbers) if isinstance(value, list) and numbers else max(numbers, default=0)
        if any(abs(number) > MAX_MODEL_INPUT for number in numbers) or elements > MAX_MODEL_INPUT:
            raise ValueError(
                f"{config_path}: model_inputs {key!r} describes more than {MAX_MODEL_INPUT} elements: "
                "not a run this library wrote"
            )


def _check_layer_widths(config: Mapping[str, Any], config_path: Path) -> None:
    """Refuse a saved ``hidden`` width or ``*_dim`` above :data:`MAX_LAYER_WIDTH` (at any depth)."""
    for key, value in config.items():
        if isinstance(value, Mapping):
            _check_layer_widths(value, config_path)
        elif key == "hidden" or key.endswith(("_dim", "_dims")):
            if any(abs(number) > MAX_LAYER_WIDTH for number in _numbers(value)):
                raise ValueError(f"{config_path}: setting {key} must be at most {MAX_LAYER_WIDTH}; the file asks for more")


def _built(recipe: Any, config: Any, model_inputs: Mapping[str, Any], config_path: Path) -> tuple[nn.Module, Any]:
    """The recipe's untrained model and objective from ``model_inputs``; a ``ValueError`` naming
    the file when they lack what the recipe needs or do not fit its settings."""
    try:
        return recipe.build_model(config, model_inputs)
    except (KeyError, TypeError, IndexError, ValueError) as error:
        raise ValueError(
            f"{config_path}: model_inputs do not describe a {recipe.name} model of its settings "
            f"({type(error).__name__}: {shown(str(error), 300)})"
        ) from None


def _check_parameter_count(recipe: Any, config: Any, model_inputs: Mapping[str, Any], config_path: Path) -> None:
    """Build the model on PyTorch's meta device (no memory for its tensors) and refuse it above
    :data:`MAX_PARAMETERS`. A model that cannot be built there (one computing with its
    tensors while it is built) is left to the checks of :func:`_check_layer_widths`."""
    try:
        with torch.device("meta"):
            model, _ = recipe.build_model(config, model_inputs)
    except Exception:  # built for real later, where its errors are reported
        return
    count = sum(parameter.numel() for parameter in model.parameters())
    if count > MAX_PARAMETERS:
        raise ValueError(
            f"{config_path}: its settings make a model of {count} parameters, above the {MAX_PARAMETERS} "
            "this library loads: not a run it wrote"
        )


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
      run (same class and settings); its weights are replaced by the checkpoint's. For a run of
      a model function with its autoguide (``fit(..., guide=...)``) pass
      ``ModelAndGuide(model, guide)``, the guide called once on a few data points first (an
      autoguide creates its parameters on its first call).

    A recipe run needs only its directory (``run = ppl_vae.load_run("runs/parted")``, then
    ``run.model.encode(images)``). A ``fit`` run, here of two steps, needs its untrained model:

    >>> import os, tempfile, torch
    >>> import ppl_vae
    >>> from ppl_vae.infer import MeanFieldELBO
    >>> from ppl_vae.models import VAE
    >>> from ppl_vae.nn import MLP, mlp_decoder
    >>> def build():
    ...     return VAE(MLP([4, 16]), mlp_decoder(2, [16], (4,)), latent_dim=2)
    >>> X = torch.rand(64, 4).round()
    >>> tmp = tempfile.TemporaryDirectory()
    >>> run_dir = os.path.join(tmp.name, "run")
    >>> _ = ppl_vae.fit(build(), MeanFieldELBO(), {"x": X}, run_dir=run_dir, steps=2, batch_size=16,
    ...                 progress_bar=False)
    >>> run = ppl_vae.load_run(run_dir, model=build())
    >>> run.recipe is None, run.config.steps, run.model.training
    (True, 2, False)
    >>> run.model.reconstruct(X).shape
    torch.Size([64, 4])
    >>> tmp.cleanup()

    :param run_dir: the run directory (``config.json`` and ``checkpoints/last.ckpt``).
    :param model: the untrained model of a ``fit`` run; for a recipe run, a model to load the
        weights into instead of the one the recipe builds.
    :param device: where the returned model lives: what ``torch.device`` takes (``"cpu"``,
        ``"cuda:1"``, a ``torch.device``) or ``"auto"``, checked to be on this machine first.
    :param with_data: also rebuild the recipe's training data (the ``data`` of the
        :class:`LoadedRun`, and its ``experiment`` for re-evaluation); the same seeded data the run
        trained on.
    :param recipes: recipes by name (default :data:`ppl_vae.recipes.RECIPES`).
    :raises FileNotFoundError: ``run_dir`` does not exist or holds no ``config.json`` or no
        checkpoint.
    :raises ppl_vae.train.CheckpointError: the checkpoint is corrupt or does not fit the model.
    :raises ValueError: a ``fit`` run without ``model``, an unknown recipe, or ``with_data``
        for a ``fit`` run; a ``config.json`` that is not JSON or lacks its sections, or whose
        model sizes (``model_inputs``, ``hidden`` widths, latent dimensions, the parameter
        count) exceed ``MAX_MODEL_INPUT``, ``MAX_LAYER_WIDTH``, ``MAX_PARAMETERS``.
    :raises ValueError: (``UnsafePathError``) a file of the run is a symbolic link leading outside it.
    :raises ValueError: ``device`` is not on this machine (one line naming it).
    :raises ValueError: ``checkpoints`` or ``pictures`` of the run is a file.
    """
    from ppl_vae.recipes.settings import config_from_file
    from ppl_vae.train import RunDirectory, TrainConfig

    device = available_device(device)
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run_dir {run_dir} does not exist")
    run = RunDirectory(run_dir, overwrite=True, create=False)  # opens the run as it is: nothing is written
    settings = run.read_config()
    if not run.last_checkpoint.is_file():
        raise FileNotFoundError(f"run_dir {run_dir} holds no checkpoint {run.last_checkpoint}: did its training start?")
    name = settings.get("recipe")
    if name is not None and not isinstance(name, str):
        raise ValueError(f"{run.config_path}: \"recipe\" must be a recipe's name, got a {type(name).__name__}")
    objective = data = experiment = None
    if name is None:
        if with_data:
            raise ValueError(f"{run_dir} is a run of ppl_vae.fit, not of a recipe: it has no training data to rebuild")
        if model is None:
            raise ValueError(
                f"{run.config_path} names no recipe: a run of ppl_vae.fit; pass model=, the untrained "
                "model built as for that run"
            )
        config = config_from_file(TrainConfig, _section(settings, "train", run.config_path), run.config_path)
    else:
        if recipes is None:
            from ppl_vae.recipes import RECIPES

            recipes = RECIPES
        if name not in recipes:
            raise ValueError(f"{run.config_path} names recipe {name!r}; known recipes: {sorted(recipes)}")
        recipe = recipes[name]
        config = config_from_file(recipe.config_class, _section(settings, "config", run.config_path), run.config_path)
        _check_layer_widths(settings["config"], run.config_path)
        if "model_inputs" in settings:
            _check_model_inputs(settings["model_inputs"], run.config_path)
            _check_parameter_count(recipe, config, settings["model_inputs"], run.config_path)
        if with_data:
            pyro.set_rng_seed(config.train.seed)  # as train_recipe built it
            experiment = recipe.build(config)
            built, objective, data = experiment.model, experiment.objective, experiment.train_data
        else:
            if "model_inputs" not in settings:
                raise ValueError(f"{run.config_path} lacks the model_inputs this version saves; load it with with_data=True")
            built, objective = _built(recipe, config, settings["model_inputs"], run.config_path)
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
