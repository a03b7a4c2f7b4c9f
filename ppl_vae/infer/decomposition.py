r"""The Decomposition VAE's objective (Mathieu et al. 2019, Eq. 7).

.. math::

    \mathcal{L}_{\alpha,\beta} = \sum_n \Big( E_{q(z|x_n)}[\log p(x_n|z)]
        - \beta\, KL(q(z|x_n) \| p(z)) \Big) - \alpha\, N\, D(q(z), p(z))

The sum over n is the mean-field ELBO (:class:`~ppl_vae.infer.MeanFieldELBO`): the analytic
KL where one is registered (Gaussian guide and Gaussian prior), ``log q(z|x) - log p(z)`` at
the guide's sample otherwise (Student-t, mixture and sparse priors), weighted by beta (beta
= 0, the paper's Fig. 3 bottom row, is allowed). The divergence is a *batch-level* term,
:class:`AggregateDivergence`: it enters the model trace as one
``pyro.factor`` site outside the data plate, weighted by the number of points N the ELBO's
sum stands for (B, or the model's ``data_size``), so that alpha means what it means in Eq. 7,
where every term is per data point. Pyro then counts it like any observed site: ``loss`` and
``differentiable_loss`` agree by construction and the term is visible by name in a trace.

Under data parallelism (N processes with B points each, :mod:`ppl_vae.infer.distributed`)
D is a function of the global batch of N B points, not of each process's B: the MMD
compares the encodings and prior draws of every process, and q(z) of the inclusive KL is
the aggregate encoding of the global batch. Each process's factor keeps its own N (its B
points, or ``data_size``), so the processes' losses add up (without ``data_size``) or
average (with it, as DDP's averaged gradients do) to the loss of one process with batch
N B, term for term.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyro.distributions as dist
import torch
from pyro import poutine
from torch.utils.checkpoint import checkpoint

from ppl_vae._constants import DIVERGENCES
from ppl_vae._storage import stored_as_float
from ppl_vae._validation import choice, positive_integer, site_name
from ppl_vae.infer.divergences import DEFAULT_MMD_LENGTH_SCALES, aggregate_log_density, mmd_dimensionwise
from ppl_vae.infer.mean_field import MeanFieldELBO
from ppl_vae.infer.terms import Term, TermSites, diagonal_normal_parameters, per_particle

__all__ = ["DIVERGENCES", "AggregateDivergence", "DecompositionELBO", "aggregate_encodings"]


def _prior_draws(prior: dist.Distribution) -> torch.Tensor:
    """One draw of the model's prior site per data point, as the site's value is shaped
    ``(..., B, D)``, reparameterised when the prior allows it, so that the divergence's
    gradient reaches learned prior parameters."""
    return prior.rsample() if prior.has_rsample else prior.sample()


class AggregateDivergence(Term):
    r""":math:`D(q(z), p(z))` between the aggregate posterior and the prior of a latent site
    (Mathieu et al. 2019, Eq. 7). Per training step, with ``z_n ~ q(z|x_n)`` the guide's sample
    and ``z'_n ~ p(z)`` one prior draw per point:

    - ``divergence="mmd"``: :func:`~ppl_vae.infer.mmd_dimensionwise` between ``{z_n}`` and
      ``{z'_n}`` (Eq. 10).
    - ``divergence="inclusive_kl"``: KL(p(z) || q(z)) estimated as
      ``mean_n [log p(z'_n) - log q(z'_n)]``, ``log q`` the density of the aggregate encoding
      (:func:`~ppl_vae.infer.aggregate_log_density`) of the minibatch, or, when the objective is
      called with the keyword argument ``aggregate_data`` (:meth:`inputs`), of that whole data
      set encoded by the guide in chunks (App. B; :func:`aggregate_encodings`)::

          elbo = DecompositionELBO(alpha=1.0, divergence="inclusive_kl")
          svi.step(x=X[batch], aggregate_data={"x": X})  # ppl_vae.fit(..., elbo_arguments=...)

    Under data parallelism the MMD compares the gathered samples of every process and the
    aggregate encoding gathers every process's q(z|x_n) (with ``aggregate_data`` each process
    encodes the whole set). Gradients reach the encoder through ``z_n`` and q(z|x), learned prior
    parameters through reparameterised prior draws; a prior without ``rsample`` (mixture,
    sparse) gets the inclusive KL's gradient through a score-function term with a
    leave-one-out baseline, and none from the MMD.

    :param site: the latent site, a ``(B, D)`` vector in the data plate.
    :param alpha: weight alpha.
    :param divergence: ``"mmd"`` or ``"inclusive_kl"``.
    :param length_scales: the MMD kernel's length scales.
    :param chunk_size: encodings per block in the aggregate density and per guide call on
        ``aggregate_data``.
    :param name: the factor's name.
    """

    #: The keyword argument of the objective's call that holds the whole data set.
    AGGREGATE_DATA = "aggregate_data"

    def __init__(
        self,
        site: str,
        alpha: float,
        divergence: str = "mmd",
        length_scales: Sequence[float] = DEFAULT_MMD_LENGTH_SCALES,
        chunk_size: int = 4096,
        name: str = "aggregate_divergence",
    ) -> None:
        super().__init__(name, alpha, "alpha")
        self.divergence = choice("divergence", divergence, DIVERGENCES)
        self.chunk_size = positive_integer("chunk_size", chunk_size)
        self.site = site_name("site", site)
        self.length_scales = tuple(float(s) for s in length_scales)

    def num_points(self, sites: TermSites) -> torch.Tensor | float:
        """N of the latent site.

        :param sites: what the term reads for one particle."""
        return sites.num_points(self.site)

    def inputs(self) -> tuple[str, ...]:
        """``("aggregate_data",)``: keyword arguments of the guide for a whole data set, e.g.
        ``{"x": X (N, ...)}`` (inclusive KL only), re-encoded with gradients on every call, chunk
        by chunk under activation checkpointing (memory O(N D) plus one chunk's activations)."""
        return (self.AGGREGATE_DATA,)

    def evaluate(self, sites: TermSites) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``(D(q(z), p(z)), {})``, the MMD or the inclusive KL.

        :param sites: what the term reads for one particle (with ``aggregate_data`` among its
            ``inputs`` when the objective's call gave it)."""
        aggregate_data = sites.inputs.get(self.AGGREGATE_DATA)
        if aggregate_data is not None and self.divergence != "inclusive_kl":
            raise ValueError(f"aggregate_data is used by the inclusive KL only, got divergence={self.divergence!r}")
        guide_site = sites.guide_site(self.site)
        prior = sites.model_site(self.site)["fn"]
        value = guide_site["value"]
        drawn = _prior_draws(prior)
        prior_z, posterior_z = per_particle(drawn), per_particle(value)  # (P, B, D)
        gather = sites.global_batch.all_gather
        if self.divergence == "mmd":
            estimates = [mmd_dimensionwise(gather(posterior), gather(draws), self.length_scales)
                         for posterior, draws in zip(posterior_z, prior_z, strict=True)]
            return torch.stack(estimates).mean(), {}
        prior_log_prob = prior.log_prob(drawn).reshape(prior_z.shape[:2])  # (P, B)
        if aggregate_data is None:
            loc, scale = diagonal_normal_parameters(guide_site["fn"], self.site)
            encodings = [(gather(particle_loc), gather(particle_scale)) for particle_loc, particle_scale
                         in zip(per_particle(loc.expand_as(value)), per_particle(scale.expand_as(value)), strict=True)]
        else:
            whole = aggregate_encodings(sites.guide, aggregate_data, self.site, self.chunk_size, prior_z.device)
            encodings = [whole] * prior_z.shape[0]
        estimates = [self._inclusive_kl(draws, log_prob, loc, scale, prior, gather)
                     for draws, log_prob, (loc, scale) in zip(prior_z, prior_log_prob, encodings, strict=True)]
        return torch.stack(estimates).mean(), {}

    def _inclusive_kl(self, prior_z: torch.Tensor, prior_log_prob: torch.Tensor, loc: torch.Tensor,
                      scale: torch.Tensor, prior: dist.Distribution, gather: Callable) -> torch.Tensor:
        """One particle's ``mean_n [log p(z'_n) - log q(z'_n)]`` (with the score-function term of
        a prior without ``rsample``), from its prior draws ``(B, D)``, their log-densities
        ``(B,)`` and the aggregate encoding's ``loc`` and ``scale`` ``(M, D)``."""
        log_ratio = prior_log_prob - aggregate_log_density(prior_z, loc, scale, self.chunk_size)
        estimate = log_ratio.mean()
        if not prior.has_rsample and prior_log_prob.requires_grad:
            detached = log_ratio.detach()
            every_draw = gather(detached)
            if every_draw.shape[0] > 1:
                baseline = (every_draw.sum() - detached) / (every_draw.shape[0] - 1)
                estimate = estimate + ((detached - baseline) * (prior_log_prob - prior_log_prob.detach())).mean()
        return estimate


def aggregate_encodings(
    guide: Callable, data: Mapping[str, torch.Tensor], site: str, chunk_size: int, device: torch.device | str
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(N, D)`` means and scales of q(z | x_j) of the guide's ``site`` over a whole data set.

    The guide runs on ``data`` (its keyword arguments, tensors ``(N, ...)``) in chunks of
    ``chunk_size`` rows, blocked so that the calls leave no trace, each chunk moved to
    ``device`` (bool and uint8 storage converted to floats exactly as the training batches
    are: uint8 divided by 255) and, when gradients are on,
    run under activation checkpointing (its activations recomputed, with the same random
    state, in backward).

    :param guide: the guide callable, run on keyword arguments ``data``'s chunks; its site
        ``site`` must be a diagonal Normal.
    :param data: the guide's keyword arguments for the whole data set, tensors ``(N, ...)``
        with the same number of rows (on the host or the device).
    :param site: the name of the guide's latent site.
    :param chunk_size: rows per guide call, >= 1.
    :param device: the device each chunk is moved to (the training device).

    :raises ValueError: when ``data`` is not a non-empty mapping of tensors with the same
        number of rows.
    """
    if not isinstance(data, Mapping) or not data or not all(isinstance(v, torch.Tensor) for v in data.values()):
        raise ValueError(f"aggregate_data must map the guide's argument names to tensors (N, ...), got {data!r}")
    keys = list(data)
    size = data[keys[0]].shape[0]
    if any(data[key].shape[0] != size for key in keys):
        raise ValueError(f"aggregate_data's tensors must have the same number of rows, got {[tuple(data[k].shape) for k in keys]}")

    def encode(*chunk: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with poutine.block():
            node = poutine.trace(guide).get_trace(**dict(zip(keys, chunk, strict=True))).nodes[site]
        loc, scale = diagonal_normal_parameters(node["fn"], site)
        return loc.reshape(-1, loc.shape[-1]), scale.reshape(-1, scale.shape[-1])

    locs, scales = [], []
    for start in range(0, size, chunk_size):
        chunk = [stored_as_float(data[key][start : start + chunk_size].to(device)) for key in keys]
        if torch.is_grad_enabled():
            loc, scale = checkpoint(encode, *chunk, use_reentrant=False)
        else:
            loc, scale = encode(*chunk)
        locs.append(loc)
        scales.append(scale)
    return torch.cat(locs), torch.cat(scales)


class DecompositionELBO(MeanFieldELBO):
    r"""The beta-ELBO plus ``- alpha * D(q(z), p(z))`` (Mathieu et al. 2019, Eq. 7): a
    :class:`~ppl_vae.infer.MeanFieldELBO` with ``beta`` and one
    :class:`AggregateDivergence` term on the latent site.

    Works with any model/guide pair whose latent site ``latent`` is a ``(B, D)`` vector inside
    the data plate (:class:`~ppl_vae.models.decomposition.DecompositionVAE`,
    :class:`~ppl_vae.models.vae.VAE`). See :class:`AggregateDivergence` for
    the MMD and the inclusive KL, their estimators, gradients and data parallelism.

    Logged per data point (:attr:`~ppl_vae.infer.MeanFieldELBO.logged`): ``reconstruction`` =
    ``-E_q log p(x|z)``, ``kl`` = ``KL(q(z|x) || p(z))`` (analytic or Monte Carlo, as in the loss, without beta) and the
    divergence under ``factor_name``; the loss is ``N (reconstruction + beta kl + alpha D)``.
    With ``alpha = 0`` the divergence is still computed, without gradients, for the log, and no
    factor site is added: the objective is exactly the beta-VAE's.

    :param beta: weight of the per-point KL, >= 0.
    :param alpha: weight of D(q(z), p(z)), >= 0.
    :param divergence: ``"mmd"`` or ``"inclusive_kl"``.
    :param latent: name of the latent sample site.
    :param length_scales: the MMD kernel's length scales (authors' code default).
    :param chunk_size: encodings per block in the aggregate density and per guide call on
        ``aggregate_data``.
    :param factor_name: name of the divergence's ``pyro.factor`` site.
    :param extra_terms: further terms of :mod:`ppl_vae.infer.terms`.
    :param kwargs: passed to :class:`~pyro.infer.TraceMeanField_ELBO` (``num_particles``,
        ``vectorize_particles``: the divergence is then taken within each particle's batch and
        averaged over particles, as sequential particles give it).
    :raises ValueError: for negative or non-finite ``alpha`` or ``beta``, an unknown
        ``divergence``, a non-positive ``chunk_size``.

    For the inclusive KL over a whole data set instead of the minibatch, call the objective
    with the keyword argument ``aggregate_data`` (the guide's arguments for the whole set, e.g.
    ``{"x": X}``), which goes to the divergence, not to the model; :func:`ppl_vae.fit` passes it
    on every step as ``elbo_arguments={"aggregate_data": {"x": X}}``:

    >>> import torch
    >>> from ppl_vae.models import VAE
    >>> from ppl_vae.nn import MLP, mlp_decoder
    >>> vae = VAE(MLP([2, 16]), mlp_decoder(2, [16], (2,)), latent_dim=2, likelihood="gaussian",
    ...           likelihood_scale=0.1)
    >>> X = torch.randn(256, 2)
    >>> elbo = DecompositionELBO(alpha=1.0, divergence="inclusive_kl")
    >>> loss = elbo.differentiable_loss(vae.model, vae.guide, x=X[:64], aggregate_data={"x": X})
    >>> loss.requires_grad, sorted(elbo.logged)
    (True, ['aggregate_divergence', 'kl', 'reconstruction'])
    """

    def __init__(
        self,
        beta: float = 1.0,
        alpha: float = 0.0,
        divergence: str = "mmd",
        latent: str = "z",
        length_scales: Sequence[float] = DEFAULT_MMD_LENGTH_SCALES,
        chunk_size: int = 4096,
        factor_name: str = "aggregate_divergence",
        extra_terms: Sequence[Term] = (),
        **kwargs: Any,
    ) -> None:
        divergence_term = AggregateDivergence(
            latent, alpha, divergence, length_scales, chunk_size, name=factor_name
        )
        super().__init__(beta=beta, terms=[divergence_term, *extra_terms], **kwargs)

    @property
    def alpha(self) -> float:
        """Weight of the aggregate divergence."""
        return self.terms[0].weight

    @property
    def divergence(self) -> str:
        """``"mmd"`` or ``"inclusive_kl"``."""
        return self.terms[0].divergence
