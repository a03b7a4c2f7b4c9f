"""Recipe for PartedVAE: dSprites semi-supervised on shape (default) or MNIST digits.

Training data: ``{"x": unlabelled images}`` plus, when some labels are used,
``{"labelled": {"x": ..., "y": ...}}`` for the classifier step (class-stratified: on dSprites a
count or fraction of the full set, on MNIST of the training images; the ELBO step sees every
training image, as the authors' code does).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ppl_vae.checks import default_statistics, per_class_mass, posterior_predictive_check
from ppl_vae.data.dsprites import stratified_label_indices
from ppl_vae.infer.parted import PartedELBO
from ppl_vae.metrics import classification_accuracy, clustering_accuracy, disentanglement_scores, factor_score
from ppl_vae.models.parted import PartedVAE
from ppl_vae.recipes.base import Experiment
from ppl_vae.recipes.common import TrainingData, load_training_data
from ppl_vae.recipes.configs import PartedConfig
from ppl_vae.schedules import LinearCapacity
from ppl_vae.train import LRPlateau, TrainConfig
from ppl_vae.viz import save_ppc_plot
from ppl_vae.viz.parted import save_parted_pictures

SHAPE = 1  # column of the shape factor in dSprites' factors


def labelled_subset(
    labels: torch.Tensor, fraction: float | None = None, count: int | None = None, seed: int = 0
) -> torch.Tensor:
    """Indices ``(n_labelled,)`` of a class-stratified random subset of ``labels (N,)``.

    Give either ``fraction`` in (0, 1] (each class keeps ``round(fraction * n_k)`` points, at
    least one) or ``count`` (split as evenly as the classes allow).

    :raises ValueError: ``fraction`` outside (0, 1], ``count`` outside [1, N], or both/neither given.
    """
    if (fraction is None) == (count is None):
        raise ValueError(f"give exactly one of fraction and count, got fraction={fraction!r}, count={count!r}")
    if fraction is not None and not (isinstance(fraction, (int, float)) and 0 < fraction <= 1):
        raise ValueError(f"label fraction must be in (0, 1], got {fraction!r}")
    if count is not None and not (isinstance(count, int) and 1 <= count <= labels.shape[0]):
        raise ValueError(f"count must be an integer in [1, {labels.shape[0]}], got {count!r}")
    generator = torch.Generator().manual_seed(seed)
    classes = torch.unique(labels)
    chosen = []
    for position, k in enumerate(classes):
        members = torch.nonzero(labels == k).flatten()
        members = members[torch.randperm(members.numel(), generator=generator)]
        if fraction is not None:
            take = max(1, round(fraction * members.numel()))
        else:
            take = count // classes.numel() + (position < count % classes.numel())
        chosen.append(members[:take])
    return torch.sort(torch.cat(chosen)).values


def mnist_config(**overrides: Any) -> PartedConfig:
    """The authors' MNIST weights: z 6, c [10], u 10, capacities [0, 7],
    gamma_z = gamma_u = gamma_c = 15, gamma_H = gamma_BC = 30, delta 0.15, 256 labels; with
    MLP networks 784-512-256 on 28x28 images (cheap on a CPU; :func:`authors_settings` gives
    the authors' convolutional networks on 32x32 images)."""
    settings = dict(
        dataset="mnist", num_train=None, label_fraction=None, num_labels=256, network="mlp",
        z_dim=6, u_dim=10, z_capacity=(0.0, 7.0), u_capacity=(0.0, 7.0),
        gamma_z=15.0, gamma_u=15.0, gamma_c=15.0, gamma_h=30.0, gamma_bc=30.0, delta=0.15,
        num_eval=1000, factor_score_votes=0,
    )
    return PartedConfig(**{**settings, **overrides})


#: The authors' MNIST epoch in steps: one pass over their 60,000 training images in batches of
#: 64 (ceil(60,000 / 64)); our pool is smaller, so a pass over it would be a shorter "epoch".
MNIST_AUTHORS_EPOCH_STEPS = 938


def authors_lr_plateau(dataset: str, supervised: bool, epoch_steps: int | None = None) -> dict[str, LRPlateau]:
    """The authors' learning-rate schedules: after every epoch each rate is halved when its
    step's mean loss over the epoch (the ELBO step's total loss; the classifier step's
    cross-entropy) has not fallen by a relative 1% (ELBO) or 10% (classifier) below its best
    for more than ``patience`` epochs (1 on dSprites, 2 otherwise), followed by a cooldown of
    4 (ELBO) or 2 (classifier; 3 off dSprites) epochs.

    :param dataset: "dsprites" or "mnist".
    :param supervised: whether the run takes the classifier step (its schedule is added then).
    :param epoch_steps: steps per epoch; ``None``: one pass over the unlabelled images
        (:attr:`LRPlateau.every_n_steps`). On MNIST the authors' epoch is
        :data:`MNIST_AUTHORS_EPOCH_STEPS`.
    """
    dsprites = dataset == "dsprites"
    patience = 1 if dsprites else 2
    schedules = {
        "elbo": LRPlateau(every_n_steps=epoch_steps, factor=0.5, patience=patience, threshold=1e-2, cooldown=4, eps=1e-7)
    }
    if supervised:
        schedules["classifier"] = LRPlateau(
            every_n_steps=epoch_steps, factor=0.5, patience=patience, threshold=1e-1,
            cooldown=2 if dsprites else 3, eps=1e-6,
        )
    return schedules


def authors_settings(config: PartedConfig) -> PartedConfig:
    """``config`` with the authors' networks and optimisation switched on: the convolutional
    pair with 256 hidden units (on 32x32 images for MNIST), LeakyReLU(0.1) after the encoder's
    last convolution and linear layer, class-prior log-variance parameters drawn from N(0, 1),
    Adam at 5e-4 with batches of 64, and :func:`authors_lr_plateau` (on MNIST with the
    authors' epoch of :data:`MNIST_AUTHORS_EPOCH_STEPS` steps, whatever our pool's size). Data
    sizes, weights, capacities and the number of steps are left as they are."""
    epoch_steps = MNIST_AUTHORS_EPOCH_STEPS if config.dataset == "mnist" else None
    plateau = authors_lr_plateau(config.dataset, config.supervised, epoch_steps)
    train = dataclasses.replace(config.train, lr=5e-4, batch_size=64, lr_plateau=plateau)
    return dataclasses.replace(
        config, network="conv", hidden=256, image_size=32 if config.dataset == "mnist" else None,
        top_activation="leaky_relu", negative_slope=0.1, class_prior_init="randn", train=train,
    )


def mnist_pools(config: PartedConfig) -> tuple[TrainingData, TrainingData]:
    """(training pool, evaluation set) of MNIST, binarised once (``MNIST(binarize="fixed")``:
    the model's likelihood is a Bernoulli); see :class:`PartedConfig` ``mnist_dir``."""
    from ppl_vae.data import MNIST
    from ppl_vae.data.mnist import find_idx_files

    def load(split: str, idx_dir: str | None) -> TrainingData:
        tensors = MNIST(split=split, size=config.image_size or 28, idx_dir=idx_dir, binarize="fixed").tensors()
        return TrainingData(x=tensors["x"], labels=tensors["y"])

    generator = torch.Generator().manual_seed(config.train.seed)
    if config.mnist_dir is None:
        pool = load("train", None)
        order = torch.randperm(pool.x.shape[0], generator=generator)
        held_out, rest = order[: config.num_eval], order[config.num_eval :]
        train = TrainingData(pool.x[rest], pool.labels[rest])
        evaluation = TrainingData(pool.x[held_out], pool.labels[held_out])
    elif find_idx_files(config.mnist_dir, "train") is not None:
        train, evaluation = load("train", config.mnist_dir), load("test", config.mnist_dir)
    else:
        train, evaluation = load("test", config.mnist_dir), load("train", None)
    order = torch.randperm(train.x.shape[0], generator=generator)[: config.num_train]
    return TrainingData(train.x[order], train.labels[order]), evaluation


def _dsprites_evaluation(data: TrainingData, n: int, seed: int) -> TrainingData:
    """n fresh random dSprites images with their shape labels."""
    generator = torch.Generator().manual_seed(seed + 10_000)
    indices = torch.randint(len(data.source), (n,), generator=generator)
    tensors = data.source.tensors(indices, dtype=torch.float32)
    return TrainingData(x=tensors["x"], labels=tensors["factors"][:, SHAPE], factors=tensors["factors"])


def build_model(config: PartedConfig, image_shape: tuple[int, ...], num_classes: int) -> PartedVAE:
    """The PartedVAE of ``config`` for images of ``image_shape`` with one class variable."""
    common = dict(z_dim=config.z_dim, num_classes=num_classes, u_dims=config.u_dim, temperature=config.temperature,
                  class_prior_init=config.class_prior_init)
    if config.network == "conv":
        return PartedVAE.conv(image_shape[-1], channels=image_shape[0], hidden=config.hidden,
                              top_activation=config.top_activation, negative_slope=config.negative_slope, **common)
    return PartedVAE.mlp(image_shape, hidden=(2 * config.hidden, config.hidden), **common)


def build_objective(config: PartedConfig) -> PartedELBO:
    """PartedELBO with the weights of ``config``; capacity ramps over ``capacity_steps``."""
    steps = config.capacity_steps or config.train.steps
    return PartedELBO(
        z_capacity=LinearCapacity(*config.z_capacity, steps),
        u_capacity=LinearCapacity(*config.u_capacity, steps),
        gamma_z=config.gamma_z, gamma_u=config.gamma_u, gamma_c=config.gamma_c,
        gamma_h=config.gamma_h, gamma_bc=config.gamma_bc, delta=config.delta,
        labelled_group="labelled" if config.supervised else None,
    )


def build_untrained(config: PartedConfig, model_inputs: Mapping[str, Any]) -> tuple[PartedVAE, PartedELBO]:
    """The untrained PartedVAE of ``config`` for images of ``model_inputs["image_shape"]``
    with ``model_inputs["num_classes"]`` classes, and its objective."""
    model = build_model(config, tuple(model_inputs["image_shape"]), model_inputs["num_classes"])
    return model, build_objective(config)


def build(config: PartedConfig) -> Experiment:
    """PartedVAE, PartedELBO and the (partly labelled) training images of ``config``."""
    if config.dataset == "dsprites":
        data = load_training_data("dsprites", config.num_train, config.train.seed)
        evaluation = _dsprites_evaluation(data, config.num_eval, config.train.seed)
        num_classes = data.source.factor_sizes[SHAPE]
    else:
        data, evaluation = mnist_pools(config)
        num_classes = 10
    model_inputs = {"image_shape": list(data.x.shape[1:]), "num_classes": num_classes}
    model, objective = build_untrained(config, model_inputs)
    train_data: dict[str, Any] = {"x": data.x}
    if config.supervised:
        fraction = config.label_fraction if config.num_labels is None else None
        if config.dataset == "dsprites":
            chosen = stratified_label_indices(config.num_labels, fraction, seed=config.train.seed)
            labelled = data.source.tensors(chosen, dtype=data.x.dtype)
            train_data["labelled"] = {"x": labelled["x"], "y": labelled["factors"][:, SHAPE]}
        else:
            chosen = labelled_subset(data.labels, fraction, config.num_labels, seed=config.train.seed)
            train_data["labelled"] = {"x": data.x[chosen], "y": data.labels[chosen]}

    def evaluate(trained: PartedVAE, pictures: Path) -> dict[str, Any]:
        figures = evaluate_parted(trained, evaluation, pictures, supervised=config.supervised)
        if config.dataset == "dsprites" and config.factor_score_votes > 0:
            result = factor_score(
                trained.encode, data.source, n_train=config.factor_score_votes,
                n_eval=max(config.factor_score_votes // 2, 1), n_variance=max(2 * config.factor_score_votes, 1000),
                seed=config.train.seed,
            )
            figures["factor_score"] = result.score
            figures.update(disentanglement_scores(trained.encode, data.source, votes=config.factor_score_votes,
                                                  seed=config.train.seed))
        return figures

    description = f"accuracy of q(c|x) on {len(evaluation.x):,} held-out images, pictures, a posterior predictive check"
    if config.dataset == "dsprites" and config.factor_score_votes > 0:
        description += f", Factor score, MIG, SAP, DCI and the beta-VAE metric ({config.factor_score_votes:,} votes)"
    return Experiment(model, objective, train_data, evaluate, model_inputs, evaluation=description)


@torch.no_grad()
def evaluate_parted(model: PartedVAE, evaluation: TrainingData, pictures: Path, supervised: bool) -> dict[str, Any]:
    """Accuracy of q(c|x) on ``evaluation`` (clustering accuracy always, plain accuracy when
    trained with labels), the pictures of :func:`~ppl_vae.viz.parted.save_parted_pictures`, and a posterior
    predictive check with the mass of each class."""
    x, labels = evaluation.x.float(), evaluation.labels
    probs = torch.cat([model.classify(x[i : i + 500])[0] for i in range(0, x.shape[0], 500)])
    figures: dict[str, Any] = {"clustering_accuracy": clustering_accuracy(probs, labels)}
    if supervised:
        figures["accuracy"] = classification_accuracy(probs, labels)
    save_parted_pictures(model, x, pictures)
    statistics = {**default_statistics(x[:256]), "per_class_mass": per_class_mass(labels[:256])}
    ppc = posterior_predictive_check(model, {"x": x[:256]}, statistics, num_samples=20)
    save_ppc_plot(ppc, pictures / "posterior_predictive.png")
    figures["posterior_predictive"] = ppc.summary()
    return figures


def demo() -> PartedConfig:
    """PartedVAE on 2,000 generated dSprites images and 100 labelled ones: under a minute on a CPU."""
    return PartedConfig(
        dataset="dsprites",
        num_train=2000,
        label_fraction=None,
        num_labels=100,
        hidden=128,
        num_eval=200,
        factor_score_votes=100,
        train=TrainConfig(steps=120, batch_size=32, lr=1e-3, log_every_n_steps=40, checkpoint_every_n_steps=120),
    )

