"""The mean-field ELBO base of the library's objectives, without per-step host syncs.

Pyro's :meth:`~pyro.infer.Trace_ELBO.differentiable_loss` reads the loss on the host every
call (``torch_item`` of the surrogate, and ``warn_if_nan`` on the value and, through a hook,
on its gradient): on a GPU each read stalls the step until the device catches up. With a
fully reparameterised mean-field guide the surrogate loss *is* the loss, so the sum of the
particles' surrogates is returned as it is; NaNs are left to the engine, which checks once
per logging interval (:mod:`ppl_vae.train.module`).
"""
from __future__ import annotations

import torch
from pyro.infer import TraceMeanField_ELBO
from pyro.infer.util import torch_item


class MeanFieldELBO(TraceMeanField_ELBO):
    """:class:`~pyro.infer.TraceMeanField_ELBO` whose :meth:`differentiable_loss` leaves the
    value on the device and whose :meth:`loss` is the same objective as a float.

    Only one read per particle remains, inside Pyro's
    ``TraceMeanField_ELBO._differentiable_loss_particle`` (subclasses that override it, like
    :class:`~ppl_vae.infer.PartedELBO`, have none).
    """

    def differentiable_loss(self, model, guide, *args, **kwargs) -> torch.Tensor:
        """``mean over particles of -ELBO``, differentiable (analytic KLs where Pyro has them)."""
        loss = 0.0
        for model_trace, guide_trace in self._get_traces(model, guide, args, kwargs):
            loss = loss + self._differentiable_loss_particle(model_trace, guide_trace)[1] / self.num_particles
        return loss

    @torch.no_grad()
    def loss(self, model, guide, *args, **kwargs) -> float:
        """The same objective as :meth:`differentiable_loss`, as a float (what
        ``SVI.evaluate_loss`` reports)."""
        return torch_item(self.differentiable_loss(model, guide, *args, **kwargs))
