r"""The mean-field ELBO base of the library's objectives: Pyro's estimator, minus the work it
does not need.

Per particle, with the guide's sample replayed into the model,

.. math::

    \widehat{ELBO} = \sum_{observed} \log p(x \mid \cdot)
        - \sum_{latent} KL\big(q(z \mid \cdot) \,\|\, p(z \mid \cdot)\big)

with the KL in closed form where one is registered and ``log p(z) - log q(z)`` at the
guide's sample otherwise, each term scaled and masked as its site is (plates,
``poutine.scale``), exactly as :class:`~pyro.infer.TraceMeanField_ELBO` computes it. What
differs is the work around it, which on a small network is most of the step:

- Pyro scores every site of both traces before the loss is formed (``compute_log_prob`` and
  ``compute_score_parts``), including every latent site whose KL is then taken in closed
  form; here a site is scored only when the estimator reads its log-density (observed
  sites, latent sites without a closed-form KL, auxiliary guide sites).
- Pyro reads the loss on the host every call (``torch_item`` of each particle and of the
  surrogate, ``warn_if_nan`` on the value and, through a hook, on its gradient): on a GPU
  each read stalls the step until the device catches up. With a fully reparameterised
  mean-field guide the surrogate loss *is* the loss, so it is returned on the device; NaNs
  are left to the engine, which checks once per logging interval
  (:mod:`ppl_vae.train.module`).

Under Pyro's validation (``pyro.enable_validation()``, on in the tests) the traces are made
by Pyro's own path, with every check it runs (model/guide site match, site shapes,
enumeration, the mean-field ordering, reparameterisation), so bad models fail as they do
with Pyro's ELBOs.
"""
from __future__ import annotations

from typing import Any

import torch
from pyro import poutine
from pyro.distributions.util import scale_and_mask
from pyro.infer import TraceMeanField_ELBO
from pyro.infer.util import check_fully_reparametrized, is_validation_enabled, torch_item
from pyro.poutine.messenger import Messenger
from pyro.poutine.trace_struct import Trace
from pyro.poutine.util import prune_subsample_sites
from torch.distributions import kl_divergence


def replayed_traces(model, guide, args: tuple, kwargs: dict[str, Any]) -> tuple[Trace, Trace]:
    """``(model_trace, guide_trace)``: the guide run on ``args``/``kwargs``, the model replayed
    against its samples, both pruned of subsample sites; no site is scored yet."""
    guide_trace = poutine.trace(guide).get_trace(*args, **kwargs)
    model_trace = poutine.trace(poutine.replay(model, trace=guide_trace)).get_trace(*args, **kwargs)
    return prune_subsample_sites(model_trace), prune_subsample_sites(guide_trace)


def scored_site(trace: Trace, name: str) -> dict[str, Any]:
    """The site ``name`` of ``trace`` with its ``log_prob``, ``unscaled_log_prob`` (batch shape)
    and ``log_prob_sum`` (scalar), computed by Pyro's ``Trace.compute_log_prob`` and kept in
    the site for later calls; a value kept under ``torch.no_grad()`` is computed again when
    gradients are enabled, so a detached score never reaches a loss."""
    site = trace.nodes[name]
    if torch.is_grad_enabled() and site.get("_scored_without_grad"):
        for key in ("log_prob", "unscaled_log_prob", "log_prob_sum"):
            site.pop(key, None)
    if "log_prob_sum" not in site:
        site["_scored_without_grad"] = not torch.is_grad_enabled()
        trace.compute_log_prob(site_filter=lambda site_name, _: site_name == name)
    return site


class MeanFieldELBO(TraceMeanField_ELBO):
    """:class:`~pyro.infer.TraceMeanField_ELBO` that scores only the sites its estimate reads
    and leaves the loss on the device (module docstring); :meth:`loss` is the same objective
    as a float.

    Subclasses add terms by wrapping the model in :meth:`_get_trace` (a ``pyro.factor`` site
    is an observed site: it is counted here) or by overriding
    :meth:`_differentiable_loss_particle`.
    """

    def _get_trace(self, model, guide, args, kwargs) -> tuple[Trace, Trace]:
        if is_validation_enabled() or isinstance(poutine.unwrap(guide), Messenger):
            return super()._get_trace(model, guide, args, kwargs)
        return replayed_traces(model, guide, args, kwargs)

    def _differentiable_loss_particle(self, model_trace: Trace, guide_trace: Trace) -> tuple[torch.Tensor, torch.Tensor]:
        """``(loss, surrogate)`` of one particle, both ``-ELBO`` (the loss detached)."""
        elbo: torch.Tensor | float = 0.0
        for name, site in model_trace.nodes.items():
            if site["type"] != "sample":
                continue
            if site["is_observed"]:
                elbo = elbo + scored_site(model_trace, name)["log_prob_sum"]
                continue
            guide_site = guide_trace.nodes[name]
            if is_validation_enabled():
                check_fully_reparametrized(guide_site)
            try:
                kl = kl_divergence(guide_site["fn"], site["fn"])
            except NotImplementedError:
                elbo = elbo + scored_site(model_trace, name)["log_prob_sum"] - scored_site(guide_trace, name)["log_prob_sum"]
                continue
            kl = scale_and_mask(kl, scale=guide_site["scale"], mask=guide_site["mask"])
            elbo = elbo - (kl.sum() if torch.is_tensor(kl) else kl * guide_site["fn"].batch_shape.numel())
        for name, guide_site in guide_trace.nodes.items():
            if guide_site["type"] == "sample" and name not in model_trace.nodes:
                if is_validation_enabled():
                    check_fully_reparametrized(guide_site)
                elbo = elbo - scored_site(guide_trace, name)["log_prob_sum"]
        surrogate = -elbo
        return (surrogate.detach() if torch.is_tensor(surrogate) else surrogate), surrogate

    def differentiable_loss(self, model, guide, *args, **kwargs) -> torch.Tensor:
        """``mean over particles of -ELBO``, differentiable (analytic KLs where Pyro has them)."""
        loss = 0.0
        for model_trace, guide_trace in self._get_traces(model, guide, args, kwargs):
            loss = loss + self._differentiable_loss_particle(model_trace, guide_trace)[1] / self.num_particles
        return loss

    def step_outputs(self) -> dict[str, torch.Tensor]:
        """The tensors the last :meth:`differentiable_loss` left on the objective for the rest
        of the step: here the logged ``terms`` (if the subclass keeps any), as ``"terms.<name>"``.
        A replayed loss (:class:`~ppl_vae.infer.replay.ReplayedLoss`) returns them from its graph
        and hands them back with :meth:`load_step_outputs`."""
        return {f"terms.{name}": value for name, value in getattr(self, "terms", {}).items()}

    def load_step_outputs(self, outputs: dict[str, torch.Tensor]) -> None:
        """Set what :meth:`step_outputs` reads from ``outputs`` (the same keys)."""
        if hasattr(self, "terms"):
            self.terms = {key.removeprefix("terms."): value for key, value in outputs.items() if key.startswith("terms.")}

    def replay_obstacle(self) -> str | None:
        """Why this objective's loss cannot be recorded once and replayed, or ``None`` (see
        :mod:`ppl_vae.infer.replay`)."""
        return None

    @torch.no_grad()
    def loss(self, model, guide, *args, **kwargs) -> float:
        """The same objective as :meth:`differentiable_loss`, as a float (what
        ``SVI.evaluate_loss`` reports)."""
        return torch_item(self.differentiable_loss(model, guide, *args, **kwargs))
