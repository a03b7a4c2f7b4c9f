"""``fit``: one training path for every model/objective pair, on CPU or GPU."""
from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import pyro
import torch
from lightning.pytorch.loggers import CSVLogger
from torch import nn

from ppl_vae.train.batches import BatchBlocks, TensorBatches, as_groups
from ppl_vae.train.checkpoint import AtomicCheckpointIO, CheckpointError, IterationCheckpoint, read_checkpoint
from ppl_vae.train.config import TrainConfig
from ppl_vae.train.distributed import launch_rank, training_strategy
from ppl_vae.train.module import SVIModule, architecture
from ppl_vae.train.run_dir import RunDirectory

_LIGHTNING_NOISE = (
    ".*`training_step` returns `None`.*",
    ".*isinstance\\(treespec, LeafSpec\\)` is deprecated.*",
    ".*Experiment logs directory .* exists and is not empty.*",
    ".*`weights_only` was not set.*",
)


@dataclass
class FitResult:
    """What :func:`fit` returns.

    :param model: the trained model (on the CPU).
    :param history: per-term means, one dict per logging interval (with ``"step"``).
    :param steps: training iterations completed.
    :param run_dir: the run directory, when one was written.
    :param global_rank: this process's rank under data parallelism (0 on one process):
        every process returns, only rank 0 should evaluate and write results.
    """

    model: nn.Module
    history: list[dict[str, float]]
    steps: int
    run_dir: RunDirectory | None = None
    global_rank: int = 0


def _accelerator(device: str) -> str:
    if device == "auto":
        return "gpu" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        if not torch.cuda.is_available():
            raise ValueError("device='cuda' was asked for but torch sees no CUDA device")
        return "gpu"
    return "cpu"


def _warn_if_bf16_is_slow(config: TrainConfig) -> None:
    """bf16-mixed pays on CPUs with bfloat16 instructions (AVX512-BF16, AMX) and on GPUs that
    support it; elsewhere bfloat16 is emulated and usually slower than float32."""
    if config.precision != "bf16-mixed":
        return
    on_gpu = _accelerator(config.device) == "gpu"
    if on_gpu:
        supported = torch.cuda.is_bf16_supported()
    else:
        check = getattr(torch.cpu, "_is_avx512_bf16_supported", None)
        supported = check is None or check()
    if not supported:
        where = "GPU without bfloat16 support" if on_gpu else "CPU without AVX512-BF16"
        warnings.warn(
            f"precision='bf16-mixed' on a {where}: bfloat16 is emulated there and usually slower "
            "than precision='32-true'",
            stacklevel=3,
        )


def _check_resumable(checkpoint_path: Path, module: SVIModule) -> None:
    checkpoint = read_checkpoint(checkpoint_path)
    state = checkpoint.get("ppl_vae")
    if state is None:
        raise CheckpointError(f"checkpoint {checkpoint_path} was not written by ppl_vae")
    expected = (type(module.model).__qualname__, type(module.objective).__qualname__)
    found = (state.get("model_class"), state.get("objective_class"))
    if found != expected:
        raise CheckpointError(
            f"checkpoint {checkpoint_path} holds a {found[0]} trained with {found[1]}, "
            f"not a {expected[0]} with {expected[1]}"
        )
    if state.get("architecture") != architecture(module):
        saved, current = state.get("architecture", {}), architecture(module)
        differing = sorted(k for k in set(saved) | set(current) if saved.get(k) != current.get(k))
        raise CheckpointError(
            f"checkpoint {checkpoint_path} was written by a model of another configuration: "
            f"parameters that differ: {differing[:6]}"
        )


