r"""One training iteration: the objective's auxiliary steps around the ELBO step.

An objective may declare optimisation steps besides the ELBO's (PartedVAE's semi-supervised
classifier step before it, the contrastive VAE's discriminator step after it;
:mod:`ppl_vae.infer.steps`). Each has its own loss, parameters and optimiser, and the parameter
sets overlap (the classifier step updates the encoder that the ELBO step updates too). A plain
loop that takes them one after another with ``pyro.infer.SVI`` leaks gradients: SVI zeroes only
the gradients of the parameters it registered, after its own step, so a classifier step's
gradients on the encoder are still there when SVI's backward adds to them.

:class:`TrainingIteration` takes the steps in order, each as: compute the step's loss, clear
the gradients of the parameters its optimiser updates, backpropagate, step. No update sees
another step's gradients. The engine (:func:`ppl_vae.fit`) runs the same object with
Lightning's optimisers and backward; a notebook or a benchmark calls it directly::

    iteration = TrainingIteration(model, PartedELBO(), lr=5e-4)
    for step in range(steps):
        values = iteration({"x": x[batch], "labelled": {"x": xl[pick], "y": yl[pick]}}, step)
        # values: "classifier_loss", "elbo_loss" and the objective's logged terms

The training step is an argument of each call: the ELBO step hands it to the objective, whose
schedules read it (:mod:`ppl_vae.schedules`).

The ELBO step hands the steps after it what they take from it as arguments
(:class:`~ppl_vae.infer.steps.TrainingLoss`): the contrastive VAE's discriminator step is
trained on the guide samples that the ELBO step drew, with no second pass through the encoders.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from ppl_vae._validation import finite
from ppl_vae.infer.distributed import GlobalBatch
from ppl_vae.infer.steps import AuxiliaryStep, TrainingLoss, auxiliary_steps, training_loss

__all__ = ["Batch", "TrainingIteration", "step_inputs"]

#: A training batch: tensors the ELBO step takes by name, and data groups (name -> tensors)
#: that auxiliary steps with a ``data_group`` take, as in :func:`ppl_vae.fit`'s data.
Batch = Mapping[str, "torch.Tensor | Mapping[str, torch.Tensor]"]


def step_inputs(batch: Batch, data_group: str | None) -> dict[str, torch.Tensor]:
    """The keyword arguments of a step: the tensors of the group ``data_group``, or, for
    ``None``, the top-level tensors of ``batch``.

    :param batch: a training batch (:data:`Batch`).
    :param data_group: the name of a data group of ``batch`` (a ValueError if it has none),
        or ``None``."""
    if data_group is None:
        return {name: value for name, value in batch.items() if isinstance(value, torch.Tensor)}
    if data_group not in batch or not isinstance(batch[data_group], Mapping):
        raise ValueError(f"the batch needs the data group {data_group!r} (a dict of tensors), got keys {sorted(batch)}")
    return dict(batch[data_group])


class TrainingIteration:
    """The auxiliary steps declared ``"before"``, the ELBO step, then those declared ``"after"``,
    each with its own optimiser (:mod:`ppl_vae.infer.iteration`).

    :param model: a model with ``model``/``guide`` methods (its ``parameters()`` are the ELBO
        step's).
    :param objective: the ELBO (anything with ``differentiable_loss(model, guide, **batch)``);
        its ``auxiliary_steps(model)`` are taken around it.
    :param lr: the learning rate of every optimiser whose step names none.
    :param optimizer: ``(parameters, lr) -> torch.optim.Optimizer``, default Adam; called as
        ``(parameters, lr, betas=...)`` for an auxiliary step that names its Adam betas.
    :param elbo_loss: the ELBO step as ``(step=t, global_batch=g, **batch) -> TrainingLoss``; default
        ``ppl_vae.infer.steps.training_loss(objective, model.model, model.guide)``, the
        objective's ``training_loss`` (or its ``differentiable_loss``). Any callable of that
        signature takes its place, e.g. the default wrapped by ``torch.compile``.
    :param backward: ``loss -> None``, how a loss is backpropagated (default
        ``loss.backward()``; the engine passes Lightning's ``manual_backward``).
    :param elbo_arguments: keyword arguments of the ELBO step on every iteration besides the
        batch, e.g. ``{"aggregate_data": {"x": X}}``, the whole data set of an
        :class:`~ppl_vae.infer.decomposition.AggregateDivergence`.
    :param global_batch: the global batch each iteration's batch belongs to, handed to the ELBO
        step (and by it to the steps after it): batch-level terms and steps are taken over it.
        Default: over the processes of the default process group under data parallelism, this
        process's batch alone otherwise (:class:`~ppl_vae.infer.distributed.GlobalBatch`).
    """

    def __init__(
        self,
        model: nn.Module,
        objective: Any,
        lr: float = 1e-3,
        optimizer: Callable[[Sequence[nn.Parameter], float], torch.optim.Optimizer] | None = None,
        elbo_loss: Callable[..., TrainingLoss] | None = None,
        backward: Callable[[torch.Tensor], None] | None = None,
        elbo_arguments: Mapping[str, Any] | None = None,
        global_batch: GlobalBatch | None = None,
    ) -> None:
        finite("lr", lr, positive=True)
        self.global_batch = global_batch if global_batch is not None else GlobalBatch()
        make = optimizer or (lambda params, rate, **options: torch.optim.Adam(params, lr=rate, **options))
        self.objective = objective
        self.elbo_loss = elbo_loss or training_loss(objective, model.model, model.guide)
        self.elbo_arguments = dict(elbo_arguments or {})
        self.backward = backward or torch.Tensor.backward
        #: The objective's auxiliary steps (:class:`~ppl_vae.infer.steps.AuxiliaryStep`), in the
        #: order they are declared.
        self.steps: list[AuxiliaryStep] = auxiliary_steps(objective, model)
        #: The ELBO step's optimiser, then one per auxiliary step (in :attr:`steps`' order);
        #: anything with ``zero_grad(set_to_none=...)`` and ``step()`` may replace them (the
        #: engine puts Lightning's wrappers of the same optimisers there).
        self.optimizers: list[Any] = [
            make([p for p in model.parameters() if p.requires_grad], float(lr)),
            *(make([p for p in step.parameters if p.requires_grad], float(step.lr or lr),
                   **({} if step.betas is None else {"betas": step.betas})) for step in self.steps),
        ]

    @property
    def claimed_groups(self) -> frozenset[str]:
        """The data groups that auxiliary steps take (``data_group``); the ELBO step reads the rest."""
        return frozenset(step.data_group for step in self.steps if step.data_group is not None)

    def elbo_groups(self, groups: Iterable[str]) -> list[str]:
        """Of the data groups ``groups``, those the ELBO step reads (no auxiliary step claims them), in order.

        :param groups: names of data groups of a batch."""
        return [group for group in groups if group not in self.claimed_groups]

    def take_step(self, optimizer: Any, loss: torch.Tensor) -> None:
        """Clear the gradients of ``optimizer``'s parameters, backpropagate ``loss``, step.

        :param optimizer: one of :attr:`optimizers`.
        :param loss: the scalar loss of that optimiser's step."""
        optimizer.zero_grad(set_to_none=True)
        self.backward(loss)
        optimizer.step()

    def __call__(self, batch: Batch, step: int | torch.Tensor) -> dict[str, torch.Tensor]:
        """Take one iteration on ``batch`` at training step ``step`` (an int >= 0 or a 0-dim
        tensor, passed to the objective as its ``step`` argument): the ELBO step reads its
        top-level tensors and every group no auxiliary step claims, each auxiliary step its own
        group (or the ELBO's inputs). Each step after the ELBO step also takes the arguments the
        ELBO step hands it.
        Returns each step's loss (``"elbo_loss"``, ``"classifier_loss"``, ...) and the
        objective's logged values, detached (read them with ``float`` only when needed: on a GPU
        each read waits for the device)."""
        elbo_inputs = step_inputs(batch, None)
        for name in self.elbo_groups(name for name, group in batch.items() if isinstance(group, Mapping)):
            elbo_inputs.update(batch[name])
        elbo_optimizer, *step_optimizers = self.optimizers
        values: dict[str, torch.Tensor] = {}
        for auxiliary, optimizer in zip(self.steps, step_optimizers, strict=True):
            if auxiliary.when == "before":
                values[f"{auxiliary.name}_loss"] = self._auxiliary(auxiliary, optimizer, batch, elbo_inputs)
        elbo: TrainingLoss = self.elbo_loss(**elbo_inputs, **self.elbo_arguments, step=step, global_batch=self.global_batch)
        values.update(elbo.logged)
        self.take_step(elbo_optimizer, elbo.loss)
        values["elbo_loss"] = elbo.loss.detach()
        for auxiliary, optimizer in zip(self.steps, step_optimizers, strict=True):
            if auxiliary.when == "after":
                arguments = elbo.step_arguments.get(auxiliary.name, {})
                values[f"{auxiliary.name}_loss"] = self._auxiliary(auxiliary, optimizer, batch, elbo_inputs, arguments)
        return values

    def _auxiliary(
        self,
        step: AuxiliaryStep,
        optimizer: Any,
        batch: Batch,
        elbo_inputs: dict[str, torch.Tensor],
        arguments: Mapping[str, Any] | None = None,
    ) -> torch.Tensor:
        loss = step.loss(**(elbo_inputs if step.data_group is None else step_inputs(batch, step.data_group)), **(arguments or {}))
        self.take_step(optimizer, loss)
        return loss.detach()
