"""The plain VAE and beta-VAE (Kingma & Welling 2014; Higgins et al. 2017).

The template the library's other models follow: a :class:`~pyro.nn.PyroModule` with a
``model`` and a ``guide`` that take the same batch arguments, and the accessors a user
needs (``encode``, ``decode``, ``reconstruct``, ``sample``).
"""
from __future__ import annotations

import uuid

import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.nn import PyroModule, pyro_method
from torch import nn

from ppl_vae._validation import positive_integer
from ppl_vae.models.inputs import check_batch, check_decoder_size, encoder_input_shape, network_dtype
from ppl_vae.models.likelihoods import check_likelihood, likelihood, likelihood_mean
from ppl_vae.nn import GaussianHead


class StandardNormalPrior(nn.Module):
    """p(z) = N(0, I_D), the default prior: ``forward()`` returns a distribution with
    ``event_shape (D,)`` on the module's device.

    :param dim: latent dimension D.
    """

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = positive_integer("dim", dim)
        self.register_buffer("loc", torch.zeros(dim))
        self.register_buffer("scale", torch.ones(dim))

    def forward(self) -> dist.TorchDistribution:
        """N(0, I_D) as a distribution with ``event_shape (D,)``."""
        return dist.Normal(self.loc, self.scale).to_event(1)


def unique_pyro_name(prefix: str) -> str:
    """A Pyro name for a new model instance: ``prefix`` and a random suffix
    (``VAE_3f9c0a1b2d4e``, from :func:`uuid.uuid4`, so no count is kept in the process and
    the seeded random generators are not drawn from). Pyro registers a ``PyroModule``'s
    parameters in its global parameter store under the module's name, so two instances with
    the same name would share (silently overwrite) each other's parameters under
    ``pyro.optim``; with these names two instances train independently."""
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


def batch_size_of(data: torch.Tensor | None, batch_size: int | None, data_name: str = "x") -> int:
    """B: ``data.shape[0]``, or ``batch_size`` when the model runs without observations (prior
    predictive); a ``ValueError`` naming both when neither, or two different sizes, are given."""
    if data is not None:
        if batch_size is not None and batch_size != data.shape[0]:
            raise ValueError(f"batch_size={batch_size} disagrees with {data_name} of {data.shape[0]} rows")
        return data.shape[0]
    if batch_size is None:
        raise ValueError(f"without {data_name}, give batch_size: the number of prior predictive draws")
    return positive_integer("batch_size", batch_size)


def one_draw_per_point(latent: torch.Tensor, site: str) -> torch.Tensor:
    """``latent`` ``(B, D)``, refused when it carries a leading dimension of draws, as under
    ``pyro.infer.Predictive(..., parallel=True)``: the library's networks take one batch of
    points, so draw the samples one by one (``parallel=False``, Predictive's default)."""
    if latent.dim() != 2:
        raise ValueError(
            f"site {site!r} has shape {tuple(latent.shape)}, not (batch, dim): the model draws one sample at a "
            "time; use pyro.infer.Predictive(..., parallel=False)"
        )
    return latent


def data_scale(batch_size: int, data_size: int | None) -> float:
    """The factor ``N / B`` that turns a minibatch sum into an estimate of the
    whole-data-set sum (1 when ``data_size`` is ``None``)."""
    if data_size is None:
        return 1.0
    return float(data_size) / float(batch_size)


