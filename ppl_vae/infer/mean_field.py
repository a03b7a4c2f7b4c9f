r"""The library's objective: a mean-field ELBO, a weight beta on its KLs, and extra terms.

Per particle, with the guide's sample replayed into the model,

.. math::

    \widehat{ELBO} = \sum_{observed} \log p(x \mid \cdot)
        - \beta \sum_{latent} KL\big(q(z \mid \cdot) \,\|\, p(z \mid \cdot)\big)
        - \sum_{terms} w_t\, N_t\, v_t

with the KL in closed form where one is registered and ``log q(z) - log p(z)`` at the guide's
sample otherwise, each term scaled and masked as its site is (plates, ``poutine.scale``),
exactly as :class:`~pyro.infer.TraceMeanField_ELBO` computes it (beta = 1, no terms). Each
extra term (:mod:`ppl_vae.infer.terms`) enters the model as a ``pyro.factor`` site named after
it, added after the model has run, outside every plate; the sites a term replaces are marked
``mask=False`` in model and guide and are neither scored nor counted.
:meth:`MeanFieldELBO.traces` returns the two traces, so every term is visible by name.

What differs from Pyro's estimator is the work around it, which on a small network is most of
the step:

- Pyro scores every site of both traces before the loss is formed (``compute_log_prob`` and
  ``compute_score_parts``), including every latent site whose KL is then taken in closed
  form; here a site is scored only when the estimator reads its log-density (observed
  sites, latent sites without a closed-form KL, auxiliary guide sites).
- Pyro reads the loss on the host every call (``torch_item`` of each particle and of the
  surrogate, ``warn_if_nan`` on the value and, through a hook, on its gradient): on a GPU
  each read stalls the step until the device catches up. With a fully reparameterised
  mean-field guide the surrogate loss *is* the loss, so :meth:`MeanFieldELBO.training_loss`
  (the engine's step) returns it on the device and leaves NaNs to the engine, which checks
  once per logging interval. Pyro's interface reads and warns as Pyro's does: ``loss`` and
  ``loss_and_grads`` return floats, ``loss`` and ``differentiable_loss`` warn
  "Encountered NaN: loss".

Under Pyro's validation (``pyro.enable_validation()``, Pyro's default) the model and guide
must match, every scored site's shape is checked against its plates, every latent site of
the guide must be fully reparameterised (an ``rsample`` and no score-function term, Pyro's
``check_fully_reparametrized``; the error names the site, e.g. a discrete latent), an
enumerated guide site is warned about, and so are model and guide sites in different
orders (the mean-field restriction), as with Pyro's :class:`~pyro.infer.TraceMeanField_ELBO`.
A latent site's KL is masked and scaled as its guide site is, as Pyro's is: a latent masked
out in the model alone keeps its closed-form KL.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyro
import torch
from pyro import poutine
from pyro.distributions.util import scale_and_mask
from pyro.infer import TraceMeanField_ELBO

# Pyro's own mean-field order check (private): TraceMeanField_ELBO runs it in its _get_trace,
# which MeanFieldELBO replaces to score lazily, so MeanFieldELBO's _get_trace calls it.
from pyro.infer.trace_mean_field_elbo import _check_mean_field_requirement
from pyro.infer.util import check_fully_reparametrized, is_validation_enabled, torch_item
from pyro.poutine.messenger import Messenger
from pyro.poutine.trace_struct import Trace
from pyro.poutine.util import prune_subsample_sites
from pyro.util import check_if_enumerated, check_model_guide_match, check_site_shape, warn_if_nan
from torch import nn

from ppl_vae._validation import boolean, finite
from ppl_vae.infer.steps import AuxiliaryStep, TrainingLoss
from ppl_vae.infer.terms import Term, TermSites, closed_form_kl, site_points

__all__ = ["MeanFieldELBO", "scored_site"]


def scored_site(trace: Trace, name: str) -> dict[str, Any]:
    """The site ``name`` of ``trace`` with its ``log_prob``, ``unscaled_log_prob`` (batch shape)
    and ``log_prob_sum`` (scalar), computed by Pyro's ``Trace.compute_log_prob`` and kept in
    the site for later calls; a value kept under ``torch.no_grad()`` is computed again when
    gradients are enabled, so a detached score never reaches a loss.

    :param trace: a model or guide trace (its sites' ``log_prob`` are added to it).
    :param name: the name of a sample site of ``trace``."""
    site = trace.nodes[name]
    if torch.is_grad_enabled() and site.get("_scored_without_grad"):
        for key in ("log_prob", "unscaled_log_prob", "log_prob_sum"):
            site.pop(key, None)
    if "log_prob_sum" not in site:
        site["_scored_without_grad"] = not torch.is_grad_enabled()
        trace.compute_log_prob(site_filter=lambda site_name, _: site_name == name)
    return site


def check_reparameterised(site: dict[str, Any]) -> None:
    """Pyro's :func:`~pyro.infer.util.check_fully_reparametrized` on a guide site (an ``rsample``
    and a zero score-function term), its ``score_parts`` computed and kept in the site as
    Pyro's ``Trace.compute_score_parts`` would; the ``NotImplementedError`` names the site."""
    if "score_parts" not in site:
        score_parts = site["fn"].score_parts(site["value"], *site["args"], **site["kwargs"])
        site["score_parts"] = score_parts.scale_and_mask(site["scale"], site["mask"])
    try:
        check_fully_reparametrized(site)
    except NotImplementedError as error:
        raise NotImplementedError(
            f"{error} The guide's site {site['name']!r} is a {type(site['fn']).__name__}, which has no rsample "
            "or a score-function term (a discrete or rejection-sampled latent)"
        ) from None


