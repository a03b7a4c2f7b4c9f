r"""The Decomposition VAE (Mathieu, Rainforth, Siddharth & Teh, ICML 2019).

The paper decomposes a VAE's latent space by two levers (Eq. 7):

.. math::

    \mathcal{L}_{\alpha,\beta}(x) = E_{q(z|x)}[\log p(x|z)]
        - \beta\, KL(q(z|x) \| p(z)) - \alpha\, D(q(z), p(z)),

(a) the overlap of the encodings, set by beta, and (b) the match between the aggregate
encoding ``q(z) = (1/N) sum_n q(z|x_n)`` and a *structured* prior p(z) (anisotropic,
Student-t, mixture, sparse), set by alpha. The generative story is the plain VAE's with
that prior; both weights live in the objective,
:class:`ppl_vae.infer.decomposition.DecompositionELBO`. This module only adds to
:class:`~ppl_vae.models.vae.VAE` what the paper's evaluation reads: the encodings that
make up q(z) and the reconstruction log-likelihood.
"""
from __future__ import annotations

import pyro.distributions as dist
import torch
from torch import nn

from ppl_vae._validation import positive_integer
from ppl_vae.models.likelihoods import likelihood
from ppl_vae.models.vae import VAE


class DecompositionVAE(VAE):
    r"""A VAE with a pluggable structured prior, for the Decomposition objective.

    Generative model and guide, for a batch of B points (no weights here: beta and alpha
    belong to :class:`~ppl_vae.infer.decomposition.DecompositionELBO`)::

        z_n ~ p(z)                               any prior module of ppl_vae.distributions
        x_n ~ p(x | decoder(z_n))                n = 1..B
        q(z_n | x_n) = N(loc(x_n), diag scale(x_n)^2)

    Likelihoods of the paper: ``"bernoulli"`` for dSprites, ``"laplace"`` with fixed scale
    0.1 for Fashion-MNIST, ``"gaussian"`` for pinwheel (the authors' pinwheel decoder
    also outputs a variance; ours is fixed, see ``docs/decomposition.md``).

    :param encoder: network ``x (B, *event) -> features (B, F)`` with ``out_features`` = F.
    :param decoder: network ``z (B, D) -> decoded (B, *event)``.
    :param latent_dim: D.
    :param prior: module whose ``forward()`` returns p(z) with ``batch_shape ()`` and
        ``event_shape (D,)``; default :class:`~ppl_vae.distributions.IsotropicGaussianPrior`.
    :param likelihood: ``"bernoulli"``, ``"gaussian"`` or ``"laplace"``.
    :param likelihood_scale: fixed scale of a Gaussian or Laplace likelihood.
    :param data_size: N; when set, per-point sites are scaled by N / B.
    :raises ValueError: if the prior's distribution is not over ``(latent_dim,)``.

    Two-dimensional data under a two-cluster mixture prior, one step of Pyro's SVI with the
    paper's objective:

    >>> import pyro, torch
    >>> from pyro.infer import SVI
    >>> from ppl_vae.distributions import MixtureOfGaussiansPrior
    >>> from ppl_vae.infer import DecompositionELBO
    >>> from ppl_vae.nn import MLP, mlp_decoder
    >>> prior = MixtureOfGaussiansPrior(means=[[-1.0, 0.0], [1.0, 0.0]], variances=0.1)
    >>> vae = DecompositionVAE(MLP([2, 16]), mlp_decoder(2, [16], (2,)), latent_dim=2, prior=prior,
    ...                        likelihood="gaussian", likelihood_scale=0.1)
    >>> x = torch.randn(32, 2)
    >>> elbo = DecompositionELBO(alpha=1.0, divergence="mmd")
    >>> loss = SVI(vae.model, vae.guide, pyro.optim.Adam({"lr": 1e-3}), elbo).step(x)
    >>> loc, scale = vae.posterior(x)  # q(z | x), the components of the aggregate q(z)
    >>> loc.shape, scale.shape
    (torch.Size([32, 2]), torch.Size([32, 2]))
    """

    def __init__(
        self,
        encoder: nn.Module,
        decoder: nn.Module,
        latent_dim: int,
        prior: nn.Module | None = None,
        likelihood: str = "bernoulli",
        likelihood_scale: float | None = None,
        data_size: int | None = None,
    ) -> None:
        super().__init__(
            encoder,
            decoder,
            latent_dim,
            prior=prior,
            likelihood=likelihood,
            likelihood_scale=likelihood_scale,
            data_size=data_size,
        )
        prior_dist = self.prior()
        if prior_dist.batch_shape != () or prior_dist.event_shape != (latent_dim,):
            raise ValueError(
                f"prior must be a distribution over ({latent_dim},) (latent_dim) with batch "
                f"shape (), got batch_shape {tuple(prior_dist.batch_shape)} and event_shape "
                f"{tuple(prior_dist.event_shape)}"
            )

    def posterior(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Means and standard deviations ``(B, D)``, ``(B, D)`` of q(z | x) for
        ``x (B, *event)``: the mixture components of the aggregate encoding q(z).

        :param x: ``(B, *event)`` data points.
        """
        return self.head(self.encoder(x))

    def aggregate_posterior_sample(self, x: torch.Tensor) -> torch.Tensor:
        """One draw ``z_n ~ q(z | x_n)`` per point, ``(B, D)``: samples of q(z) over ``x``.

        :param x: ``(B, *event)`` data points.
        """
        loc, scale = self.posterior(x)
        return dist.Normal(loc, scale).sample()

    def reconstruction_log_likelihood(self, x: torch.Tensor, num_samples: int = 1) -> torch.Tensor:
        r"""``(B,)`` Monte Carlo estimates of :math:`E_{q(z|x_n)}[\log p(x_n \mid z)]`
        (Fig. 4 centre), averaged over ``num_samples`` draws of z, for ``x (B, *event)``.

        :param x: ``(B, *event)`` data points.
        :param num_samples: draws of z per point (>= 1).
        """
        positive_integer("num_samples", num_samples)
        loc, scale = self.posterior(x)
        total = x.new_zeros(x.shape[0])
        for _ in range(num_samples):
            decoded = self.decoder(dist.Normal(loc, scale).sample())
            total = total + likelihood(self.likelihood, decoded, x.dim() - 1, self.likelihood_scale).log_prob(x)
        return total / num_samples


__all__ = ["DecompositionVAE"]
