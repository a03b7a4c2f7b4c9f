r"""The Decomposition VAE's objective (Mathieu et al. 2019, Eq. 7).

.. math::

    \mathcal{L}_{\alpha,\beta} = \sum_n \Big( E_{q(z|x_n)}[\log p(x_n|z)]
        - \beta\, KL(q(z|x_n) \| p(z)) \Big) - \alpha\, N\, D(q(z), p(z))

The sum over n is the mean-field ELBO (:class:`~ppl_vae.infer.MeanFieldELBO`): the analytic
KL where one is registered (Gaussian guide and Gaussian prior), ``log q(z|x) - log p(z)`` at
the guide's sample otherwise (Student-t, mixture and sparse priors), weighted by beta (beta
= 0, the paper's Fig. 3 bottom row, is allowed). The divergence is a *batch-level* term,
:class:`~ppl_vae.infer.terms.AggregateDivergence`: it enters the model trace as one
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

from collections.abc import Sequence
from typing import Any

from ppl_vae.infer.divergences import DEFAULT_MMD_LENGTH_SCALES
from ppl_vae.infer.mean_field import MeanFieldELBO
from ppl_vae.infer.terms import DIVERGENCES, AggregateDivergence, Term

__all__ = ["DIVERGENCES", "DecompositionELBO"]


class DecompositionELBO(MeanFieldELBO):
    r"""The beta-ELBO plus ``- alpha * D(q(z), p(z))`` (Mathieu et al. 2019, Eq. 7): a
    :class:`~ppl_vae.infer.MeanFieldELBO` with ``beta`` and one
    :class:`~ppl_vae.infer.terms.AggregateDivergence` term on the latent site.

    Works with any model/guide pair whose latent site ``latent`` is a ``(B, D)`` vector inside
    the data plate (:class:`~ppl_vae.models.decomposition.DecompositionVAE`,
    :class:`~ppl_vae.models.vae.VAE`). See :class:`~ppl_vae.infer.terms.AggregateDivergence` for
    the MMD and the inclusive KL, their estimators, gradients and data parallelism.

    Logged per data point (:attr:`logged`): ``reconstruction`` = ``-E_q log p(x|z)``, ``kl`` =
    ``KL(q(z|x) || p(z))`` (analytic or Monte Carlo, as in the loss, without beta) and the
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
    :param kwargs: passed to :class:`~pyro.infer.TraceMeanField_ELBO` (``num_particles``;
        ``vectorize_particles`` is not supported: the aggregate posterior is over the data
        plate).
    :raises ValueError: for negative or non-finite ``alpha`` or ``beta``, an unknown
        ``divergence``, a non-positive ``chunk_size``.

    For the inclusive KL over a whole data set instead of the minibatch, call the objective
    with the keyword argument ``aggregate_data`` (the guide's arguments for the whole set, e.g.
    ``{"x": X}``), which goes to the divergence, not to the model::

        elbo = DecompositionELBO(alpha=1.0, divergence="inclusive_kl")
        elbo.differentiable_loss(vae.model, vae.guide, x=X[:64], aggregate_data={"x": X})
        ppl_vae.fit(vae, elbo, {"x": X}, elbo_arguments={"aggregate_data": {"x": X}})
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
        if kwargs.get("vectorize_particles"):
            raise ValueError("vectorize_particles=True is not supported by DecompositionELBO")
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
