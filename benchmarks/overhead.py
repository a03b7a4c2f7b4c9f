"""What the library costs on top of hand-written PyTorch, per model, and PartedVAE against its authors' loop.

For each model a training iteration is timed four (Parted) or three ways, on the same
networks (the model's own ``nn.Module`` submodules), the same loss terms and the same batch
sizes:

- ``torch``: a hand-written PyTorch iteration: the loss written out with ``torch`` ops
  (reparameterised samples, closed-form KLs, the model's extra terms), one foreach Adam per
  optimisation step; the floor.
- ``svi``: a plain ``pyro.infer.SVI`` loop with ``pyro.optim.Adam`` and the objective of
  :mod:`ppl_vae.infer`; the objective's auxiliary step (classifier, discriminator) taken by a
  ``torch.optim.Adam`` over ``step.parameters`` on ``step.loss(**batch)``.
- ``plain``: a plain PyTorch loop around the library's loss (:func:`plain_loop`): the
  objective's ``differentiable_loss`` and auxiliary steps with foreach ``torch.optim.Adam``, no
  Lightning; what the engine's training step does, so ``engine / plain`` is Lightning's share.
- ``engine``: ``ppl_vae.fit``, timed from inside its run (below).
- ``authors`` (PartedVAE only): the hand-written iteration with the authors' classifier step
  (:func:`authors_parted_iteration`), which reshuffles and copies the whole labelled set on
  every iteration, on the same networks in PyTorch's default layers (NCHW, out-of-place
  ReLUs; the library's conv networks run channels-last with in-place ReLUs,
  :mod:`ppl_vae.nn.conv`).

With ``--replay-loss`` the ``plain`` loop and the engine record the ELBO loss once and replay
it (:class:`~ppl_vae.infer.ReplayedLoss`, ``TrainConfig.replay_loss``) for the models that allow
it (not PartedVAE, whose capacities change every step).

Workloads (the authors' settings):

- ``decomposition``: :class:`~ppl_vae.models.decomposition.DecompositionVAE` with the 64x64
  conv networks, D = 10, isotropic prior, :class:`~ppl_vae.infer.decomposition.DecompositionELBO`
  with the dimension-wise MMD (alpha = 1), Bernoulli likelihood, dSprites images, batch 64.
- ``parted``: :meth:`PartedVAE.conv <ppl_vae.models.parted.PartedVAE.conv>` with the authors'
  dSprites settings (z 5, c [3], u 1, their gammas and delta; capacities over 300,000 steps),
  :class:`~ppl_vae.infer.parted.PartedELBO`, classifier step on a labelled set of 0.5% of
  dSprites (3,686 images, the paper's semi-supervised headline), batch 64 for both steps.
- ``contrastive``: :meth:`ContrastiveVAE.mlp <ppl_vae.models.contrastive.ContrastiveVAE.mlp>`
  (784 -> 128 -> 2 + 2), Gaussian likelihood, :class:`~ppl_vae.infer.contrastive.ContrastiveELBO`
  with the linear TC discriminator (gamma = 1) and its discriminator step, Grassy-MNIST-sized
  random images in [0, 1] (target and background), batch 128 of each.

Loops are interleaved iteration by iteration in one process: a callback of the engine's run
(:class:`InterleavedTimer`) takes one iteration of each other loop after every engine
iteration (engine, torch, svi, [authors,] engine, ...), so load from other jobs reaches every
loop alike. Each round builds every loop afresh from the same seed and times ``--steps``
iterations after ``--warmup``. Printed and written as JSON per loop: the median over rounds
of the per-round median seconds per iteration (with min/max over rounds), its ratio to the
hand-written loop's, and the *paired* ratio, the median over all timed iterations of
``loop_i / torch_i`` (and, for PartedVAE, ``/ authors_i``).

    python benchmarks/overhead.py --threads 1 --rounds 5 --steps 30   # docs/performance.md (see there per model)
    python benchmarks/overhead.py --models decomposition contrastive --replay-loss --threads 1 --rounds 5 --steps 30
    python benchmarks/overhead.py --quick --json out.json  # seconds: checks the harness, not speed
"""
from __future__ import annotations

import argparse
import functools
import itertools
import logging
import math
import statistics
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning as L
import pyro
import torch
from pyro.infer import SVI
from reporting import machine_description, write_results
from torch import nn
from torch.func import functional_call
from torch.nn import functional as F

from ppl_vae import fit
from ppl_vae.data import DSprites
from ppl_vae.distributions import IsotropicGaussianPrior
from ppl_vae.infer.contrastive import ContrastiveELBO
from ppl_vae.infer.decomposition import DecompositionELBO
from ppl_vae.infer.iteration import TrainingIteration
from ppl_vae.infer.parted import PartedELBO
from ppl_vae.infer.replay import ReplayedLoss, replay_obstacle
from ppl_vae.infer.schedules import LinearCapacity, set_training_step
from ppl_vae.infer.steps import auxiliary_modules, auxiliary_steps
from ppl_vae.models.contrastive import ContrastiveVAE
from ppl_vae.models.decomposition import DecompositionVAE
from ppl_vae.models.parted import PartedVAE
from ppl_vae.nn import ConvDecoder, ConvEncoder
from ppl_vae.recipes.contrastive import grassy_likelihood_scale

