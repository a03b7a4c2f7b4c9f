"""What the library costs on top of hand-written PyTorch, per model, and PartedVAE against its authors' loop.

For each model one training iteration is timed four (Parted: five) ways, on the same networks
(the model's own submodules), the same loss terms and the same batch sizes (loops in
:mod:`harness`):

- ``torch``: the hand-written floor. The model's networks give the distributions'
  parameters; the loss is written as one expression with ``torch.distributions`` (reparameterised
  samples, closed-form KLs) and the papers' terms; one foreach Adam per optimisation step. For
  the batch-level arithmetic it calls the same plain-tensor functions as the library
  (:func:`~ppl_vae.infer.mmd_dimensionwise`, :func:`~ppl_vae.distributions.bhattacharyya_coefficient`,
  the TC term's ``log_density_ratio`` and :func:`~ppl_vae.infer.discriminator_loss`), so what the
  ratios measure is the objective's machinery (Pyro traces, terms, steps, Lightning), not two
  implementations of one formula. That the library's objectives compute these equations is
  pinned by ``tests/infer/test_paper_equations.py``.
- ``svi``: ``pyro.infer.SVI`` with ``pyro.optim.Adam``, auxiliary steps by ``torch.optim.Adam``.
- ``plain``: the library's :class:`~ppl_vae.infer.TrainingIteration` in a plain loop.
- ``engine``: ``ppl_vae.fit``.
- ``authors`` (PartedVAE): the floor with the authors' classifier step, which reshuffles and
  copies the whole labelled set every iteration to draw one batch (reproduced from its
  description), on the same weights in PyTorch's default layers (NCHW, out-of-place ReLUs).

Workloads (the authors' settings): Decomposition = 64x64 conv networks, D = 10, isotropic
prior, MMD (alpha = 1), Bernoulli likelihood, dSprites, batch 64; Parted = z 5, c [3], u 1,
their gammas and delta, capacities over 300,000 steps, classifier step on 0.5% of dSprites
(3,686 images), batch 64 for both steps; Contrastive = MLP 784-128, 2 + 2 latents, Gaussian
likelihood, linear TC discriminator (gamma = 1) and its step, random 28x28 images, 128 + 128.

The loops run interleaved iteration by iteration in one process (:class:`harness.InterleavedTimer`:
engine, torch, svi, plain, [authors,] engine, ...), each round on fresh networks from one seed.
Printed and written as JSON per loop: the median over rounds of the round medians (min, max),
its ratio to ``torch``, and the *paired* ratio, the median over all timed iterations of
``loop_i / torch_i`` (and, for PartedVAE, ``/ authors_i``), the figure to read.

    python benchmarks/overhead.py --threads 1 --rounds 1 --steps 20 --warmup 4
    python benchmarks/overhead.py --quick --json out.json  # seconds: checks the harness, not speed
"""
from __future__ import annotations

import argparse
import itertools
import logging
import math
import statistics
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from harness import (
    DSPRITES_IMAGES,
    SHAPE,
    Batches,
    Step,
    Workload,
    adam,
    add_timing_arguments,
    dsprites_images,
    measure,
    paired_ratio,
    print_table,
    round_to_training_steps,
    summarise,
    take_step,
)
from reporting import machine_description, recorded_path, write_results
from torch import nn
from torch.distributions import Categorical, Normal, kl_divergence
from torch.nn import functional as F

from ppl_vae.distributions import IsotropicGaussianPrior, bhattacharyya_coefficient
from ppl_vae.infer import (
    ContrastiveELBO,
    DecompositionELBO,
    LinearCapacity,
    PartedELBO,
    discriminator_loss,
    mmd_dimensionwise,
)
from ppl_vae.models import ContrastiveVAE, DecompositionVAE, PartedVAE
from ppl_vae.nn import ConvDecoder, ConvEncoder
from ppl_vae.recipes.contrastive import grassy_likelihood_scale

DEFAULT_JSON = Path(__file__).resolve().parent / "results" / "overhead.json"
STANDARD = Normal(0.0, 1.0)


def vae_floor(model: nn.Module, objective: Any, lr: float, batches: Batches) -> Step:
    r"""``sum_n [BCE(x_n) + beta KL(q(z|x_n) || N(0, I))] + alpha B MMD({z_n}, {z'_n})``, z' ~ N(0, I)
    (Decomposition Eq. 7; a plain VAE without beta and alpha)."""
    optimizer = adam(model.parameters(), lr)
    beta, alpha = getattr(objective, "beta", 1.0), getattr(objective, "alpha", 0.0)

    def step() -> None:
        x = batches()["x"]
        q_z = Normal(*model.head(model.encoder(x)))
        z = q_z.rsample()
        loss = F.binary_cross_entropy_with_logits(model.decoder(z), x, reduction="sum") + beta * kl_divergence(q_z, STANDARD).sum()
        if alpha:
            loss = loss + alpha * len(x) * mmd_dimensionwise(z, torch.randn_like(z), objective.term("aggregate_divergence").length_scales)
        take_step(optimizer, loss)

    return step


