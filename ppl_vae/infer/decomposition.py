r"""The Decomposition VAE's objective (Mathieu et al. 2019, Eq. 7).

.. math::

    \mathcal{L}_{\alpha,\beta} = \sum_n \Big( E_{q(z|x_n)}[\log p(x_n|z)]
        - \beta\, KL(q(z|x_n) \| p(z)) \Big) - \alpha\, N\, D(q(z), p(z))

The sum over n is Pyro's ELBO: :class:`~pyro.infer.TraceMeanField_ELBO` uses the
analytic KL where one is registered (Gaussian guide and Gaussian prior) and falls back on
``log p(z) - log q(z|x)`` at the guide's sample otherwise (Student-t, mixture and sparse
priors). Beta weights every latent site of model and guide, as ``poutine.scale`` would
(but beta = 0, the paper's Fig. 3 bottom row, is allowed). The divergence is a
*batch-level* term: it enters the model trace as one ``pyro.factor`` site outside the data
plate, weighted by the number of points N the ELBO's sum stands for (B, or the model's
``data_size``), so that alpha means what it means in Eq. 7, where every term is per data
point. Pyro then counts it like any observed site: ``loss`` and ``differentiable_loss``
agree by construction and the term is visible by name in a trace.

Under data parallelism (N processes with B points each, :mod:`ppl_vae.infer.distributed`)
D is a function of the global batch of N B points, not of each process's B: the MMD
compares the encodings and prior draws of every process, and q(z) of the inclusive KL is
the aggregate encoding of the global batch. Each process's factor keeps its own N (its B
points, or ``data_size``), so the processes' losses add up (without ``data_size``) or
average (with it, as DDP's averaged gradients do) to the loss of one process with batch
N B, term for term.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.poutine.messenger import Messenger
from torch.distributions import kl_divergence
from torch.utils.checkpoint import checkpoint

from ppl_vae.infer.distributed import all_gather
from ppl_vae.infer.divergences import (
    DEFAULT_MMD_LENGTH_SCALES,
    aggregate_log_density,
    mmd_dimensionwise,
)
from ppl_vae.infer.mean_field import MeanFieldELBO, scored_site

DIVERGENCES = ("mmd", "inclusive_kl")


class _LatentWeight(Messenger):
    """Multiplies the scale of every latent (unobserved) sample site by ``weight`` and
    keeps the message of the site named ``latent``, with the scale it had before."""

    def __init__(self, weight: float, latent: str) -> None:
        super().__init__()
        self.weight = weight
        self.latent = latent
        self.site: dict[str, Any] | None = None
        self.unweighted_scale: float | torch.Tensor = 1.0

    def _process_message(self, msg: dict[str, Any]) -> None:
        if msg["type"] != "sample" or msg["is_observed"]:
            return
        if msg["name"] == self.latent:
            self.site = msg
            self.unweighted_scale = msg["scale"]
        msg["scale"] = self.weight * msg["scale"]


def _diagonal_normal(fn: dist.Distribution, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(loc, scale)`` of a diagonal Normal guide site (``Normal(...).to_event(1)``)."""
    base = fn.base_dist if isinstance(fn, dist.Independent) else fn
    if not isinstance(base, dist.Normal):
        raise ValueError(
            f"the inclusive KL needs a diagonal Normal q({name} | x); the guide's site "
            f"{name!r} is a {type(fn).__name__}"
        )
    return base.loc, base.scale


def _prior_draws(prior: dist.Distribution) -> torch.Tensor:
    """One draw of the model's prior site per data point ``(B, D)``, reparameterised when the
    prior allows it, so that the divergence's gradient reaches learned prior parameters
    through the samples."""
    z = prior.rsample() if prior.has_rsample else prior.sample()
    return z.reshape(-1, z.shape[-1])


