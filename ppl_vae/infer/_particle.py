"""The extra terms inside one particle of a Pyro ELBO: the machinery of
:class:`~ppl_vae.infer.MeanFieldELBO`.

A term (:class:`~ppl_vae.infer.terms.Term`) reads one particle's guide and model sites and adds
a ``pyro.factor`` site after the model has run; the sites it replaces are masked out in model
and guide. :func:`with_terms` wraps a particle's model and guide so, before Pyro traces and
scores them. What the terms read besides the traces (their keyword arguments, the training
step) and what they give back (per-point values, their auxiliary steps' arguments) belong to
one call of the objective: a :class:`TermCall`, which the objective's methods enter around
Pyro's particle loop and its particle hooks reach as the Pyro effect ``"term_call"``
(:func:`current_call`). Nothing is stored in Pyro's traces or kept by the objective between
calls. A latent site's KL in the particle's loss (:func:`site_kl`) and Pyro's check that a guide
site is reparameterised (:func:`check_reparameterised`) are here too.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyro
import torch
from pyro import poutine
from pyro.distributions import MaskedDistribution
from pyro.distributions.util import scale_and_mask
from pyro.infer.util import check_fully_reparametrized, is_validation_enabled
from pyro.poutine.messenger import Messenger
from pyro.poutine.runtime import effectful
from torch import nn

from ppl_vae._validation import require
from ppl_vae.infer.distributed import LOCAL_BATCH, GlobalBatch
from ppl_vae.infer.terms import OWN_MASK, Term, TermSites, closed_form_kl


def model_module(model: Callable) -> nn.Module | None:
    """The ``nn.Module`` a model callable is a method of (``vae.model``), else ``None``."""
    owner = getattr(model, "__self__", None)
    return owner if isinstance(owner, nn.Module) else None


def replaced_sites(terms: Sequence[Term], model: Callable) -> tuple[str, ...]:
    """The sites ``terms`` replace for ``model`` (the terms read the module it is a method of), in order.

    :raises ValueError: a site replaced by two terms that do not split its KL between them
        (:attr:`~ppl_vae.infer.terms.Term.replacement_group`): its KL would count twice."""
    module = model_module(model)
    replacing: dict[str, list[Term]] = {}
    for term in terms:
        for name in dict.fromkeys(term.replaced_sites(module)):
            replacing.setdefault(name, []).append(term)
    for name, owners in replacing.items():
        groups = {term.replacement_group for term in owners}
        require("terms", [term.name for term in owners], len(owners) == 1 or (groups != {None} and len(groups) == 1),
                f"terms that replace different sites: each of these stands in for the KL of {name!r}, which "
                "would count twice (keep one; terms that split one KL share a replacement_group)")
    return tuple(replacing)


def is_replaced(site: dict[str, Any]) -> bool:
    """Whether a sample site is masked out (``mask=False``, :class:`MaskSites`): it adds nothing to the ELBO."""
    return site["mask"] is False


class MaskSites(Messenger):
    """Marks the sample sites ``names`` ``mask=False`` and wraps their distributions in a
    ``MaskedDistribution(fn, False)``, which Pyro scores as 0 without evaluating ``fn`` (a
    replaced site's value may lie outside the support of its model's distribution, as the
    relaxed c of PartedVAE does under its one-hot prior); applied outside the model's own
    handlers. Terms read the sites unwrapped (:func:`~ppl_vae.infer.terms.unmasked`)."""

    def __init__(self, names: Sequence[str]) -> None:
        super().__init__()
        self.names = frozenset(names)

    def _process_message(self, msg: dict[str, Any]) -> None:
        if msg["type"] == "sample" and msg["name"] in self.names:
            if msg["mask"] is not None:  # the site's own mask, for the terms (terms.unmasked)
                msg["infer"] = {**msg["infer"], OWN_MASK: msg["mask"]}
            msg["fn"], msg["mask"] = MaskedDistribution(msg["fn"], False), False


class TermCall(Messenger):
    """One call of the objective, entered around Pyro's particle loop.

    :param inputs: the call's keyword arguments that the terms take (:meth:`~ppl_vae.infer.terms.Term.inputs`).
    :param step: the training step of the call (``None`` when it gave none).
    :param global_batch: the global batch of the call, over which the terms take batch-level quantities.
    :param keep_graph: keep the graphs of the terms' values (otherwise they are recorded detached).
    """

    def __init__(
        self, inputs: Mapping[str, Any], step: int | torch.Tensor | None, global_batch: GlobalBatch, keep_graph: bool
    ) -> None:
        super().__init__()
        self.inputs, self.step, self.global_batch, self.keep_graph = dict(inputs), step, global_batch, keep_graph
        #: Per-point value of each term and ``<term>/<part>`` of the particle last run, in the order evaluated.
        self.logged: dict[str, torch.Tensor | float] = {}
        #: The terms' arguments for their auxiliary steps (:meth:`~ppl_vae.infer.terms.Term.step_arguments`).
        self.step_arguments: dict[str, dict[str, Any]] = {}

    def _pyro_term_call(self, msg: dict[str, Any]) -> None:
        msg["value"] = self

    def kept(self, value: torch.Tensor | float) -> torch.Tensor | float:
        """``value`` as this call keeps term values: detached unless ``keep_graph``."""
        return value.detach() if torch.is_tensor(value) and not self.keep_graph else value

    def add_terms(self, terms: Sequence[Term], sites: TermSites) -> None:
        """One ``pyro.factor(term.name, -w N v)`` per term of weight ``w > 0`` (outside every
        plate when called after the model), each term's value and parts recorded; a term of
        weight 0 is evaluated without gradients (unless ``keep_graph``) and adds no site."""
        for term in terms:
            with torch.set_grad_enabled(torch.is_grad_enabled() and (term.weight > 0 or self.keep_graph)):
                value, parts = term.evaluate(sites)
            self.logged[term.name] = self.kept(value)
            self.logged.update({f"{term.name}/{part}": self.kept(v) for part, v in parts.items()})
            if term.weight > 0:
                pyro.factor(term.name, -term.weight * term.num_points(sites) * value)
            self.step_arguments.update(term.step_arguments(sites))


@effectful(type="term_call")
def current_call() -> TermCall:
    """The innermost :class:`TermCall` (outside one: a call with no inputs or step, on this process's batch)."""
    return TermCall({}, None, LOCAL_BATCH, keep_graph=False)


def with_terms(model: Callable, guide: Callable, terms: Sequence[Term], call: TermCall) -> tuple[Callable, Callable]:
    """``(model, guide)`` of one particle with ``terms``: the replaced sites masked out
    (:class:`MaskSites`), the guide traced, and the model followed by the terms' factors
    (:meth:`TermCall.add_terms`), read against the guide's sites of the same run.

    :param model: the particle's model (Pyro's plate of vectorised particles inside it).
    :param guide: the particle's guide, a function (not a ``GuideMessenger``).
    :param terms: the terms, added in this order.
    :param call: the objective's call (the terms' inputs and step; receives their values)."""
    module, plain_guide = model_module(model), guide
    replaced = replaced_sites(terms, model)
    if replaced:
        model, guide = MaskSites(replaced)(model), MaskSites(replaced)(guide)
    traced_guide = poutine.trace(guide)

    def model_with_terms(*args, **kwargs):
        traced_model = poutine.trace(model)
        result = traced_model(*args, **kwargs)
        model_sites = {name: site for name, site in traced_model.trace.nodes.items() if site["type"] == "sample"}
        sites = TermSites(traced_guide.trace, model_sites, module, plain_guide, call.inputs, call.step, call.global_batch)
        call.add_terms(terms, sites)
        return result

    return model_with_terms, traced_guide


def site_kl(site: dict[str, Any], guide_site: dict[str, Any]) -> torch.Tensor | float:
    """A latent site's KL, summed over its batch, scaled and masked as its guide site is: in
    closed form where one is registered, else ``log q - log p`` at the guide's sample from the
    traces' scores (both as Pyro's TraceMeanField_ELBO takes them)."""
    check_reparameterised(guide_site)
    kl = closed_form_kl(guide_site["fn"], site["fn"])
    if kl is None:
        return guide_site["log_prob_sum"] - site["log_prob_sum"]
    kl = scale_and_mask(kl, scale=guide_site["scale"], mask=guide_site["mask"])
    return kl.sum() if torch.is_tensor(kl) else kl * guide_site["fn"].batch_shape.numel()


def check_reparameterised(site: dict[str, Any]) -> None:
    """Under validation, Pyro's :func:`~pyro.infer.util.check_fully_reparametrized` on a scored
    guide site, its ``NotImplementedError`` naming the site."""
    if not is_validation_enabled():
        return
    try:
        check_fully_reparametrized(site)
    except NotImplementedError as error:
        raise NotImplementedError(
            f"{error} The guide's site {site['name']!r} is a {type(site['fn']).__name__}, which has no rsample "
            "or a score-function term (a discrete or rejection-sampled latent)"
        ) from None
