"""Recipe for PartedVAE: dSprites semi-supervised on shape (default) or MNIST digits.

Training data: ``{"x": unlabelled images}`` plus, when some labels are used,
``{"labelled": {"x": ..., "y": ...}}`` for the classifier step (a stratified subset of the
training images; the ELBO step sees every training image, as the authors' code does).
"""
from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ppl_vae.checks import mean_intensity, per_class_mass, posterior_predictive_check, save_ppc_plot
from ppl_vae.infer.parted import PartedELBO
from ppl_vae.infer.schedules import LinearCapacity
from ppl_vae.metrics import classification_accuracy, clustering_accuracy, factor_score
from ppl_vae.models.parted import PartedVAE
from ppl_vae.recipes.base import Experiment
from ppl_vae.recipes.common import TrainingData, load_training_data
from ppl_vae.recipes.configs import PartedConfig
from ppl_vae.recipes.registry import RECIPES
from ppl_vae.train import TrainConfig
from ppl_vae.viz import plt, save_figure, save_image_grid, save_reconstructions, save_traversals

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
    """The authors' MNIST settings (NOTES Sec. 1): z 6, c [10], u 10, capacities [0, 7],
    gamma_z = gamma_u = gamma_c = 15, gamma_H = gamma_BC = 30, delta 0.15, 256 labels;
    with the MLP networks of NOTES Sec. 5."""
    settings = dict(
        dataset="mnist", num_train=None, label_fraction=None, num_labels=256, network="mlp",
        z_dim=6, u_dim=10, z_capacity=(0.0, 7.0), u_capacity=(0.0, 7.0),
        gamma_z=15.0, gamma_u=15.0, gamma_c=15.0, gamma_h=30.0, gamma_bc=30.0, delta=0.15,
        num_eval=1000, factor_score_votes=0,
    )
    return PartedConfig(**{**settings, **overrides})


def _mnist_pools(config: PartedConfig) -> tuple[TrainingData, TrainingData]:
    """(training pool, evaluation set) of MNIST; see :class:`PartedConfig` ``mnist_dir``."""
    from ppl_vae.data import MNIST
    from ppl_vae.data.mnist import find_idx_files

    def load(split: str, idx_dir: str | None) -> TrainingData:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tensors = MNIST(split=split, idx_dir=idx_dir).tensors()
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
    common = dict(z_dim=config.z_dim, num_classes=num_classes, u_dims=config.u_dim, temperature=config.temperature)
    if config.network == "conv":
        return PartedVAE.conv(image_shape[-1], channels=image_shape[0], hidden=config.hidden, **common)
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


def build(config: PartedConfig) -> Experiment:
    """PartedVAE, PartedELBO and the (partly labelled) training images of ``config``."""
    if config.dataset == "dsprites":
        data = load_training_data("dsprites", config.num_train, config.train.seed)
        evaluation = _dsprites_evaluation(data, config.num_eval, config.train.seed)
        num_classes = data.source.factor_sizes[SHAPE]
    else:
        data, evaluation = _mnist_pools(config)
        num_classes = 10
    model = build_model(config, tuple(data.x.shape[1:]), num_classes)
    train_data: dict[str, Any] = {"x": data.x}
    if config.supervised:
        chosen = labelled_subset(data.labels, config.label_fraction if config.num_labels is None else None,
                                 config.num_labels, seed=config.train.seed)
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
        return figures

    return Experiment(model, build_objective(config), train_data, evaluate)


@torch.no_grad()
def evaluate_parted(model: PartedVAE, evaluation: TrainingData, pictures: Path, supervised: bool) -> dict[str, Any]:
    """Accuracy of q(c|x) on ``evaluation`` (clustering accuracy always, plain accuracy when
    trained with labels), the pictures of :func:`save_parted_pictures`, and a posterior
    predictive check with the mass of each class."""
    x, labels = evaluation.x.float(), evaluation.labels
    probs = torch.cat([model.classify(x[i : i + 500])[0] for i in range(0, x.shape[0], 500)])
    figures: dict[str, Any] = {"clustering_accuracy": clustering_accuracy(probs, labels)}
    if supervised:
        figures["accuracy"] = classification_accuracy(probs, labels)
    save_parted_pictures(model, x, pictures)
    statistics = {"mean_intensity": mean_intensity, "per_class_mass": per_class_mass(labels[:256])}
    ppc = posterior_predictive_check(model, {"x": x[:256]}, statistics, num_samples=20)
    save_ppc_plot(ppc, pictures / "posterior_predictive.png")
    figures["posterior_predictive"] = ppc.summary()
    return figures