class VAE(PyroModule):
    r"""A beta-VAE with a pluggable prior and likelihood.

    Generative model and guide, for a batch of B points::

        z_n ~ p(z)
        x_n ~ p(x | decoder(z_n))           n = 1..B
        q(z_n | x_n) = N(loc(x_n), diag scale(x_n)^2)

    With :class:`~ppl_vae.infer.MeanFieldELBO` (``beta``) the objective is
    :math:`\sum_n E_q[\log p(x_n|z_n)] - \beta\,KL(q(z_n|x_n) \| p(z))`; weights live in
    the objective, so the model is the same Pyro program for every beta (with Pyro's
    :class:`~pyro.infer.TraceMeanField_ELBO`, beta = 1).

    :param encoder: network ``x (B, *event) -> features (B, F)`` with attribute
        ``out_features`` = F.
    :param decoder: network ``z (B, D) -> decoded (B, *event)``.
    :param latent_dim: D.
    :param prior: module whose ``forward()`` returns p(z) with ``event_shape (D,)``
        (see :mod:`ppl_vae.distributions`); defaults to N(0, I).
    :param likelihood: ``"bernoulli"``, ``"gaussian"`` or ``"laplace"``.
    :param likelihood_scale: fixed scale of a Gaussian or Laplace likelihood.
    :param data_size: N; when set, every per-point site is scaled by N / B so that the
        loss estimates the whole-data-set objective; when ``None`` the loss is the
        minibatch sum.

    ``model`` and ``guide`` check ``x`` at their entry (:func:`~ppl_vae.models.inputs.check_batch`:
    a tensor of the encoder's input shape, where the encoder is one of :mod:`ppl_vae.nn`, free
    of NaN and infinities) and refuse it in one line naming ``x``, before Pyro's shape table;
    a decoder of :mod:`ppl_vae.nn` must take ``latent_dim`` features.

    A VAE of 4-feature binary data, one step of Pyro's SVI with the library's ELBO:

    >>> import pyro, torch
    >>> from pyro.infer import SVI
    >>> from ppl_vae.infer import MeanFieldELBO
    >>> from ppl_vae.nn import MLP, mlp_decoder
    >>> vae = VAE(MLP([4, 16]), mlp_decoder(2, [16], (4,)), latent_dim=2)
    >>> x = torch.rand(8, 4).round()
    >>> svi = SVI(vae.model, vae.guide, pyro.optim.Adam({"lr": 1e-3}), MeanFieldELBO())
    >>> loss = svi.step(x)
    >>> vae.reconstruct(x).shape
    torch.Size([8, 4])
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
        super().__init__(name=unique_pyro_name(type(self).__name__))
        positive_integer("latent_dim", latent_dim)
        if data_size is not None:
            positive_integer("data_size", data_size)
        check_likelihood(likelihood, likelihood_scale)
        check_decoder_size(decoder, latent_dim)
        prior = prior if prior is not None else StandardNormalPrior(latent_dim)
        if getattr(prior, "dim", latent_dim) != latent_dim:
            raise ValueError(
                f"prior has dimension {prior.dim} but latent_dim is {latent_dim}"
            )
        self.encoder = encoder
        #: what one point of ``x`` must be (:func:`~ppl_vae.models.inputs.encoder_input_shape`).
        self.point_input = encoder_input_shape(encoder)
        self.head = GaussianHead(encoder.out_features, latent_dim)
        self.decoder = decoder
        self.prior = prior
        self.latent_dim = int(latent_dim)
        self.likelihood = likelihood
        self.likelihood_scale = likelihood_scale
        self.data_size = data_size

    @pyro_method
    def model(self, x: torch.Tensor | None = None, batch_size: int | None = None) -> torch.Tensor:
        """p(x, z) for ``x (B, *event)``; without ``x``, ``batch_size`` draws from the prior
        predictive. Returns the decoded batch ``(B, *event)``. With Pyro::

            prior_draws = Predictive(vae.model, num_samples=S)(batch_size=B)["x"]      # (S, B, *event)
            # posterior predictive: z from the guide on x, x unobserved (x=None) in the model
            z = Predictive(vae.guide, num_samples=S)(x)["z"]                           # (S, B, D)
            replicates = Predictive(vae.model, posterior_samples={"z": z})(batch_size=B)["x"]

        ``Predictive(vae.model, guide=vae.guide, ...)(x)["x"]`` returns x itself (Pyro returns
        observed values), and ``parallel=True`` is refused: the networks take one batch of
        points at a time.

        :param x: ``(B, *event)`` data batch, observed at site ``x``; ``None`` to draw.
        :param batch_size: with ``x=None``, the number B of points to draw.
        """
        decoder = self.decoder  # a PyroModule registers a network's parameters on each access
        if x is not None:
            check_batch("x", x, self.point_input, network_dtype(decoder))
        batch = batch_size_of(x, batch_size)
        with pyro.plate("data", batch), poutine.scale(scale=data_scale(batch, self.data_size)):
            z = one_draw_per_point(pyro.sample("z", self.prior().expand([batch])), "z")
            decoded = decoder(z)
            pyro.sample(
                "x",
                likelihood(self.likelihood, decoded, decoded.dim() - 1, self.likelihood_scale),
                obs=x,
            )
        return decoded

    @pyro_method
    def guide(self, x: torch.Tensor) -> torch.Tensor:
        """q(z | x) for ``x (B, *event)``; returns the sampled ``z (B, D)``.

        :param x: ``(B, *event)`` data batch.
        """
        encoder = self.encoder  # a PyroModule registers a network's parameters on each access
        batch = check_batch("x", x, self.point_input, network_dtype(encoder)).shape[0]
        loc, scale = self.head(encoder(x))
        with pyro.plate("data", batch), poutine.scale(scale=data_scale(batch, self.data_size)):
            return pyro.sample("z", dist.Normal(loc, scale).to_event(1))

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Posterior means ``(B, D)`` of q(z | x) for ``x (B, *event)``.

        :param x: ``(B, *event)`` data points.
        """
        return self.head(self.encoder(x))[0]

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """The likelihood's mean ``(B, *event)`` for latents ``z (B, D)``.

        :param z: ``(B, D)`` latent codes.
        """
        return likelihood_mean(self.likelihood, self.decoder(z))

    def reconstruct(self, x: torch.Tensor) -> torch.Tensor:
        """Decode the posterior mean: ``x (B, *event) -> (B, *event)``.

        :param x: ``(B, *event)`` data points.
        """
        return self.decode(self.encode(x))

    def sample(self, n: int, mean: bool = False) -> torch.Tensor:
        """n draws x ~ p(x | z), z ~ p(z): ``(n, *event)``; with ``mean=True`` the likelihood's
        means instead (what pictures of samples show).

        :param n: number of draws.
        :param mean: return the likelihood's means instead of draws from it.
        """
        decoded = self.decoder(self.prior().sample((n,)))
        if mean:
            return likelihood_mean(self.likelihood, decoded)
        return likelihood(self.likelihood, decoded, decoded.dim() - 1, self.likelihood_scale).sample()
