"""What the engine does differently on several processes (Lightning's DDP over torch.distributed).

The batch-level terms of objectives are gathered by :mod:`ppl_vae.infer.distributed`;
this module holds the engine's side: the DDP strategy, the rank of a process before the
process group exists, per-process random seeds and the reduction of logged values.
"""
from __future__ import annotations

import os

import numpy as np
import pyro
import torch
import torch.distributed as dist
from lightning.pytorch.strategies import DDPStrategy, Strategy

from ppl_vae.infer.distributed import process_rank, world_size

__all__ = ["launch_rank", "mean_over_processes", "process_seed", "seed_process", "training_strategy"]

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

    :raises ValueError: for a spawning strategy.
    """
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
    own launcher and its children), else ``SLURM_PROCID`` (srun with several tasks), else 0."""
    if "RANK" in os.environ:
        return int(os.environ["RANK"])
    if "LOCAL_RANK" in os.environ or "NODE_RANK" in os.environ:
        return int(os.environ.get("NODE_RANK", 0)) * devices + int(os.environ.get("LOCAL_RANK", 0))
    if int(os.environ.get("SLURM_NTASKS", 1)) > 1:
        return int(os.environ.get("SLURM_PROCID", 0))
    return 0


def process_seed(seed: int, rank: int) -> int:
    """A 32-bit seed for process ``rank`` of a run seeded with ``seed``, distinct per rank
    (``numpy.random.SeedSequence([seed, rank])``)."""
    return int(np.random.SeedSequence([seed, rank]).generate_state(1)[0])


def seed_process(seed: int) -> None:
    """Seed torch, numpy and Python's ``random`` with :func:`process_seed` of this process.

    Processes must draw different latent samples, prior draws and permutations (the same
    noise on every process would correlate their Monte Carlo estimates and, e.g., repeat
    each prior draw N times in the global batch of the MMD), while they must build the
    same model (DDP also broadcasts rank 0's parameters when it wraps the module). The
    engine therefore calls this when training starts, after the model is built.
    """
    pyro.set_rng_seed(process_seed(seed, process_rank()))


def mean_over_processes(values: torch.Tensor) -> torch.Tensor:
    """The element-wise mean of ``values`` over processes (``values`` itself on one)."""
    if world_size() == 1:
        return values
    values = values.clone()
    dist.all_reduce(values, op=dist.ReduceOp.SUM)
    return values / world_size()
