"""The Lightning module that trains any model/objective pair by SVI.

The engine's modules (:mod:`ppl_vae.train`) are the only places in the library that know
about Lightning. The module follows Pyro's own Lightning example (a Pyro ELBO's
``differentiable_loss`` optimised by plain torch optimisers), with manual optimisation
so that an objective's auxiliary steps (classifier, discriminator) can take turns with
the ELBO step, each with its own optimiser and its own parameters.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import lightning as L
import torch
import torch.distributed as dist
from lightning.fabric.utilities import move_data_to_device
from torch import nn

from ppl_vae.infer.iteration import TrainingIteration
from ppl_vae.infer.steps import AuxiliaryStep, auxiliary_modules
from ppl_vae.train.batches import TensorBatches, TensorGroups
from ppl_vae.train.checkpoint import architecture, random_states, set_random_states, tensor_digest
from ppl_vae.train.config import TrainConfig
from ppl_vae.train.distributed import mean_over_processes, seed_process
from ppl_vae.train.lr_schedules import PlateauSchedules


class NonFiniteLossError(FloatingPointError):
    """A loss or gradient became NaN or infinite; the message names the step and terms."""


def adam_implementation(params: list[torch.Tensor]) -> dict[str, bool]:
    """Keyword arguments of ``torch.optim.Adam`` for one update over all of ``params``:
    ``fused`` (one kernel) when they all live on a CUDA device, ``foreach`` (one call per
    operation for the whole list) otherwise."""
    if params and all(p.is_cuda for p in params):
        return {"fused": True}
    return {"foreach": True}


class SVIModule(L.LightningModule):
    """Trains ``model`` (a PyroModule with ``model``/``guide``) on ``objective`` (a Pyro ELBO).

    Each training iteration is a :class:`~ppl_vae.infer.TrainingIteration`: the objective's
    ``"before"`` auxiliary steps, one ELBO step on every data group that no auxiliary step
    claims (with ``elbo_arguments``, e.g. a whole-data aggregate, on every iteration), then the
    ``"after"`` steps, which take what the ELBO step hands them. Every step zeroes the gradients of its own optimiser's
    parameters before its backward pass and changes only those parameters; backward passes go
    through Lightning's ``manual_backward`` and steps through its optimiser wrappers (so
    strategies, precision plugins and callbacks' hooks see them). One Lightning training step
    takes a block of ``config.iterations_per_training_step`` iterations
    (:class:`~ppl_vae.train.batches.BatchBlocks`).

    Per-term losses (the objective's ``terms`` plus each step's loss) are kept on the
    device, one detached value per iteration, and averaged over ``log_every_n_steps``
    iterations before they are read, so the host waits on the device once per logging
    interval, not once per term per step. At the end of each logging interval, and before
    each checkpoint, the kept values and the current gradients are checked for NaN and inf:
    :class:`NonFiniteLossError` names the first iteration with a non-finite value, the
    values that were, and the parameters whose gradients are, and a non-finite value never
    reaches a checkpoint.

    The optimisers named in ``config.lr_plateau`` get a ``ReduceLROnPlateau`` each
    (``ppl_vae.train.lr_schedules.PlateauSchedules``), stepped after the iteration that
    ends each window with the window's mean of that step's loss; the rates are logged as
    ``lr/NAME``.

    On several processes (DDP) each process trains on its own rows of the global batch;
    batch-level terms are computed over the global batch (the training iteration's
    :class:`~ppl_vae.infer.distributed.GlobalBatch`), processes draw their noise from
    different seeds, logged values are averaged over processes, and checkpoints hold every
    process's random state.

    :param model: the model to train, an ``nn.Module`` with ``model`` and ``guide`` methods.
    :param objective: the ELBO (a :class:`~ppl_vae.infer.MeanFieldELBO` and its presets, or a
        plain Pyro ELBO), with its auxiliary steps and modules.
    :param config: the training settings (learning rate, logging and checkpoint intervals,
        ``data_on_device``, ...).
    :param batches: the minibatches of the run, ``{group: {key: tensor (B_g, ...)}}`` each;
        sharded over processes and moved to the device when training starts.
    :param elbo_arguments: keyword arguments of the ELBO step on every iteration besides the
        batch, e.g. ``{"aggregate_data": {"x": X}}``; moved to the training device when
        training starts.
    """

    def __init__(
        self,
        model: nn.Module,
        objective: Any,
        config: TrainConfig,
        batches: TensorBatches,
        elbo_arguments: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.model = model
        self.objective = objective
        self.config = config
        self.batches = batches
        self.auxiliary = nn.ModuleDict(auxiliary_modules(objective))
        self.elbo_arguments = dict(elbo_arguments or {})
        self.training_iteration = TrainingIteration(
            model, objective, lr=config.lr, optimizer=self._adam, backward=self.manual_backward,
            elbo_arguments=self.elbo_arguments,
        )
        self.steps: list[AuxiliaryStep] = self.training_iteration.steps
        self.plateau = PlateauSchedules(config.lr_plateau, ["elbo", *(step.name for step in self.steps)])
        unknown = self.training_iteration.claimed_groups - set(batches.groups)
        if unknown:
            raise ValueError(
                f"the objective's auxiliary steps need data groups {sorted(unknown)}, "
                f"but data has only {sorted(batches.groups)}"
            )
        for step in self.steps:
            if step.check_data is not None and step.data_group is not None:
                step.check_data(batches.groups[step.data_group])
        self.elbo_groups = self.training_iteration.elbo_groups(batches.groups)
        if not self.elbo_groups:
            raise ValueError("no data group is left for the ELBO step")
        self.automatic_optimization = False
        self.iteration = 0
        self.checkpoint_due = False
        self.history: list[dict[str, float]] = []
        self._logged: list[dict[str, torch.Tensor]] = []
        self._logged_from = 0
        self._current: dict[str, torch.Tensor] = {}
        self._pending_rng: dict[str, Any] | None = None

    def configure_optimizers(self) -> list[torch.optim.Optimizer] | tuple[list, list]:
        """The ELBO step's Adam, then one per auxiliary step (built by the training iteration),
        and the plateau schedulers of ``config.lr_plateau`` (stepped by this module after each
        iteration; Lightning saves and restores their state)."""
        optimizers = list(self.training_iteration.optimizers)
        if not self.plateau.names:
            return optimizers
        return optimizers, self.plateau.schedulers(optimizers)

    def _adam(self, params, lr: float, betas: tuple[float, float] | None = None) -> torch.optim.Optimizer:
        params = [p for p in params if p.requires_grad]
        return torch.optim.Adam(
            params, lr=lr, betas=betas or self.config.betas, amsgrad=self.config.amsgrad, **adam_implementation(params)
        )

    def training_step(self, block: list[TensorGroups], batch_idx: int) -> None:
        """Take the iterations of one block of minibatches; flush the logs at the end of
        each logging interval and check the values before a checkpoint is due.

        :param block: up to ``config.iterations_per_training_step`` consecutive minibatches
            (:class:`~ppl_vae.train.BatchBlocks`).
        :param batch_idx: Lightning's index of the block (not read: the module counts
            iterations itself)."""
        start = self.iteration
        every = self.config.log_every_n_steps
        for batch in block:
            self._training_iteration(batch)
            if self.iteration % every == 0 or self.iteration == self.batches.num_batches:
                self._flush_logs()
        interval = self.config.checkpoint_every_n_steps
        self.checkpoint_due = self.iteration // interval > start // interval
        if self.checkpoint_due and self._logged:
            self._check_finite(torch.stack([v for values in self._logged for v in values.values()]))

    def _training_iteration(self, batch: TensorGroups) -> None:
        self._current = self.training_iteration(batch, self.iteration)
        if not self._logged:
            self._logged_from = self.iteration
        self._logged.append(self._current)
        self.iteration += 1
        self.plateau.observe(self.iteration, self._current, self._plateau_schedulers(), reduce=mean_over_processes)

    def _plateau_schedulers(self) -> list[Any]:
        """Lightning's plateau schedulers, in ``self.plateau.names``' order."""
        schedulers = self.lr_schedulers() if self.plateau.names else []
        return schedulers if isinstance(schedulers, list) else [schedulers]

    def _gradient_norm(self) -> torch.Tensor:
        grads = [p.grad for p in self.parameters() if p.grad is not None]
        if not grads:
            return torch.zeros((), device=self.device)
        return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(grad) for grad in grads]))

    def _check_finite(self, values: torch.Tensor) -> None:
        """Raise :class:`NonFiniteLossError` unless ``values`` (logged values, or their
        means over processes) and the current gradients are all finite, on every process."""
        finite = torch.isfinite(values).all() & torch.isfinite(self._gradient_norm())
        if float(mean_over_processes(finite.float())) == 1.0:
            return
        self._raise_non_finite()

    def _raise_non_finite(self) -> None:
        bad_grads = [
            n for n, p in self.named_parameters() if p.grad is not None and not torch.isfinite(p.grad).all()
        ]
        if bad_grads:
            what = f"non-finite gradients at training step {self.iteration - 1}"
        else:
            what = f"a non-finite value on another process before training step {self.iteration}"
        for offset, values in enumerate(self._logged):
            bad = [name for name, value in values.items() if not torch.isfinite(value).all()]
            if bad:
                what = f"non-finite values at training step {self._logged_from + offset}: {', '.join(bad)}"
                break
        raise NonFiniteLossError(
            f"{what}; parameters with non-finite gradients after training step {self.iteration - 1}: "
            f"{bad_grads[:5] or 'none'}; the last checkpoint written before this is kept"
        )

    def _flush_logs(self) -> None:
        if not self._logged:
            return
        names = list(dict.fromkeys(name for values in self._logged for name in values))
        local = torch.stack(
            [torch.stack([values[n] for values in self._logged if n in values]).float().mean() for n in names]
        )
        means = mean_over_processes(local)
        self._check_finite(means)
        record = dict(zip(names, means.tolist(), strict=True))
        for name, scheduler in zip(self.plateau.names, self._plateau_schedulers(), strict=True):
            record[f"lr/{name}"] = scheduler.get_last_lr()[0]
        self._logged = []
        record["step"] = self.iteration
        self.history.append(record)
        for logger in self.loggers:
            logger.log_metrics({k: v for k, v in record.items() if k != "step"}, step=self.iteration)
        self.log("loss", record.get("elbo_loss", float("nan")), prog_bar=True, logger=False)

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        """With ``data_on_device`` the batches are drawn on the training device already; otherwise
        Lightning copies them.

        :param batch: a block of minibatches.
        :param device: the training device.
        :param dataloader_idx: Lightning's index of the data loader (there is one)."""
        if self.config.data_on_device:
            return batch
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    def on_fit_start(self) -> None:
        """Shard the batches for this process and move them to the training device when asked;
        move the ELBO step's arguments (``elbo_arguments``) there."""
        self.batches.shard(self.global_rank, self.trainer.world_size)
        if self.config.data_on_device:
            self.batches.to(self.device)
        elif self.device.type == "cuda":
            self.batches.pin_memory()
        self.training_iteration.elbo_arguments = move_data_to_device(self.elbo_arguments, self.device)

    def on_train_start(self) -> None:
        """Restore the checkpoint's random state (or seed this process) and hand Lightning's optimiser wrappers to the training iteration."""
        world_size = self.trainer.world_size
        if isinstance(self._pending_rng, list) and len(self._pending_rng) == world_size:
            set_random_states(self._pending_rng[self.global_rank])
        elif self._pending_rng is not None and world_size == 1:
            set_random_states(self._pending_rng)
        elif world_size > 1:
            seed_process(self.config.seed + self.iteration)
        self._pending_rng = None
        self.plateau.set_windows(self.batches.batches_per_pass(self.elbo_groups[0]))
        optimizers = self.optimizers()
        self.training_iteration.optimizers = optimizers if isinstance(optimizers, list) else [optimizers]

    def _rng_states(self) -> dict[str, Any] | list[dict[str, Any]]:
        """This process's random state, or every process's (in rank order) under DDP."""
        if self.trainer.world_size == 1:
            return random_states()
        states: list[Any] = [None] * self.trainer.world_size
        dist.all_gather_object(states, random_states())
        return states

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Add the iteration, every process's random state, the history, what identifies the
        model and objective, and the digest of the weights and optimiser states
        (``ppl_vae.train.checkpoint.tensor_digest``).

        :param checkpoint: the checkpoint Lightning is about to write; its ``"ppl_vae"`` entry
            is set here."""
        checkpoint["ppl_vae"] = {
            "iteration": self.iteration,
            "rng": self._rng_states(),
            "history": self.history,
            "model_class": type(self.model).__qualname__,
            "objective_class": type(self.objective).__qualname__,
            "architecture": architecture(self),
            "lr_plateau": self.plateau.state_dict(reduce=mean_over_processes),
            "digest": tensor_digest(checkpoint),
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Restore the iteration, the history and the batch order; the random state is restored when training starts.

        :param checkpoint: the checkpoint Lightning read, with the ``"ppl_vae"`` entry that
            :meth:`on_save_checkpoint` wrote."""
        state = checkpoint["ppl_vae"]
        self.iteration = int(state["iteration"])
        self.history = list(state["history"])
        self.batches.seek(self.iteration)
        self._pending_rng = state["rng"]
        self.plateau.load_state_dict(state.get("lr_plateau", {}))
