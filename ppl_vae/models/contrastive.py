"""The contrastive VAE (Abid & Zou 2019): salient features of a target set against a background set.

Generative story, for a batch of B target points x and B' background points b (unpaired, of
different sizes)::

    s_n ~ p(s),  z_n ~ p(z),   x_n ~ p(x | f([s_n, z_n]))      n = 1..B    (target)
                 z_m ~ p(z),   b_m ~ p(b | f([0,   z_m]))      m = 1..B'   (background)

with one decoder f; the background has no salient site at all (s = 0 is fed to the decoder,
not sampled). The guide is the paper's pair of encoders, mean field::

    q(s_n | x_n) q(z_n | x_n)     and     q(z_m | b_m)   (the same q(z|.) network)

With :class:`~pyro.infer.TraceMeanField_ELBO` the objective is the sum of the paper's target
bound (eq. 3) and background bound (eq. 4); :class:`ppl_vae.infer.contrastive.ContrastiveELBO`
adds the total-correlation term (eq. 5).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.infer.util import is_validation_enabled
from pyro.nn import PyroModule, pyro_method
from torch import nn

from ppl_vae._constants import CONTRASTIVE_LIKELIHOODS
from ppl_vae._validation import choice, positive_integer
from ppl_vae.models.inputs import ModelInputError, all_finite, check_decoder_size, check_dtype, network_dtype
from ppl_vae.models.likelihoods import (
    COUNT_LIKELIHOODS,
    CountLikelihood,
    check_likelihood,
    likelihood,
    likelihood_mean,
)
from ppl_vae.models.vae import StandardNormalPrior, batch_size_of, data_scale, one_draw_per_point, unique_pyro_name
from ppl_vae.nn import MLP, GaussianHead, mlp_decoder


def check_contrastive_data(
    target: torch.Tensor | None, background: torch.Tensor | None, check_finite: bool = True,
    dtype: torch.dtype | None = None,
) -> None:
    """Raise :class:`~ppl_vae.models.inputs.ModelInputError` (a ``ValueError`` that stays one
    line under Pyro's trace) naming the argument when the target/background batch is unusable.

    Both must be floating-point tensors with at least one row and the same shape after the
    first dimension (``(B, *event)`` and ``(B', *event)``); at least one must be given. With
    ``check_finite`` NaN or infinite values are refused too (this reads the data back from the
    device, so the model and guide do it on the CPU or under Pyro's validation).

    :param target: ``(B, *event)`` target batch, or ``None``.
    :param background: ``(B', *event)`` background batch, or ``None``.
    :param check_finite: refuse NaN or infinite values too.
    :param dtype: the dtype of the networks that take them (``None``: any).
    """
    if target is None and background is None:
        raise ModelInputError("target and background are both None; give at least one batch")
    for name, data in (("target", target), ("background", background)):
        if data is None:
            continue
        if not isinstance(data, torch.Tensor):
            raise ModelInputError(f"{name} must be a torch.Tensor, got {type(data).__name__}")
        if not data.is_floating_point():
            raise ModelInputError(
                f"{name} must be floating point (convert counts and images with .float()), got dtype {data.dtype}"
            )
        check_dtype(name, data, dtype)
        if data.dim() < 2 or data.shape[0] == 0:
            raise ModelInputError(f"{name} must have shape (batch >= 1, *features), got {tuple(data.shape)}")
        if check_finite and not all_finite(data):
            raise ModelInputError(f"{name} contains NaN or infinite values")
    if target is not None and background is not None and target.shape[1:] != background.shape[1:]:
        raise ModelInputError(
            f"background must have the target's feature shape {tuple(target.shape[1:])}, "
            f"got {tuple(background.shape[1:])}"
        )


def _reads_back(*batches: torch.Tensor | None) -> bool:
    """Whether the model may read the batches' values back to check them: on the CPU (no
    device synchronisation) or under Pyro's validation."""
    return is_validation_enabled() or all(
        batch.device.type == "cpu" for batch in batches if isinstance(batch, torch.Tensor)
    )


class ContrastiveVAE(PyroModule):
    r"""The contrastive VAE of Abid & Zou (2019), eqs. (3)-(4), as a Pyro model/guide pair.

    :param salient_encoder: network ``x (B, *event) -> features (B, F_s)`` with ``out_features``.
    :param shared_encoder: network ``x (B, *event) -> features (B, F_z)`` with ``out_features``.
    :param decoder: network ``[s, z] (B, D_s + D_z) -> decoded (B, *event)`` (logits for
        Bernoulli, means for Gaussian/Laplace, log means for the count likelihoods).
    :param salient_dim: D_s.
    :param shared_dim: D_z.
    :param likelihood: ``"bernoulli"``, ``"gaussian"``, ``"laplace"``, ``"negative_binomial"``
        or ``"zinb"`` (the last two need ``event_shape=(F,)``).
    :param likelihood_scale: fixed scale of a Gaussian or Laplace likelihood.
    :param bias: ``False`` makes the Gaussian heads bias-free; with bias-free encoders and
        decoder (see :meth:`mlp`) an all-zero input maps to zero, which :meth:`denoise` and
        :meth:`generate_salient` rely on (paper, section 3).
    :param salient_prior: module whose ``forward()`` returns p(s) (default N(0, I)).
    :param shared_prior: module whose ``forward()`` returns p(z) (default N(0, I)).
    :param target_size: N, number of target points; scales the target plate by N / B.
    :param background_size: M, number of background points; scales the background plate by M / B'.
    :param event_shape: shape of one observation, needed for the count likelihoods' per-feature
        parameters.

    Differences from the authors' code: their loss is a batch mean of per-point terms (each
    data set weighted by its batch size); here each plate is scaled by its own data-set size,
    so the loss estimates the ELBO of both data sets and unequal sizes are weighted by size.
    The count likelihoods follow contrastiveVI (the maintained successor for RNA-seq): the
    encoders read ``log(1 + x)``; but there is no library-size factor: the decoder gives the
    log mean directly.

    Target and background sets of 10 binary features, one step of Pyro's SVI with the paper's
    objective:

    >>> import pyro, torch
    >>> from pyro.infer import SVI
    >>> from ppl_vae.infer import ContrastiveELBO
    >>> vae = ContrastiveVAE.mlp((10,), salient_dim=2, shared_dim=2, hidden=16)
    >>> target, background = torch.rand(8, 10).round(), torch.rand(8, 10).round()
    >>> svi = SVI(vae.model, vae.guide, pyro.optim.Adam({"lr": 1e-3}), ContrastiveELBO())
    >>> loss = svi.step(target=target, background=background)
    >>> vae.salient_embedding(target).shape
    torch.Size([8, 2])
    """

    #: The data groups it takes unpaired: :func:`ppl_vae.fit` batches the target and the
    #: background data each on its own, also where they are equal in length.
    unpaired_groups: ClassVar[tuple[str, ...]] = ("target", "background")

    def __init__(
        self,
        salient_encoder: nn.Module,
        shared_encoder: nn.Module,
        decoder: nn.Module,
        salient_dim: int,
        shared_dim: int,
        likelihood: str = "bernoulli",
        likelihood_scale: float | None = None,
        bias: bool = True,
        salient_prior: nn.Module | None = None,
        shared_prior: nn.Module | None = None,
        target_size: int | None = None,
        background_size: int | None = None,
        event_shape: Sequence[int] | None = None,
    ) -> None:
        super().__init__(name=unique_pyro_name(type(self).__name__))
        positive_integer("salient_dim", salient_dim)
        positive_integer("shared_dim", shared_dim)
        for name, value in (("target_size", target_size), ("background_size", background_size)):
            if value is not None:
                positive_integer(name, value)
        choice("likelihood", likelihood, CONTRASTIVE_LIKELIHOODS)
        self.counts = None
        if likelihood in COUNT_LIKELIHOODS:
            if event_shape is None or len(event_shape) != 1:
                raise ValueError(f"event_shape must be (features,) for a {likelihood} likelihood, got {event_shape}")
            self.counts = CountLikelihood(int(event_shape[0]), zero_inflated=likelihood == "zinb")
        else:
            check_likelihood(likelihood, likelihood_scale)
        check_decoder_size(decoder, salient_dim + shared_dim, "salient_dim + shared_dim")
        self.salient_encoder = salient_encoder
        self.shared_encoder = shared_encoder
        self.salient_head = GaussianHead(salient_encoder.out_features, salient_dim, bias=bias)
        self.shared_head = GaussianHead(shared_encoder.out_features, shared_dim, bias=bias)
        self.decoder = decoder
        self.salient_prior = salient_prior if salient_prior is not None else StandardNormalPrior(salient_dim)
        self.shared_prior = shared_prior if shared_prior is not None else StandardNormalPrior(shared_dim)
        for name, prior, dim in (("salient_prior", self.salient_prior, salient_dim), ("shared_prior", self.shared_prior, shared_dim)):
            if getattr(prior, "dim", dim) != dim:
                raise ValueError(f"{name} has dimension {prior.dim}, expected {dim}")
        self.salient_dim = salient_dim
        self.shared_dim = shared_dim
        self.likelihood = likelihood
        self.likelihood_scale = likelihood_scale
        self.target_size = target_size
        self.background_size = background_size

    @classmethod
    def mlp(
        cls,
        event_shape: Sequence[int],
        salient_dim: int = 2,
        shared_dim: int = 2,
        hidden: int = 128,
        bias: bool = True,
        **kwargs,
    ) -> ContrastiveVAE:
        """The paper's fully connected networks (appendix E): two encoders ``prod(event) -> hidden``
        (ReLU) and a decoder ``D_s + D_z -> hidden -> prod(event)``, all with or without biases.

        :param event_shape: shape of one observation, e.g. ``(1, 28, 28)`` or ``(genes,)``.
        :param salient_dim: D_s, the salient latent dimension.
        :param shared_dim: D_z, the shared latent dimension.
        :param hidden: width of the hidden layer of each network.
        :param bias: give every layer and Gaussian head a bias; ``False`` makes an all-zero input
            map to zero (see the class's ``bias``).
        :param kwargs: passed to the constructor (``likelihood``, ``target_size``, ...).
        """
        event_shape = tuple(int(d) for d in event_shape)
        features = math.prod(event_shape)

        def encoder() -> MLP:
            return MLP([features, hidden], bias=bias, final_activation=nn.ReLU())

        decoder = mlp_decoder(salient_dim + shared_dim, [hidden], event_shape, bias=bias)
        return cls(encoder(), encoder(), decoder, salient_dim, shared_dim, bias=bias, event_shape=event_shape, **kwargs)

    def _observation(self, decoded: torch.Tensor, event_dim: int) -> dist.TorchDistribution:
        if self.counts is not None:
            return self.counts(decoded)
        return likelihood(self.likelihood, decoded, event_dim, self.likelihood_scale)

    def _encoder_input(self, x: torch.Tensor) -> torch.Tensor:
        """``log(1 + x)`` for count likelihoods (scVI's ``log_variational``: raw counts span
        orders of magnitude), ``x`` otherwise."""
        return torch.log1p(x) if self.counts is not None else x

    @pyro_method
    def model(
        self,
        target: torch.Tensor | None = None,
        background: torch.Tensor | None = None,
        batch_size: int | None = None,
        background_batch_size: int | None = None,
    ) -> None:
        """p(target, s, z) p(background, z') for ``target (B, *event)`` and ``background (B', *event)``.

        Sites: ``target_s``, ``target_z``, ``target_x`` in plate ``target``; ``background_z``,
        ``background_x`` in plate ``background``. Either batch may be ``None`` (e.g. to score or
        check the target alone); in its place ``batch_size`` (target) or ``background_batch_size``
        draws from the prior predictive. With Pyro::

            prior_draws = Predictive(cvae.model, num_samples=S)(batch_size=B, background_batch_size=M)
            # "target_x" (S, B, *event), "background_x" (S, M, *event)
            # posterior predictive: s and z from the guide on the data, both data sites unobserved
            latents = Predictive(cvae.guide, num_samples=S)(target, background)
            # "target_s" (S, B, D_s), "target_z" (S, B, D_z), "background_z" (S, M, D_z)
            replicates = Predictive(cvae.model, posterior_samples=latents)(batch_size=B, background_batch_size=M)

        ``Predictive(cvae.model, guide=cvae.guide, ...)(target, background)`` returns the data
        themselves at ``target_x`` and ``background_x`` (Pyro returns observed values), and
        ``parallel=True`` is refused: the networks take one batch of points at a time.

        :param target: ``(B, *event)`` target batch (observed at ``target_x``), or ``None``.
        :param background: ``(B', *event)`` background batch (observed at ``background_x``), or ``None``.
        :param batch_size: with ``target=None``, the number B of target points to draw.
        :param background_batch_size: with ``background=None``, the number B' of background points to draw.
        """
        # Each access to a network attribute of a PyroModule registers its parameters with Pyro
        # again, so every network is read into a local once.
        decoder, shared_prior = self.decoder, self.shared_prior
        if batch_size is None and background_batch_size is None:
            check_contrastive_data(target, background, _reads_back(target, background), network_dtype(decoder))
        if target is not None or batch_size is not None:
            batch = batch_size_of(target, batch_size, "target")
            with pyro.plate("target", batch), poutine.scale(scale=data_scale(batch, self.target_size)):
                s = one_draw_per_point(pyro.sample("target_s", self.salient_prior().expand([batch])), "target_s")
                z = one_draw_per_point(pyro.sample("target_z", shared_prior().expand([batch])), "target_z")
                decoded = decoder(torch.cat([s, z], dim=-1))
                pyro.sample("target_x", self._observation(decoded, decoded.dim() - 1), obs=target)
        if background is not None or background_batch_size is not None:
            batch = batch_size_of(background, background_batch_size, "background")
            with pyro.plate("background", batch), poutine.scale(scale=data_scale(batch, self.background_size)):
                z = one_draw_per_point(pyro.sample("background_z", shared_prior().expand([batch])), "background_z")
                decoded = decoder(torch.cat([z.new_zeros(batch, self.salient_dim), z], dim=-1))
                pyro.sample("background_x", self._observation(decoded, decoded.dim() - 1), obs=background)

    @pyro_method
    def guide(self, target: torch.Tensor | None = None, background: torch.Tensor | None = None) -> None:
        """q(s|x) q(z|x) on the target batch and q(z|b) on the background batch (same site names
        and plates as :meth:`model`).

        :param target: ``(B, *event)`` target batch, or ``None``.
        :param background: ``(B', *event)`` background batch, or ``None``.
        """
        shared_encoder, shared_head = self.shared_encoder, self.shared_head  # registered once (see model)
        check_contrastive_data(target, background, _reads_back(target, background), network_dtype(shared_encoder))
        if target is not None:
            batch = target.shape[0]
            features = self._encoder_input(target)
            s_loc, s_scale = self.salient_head(self.salient_encoder(features))
            z_loc, z_scale = shared_head(shared_encoder(features))
            with pyro.plate("target", batch), poutine.scale(scale=data_scale(batch, self.target_size)):
                pyro.sample("target_s", dist.Normal(s_loc, s_scale).to_event(1))
                pyro.sample("target_z", dist.Normal(z_loc, z_scale).to_event(1))
        if background is not None:
            batch = background.shape[0]
            z_loc, z_scale = shared_head(shared_encoder(self._encoder_input(background)))
            with pyro.plate("background", batch), poutine.scale(scale=data_scale(batch, self.background_size)):
                pyro.sample("background_z", dist.Normal(z_loc, z_scale).to_event(1))

    def salient_embedding(self, x: torch.Tensor) -> torch.Tensor:
        """Posterior means of q(s | x): ``x (B, *event) -> (B, D_s)``, computed without
        gradients (a tensor that scikit-learn and numpy take as it is; differentiate through
        ``salient_head(salient_encoder(x))`` where gradients are wanted).

        :param x: ``(B, *event)`` data points (target or background).
        """
        with torch.no_grad():
            return self.salient_head(self.salient_encoder(self._encoder_input(x)))[0]

    def shared_embedding(self, x: torch.Tensor) -> torch.Tensor:
        """Posterior means of q(z | x): ``x (B, *event) -> (B, D_z)``, computed without
        gradients, as :meth:`salient_embedding`.

        :param x: ``(B, *event)`` data points (target or background).
        """
        with torch.no_grad():
            return self.shared_head(self.shared_encoder(self._encoder_input(x)))[0]

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """``[E q(s|x), E q(z|x)]``: ``x (B, *event) -> (B, D_s + D_z)``.

        :param x: ``(B, *event)`` data points.
        """
        return torch.cat([self.salient_embedding(x), self.shared_embedding(x)], dim=-1)

    def decode(self, latent: torch.Tensor) -> torch.Tensor:
        """The likelihood's mean ``(B, *event)`` for ``[s, z] (B, D_s + D_z)``.

        :param latent: ``(B, D_s + D_z)`` salient then shared codes.
        """
        decoded = self.decoder(latent)
        if self.counts is not None:
            return self.counts.mean(decoded)
        return likelihood_mean(self.likelihood, decoded)

    def reconstruct(self, x: torch.Tensor) -> torch.Tensor:
        """Decode both posterior means: ``x (B, *event) -> (B, *event)``.

        :param x: ``(B, *event)`` data points.
        """
        return self.decode(self.encode(x))

    def generate_salient(self, s: torch.Tensor) -> torch.Tensor:
        """Salient-only generation, ``f([s, 0])``: ``s (B, D_s) -> (B, *event)`` (paper, section 3, use 2).

        :param s: ``(B, D_s)`` salient codes.
        """
        return self.decode(torch.cat([s, s.new_zeros(s.shape[0], self.shared_dim)], dim=-1))

    def denoise(self, x: torch.Tensor) -> torch.Tensor:
        """Remove the shared (background) structure: ``x -> E q(s|x) -> f([s, 0])``,
        ``(B, *event) -> (B, *event)`` (paper, section 3, use 3, with the posterior mean for s).

        :param x: ``(B, *event)`` target points.
        """
        return self.generate_salient(self.salient_embedding(x))

    def sample(self, n: int, mean: bool = False) -> torch.Tensor:
        """n target draws x ~ p(x | s, z), s ~ p(s), z ~ p(z): ``(n, *event)``; with ``mean=True``
        the likelihood's means.

        :param n: number of draws.
        :param mean: return the likelihood's means instead of draws from it.
        """
        latent = torch.cat([self.salient_prior().sample((n,)), self.shared_prior().sample((n,))], dim=-1)
        if mean:
            return self.decode(latent)
        decoded = self.decoder(latent)
        return self._observation(decoded, decoded.dim() - 1).sample()