@torch.no_grad()
def save_parted_pictures(model: PartedVAE, x: torch.Tensor, pictures: Path, traversal_range: float = 2.5) -> None:
    """PartedVAE's pictures of images ``x (n, C, H, W)`` (n >= 8), written into ``pictures``:

    - ``reconstructions.png``;
    - ``class_traversals.png``: per image (row), its z with u set to each class prior's mean (column);
    - ``latent_traversals.png``: every z and u dimension of one image over +-``traversal_range``;
    - ``attribute_transfer.png``: top row gives c and u, left column gives z;
    - ``class_samples.png``: one row of samples from each class prior (first variable);
    - ``class_priors.png``: the learned class priors p(u | c), first two u dimensions.
    """
    was_training = model.training
    model.eval()
    save_reconstructions(pictures / "reconstructions.png", x[:32], model.reconstruct(x[:32]))
    z, u = model.split_latent(model.encode(x[:8]))
    loc = model.class_priors[0].loc
    rows = []
    for i in range(8):
        u_k = u[i].expand(loc.shape[0], -1).clone()
        u_k[:, : loc.shape[1]] = loc
        rows.append(model.decode(z[i].expand(loc.shape[0], -1), u_k))
    save_image_grid(pictures / "class_traversals.png", torch.cat(rows), nrow=loc.shape[0],
                    title="u set to each class prior's mean (columns)")
    values = torch.linspace(-traversal_range, traversal_range, 8)
    save_traversals(pictures / "latent_traversals.png", lambda latent: model.decode(*model.split_latent(latent)),
                    model.encode(x[:1])[0], values=values, title=f"z dims 0-{model.z_dim - 1}, then u dims")
    save_image_grid(pictures / "class_samples.png",
                    torch.cat([model.sample(8, c=_class_code(model, k)) for k in range(model.num_classes[0])]),
                    nrow=8, title="samples from each class prior (rows)")
    _save_attribute_transfer(model, x, pictures / "attribute_transfer.png")
    _save_class_priors(model, pictures / "class_priors.png")
    model.train(was_training)


def _class_code(model: PartedVAE, k: int) -> torch.Tensor:
    """Class k for the first variable, class 0 for the others: ``(V,)`` or a scalar."""
    if model.num_variables == 1:
        return torch.tensor(k)
    code = torch.zeros(model.num_variables, dtype=torch.long)
    code[0] = k
    return code


def _save_attribute_transfer(model: PartedVAE, x: torch.Tensor, path: Path, n: int = 6) -> Path:
    """Grid: top row images give (c, u), left column images give z; cell (i, j) decodes
    [z of row image i, u of column image j]."""
    sources, targets = x[:n], x[n : 2 * n] if x.shape[0] >= 2 * n else x[:n].flip(0)
    z_rows, _ = model.split_latent(model.encode(targets))
    _, u_columns = model.split_latent(model.encode(sources))
    blank = torch.zeros_like(x[:1])
    cells = [blank, *sources.split(1)]
    for i in range(n):
        cells.append(targets[i : i + 1])
        cells.append(model.decode(z_rows[i].expand(n, -1), u_columns))
    return save_image_grid(path, torch.cat(cells), nrow=n + 1,
                           title="attribute transfer: z from the left column, c and u from the top row")


def _save_class_priors(model: PartedVAE, path: Path) -> Path:
    """p(u_i | c_i = k) for each variable: densities (u of dimension 1) or means with
    one-std ellipses in the first two dimensions."""
    fig, axes = plt.subplots(1, model.num_variables, figsize=(4.5 * model.num_variables, 4), squeeze=False)
    for i, (ax, prior) in enumerate(zip(axes[0], model.class_priors, strict=True)):
        loc = prior.loc.detach().cpu().numpy()
        std = np.exp(0.5 * prior.log_variance.detach().cpu().numpy())
        for k in range(loc.shape[0]):
            if loc.shape[1] == 1:
                grid = np.linspace(loc.min() - 3 * std.max(), loc.max() + 3 * std.max(), 300)
                density = np.exp(-0.5 * ((grid - loc[k, 0]) / std[k, 0]) ** 2) / (std[k, 0] * math.sqrt(2 * math.pi))
                ax.plot(grid, density, label=f"c = {k}")
            else:
                angle = np.linspace(0, 2 * math.pi, 100)
                ax.plot(loc[k, 0] + std[k, 0] * np.cos(angle), loc[k, 1] + std[k, 1] * np.sin(angle))
                ax.annotate(str(k), loc[k, :2])
        ax.set_title(f"class priors p(u{i} | c{i})")
        if loc.shape[1] == 1:
            ax.legend(fontsize=7)
    return save_figure(fig, path)


def demo() -> PartedConfig:
    """PartedVAE on 2,000 generated dSprites images, 5% of them labelled: under a minute on a CPU."""
    return PartedConfig(
        dataset="dsprites",
        num_train=2000,
        label_fraction=0.05,
        hidden=128,
        num_eval=200,
        factor_score_votes=100,
        train=TrainConfig(steps=120, batch_size=32, lr=1e-3, log_every_n_steps=40, checkpoint_every_n_steps=120),
    )


RECIPE = RECIPES["parted"]
