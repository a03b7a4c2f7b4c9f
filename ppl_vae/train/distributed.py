"""What the engine does differently on several processes (Lightning's DDP over torch.distributed).

The batch-level terms of objectives are gathered by :mod:`ppl_vae.infer.distributed`;
this module holds the engine's side: the DDP strategy, the rank of a process before the
process group exists, the agreement of all processes on whether their setup succeeded,
per-process random seeds and the reduction of logged values.
"""
from __future__ import annotations

import os
import pickle
from typing import Any

import lightning as L
import numpy as np
import pyro
import torch
import torch.distributed as dist
from lightning.pytorch.strategies import DDPStrategy, Strategy

from ppl_vae._validation import integer, positive_integer
from ppl_vae.infer.distributed import process_rank, world_size

__all__ = [
    "SetupAgreement",
    "SetupFailed",
    "launch_rank",
    "launched_by_a_launcher",
    "mean_over_processes",
    "process_seed",
    "seed_process",
    "training_strategy",
]

_DDP_START_METHODS = {"ddp": "popen", "ddp_spawn": "spawn", "ddp_fork": "fork", "ddp_notebook": "fork"}


def training_strategy(strategy: str, num_processes: int) -> str | Strategy:
    """The Lightning strategy for ``TrainConfig.strategy`` on ``num_processes`` processes.

    Data-parallel strategies (``"ddp"``, and ``"auto"`` on more than one process) become a
    :class:`~lightning.pytorch.strategies.DDPStrategy` with ``find_unused_parameters=True``:
    the engine optimises manually, and each backward pass (the ELBO's, then a
    discriminator's or classifier's) reaches only its own optimiser's parameters. DDP
    all-reduces the gradients of every parameter of the module (model and auxiliary
    networks alike) in each of them, and must be told which ones a pass leaves out.

    ``"ddp_spawn"``, ``"ddp_fork"`` and ``"ddp_notebook"`` train in worker processes whose
    history and step count never come back to the caller; they are refused.

    :param strategy: ``TrainConfig.strategy``: a Lightning strategy name (``"auto"``, ``"ddp"``, ...).
    :param num_processes: number of processes training together (devices times nodes).
    :raises ValueError: for a spawning strategy.
    """
    positive_integer("num_processes", num_processes)
    if strategy in ("ddp_spawn", "ddp_fork", "ddp_notebook"):
        raise ValueError(
            f"strategy={strategy!r} trains in worker processes whose results do not come back; "
            "use strategy='ddp' (Lightning re-launches the script, or launch it with torchrun/srun)"
        )
    if strategy == "ddp" or (strategy == "auto" and num_processes > 1):
        return DDPStrategy(start_method=_DDP_START_METHODS["ddp"], find_unused_parameters=True)
    return strategy


def launch_rank(devices: int) -> int:
    """This process's global rank, read from the launcher's environment before the process
    group exists: ``RANK`` (torchrun), else ``NODE_RANK * devices + LOCAL_RANK`` (Lightning's
    own launcher and its children), else ``SLURM_PROCID`` (srun with several tasks), else 0.

    :param devices: devices per node (``TrainConfig.devices``).
    """
    if "RANK" in os.environ:
        return int(os.environ["RANK"])
    if "LOCAL_RANK" in os.environ or "NODE_RANK" in os.environ:
        return int(os.environ.get("NODE_RANK", 0)) * devices + int(os.environ.get("LOCAL_RANK", 0))
    if int(os.environ.get("SLURM_NTASKS", 1)) > 1:
        return int(os.environ.get("SLURM_PROCID", 0))
    return 0


def launched_by_a_launcher() -> bool:
    """Whether a launcher started this process as one of several (torchrun, srun, Lightning's
    re-launch of the script, a test's worker processes: the environment :func:`launch_rank`
    reads is set). Otherwise this process is alone until Lightning launches the others."""
    return (
        any(name in os.environ for name in ("RANK", "LOCAL_RANK", "NODE_RANK"))
        or int(os.environ.get("SLURM_NTASKS", 1)) > 1
    )


class SetupAgreement(L.Callback):
    """Makes every process fail together when the setup of one failed.

    :func:`~ppl_vae.fit` prepares the run on each process before the process group exists
    (only rank 0 prepares the run directory; data may differ per process). A process whose
    setup failed still enters training with this callback holding its error; in the first
    hook after the process group exists (``setup``) every process sends the others whether it
    failed, and if one did, every process raises the error of the lowest failing rank: the
    same exception type and message everywhere, within the time it takes the processes to
    start, instead of the others waiting for the failed one until the process group's timeout.

    :param failure: this process's setup error, or ``None``.
    """

    def __init__(self, failure: BaseException | None = None) -> None:
        self.failure = failure

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Raise the setup error of the lowest failing process, on every process, if one failed.

        :param trainer: the Lightning trainer (unused).
        :param pl_module: the module being trained (unused).
        :param stage: Lightning's stage, ``"fit"`` here (unused).
        """
        if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
            if self.failure is not None:
                raise self.failure
            return
        failures: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(failures, _sendable(self.failure))
        failed = [rank for rank, failure in enumerate(failures) if failure is not None]
        if not failed:
            return
        if failed[0] == dist.get_rank():
            raise self.failure
        raise failures[failed[0]]


class SetupFailed(L.LightningModule):
    """Stands in for the training module on a process whose setup failed, so that it meets the
    other processes in :class:`SetupAgreement`, which raises before this module trains."""

    def training_step(self, *args: Any) -> None:
        """Refuse: a process whose setup failed has nothing to train.

        :param args: Lightning's arguments of a training step (batch, batch index), unused.
        :raises RuntimeError: always.
        """
        raise RuntimeError("a process whose setup failed cannot train")

    def configure_optimizers(self) -> None:
        """No optimisers."""
        return None


def _sendable(error: BaseException | None) -> BaseException | None:
    """``error``, or a ``RuntimeError`` with its message where it cannot be pickled."""
    if error is None:
        return None
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:
        return RuntimeError(f"{type(error).__name__}: {error}")
    return error


def process_seed(seed: int, rank: int) -> int:
    """A 32-bit seed for process ``rank`` of a run seeded with ``seed``, distinct per rank
    (``numpy.random.SeedSequence([seed, rank])``).

    :param seed: the run's seed (>= 0).
    :param rank: the process's global rank (>= 0).
    """
    integer("seed", seed, minimum=0)
    integer("rank", rank, minimum=0)
    return int(np.random.SeedSequence([seed, rank]).generate_state(1)[0])


def seed_process(seed: int) -> None:
    """Seed torch, numpy and Python's ``random`` with :func:`process_seed` of this process.

    Processes must draw different latent samples, prior draws and permutations (the same
    noise on every process would correlate their Monte Carlo estimates and, e.g., repeat
    each prior draw N times in the global batch of the MMD), while they must build the
    same model (DDP also broadcasts rank 0's parameters when it wraps the module). The
    engine therefore calls this when training starts, after the model is built.

    :param seed: the run's seed (>= 0).
    """
    pyro.set_rng_seed(process_seed(seed, process_rank()))


def mean_over_processes(values: torch.Tensor) -> torch.Tensor:
    """The element-wise mean of ``values`` over processes (``values`` itself on one).

    :param values: a tensor of the same shape on every process.
    """
    if world_size() == 1:
        return values
    values = values.clone()
    dist.all_reduce(values, op=dist.ReduceOp.SUM)
    return values / world_size()
