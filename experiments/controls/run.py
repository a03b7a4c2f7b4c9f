"""Controls: the authors' own code (PartedVAE: sinahmr/parted-vae; Decomposition VAE:
iffsid/disentangling-disentanglement) trained at the campaign's budget, seeds and evaluation,
so that a campaign row that falls short of its paper can be blamed on our implementation or on
the budget.

    git --git-dir=<mirror of sinahmr/parted-vae> archive HEAD | tar -x -C /tmp/parted-vae
    python experiments/controls/run.py --authors-code /tmp/parted-vae \\
        --authors-commit $(git --git-dir=<mirror> rev-parse HEAD) \\
        parted-dsprites-unsupervised --seed 0 --budget-minutes 90

Experiments (``CONTROLS``, named after the campaign experiment each controls):
``parted-dsprites-unsupervised``, ``parted-dsprites-labels`` (3,686 labels), ``parted-mnist``
(256 labels) with the PartedVAE checkout; ``decomposition-dsprites-isotropic`` and
``decomposition-dsprites-student-t-df9`` (df 9, their script's value) with the Decomposition VAE
checkout (the repository root, which holds ``src/``).

The authors' code is imported at run time from the checkout given by ``--authors-code`` (it never
enters this repository, and nothing in ``ppl_vae`` imports this module).

PartedVAE, what stays theirs: the network (``partedvae.models.VAE``), the loss and the training
step (``partedvae.training.Trainer``: ``_train_iteration``, ``_warm_up``, their capacity ramps
counted in their ``num_steps``, their attention-sharpness schedule ``sigmoid_coef`` growing by
2e-4 per training forward, and 8 in eval mode whatever the step), their ReduceLROnPlateau
schedules stepped once per epoch on their epoch mean loss, their optimisers (Adam 5e-4 for the
model and for the warm-up) and the hyperparameters of their ``main.py`` for the data set (the
unsupervised control has no warm-up: their ``main.py`` as committed sets ``WARM_UP = True``,
which on dSprites trains with 10,000 labels). Their ``Trainer.train`` is not called: this
module makes the same per-batch calls itself so that a run can be checkpointed and resumed
mid-epoch.

Decomposition VAE, what stays theirs: ``models.VAE_dsprites`` (built from a namespace of
``main.py``'s arguments as ``experimental_settings/independance.sh`` sets them: 10 latents,
beta 1, alpha 0, isotropic prior variances, Student-t df 9), Adam with AMSGrad at 5e-4, and
the step of ``main.py``'s ``train`` (minimise ``-objectives.decomp_objective``, summed over the
batch); ``main.py`` itself parses arguments at import, so its five-line loop body is made here.

What is ours: the steps (25,000 on dSprites; MNIST to the campaign's plateau), the seeds (their
``main.py`` draws a random seed for ``--seed 0``; here the seed is used as given), the batch
size (64, theirs too) and the evaluation: :class:`experiments.campaign.DSpritesScoring` (the
Factor score under the standard and the authors' protocol, MIG, SAP, DCI, beta-VAE, and shape
accuracy for PartedVAE) applied to their encoder's means (PartedVAE: z and u means in eval mode,
as their ``utils/metrics.py`` takes them; Decomposition VAE: the mean of q(z|x)), and for MNIST
the campaign's held-out split and accuracy (:func:`experiments.held_out.split_held_out`,
:func:`~experiments.held_out.held_out_accuracy`) with the campaign's curve interval and
patience; MNIST's labels-alone baseline is their encoder and class head trained by their
warm-up step alone to the same kind of plateau.

Data handling that differs from theirs (their loaders read files that are not available
offline):

- dSprites: their loaders read the original ``.npz`` (all 737,280 images, shuffled by a torch
  ``DataLoader``); here the library's rendered dSprites (:class:`ppl_vae.data.DSprites`, all
  737,280 grid images) is fed to their model in the same epochs of 11,520 batches of 64, each
  epoch a permutation drawn from a generator seeded by the run's seed and the epoch (so that
  a resumed run sees the same batches). The renderer's shapes are not the original bitmaps.
  The labelled control takes the campaign's stratified 0.5% (3,686 images), not their
  ``DSpritesWarmUpDataset``.
- MNIST: their loader reads the 60,000 training images (grey levels, resized to 32x32, BCE)
  and takes the first 256 as the labelled warm-up set; here the campaign's pool
  (:func:`ppl_vae.recipes.parted.mnist_pools`, the official test set, binarised once, 32x32)
  and 256 labelled images drawn as the campaign's recipe draws them are used. Their plateau
  schedules are stepped every 938 batches (60,000 / 64, their epoch), drawn from successive
  permutations of the pool.

Shims for today's libraries, each commented where it is made (:func:`import_authors_code`,
:func:`import_decomposition_code`, :meth:`DecompositionTraining.step`): ``ReduceLROnPlateau`` no longer takes ``verbose``; the
Decomposition VAE's plotting module imports seaborn (a stand-in module replaces it: plots
only); torch.distributions validates arguments by default and refuses their decoder's logits,
which they pass as RelaxedBernoulli's ``probs`` (validation is off during their objective's
call).

Checkpoints (``~/.cache/ppl_vae/controls/<experiment>/seed<k>.pt``, written atomically every
``--checkpoint-minutes`` and at the budget's end) hold the model, the optimisers and
schedulers, PartedVAE's ``sigmoid_coef`` and ``num_steps`` (plain attributes, not in its state
dict), the warm-up loader's order, the epoch's position and running sums, the RNG states, the
curve and the training clock: a resumed run continues exactly. Training stops at
``--budget-minutes``; a run that has done its steps is scored only when the budget allows it,
otherwise the next invocation scores it.

Records: ``results/controls/<experiment>/seed<k>.json`` with the campaign's record schema
(:func:`experiments.campaign.train_one`) plus ``"implementation": "authors"``,
``"authors_repository"`` and ``"authors_commit"``; written when the budget ends, when the steps
are done (before scoring, ``complete`` false) and once scored.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import itertools
import os
import random
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results" / "controls"
REPOSITORIES = {"parted-vae": "https://github.com/sinahmr/parted-vae",
                "disentangling-disentanglement": "https://github.com/iffsid/disentangling-disentanglement"}


def default_checkpoints() -> Path:
    """``$XDG_CACHE_HOME/ppl_vae/controls`` (``~/.cache`` when the variable is unset)."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "ppl_vae" / "controls"