def parted_floor(
    model: PartedVAE, objective: PartedELBO, lr: float, batches: Batches,
    labelled: Callable[[], tuple[torch.Tensor, torch.Tensor]] | None = None,
) -> Step:
    r"""The cross-entropy step on a labelled batch (``labelled() -> (x, y)``; default the batch's
    ``"labelled"`` group), then Eq. 6 for one categorical variable: the Bernoulli reconstruction
    summed over the batch plus ``B [gamma_z |KL_z - C_z(t)| + gamma_u |KL_u - C_u(t)| + gamma_H H
    + gamma_c KL(qhat(c) || p(c)) + gamma_BC sum_{j<k} max(BC_jk - delta, 0)]``, batch-averaged KLs."""
    weight = {term.name: term.weight for term in objective.terms}
    capacity_z, capacity_u = objective.term("capacity_z").capacity, objective.term("capacity_u").capacity
    delta = objective.term("bhattacharyya").delta
    main, classifier, counter = adam(model.parameters(), lr), adam(model.classifier_parameters(), lr), itertools.count()

    def step() -> None:
        t, batch = next(counter), batches()
        x_l, y_l = labelled() if labelled else (batch["labelled"]["x"], batch["labelled"]["y"])
        take_step(classifier, F.cross_entropy(model.class_heads[0](model.encoder(x_l)), y_l))
        x = batch["x"]
        h = model.encoder(x)
        q_z, q_c = Normal(*model.z_head(h)), Categorical(logits=model.class_heads[0](h))
        c = F.gumbel_softmax(q_c.logits, tau=model.temperature)
        q_u = Normal(*model.u_heads[0](h * model.attention[0](c, model.sharpness(t))))
        decoded = model.decoder(torch.cat([q_z.rsample(), q_u.rsample()], dim=-1))
        prior = model.class_priors[0]().base_dist  # (L, D)
        kl_u = (q_c.probs * kl_divergence(Normal(q_u.loc.unsqueeze(1), q_u.scale.unsqueeze(1)), prior).sum(-1)).sum(-1)
        overlap = bhattacharyya_coefficient(Normal(prior.loc.unsqueeze(1), prior.scale.unsqueeze(1)), prior).prod(-1)
        penalties = (
            weight["capacity_z"] * (kl_divergence(q_z, STANDARD).sum(-1).mean() - capacity_z(t)).abs()
            + weight["capacity_u"] * (kl_u.mean() - capacity_u(t)).abs()
            + weight["entropy"] * q_c.entropy().mean()
            + weight["aggregate_kl"] * kl_divergence(Categorical(q_c.probs.mean(0)), Categorical(model.class_prior_probs(0)))
            + weight["bhattacharyya"] * (overlap.triu(1) - delta).clamp_min(0.0).sum()
        )
        take_step(main, F.binary_cross_entropy_with_logits(decoded, x, reduction="sum") + len(x) * penalties)

    return step