def fit(
    model: nn.Module,
    objective: Any,
    data: Mapping[str, torch.Tensor | Mapping[str, torch.Tensor]],
    config: TrainConfig | None = None,
    run_dir: str | os.PathLike | None = None,
    resume: bool = False,
    overwrite: bool = False,
    extra_config: Mapping[str, Any] | None = None,
    callbacks: Sequence[L.Callback] = (),
    **overrides: Any,
) -> FitResult:
    """Train ``model`` on ``objective`` by SVI with Lightning.

    :param model: a module with ``model(**batch)`` and ``guide(**batch)`` methods
        (every model in :mod:`ppl_vae.models`).
    :param objective: a Pyro ELBO (``TraceMeanField_ELBO()``, or one of
        :mod:`ppl_vae.infer`'s objectives, which may declare auxiliary steps).
    :param data: named training tensors: ``{"x": X}``; unpaired groups such as
        ``{"target": T, "background": B}``; or groups of aligned tensors such as
        ``{"x": X, "labelled": {"x": XL, "y": YL}}``. Each group's tensors are batched
        together and passed to the model by key.
    :param config: :class:`TrainConfig`; keyword ``overrides`` replace its fields.
    :param run_dir: where config, checkpoints and metrics go; ``None`` trains in memory.
    :param resume: continue the run in ``run_dir`` from ``checkpoints/last.ckpt`` with its
        optimiser state, step count, batch order and random state.
    :param overwrite: allow ``run_dir`` to hold an earlier run.
    :param extra_config: more settings to save in ``config.json`` (model, data).
    :param callbacks: extra Lightning callbacks.

    Data parallelism: ``devices``/``num_nodes`` > 1 with ``strategy="ddp"`` (see
    :func:`~ppl_vae.train.distributed.training_strategy`) trains one process per device,
    each on its own rows of every global batch of ``devices * num_nodes * batch_size``
    rows. Lightning re-launches the calling script for the other processes, or a launcher
    (torchrun, srun) starts them all; each runs ``fit``. Only rank 0 prepares ``run_dir``
    and writes checkpoints; :attr:`FitResult.global_rank` tells the others apart.

    The torch optimisers own ``model.parameters()`` (and the parameters of the
    objective's auxiliary steps); Pyro's parameter store is never read for training, so
    stale entries from an earlier notebook run cannot leak into this one, and
    ``pyro.settings`` (e.g. ``module_local_params``) are left as the user set them.
    Models keep their networks and priors as plain ``nn.Module`` s for that reason.
    """
    config = config or TrainConfig()
    if overrides:
        unknown = set(overrides) - set(TrainConfig.__dataclass_fields__)
        if unknown:
            raise TypeError(f"unknown training settings {sorted(unknown)}")
        config = TrainConfig(**{**config.to_dict(), **overrides})
    for name in ("model", "guide"):
        if not callable(getattr(model, name, None)):
            raise TypeError(f"model must have a callable {name}() method; got {type(model).__name__}")
    if not hasattr(objective, "differentiable_loss"):
        raise TypeError(f"objective must be a Pyro ELBO, got {type(objective).__name__}")
    _warn_if_bf16_is_slow(config)
    L.seed_everything(config.seed, workers=False, verbose=False)
    batches = TensorBatches(
        as_groups(data), config.batch_size, config.steps, seed=config.seed, batch_sizes=config.batch_sizes
    )
    module = SVIModule(model, objective, config, batches)

    num_processes = config.devices * config.num_nodes
    rank = launch_rank(config.devices)
    run = None
    if run_dir is not None and rank > 0:
        run = RunDirectory(run_dir, overwrite=True, resume=resume)
    elif run_dir is not None:
        run = RunDirectory(run_dir, overwrite=overwrite, resume=resume)
        if resume:
            _check_resumable(run.last_checkpoint, module)
        else:
            for stale in run.checkpoints.glob("*.ckpt"):
                stale.unlink()
        run.write_config({"train": config.to_dict(), **dict(extra_config or {})})
    elif resume:
        raise ValueError("resume=True needs the run_dir to resume from")

    callbacks = list(callbacks)
    if run is not None:
        callbacks.append(IterationCheckpoint(run.last_checkpoint))
    trainer = L.Trainer(
        accelerator=_accelerator(config.device),
        devices=config.devices,
        num_nodes=config.num_nodes,
        strategy=training_strategy(config.strategy, num_processes),
        max_epochs=1,
        max_steps=-1,
        precision=config.precision,
        logger=CSVLogger(run.path, name="", version="") if run is not None else False,
        callbacks=callbacks,
        enable_checkpointing=False,
        plugins=[AtomicCheckpointIO()],
        enable_progress_bar=config.progress_bar,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        use_distributed_sampler=False,
        default_root_dir=str(run.path) if run is not None else None,
        log_every_n_steps=min(config.log_every_n_steps, config.steps),
    )
    with pyro.validation_enabled(config.validate):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*does not have many workers.*")
            for noise in _LIGHTNING_NOISE:
                warnings.filterwarnings("ignore", message=noise)
            trainer.fit(
                module,
                train_dataloaders=BatchBlocks(batches, config.iterations_per_training_step),
                ckpt_path=str(run.last_checkpoint) if resume else None,
                weights_only=False,
            )
        if run is not None:
            trainer.save_checkpoint(run.last_checkpoint)
    model.cpu()
    return FitResult(
        model=model, history=module.history, steps=module.iteration, run_dir=run, global_rank=trainer.global_rank
    )