DEFAULT_JSON = Path(__file__).resolve().parent / "results" / "overhead.json"
DSPRITES_IMAGES = 737_280
SHAPE = 1  # column of dSprites' shape factor
Step = Callable[[], None]
LOOP_ORDER = ("torch", "svi", "plain", "engine", "authors")


class BatchSampler:
    """Random minibatches ``{key: (B, ...)}`` of one data group, drawn with replacement.

    Compact storage is converted per batch as the engine does: ``bool`` to float {0, 1}.
    """

    def __init__(self, group: Mapping[str, torch.Tensor], batch_size: int, seed: int) -> None:
        self.group = dict(group)
        first = next(iter(self.group.values()))
        self.size = first.shape[0]
        self.batch_size = min(batch_size, self.size)
        self.generator = torch.Generator(first.device).manual_seed(seed)

    def __call__(self) -> dict[str, torch.Tensor]:
        index = torch.randint(self.size, (self.batch_size,), generator=self.generator, device=self.generator.device)
        return {key: _as_float(value.index_select(0, index)) for key, value in self.group.items()}


def _as_float(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.float() if tensor.dtype == torch.bool else tensor


def _groups(data: Mapping[str, Any]) -> dict[str, dict[str, torch.Tensor]]:
    """``{"x": X}`` -> ``{"x": {"x": X}}``; groups of tensors stay as they are."""
    return {name: {name: value} if isinstance(value, torch.Tensor) else dict(value) for name, value in data.items()}


def _adam(params, lr: float) -> torch.optim.Optimizer:
    return torch.optim.Adam([p for p in params if p.requires_grad], lr=lr, foreach=True)


def _gaussian_kl(loc: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """KL(N(loc, scale^2) || N(0, 1)) per point, summed over the last dimension: ``(B,)``."""
    return 0.5 * (loc.pow(2) + scale.pow(2) - 1.0 - 2.0 * scale.log()).sum(-1)


def _reparameterised(loc: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return loc + scale * torch.randn_like(loc)


def _cauchy_mmd(x: torch.Tensor, y: torch.Tensor, length_scales: tuple[float, ...]) -> torch.Tensor:
    """The Decomposition paper's dimension-wise MMD (Eq. 10), written out for ``(n, D)`` samples."""
    constants = [2.0 * s for s in length_scales]
    (n, dim), m = x.shape, y.shape[0]

    def kernel_sum(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        squared = (a.unsqueeze(1) - b.unsqueeze(0)).pow(2)
        return sum((c / (c + squared)).sum() for c in constants)

    diagonal = len(constants) * dim
    return (
        (kernel_sum(x, x) - diagonal * n) / (n * (n - 1))
        + (kernel_sum(y, y) - diagonal * m) / (m * (m - 1))
        - 2.0 * kernel_sum(x, y) / (n * m)
    )


@dataclass
class Workload:
    """One model's benchmark: how to build it, its data, and its hand-written iterations.

    :param build: fresh ``(model, objective)`` from a fixed seed.
    :param data: training data in :func:`ppl_vae.fit`'s format.
    :param batch_sizes: rows per batch of each data group.
    :param hand_written: ``(model, objective, samplers) -> step`` for the ``torch`` loop.
    :param authors: the same for the authors' iteration, when there is one.
    :param authors_build: fresh ``(model, objective)`` for it, with the networks in the layout
        the authors' code uses (``None``: ``build``).
    :param description: settings written to the JSON with the figures.
    """

    name: str
    build: Callable[[], tuple[nn.Module, Any]]
    data: dict[str, Any]
    batch_sizes: dict[str, int]
    lr: float
    hand_written: Callable[..., Step]
    authors: Callable[..., Step] | None = None
    authors_build: Callable[[], tuple[nn.Module, Any]] | None = None
    description: dict[str, Any] = field(default_factory=dict)

    def samplers(self, seed: int = 0, device: torch.device | str = "cpu") -> dict[str, BatchSampler]:
        """One :class:`BatchSampler` per data group, over a copy of the data on ``device``."""
        return {
            name: BatchSampler({key: value.to(device) for key, value in group.items()}, self.batch_sizes[name], seed + i)
            for i, (name, group) in enumerate(_groups(self.data).items())
        }


# --- Decomposition VAE ---------------------------------------------------------------------


def decomposition_workload(images: torch.Tensor, batch_size: int, alpha: float = 1.0) -> Workload:
    """DecompositionVAE (conv 64x64, D = 10, isotropic prior) with the MMD divergence."""
    latent_dim = 10

    def build() -> tuple[DecompositionVAE, DecompositionELBO]:
        torch.manual_seed(0)
        model = DecompositionVAE(
            ConvEncoder(64), ConvDecoder(latent_dim, 64), latent_dim, prior=IsotropicGaussianPrior(latent_dim)
        )
        return model, DecompositionELBO(beta=1.0, alpha=alpha, divergence="mmd")

    def hand_written(model: DecompositionVAE, objective: DecompositionELBO, samplers) -> Step:
        r"""``sum_n [BCE(x_n) + KL(q(z|x_n) || N(0, I))] + alpha B MMD({z_n}, {z'_n})``, z' ~ N(0, I)."""
        optimizer = _adam(model.parameters(), 5e-4)
        draw = samplers["x"]

        def step() -> None:
            x = draw()["x"]
            loc, scale = model.head(model.encoder(x))
            z = _reparameterised(loc, scale)
            reconstruction = F.binary_cross_entropy_with_logits(model.decoder(z), x, reduction="sum")
            divergence = _cauchy_mmd(z, torch.randn_like(z), objective.term("aggregate_divergence").length_scales)
            loss = reconstruction + _gaussian_kl(loc, scale).sum() + alpha * x.shape[0] * divergence
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

        return step

    return Workload(
        name="decomposition",
        build=build,
        data={"x": images},
        batch_sizes={"x": batch_size},
        lr=5e-4,
        hand_written=hand_written,
        description={"network": "conv 64x64", "latent_dim": latent_dim, "divergence": "mmd", "alpha": alpha},
    )


# --- PartedVAE -----------------------------------------------------------------------------


def parted_main_step(model: PartedVAE, objective: PartedELBO, optimizer: torch.optim.Optimizer) -> Callable:
    r"""The hand-written PartedVAE ELBO step (paper Eq. 6, the authors' terms) on
    ``x (B, 1, 64, 64)`` at training step t: Bernoulli reconstruction summed over the batch plus
    ``B * [gamma_z |KL_z - C_z(t)| + gamma_u |KL_u - C_u(t)| + gamma_H H + gamma_c KL(qhat(c) || p(c))
    + gamma_BC sum_{j<k} max(BC_jk - delta, 0)]`` with batch-averaged KLs, one categorical variable."""
    class_head, gate, u_head, class_prior = (
        model.class_heads[0], model.attention[0], model.u_heads[0], model.class_priors[0]
    )
    log_p = model.class_prior_probs(0).log()
    capacity_z, capacity_u = objective.term("capacity_z"), objective.term("capacity_u")
    gamma_h, gamma_c = objective.term("entropy").weight, objective.term("aggregate_kl").weight
    bhattacharyya_term = objective.term("bhattacharyya")
    pairs = torch.triu_indices(model.num_classes[0], model.num_classes[0], offset=1, device=log_p.device)

    def step(x: torch.Tensor, t: int) -> None:
        batch = x.shape[0]
        h = model.encoder(x)
        z_loc, z_scale = model.z_head(h)
        logits = class_head(h)
        c = F.gumbel_softmax(logits, tau=model.temperature)
        u_loc, u_scale = u_head(h * gate(c, model.sharpness(t)))
        latent = torch.cat([_reparameterised(z_loc, z_scale), _reparameterised(u_loc, u_scale)], dim=-1)
        reconstruction = F.binary_cross_entropy_with_logits(model.decoder(latent), x, reduction="sum") / batch
        log_q = logits.log_softmax(-1)
        q = log_q.exp()
        prior_loc, prior_variance = class_prior.loc, class_prior.log_variance.exp()  # (L, D)
        u_variance = u_scale.pow(2).unsqueeze(1)  # (B, 1, D)
        kl_to_classes = 0.5 * (
            prior_variance.log() - u_variance.log() + (u_variance + (u_loc.unsqueeze(1) - prior_loc).pow(2)) / prior_variance - 1.0
        ).sum(-1)  # (B, L)
        kl_z = _gaussian_kl(z_loc, z_scale).mean()
        kl_u = (q * kl_to_classes).sum(-1).mean()
        entropy = -(q * log_q).sum(-1).mean()
        log_q_hat = torch.logsumexp(log_q, dim=0) - math.log(batch)
        aggregate_kl = (log_q_hat.exp() * (log_q_hat - log_p)).sum()
        mean_variance = 0.5 * (prior_variance[pairs[0]] + prior_variance[pairs[1]])
        distance = 0.125 * ((prior_loc[pairs[0]] - prior_loc[pairs[1]]).pow(2) / mean_variance).sum(-1) + 0.5 * (
            mean_variance.log().sum(-1) - 0.5 * (prior_variance[pairs[0]].log().sum(-1) + prior_variance[pairs[1]].log().sum(-1))
        )
        bhattacharyya = (torch.exp(-distance) - bhattacharyya_term.delta).clamp_min(0.0).sum()
        penalties = (
            capacity_z.weight * (kl_z - capacity_z.capacity(t)).abs()
            + capacity_u.weight * (kl_u - capacity_u.capacity(t)).abs()
            + gamma_h * entropy
            + gamma_c * aggregate_kl
            + bhattacharyya_term.weight * bhattacharyya
        )
        loss = batch * (reconstruction + penalties)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def parted_classifier_step(model: PartedVAE, optimizer: torch.optim.Optimizer) -> Callable:
    """The semi-supervised cross-entropy step on a labelled batch ``x (B, 1, 64, 64)``,
    ``y (B,)``, updating the encoder trunk and the class head only."""

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        loss = F.cross_entropy(model.class_heads[0](model.encoder(x)), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def hand_written_parted_iteration(model: PartedVAE, objective: PartedELBO, samplers) -> Step:
    """Classifier step on a random labelled batch, then the ELBO step on an unlabelled batch."""
    main = parted_main_step(model, objective, _adam(model.parameters(), 5e-4))
    classify = parted_classifier_step(model, _adam(model.classifier_parameters(), 5e-4))
    counter = itertools.count()

    def step() -> None:
        labelled = samplers["labelled"]()
        classify(labelled["x"], labelled["y"])
        main(samplers["x"]()["x"], next(counter))

    return step


def authors_parted_iteration(model: PartedVAE, objective: PartedELBO, samplers) -> Step:
    """The PartedVAE authors' training iteration, reproduced from its description, not from
    their code.

    What it reproduces: their classifier step draws its labelled batch by reshuffling and copying
    the *whole* labelled set on every iteration. Here each iteration (1) draws a fresh random
    permutation of the labelled set, (2) gathers every labelled image and label in that order into
    new tensors (one full copy; the images held as float32, as their data set hands them out),
    (3) takes the first batch of the copy for the cross-entropy step, then (4) takes the same ELBO
    step as the ``torch`` loop (:func:`parted_main_step`) on an unlabelled batch. The networks,
    losses and optimisers are those of :func:`hand_written_parted_iteration`; only the labelled
    batch's provenance differs, so the difference between the two loops is the cost of the
    reshuffle-and-copy alone.
    """
    main = parted_main_step(model, objective, _adam(model.parameters(), 5e-4))
    classify = parted_classifier_step(model, _adam(model.classifier_parameters(), 5e-4))
    labelled_x = _as_float(samplers["labelled"].group["x"]).clone()
    labelled_y = samplers["labelled"].group["y"]
    batch_size = samplers["labelled"].batch_size
    counter = itertools.count()

    def step() -> None:
        order = torch.randperm(labelled_x.shape[0])
        shuffled_x, shuffled_y = labelled_x[order], labelled_y[order]
        classify(shuffled_x[:batch_size], shuffled_y[:batch_size])
        main(samplers["x"]()["x"], next(counter))

    return step


def parted_workload(
    images: torch.Tensor, labelled_images: torch.Tensor, labels: torch.Tensor, batch_size: int
) -> Workload:
    """PartedVAE with the authors' dSprites settings and a labelled group for the classifier."""

    def build(authors_layers: bool = False) -> tuple[PartedVAE, PartedELBO]:
        """The library's networks, or (``authors_layers``) the same weights in PyTorch's default
        layers (NCHW, out-of-place ``nn.ReLU()``), which the authors' loop runs on: the layout
        choices of :mod:`ppl_vae.nn.conv` are the library's own, not the authors'."""
        torch.manual_seed(0)
        model = PartedVAE.conv(64, z_dim=5, num_classes=3, u_dims=1, channels_last=not authors_layers)
        if authors_layers:
            for module in model.modules():
                if isinstance(module, nn.ReLU):
                    module.inplace = False
        objective = PartedELBO(
            z_capacity=LinearCapacity(0.0, 30.0, 300_000), u_capacity=LinearCapacity(0.0, 5.0, 300_000),
            gamma_z=50.0, gamma_u=50.0, gamma_c=100.0, gamma_h=10.0, gamma_bc=10.0, delta=0.1,
        )
        return model, objective

    return Workload(
        name="parted",
        build=build,
        data={"x": images, "labelled": {"x": labelled_images, "y": labels}},
        batch_sizes={"x": batch_size, "labelled": batch_size},
        lr=5e-4,
        hand_written=hand_written_parted_iteration,
        authors=authors_parted_iteration,
        authors_build=functools.partial(build, authors_layers=True),
        description={"network": "conv 64x64", "z_dim": 5, "num_classes": 3, "u_dim": 1, "labelled": len(labels)},
    )


# --- Contrastive VAE -----------------------------------------------------------------------


def contrastive_workload(target: torch.Tensor, background: torch.Tensor, batch_size: int, gamma: float = 1.0) -> Workload:
    """ContrastiveVAE (the paper's MLP) with the TC term and its linear discriminator."""
    scale = grassy_likelihood_scale(3.0)

    def build() -> tuple[ContrastiveVAE, ContrastiveELBO]:
        torch.manual_seed(0)
        model = ContrastiveVAE.mlp((1, 28, 28), 2, 2, hidden=128, likelihood="gaussian", likelihood_scale=scale)
        return model, ContrastiveELBO(gamma=gamma, discriminator="linear")

    def hand_written(model: ContrastiveVAE, objective: ContrastiveELBO, samplers) -> Step:
        r"""Target and background ELBOs (Gaussian log-likelihoods, closed-form KLs) plus
        ``gamma sum_n logit D([s_n, z_n])`` with D's parameters detached; then D's logistic loss
        on the same samples of the target, detached, joint against permuted (as the library's
        discriminator step reuses the ELBO step's samples)."""
        device = next(model.parameters()).device
        discriminator = objective.discriminator.build(model.salient_dim + model.shared_dim, device)
        optimizer = _adam(model.parameters(), 1e-3)
        d_optimizer = _adam(discriminator.parameters(), 1e-3)
        log_normaliser = math.log(scale) + 0.5 * math.log(2 * math.pi)

        def log_likelihood(decoded: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
            return -(0.5 * ((x - decoded) / scale).pow(2) + log_normaliser).sum()

        def encode(x: torch.Tensor) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
            return model.salient_head(model.salient_encoder(x)), model.shared_head(model.shared_encoder(x))

        def step() -> None:
            target, background = samplers["target"]()["target"], samplers["background"]()["background"]
            (s_loc, s_scale), (z_loc, z_scale) = encode(target)
            b_loc, b_scale = model.shared_head(model.shared_encoder(background))
            s, z, b = _reparameterised(s_loc, s_scale), _reparameterised(z_loc, z_scale), _reparameterised(b_loc, b_scale)
            detached = {name: p.detach() for name, p in discriminator.named_parameters()}
            total_correlation = functional_call(discriminator, detached, (torch.cat([s, z], dim=-1),)).sum()
            loss = (
                -log_likelihood(model.decoder(torch.cat([s, z], dim=-1)), target)
                - log_likelihood(model.decoder(torch.cat([b.new_zeros(b.shape[0], model.salient_dim), b], dim=-1)), background)
                + _gaussian_kl(s_loc, s_scale).sum() + _gaussian_kl(z_loc, z_scale).sum() + _gaussian_kl(b_loc, b_scale).sum()
                + gamma * total_correlation
            )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            s, z = s.detach(), z.detach()
            joint = discriminator(torch.cat([s, z], dim=-1))
            product = discriminator(torch.cat([s, z[torch.randperm(z.shape[0], device=device)]], dim=-1))
            d_loss = F.softplus(-joint).mean() + F.softplus(product).mean()
            d_optimizer.zero_grad(set_to_none=True)
            d_loss.backward()
            d_optimizer.step()

        return step

    return Workload(
        name="contrastive",
        build=build,
        data={"target": target, "background": background},
        batch_sizes={"target": batch_size, "background": batch_size},
        lr=1e-3,
        hand_written=hand_written,
        description={"network": "MLP 784-128", "salient_dim": 2, "shared_dim": 2, "gamma": gamma, "discriminator": "linear"},
    )


# --- Timing --------------------------------------------------------------------------------


def synchronize(device: torch.device | str) -> None:
    """Wait for the device's queued work (a no-op on the CPU)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def _time_steps(step: Step, steps: int, warmup: int, device: torch.device | str = "cpu") -> float:
    for _ in range(warmup):
        step()
    synchronize(device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    synchronize(device)
    return (time.perf_counter() - start) / steps


def hand_written_loop(workload: Workload, device: torch.device | str = "cpu") -> Step:
    """One iteration of the hand-written PyTorch loop, on fresh networks and data on ``device``."""
    model, objective = workload.build()
    model.to(device)
    for module in getattr(objective, "auxiliary_modules", dict)().values():
        module.to(device)
    return workload.hand_written(model, objective, workload.samplers(device=device))


def authors_loop(workload: Workload) -> Step:
    """One iteration of the authors' loop as reproduced in ``workload.authors``, on fresh networks
    in the authors' layout."""
    model, objective = (workload.authors_build or workload.build)()
    return workload.authors(model, objective, workload.samplers())


@contextmanager
def own_param_store(contents: tuple[dict, dict, dict]):
    """Pyro's global param store holds ``contents`` (its three tables) inside the block.

    ``SVI`` with ``pyro.optim`` optimises the parameters that the model's ``param`` sites
    return from the global store, looked up by name; a second model of the same class (the
    engine's, interleaved with this loop) registers the same names. Swapping the tables keeps
    each model's parameters its own, at the cost of three attribute swaps."""
    store = pyro.get_param_store()
    saved = (store._params, store._param_to_name, store._constraints)
    store._params, store._param_to_name, store._constraints = contents
    try:
        yield
    finally:
        store._params, store._param_to_name, store._constraints = saved


def _take_step(optimizer: torch.optim.Optimizer, loss: torch.Tensor) -> None:
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


class AuxiliarySteps:
    """An objective's auxiliary steps (classifier, discriminator) as the engine takes them, each
    by its own foreach ``torch.optim.Adam`` on ``step.loss(**batch)``, and the data groups left
    to the ELBO step."""

    def __init__(self, objective: Any, model: nn.Module, samplers: Mapping[str, BatchSampler], lr: float) -> None:
        self.samplers = samplers
        self.steps = [(step, _adam(step.parameters, step.lr or lr)) for step in auxiliary_steps(objective, model)]
        claimed = {step.data_group for step, _ in self.steps if step.data_group is not None}
        self.elbo_groups = [name for name in samplers if name not in claimed]

    def elbo_batch(self) -> dict[str, torch.Tensor]:
        """One batch of every data group the ELBO step reads, merged into one dict."""
        batch: dict[str, torch.Tensor] = {}
        for name in self.elbo_groups:
            batch.update(self.samplers[name]())
        return batch

    def take(self, when: str, elbo_batch: dict[str, torch.Tensor]) -> None:
        """The steps that run ``when`` (``"before"`` or ``"after"``) the ELBO step, each on a batch
        of its own data group or, without one, on the ELBO step's batch."""
        for step, optimizer in self.steps:
            if step.when == when:
                batch = self.samplers[step.data_group]() if step.data_group is not None else elbo_batch
                _take_step(optimizer, step.loss(**batch))


def svi_loop(workload: Workload) -> Step:
    """One iteration of ``SVI.step`` (``pyro.optim.Adam``) plus the objective's auxiliary steps
    (:class:`AuxiliarySteps`), on fresh networks, with Pyro's validation off for the SVI step and
    a param store of its own (:func:`own_param_store`)."""
    contents: tuple[dict, dict, dict] = ({}, {}, {})
    model, objective = workload.build()
    svi = SVI(model.model, model.guide, pyro.optim.Adam({"lr": workload.lr}), objective)
    auxiliary = AuxiliarySteps(objective, model, workload.samplers(), workload.lr)

    def iteration() -> None:
        batch = auxiliary.elbo_batch()
        auxiliary.take("before", batch)
        with pyro.validation_enabled(False), own_param_store(contents):
            svi.step(**batch)
        auxiliary.take("after", batch)

    return iteration


def recorded_modules(model: nn.Module, objective: Any) -> list[nn.Module]:
    """The modules whose parameters and buffers a replayed loss reads, as the engine passes them."""
    return [model, *auxiliary_modules(objective).values()]


def replayable(workload: Workload) -> bool:
    """Whether the workload's loss can be recorded once and replayed (:func:`~ppl_vae.infer.replay_obstacle`)."""
    model, objective = workload.build()
    return replay_obstacle(objective, recorded_modules(model, objective)) is None


def plain_loop(workload: Workload, replay: bool) -> Step:
    """One iteration of a plain PyTorch loop around the library's loss: the library's
    :class:`~ppl_vae.infer.TrainingIteration` (the objective's ``differentiable_loss``, recorded
    once and replayed with ``replay``, and its auxiliary steps, each with foreach
    ``torch.optim.Adam``), as the engine runs it but without Lightning; Pyro's validation off."""
    model, objective = workload.build()
    loss_fn = None
    if replay:
        loss_fn = ReplayedLoss(objective, model.model, model.guide, recorded_modules(model, objective))
    training_iteration = TrainingIteration(model, objective, workload.lr, optimizer=_adam, elbo_loss=loss_fn)
    samplers = workload.samplers()
    counter = itertools.count()

    def iteration() -> None:
        set_training_step(next(counter))
        with pyro.validation_enabled(False):
            training_iteration({name: sample() for name, sample in samplers.items()})

    return iteration


def time_hand_written(workload: Workload, steps: int, warmup: int, device: torch.device | str = "cpu") -> float:
    """Seconds per iteration of the hand-written PyTorch loop, networks and data on ``device``."""
    return _time_steps(hand_written_loop(workload, device), steps, warmup, device)


class IterationTimer(L.Callback):
    """Wall time from the start of the first training step that begins at or after iteration
    ``warmup`` to the end of the last one (a training step may take several iterations,
    ``TrainConfig.iterations_per_training_step``)."""

    def __init__(self, warmup: int) -> None:
        self.warmup = warmup
        self.start = self.end = 0.0
        self.count = 0

    def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
        if module.iteration >= self.warmup and not self.count:
            synchronize(module.device)
            self.start = time.perf_counter()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        if module.iteration - len(batch) >= self.warmup:
            synchronize(module.device)
            self.end = time.perf_counter()
            self.count += len(batch)

    @property
    def seconds_per_iteration(self) -> float:
        """Mean over the timed iterations (the span covers ``count`` whole iterations)."""
        return (self.end - self.start) / self.count if self.count else float("nan")


def fit_workload(
    workload: Workload, steps: int, device: str = "cpu", callbacks: Sequence[L.Callback] = (), **settings: Any
) -> tuple[nn.Module, Any]:
    """``ppl_vae.fit`` of fresh networks for ``steps`` iterations, data resident on ``device``
    (``settings``: more :class:`~ppl_vae.train.TrainConfig` fields, e.g. ``precision``);
    returns the trained ``(model, objective)``."""
    pyro.clear_param_store()
    model, objective = workload.build()
    first, *others = workload.batch_sizes.items()
    fit(
        model,
        objective,
        workload.data,
        steps=steps,
        batch_size=first[1],
        batch_sizes=dict(others),
        lr=workload.lr,
        device=device,
        data_on_device=True,
        progress_bar=False,
        callbacks=list(callbacks),
        **settings,
    )
    pyro.clear_param_store()
    return model, objective


def time_engine(workload: Workload, steps: int, warmup: int, device: str = "cpu", **settings: Any) -> float:
    """Seconds per iteration of ``ppl_vae.fit`` on ``device`` with the data resident there
    (``data_on_device=True``; Lightning start-up excluded; ``settings`` as for :func:`_fit`)."""
    timer = IterationTimer(warmup)
    fit_workload(workload, warmup + steps, device, [timer], **settings)
    return timer.seconds_per_iteration


class InterleavedTimer(L.Callback):
    """Times the engine's training steps and, after each of them, as many iterations of every
    other loop: engine, loop 1, loop 2, ..., engine, loop 1, ... Each figure is seconds per
    iteration, one per engine training step that begins at or after iteration ``warmup`` (a
    training step takes ``TrainConfig.iterations_per_training_step`` iterations).

    An engine training step is timed from the end of this callback to the end of the next
    one, so it covers all of Lightning's per-batch work (fetching the batch, the hooks, the
    training step).
    """

    def __init__(self, others: Mapping[str, Step], warmup: int) -> None:
        self.others = dict(others)
        self.warmup = warmup
        self.seconds: dict[str, list[float]] = {"engine": [], **{name: [] for name in self.others}}
        self.resumed = 0.0

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        synchronize(module.device)
        iterations = len(batch)
        timed = module.iteration - iterations >= self.warmup
        if timed:
            self.seconds["engine"].append((time.perf_counter() - self.resumed) / iterations)
        for name, step in self.others.items():
            start = time.perf_counter()
            for _ in range(iterations):
                step()
            synchronize(module.device)
            if timed:
                self.seconds[name].append((time.perf_counter() - start) / iterations)
        self.resumed = time.perf_counter()


def measure(
    workload: Workload, steps: int, warmup: int, rounds: int, **engine_settings: Any
) -> list[dict[str, list[float]]]:
    """Seconds of every timed iteration of every loop, one dict per round (``engine_settings``:
    more :class:`~ppl_vae.train.TrainConfig` fields for the engine's run).

    Each round builds every loop afresh from the same seed and runs ``warmup + steps``
    iterations of all of them interleaved one by one (:class:`InterleavedTimer`: engine,
    torch, svi, [authors,] engine, ...), so a change in the machine's load reaches every loop
    alike, and iteration i of one loop can be paired with iteration i of another."""
    per_round = []
    replay = bool(engine_settings.get("replay_loss"))
    for index in range(rounds):
        pyro.clear_param_store()
        others = {"torch": hand_written_loop(workload), "svi": svi_loop(workload), "plain": plain_loop(workload, replay)}
        if workload.authors is not None:
            others["authors"] = authors_loop(workload)
        timer = InterleavedTimer(others, warmup)
        fit_workload(workload, warmup + steps, "cpu", [timer], **engine_settings)
        per_round.append({name: timer.seconds[name] for name in LOOP_ORDER if name in timer.seconds})
        line = ", ".join(f"{name} {1000 * statistics.median(values):.1f}" for name, values in per_round[-1].items())
        print(f"  {workload.name} round {index + 1}/{rounds} (median ms/iteration): {line}", flush=True)
    return per_round


def paired_ratios(per_round: list[dict[str, list[float]]], reference: str) -> dict[str, float]:
    """Median over every timed iteration of ``loop_i / reference_i`` (iteration i of both loops
    ran back to back), per loop."""
    ratios: dict[str, list[float]] = {}
    for seconds in per_round:
        for name, values in seconds.items():
            ratios.setdefault(name, []).extend(a / b for a, b in zip(values, seconds[reference], strict=True))
    return {name: statistics.median(values) for name, values in ratios.items()}


def summarise(per_iteration: dict[str, list[float]], images_per_iteration: int) -> dict[str, dict[str, float]]:
    """Median, min and max of each loop's seconds per iteration over rounds (``rounds``: one
    figure per round); ratios of the medians to the hand-written loop's (and to the authors')."""
    floor = statistics.median(per_iteration["torch"])
    rows = {}
    for name, values in per_iteration.items():
        median = statistics.median(values)
        rows[name] = {
            "median_seconds": median,
            "min_seconds": min(values),
            "max_seconds": max(values),
            "rounds": values,
            "images_per_second": images_per_iteration / median,
            "ratio_to_torch": median / floor,
        }
    if "authors" in rows:
        authors = rows["authors"]["median_seconds"]
        for name in rows:
            rows[name]["ratio_to_authors"] = rows[name]["median_seconds"] / authors
    return rows


def print_table(name: str, rows: dict[str, dict[str, float]]) -> None:
    """One line per loop: medians over rounds, and the paired per-iteration ratios."""
    print(f"\n{name}")
    print(
        f"  {'loop':8s} {'median ms':>10s} {'min':>8s} {'max':>8s} {'img/s':>8s} {'/torch':>7s} "
        f"{'paired':>7s} {'/authors':>9s} {'paired':>7s}"
    )
    for loop, row in rows.items():
        authors = (
            f"{row['ratio_to_authors']:9.3f} {row['paired_ratio_to_authors']:7.3f}" if "ratio_to_authors" in row else ""
        )
        print(
            f"  {loop:8s} {1000 * row['median_seconds']:10.1f} {1000 * row['min_seconds']:8.1f} "
            f"{1000 * row['max_seconds']:8.1f} {row['images_per_second']:8.0f} {row['ratio_to_torch']:7.3f} "
            f"{row['paired_ratio_to_torch']:7.3f} {authors}"
        )


def dsprites_images(count: int, seed: int) -> dict[str, torch.Tensor]:
    """``count`` random dSprites images (bool) and factors."""
    indices = torch.randint(DSPRITES_IMAGES, (count,), generator=torch.Generator().manual_seed(seed))
    return DSprites().tensors(indices, dtype=torch.bool)


def workloads(args: argparse.Namespace) -> list[Workload]:
    """The workloads named in ``args.models``, at the sizes of ``args``."""
    built = []
    for name in args.models:
        if name == "decomposition":
            built.append(decomposition_workload(dsprites_images(args.pool, 0)["x"], args.batch_size))
        elif name == "parted":
            labelled = dsprites_images(args.labelled, 1)
            built.append(
                parted_workload(dsprites_images(args.pool, 0)["x"], labelled["x"], labelled["factors"][:, SHAPE], args.batch_size)
            )
        else:
            generator = torch.Generator().manual_seed(2)
            target = torch.rand(args.pool, 1, 28, 28, generator=generator)
            background = torch.rand(args.pool, 1, 28, 28, generator=generator)
            built.append(contrastive_workload(target, background, args.contrastive_batch_size))
    return built


def round_to_training_steps(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Round ``args.steps`` and ``args.warmup`` up to whole engine training steps of
    ``args.iterations_per_training_step`` iterations (at least one timed step), so the timers
    see whole steps; a value below 1 is a usage error."""
    per_step = args.iterations_per_training_step
    if per_step < 1:
        parser.error("--iterations-per-training-step must be >= 1")
    args.warmup = math.ceil(args.warmup / per_step) * per_step
    args.steps = max(math.ceil(args.steps / per_step), 1) * per_step


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the tables, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", choices=("decomposition", "parted", "contrastive"),
                        default=["decomposition", "parted", "contrastive"])
    parser.add_argument("--batch-size", type=int, default=64, help="batch of the conv models")
    parser.add_argument("--contrastive-batch-size", type=int, default=128)
    parser.add_argument("--pool", type=int, default=4096, help="training images drawn per data set")
    parser.add_argument("--labelled", type=int, default=round(0.005 * DSPRITES_IMAGES),
                        help="PartedVAE's labelled set (default 0.5%% of dSprites)")
    parser.add_argument("--steps", type=int, default=15, help="timed iterations per round")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--replay-loss", action="store_true",
                        help="the engine replays its recorded loss (TrainConfig.replay_loss) where the model allows it")
    parser.add_argument("--iterations-per-training-step", type=int, default=1,
                        help="the engine's TrainConfig.iterations_per_training_step (each timed figure covers one "
                             "training step of this many iterations; --steps and --warmup are rounded up to multiples)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks the harness, not speed")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.warmup, args.rounds = 2, 1, 1
        args.batch_size, args.contrastive_batch_size, args.pool, args.labelled = 8, 16, 64, 32
    round_to_training_steps(parser, args)
    torch.set_num_threads(args.threads)
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=".*GPU available but not used.*")

    results = {}
    for workload in workloads(args):
        replay = args.replay_loss and replayable(workload)
        per_round = measure(workload, args.steps, args.warmup, args.rounds, replay_loss=replay,
                            iterations_per_training_step=args.iterations_per_training_step)
        round_medians = {name: [statistics.median(seconds[name]) for seconds in per_round] for name in per_round[0]}
        rows = summarise(round_medians, sum(workload.batch_sizes.values()))
        for reference in ("torch", "authors"):
            if reference in rows:
                for name, ratio in paired_ratios(per_round, reference).items():
                    rows[name][f"paired_ratio_to_{reference}"] = ratio
        results[workload.name] = {
            "loops": rows,
            "batch_sizes": workload.batch_sizes,
            "settings": workload.description,
            "engine_replay_loss": replay,
        }
    print(f"\n{args.threads} thread(s), {args.rounds} rounds x {args.steps} iterations after {args.warmup} warm-up")
    per_step = args.iterations_per_training_step
    blocks = f", {per_step} iterations per training step" if per_step > 1 else ""
    for name, result in results.items():
        replayed = ", engine replays its recorded loss" if result["engine_replay_loss"] else ""
        print_table(f"{name} (batch {result['batch_sizes']}{replayed}{blocks})", result["loops"])
    payload = {
        "models": results,
        "settings": vars(args) | {"json": str(args.json)},
        "machine": machine_description(),
    }
    print()
    write_results(args.json, payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