def contrastive_floor(model: ContrastiveVAE, objective: ContrastiveELBO, lr: float, batches: Batches) -> Step:
    r"""Target and background ELBOs (Eqs. 3, 4; Gaussian likelihood of fixed scale, closed-form KLs) plus
    ``gamma sum_n logit D([s_n, z_n])`` (Eq. 5, D's parameters detached); then D's logistic loss
    on the same samples, detached."""
    discriminator = objective.discriminator.build(model.salient_dim + model.shared_dim, next(model.parameters()).device)
    optimizer, d_optimizer = adam(model.parameters(), lr), adam(discriminator.parameters(), lr)
    sigma = model.likelihood_scale

    def gaussian(decoded: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """``sum log N(x; decoded, sigma^2)`` for the likelihood's fixed scalar sigma."""
        return -0.5 * ((x - decoded) / sigma).pow(2).sum() - x.numel() * math.log(sigma * math.sqrt(2 * math.pi))

    def step() -> None:
        batch = batches()
        target, background = batch["target"], batch["background"]
        q_s = Normal(*model.salient_head(model.salient_encoder(target)))
        q_z, q_b = (Normal(*model.shared_head(model.shared_encoder(x))) for x in (target, background))
        s, z, b = q_s.rsample(), q_z.rsample(), q_b.rsample()
        salient_off = s.new_zeros(len(b), s.shape[-1])
        log_likelihood = gaussian(model.decoder(torch.cat([s, z], -1)), target) + gaussian(
            model.decoder(torch.cat([salient_off, b], -1)), background
        )
        kl = sum(kl_divergence(q, STANDARD).sum() for q in (q_s, q_z, q_b))
        take_step(optimizer, kl - log_likelihood + objective.gamma * objective.log_density_ratio(s, z).sum())
        take_step(d_optimizer, discriminator_loss(discriminator, s.detach(), z.detach()))

    return step


def decomposition_workload(images: torch.Tensor, batch_size: int, alpha: float = 1.0) -> Workload:
    """DecompositionVAE (conv 64x64, D = 10, isotropic prior) with the MMD divergence."""

    def build() -> tuple[DecompositionVAE, DecompositionELBO]:
        torch.manual_seed(0)
        model = DecompositionVAE(ConvEncoder(64), ConvDecoder(10, 64), 10, prior=IsotropicGaussianPrior(10))
        return model, DecompositionELBO(beta=1.0, alpha=alpha, divergence="mmd")

    return Workload("decomposition", build, {"x": images}, {"x": batch_size}, 5e-4, vae_floor,
                    description={"network": "conv 64x64", "latent_dim": 10, "divergence": "mmd", "alpha": alpha})


def parted_workload(images: torch.Tensor, labelled_images: torch.Tensor, labels: torch.Tensor, batch_size: int) -> Workload:
    """PartedVAE with the authors' dSprites settings and a labelled group for the classifier."""

    def build(layers: str = "library") -> tuple[PartedVAE, PartedELBO]:
        torch.manual_seed(0)
        model = PartedVAE.conv(64, z_dim=5, num_classes=3, u_dims=1, channels_last=layers != "authors")
        for module in model.modules():
            if layers == "authors" and isinstance(module, nn.ReLU):
                module.inplace = False
        objective = PartedELBO(
            z_capacity=LinearCapacity(0.0, 30.0, 300_000), u_capacity=LinearCapacity(0.0, 5.0, 300_000),
            gamma_z=50.0, gamma_u=50.0, gamma_c=100.0, gamma_h=10.0, gamma_bc=10.0, delta=0.1,
        )
        return model, objective

    def authors(model: PartedVAE, objective: PartedELBO, lr: float, batches: Batches) -> Step:
        images_float = labelled_images.float()  # held as float32, as their data set hands them out

        def reshuffled() -> tuple[torch.Tensor, torch.Tensor]:
            order = torch.randperm(len(labels))
            return images_float[order][:batch_size], labels[order][:batch_size]

        return parted_floor(model, objective, lr, batches, labelled=reshuffled)

    return Workload("parted", build, {"x": images, "labelled": {"x": labelled_images, "y": labels}},
                    {"x": batch_size, "labelled": batch_size}, 5e-4, parted_floor, authors,
                    {"network": "conv 64x64", "z_dim": 5, "num_classes": 3, "u_dim": 1, "labelled": len(labels)})


def contrastive_workload(target: torch.Tensor, background: torch.Tensor, batch_size: int, gamma: float = 1.0) -> Workload:
    """ContrastiveVAE (the paper's MLP) with the TC term and its linear discriminator."""

    def build() -> tuple[ContrastiveVAE, ContrastiveELBO]:
        torch.manual_seed(0)
        model = ContrastiveVAE.mlp((1, 28, 28), 2, 2, hidden=128, likelihood="gaussian", likelihood_scale=grassy_likelihood_scale(3.0))
        return model, ContrastiveELBO(gamma=gamma, discriminator="linear")

    return Workload("contrastive", build, {"target": target, "background": background},
                    {"target": batch_size, "background": batch_size}, 1e-3, contrastive_floor,
                    description={"network": "MLP 784-128", "salient_dim": 2, "shared_dim": 2, "gamma": gamma})


def workloads(args: argparse.Namespace) -> list[Workload]:
    """The workloads named in ``args.models``, at the sizes of ``args``."""
    built = []
    for name in args.models:
        if name == "decomposition":
            built.append(decomposition_workload(dsprites_images(args.pool, 0)["x"], args.batch_size))
        elif name == "parted":
            labelled = dsprites_images(args.labelled, 1)
            built.append(parted_workload(dsprites_images(args.pool, 0)["x"], labelled["x"], labelled["factors"][:, SHAPE], args.batch_size))
        else:
            generator = torch.Generator().manual_seed(2)
            target, background = (torch.rand(args.pool, 1, 28, 28, generator=generator) for _ in range(2))
            built.append(contrastive_workload(target, background, args.contrastive_batch_size))
    return built


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
    add_timing_arguments(parser, DEFAULT_JSON, steps=15, warmup=3, rounds=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--iterations-per-training-step", type=int, default=1,
                        help="the engine's TrainConfig.iterations_per_training_step (--steps and --warmup are rounded up to multiples)")
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
        per_round = measure(workload, args.steps, args.warmup, args.rounds,
                            iterations_per_training_step=args.iterations_per_training_step)
        rows = summarise({name: [statistics.median(r[name]) for r in per_round] for name in per_round[0]},
                         sum(workload.batch_sizes.values()))
        for name, row in rows.items():
            for reference in ("torch", "authors"):
                if reference in rows:
                    row[f"paired_ratio_to_{reference}"] = paired_ratio(per_round, name, reference)
        results[workload.name] = {"loops": rows, "batch_sizes": workload.batch_sizes,
                                  "settings": workload.description}
    print(f"\n{args.threads} thread(s), {args.rounds} rounds x {args.steps} iterations after {args.warmup} warm-up")
    for name, result in results.items():
        print_table(f"{name} (batch {result['batch_sizes']})", result["loops"])
    print()
    write_results(args.json, {"models": results, "settings": vars(args) | {"json": recorded_path(args.json)},
                              "machine": machine_description()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
