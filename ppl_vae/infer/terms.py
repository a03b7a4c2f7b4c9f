r"""The papers' extra loss terms as composable pieces, each a named ``pyro.factor`` site.

A term reads sites of one particle by name (the guide's trace and the model's sample sites)
and returns a *per-data-point* value v; an objective (:class:`~ppl_vae.infer.MeanFieldELBO`
and its presets) adds, after the model has run and outside every plate,

.. math::

    \texttt{pyro.factor(name, } -w \cdot N \cdot v\texttt{)}

with w the term's weight and N the number of data points the minibatch stands for (the batch
size times the data plate's scale: B, or the data-set size when the model scales its plate).
Minimising ``-ELBO`` then adds ``w N v`` to the loss, so each weight means what it means in the
papers, where every term is a per-point average. A term with weight 0 is computed without
gradients, for the log, and adds no site.

Some terms *replace* ELBO terms (PartedVAE's capacities replace the KLs of z and u; its entropy
and aggregate terms replace the KL of c). A term names the sites it replaces (``replaces``);
the objective marks them with ``mask=False`` in model and guide, so the estimator neither scores
nor counts them (their reparameterised samples still carry the likelihood's gradient, and the
relaxed c, whose density underflows at low temperature, is never evaluated).

This module holds the protocol (:class:`Term`, :class:`TermSites`) and the one generic term,
:class:`Capacity`: :math:`|KL(q(z|x) \| p(z)) - C(t)|` for a latent site (Burgess et al. 2018;
PartedVAE Eq. 6, z part). Each paper's own terms live with its objective:
:mod:`ppl_vae.infer.parted` (class capacity, entropy, aggregate class KL, Bhattacharyya
penalty), :mod:`ppl_vae.infer.decomposition` (the aggregate-posterior divergence) and
:mod:`ppl_vae.infer.contrastive` (the total correlation with its discriminator); every term is
also exported by :mod:`ppl_vae.infer`.

Batch-level quantities (a minibatch-average KL inside ``|.|``, the aggregate q(c), the
aggregate posterior) are taken over the global batch under data parallelism
(the ``global_batch`` of :class:`TermSites`; the identity on one process).

A site the model or guide masks (``poutine.mask``) keeps its mask for the terms: the capacity
averages its KL over the unmasked points and counts them alone in N, as the ELBO's KL does; a
term that averages over the batch without weighing points refuses a masked site
(:class:`MaskedSiteError`, naming the site) rather than count the points the model masks out.

Example: a capacity on the contrastive VAE's shared latent, and the aggregate MMD on
PartedVAE's z::

    ContrastiveELBO(gamma=1.0, extra_terms=[Capacity("target_z", gamma=10.0, capacity=LinearCapacity(0, 5, 10_000))])
    PartedELBO(extra_terms=[AggregateDivergence("z", alpha=100.0, divergence="mmd")])
    MeanFieldELBO(terms=[Capacity("z", gamma=1000.0, capacity=LinearCapacity(0, 25, 100_000))])
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyro.distributions as dist
import torch
from pyro.poutine.trace_struct import Trace
from torch import nn
from torch.distributions import Independent, Normal, kl_divergence

from ppl_vae._validation import finite, site_name
from ppl_vae.infer.distributed import LOCAL_BATCH, GlobalBatch
from ppl_vae.infer.steps import AuxiliaryStep
from ppl_vae.schedules import LinearCapacity, LinearSchedule

__all__ = ["Capacity", "MaskedSiteError", "Term", "TermSites"]


def diagonal_normal_parameters(fn: dist.Distribution, site: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(loc, scale)`` of a diagonal Gaussian site (``Normal`` or ``Normal(...).to_event(1)``)."""
    base = fn.base_dist if isinstance(fn, Independent) and fn.reinterpreted_batch_ndims == 1 else fn
    if isinstance(base, Normal):
        return base.loc, base.scale
    raise ValueError(f"site {site!r} must be a diagonal Normal(...).to_event(1), got {type(fn).__name__}")


