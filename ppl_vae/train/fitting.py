"""``fit``: one training path for every model/objective pair, on CPU or GPU."""
from __future__ import annotations

import dataclasses
import importlib.util
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import lightning as L
import pyro
import torch
from lightning.pytorch.loggers import Logger, TensorBoardLogger
from torch import nn

from ppl_vae._validation import boolean, did_you_mean, positive_integer, shown, threads_from_environment
from ppl_vae.models.pair import ModelAndGuide, model_and_guide
from ppl_vae.train.accelerators import lightning_devices, warn_if_bf16_is_slow
from ppl_vae.train.batches import BatchBlocks, TensorBatches, as_groups
from ppl_vae.train.checkpoint import AtomicCheckpointIO, IterationCheckpoint, check_resumable, read_checkpoint
from ppl_vae.train.config import TrainConfig
from ppl_vae.train.distributed import (
    SetupAgreement,
    SetupFailed,
    launch_rank,
    launched_by_a_launcher,
    training_strategy,
)
from ppl_vae.train.first_batch import check_first_batch, create_guide_parameters
from ppl_vae.train.metrics import CSVMetricsLogger
from ppl_vae.train.module import SVIModule
from ppl_vae.train.progress_bar import with_progress_bar
from ppl_vae.train.quiet import quiet_lightning
from ppl_vae.train.run_dir import RunDirectory
from ppl_vae.train.run_files import NewRunFiles, ResumedRunFiles


@dataclass
class FitResult:
    """What :func:`fit` returns.

    :param model: the trained model (on the CPU).
    :param history: per-term means, one dict per logging interval (with ``"step"``).
    :param steps: training iterations completed.
    :param run_dir: the run directory, when one was written.
    :param global_rank: this process's rank under data parallelism (0 on one process):
        every process returns, only rank 0 should evaluate and write results.
    :param already_finished: ``resume=True`` found the run finished (its checkpoint holds
        ``steps`` iterations): the model was loaded from the checkpoint, and nothing was
        trained or written.
    """

    model: nn.Module
    history: list[dict[str, float]]
    steps: int
    run_dir: RunDirectory | None = None
    global_rank: int = 0
    already_finished: bool = False


def _configured(config: TrainConfig | None, overrides: Mapping[str, Any]) -> TrainConfig:
    config = TrainConfig() if config is None else config
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a TrainConfig or None, got {type(config).__name__}")
    if overrides:
        settings = [field.name for field in dataclasses.fields(TrainConfig)]
        unknown = sorted(set(overrides) - set(settings))
        if unknown:
            raise TypeError(f"unknown training setting {shown(unknown[0])}{did_you_mean(unknown[0], settings)}")
        config = TrainConfig(**{**config.to_dict(), **overrides})
    if "tensorboard" in config.loggers and not any(
        importlib.util.find_spec(name) for name in ("tensorboard", "tensorboardX")
    ):
        raise ValueError(
            "loggers includes 'tensorboard' but the tensorboard package is not installed: "
            "pip install 'ppl_vae[tensorboard]'"
        )
    return config


@dataclass
class _Setup:
    """What :func:`fit` prepared on this process before training: the training module, the run
    directory and the checkpoint resumed from (``None`` for a new run)."""

    module: L.LightningModule
    run: RunDirectory | None = None
    checkpoint: dict[str, Any] | None = None

    @property
    def resumed_iteration(self) -> int | None:
        return None if self.checkpoint is None else int(self.checkpoint["ppl_vae"]["iteration"])


def _refuse_split_rows(data: Mapping[str, Any], unpaired: Iterable[str]) -> None:
    """Refuse two or more bare tensors of one length in ``data``, but those the model takes
    unpaired (``unpaired``).

    Each bare tensor is a data group of its own, shuffled on its own (:func:`as_groups`), so
    the rows of one index are not batched together; a model that reads them together (a
    regression's inputs and outputs, images and their labels) needs them in one group. Which
    of the two is meant cannot be read from the data when the lengths agree.

    :param data: fit's ``data``.
    :param unpaired: the names of the groups the model takes unpaired (its ``unpaired_groups``).
    :raises ValueError: naming the tensors and the two ways to say which is meant."""
    unpaired = frozenset(unpaired)
    lengths: dict[int, list[str]] = {}
    for name, value in data.items():
        if isinstance(value, torch.Tensor) and value.dim() > 0 and name not in unpaired:
            lengths.setdefault(value.shape[0], []).append(name)
    for rows, names in lengths.items():
        if len(names) > 1:
            together = ", ".join(f"{name!r}: {name}" for name in names)
            apart = ", ".join(f"{name!r}: {{{name!r}: {name}}}" for name in names)
            raise ValueError(
                f"data {names} are tensors of the same length ({rows} rows): fit batches each bare tensor as a group "
                "of its own, shuffled on its own, so their rows would not stay together. Give rows that belong "
                f"together as one group, data={{'data': {{{together}}}}}, or groups that are unpaired one each, "
                f"data={{{apart}}} (a model that takes groups unpaired names them in its unpaired_groups, as "
                "ContrastiveVAE does)"
            )


