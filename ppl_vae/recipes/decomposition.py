"""Recipe for the Decomposition VAE (Mathieu et al. 2019) on pinwheel, dSprites or the
MNIST family.

The three experiments of the paper map onto three settings of one config:

- clustering (Fig. 3): ``dataset="pinwheel"``, ``prior="mixture"``,
  ``divergence="inclusive_kl"``, batch = n = 400 (the default and the demo);
- sparsity (Fig. 4): ``dataset="fashion-mnist"`` (or ``"mnist"`` offline),
  ``prior="sparse"``, ``divergence="mmd"``, Laplace likelihood with scale 0.1, D = 50;
- prior vs disentanglement (Fig. 2): ``dataset="dsprites"``, ``alpha=0``, ``prior`` one of
  ``"isotropic"``, ``"pca"``, ``"learned-pca"``, ``"student-t"``, with the Factor score.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ppl_vae.distributions import (
    AnisotropicGaussianPrior,
    IsotropicGaussianPrior,
    MixtureOfGaussiansPrior,
    SparsePrior,
    StudentTPrior,
)
from ppl_vae.infer.decomposition import DecompositionELBO
from ppl_vae.metrics import factor_score, hoyer_sparsity
from ppl_vae.metrics.aggregate import aggregate_posterior_mismatch
from ppl_vae.models.decomposition import DecompositionVAE
from ppl_vae.recipes.base import Experiment
from ppl_vae.recipes.common import (
    evaluation_batch,
    image_model_pictures,
    load_training_data,
    mnist_binarization,
    networks,
)
from ppl_vae.recipes.configs import PRIORS, DecompositionConfig
from ppl_vae.train import TrainConfig
from ppl_vae.viz import save_density_comparison


def make_prior(
    name: str,
    latent_dim: int,
    x: torch.Tensor | None = None,
    df: float = 5.0,
    gamma: float = 0.8,
    sigma0: float = 0.05,
) -> nn.Module:
    """A prior module of :mod:`ppl_vae.distributions` by name.

    - ``"isotropic"``: N(0, I);
    - ``"pca"`` / ``"learned-pca"``: zero-mean Gaussian whose trace-normalised variances
      start at the data's leading principal variances (largest first), fixed or learned;
    - ``"student-t"``: factored Student-t with ``df`` degrees of freedom;
    - ``"mixture"`` / ``"learned-mixture"``: the paper's 4-component pinwheel prior
      (``latent_dim`` must be 2), fixed or with learned means and variances;
    - ``"sparse"``: per dimension ``(1 - gamma) N(0, 1) + gamma N(0, sigma0^2)``, sigma0 a std.

    :param x: ``(N, ...)`` training data, needed by the PCA priors (a few thousand rows
        are enough).
    """
    if name == "isotropic":
        return IsotropicGaussianPrior(latent_dim)
    if name in ("pca", "learned-pca"):
        if x is None:
            raise ValueError(f"prior={name!r} needs the training data x for its principal components")
        return AnisotropicGaussianPrior.from_principal_components(
            x[:5000].float(), latent_dim, learn=name == "learned-pca"
        )
    if name == "student-t":
        return StudentTPrior(latent_dim, df)
    if name in ("mixture", "learned-mixture"):
        if latent_dim != 2:
            raise ValueError(f"prior={name!r} is the 2-D pinwheel mixture; latent_dim must be 2, got {latent_dim}")
        return MixtureOfGaussiansPrior.pinwheel(learn=name == "learned-mixture")
    if name == "sparse":
        return SparsePrior(latent_dim, gamma=gamma, sigma0=sigma0)
    raise ValueError(f"prior must be one of {PRIORS}, got {name!r}")


def build_untrained(
    config: DecompositionConfig, model_inputs: Mapping[str, Any], x: torch.Tensor | None = None
) -> tuple[DecompositionVAE, DecompositionELBO]:
    """The untrained Decomposition VAE of ``config`` for points of ``model_inputs["shape"]``
    (one point's shape as trained, after ``flatten``; ``model_inputs["image_shape"]`` before),
    and its objective.

    :param x: the training data ``(N, *shape)``: the PCA priors take their variances from it.
        Without it (reloading a trained model, whose prior comes from the checkpoint) the PCA
        priors start isotropic. (``aggregate_over_dataset`` is an argument of each training
        step, :func:`build`'s ``elbo_arguments``, not part of the objective.)
    """
    encoder, decoder = networks(
        tuple(model_inputs["shape"]), config.latent_dim, config.hidden, hidden_activation=config.hidden_activation,
        decoder_channels=config.decoder_channels,
    )
    likelihood = config.likelihood or ("bernoulli" if len(model_inputs["image_shape"]) == 3 else "gaussian")
    scale = config.likelihood_scale
    if scale is None and likelihood != "bernoulli":
        scale = 0.1
    if x is None and config.prior in ("pca", "learned-pca"):
        prior = AnisotropicGaussianPrior(config.latent_dim, learn=config.prior == "learned-pca")
    else:
        prior = make_prior(config.prior, config.latent_dim, x, config.df, config.gamma, config.sigma0)
    model = DecompositionVAE(encoder, decoder, config.latent_dim, prior, likelihood, scale)
    objective = DecompositionELBO(
        beta=config.beta,
        alpha=config.alpha,
        divergence=config.divergence,
    )
    return model, objective


def build(config: DecompositionConfig) -> Experiment:
    """The Decomposition VAE, its objective and the training data of ``config``."""
    data = load_training_data(
        config.dataset, config.num_train, config.train.seed, image_size=config.image_size, mnist_dir=config.mnist_dir,
        binarize=mnist_binarization(config.dataset, config.likelihood),
    )
    model_inputs = {"image_shape": list(data.x.shape[1:])}
    if config.flatten:
        data.x = data.x.reshape(data.x.shape[0], -1)
    model_inputs["shape"] = list(data.x.shape[1:])
    model, objective = build_untrained(config, model_inputs, data.x)

    def evaluate(trained: DecompositionVAE, pictures: Path) -> dict[str, Any]:
        x, labels = evaluation_batch(data, config.evaluation_points)
        loc, scale = trained.posterior(x)
        prior_dist = trained.prior()
        save_density_comparison(
            pictures / "aggregate_posterior.png",
            trained.aggregate_posterior_sample(x),
            prior_dist.sample((x.shape[0],)),
            title=f"q(z) vs p(z): {config.prior} prior, alpha={config.alpha:g}, beta={config.beta:g}",
        )
        figures: dict[str, Any] = {
            "reconstruction_log_likelihood": float(trained.reconstruction_log_likelihood(x).mean()),
            "hoyer_sparsity": hoyer_sparsity(loc) if config.latent_dim > 1 else None,
            "aggregate_mismatch": aggregate_posterior_mismatch(
                loc, scale, prior_dist, num_samples=min(x.shape[0], 2000), seed=config.train.seed
            ),
        }
        figures.update(image_model_pictures(trained, x, labels, pictures))
        if config.dataset == "dsprites" and config.factor_score_votes > 0:
            result = factor_score(
                lambda images: trained.encode(images.reshape(images.shape[0], *data.x.shape[1:])),
                data.source,
                n_train=config.factor_score_votes,
                n_eval=max(config.factor_score_votes // 2, 1),
                seed=config.train.seed,
            )
            figures["factor_score"] = result.score
        return figures

    elbo_arguments = {"aggregate_data": {"x": data.x}} if config.aggregate_over_dataset else {}
    evaluation = ("reconstruction, Hoyer sparsity, aggregate-posterior mismatch, a posterior predictive check "
                  f"on {config.evaluation_points:,} training points, pictures")
    if config.dataset == "dsprites" and config.factor_score_votes > 0:
        evaluation += f", Factor score ({config.factor_score_votes:,} votes)"
    return Experiment(model, objective, {"x": data.x}, evaluate, model_inputs, elbo_arguments, evaluation)


def authors_settings(config: DecompositionConfig) -> DecompositionConfig:
    """``config`` with the authors' optimiser and networks switched on: Adam's AMSGrad variant
    for every setting, and for the convolutional networks on dSprites their width (128), their
    encoder's missing activation after its linear layer and their decoder's widths (64, 64,
    64, 32 into its transposed convolutions). Data, priors, weights, learning rate, batch size
    and the number of steps are left as they are (the experiment scripts set the paper's)."""
    if config.dataset == "dsprites" and not config.flatten:
        config = dataclasses.replace(config, hidden=128, hidden_activation="identity", decoder_channels=(64, 64, 64, 32))
    return dataclasses.replace(config, train=dataclasses.replace(config.train, amsgrad=True))


def demo() -> DecompositionConfig:
    """Pinwheel clustering with the mixture prior and alpha = 1: a few seconds on a CPU."""
    return DecompositionConfig(
        train=TrainConfig(steps=300, batch_size=400, lr=3e-3, log_every_n_steps=50, checkpoint_every_n_steps=100)
    )

