"""Recipe for the plain VAE / beta-VAE on dSprites, MNIST, Fashion-MNIST or pinwheel."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pyro.infer import TraceMeanField_ELBO

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
from ppl_vae.recipes.configs import VAEConfig
from ppl_vae.train import TrainConfig


def build_untrained(config: VAEConfig, model_inputs: Mapping[str, Any]) -> tuple[VAE, MeanFieldELBO]:
    """The untrained VAE of ``config`` for points of ``model_inputs["shape"]`` (one point's
    shape), and its objective."""
    shape = tuple(model_inputs["shape"])
    encoder, decoder = networks(shape, config.latent_dim, config.hidden)
    likelihood = config.likelihood or ("bernoulli" if len(shape) == 3 else "gaussian")
    scale = config.likelihood_scale if config.likelihood_scale is not None else (None if likelihood == "bernoulli" else 0.1)
    model = VAE(encoder, decoder, config.latent_dim, likelihood=likelihood, likelihood_scale=scale)
    return model, MeanFieldELBO(beta=config.beta)


def build(config: VAEConfig) -> Experiment:
    """The VAE, the mean-field ELBO with ``config.beta`` (analytic KL) and the training images of ``config``."""
    data = load_training_data(
        config.dataset, config.num_train, config.train.seed, mnist_dir=config.mnist_dir,
        binarize=mnist_binarization(config.dataset, config.likelihood),
    )
    model_inputs = {"shape": list(data.x.shape[1:])}
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

