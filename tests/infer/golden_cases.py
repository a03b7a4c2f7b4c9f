"""Fixed objectives, parameters and batches whose losses and gradients are pinned in
``golden_objectives.pt`` (recorded at commit ab7171e, before the objectives were rebuilt from
composable terms). ``evaluate`` computes what the file holds."""
from __future__ import annotations

from collections.abc import Callable

import pyro
import torch
from torch import nn

from ppl_vae.distributions import IsotropicGaussianPrior, MixtureOfGaussiansPrior, StudentTPrior
from ppl_vae.infer import (
    ContrastiveELBO,
    DecompositionELBO,
    LinearCapacity,
    MeanFieldELBO,
    PartedELBO,
)
from ppl_vae.models import VAE, ContrastiveVAE, DecompositionVAE, PartedVAE
from ppl_vae.nn import MLP, mlp_decoder

EVENT = (12,)


def _binary(n: int, seed: int) -> torch.Tensor:
    return (torch.rand(n, *EVENT, generator=torch.Generator().manual_seed(seed)) > 0.5).float()


def _parted(num_classes, u_dims, labelled: bool, step: int):
    torch.manual_seed(0)
    model = PartedVAE.mlp(EVENT, z_dim=2, num_classes=num_classes, u_dims=u_dims, hidden=(16,), data_size=100)
    with torch.no_grad():  # overlapping class priors, so that the Bhattacharyya hinge is active
        for prior in model.class_priors:
            prior.loc.mul_(0.05)
    objective = PartedELBO(z_capacity=LinearCapacity(0, 10, 100), u_capacity=LinearCapacity(0, 4, 100))
    batch = {"x": _binary(16, 1)}
    if labelled:
        sizes = (num_classes,) if isinstance(num_classes, int) else num_classes
        batch["y"] = torch.stack([torch.arange(16) % size for size in sizes], -1).squeeze(-1)
    return model, objective, batch, step


def _contrastive(discriminator: str, gamma: float):
    torch.manual_seed(0)
    model = ContrastiveVAE.mlp(EVENT, hidden=16, target_size=50, background_size=80)
    objective = ContrastiveELBO(gamma=gamma, discriminator=discriminator, discriminator_hidden=(8,))
    torch.manual_seed(1)
    objective.auxiliary_steps(model)  # builds the discriminator
    return model, objective, {"target": _binary(8, 2), "background": _binary(10, 3)}, 0


def _small_vae(cls, prior: nn.Module, **kwargs):
    torch.manual_seed(0)
    encoder = MLP([EVENT[0], 16], final_activation=nn.ReLU())
    return cls(encoder, mlp_decoder(2, [16], EVENT), 2, prior=prior, **kwargs)


def _decomposition(prior: Callable[[], nn.Module], aggregate: bool = False, **settings):
    """With ``aggregate``, the whole-data aggregate is the ``aggregate_data`` argument of the objective's call."""
    torch.manual_seed(0)
    model = _small_vae(DecompositionVAE, prior(), data_size=40)
    batch = {"x": _binary(16, 1)}
    if aggregate:
        batch["aggregate_data"] = {"x": _binary(24, 4)}
        settings["chunk_size"] = 10
    return model, DecompositionELBO(**settings), batch, 0


def _vae_beta():
    """A beta-VAE: beta = 4 on the KL (recorded with beta in the model, now in the objective)."""
    model = _small_vae(VAE, IsotropicGaussianPrior(2))
    return model, MeanFieldELBO(beta=4.0), {"x": _binary(16, 1)}, 0


CASES: dict[str, Callable[[], tuple]] = {
    "parted_unlabelled": lambda: _parted(3, 2, False, 50),
    "parted_labelled": lambda: _parted(3, 2, True, 50),
    "parted_multilabel_unlabelled": lambda: _parted((4, 3, 2), 1, False, 30),
    "parted_multilabel_labelled": lambda: _parted((4, 3, 2), 1, True, 70),
    "parted_start_of_schedule": lambda: _parted(3, 2, False, 0),
    "contrastive_linear": lambda: _contrastive("linear", 1.0),
    "contrastive_mlp": lambda: _contrastive("mlp", 2.5),
    "contrastive_no_tc": lambda: _contrastive("mlp", 0.0),
    "decomposition_mmd": lambda: _decomposition(lambda: IsotropicGaussianPrior(2), beta=0.5, alpha=10.0),
    "decomposition_inclusive_kl_mixture": lambda: _decomposition(
        lambda: MixtureOfGaussiansPrior.pinwheel(learn=True), beta=1.0, alpha=3.0, divergence="inclusive_kl"
    ),
    "decomposition_student_t_alpha0": lambda: _decomposition(lambda: StudentTPrior(2, df=3.0), beta=2.0, alpha=0.0),
    "decomposition_inclusive_kl_aggregate_data": lambda: _decomposition(
        lambda: StudentTPrior(2, df=3.0, learn=True), aggregate=True, beta=1.0, alpha=2.0, divergence="inclusive_kl"
    ),
    "decomposition_beta0": lambda: _decomposition(lambda: IsotropicGaussianPrior(2), beta=0.0, alpha=5.0),
    "vae_beta": _vae_beta,
}


def named_parameters(model: nn.Module, objective) -> dict[str, nn.Parameter]:
    """The model's parameters and those of the objective's networks (the TC discriminator)."""
    params = dict(model.named_parameters())
    discriminator = getattr(objective, "discriminator", None)
    if discriminator is not None:
        params.update({f"discriminator.{k}": v for k, v in discriminator.named_parameters()})
    return params


def evaluate(model: nn.Module, objective, batch: dict, step: int) -> dict:
    """``{"loss", "grads": {name: tensor}, "params": {name: tensor}}`` of one differentiable loss
    at seed 7 and training step ``step``."""
    params = named_parameters(model, objective)
    pyro.set_rng_seed(7)
    loss = objective.differentiable_loss(model.model, model.guide, **batch, step=step)
    grads = torch.autograd.grad(loss, list(params.values()), allow_unused=True)
    return {
        "loss": loss.detach(),
        "grads": {name: (g if g is not None else torch.zeros_like(p)) for (name, p), g in zip(params.items(), grads, strict=True)},
        "params": {name: p.detach().clone() for name, p in params.items()},
    }
