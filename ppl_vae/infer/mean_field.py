r"""The library's objective: a mean-field ELBO, a weight beta on its KLs, and extra terms.

Per particle, with the guide's sample replayed into the model,

.. math::

    \widehat{ELBO} = \sum_{observed} \log p(x \mid \cdot)
        - \beta \sum_{latent} KL\big(q(z \mid \cdot) \,\|\, p(z \mid \cdot)\big)
        - \sum_{terms} w_t\, N_t\, v_t

with the KL in closed form where one is registered and ``log q(z) - log p(z)`` at the guide's
sample otherwise, each scaled and masked as its guide site is (plates, ``poutine.scale``),
exactly as :class:`~pyro.infer.TraceMeanField_ELBO` computes it (beta = 1, no terms). Each
extra term (:mod:`ppl_vae.infer.terms`) enters the model as a ``pyro.factor`` site named after
it, added after the model has run, outside every plate; the sites a term replaces are masked
out (``mask=False``) in model and guide. The traces are Pyro's, from TraceMeanField_ELBO's
per-particle hook, with its checks under validation (model and guide match, site shapes, no
enumerated guide site, the mean-field order warning, every guide latent fully
reparameterised); :meth:`MeanFieldELBO.traces` returns them, every term visible by name.

Pyro's interface reads and warns as Pyro's does (``loss`` and ``loss_and_grads`` return floats,
``loss`` and ``differentiable_loss`` warn "Encountered NaN: loss"). The engine's step,
:meth:`MeanFieldELBO.training_loss`, leaves the loss on the device and NaNs to the engine, which
checks once per logging interval: on a GPU each read on the host stalls the step.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from pyro import poutine
from pyro.infer import TraceMeanField_ELBO
from pyro.infer.util import torch_item
from pyro.poutine.messenger import Messenger
from pyro.poutine.trace_struct import Trace
from pyro.util import warn_if_nan
from torch import nn

from ppl_vae._validation import boolean, finite
from ppl_vae.infer._particle import (
    TermCall,
    check_reparameterised,
    current_call,
    is_replaced,
    replaced_sites,
    site_kl,
    with_terms,
)
from ppl_vae.infer.distributed import LOCAL_BATCH
from ppl_vae.infer.steps import AuxiliaryStep, TrainingLoss
from ppl_vae.infer.terms import Term, site_points

__all__ = ["MeanFieldELBO"]


class MeanFieldELBO(TraceMeanField_ELBO):
    """The mean-field ELBO with a weight ``beta`` on its KL terms and extra ``terms``, each a
    ``pyro.factor`` site (:mod:`ppl_vae.infer.mean_field`); :meth:`loss` is the same objective as a float.

    With ``beta=1`` and no terms it is :class:`~pyro.infer.TraceMeanField_ELBO`'s objective, with
    its contract: the same errors, warnings, loss and gradients on any model and guide. Where it
    takes the place of :class:`~pyro.infer.Trace_ELBO` it differs as TraceMeanField_ELBO does:
    a latent's KL is taken in closed form where one is registered (Trace_ELBO estimates it at
    the guide's sample), so the guide must be mean-field and fully reparameterised.

    :meth:`training_loss` returns the loss with what the rest of a training iteration reads
    (:class:`~ppl_vae.infer.steps.TrainingLoss`): the last particle's per-point values, detached:
    ``reconstruction`` (``-log p`` of the observed sites, each divided by the points its plate
    stands for), ``kl`` (the KLs the ELBO still counts, without beta; absent when none), each
    term under its name and its parts as ``<name>/<part>``; and the terms' auxiliary steps'
    arguments. After :meth:`differentiable_loss`, :meth:`loss` or :meth:`loss_and_grads` (a
    plain SVI loop) :attr:`logged` holds the same values; no other state is kept between calls.

    Calling: the methods that run the model take ``(model, guide, *args, **kwargs)``, the model
    and guide and their arguments (e.g. ``x=batch``); a model that is a method of an
    ``nn.Module``, such as ``vae.model``, lets the terms read its networks. Keyword arguments a
    term takes (:meth:`~ppl_vae.infer.terms.Term.inputs`, e.g. ``aggregate_data``) go to the
    terms, not to the model and guide. So does ``step``, the training step (an int >= 0 or a
    0-dim tensor) that the terms' schedules read (with ``model_takes_step`` the model and guide
    take it too), and ``global_batch``, over which the terms take batch-level quantities (a
    :class:`~ppl_vae.infer.distributed.GlobalBatch`, given by the training iteration; this
    process's batch alone by default).

    Example, a capacity-annealed beta-VAE in a plain SVI loop; the capacity term replaces the
    KL of ``z`` and logs it with its target C(t):

    >>> import pyro, torch
    >>> from pyro.infer import SVI
    >>> from ppl_vae.infer import Capacity, LinearCapacity, MeanFieldELBO
    >>> from ppl_vae.models import VAE
    >>> from ppl_vae.nn import MLP, mlp_decoder
    >>> vae = VAE(MLP([4, 16]), mlp_decoder(2, [16], (4,)), latent_dim=2)
    >>> elbo = MeanFieldELBO(terms=[Capacity("z", gamma=1000.0, capacity=LinearCapacity(0, 25, 100_000))])
    >>> svi = SVI(vae.model, vae.guide, pyro.optim.Adam({"lr": 1e-3}), elbo)
    >>> batches = [torch.rand(8, 4).round() for _ in range(2)]
    >>> for step, x in enumerate(batches):
    ...     loss = svi.step(x, step=step)
    >>> sorted(elbo.logged)  # per-point values of the last step
    ['capacity_z', 'capacity_z/kl', 'capacity_z/target', 'reconstruction']

    :param beta: weight of every KL the ELBO counts, >= 0 (a beta-VAE; 0 leaves the
        reconstruction and the terms).
    :param terms: extra :class:`~ppl_vae.infer.terms.Term` s, added in this order; names must
        be unique.
    :param model_takes_step: whether the model and guide take the training step as their
        ``step`` keyword argument too (a guide that follows a schedule, as
        :class:`~ppl_vae.models.PartedVAE`'s attention sharpness does); otherwise only the
        terms read it.
    :param kwargs: passed to :class:`~pyro.infer.TraceMeanField_ELBO` (``num_particles``,
        ``max_plate_nesting``, ``vectorize_particles``).
    """

    def __init__(self, beta: float = 1.0, terms: Sequence[Term] = (), model_takes_step: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.beta = finite("beta", beta, low=0)
        self.model_takes_step = boolean("model_takes_step", model_takes_step)
        self.terms: tuple[Term, ...] = tuple(terms)
        for term in self.terms:
            if not isinstance(term, Term):
                raise ValueError(f"terms must be ppl_vae.infer.terms.Term objects, got {term!r}")
        names = [term.name for term in self.terms]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"term names must be unique (each is a pyro.factor site), got {duplicates} twice")
        self._term_names = frozenset(names)
        self._term_inputs = frozenset(name for term in self.terms for name in term.inputs())
        #: The last particle's per-point values after a call of Pyro's interface (class
        #: docstring; after :meth:`traces`, the terms' only), detached scalar tensors by name.
        self.logged: dict[str, torch.Tensor] = {}

    def term(self, name: str) -> Term:
        """The term named ``name``; a ``KeyError`` if there is none.

        :param name: the term's name (its ``pyro.factor`` site)."""
        for term in self.terms:
            if term.name == name:
                return term
        raise KeyError(f"no term named {name!r}; the terms are {[t.name for t in self.terms]}")

    def replaced_sites(self, model: Callable) -> tuple[str, ...]:
        """The sites the terms replace, for ``model``.

        :param model: the model callable (the terms read the module it is a method of)."""
        return replaced_sites(self.terms, model)

    def _call(self, kwargs: Mapping[str, Any], keep_graph: bool = False) -> tuple[dict[str, Any], TermCall]:
        """A call's keyword arguments split into the model's and guide's and a
        :class:`~ppl_vae.infer._particle.TermCall` with the terms', the training step (``None``
        when not given; also the model's with ``model_takes_step``) and the global batch."""
        inputs = {name: kwargs[name] for name in self._term_inputs if name in kwargs}
        model_kwargs = {name: value for name, value in kwargs.items() if name not in inputs
                        and name != "global_batch" and (name != "step" or self.model_takes_step)}
        return model_kwargs, TermCall(inputs, kwargs.get("step"), kwargs.get("global_batch", LOCAL_BATCH), keep_graph)

    def _get_trace(self, model, guide, args, kwargs) -> tuple[Trace, Trace]:
        """One particle's ``(model_trace, guide_trace)``: TraceMeanField_ELBO's, of the model and
        guide with the terms (:func:`~ppl_vae.infer._particle.with_terms`).

        Pyro's per-particle hook, which TraceMeanField_ELBO overrides too: Pyro has no public
        hook that adds sites to a particle's model after its guide has run and outside the plate
        that vectorises particles (a term's factor, over all vectorised draws, counts once)."""
        if not self.terms:
            return super()._get_trace(model, guide, args, kwargs)
        if isinstance(poutine.unwrap(guide), Messenger):
            raise ValueError("extra terms need a guide function, not a GuideMessenger")
        return super()._get_trace(*with_terms(model, guide, self.terms, current_call()), args, kwargs)

    def _differentiable_loss_particle(self, model_trace: Trace, guide_trace: Trace) -> tuple[float, torch.Tensor]:
        """``(loss, surrogate)`` of one particle, both ``-ELBO`` (the loss a float): Pyro's hook for
        ``loss_and_grads``, which CEVAE's objective overrides too (here the KLs carry beta and
        the particle's values are logged); :attr:`logged` then holds them."""
        surrogate, self.logged = self._particle(model_trace, guide_trace, current_call())
        return torch_item(surrogate), surrogate

    def _particle(self, model_trace: Trace, guide_trace: Trace, call: TermCall) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``(surrogate, logged)`` of one particle: ``-ELBO`` (differentiable) and the per-point
        values of the class docstring, kept as ``call`` keeps the terms' values."""
        log_likelihood = kl_total = reconstruction = 0.0
        counted_kls = []
        for name, site in model_trace.nodes.items():
            if site["type"] != "sample" or (site["is_observed"] and is_replaced(site)):
                continue
            if site["is_observed"]:
                log_likelihood = log_likelihood + site["log_prob_sum"]
                if name not in self._term_names:
                    reconstruction = reconstruction - call.kept(site["log_prob_sum"]) / site_points(site)
                continue
            guide_site = guide_trace.nodes[name]
            if not (is_replaced(site) and is_replaced(guide_site)):  # else a KL of 0 (masked as its guide site)
                kl = site_kl(site, guide_site)
                kl_total = kl_total + kl
                counted_kls.append(call.kept(kl) / site_points(guide_site))
        for name, guide_site in guide_trace.nodes.items():
            if guide_site["type"] == "sample" and name not in model_trace.nodes and not is_replaced(guide_site):
                if not guide_site["infer"].get("is_auxiliary"):  # Pyro's estimator asserts the same
                    raise AssertionError(f"the guide's site {name!r} is not in the model: mark it "
                                         "infer={'is_auxiliary': True} if it is an auxiliary variable")
                check_reparameterised(guide_site)
                kl_total = kl_total + guide_site["log_prob_sum"]
        logged = {**call.logged, "reconstruction": torch.as_tensor(reconstruction)}
        if counted_kls:
            logged["kl"] = torch.as_tensor(sum(counted_kls))
        return self.beta * kl_total - log_likelihood, logged

    def training_loss(self, model, guide, *args, **kwargs) -> TrainingLoss:
        """``mean over particles of -ELBO``, differentiable, with the last particle's logged values
        and the arguments of the terms' auxiliary steps (class docstring); :attr:`logged` is left as it was.

        :param model: the model callable (class docstring: calling).
        :param guide: the guide callable.
        :param args: positional arguments of the model and guide.
        :param kwargs: keyword arguments of the model and guide, the terms' and ``step``."""
        kwargs, call = self._call(kwargs)
        loss: torch.Tensor | float = 0.0
        with call:  # Pyro offers its loop over particles (sequential or vectorised) only as ELBO._get_traces
            for model_trace, guide_trace in self._get_traces(model, guide, args, kwargs):
                surrogate, logged = self._particle(model_trace, guide_trace, call)
                loss = loss + surrogate / self.num_particles
        return TrainingLoss(loss, logged, call.step_arguments)

    def differentiable_loss(self, model, guide, *args, **kwargs) -> torch.Tensor:
        """``mean over particles of -ELBO``, differentiable; :attr:`logged` then holds the last particle's values.

        :param model: the model callable (class docstring: calling).
        :param guide: the guide callable.
        :param args: positional arguments of the model and guide.
        :param kwargs: keyword arguments of the model and guide, the terms' and ``step``."""
        result = self.training_loss(model, guide, *args, **kwargs)
        self.logged = result.logged
        return warn_if_nan(result.loss, "loss")

    @torch.no_grad()
    def loss(self, model, guide, *args, **kwargs) -> float:
        """:meth:`differentiable_loss` as a float (what ``SVI.evaluate_loss`` reports).

        :param model: the model callable (class docstring: calling).
        :param guide: the guide callable.
        :param args: positional arguments of the model and guide.
        :param kwargs: keyword arguments of the model and guide, the terms' and ``step``."""
        return torch_item(self.differentiable_loss(model, guide, *args, **kwargs))

    def loss_and_grads(self, model, guide, *args, **kwargs) -> float:
        """Pyro's (``SVI.step``): the loss as a float, its gradients accumulated in the
        parameters; :attr:`logged` then holds the last particle's values.

        :param model: the model callable (class docstring: calling).
        :param guide: the guide callable.
        :param args: positional arguments of the model and guide.
        :param kwargs: keyword arguments of the model and guide, the terms' and ``step``."""
        kwargs, call = self._call(kwargs)
        with call:
            return super().loss_and_grads(model, guide, *args, **kwargs)

    def traces(self, model: Callable, guide: Callable, *args, **kwargs) -> tuple[Trace, Trace]:
        """``(model_trace, guide_trace)`` of one particle, every term a ``pyro.factor`` site and
        the replaced sites masked out; :attr:`logged` then holds the terms' values and parts.

        :param model: the model callable (class docstring: calling).
        :param guide: the guide callable.
        :param args: positional arguments of the model and guide.
        :param kwargs: keyword arguments of the model and guide, the terms' and ``step``."""
        kwargs, call = self._call(kwargs)
        with call:  # Pyro offers one particle's traces only as ELBO._get_trace
            traces = self._get_trace(model, guide, args, kwargs)
        self.logged = dict(call.logged)
        return traces

    def differentiable_terms(self, model: Callable, guide: Callable, *args, **kwargs) -> dict[str, torch.Tensor]:
        """What :attr:`logged` holds after one particle, with gradients: for inspecting which
        parameters each term reaches (a term of weight 0 included).

        :param model: the model callable (class docstring: calling).
        :param guide: the guide callable.
        :param args: positional arguments of the model and guide.
        :param kwargs: keyword arguments of the model and guide, the terms' and ``step``."""
        kwargs, call = self._call(kwargs, keep_graph=True)
        with call:  # Pyro offers one particle's traces only as ELBO._get_trace
            model_trace, guide_trace = self._get_trace(model, guide, args, kwargs)
        return self._particle(model_trace, guide_trace, call)[1]

    def auxiliary_steps(self, model: nn.Module) -> list[AuxiliaryStep]:
        """The optimisation steps the terms need besides the ELBO step (e.g. a TC discriminator's).

        :param model: the model being trained (an ``nn.Module``)."""
        return [step for term in self.terms for step in term.auxiliary_steps(model)]

    def auxiliary_modules(self) -> dict[str, nn.Module]:
        """Networks the terms own outside the model, by name, for the engine to move and checkpoint."""
        return {name: module for term in self.terms for name, module in term.auxiliary_modules().items()}

