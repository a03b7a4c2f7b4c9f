"""Recipe for the VAE on dSprites, MNIST, Fashion-MNIST or pinwheel, trained by the plain
ELBO or one of the disentangling baselines of :mod:`ppl_vae.infer.baselines` (``objective``:
beta-VAE, the capacity-annealed beta-VAE, FactorVAE, beta-TCVAE, DIP-VAE-I/II, InfoVAE)."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pyro.infer import TraceMeanField_ELBO

from ppl_vae._validation import choice
from ppl_vae.infer.baselines import annealed_beta_vae, beta_tcvae, beta_vae, dip_vae, factor_vae, info_vae
from ppl_vae.infer.mean_field import MeanFieldELBO
from ppl_vae.metrics import factor_score
from ppl_vae.models import VAE
from ppl_vae.recipes.base import Experiment
from ppl_vae.recipes.common import (
    evaluation_batch,
    image_model_pictures,
    load_training_data,
    mnist_binarization,
    networks,
)
from ppl_vae.recipes.configs import VAE_OBJECTIVES, VAEConfig
from ppl_vae.schedules import LinearCapacity
from ppl_vae.train import TrainConfig

#: Learning rate of FactorVAE's discriminator step: disentanglement_lib's (Locatello et al. 2019).
FACTOR_DISCRIMINATOR_LR = 1e-4
#: Adam betas of FactorVAE's discriminator step: disentanglement_lib's (the paper's).
FACTOR_DISCRIMINATOR_BETAS = (0.5, 0.9)


def make_objective(config: VAEConfig, num_points: int | None) -> MeanFieldELBO:
    """The objective ``config.objective`` with the weights of ``config``, a preset of
    :mod:`ppl_vae.infer.baselines` on the VAE's latent site ``"z"`` (``"vae"``:
    ``MeanFieldELBO(beta=config.objective_beta)``).

    :param config: the run's settings.
    :param num_points: N, the training points (read by ``"beta-tcvae"`` only; ``None`` when unknown).
    :raises ValueError: an unknown objective; ``"beta-tcvae"`` without ``num_points``."""
    name = choice("objective", config.objective, VAE_OBJECTIVES)
    if name == "vae":
        return MeanFieldELBO(beta=config.objective_beta)
    if name == "beta-vae":
        return beta_vae(config.objective_beta)
    if name == "annealed-beta-vae":
        capacity = LinearCapacity(0.0, config.capacity_max, config.capacity_steps)
        return annealed_beta_vae(config.objective_gamma, capacity)
    if name == "factor-vae":
        return factor_vae(config.objective_gamma, discriminator_lr=FACTOR_DISCRIMINATOR_LR,
                          discriminator_betas=FACTOR_DISCRIMINATOR_BETAS, input_dim=config.latent_dim)
    if name == "beta-tcvae":
        if num_points is None:
            raise ValueError(
                "objective 'beta-tcvae' needs num_points, the number of training points, in the run's "
                "model_inputs (saved by `ppl-vae train vae`); this run's has none"
            )
        return beta_tcvae(num_points, config.objective_beta, estimator=config.tc_estimator)
    if name in ("dip-vae-i", "dip-vae-ii"):
        return dip_vae(name.removeprefix("dip-vae-"), config.lambda_od, config.lambda_d)
    return info_vae(config.info_lambda)


def build_untrained(config: VAEConfig, model_inputs: Mapping[str, Any]) -> tuple[VAE, MeanFieldELBO]:
    """The untrained VAE of ``config`` for points of ``model_inputs["shape"]`` (one point's
    shape), and its objective (:func:`make_objective`, given N as ``model_inputs["num_points"]``,
    which runs saved before it was kept lack)."""
    shape = tuple(model_inputs["shape"])
    encoder, decoder = networks(shape, config.latent_dim, config.hidden)
    likelihood = config.likelihood or ("bernoulli" if len(shape) == 3 else "gaussian")
    scale = config.likelihood_scale if config.likelihood_scale is not None else (None if likelihood == "bernoulli" else 0.1)
    model = VAE(encoder, decoder, config.latent_dim, likelihood=likelihood, likelihood_scale=scale)
    return model, make_objective(config, model_inputs.get("num_points"))


def build(config: VAEConfig) -> Experiment:
    """The VAE, its objective (``config.objective``; the mean-field ELBO with ``config.objective_beta`` by
    default, analytic KL) and the training images of ``config``."""
    data = load_training_data(
        config.dataset, config.num_train, config.train.seed, mnist_dir=config.mnist_dir,
        binarize=mnist_binarization(config.dataset, config.likelihood),
    )
    model_inputs = {"shape": list(data.x.shape[1:]), "num_points": len(data.x)}
    model, objective = build_untrained(config, model_inputs)

    def evaluate(trained: VAE, pictures: Path) -> dict[str, Any]:
        x, labels = evaluation_batch(data)
        figures: dict[str, Any] = {
            "elbo_per_point": -TraceMeanField_ELBO().loss(trained.model, trained.guide, x) / len(x),
        }
        figures.update(image_model_pictures(trained, x, labels, pictures))
        if config.dataset == "dsprites" and config.factor_score_votes > 0:
            result = factor_score(
                trained.encode,
                data.source,
                n_train=config.factor_score_votes,
                n_eval=max(config.factor_score_votes // 2, 1),
                n_variance=min(10000, 20 * config.factor_score_votes),
                seed=config.train.seed,
            )
            figures["factor_score"] = result.score
        return figures

    evaluation = "ELBO per point and a posterior predictive check on training images, pictures"
    if config.dataset == "dsprites" and config.factor_score_votes > 0:
        evaluation += f", Factor score ({config.factor_score_votes:,} votes)"
    return Experiment(model, objective, {"x": data.x}, evaluate, model_inputs, evaluation=evaluation)


def demo() -> VAEConfig:
    """A VAE on 3,000 generated dSprites images, 400 steps (a dSprites VAE leaves its early
    posterior collapse after about 200): about a minute on a 2-core CPU."""
    return VAEConfig(
        dataset="dsprites",
        num_train=3000,
        latent_dim=6,
        factor_score_votes=100,
        train=TrainConfig(steps=400, batch_size=64, lr=1e-3, log_every_n_steps=50, checkpoint_every_n_steps=100),
    )