def closed_form_kl(guide_fn: dist.Distribution, model_fn: dist.Distribution) -> torch.Tensor | None:
    """KL(q || p) per point (q's batch shape, unscaled) in closed form where torch registers one
    for the pair (:func:`torch.distributions.kl_divergence`), else ``None``, and then the caller
    estimates it at the guide's sample, ``log q - log p``: the one place that chooses between the
    two, for the ELBO's KLs (:class:`~ppl_vae.infer.MeanFieldELBO`, which reads the estimate
    from the traces' scores, scaled and summed as Pyro's) and a capacity's (per point)."""
    try:
        return kl_divergence(guide_fn, model_fn)
    except NotImplementedError:
        return None


#: The key of a replaced site's ``site["infer"]`` under which
#: :class:`~ppl_vae.infer._particle.MaskSites` keeps the mask the site had from the model's or
#: guide's own ``poutine.mask`` (absent: none), for :func:`unmasked` to give back.
OWN_MASK = "ppl_vae_own_mask"


def per_particle(values: torch.Tensor) -> torch.Tensor:
    """A site's values ``(..., B, D)`` as ``(P, B, D)``, one batch per particle: P the particles
    Pyro's ``vectorize_particles`` draws at once (the dimensions left of the batch's), 1
    without them; ``(D,)`` as ``(1, 1, D)``. Batch-level terms take their quantities within
    each particle's batch and average over particles, as sequential particles give them."""
    return values.reshape(-1, *values.shape[-2:]) if values.dim() >= 2 else values.reshape(1, 1, -1)


def site_points(site: dict) -> torch.Tensor | float:
    """The number of data points a site's minibatch stands for: its batch size times its scale
    (the data plate's ``N / B``), i.e. B, or N when the model scales its plate."""
    return site["fn"].batch_shape.numel() * site["scale"]


def is_masked(site: dict) -> bool:
    """Whether a site as the model or guide wrote it (:func:`unmasked`) carries a mask of its
    own (``poutine.mask`` with anything but True)."""
    return site["mask"] is not None and site["mask"] is not True


def mask_weights(site: dict, values: torch.Tensor) -> torch.Tensor:
    """The site's own mask as 0/1 weights of ``values`` (its per-point values, the site's batch
    shape): ones where the site is unmasked.

    :param site: a site as the model or guide wrote it (:func:`unmasked`).
    :param values: per-point values ``(batch shape)``."""
    if not is_masked(site):
        return torch.ones_like(values)
    return torch.as_tensor(site["mask"], device=values.device).expand(values.shape).to(values.dtype)


def unmasked(site: dict) -> dict:
    """A site as the model or guide wrote it: for a site an objective masks out because a term
    replaces it (``mask=False``, its ``fn`` wrapped in a ``MaskedDistribution`` so that Pyro's
    scoring never evaluates it), the same site with the distribution it was drawn from and the
    mask it had of its own (``None`` for none)."""
    if site["mask"] is False and isinstance(site["fn"], dist.MaskedDistribution):
        return {**site, "fn": site["fn"].base_dist, "mask": site["infer"].get(OWN_MASK)}
    return site


class MaskedSiteError(ValueError):
    """A term that averages over the batch without weighing points by a mask was given a site
    that the model or guide masks (``poutine.mask``)."""