@dataclasses.dataclass(frozen=True)
class Control:
    """One control experiment: the authors' settings for a data set, our budget and scoring.

    :param experiment: the campaign experiment it controls (records go to
        ``results/controls/<experiment>/``).
    :param code: the authors' repository (a key of ``REPOSITORIES``).
    :param dataset: ``"dsprites"`` or ``"mnist"``.
    :param steps: main training iterations to reach (or the cap, for MNIST's plateau).
    :param epoch_batches: batches per epoch of their plateau schedules (their data set / 64).
    :param authors_settings: the values of their ``main.py`` for the data set.
    :param num_labels: labelled images of the warm-up (0: unsupervised, no warm-up).
    :param label_fraction: dSprites: the labelled fraction, as the campaign's recipe draws it.
    :param curve_every, curve_votes, votes, patience, validation_images: as the campaign's
        :class:`experiments.campaign.Run`.
    """

    experiment: str
    code: str
    dataset: str
    steps: int
    epoch_batches: int
    authors_settings: Mapping[str, Any]
    num_labels: int = 0
    label_fraction: float | None = None
    curve_every: int = 5000
    curve_votes: int = 1000
    votes: int = 10_000
    patience: int = 5
    validation_images: int = 1000

    @property
    def scoring(self) -> str:
        return "dsprites" if self.dataset == "dsprites" else "mnist-labels"

    def campaign_run(self, seed: int) -> Any:
        """The campaign's :class:`~experiments.campaign.Run` with this control's budget and scoring."""
        from experiments.campaign import Run

        recipe = "parted" if self.code == "parted-vae" else "decomposition"
        return Run(experiment=self.experiment, recipe=recipe, seed=seed, steps=self.steps, curve_every=self.curve_every, curve_votes=self.curve_votes, votes=self.votes,
                   scoring=self.scoring, settings={}, patience=self.patience,
                   validation_images=self.validation_images)