class DecompositionELBO(MeanFieldELBO):
    r"""The beta-ELBO plus ``- alpha * D(q(z), p(z))`` (Mathieu et al. 2019, Eq. 7).

    Works with any model/guide pair whose latent site ``latent`` is a ``(B, D)`` vector
    inside the data plate (:class:`~ppl_vae.models.decomposition.DecompositionVAE`, or
    :class:`~ppl_vae.models.vae.VAE` with ``beta=1``: a model's own beta multiplies this
    one). Per training step, with ``z_n ~ q(z|x_n)`` the guide's sample and
    ``z'_n ~ p(z)`` one prior draw per point (B each, the paper's choice):

    - ``divergence="mmd"``: :func:`~ppl_vae.infer.mmd_dimensionwise` between ``{z_n}``
      and ``{z'_n}`` (Eq. 10; the sparsity experiment).
    - ``divergence="inclusive_kl"``: KL(p(z) || q(z)) estimated as
      ``mean_n [log p(z'_n) - log q(z'_n)]`` with ``log q`` the log-density of the
      aggregate encoding of the minibatch (:func:`~ppl_vae.infer.aggregate_log_density`),
      or, with ``aggregate_data``, of a whole data set, encoded by the guide in chunks
      (App. B: the pinwheel experiment uses B = n = 400, where both coincide).

    Under data parallelism "the minibatch" is the global batch of every process: the MMD
    is computed between the gathered ``{z_n}`` and ``{z'_n}`` of all processes (on each of
    them), the aggregate encoding of the inclusive KL gathers every process's ``q(z|x_n)``,
    and each process averages ``log p - log q`` over its own B prior draws (the mean of
    these per-process estimates is the global one; the leave-one-out baseline below is
    taken over all draws). With ``aggregate_data`` every process encodes the whole data
    set itself and nothing is gathered but the baseline.

    Gradients reach the encoder through ``z_n`` and ``q(z|x)``, and learned prior
    parameters through the prior draws when the prior has ``rsample`` (Gaussian,
    Student-t). A mixture or sparse prior has no ``rsample``: its parameters get the
    inclusive KL's gradient through a score-function term with a leave-one-out baseline
    (as :func:`~ppl_vae.infer.inclusive_kl`), and no gradient from the MMD.

    We read the prior from the model trace's latent site (expanded over the data plate)
    rather than calling :func:`~ppl_vae.infer.inclusive_kl`, which wants an unexpanded
    prior; the estimate is the same with B = number of prior draws.

    Terms for logging (``terms``, detached, of the last particle, per data point):
    ``reconstruction`` = ``-E_q log p(x|z)``, ``kl`` = ``KL(q(z|x) || p(z))`` (analytic or
    Monte Carlo, as in the loss, without beta), ``divergence`` = D; then
    ``loss = N (reconstruction + beta kl + alpha divergence)``. With ``alpha = 0`` the
    divergence is still computed, without gradients, for the log, and no factor site is
    added: the objective is exactly the beta-VAE's.

    :param beta: weight of the per-point KL, >= 0.
    :param alpha: weight of D(q(z), p(z)), >= 0.
    :param divergence: ``"mmd"`` or ``"inclusive_kl"``.
    :param latent: name of the latent sample site.
    :param length_scales: the MMD kernel's length scales (authors' code default).
    :param aggregate_data: keyword arguments of the guide for a whole data set, e.g.
        ``{"x": X (N, ...)}``, whose encodings form q(z) in the inclusive KL (all of them
        are re-encoded, with gradients, every step, chunk by chunk under activation
        checkpointing: memory is O(N D) plus one chunk's encoder activations).
    :param chunk_size: encodings per block in the aggregate density and per guide call on
        ``aggregate_data``.
    :param factor_name: name of the divergence's ``pyro.factor`` site.
    :param kwargs: passed to :class:`~pyro.infer.TraceMeanField_ELBO` (``num_particles``;
        ``vectorize_particles`` is not supported: the aggregate posterior is over the
        data plate).
    :raises ValueError: for negative or non-finite ``alpha`` or ``beta``, an unknown
        ``divergence``, ``aggregate_data`` with the MMD, a non-positive ``chunk_size``.
    """

    def __init__(
        self,
        beta: float = 1.0,
        alpha: float = 0.0,
        divergence: str = "mmd",
        latent: str = "z",
        length_scales: Sequence[float] = DEFAULT_MMD_LENGTH_SCALES,
        aggregate_data: Mapping[str, torch.Tensor] | None = None,
        chunk_size: int = 4096,
        factor_name: str = "aggregate_divergence",
        **kwargs: Any,
    ) -> None:
        for name, value in (("beta", beta), ("alpha", alpha)):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if divergence not in DIVERGENCES:
            raise ValueError(f"divergence must be one of {DIVERGENCES}, got {divergence!r}")
        if aggregate_data is not None and divergence != "inclusive_kl":
            raise ValueError(
                f"aggregate_data is used by the inclusive KL only, got divergence={divergence!r}"
            )
        if aggregate_data is not None and not aggregate_data:
            raise ValueError("aggregate_data must name at least one tensor, got an empty mapping")
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
        if kwargs.get("vectorize_particles"):
            raise ValueError("vectorize_particles=True is not supported by DecompositionELBO")
        super().__init__(**kwargs)
        self.beta = float(beta)
        self.alpha = float(alpha)
        self.divergence = divergence
        self.latent = latent
        self.length_scales = tuple(float(s) for s in length_scales)
        self.aggregate_data = dict(aggregate_data) if aggregate_data is not None else None
        self.chunk_size = chunk_size
        self.factor_name = factor_name
        self.terms: dict[str, torch.Tensor] = {}
        self._last_divergence = torch.zeros(())
        self._aggregate_on_device: dict[torch.device, dict[str, torch.Tensor]] = {}

    def replay_obstacle(self) -> str | None:
        """With ``aggregate_data`` the loss re-encodes the whole data set under activation
        checkpointing, which a recording would unroll into one graph."""
        if self.aggregate_data is not None:
            return "DecompositionELBO with aggregate_data re-encodes the whole data set under activation checkpointing"
        return None

    def _get_trace(self, model, guide, args, kwargs):
        guide_weight = _LatentWeight(self.beta, self.latent)
        model_weight = _LatentWeight(self.beta, self.latent)
        model_trace, guide_trace = super()._get_trace(
            self._with_divergence(model_weight(model), guide, guide_weight, model_weight),
            guide_weight(guide),
            args,
            kwargs,
        )
        self.terms = self._terms(model_trace, guide_trace, model_weight)
        return model_trace, guide_trace

    def _with_divergence(
        self, model: Callable, guide: Callable, guide_weight: _LatentWeight, model_weight: _LatentWeight
    ) -> Callable:
        """The model followed by ``pyro.factor(factor_name, -alpha N D(q(z), p(z)))``."""

        def model_and_divergence(*args, **kwargs):
            result = model(*args, **kwargs)
            for weight in (guide_weight, model_weight):
                if weight.site is None:
                    raise ValueError(f"model and guide must have a latent sample site {self.latent!r}")
            with torch.set_grad_enabled(torch.is_grad_enabled() and self.alpha > 0):
                divergence = self._divergence(guide_weight.site, model_weight.site["fn"], guide)
            self._last_divergence = divergence.detach()
            if self.alpha > 0:
                pyro.factor(self.factor_name, -self.alpha * self._num_points(model_weight) * divergence)
            return result

        return model_and_divergence

    @staticmethod
    def _num_points(weight: _LatentWeight) -> torch.Tensor | float:
        """N: points in the latent site's batch times its data-plate scale (B or data_size)."""
        return weight.site["fn"].batch_shape.numel() * weight.unweighted_scale

    def _divergence(self, guide_site: dict[str, Any], prior: dist.Distribution, guide: Callable) -> torch.Tensor:
        prior_z = _prior_draws(prior)
        if self.divergence == "mmd":
            posterior_z = guide_site["value"].reshape(-1, prior_z.shape[-1])
            return mmd_dimensionwise(all_gather(posterior_z), all_gather(prior_z), self.length_scales)
        prior_log_prob = prior.log_prob(prior_z.reshape(prior.shape())).reshape(-1)
        if self.aggregate_data is None:
            loc, scale = _diagonal_normal(guide_site["fn"], self.latent)
            loc, scale = all_gather(loc.reshape(-1, loc.shape[-1])), all_gather(scale.reshape(-1, scale.shape[-1]))
        else:
            loc, scale = self._aggregate_encodings(guide, prior_z.device)
        log_ratio = prior_log_prob - aggregate_log_density(prior_z, loc, scale, self.chunk_size)
        estimate = log_ratio.mean()
        if not prior.has_rsample and prior_log_prob.requires_grad:
            detached = log_ratio.detach()
            every_draw = all_gather(detached)
            if every_draw.shape[0] > 1:
                baseline = (every_draw.sum() - detached) / (every_draw.shape[0] - 1)
                estimate = estimate + ((detached - baseline) * (prior_log_prob - prior_log_prob.detach())).mean()
        return estimate

    def _aggregate_encodings(self, guide: Callable, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """``(N, D)`` means and scales of q(z | x_j) over ``aggregate_data``, the guide run in
        chunks (blocked, so the calls leave no trace in the model's).

        With gradients on, each chunk is encoded under activation checkpointing
        (:func:`torch.utils.checkpoint.checkpoint`): only its means and scales are kept, and its
        encoder activations are recomputed, with the same random state, when the backward pass
        reaches it. Memory is then O(N D) plus one chunk's activations, instead of every chunk's
        activations at once."""
        if device not in self._aggregate_on_device:
            self._aggregate_on_device[device] = {
                key: (value if value.is_floating_point() else value.to(torch.get_default_dtype())).to(device)
                for key, value in self.aggregate_data.items()
            }
        data = self._aggregate_on_device[device]
        keys = list(data)
        size = data[keys[0]].shape[0]

        def encode(*chunk: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            with poutine.block():
                site = poutine.trace(guide).get_trace(**dict(zip(keys, chunk, strict=True))).nodes[self.latent]
            loc, scale = _diagonal_normal(site["fn"], self.latent)
            return loc.reshape(-1, loc.shape[-1]), scale.reshape(-1, scale.shape[-1])

        locs, scales = [], []
        for start in range(0, size, self.chunk_size):
            chunk = [data[key][start : start + self.chunk_size] for key in keys]
            if torch.is_grad_enabled():
                loc, scale = checkpoint(encode, *chunk, use_reentrant=False)
            else:
                loc, scale = encode(*chunk)
            locs.append(loc)
            scales.append(scale)
        return torch.cat(locs), torch.cat(scales)

    def _terms(self, model_trace, guide_trace, model_weight: _LatentWeight) -> dict[str, torch.Tensor]:
        """Per-point reconstruction, KL and divergence of this particle, detached.

        The log-densities are scored here in the caller's grad mode and kept in the traces
        (:func:`~ppl_vae.infer.mean_field.scored_site`), so the loss reuses them; only their
        sums are detached."""
        num_points = model_weight.site["fn"].batch_shape.numel()
        log_likelihood, kl = 0.0, 0.0
        for name, site in model_trace.nodes.items():
            if site["type"] != "sample" or site["infer"].get("is_auxiliary"):
                continue
            if site["is_observed"]:
                log_likelihood = log_likelihood + scored_site(model_trace, name)["unscaled_log_prob"].detach().sum()
                continue
            guide_site = guide_trace.nodes[name]
            try:
                with torch.no_grad():
                    kl = kl + kl_divergence(guide_site["fn"], site["fn"]).sum()
            except NotImplementedError:
                log_ratio = scored_site(guide_trace, name)["unscaled_log_prob"] - scored_site(model_trace, name)["unscaled_log_prob"]
                kl = kl + log_ratio.detach().sum()
        return {
            "reconstruction": torch.as_tensor(-log_likelihood / num_points),
            "kl": torch.as_tensor(kl / num_points),
            "divergence": self._last_divergence,
        }
