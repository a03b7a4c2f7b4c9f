"""Values written once for the two places that take them: the torch modules (objectives,
networks, priors: the Python API) and the recipes' configs (:mod:`ppl_vae.recipes.configs`, the
command line), which import no torch and refuse a bad setting before anything is built. Here,
in plain numbers and names: the papers' default weights, and the names that a few string
arguments accept (each module that takes one re-exports it under the same name).
"""
from __future__ import annotations

from dataclasses import dataclass

#: The activation names :func:`~ppl_vae.nn.activation` accepts.
ACTIVATIONS = ("relu", "leaky_relu", "identity")
#: The weight initialisation schemes :func:`~ppl_vae.nn.initialise` accepts.
WEIGHT_INITS = ("torch", "glorot")
#: The ``kind`` names :class:`~ppl_vae.nn.TCDiscriminator` accepts.
DISCRIMINATORS = ("linear", "mlp")
#: The divergences :class:`~ppl_vae.infer.AggregateDivergence` estimates (its ``divergence``
#: argument): the dimension-wise MMD (Eq. 10) and the inclusive KL(p(z) || q(z)).
DIVERGENCES = ("mmd", "inclusive_kl")
#: The likelihood names of :func:`~ppl_vae.models.likelihoods.likelihood`, for images and other
#: real or binary data.
LIKELIHOODS = ("bernoulli", "gaussian", "laplace")
#: Count likelihoods with learned per-feature dispersion
#: (:class:`~ppl_vae.models.likelihoods.CountLikelihood`; the contrastive VAE takes them).
COUNT_LIKELIHOODS = ("negative_binomial", "zinb")
#: The likelihood names :class:`~ppl_vae.models.ContrastiveVAE` accepts: both of the above.
CONTRASTIVE_LIKELIHOODS = (*LIKELIHOODS, *COUNT_LIKELIHOODS)
#: How :class:`~ppl_vae.distributions.ClassConditionalGaussianPrior`'s log-variance parameters
#: start (its ``log_variance_init``).
LOG_VARIANCE_INITS = ("zeros", "randn")


@dataclass(frozen=True)
class PartedDefaults:
    """PartedVAE's weights, capacities and relaxation temperature, the authors' on dSprites
    (Hajimiri et al. 2021).

    :param gamma_z: weight of the z capacity term.
    :param gamma_u: weight of the u capacity term.
    :param gamma_c: weight of KL(qhat(c) || p(c)).
    :param gamma_h: weight of the entropy of q(c|x).
    :param gamma_bc: weight of the Bhattacharyya penalty of the class priors.
    :param delta: threshold of the Bhattacharyya penalty.
    :param z_capacity: (C_min, C_max) of z's capacity ramp.
    :param u_capacity: (C_min, C_max) of u's capacity ramp.
    :param capacity_steps: T of both ramps.
    :param temperature: Gumbel-softmax temperature of q(c | x).
    """

    gamma_z: float = 50.0
    gamma_u: float = 50.0
    gamma_c: float = 100.0
    gamma_h: float = 10.0
    gamma_bc: float = 10.0
    delta: float = 0.1
    z_capacity: tuple[float, float] = (0.0, 30.0)
    u_capacity: tuple[float, float] = (0.0, 5.0)
    capacity_steps: int = 300_000
    temperature: float = 0.67


@dataclass(frozen=True)
class ContrastiveDefaults:
    """The contrastive VAE's total-correlation penalty (Abid & Zou 2019).

    :param gamma: weight of the total correlation.
    :param discriminator: the density-ratio discriminator, ``"linear"`` (the paper's logistic
        regression).
    """

    gamma: float = 1.0
    discriminator: str = "linear"


#: PartedVAE's default weights, capacities and temperature.
PARTED = PartedDefaults()
#: The contrastive VAE's default TC weight and discriminator.
CONTRASTIVE = ContrastiveDefaults()