def is_replaced(site: dict[str, Any]) -> bool:
    """Whether a sample site is marked ``mask=False``: it adds nothing to the ELBO and is never scored."""
    return site["mask"] is False


class _MaskSites(Messenger):
    """Marks the sample sites ``names`` ``mask=False`` (applied outside the model's own handlers)."""

    def __init__(self, names: Sequence[str]) -> None:
        super().__init__()
        self.names = frozenset(names)

    def _process_message(self, msg: dict[str, Any]) -> None:
        if msg["type"] == "sample" and msg["name"] in self.names:
            msg["mask"] = False


class _SampleSites(Messenger):
    """Keeps every sample site's message (as the model's handlers leave it) while the model runs."""

    def __init__(self) -> None:
        super().__init__()
        self.sites: dict[str, dict[str, Any]] = {}

    def _pyro_post_sample(self, msg: dict[str, Any]) -> None:
        self.sites[msg["name"]] = msg


def model_module(model: Callable) -> nn.Module | None:
    """The ``nn.Module`` a model callable is a method of (``vae.model``), else ``None``."""
    owner = getattr(model, "__self__", None)
    return owner if isinstance(owner, nn.Module) else None


def _detached(value: torch.Tensor | float) -> torch.Tensor | float:
    return value.detach() if torch.is_tensor(value) else value


class _TermValues:
    """One particle's term values, recorded while the model runs and carried to the loss in the
    model trace (node ``_TERMS``, type ``"terms"``, which Pyro's scoring and checks skip).

    :param keep_graph: keep the values' graphs (:meth:`MeanFieldELBO.differentiable_terms`);
        otherwise they are recorded detached."""

    NODE = "_TERMS"

    def __init__(self, keep_graph: bool) -> None:
        self.keep_graph = keep_graph
        #: Per-point value of each term and ``<term>/<part>``, in the order evaluated.
        self.logged: dict[str, torch.Tensor | float] = {}
        #: The terms' arguments for their auxiliary steps (:meth:`~ppl_vae.infer.Term.step_arguments`).
        self.step_arguments: dict[str, dict[str, torch.Tensor]] = {}

    def kept(self, value: torch.Tensor | float) -> torch.Tensor | float:
        """``value`` as this particle's values keep it: detached unless :attr:`keep_graph`."""
        return value if self.keep_graph else _detached(value)

    def record(self, name: str, value: torch.Tensor | float) -> None:
        """Keep ``value`` under ``name`` (:meth:`kept`)."""
        self.logged[name] = self.kept(value)

    def add_to(self, model_trace: Trace) -> None:
        """Put these values into ``model_trace``."""
        model_trace.add_node(self.NODE, type="terms", value=self)

    @classmethod
    def of(cls, model_trace: Trace) -> _TermValues:
        """The values in ``model_trace`` (none for a trace without terms)."""
        node = model_trace.nodes.get(cls.NODE)
        return node["value"] if node is not None else cls(keep_graph=False)