@dataclass(frozen=True)
class TermSites:
    """What a term reads for one particle.

    :param guide_trace: the guide's trace (every site the guide sampled, with its ``fn``,
        ``value`` and ``scale``).
    :param model_sites: the model's sample sites by name (the messages the model's handlers
        left: ``fn``, ``value``, ``scale``, ``is_observed``), its latent values replayed from the
        guide.
    :param module: the ``nn.Module`` whose ``model`` method is being run (e.g. the
        :class:`~ppl_vae.models.PartedVAE`), for terms that read the model's networks; ``None``
        for a plain function.
    :param guide: the guide callable, for terms that encode other data (the whole-data
        aggregate posterior).
    :param inputs: the keyword arguments of the objective's call that the terms take
        (:meth:`Term.inputs`), e.g. ``{"aggregate_data": {"x": X}}``; those not given are absent.
    :param step: the training step of the objective's call (its ``step`` keyword argument: an
        int >= 0 or a 0-dim tensor), which the terms' schedules read (:meth:`at_step`);
        ``None`` when the call gave none.
    :param global_batch: the global batch of the call (its ``global_batch`` argument, which the
        training iteration gives), over which batch-level quantities are taken
        (:class:`~ppl_vae.infer.distributed.GlobalBatch`); this process's batch alone when the
        call gave none.
    """

    guide_trace: Trace
    model_sites: Mapping[str, dict]
    module: nn.Module | None
    guide: Callable
    inputs: Mapping[str, Any] = field(default_factory=dict)
    step: int | torch.Tensor | None = None
    global_batch: GlobalBatch = LOCAL_BATCH

    def at_step(self, schedule: LinearSchedule, term: str) -> torch.Tensor | float:
        """``schedule``'s value at the training step (the ``step`` field); a ``ValueError`` naming ``term`` when the
        objective's call gave no step.

        :param schedule: the schedule over the training step (e.g. a term's capacity C(t)).
        :param term: the name of the term that reads it, for the error."""
        if self.step is None:
            raise ValueError(
                f"term {term!r} follows a schedule over the training step: pass the step to the objective's "
                "call as step=t (e.g. svi.step(x, step=t)); got no step"
            )
        return schedule(self.step)

    def model_site(self, name: str, masked: bool = False) -> dict:
        """The model's sample site ``name`` as the model wrote it (a site an objective masks out
        because a term replaces it comes with the distribution it was drawn from and its own
        mask, not its ``MaskedDistribution``); a ``ValueError`` naming it if the model has none.

        :param name: the site's name.
        :param masked: whether the caller weighs points by the site's own mask (its ``"mask"``);
            otherwise a masked site is refused (:class:`MaskedSiteError`), so that no term
            averages over points the model masks out."""
        if name not in self.model_sites:
            raise ValueError(f"the model has no sample site {name!r}; its sites are {sorted(self.model_sites)}")
        return self._checked(unmasked(self.model_sites[name]), "model", masked)

    def guide_site(self, name: str, masked: bool = False) -> dict:
        """The guide's sample site ``name`` as the guide wrote it (a site an objective masks out
        because a term replaces it comes with the distribution it was drawn from and its own
        mask, not its ``MaskedDistribution``); a ``ValueError`` naming it if the guide has none.

        :param name: the site's name.
        :param masked: as :meth:`model_site`'s."""
        if name not in self.guide_trace.nodes or self.guide_trace.nodes[name]["type"] != "sample":
            raise ValueError(f"the guide has no sample site {name!r}")
        return self._checked(unmasked(self.guide_trace.nodes[name]), "guide", masked)

    @staticmethod
    def _checked(site: dict, where: str, masked: bool) -> dict:
        if is_masked(site) and not masked:
            raise MaskedSiteError(
                f"the {where}'s site {site['name']!r} is masked (poutine.mask), and this term averages over the "
                "batch without weighing points by a mask; mask the observations instead, or use a term that "
                "takes masks (Capacity)"
            )
        return site

    def num_points(self, name: str, masked: bool = False) -> torch.Tensor | float:
        """N for the model site ``name``: its batch size times its scale (the data plate's
        ``N / B``), i.e. B, or the data-set size when the model scales its plate; with
        ``masked``, its unmasked points times its scale.

        :param name: the model's sample site.
        :param masked: as :meth:`model_site`'s."""
        site = self.model_site(name, masked)
        if not is_masked(site):
            return site_points(site)
        return torch.as_tensor(site["mask"]).expand(site["fn"].batch_shape).sum() * site["scale"]


