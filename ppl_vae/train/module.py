"""The Lightning module that trains any model/objective pair by SVI.

This and :mod:`ppl_vae.train.fit` are the only places in the library that know about
Lightning. The module follows Pyro's own Lightning example (a Pyro ELBO's
``differentiable_loss`` optimised by plain torch optimisers), with manual optimisation
so that an objective's auxiliary steps (classifier, discriminator) can take turns with
the ELBO step, each with its own optimiser and its own parameters.
"""
from __future__ import annotations

import functools
import math
import random
import types
from collections.abc import Callable
from typing import Any

import lightning as L
import numpy as np
import torch
import torch.distributed as dist
from pyro.nn import PyroModule, pyro_method
from torch import nn

from ppl_vae.infer.distributed import global_batch
from ppl_vae.infer.replay import ReplayedLoss
from ppl_vae.infer.steps import (
    AuxiliaryStep,
    auxiliary_modules,
    auxiliary_steps,
    objective_terms,
    set_training_step,
)
from ppl_vae.train.batches import TensorBatches
from ppl_vae.train.config import TrainConfig
from ppl_vae.train.distributed import mean_over_processes, seed_process


class NonFiniteLossError(FloatingPointError):
    """A loss or gradient became NaN or infinite; the message names the step and terms."""


def _rng_state() -> dict[str, Any]:
    state = {
        "torch": torch.get_rng_state(),
        "numpy": np.random.get_state(),
        "python": random.getstate(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def adam_implementation(params: list[torch.Tensor]) -> dict[str, bool]:
    """Keyword arguments of ``torch.optim.Adam`` for one update over all of ``params``:
    ``fused`` (one kernel) when they all live on a CUDA device, ``foreach`` (one call per
    operation for the whole list) otherwise."""
    if params and all(p.is_cuda for p in params):
        return {"fused": True}
    return {"foreach": True}


_PYRO_METHOD_CODE = pyro_method(lambda self: None).__code__


def without_param_registration(model: nn.Module, name: str) -> Callable:
    """``model.<name>`` (``"model"`` or ``"guide"``), run without Pyro's parameter registration
    when leaving it out changes nothing but speed.

    A :func:`~pyro.nn.pyro_method` of a :class:`~pyro.nn.PyroModule` registers the parameters of
    a plain ``nn.Module`` child with Pyro's param store every time the method reads the child
    (one ``pyro.param`` message per parameter tensor, on every step). The engine's optimisers
    own ``model.parameters()`` and never read the store, so for a model without
    ``PyroParam``/``PyroSample`` attributes (which need Pyro's module context to exist at all)
    the engine calls the undecorated method: the same computation, the same sample sites,
    without the registration. Otherwise, and for anything that is not a ``pyro_method``, the
    bound method is returned unchanged.
    """
    bound = getattr(model, name)
    function = getattr(type(model), name, None)
    if not isinstance(model, PyroModule) or getattr(function, "__code__", None) is not _PYRO_METHOD_CODE:
        return bound
    for module in model.modules():
        if isinstance(module, PyroModule) and (module._pyro_params or module._pyro_samples):
            return bound
    return types.MethodType(function.__wrapped__, model)


def architecture(module: nn.Module) -> dict[str, list[int]]:
    """Parameter and buffer names with their shapes: what a checkpoint must match."""
    return {name: list(t.shape) for name, t in module.state_dict().items()}


class SVIModule(L.LightningModule):
    """Trains ``model`` (a PyroModule with ``model``/``guide``) on ``objective`` (a Pyro ELBO).

    Each training iteration takes the objective's ``"before"`` auxiliary steps, one ELBO
    step on every data group that no auxiliary step claims, then the ``"after"`` steps.
    Every step zeroes the gradients of its own optimiser's parameters before its backward
    pass and changes only those parameters.

    ``model.model`` and ``model.guide`` are called without Pyro's per-step parameter
    registration where that is safe (:func:`without_param_registration`).

    Per-term losses (the objective's ``terms`` plus each auxiliary loss) are summed on the
    device and averaged over ``log_every_n_steps`` iterations before they are read, so the
    host waits on the device once per logging interval, not once per term per step.

    On several processes (DDP) each process trains on its own rows of the global batch;
    batch-level terms are computed over the global batch (each step runs inside
    :func:`~ppl_vae.infer.distributed.global_batch`), processes draw their noise from
    different seeds, logged values are averaged over processes, and checkpoints hold every
    process's random state.
    """

    def __init__(
        self,
        model: nn.Module,
        objective: Any,
        config: TrainConfig,
        batches: TensorBatches,
    ) -> None:
        super().__init__()
        self.model = model
        self.model_fn = without_param_registration(model, "model")
        self.guide_fn = without_param_registration(model, "guide")
        self.objective = objective
        self.config = config
        self.batches = batches
        self.auxiliary = nn.ModuleDict(auxiliary_modules(objective))
        self.elbo_loss = (
            ReplayedLoss(objective, self.model_fn, self.guide_fn, [model, *self.auxiliary.values()])
            if config.replay_loss
            else functools.partial(objective.differentiable_loss, self.model_fn, self.guide_fn)
        )
        self.steps: list[AuxiliaryStep] = auxiliary_steps(objective, model)
        claimed = {s.data_group for s in self.steps if s.data_group is not None}
        unknown = claimed - set(batches.groups)
        if unknown:
            raise ValueError(
                f"the objective's auxiliary steps need data groups {sorted(unknown)}, "
                f"but data has only {sorted(batches.groups)}"
            )
        for step in self.steps:
            if step.check_data is not None and step.data_group is not None:
                step.check_data(batches.groups[step.data_group])
        self.elbo_groups = [g for g in batches.groups if g not in claimed]
        if not self.elbo_groups:
            raise ValueError("no data group is left for the ELBO step")
        self.automatic_optimization = False
        self.iteration = 0
        self.history: list[dict[str, float]] = []
        self._sums: dict[str, torch.Tensor] = {}
        self._count = 0
        self._pending_rng: dict[str, Any] | None = None

    def configure_optimizers(self) -> list[torch.optim.Optimizer]:
        optimizers = [self._adam(self.model.parameters(), self.config.lr)]
        for step in self.steps:
            optimizers.append(self._adam(step.parameters, step.lr or self.config.lr))
        return optimizers

    def _adam(self, params, lr: float) -> torch.optim.Optimizer:
        params = [p for p in params if p.requires_grad]
        return torch.optim.Adam(params, lr=lr, betas=self.config.betas, **adam_implementation(params))

    def _kwargs(self, batch: dict[str, dict[str, torch.Tensor]], groups: list[str]) -> dict:
        kwargs: dict[str, torch.Tensor] = {}
        for group in groups:
            kwargs.update(batch[group])
        return kwargs

    def _take_step(self, optimizer, loss: torch.Tensor, name: str) -> None:
        optimizer.zero_grad(set_to_none=True)
        self.manual_backward(loss)
        due = self._gradient_check_due()
        if due or self.device.type == "cpu":
            self._raise_if_not_finite(loss, name, check_gradients=due)
        optimizer.step()
        self._accumulate(f"{name}_loss", loss.detach())

    def training_step(self, batch: dict[str, dict[str, torch.Tensor]], batch_idx: int) -> None:
        with global_batch():
            self._training_iteration(batch)
        if self.iteration % self.config.log_every_n_steps == 0 or self.iteration == self.batches.num_batches:
            self._flush_logs()

    def _training_iteration(self, batch: dict[str, dict[str, torch.Tensor]]) -> None:
        set_training_step(self.iteration, self.model, self.objective)
        optimizers = self.optimizers()
        optimizers = optimizers if isinstance(optimizers, list) else [optimizers]
        elbo_optimizer, step_optimizers = optimizers[0], optimizers[1:]
        for step, optimizer in zip(self.steps, step_optimizers, strict=True):
            if step.when == "before":
                self._auxiliary_step(step, optimizer, batch)
        loss = self.elbo_loss(**self._kwargs(batch, self.elbo_groups))
        for name, value in objective_terms(self.objective).items():
            self._accumulate(name, value)
        self._take_step(elbo_optimizer, loss, "elbo")
        for step, optimizer in zip(self.steps, step_optimizers, strict=True):
            if step.when == "after":
                self._auxiliary_step(step, optimizer, batch)
        self.iteration += 1
        self._count += 1

    def _auxiliary_step(self, step: AuxiliaryStep, optimizer, batch) -> None:
        groups = [step.data_group] if step.data_group is not None else self.elbo_groups
        loss = step.loss(**self._kwargs(batch, groups))
        self._take_step(optimizer, loss, step.name)

    def _gradient_check_due(self) -> bool:
        """Gradients are checked on the steps that end a logging or a checkpoint interval, so a
        non-finite gradient is caught before the parameters it corrupts reach a checkpoint."""
        next_step = self.iteration + 1
        return next_step % self.config.log_every_n_steps == 0 or next_step % self.config.checkpoint_every_n_steps == 0

    def _raise_if_not_finite(self, loss: torch.Tensor, name: str, check_gradients: bool) -> None:
        finite = torch.isfinite(loss)
        if check_gradients:
            grads = [p.grad for p in self.parameters() if p.grad is not None]
            if grads:
                finite = finite & torch.isfinite(torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads))))
        if bool(finite):
            return
        bad_grads = [
            n for n, p in self.named_parameters() if p.grad is not None and not torch.isfinite(p.grad).all()
        ]
        terms = {k: float(v) for k, v in objective_terms(self.objective).items()}
        bad_terms = sorted(k for k, v in terms.items() if not math.isfinite(v))
        raise NonFiniteLossError(
            f"non-finite {name} loss ({float(loss.detach())}) at training step {self.iteration}; "
            f"non-finite objective terms: {bad_terms or 'none'}; "
            f"parameters with non-finite gradients: {bad_grads[:5] or 'none'}; "
            "the last checkpoint written before this step is kept"
        )

    def _accumulate(self, name: str, value: torch.Tensor) -> None:
        value = value.detach().float()
        self._sums[name] = self._sums[name] + value if name in self._sums else value.clone()

    def _flush_logs(self) -> None:
        if not self._count:
            return
        names = list(self._sums)
        means = mean_over_processes(torch.stack([self._sums[n] for n in names]) / self._count).tolist()
        record = dict(zip(names, means, strict=True))
        self._sums, self._count = {}, 0
        record["step"] = self.iteration
        self.history.append(record)
        if self.logger is not None:
            self.logger.log_metrics({k: v for k, v in record.items() if k != "step"}, step=self.iteration)
        self.log("loss", record.get("elbo_loss", float("nan")), prog_bar=True, logger=False)
        bad = sorted(k for k, v in record.items() if not math.isfinite(v))
        if bad:
            raise NonFiniteLossError(
                f"non-finite values of {bad} in the {self.config.log_every_n_steps} steps "
                f"before training step {self.iteration}; the last checkpoint written before them is kept"
            )

    def on_fit_start(self) -> None:
        self.batches.shard(self.global_rank, self.trainer.world_size)
        if self.config.data_on_device:
            self.batches.to(self.device)
        elif self.device.type == "cuda":
            self.batches.pin_memory()

    def on_train_start(self) -> None:
        world_size = self.trainer.world_size
        if isinstance(self._pending_rng, list) and len(self._pending_rng) == world_size:
            _set_rng_state(self._pending_rng[self.global_rank])
        elif self._pending_rng is not None and world_size == 1:
            _set_rng_state(self._pending_rng)
        elif world_size > 1:
            seed_process(self.config.seed + self.iteration)
        self._pending_rng = None

    def _rng_states(self) -> dict[str, Any] | list[dict[str, Any]]:
        """This process's random state, or every process's (in rank order) under DDP."""
        if self.trainer.world_size == 1:
            return _rng_state()
        states: list[Any] = [None] * self.trainer.world_size
        dist.all_gather_object(states, _rng_state())
        return states

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["ppl_vae"] = {
            "iteration": self.iteration,
            "rng": self._rng_states(),
            "history": self.history,
            "model_class": type(self.model).__qualname__,
            "objective_class": type(self.objective).__qualname__,
            "architecture": architecture(self),
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        state = checkpoint["ppl_vae"]
        self.iteration = int(state["iteration"])
        self.history = list(state["history"])
        self.batches.seek(self.iteration)
        self._pending_rng = state["rng"]