class MeanFieldELBO(TraceMeanField_ELBO):
    """The mean-field ELBO with a weight ``beta`` on its KL terms and extra ``terms``, each a
    ``pyro.factor`` site (:mod:`ppl_vae.infer.mean_field`); :meth:`loss` is the same objective as a float.

    With ``beta=1`` and no terms it is :class:`~pyro.infer.TraceMeanField_ELBO`'s objective, with
    its contract: the same errors, warnings, loss and gradients on any model and guide. Where it
    takes the place of :class:`~pyro.infer.Trace_ELBO` it differs as TraceMeanField_ELBO does:
    a latent's KL is taken in closed form where one is registered (Trace_ELBO estimates it at
    the guide's sample), so the guide must be mean-field and fully reparameterised.

    :meth:`training_loss` returns the loss with what the rest of a training iteration reads
    from the step (:class:`~ppl_vae.infer.steps.TrainingLoss`): per-point values of the last
    particle for the log (detached): ``reconstruction`` (``-log p`` of the observed sites,
    each divided by the points its plate stands for), ``kl`` (the KLs the ELBO still counts,
    without beta; absent when it counts none), and each term's value under its name with its
    parts as ``<name>/<part>``; and the arguments the terms hand to their auxiliary steps.
    After each call of Pyro's interface (:meth:`differentiable_loss`, :meth:`loss`,
    ``loss_and_grads``: a plain SVI loop), :attr:`logged` holds the same values (after
    :meth:`traces`, the terms' only: nothing is scored there); the objective keeps no other
    state between calls.

    Calling: the methods that run the model (:meth:`training_loss`, :meth:`differentiable_loss`,
    :meth:`loss`, :meth:`traces`, :meth:`differentiable_terms`) take ``(model, guide, *args,
    **kwargs)``, the model and guide callables and their arguments (e.g. ``x=batch``); a model
    that is a method of an ``nn.Module``, such as ``vae.model``, lets the terms read its networks.
    Keyword arguments that a term takes (:meth:`~ppl_vae.infer.terms.Term.inputs`, e.g. the
    ``aggregate_data`` of :class:`~ppl_vae.infer.decomposition.AggregateDivergence`) go to the terms,
    not to the model and guide. So does ``step``, the training step (an int >= 0 or a 0-dim
    tensor) that the terms' schedules read (the ``step`` of :class:`~ppl_vae.infer.terms.TermSites`); with
    ``model_takes_step`` it goes to the model and guide as well.

    Example, a capacity-annealed beta-VAE in a plain SVI loop::

        elbo = MeanFieldELBO(terms=[Capacity("z", gamma=1000.0, capacity=LinearCapacity(0, 25, 100_000))])
        svi = SVI(vae.model, vae.guide, pyro.optim.Adam({"lr": 1e-3}), elbo)
        for step, x in enumerate(batches):
            svi.step(x, step=step)

    :param beta: weight of every KL the ELBO counts, >= 0 (a beta-VAE; 0 leaves the
        reconstruction and the terms).
    :param terms: extra :class:`~ppl_vae.infer.terms.Term` s, added in this order; names must
        be unique.
    :param model_takes_step: whether the model and guide take the training step as their
        ``step`` keyword argument too (a guide that follows a schedule, as
        :class:`~ppl_vae.models.PartedVAE`'s attention sharpness does); otherwise only the
        terms read it.
    :param kwargs: passed to :class:`~pyro.infer.TraceMeanField_ELBO` (``num_particles``,
        ``max_plate_nesting``).
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
        #: The per-point values of the last particle of the last call of Pyro's interface
        #: (:meth:`differentiable_loss`, :meth:`loss`, ``loss_and_grads``), by name:
        #: ``reconstruction``, ``kl`` and each term with its parts (class docstring; after
        #: :meth:`traces`, the terms' only); detached scalar tensors.
        self.logged: dict[str, torch.Tensor] = {}

    def differentiable_terms(self, model: Callable, guide: Callable, *args, **kwargs) -> dict[str, torch.Tensor]:
        """What :attr:`logged` holds after one particle (reconstruction, kl, every term and its
        parts, per point and unweighted), with gradients: for inspecting which parameters each
        term reaches (a term of weight 0 included).

        :param model: the model callable (class docstring: calling).
        :param guide: the guide callable.
        :param args: positional arguments of the model and guide.
        :param kwargs: keyword arguments of the model and guide, the terms' and ``step``
            (class docstring: calling)."""
        model_trace, guide_trace = self._traces(model, guide, args, kwargs, keep_graph=True)
        return self._particle(model_trace, guide_trace)[1]

    def term(self, name: str) -> Term:
        """The term named ``name``; a ``KeyError`` if there is none.

        :param name: the term's name (its ``pyro.factor`` site)."""
        for term in self.terms:
            if term.name == name:
                return term
        raise KeyError(f"no term named {name!r}; the terms are {[t.name for t in self.terms]}")

    def _with_terms(
        self,
        model: Callable,
        guide: Callable,
        guide_trace: Trace,
        module: nn.Module | None,
        inputs: Mapping[str, Any],
        step: int | torch.Tensor | None,
        values: _TermValues,
    ) -> Callable:
        """The model followed by one ``pyro.factor(term.name, -w N v)`` per term of weight
        ``w > 0``, outside every plate, its sites read against ``guide_trace`` (the guide's run
        on the same arguments); each term's value and parts go to ``values``.

        :param model: the model callable.
        :param guide: the guide callable (the terms may encode other data with it).
        :param guide_trace: the guide's trace of the same particle.
        :param module: the module the terms read networks from (``None``: no module).
        :param inputs: the keyword arguments the terms take (:meth:`~ppl_vae.infer.Term.inputs`).
        :param step: the training step the terms' schedules read
            (the ``step`` of :class:`~ppl_vae.infer.TermSites`).
        :param values: where the terms' values, parts and step arguments are recorded
            (detached unless ``values.keep_graph``)."""

        def model_with_terms(*args, **kwargs):
            with _SampleSites() as capture:
                result = model(*args, **kwargs)
            sites = TermSites(guide_trace, capture.sites, module, guide, dict(inputs), step)
            for term in self.terms:
                with torch.set_grad_enabled(torch.is_grad_enabled() and (term.weight > 0 or values.keep_graph)):
                    value, parts = term.evaluate(sites)
                values.record(term.name, value)
                for part, part_value in parts.items():
                    values.record(f"{term.name}/{part}", part_value)
                if term.weight > 0:
                    pyro.factor(term.name, -term.weight * term.num_points(sites) * value)
                values.step_arguments.update(term.step_arguments(sites))
            return result

        return model_with_terms

    def replaced_sites(self, model: Callable) -> tuple[str, ...]:
        """The sites the terms replace, for ``model``.

        :param model: the model callable (the terms read the module it is a method of)."""
        module = model_module(model)
        return tuple(dict.fromkeys(name for term in self.terms for name in term.replaced_sites(module)))

    def traces(self, model: Callable, guide: Callable, *args, **kwargs) -> tuple[Trace, Trace]:
        """``(model_trace, guide_trace)`` of one particle: the guide's, and the model's with
        every term as a ``pyro.factor`` site, the replaced sites marked ``mask=False``, and a
        node ``_TERMS`` of type ``"terms"`` that carries the terms' per-point values to the
        loss; :attr:`logged` then holds those values and parts (nothing is scored yet, so no
        ``reconstruction`` or ``kl``).

        :param model: the model callable (class docstring: calling).
        :param guide: the guide callable.
        :param args: positional arguments of the model and guide.
        :param kwargs: keyword arguments of the model and guide, the terms' and ``step``
            (class docstring: calling)."""
        model_trace, guide_trace = self._traces(model, guide, args, kwargs, keep_graph=False)
        self.logged = dict(_TermValues.of(model_trace).logged)
        return model_trace, guide_trace

    def _get_trace(self, model, guide, args, kwargs) -> tuple[Trace, Trace]:
        """One particle's traces (Pyro's hook, called by ``_get_traces`` for every particle)."""
        return self._traces(model, guide, args, kwargs, keep_graph=False)

    def _guess_max_plate_nesting(self, model, guide, args, kwargs) -> None:
        """Pyro's guess, run on the model's and guide's own keyword arguments: Pyro's hook, which
        ``_get_traces`` calls with the call's (the terms' and ``step`` among them) when
        ``vectorize_particles`` is set and ``max_plate_nesting`` is not."""
        super()._guess_max_plate_nesting(model, guide, args, self._split_arguments(kwargs)[0])

    def _split_arguments(self, kwargs: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any], Any]:
        """``(model_kwargs, inputs, step)``: a call's keyword arguments split into the model's and
        guide's, the terms' (:meth:`~ppl_vae.infer.Term.inputs`) and the training step (``None``
        when not given; also the model's with ``model_takes_step``)."""
        inputs = {name: kwargs[name] for name in self._term_inputs if name in kwargs}
        model_kwargs = {name: value for name, value in kwargs.items()
                        if name not in inputs and (name != "step" or self.model_takes_step)}
        return model_kwargs, inputs, kwargs.get("step")

    def _traces(self, model, guide, args, kwargs, keep_graph: bool) -> tuple[Trace, Trace]:
        """One particle's ``(model_trace, guide_trace)``, the model's carrying the terms' values
        (:class:`_TermValues`, kept with their graphs when ``keep_graph``)."""
        kwargs, inputs, step = self._split_arguments(kwargs)
        values = _TermValues(keep_graph)
        if isinstance(poutine.unwrap(guide), Messenger):
            if self.terms:
                raise ValueError("extra terms need a guide function, not a GuideMessenger")
            model_trace, guide_trace = super()._get_trace(model, guide, args, kwargs)
            values.add_to(model_trace)
            return model_trace, guide_trace
        module, plain_guide = model_module(model), guide
        replaced = self.replaced_sites(model)
        if replaced:
            model, guide = _MaskSites(replaced)(model), _MaskSites(replaced)(guide)
        guide_trace = poutine.trace(guide).get_trace(*args, **kwargs)
        if self.terms:
            model = self._with_terms(model, plain_guide, guide_trace, module, inputs, step, values)
        model_trace = poutine.trace(poutine.replay(model, trace=guide_trace)).get_trace(*args, **kwargs)
        if is_validation_enabled():
            check_model_guide_match(model_trace, guide_trace, self.max_plate_nesting)
        model_trace, guide_trace = prune_subsample_sites(model_trace), prune_subsample_sites(guide_trace)
        if is_validation_enabled():
            for trace in (model_trace, guide_trace):
                trace.compute_log_prob(site_filter=lambda _, site: not is_replaced(site))
                for site in trace.nodes.values():
                    if site["type"] == "sample" and not is_replaced(site):
                        check_site_shape(site, self.max_plate_nesting)
            check_if_enumerated(guide_trace)
            _check_mean_field_requirement(model_trace, guide_trace)
        values.add_to(model_trace)
        return model_trace, guide_trace

    def _differentiable_loss_particle(self, model_trace: Trace, guide_trace: Trace) -> tuple[torch.Tensor, torch.Tensor]:
        """``(loss, surrogate)`` of one particle, both ``-ELBO`` (the loss a float, as Pyro's), Pyro's hook
        (``loss_and_grads``, a plain SVI step); :attr:`logged` then holds the particle's values."""
        surrogate, self.logged = self._particle(model_trace, guide_trace)
        return torch_item(surrogate), surrogate

    def _particle(self, model_trace: Trace, guide_trace: Trace) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``(surrogate, logged)`` of one particle: ``-ELBO`` (differentiable) and the per-point
        values of the class docstring, kept as the traces' term values are (:class:`_TermValues`)."""
        values = _TermValues.of(model_trace)
        log_likelihood: torch.Tensor | float = 0.0
        kl_total: torch.Tensor | float = 0.0
        reconstruction: torch.Tensor | float = 0.0
        counted_kl: torch.Tensor | float | None = None
        for name, site in model_trace.nodes.items():
            if site["type"] != "sample":
                continue
            if site["is_observed"]:
                if is_replaced(site):
                    continue
                log_prob_sum = scored_site(model_trace, name)["log_prob_sum"]
                log_likelihood = log_likelihood + log_prob_sum
                if name not in self._term_names:
                    reconstruction = reconstruction - values.kept(log_prob_sum) / site_points(site)
                continue
            guide_site = guide_trace.nodes[name]
            if is_replaced(site) and is_replaced(guide_site):  # a KL of 0 (Pyro masks it with the guide's mask)
                continue
            if is_validation_enabled():
                check_reparameterised(guide_site)
            kl = closed_form_kl(guide_site["fn"], site["fn"])
            if kl is None:  # log q - log p at the guide's sample, from the traces' scores (Pyro's)
                kl = scored_site(guide_trace, name)["log_prob_sum"] - scored_site(model_trace, name)["log_prob_sum"]
            else:
                kl = scale_and_mask(kl, scale=guide_site["scale"], mask=guide_site["mask"])
                kl = kl.sum() if torch.is_tensor(kl) else kl * guide_site["fn"].batch_shape.numel()
            kl_total = kl_total + kl
            counted_kl = (0.0 if counted_kl is None else counted_kl) + values.kept(kl) / site_points(guide_site)
        for name, guide_site in guide_trace.nodes.items():
            if guide_site["type"] == "sample" and name not in model_trace.nodes and not is_replaced(guide_site):
                if not guide_site["infer"].get("is_auxiliary"):  # Pyro's estimator asserts the same
                    raise AssertionError(f"the guide's site {name!r} is not in the model: mark it "
                                         "infer={'is_auxiliary': True} if it is an auxiliary variable")
                if is_validation_enabled():
                    check_reparameterised(guide_site)
                kl_total = kl_total + scored_site(guide_trace, name)["log_prob_sum"]
        logged = dict(values.logged)
        logged["reconstruction"] = torch.as_tensor(reconstruction)
        if counted_kl is not None:
            logged["kl"] = torch.as_tensor(counted_kl)
        return self.beta * kl_total - log_likelihood, logged

    def training_loss(self, model, guide, *args, **kwargs) -> TrainingLoss:
        """``mean over particles of -ELBO``, differentiable (analytic KLs where Pyro has them),
        with the last particle's logged values and the arguments of the terms' auxiliary steps
        (class docstring). Leaves :attr:`logged` as it was.

        :param model: the model callable (class docstring: calling).
        :param guide: the guide callable.
        :param args: positional arguments of the model and guide.
        :param kwargs: keyword arguments of the model and guide, the terms' and ``step``
            (class docstring: calling)."""
        loss: torch.Tensor | float = 0.0
        for model_trace, guide_trace in self._get_traces(model, guide, args, kwargs):
            surrogate, logged = self._particle(model_trace, guide_trace)
            loss = loss + surrogate / self.num_particles
        return TrainingLoss(loss, logged, _TermValues.of(model_trace).step_arguments)

    def differentiable_loss(self, model, guide, *args, **kwargs) -> torch.Tensor:
        """``mean over particles of -ELBO``, differentiable; :attr:`logged` then holds the last
        particle's per-point values.

        :param model: the model callable (class docstring: calling).
        :param guide: the guide callable.
        :param args: positional arguments of the model and guide.
        :param kwargs: keyword arguments of the model and guide, the terms' and ``step``
            (class docstring: calling)."""
        result = self.training_loss(model, guide, *args, **kwargs)
        self.logged = result.logged
        return warn_if_nan(result.loss, "loss")

    @torch.no_grad()
    def loss(self, model, guide, *args, **kwargs) -> float:
        """The same objective as :meth:`differentiable_loss`, as a float (what
        ``SVI.evaluate_loss`` reports).

        :param model: the model callable (class docstring: calling).
        :param guide: the guide callable.
        :param args: positional arguments of the model and guide.
        :param kwargs: keyword arguments of the model and guide, the terms' and ``step``
            (class docstring: calling)."""
        return torch_item(self.differentiable_loss(model, guide, *args, **kwargs))

    def auxiliary_steps(self, model: nn.Module) -> list[AuxiliaryStep]:
        """The optimisation steps the terms need besides the ELBO step (e.g. a TC discriminator's).

        :param model: the model being trained (an ``nn.Module``)."""
        return [step for term in self.terms for step in term.auxiliary_steps(model)]

    def auxiliary_modules(self) -> dict[str, nn.Module]:
        """Networks the terms own outside the model, by name, for the engine to move and checkpoint."""
        modules: dict[str, nn.Module] = {}
        for term in self.terms:
            modules.update(term.auxiliary_modules())
        return modules