class Term:
    """A named, weighted extra term of an objective (:mod:`ppl_vae.infer.terms`).

    Subclasses implement :meth:`evaluate` and :meth:`num_points`, and :meth:`replaced_sites`
    when they replace ELBO terms.

    :param name: the ``pyro.factor`` site's name, also the name it is logged under.
    :param weight: w >= 0; 0 computes the term for the log only. Checked here, once: an
        objective that builds its terms passes its weights through unchecked.
    :param weight_name: the weight's name in errors: the term's argument (``"gamma"``,
        ``"alpha"``), or the objective's that it came from (``"gamma_z"``).
    """

    #: Terms that split one site's KL between them (PartedVAE's entropy and aggregate class
    #: terms) share a group name; otherwise a site is replaced by one term only, since each
    #: replacing term stands in for the whole KL. ``None``: the term replaces its sites alone.
    replacement_group: str | None = None

    def __init__(self, name: str, weight: float, weight_name: str = "weight") -> None:
        self.name = site_name("name", name)
        self.weight = finite(weight_name, weight, low=0)

    def evaluate(self, sites: TermSites) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``(v, parts)``: the per-point value (a scalar tensor) and named parts to log beside it
        (as ``<name>/<part>``).

        :param sites: what the term reads for one particle."""
        raise NotImplementedError

    def num_points(self, sites: TermSites) -> torch.Tensor | float:
        """N, the points the minibatch stands for.

        :param sites: what the term reads for one particle."""
        raise NotImplementedError

    def replaced_sites(self, module: nn.Module | None) -> tuple[str, ...]:
        """The sites whose ELBO terms this term replaces, for a model method of ``module``.

        :param module: the ``nn.Module`` whose ``model`` method is run, or ``None`` for a plain
            model function."""
        return ()

    def auxiliary_steps(self, model: nn.Module) -> list[AuxiliaryStep]:
        """Optimisation steps this term needs besides the ELBO's (none by default).

        :param model: the model being trained (whose networks a step may read)."""
        return []

    def auxiliary_modules(self) -> dict[str, nn.Module]:
        """Networks this term owns outside the model, by name (none by default)."""
        return {}

    def inputs(self) -> tuple[str, ...]:
        """Names of keyword arguments of the objective's call that this term takes instead of
        the model and guide (read from the ``inputs`` of :class:`TermSites`; none by default)."""
        return ()

    def step_arguments(self, sites: TermSites) -> dict[str, dict[str, Any]]:
        """Keyword arguments for this term's auxiliary steps taken after the ELBO step, by step
        name, read from the ELBO step's particle (none by default).

        :param sites: what the term read for the ELBO step's (last) particle."""
        return {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, weight={self.weight})"


class Capacity(Term):
    r"""The capacity term :math:`|KL(q(z|x) \| p(z)) - C(t)|` of a latent site (Burgess et al.
    2018; PartedVAE Eq. 6), replacing that site's KL in the ELBO.

    KL is the minibatch (global-batch) average of the per-point KL over the points the guide's
    site does not mask (``poutine.mask``), analytic where registered, else ``log q - log p`` at
    the guide's sample; N counts the unmasked points. Logs ``<name>/kl`` and ``<name>/target`` (C(t))
    beside the term.

    :param site: the latent site (in model and guide).
    :param gamma: weight gamma.
    :param capacity: C(t), a schedule over the training step (the ``step`` of the
        objective's call, the ``step`` of :class:`TermSites`).
    :param name: the factor's name; default ``"capacity_<site>"``.
    :param weight_name: gamma's name in errors (an objective passes its own argument's, as
        :class:`~ppl_vae.infer.PartedELBO` does ``"gamma_z"``).
    """

    def __init__(
        self, site: str, gamma: float, capacity: LinearCapacity, name: str | None = None, *, weight_name: str = "gamma"
    ) -> None:
        super().__init__(name or f"capacity_{site}", gamma, weight_name)
        LinearCapacity.required("capacity", capacity)
        self.site = site_name("site", site)
        self.capacity = capacity

    def evaluate(self, sites: TermSites) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``(|KL - C(t)|, {"kl": KL, "target": C(t)})``, KL the (global) batch mean over the
        points the guide's site does not mask (``poutine.mask``), as the ELBO's KL counts them.

        :param sites: what the term reads for one particle."""
        guide_site, model_site = sites.guide_site(self.site, masked=True), sites.model_site(self.site, masked=True)
        kl = closed_form_kl(guide_site["fn"], model_site["fn"])
        if kl is None:
            kl = guide_site["fn"].log_prob(guide_site["value"]) - model_site["fn"].log_prob(guide_site["value"])
        gather, weights = sites.global_batch.all_gather, mask_weights(guide_site, kl)
        kl = gather(kl * weights).sum() / gather(weights).sum().clamp(min=1)
        target = torch.as_tensor(sites.at_step(self.capacity, self.name), dtype=kl.dtype, device=kl.device)
        return (kl - target).abs(), {"kl": kl, "target": target}

    def num_points(self, sites: TermSites) -> torch.Tensor | float:
        """N of the latent site, its unmasked points where the model masks it.

        :param sites: what the term reads for one particle."""
        return sites.num_points(self.site, masked=True)

    def replaced_sites(self, module: nn.Module | None) -> tuple[str, ...]:
        """The latent site, whose KL this term replaces.

        :param module: the module whose ``model`` method is run (not read)."""
        return (self.site,)
