"""Optimisation steps that an objective asks to be taken in turn with the ELBO step.

PartedVAE's semi-supervised classifier step and the contrastive VAE's discriminator
step are not part of the ELBO: each has its own loss, its own parameters and its own
optimiser. An objective lists them in ``auxiliary_steps(model)``; a plain SVI loop and
the engine (:func:`ppl_vae.fit`) both take them from there.

A step declared ``"after"`` the ELBO step may take arguments from it: the objective's
``training_loss`` returns them (:class:`TrainingLoss`, ``step_arguments``, by step name) and
:class:`~ppl_vae.infer.TrainingIteration` passes them to the step's loss as keyword
arguments (the TC discriminator's step takes the guide samples the ELBO step drew).
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import torch
from torch import nn

from ppl_vae._validation import adam_betas, choice, finite


@dataclass(frozen=True)
class AuxiliaryStep:
    """One extra optimisation step per training iteration.

    :param name: the name its loss is logged under (``"classifier"``, ``"discriminator"``).
    :param loss: callable taking the batch of ``data_group`` as keyword arguments (or the
        ELBO's batch when ``data_group`` is ``None``), and for an ``"after"`` step the
        arguments the ELBO step hands it (:attr:`TrainingLoss.step_arguments`), returning a
        scalar loss.
    :param parameters: the tensors its optimiser updates; nothing else is changed.
    :param data_group: the name of the training-data group that feeds it (e.g.
        ``"labelled"``), or ``None`` for the ELBO's own batch.
    :param when: ``"before"`` or ``"after"`` the ELBO step in each iteration.
    :param lr: its learning rate; ``None`` takes the engine's.
    :param betas: its Adam betas ``(beta_1, beta_2)``, each in [0, 1); ``None`` takes the
        engine's (FactorVAE's discriminator is trained with (0.5, 0.9), not the VAE's).
    :param check_data: called once by the engine, before training, with the whole
        ``data_group`` (``{key: tensor (N, ...)}``, still on the host); raises on data the step
        cannot use, so that per-batch checks need not read values back from a GPU.
    """

    name: str
    loss: Callable[..., torch.Tensor]
    parameters: Sequence[nn.Parameter]
    data_group: str | None = None
    when: Literal["before", "after"] = "before"
    lr: float | None = None
    betas: tuple[float, float] | None = None
    check_data: Callable[[dict[str, torch.Tensor]], None] | None = None

    def __post_init__(self) -> None:
        choice("when", self.when, ("before", "after"))
        if not list(self.parameters):
            raise ValueError(f"auxiliary step {self.name!r} has no parameters to optimise")
        if self.lr is not None:
            finite("lr", self.lr, positive=True)
        if self.betas is not None:
            object.__setattr__(self, "betas", adam_betas("betas", self.betas))


def auxiliary_steps(objective: object, model: nn.Module) -> list[AuxiliaryStep]:
    """The auxiliary steps ``objective`` declares for ``model`` (none for a plain Pyro ELBO).

    :param objective: the ELBO; its ``auxiliary_steps(model)`` is read when it has one.
    :param model: the model being trained (an ``nn.Module`` with ``model``/``guide`` methods)."""
    declare = getattr(objective, "auxiliary_steps", None)
    return list(declare(model)) if declare is not None else []


def auxiliary_modules(objective: object) -> dict[str, nn.Module]:
    """Networks an objective owns outside the model (e.g. a TC discriminator), by name.

    :param objective: the ELBO; its ``auxiliary_modules()`` is read when it has one (none for
        a plain Pyro ELBO)."""
    declare = getattr(objective, "auxiliary_modules", None)
    return dict(declare()) if declare is not None else {}


class TrainingLoss(NamedTuple):
    """What an objective's ELBO step returns to the training iteration.

    :param loss: ``-ELBO``, a differentiable scalar tensor.
    :param logged: per-point values to log by name (detached scalar tensors; read them on the
        host only when needed).
    :param step_arguments: keyword arguments for the auxiliary steps taken after the ELBO
        step, by step name (detached tensors and the global batch), e.g. ``{"discriminator":
        {"salient_sample": s, "shared_sample": z, "global_batch": g}}``.
    """

    loss: torch.Tensor
    logged: dict[str, torch.Tensor]
    step_arguments: dict[str, dict[str, Any]]


def training_loss(objective: Any, model: Callable, guide: Callable) -> Callable[..., TrainingLoss]:
    """``(step=t, global_batch=g, **batch) -> TrainingLoss`` of ``objective``: its
    ``training_loss(model, guide, step=t, global_batch=g, **batch)``
    (:class:`~ppl_vae.infer.MeanFieldELBO` and its presets, whose terms read the training step
    and take batch-level quantities over the global batch), or its
    ``differentiable_loss(model, guide, **batch)`` with nothing logged and no step arguments (a
    plain Pyro ELBO, which follows no schedule and has no batch-level terms: neither is passed on)."""
    declared = getattr(objective, "training_loss", None)
    if declared is not None:
        return functools.partial(declared, model, guide)

    def plain(step: int | torch.Tensor | None = None, global_batch: Any = None, **batch: torch.Tensor) -> TrainingLoss:
        return TrainingLoss(objective.differentiable_loss(model, guide, **batch), {}, {})

    return plain