DSPRITES_SETTINGS = {  # main.py, dataset == 'dsprites'
    "img_size": [1, 64, 64], "latent_spec": {"z": 5, "c": [3], "single_u": 1}, "disc_priors": [[0.33, 0.33, 0.34]],
    "z_capacity": [0.0, 30.0, 300000, 50.0], "u_capacity": [0.0, 5.0, 300000, 50.0],
    "c_gamma": 100.0, "entropy_gamma": 10.0, "bc_gamma": 10.0, "bc_threshold": 0.1,
    "recon_type": "bce", "lr_warm_up": 5e-4, "lr_model": 5e-4, "batch_size": 64,
}
MNIST_SETTINGS = {  # main.py, dataset == 'mnist'
    "img_size": [1, 32, 32], "latent_spec": {"z": 6, "c": [10], "single_u": 10}, "disc_priors": [[0.1] * 10],
    "z_capacity": [0.0, 7.0, 100000, 15.0], "u_capacity": [0.0, 7.0, 100000, 15.0],
    "c_gamma": 15.0, "entropy_gamma": 30.0, "bc_gamma": 30.0, "bc_threshold": 0.15,
    "recon_type": "bce", "lr_warm_up": 5e-4, "lr_model": 5e-4, "batch_size": 64,
}
DECOMPOSITION_SETTINGS = {  # experimental_settings/independance.sh, with main.py's defaults for the rest
    "model": "dsprites", "obj": "decomp", "K": 1, "beta": 1.0, "alpha": 0.0, "prior": "Normal", "posterior": "Normal",
    "latent_dim": 10, "gamma": 0.8, "df": 2.0, "prior_variance": "iso", "prior_variance_scale": 1.0,
    "learn_prior_variance": False, "lr": 5e-4, "beta1": 0.9, "beta2": 0.999, "amsgrad": True, "batch_size": 64,
}
CONTROLS = {control.experiment: control for control in (
    Control("parted-dsprites-unsupervised", "parted-vae", "dsprites", 25_000, 737_280 // 64, DSPRITES_SETTINGS),
    Control("parted-dsprites-labels", "parted-vae", "dsprites", 25_000, 737_280 // 64, DSPRITES_SETTINGS,
            num_labels=3686, label_fraction=0.005),
    Control("parted-mnist", "parted-vae", "mnist", 100_000, -(-60_000 // 64), MNIST_SETTINGS, num_labels=256,
            curve_every=1000),
    Control("decomposition-dsprites-isotropic", "disentangling-disentanglement", "dsprites", 25_000, 737_280 // 64,
            DECOMPOSITION_SETTINGS),
    Control("decomposition-dsprites-student-t-df9", "disentangling-disentanglement", "dsprites", 25_000, 737_280 // 64,
            {**DECOMPOSITION_SETTINGS, "prior": "StudentT", "df": 9.0}),
)}


def import_authors_code(checkout: Path) -> tuple[type, type, type]:
    """(``VAE``, ``Trainer``, ``FastTensorDataLoader``) of the authors' checkout, with the shims
    today's torch needs.

    :raises ValueError: naming ``--authors-code`` when the checkout lacks their modules.
    """
    if not (checkout / "partedvae" / "models.py").is_file() or not (checkout / "partedvae" / "training.py").is_file():
        raise ValueError(f"--authors-code: expected a checkout of {REPOSITORIES['parted-vae']} (with partedvae/models.py "
                         f"and partedvae/training.py), got {checkout}")
    sys.path.insert(0, str(checkout))
    from partedvae import training
    from partedvae.models import VAE
    from torch.optim.lr_scheduler import ReduceLROnPlateau
    from utils.fast_tensor_dataloader import FastTensorDataLoader

    def plateau_without_verbose(*args: Any, verbose: bool = False, **kwargs: Any) -> ReduceLROnPlateau:
        # shim: today's torch (2.14) no longer takes ReduceLROnPlateau's `verbose`; their Trainer
        # passes True, which only printed the rate changes
        return ReduceLROnPlateau(*args, **kwargs)

    training.ReduceLROnPlateau = plateau_without_verbose
    return VAE, training.Trainer, FastTensorDataLoader


def import_decomposition_code(checkout: Path) -> tuple[Any, Any]:
    """(``models``, ``objectives``) of the Decomposition VAE authors' checkout (their ``src/``),
    with the shims today's libraries need.

    :raises ValueError: naming ``--authors-code`` when the checkout lacks their modules.
    """
    import types

    source = checkout / "src"
    if not (source / "models" / "vae_dsprites.py").is_file() or not (source / "objectives.py").is_file():
        raise ValueError(f"--authors-code: expected a checkout of {REPOSITORIES['disentangling-disentanglement']} "
                         f"(with src/models/vae_dsprites.py and src/objectives.py), got {checkout}")
    # shim: their plotting module `vis` imports seaborn (not installed) and is used only for
    # pictures; `models/__init__.py` imports it through the pinwheel model, so a stand-in is put first
    plots = types.ModuleType("vis")
    plots.scatter_plot = plots.posterior_plot_pinwheel = None
    sys.modules.setdefault("vis", plots)
    sys.path.insert(0, str(source))
    import models
    import objectives

    return models, objectives


class AuthorsEncoder:
    """Their model seen through the interface the campaign's scoring takes: ``encode(x)`` the
    means of z and u in eval mode (their ``utils/metrics.py`` representation) and
    ``classify(x)`` q(c|x)."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def encode(self, x: Any) -> Any:
        import torch

        self.model.eval()
        with torch.no_grad():
            latent = self.model.encode(x.float())
            return torch.cat([latent["z"][0], latent["u"][0]], dim=1)

    def classify(self, x: Any) -> tuple[Any]:
        import torch

        self.model.eval()
        with torch.no_grad():
            return (self.model.encode(x.float(), only_disc_dist=True)["log_c"].exp(),)

    @property
    def training(self) -> bool:
        return self.model.training

    def eval(self) -> AuthorsEncoder:
        self.model.eval()
        return self

    def parameters(self) -> Any:
        return self.model.parameters()

    def train(self, mode: bool = True) -> AuthorsEncoder:
        self.model.train(mode)
        return self


class EpochBatches:
    """The main loop's images: epochs of ``epoch_batches`` batches, each epoch successive
    permutations of the ``size`` images drawn from a generator seeded by ``(seed, epoch)``."""

    def __init__(self, images: Callable[[Any], Any], size: int, epoch_batches: int, batch_size: int, seed: int) -> None:
        self.images, self.size, self.epoch_batches, self.batch_size, self.seed = images, size, epoch_batches, batch_size, seed
        self._order: tuple[int, Any] | None = None

    def batch(self, epoch: int, position: int) -> Any:
        """The ``position``-th batch of ``epoch``."""
        if self._order is None or self._order[0] != epoch:
            import torch

            generator = torch.Generator().manual_seed(1_000_003 * self.seed + epoch)
            passes = -(-self.epoch_batches * self.batch_size // self.size)
            self._order = (epoch, torch.cat([torch.randperm(self.size, generator=generator) for _ in range(passes)]))
        return self.images(self._order[1][position * self.batch_size : (position + 1) * self.batch_size])


def atomic_torch_save(state: Mapping[str, Any], path: Path) -> None:
    """``torch.save`` to a temporary file beside ``path``, then rename it over ``path``."""
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    torch.save(dict(state), temporary)
    os.replace(temporary, path)


def rng_states() -> dict[str, Any]:
    import numpy as np
    import torch

    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def set_rng_states(states: Mapping[str, Any]) -> None:
    import numpy as np
    import torch

    torch.set_rng_state(states["torch"])
    np.random.set_state(states["numpy"])
    random.setstate(states["python"])


def training_data(control: Control, seed: int) -> dict[str, Any]:
    """``images(indices)`` of the training set, its ``size``, the ``labelled`` images (or
    none), and for MNIST the campaign's ``validation`` and ``test`` sets and pool."""
    import torch

    if control.dataset == "dsprites":
        from ppl_vae.data.dsprites import DSprites, stratified_label_indices

        source = DSprites()
        data: dict[str, Any] = {"images": lambda indices: source.tensors(indices, dtype=torch.float32)["x"],
                                "size": len(source), "source": source}
        if control.num_labels:
            chosen = stratified_label_indices(None, control.label_fraction, seed=seed)
            labelled = source.tensors(chosen, dtype=torch.float32)
            data["labelled"] = {"x": labelled["x"], "y": labelled["factors"][:, 1]}
        return data
    from experiments.campaign import MNISTLabelsScoring, run_config

    config = run_config(dataclasses.replace(control.campaign_run(seed), settings=_campaign_mnist_settings()), "cpu")
    scoring = MNISTLabelsScoring(control.campaign_run(seed), config)
    from ppl_vae.recipes.parted import labelled_subset

    pool = scoring.pool
    chosen = labelled_subset(pool.labels, None, control.num_labels, seed=seed)
    return {"images": lambda indices: pool.x[indices].float(), "size": pool.x.shape[0],
            "labelled": {"x": pool.x[chosen], "y": pool.labels[chosen]}, "scoring": scoring, "config": config}


class ControlTraining:
    """The authors' model, trainer and data for one (control, seed), with the loop state that a
    checkpoint holds: ``epoch``, ``position`` (batches done in it), the epoch's running sums
    (their ``_train_epoch``'s), the curve and the best point (MNIST)."""

    def __init__(self, control: Control, seed: int, classes: tuple[type, type, type]) -> None:
        import torch

        VAE, Trainer, FastTensorDataLoader = classes
        settings = control.authors_settings
        self.control, self.seed = control, seed
        random.seed(seed)
        import numpy as np

        np.random.seed(seed)
        torch.manual_seed(seed)
        device = torch.device("cpu")
        self.model = VAE(img_size=tuple(settings["img_size"]), latent_spec=dict(settings["latent_spec"]),
                         c_priors=[list(prior) for prior in settings["disc_priors"]], device=device)
        warm_up_parameters = itertools.chain(self.model.img_to_features.parameters(),
                                             self.model.features_to_hidden.parameters(),
                                             self.model.h_to_c_logit_fc.parameters())
        optimisers = [torch.optim.Adam(warm_up_parameters, lr=settings["lr_warm_up"]),
                      torch.optim.Adam(self.model.parameters(), lr=settings["lr_model"])]
        self.trainer = Trainer(self.model, optimisers, dataset=control.dataset, device=device,
                               recon_type=settings["recon_type"], z_capacity=list(settings["z_capacity"]),
                               u_capacity=list(settings["u_capacity"]), c_gamma=settings["c_gamma"],
                               entropy_gamma=settings["entropy_gamma"], bc_gamma=settings["bc_gamma"],
                               bc_threshold=settings["bc_threshold"])
        self.data = training_data(control, seed)
        labelled = self.data.get("labelled")
        self.warm_up_loader = None
        if labelled is not None:
            y = torch.nn.functional.one_hot(labelled["y"].long(), self.model.sum_c_dims).float()
            self.warm_up_loader = FastTensorDataLoader(labelled["x"].float(), y, batch_size=settings["batch_size"],
                                                       shuffle=True)
        self.batches = EpochBatches(self.data["images"], self.data["size"], control.epoch_batches,
                                    settings["batch_size"], seed)
        self.epoch, self.position = 0, 0
        self.warm_up_sum, self.loss_sum, self.images_seen = 0.0, 0.0, 0
        self.curve: list[dict[str, Any]] = []
        self.best: dict[str, Any] | None = None
        self.best_weights: dict[str, Any] | None = None
        self.stopped_at: int | None = None

    @property
    def steps(self) -> int:
        return self.trainer.num_steps

    def encoder(self) -> AuthorsEncoder:
        return AuthorsEncoder(self.model)

    def describe(self) -> str:
        return (f"epoch {self.epoch}, sigmoid_coef {self.model.sigmoid_coef:.3f}, "
                f"lr {self.trainer.optimizer_model.param_groups[0]['lr']:g}")

    def step(self) -> None:
        """One iteration of their ``_train_epoch``: a warm-up batch (when labelled) and a main
        step; at the epoch's end their schedulers step on the epoch's mean losses."""
        data = self.batches.batch(self.epoch, self.position)
        self.warm_up_sum += self.trainer._warm_up(self.warm_up_loader)
        self.loss_sum = self.loss_sum + self.trainer._train_iteration(data)
        self.images_seen += data.shape[0]
        self.position += 1
        if self.position == self.control.epoch_batches:
            if self.warm_up_loader is not None:
                self.trainer.scheduler_warm_up.step(self.warm_up_sum / self.position)
            self.trainer.scheduler_model.step((self.loss_sum / self.images_seen)[0])
            self.epoch, self.position = self.epoch + 1, 0
            self.warm_up_sum, self.loss_sum, self.images_seen = 0.0, 0.0, 0

    def state_dict(self, training_seconds: float) -> dict[str, Any]:
        trainer = self.trainer
        return {
            "model": self.model.state_dict(), "sigmoid_coef": self.model.sigmoid_coef, "num_steps": trainer.num_steps,
            "optimizer_warm_up": trainer.optimizer_warm_up.state_dict(),
            "optimizer_model": trainer.optimizer_model.state_dict(),
            "scheduler_warm_up": trainer.scheduler_warm_up.state_dict(),
            "scheduler_model": trainer.scheduler_model.state_dict(),
            "warm_up_tensors": list(self.warm_up_loader.tensors) if self.warm_up_loader is not None else None,
            "epoch": self.epoch, "position": self.position, "warm_up_sum": self.warm_up_sum,
            "loss_sum": self.loss_sum, "images_seen": self.images_seen, "curve": self.curve, "best": self.best,
            "best_weights": self.best_weights, "stopped_at": self.stopped_at, "rng": rng_states(),
            "training_seconds": training_seconds,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        trainer = self.trainer
        self.model.load_state_dict(state["model"])
        self.model.sigmoid_coef, trainer.num_steps = state["sigmoid_coef"], state["num_steps"]
        trainer.optimizer_warm_up.load_state_dict(state["optimizer_warm_up"])
        trainer.optimizer_model.load_state_dict(state["optimizer_model"])
        trainer.scheduler_warm_up.load_state_dict(state["scheduler_warm_up"])
        trainer.scheduler_model.load_state_dict(state["scheduler_model"])
        if self.warm_up_loader is not None:
            self.warm_up_loader.tensors = list(state["warm_up_tensors"])
        for name in ("epoch", "position", "warm_up_sum", "loss_sum", "images_seen", "curve", "best", "best_weights",
                     "stopped_at"):
            setattr(self, name, state[name])
        set_rng_states(state["rng"])


class DecompositionEncoder:
    """Their Decomposition VAE through the scoring's interface: ``encode(x)`` the means of
    q(z|x) (their encoder's first output)."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def encode(self, x: Any) -> Any:
        import torch

        self.model.eval()
        with torch.no_grad():
            return self.model.enc(x.float())[0]

    def eval(self) -> DecompositionEncoder:
        self.model.eval()
        return self

    def parameters(self) -> Any:
        return self.model.parameters()


class DecompositionTraining:
    """The Decomposition VAE authors' model (``models.VAE_dsprites``), AMSGrad optimiser and
    objective (``objectives.decomp_objective``, its negative summed over the batch as their
    ``main.py``'s ``train`` minimises it) on dSprites, with the loop state a checkpoint holds."""

    def __init__(self, control: Control, seed: int, classes: tuple[Any, Any]) -> None:
        import numpy as np
        import torch

        models, self.objectives = classes
        settings = control.authors_settings
        self.control, self.seed = control, seed
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)
        self.model = getattr(models, f"VAE_{settings['model']}")(argparse.Namespace(**settings))
        self.optimiser = torch.optim.Adam(filter(lambda p: p.requires_grad, self.model.parameters()),
                                          lr=settings["lr"], amsgrad=settings["amsgrad"],
                                          betas=(settings["beta1"], settings["beta2"]))
        self.data = training_data(control, seed)
        self.batches = EpochBatches(self.data["images"], self.data["size"], control.epoch_batches,
                                    settings["batch_size"], seed)
        self.iteration, self.epoch, self.position, self.last_loss = 0, 0, 0, float("nan")
        self.curve: list[dict[str, Any]] = []
        self.stopped_at: int | None = None

    @property
    def steps(self) -> int:
        return self.iteration

    def encoder(self) -> DecompositionEncoder:
        return DecompositionEncoder(self.model)

    def describe(self) -> str:
        return f"epoch {self.epoch}, loss {self.last_loss:.1f}"

    def step(self) -> None:
        """One iteration of their ``main.py``'s ``train``."""
        import pyro.distributions

        settings = self.control.authors_settings
        data = self.batches.batch(self.epoch, self.position)
        self.model.train()
        self.optimiser.zero_grad()
        # shim: their dSprites decoder returns logits, which their model passes as RelaxedBernoulli's
        # `probs` (their log_prob override reads them as logits); today's torch validates arguments
        # by default and refuses probabilities outside [0, 1]. The checks are off for this call
        # only: a process-wide switch is turned back on by anything that imports pyro.distributions
        # or leaves a pyro.validation_enabled block (the scoring's curve did, mid-run)
        with pyro.distributions.validation_enabled(False):
            loss = -self.objectives.decomp_objective(self.model, data, K=settings["K"], beta=settings["beta"],
                                                     alpha=settings["alpha"], regs=None)
        if not bool(loss.isfinite()):
            raise FloatingPointError(f"their training loss is {loss.item()} at step {self.iteration + 1}")
        loss.backward()
        self.optimiser.step()
        self.last_loss = loss.item()
        self.iteration, self.position = self.iteration + 1, self.position + 1
        if self.position == self.control.epoch_batches:
            self.epoch, self.position = self.epoch + 1, 0

    def state_dict(self, training_seconds: float) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "optimiser": self.optimiser.state_dict(), "iteration": self.iteration,
                "epoch": self.epoch, "position": self.position, "curve": self.curve, "stopped_at": self.stopped_at,
                "rng": rng_states(), "training_seconds": training_seconds}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimiser.load_state_dict(state["optimiser"])
        for name in ("iteration", "epoch", "position", "curve", "stopped_at"):
            setattr(self, name, state[name])
        set_rng_states(state["rng"])


IMPORTERS = {"parted-vae": import_authors_code, "disentangling-disentanglement": import_decomposition_code}
TRAININGS = {"parted-vae": ControlTraining, "disentangling-disentanglement": DecompositionTraining}


def _campaign_mnist_settings() -> dict[str, Any]:
    """The settings of the campaign's ``parted-mnist`` (its pool, labels and held-out split)."""
    from experiments.campaign import MANIFEST, read_manifest

    return dict(next(run for run in read_manifest(MANIFEST) if run.experiment == "parted-mnist").settings)


def check_commit(commit: str) -> str:
    """``commit`` when it is 40 hexadecimal digits.

    :raises ValueError: naming ``--authors-commit`` otherwise.
    """
    if not re.fullmatch(r"[0-9a-f]{40}", commit):
        raise ValueError(f"--authors-commit: expected the 40 hex digits of `git rev-parse HEAD` of the authors' "
                         f"snapshot, got {commit!r}")
    return commit


def make_record(control: Control, seed: int, training: Any, training_seconds: float, wall_seconds: float,
                invocations: int, metrics: Mapping[str, float], commit: str, authors_commit: str) -> dict[str, Any]:
    """The campaign's record schema (:func:`experiments.campaign.train_one`) for a control run;
    ``commit`` is this repository's when the invocation started (the code it runs)."""
    from experiments.campaign import machine, versions

    return {
        "experiment": control.experiment,
        "seed": seed,
        "complete": bool(metrics),
        "steps": int(training.steps),
        "target_steps": control.steps,
        "stopped_at": training.stopped_at,
        "training_seconds": round(training_seconds, 1),
        "wall_seconds": round(wall_seconds, 1),
        "invocations": invocations,
        "updated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit,
        "versions": versions(),
        "machine": machine("cpu"),
        "recipe": f"authors:{control.code}",
        "settings": {**control.authors_settings, "dataset": control.dataset, "num_labels": control.num_labels,
                     "label_fraction": control.label_fraction, "epoch_batches": control.epoch_batches,
                     "seed": seed, "steps": control.steps},
        "votes": control.votes,
        "metrics": dict(metrics),
        "curve": list(training.curve),
        "implementation": "authors",
        "authors_repository": REPOSITORIES[control.code],
        "authors_commit": authors_commit,
    }


def evaluate_curve(control: Control, seed: int, training: Any) -> None:
    """Append the curve point of the current step (the campaign's curve of the scoring), and for
    MNIST keep the best weights and stop after ``patience`` points without improvement."""
    import copy

    encoder = training.encoder()
    if control.dataset == "dsprites":
        from ppl_vae.metrics import factor_scores

        values = factor_scores(encoder.encode, training.data["source"], votes=control.curve_votes, seed=seed,
                               progress=False)
    else:
        from experiments.held_out import held_out_accuracy

        values = {"accuracy": held_out_accuracy(encoder, training.data["scoring"].validation)}
    training.model.train()
    point = {"step": training.steps, "metrics": {name: float(value) for name, value in values.items()}}
    training.curve.append(point)
    if control.dataset == "mnist":
        if training.best is None or point["metrics"]["accuracy"] > training.best["accuracy"]:
            training.best = {"step": training.steps, "accuracy": point["metrics"]["accuracy"]}
            training.best_weights = copy.deepcopy(training.model.state_dict())
        elif sum(point["step"] > training.best["step"] for point in training.curve) >= control.patience:
            training.stopped_at = training.steps  # `patience` points without improvement, as the campaign stops
    print(f"{control.experiment}/seed{seed}: step {training.steps} {point['metrics']}", flush=True)


def labels_alone_accuracy(control: Control, seed: int, classes: tuple[type, type, type]) -> tuple[float, int]:
    """Their encoder and class head trained by their warm-up step (cross-entropy on the labelled
    images, their warm-up Adam) alone, with the campaign's curve interval and patience on the
    validation set; (test accuracy at the best point, best step)."""
    import copy

    from experiments.held_out import held_out_accuracy

    alone = ControlTraining(control, seed, classes)
    scoring = alone.data["scoring"]
    encoder = AuthorsEncoder(alone.model)
    best, best_step, best_weights, waited = -1.0, 0, None, 0
    for step in range(1, control.steps + 1):
        alone.model.train()
        alone.trainer._warm_up(alone.warm_up_loader)
        if step % control.curve_every == 0:
            accuracy = held_out_accuracy(encoder, scoring.validation)
            if accuracy > best:
                best, best_step, best_weights, waited = accuracy, step, copy.deepcopy(alone.model.state_dict()), 0
            else:
                waited += 1
                if waited >= control.patience:
                    break
    alone.model.load_state_dict(best_weights)
    return held_out_accuracy(encoder, scoring.test), best_step


def scoring_settings(control: Control) -> Any:
    """What :class:`experiments.campaign.DSpritesScoring` reads of a run's settings, in the
    campaign recipe's terms: for a Student-t prior ``prior="student-t"`` and its ``df``, so
    that the control is also scored on the codes mapped to the normal scale as the authors'
    ``analyse.py`` scores them (``factor_score_cdf``); None for any other prior."""
    from types import SimpleNamespace

    if control.authors_settings.get("prior") == "StudentT":
        return SimpleNamespace(prior="student-t", df=float(control.authors_settings["df"]))
    return None


def score(control: Control, seed: int, training: Any, classes: tuple[Any, ...]) -> dict[str, float]:
    """The campaign's final figures of the scoring for their trained model."""
    import torch

    run = control.campaign_run(seed)
    if control.dataset == "dsprites":
        from experiments.campaign import DSpritesScoring

        with torch.no_grad():
            return DSpritesScoring(run, scoring_settings(control)).score(training.encoder().eval())
    from experiments.held_out import held_out_accuracy

    training.model.load_state_dict(training.best_weights)
    scoring = training.data["scoring"]
    accuracy = held_out_accuracy(AuthorsEncoder(training.model), scoring.test)
    alone_accuracy, alone_step = labels_alone_accuracy(control, seed, classes)
    return {"accuracy": accuracy, "labels_alone_accuracy": alone_accuracy, "gap": accuracy - alone_accuracy,
            "best_step": float(training.best["step"]), "labels_alone_best_step": float(alone_step),
            "test_images": float(scoring.test.x.shape[0]), "training_pool": float(training.data["size"])}


def run_control(control: Control, seed: int, classes: tuple[Any, ...], authors_commit: str,
                checkpoints: Path, results: Path, budget_minutes: float, checkpoint_minutes: float,
                score_votes: int | None = None) -> dict[str, Any]:
    """Train (from scratch or the checkpoint) until the steps, the plateau or the budget, score
    when done and the budget allows, and write the record; returns the record."""
    from experiments.campaign import TrainingClock, code_commit, read_record, write_record

    start, commit = time.time(), code_commit()
    deadline = start + 60 * budget_minutes
    if score_votes is not None:
        control = dataclasses.replace(control, votes=score_votes, curve_votes=min(control.curve_votes, score_votes))
    checkpoint = checkpoints / control.experiment / f"seed{seed}.pt"
    record_path = results / control.experiment / f"seed{seed}.json"
    previous = read_record(record_path) or {}
    training = TRAININGS[control.code](control, seed, classes)
    clock = TrainingClock()
    if checkpoint.is_file():
        import torch

        state = torch.load(checkpoint, weights_only=False)
        training.load_state_dict(state)
        clock.before = state["training_seconds"]
        print(f"{control.experiment}/seed{seed}: resuming at step {training.steps} from {checkpoint}", flush=True)
    else:
        if previous.get("steps", 0) > 0:
            print(f"{control.experiment}/seed{seed}: its checkpoint ({checkpoint}) is gone; restarting from step 0 "
                  f"(the record had {previous['steps']} steps)", flush=True)
            previous = {}
        print(f"{control.experiment}/seed{seed}: starting; checkpoints {checkpoint}", flush=True)
    previous_other = previous.get("wall_seconds", 0.0) - previous.get("training_seconds", 0.0)
    invocations = previous.get("invocations", 0) + 1
    fit_start = time.time()
    clock.on_train_start(None, None)
    last_save = time.time()

    def done() -> bool:
        return training.steps >= control.steps or training.stopped_at is not None

    def save() -> None:
        atomic_torch_save(training.state_dict(clock.seconds), checkpoint)

    def record(metrics: Mapping[str, float]) -> dict[str, Any]:
        wall = clock.seconds + previous_other + (fit_start - start) + (time.time() - fit_stop)
        written = make_record(control, seed, training, clock.seconds, wall, invocations, metrics, commit,
                              authors_commit)
        write_record(record_path, written)
        return written

    training.model.train()
    while not done() and time.time() < deadline:
        training.step()
        if training.steps % control.curve_every == 0:
            evaluate_curve(control, seed, training)
        if training.steps % 500 == 0:
            print(f"{control.experiment}/seed{seed}: step {training.steps}, {training.describe()}", flush=True)
        if time.time() - last_save >= 60 * checkpoint_minutes:
            save()
            last_save = time.time()
    save()
    fit_stop = time.time()
    training_seconds = clock.seconds
    clock = TrainingClock(before=training_seconds)  # frozen from here: scoring is not training
    metrics: dict[str, float] = {}
    if done() and time.time() < deadline:
        record({})
        print(f"{control.experiment}/seed{seed}: trained ({training.steps} steps); scoring", flush=True)
        metrics = score(control, seed, training, classes)
    elif done():
        print(f"{control.experiment}/seed{seed}: trained; the budget leaves no time to score it (the next "
              f"invocation will)", flush=True)
    written = record(metrics)
    progress = "complete" if written["complete"] else f"{written['steps']} of {control.steps} steps"
    print(f"{control.experiment}/seed{seed}: {progress}; record {record_path}", flush=True)
    return written


def parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line, validated: one clear error per bad argument."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("experiment", help=f"one of {sorted(CONTROLS)}")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--authors-code", type=Path, required=True,
                        help="a checkout of the experiment's authors' repository: " + ", ".join(REPOSITORIES.values()))
    parser.add_argument("--authors-commit", required=True, help="its commit (git rev-parse HEAD of the snapshot)")
    parser.add_argument("--budget-minutes", type=float, required=True)
    parser.add_argument("--checkpoint-minutes", type=float, default=3.0)
    parser.add_argument("--checkpoints", type=Path, default=None, help="default: ~/.cache/ppl_vae/controls")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--steps", type=int, default=None, help="override the steps (smoke runs only)")
    parser.add_argument("--votes", type=int, default=None, help="override the votes (smoke runs only)")
    args = parser.parse_args(argv)
    if args.experiment not in CONTROLS:
        parser.error(f"experiment: expected one of {sorted(CONTROLS)}, got {args.experiment!r}")
    if args.seed < 0:
        parser.error(f"--seed: expected an integer >= 0, got {args.seed}")
    if args.budget_minutes <= 0 or args.checkpoint_minutes <= 0:
        parser.error("--budget-minutes and --checkpoint-minutes: expected positive minutes")
    if args.steps is not None and args.steps < 1:
        parser.error(f"--steps: expected an integer >= 1, got {args.steps}")
    try:
        check_commit(args.authors_commit)
    except ValueError as error:
        parser.error(str(error))
    args.checkpoints = args.checkpoints or default_checkpoints()
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_arguments(argv)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import torch

    torch.set_num_threads(1)
    control = CONTROLS[args.experiment]
    if args.steps is not None:
        control = dataclasses.replace(control, steps=args.steps, curve_every=min(control.curve_every, args.steps))
    try:
        classes = IMPORTERS[control.code](args.authors_code.resolve())
    except ValueError as error:
        print(error, file=sys.stderr)
        return 2
    run_control(control, args.seed, classes, args.authors_commit, args.checkpoints, args.results,
                args.budget_minutes, args.checkpoint_minutes, score_votes=args.votes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