def _set_up(
    model: nn.Module,
    objective: Any,
    data: Mapping[str, Any],
    config: TrainConfig,
    run_dir: str | os.PathLike | None,
    resume: bool,
    overwrite: bool,
    extra_config: Mapping[str, Any] | None,
    weights_only: bool,
    rank: int,
    elbo_arguments: Mapping[str, Any] | None = None,
) -> _Setup:
    """Check the inputs, build the training module, read the checkpoint resumed from, and (on
    rank 0) prepare the run directory; raises on the first problem."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module whose parameters fit trains, got {type(model).__name__}")
    if not hasattr(objective, "differentiable_loss"):
        raise TypeError(f"objective must be a Pyro ELBO, got {type(objective).__name__}")
    if resume and run_dir is None:
        raise ValueError("resume=True needs the run_dir to resume from")
    _refuse_split_rows(data, getattr(model, "unpaired_groups", ()))
    batches = TensorBatches(
        as_groups(data), config.batch_size, config.steps, seed=config.seed, batch_sizes=config.batch_sizes,
        binarize=config.binarize,
    )
    if isinstance(model, ModelAndGuide):
        create_guide_parameters(model, objective, batches)
    module = SVIModule(model, objective, config, batches, elbo_arguments)
    check_first_batch(module)
    if run_dir is None:
        return _Setup(module)
    run = RunDirectory(run_dir, overwrite=overwrite or rank > 0, resume=resume, create=False)
    checkpoint = None
    if resume:
        checkpoint = read_checkpoint(run.last_checkpoint, weights_only=weights_only)
        check_resumable(checkpoint, run.last_checkpoint, module)
    return _Setup(module, run, checkpoint)


def _loggers(config: TrainConfig, setup: _Setup) -> list[Logger]:
    """The run's loggers (on every process; they write on rank 0 only). TensorBoard hides the
    events a killed run logged after the checkpoint resumed from (``purge_step``)."""
    if setup.run is None:
        return []
    loggers: list[Logger] = []
    history = setup.checkpoint["ppl_vae"]["history"] if setup.checkpoint is not None else []
    if "csv" in config.loggers:
        loggers.append(CSVMetricsLogger(setup.run.metrics_csv, history))
    if "tensorboard" in config.loggers:
        resumed = setup.resumed_iteration
        purge = {"purge_step": resumed + 1} if resumed is not None else {}
        loggers.append(
            TensorBoardLogger(setup.run.path, name=setup.run.tensorboard.name, version="", default_hp_metric=False, **purge)
        )
    return loggers


def _finished(setup: _Setup, model: nn.Module, rank: int) -> FitResult:
    """The result of resuming a finished run: the checkpoint's model and history, nothing written."""
    module = setup.module
    module.load_state_dict(setup.checkpoint["state_dict"])
    module.on_load_checkpoint(setup.checkpoint)
    model.cpu()
    return FitResult(
        model=model, history=module.history, steps=module.iteration, run_dir=setup.run, global_rank=rank,
        already_finished=True,
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
    weights_only: bool = True,
    elbo_arguments: Mapping[str, Any] | None = None,
    threads: int | None = None,
    guide: Callable | None = None,
    **overrides: Any,
) -> FitResult:
    """Train ``model`` on ``objective`` by SVI with Lightning.

    Example, a small VAE trained for two steps into a run directory (:func:`ppl_vae.load_run`
    reloads it):

    >>> import os, tempfile, torch
    >>> import ppl_vae
    >>> from ppl_vae.infer import MeanFieldELBO
    >>> from ppl_vae.models import VAE
    >>> from ppl_vae.nn import MLP, mlp_decoder
    >>> vae = VAE(MLP([4, 16]), mlp_decoder(2, [16], (4,)), latent_dim=2)
    >>> X = torch.rand(64, 4).round()
    >>> tmp = tempfile.TemporaryDirectory()
    >>> result = ppl_vae.fit(vae, MeanFieldELBO(), {"x": X}, run_dir=os.path.join(tmp.name, "run"),
    ...                      steps=2, batch_size=16, progress_bar=False)
    >>> result.steps, sorted(result.history[-1])  # the per-point terms, logged every interval
    (2, ['elbo_loss', 'kl', 'reconstruction', 'step'])
    >>> sorted(os.listdir(result.run_dir.path))
    ['checkpoints', 'config.json', 'metrics.csv', 'pictures']
    >>> tmp.cleanup()

    :param model: a module with ``model(**batch)`` and ``guide(**batch)`` methods
        (every model in :mod:`ppl_vae.models`), or, with ``guide`` given, a Pyro model
        callable (a function, a method).
    :param objective: a Pyro ELBO (``TraceMeanField_ELBO()``, or one of
        :mod:`ppl_vae.infer`'s objectives, which may declare auxiliary steps).
    :param data: named training tensors: ``{"x": X}``; unpaired groups such as
        ``{"target": T, "background": B}``; or groups of aligned tensors such as
        ``{"x": X, "labelled": {"x": XL, "y": YL}}``. Each group's tensors are batched
        together and passed to the model by key. Two bare tensors of one length
        (``{"X": X, "y": y}``) are refused with a ``ValueError`` unless the model names them
        in its ``unpaired_groups`` (ContrastiveVAE's target and background): rows that belong
        together go in one group, ``{"data": {"X": X, "y": y}}``, and unpaired groups are given
        a group each, ``{"X": {"X": X}, "y": {"y": y}}``.
    :param config: :class:`TrainConfig`; keyword ``overrides`` replace its fields.
    :param run_dir: where config, checkpoints and metrics go; ``None`` trains in memory. The
        device and every setting are checked before anything is written there, and a new run
        that fails before its first iteration (Lightning refusing a strategy, a device that
        fails as training starts) removes what it created, leaving the folder as it found it
        for a retry.
    :param resume: continue the run in ``run_dir`` from ``checkpoints/last.ckpt`` with its
        optimiser state, step count, batch order and random state. ``metrics.csv`` is made to
        hold the checkpoint's rows (rows logged after it by a killed run are dropped, and
        logged again as training repeats those iterations). A finished run is left as it is:
        its trained model is returned with ``already_finished=True``.
    :param overwrite: allow ``run_dir`` to hold an earlier run.
    :param extra_config: more settings to save in ``config.json`` (model, data).
    :param callbacks: extra Lightning callbacks.
    :param weights_only: load the checkpoint resumed from with
        ``torch.load(weights_only=True)`` (tensors and plain data, never code). ``False``
        resumes from a trusted checkpoint of an older ppl_vae, which pickled numpy arrays;
        unpickling can run any code the file holds.
    :param elbo_arguments: keyword arguments of the objective on every ELBO step besides the
        batch, e.g. ``{"aggregate_data": {"x": X}}``: the whole data set whose encodings form
        q(z) in :class:`~ppl_vae.infer.decomposition.AggregateDivergence`'s inclusive KL. Their tensors
        are moved to the training device once.
    :param threads: the number of torch CPU threads (``torch.set_num_threads``) to train with,
        1 where other processes share the CPU; ``None``: ``$PPL_VAE_NUM_THREADS`` when it is
        set (as for ``ppl-vae``), else torch's choice is left as it is.
    :param guide: the guide of the model callable ``model`` (an autoguide such as
        ``AutoNormal(model)``, a function, a method), as Pyro's ``SVI(model, guide, ...)`` takes
        it; ``None`` when ``model`` has a ``guide`` method. The two are held as a
        :class:`~ppl_vae.models.ModelAndGuide`, whose parameters (an autoguide's, those of a
        module whose method the model or guide is) are trained in place; the result's
        ``model`` is that pair.
    :param overrides: fields of :class:`TrainConfig` to replace (``lr=1e-3``, ``batch_size=256``),
        applied to ``config`` or to the defaults; an unknown name raises a ``TypeError`` that
        suggests the close ones (``learning_rate`` -> ``'lr'``).


    Data parallelism: ``devices``/``num_nodes`` > 1 with ``strategy="ddp"`` (see
    :func:`~ppl_vae.train.distributed.training_strategy`) trains one process per device,
    each on its own rows of every global batch of ``devices * num_nodes * batch_size``
    rows. Lightning re-launches the calling script for the other processes, or a launcher
    (torchrun, srun) starts them all; each runs ``fit``. Only rank 0 prepares ``run_dir``
    and writes checkpoints; the ``global_rank`` of the :class:`FitResult` tells the others apart. When the
    setup of one process fails (a run directory that exists, data it cannot use), every
    process raises that error as soon as they all have started
    (:class:`~ppl_vae.train.distributed.SetupAgreement`).

    The torch optimisers own ``model.parameters()`` (and the parameters of the
    objective's auxiliary steps); training runs in a parameter store of its own
    (``pyro.get_param_store().scope()``), so stale entries from an earlier notebook run
    cannot leak into this one (an autoguide would otherwise take them for its parameters of
    the same names), Pyro's global store is left as it was, and ``pyro.settings`` (e.g.
    ``module_local_params``) are left as the user set them. Models keep their networks and
    priors as plain ``nn.Module`` s for that reason.

    Before training, the guide and the model are traced once on the first batch: a
    ``pyro.param`` site whose tensor is not one of those parameters (it would stay at its
    initial value) and observations outside the support of their likelihood (grey levels
    under a Bernoulli likelihood) raise a ``ValueError`` naming them.
    """
    for name, flag in (("resume", resume), ("overwrite", overwrite), ("weights_only", weights_only)):
        boolean(name, flag)
    model = model_and_guide(model, guide)
    config = _configured(config, overrides)
    accelerator, devices = lightning_devices(config)
    threads = threads_from_environment() if threads is None else positive_integer("threads", threads)
    if threads is not None:
        torch.set_num_threads(threads)
    warn_if_bf16_is_slow(config, accelerator)
    L.seed_everything(config.seed, workers=False, verbose=False)
    num_processes = config.devices * config.num_nodes
    rank = launch_rank(config.devices)
    failure = None
    try:
        setup = _set_up(
            model, objective, data, config, run_dir, resume, overwrite, extra_config, weights_only, rank, elbo_arguments
        )
    except Exception as error:
        if num_processes == 1 or not launched_by_a_launcher():
            raise
        setup, failure = _Setup(SetupFailed()), error
    if setup.resumed_iteration == config.steps:
        return _finished(setup, model, rank)

    callbacks = list(callbacks)
    if num_processes > 1:
        callbacks.insert(0, SetupAgreement(failure))
    if setup.run is not None:
        callbacks.append(IterationCheckpoint(setup.run.last_checkpoint))
    if setup.checkpoint is not None:
        rows = setup.checkpoint["ppl_vae"]["history"] if "csv" in config.loggers else []
        callbacks.append(ResumedRunFiles(setup.run, rows))
    callbacks = with_progress_bar(callbacks, config)
    with quiet_lightning():
        trainer = L.Trainer(
            accelerator=accelerator,
            devices=devices,
            num_nodes=config.num_nodes,
            strategy=training_strategy(config.strategy, num_processes),
            max_epochs=1,
            max_steps=-1,
            precision=config.precision,
            logger=_loggers(config, setup) or False,
            callbacks=callbacks,
            enable_checkpointing=False,
            plugins=[AtomicCheckpointIO()],
            enable_progress_bar=config.progress_bar,
            enable_model_summary=False,
            num_sanity_val_steps=0,
            use_distributed_sampler=False,
            default_root_dir=str(setup.run.path) if setup.run is not None else None,
            log_every_n_steps=min(config.log_every_n_steps, config.steps),
        )
    module = setup.module
    new_run = NewRunFiles(setup.run) if setup.run is not None and setup.checkpoint is None and rank == 0 else None
    if new_run is not None:
        new_run.write(config, extra_config)
    elif setup.run is not None and rank == 0:
        setup.run.create()
    # A parameter store of the run's own: a PyroModule (an autoguide) reads its parameters from
    # Pyro's store where that holds their names, and entries of an earlier run must not stand in.
    with pyro.validation_enabled(config.validate), pyro.get_param_store().scope():
        try:
            with quiet_lightning():
                trainer.fit(
                    module,
                    train_dataloaders=BatchBlocks(module.batches, config.iterations_per_training_step) if failure is None else [],
                    ckpt_path=str(setup.run.last_checkpoint) if setup.checkpoint is not None else None,
                    weights_only=weights_only,
                )
        except BaseException:
            if new_run is not None and module.iteration == 0:
                new_run.remove()
            raise
        if setup.run is not None:
            trainer.save_checkpoint(setup.run.last_checkpoint, weights_only=False)
    model.cpu()
    return FitResult(
        model=model, history=module.history, steps=module.iteration, run_dir=setup.run, global_rank=trainer.global_rank
    )
