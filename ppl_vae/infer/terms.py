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

The terms, with the papers' notation:

- :class:`Capacity`: :math:`|KL(q(z|x) \| p(z)) - C(t)|` for a latent site (Burgess et al. 2018;
  PartedVAE Eq. 6, z part).
- :class:`ClassCapacity`: :math:`|\sum_i \sum_k q(c_i{=}k|x) KL(q(u_i|c_i,x) \| p(u_i|c_i{=}k)) - C(t)|`
  (PartedVAE Eq. 6, u part).
- :class:`ClassEntropy`: :math:`\sum_i H(q(c_i|x))`.
- :class:`AggregateClassKL`: :math:`\sum_i KL(\hat q(c_i) \| p(c_i))`, :math:`\hat q` the
  minibatch average of q(c_i|x).
- :class:`BhattacharyyaPenalty`: :math:`\sum_i \sum_{j<k} \max(BC(p(u_i|c_i{=}j), p(u_i|c_i{=}k)) - \delta, 0)`.
- :class:`AggregateDivergence`: :math:`D(q(z), p(z))`, dimension-wise MMD or inclusive KL
  (Mathieu et al. 2019, Eq. 7).
- :class:`TotalCorrelation`: :math:`TC(s, z) = KL(q(s,z) \| q(s)q(z))` by a discriminator's
  density ratio (Abid & Zou 2019, Eq. 5), with the discriminator's own step.

Batch-level quantities (a minibatch-average KL inside ``|.|``, the aggregate q(c), the
aggregate posterior) are taken over the global batch under data parallelism
(:func:`~ppl_vae.infer.distributed.all_gather`; the identity on one process).

Example: a capacity on the contrastive VAE's shared latent, and the aggregate MMD on
PartedVAE's z::

    ContrastiveELBO(gamma=1.0, extra_terms=[Capacity("target_z", gamma=10.0, capacity=LinearCapacity(0, 5, 10_000))])
    PartedELBO(extra_terms=[AggregateDivergence("z", alpha=100.0, divergence="mmd")])
    MeanFieldELBO(terms=[Capacity("z", gamma=1000.0, capacity=LinearCapacity(0, 25, 100_000))])
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.poutine.trace_struct import Trace
from torch import nn
from torch.distributions import Independent, Normal, kl_divergence
from torch.func import functional_call
from torch.utils.checkpoint import checkpoint

from ppl_vae._storage import stored_as_float
from ppl_vae.distributions import bhattacharyya_coefficient
from ppl_vae.infer.distributed import all_gather, local_rows, shared_permutation
from ppl_vae.infer.divergences import DEFAULT_MMD_LENGTH_SCALES, aggregate_log_density, mmd_dimensionwise
from ppl_vae.infer.schedules import LinearSchedule
from ppl_vae.infer.steps import AuxiliaryStep
from ppl_vae.nn.discriminator import TCDiscriminator

__all__ = [
    "AggregateClassKL",
    "AggregateDivergence",
    "BhattacharyyaPenalty",
    "Capacity",
    "ClassCapacity",
    "ClassEntropy",
    "ClassTerm",
    "ClassVariable",
    "Term",
    "TermSites",
    "TotalCorrelation",
    "discriminator_loss",
    "permute_shared",
]


def check_weight(value: float, name: str) -> float:
    """``value`` as a float, or a ``ValueError`` naming ``name`` unless it is a finite number >= 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def _check_name(value: str, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty site name, got {value!r}")
    return value


def _diagonal_normal(fn: dist.Distribution, site: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(loc, scale)`` of a diagonal Gaussian site (``Normal`` or ``Normal(...).to_event(1)``)."""
    base = fn.base_dist if isinstance(fn, Independent) and fn.reinterpreted_batch_ndims == 1 else fn
    if isinstance(base, Normal):
        return base.loc, base.scale
    raise ValueError(f"site {site!r} must be a diagonal Normal(...).to_event(1), got {type(fn).__name__}")


def _kl(guide_site: dict, model_site: dict) -> torch.Tensor:
    """Per-point KL(q || p) of a latent site: analytic when registered, else ``log q - log p``
    at the guide's sample."""
    try:
        return kl_divergence(guide_site["fn"], model_site["fn"])
    except NotImplementedError:
        value = guide_site["value"]
        return guide_site["fn"].log_prob(value) - model_site["fn"].log_prob(value)


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
    """

    guide_trace: Trace
    model_sites: Mapping[str, dict]
    module: nn.Module | None
    guide: Callable
    inputs: Mapping[str, Any] = field(default_factory=dict)

    def model_site(self, name: str) -> dict:
        """The model's sample site ``name``; a ``ValueError`` naming it if the model has none."""
        if name not in self.model_sites:
            raise ValueError(f"the model has no sample site {name!r}; its sites are {sorted(self.model_sites)}")
        return self.model_sites[name]

    def guide_site(self, name: str) -> dict:
        """The guide's sample site ``name``; a ``ValueError`` naming it if the guide has none."""
        if name not in self.guide_trace.nodes or self.guide_trace.nodes[name]["type"] != "sample":
            raise ValueError(f"the guide has no sample site {name!r}")
        return self.guide_trace.nodes[name]

    def num_points(self, name: str) -> torch.Tensor | float:
        """N for the model site ``name``: its batch size times its scale (the data plate's
        ``N / B``), the number of points its minibatch stands for."""
        site = self.model_site(name)
        return site["fn"].batch_shape.numel() * site["scale"]


class Term:
    """A named, weighted extra term of an objective (module docstring).

    Subclasses implement :meth:`evaluate` and :meth:`num_points`, and :meth:`replaced_sites`
    when they replace ELBO terms.

    :param name: the ``pyro.factor`` site's name, also the name it is logged under.
    :param weight: w >= 0; 0 computes the term for the log only.
    :param weight_name: the weight's name in the paper (``"gamma"``, ``"alpha"``), for errors.
    """

    def __init__(self, name: str, weight: float, weight_name: str = "weight") -> None:
        self.name = _check_name(name, "name")
        self.weight = check_weight(weight, weight_name)

    def evaluate(self, sites: TermSites) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``(v, parts)``: the per-point value (a scalar tensor) and named parts to log beside it
        (as ``<name>/<part>``)."""
        raise NotImplementedError

    def num_points(self, sites: TermSites) -> torch.Tensor | float:
        """N, the points the minibatch stands for."""
        raise NotImplementedError

    def replaced_sites(self, module: nn.Module | None) -> tuple[str, ...]:
        """The sites whose ELBO terms this term replaces, for a model method of ``module``."""
        return ()

    def auxiliary_steps(self, model: nn.Module) -> list[AuxiliaryStep]:
        """Optimisation steps this term needs besides the ELBO's (none by default)."""
        return []

    def auxiliary_modules(self) -> dict[str, nn.Module]:
        """Networks this term owns outside the model, by name (none by default)."""
        return {}

    def inputs(self) -> tuple[str, ...]:
        """Names of keyword arguments of the objective's call that this term takes instead of
        the model and guide (read from :attr:`TermSites.inputs`; none by default)."""
        return ()

    def step_arguments(self, sites: TermSites) -> dict[str, dict[str, torch.Tensor]]:
        """Keyword arguments for this term's auxiliary steps taken after the ELBO step, by step
        name, read from the ELBO step's particle (none by default)."""
        return {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, weight={self.weight})"


class Capacity(Term):
    r"""The capacity term :math:`|KL(q(z|x) \| p(z)) - C(t)|` of a latent site (Burgess et al.
    2018; PartedVAE Eq. 6), replacing that site's KL in the ELBO.

    KL is the minibatch (global-batch) average of the per-point KL, analytic where registered,
    else ``log q - log p`` at the guide's sample. Logs ``<name>/kl`` and ``<name>/target`` (C(t))
    beside the term.

    :param site: the latent site (in model and guide).
    :param gamma: weight gamma.
    :param capacity: C(t), a schedule over the training step
        (:func:`~ppl_vae.infer.schedules.set_training_step`).
    :param name: the factor's name; default ``"capacity_<site>"``.
    """

    def __init__(self, site: str, gamma: float, capacity: LinearSchedule, name: str | None = None) -> None:
        super().__init__(name or f"capacity_{site}", gamma, "gamma")
        if not isinstance(capacity, LinearSchedule):
            raise ValueError(f"capacity must be a LinearCapacity, got {capacity!r}")
        self.site = _check_name(site, "site")
        self.capacity = capacity

    def evaluate(self, sites: TermSites) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``(|KL - C(t)|, {"kl": KL, "target": C(t)})``, KL the (global) batch mean."""
        kl = all_gather(_kl(sites.guide_site(self.site), sites.model_site(self.site))).mean()
        target = kl.new_tensor(self.capacity())
        return (kl - target).abs(), {"kl": kl, "target": target}

    def num_points(self, sites: TermSites) -> torch.Tensor | float:
        """N of the latent site."""
        return sites.num_points(self.site)

    def replaced_sites(self, module: nn.Module | None) -> tuple[str, ...]:
        """The latent site, whose KL this term replaces."""
        return (self.site,)


class ClassVariable(NamedTuple):
    """A categorical latent c and its class-conditional latent u.

    :param class_site: the site of c (one-hot; relaxed in the guide, observed given labels).
    :param site: the site of u (a diagonal Normal in the guide).
    :param priors: the path of the model's submodule (``module.get_submodule(priors)``) whose
        call with no arguments returns the L class priors p(u | c = k), a Normal with batch
        shape ``(L,)`` and event shape ``(D,)``
        (:class:`~ppl_vae.distributions.ClassConditionalGaussianPrior`).
    """

    class_site: str
    site: str
    priors: str


class ClassTerm(Term):
    """A term over categorical latents and their class-conditional latents.

    :param name: the factor's name.
    :param weight: its weight.
    :param variables: the :class:`ClassVariable` s; ``None`` takes the model's own
        (``module.class_variables()``, as :class:`~ppl_vae.models.PartedVAE` declares them).
    """

    def __init__(self, name: str, weight: float, variables: Sequence[ClassVariable] | None = None) -> None:
        super().__init__(name, weight, "gamma")
        if variables is not None:
            variables = tuple(ClassVariable(*variable) for variable in variables)
            if not variables:
                raise ValueError("variables must hold at least one ClassVariable, or be None")
        self.variables = variables

    def class_variables(self, module: nn.Module | None) -> tuple[ClassVariable, ...]:
        """The variables given, or those ``module.class_variables()`` declares."""
        if self.variables is not None:
            return self.variables
        declare = getattr(module, "class_variables", None)
        if declare is None:
            raise ValueError(
                f"term {self.name!r} needs its class variables: pass variables=[ClassVariable(class_site, "
                "site, priors)], or train a model that declares class_variables() (PartedVAE)"
            )
        return tuple(declare())

    def num_points(self, sites: TermSites) -> torch.Tensor | float:
        """N of the first variable's u site."""
        return sites.num_points(self.class_variables(sites.module)[0].site)

    @staticmethod
    def class_priors(variable: ClassVariable, module: nn.Module | None) -> dist.Normal:
        """The ``(L,)`` class priors of ``variable`` as one batched Normal (event dimension last)."""
        if module is None:
            raise ValueError(f"class priors {variable.priors!r} are read from the model's module; the model is not a module method")
        loc, scale = _diagonal_normal(module.get_submodule(variable.priors)(), variable.priors)
        return dist.Normal(loc, scale)

    @staticmethod
    def class_probabilities(variable: ClassVariable, sites: TermSites) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(q, log_q)`` of q(c | x), ``(B, L)``: from the guide's logits; the one-hot labels and
        ``None`` when c is observed in the model and absent from the guide."""
        if variable.class_site in sites.guide_trace.nodes:
            log_q = sites.guide_site(variable.class_site)["fn"].logits.log_softmax(-1)
            return log_q.exp(), log_q
        return sites.model_site(variable.class_site)["value"], None


class ClassCapacity(ClassTerm):
    r""":math:`|\sum_i \sum_k q(c_i{=}k|x)\, KL(q(u_i|c_i,x) \| p(u_i|c_i{=}k)) - C(t)|`
    (PartedVAE Eq. 6), replacing the KLs of every u_i.

    The expectation over q(c_i|x) is taken in closed form from the guide's logits (with labels,
    q is their one-hot code); the sum over k and i, then the minibatch (global-batch) average.
    Logs ``<name>/kl`` and ``<name>/target``.

    :param gamma: weight gamma_u.
    :param capacity: C_u(t).
    :param variables: see :class:`ClassTerm`.
    :param name: the factor's name.
    """

    def __init__(
        self,
        gamma: float,
        capacity: LinearSchedule,
        variables: Sequence[ClassVariable] | None = None,
        name: str = "capacity_u",
    ) -> None:
        super().__init__(name, gamma, variables)
        if not isinstance(capacity, LinearSchedule):
            raise ValueError(f"capacity must be a LinearCapacity, got {capacity!r}")
        self.capacity = capacity

    def replaced_sites(self, module: nn.Module | None) -> tuple[str, ...]:
        """Every u_i, whose KLs this term replaces."""
        return tuple(variable.site for variable in self.class_variables(module))

    def evaluate(self, sites: TermSites) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``(|KL_u - C(t)|, {"kl": KL_u, "target": C(t)})``."""
        kl = 0.0
        for variable in self.class_variables(sites.module):
            q, _ = self.class_probabilities(variable, sites)
            priors = self.class_priors(variable, sites.module)
            loc, scale = _diagonal_normal(sites.guide_site(variable.site)["fn"], variable.site)
            kl_to_classes = kl_divergence(
                dist.Normal(loc.unsqueeze(-2), scale.unsqueeze(-2)).to_event(1), priors.to_event(1)
            )
            kl = kl + all_gather((q * kl_to_classes).sum(-1)).mean()
        target = kl.new_tensor(self.capacity())
        return (kl - target).abs(), {"kl": kl, "target": target}


class ClassEntropy(ClassTerm):
    r""":math:`\sum_i H(q(c_i|x))`, the minibatch average of the entropy of each q(c_i|x)
    (PartedVAE Eq. 6; with :class:`AggregateClassKL` it replaces the KL of c, whose relaxed
    samples are never scored). Zero for a variable given by labels.

    :param gamma: weight gamma_H.
    :param variables: see :class:`ClassTerm`.
    :param name: the factor's name.
    """

    def __init__(self, gamma: float, variables: Sequence[ClassVariable] | None = None, name: str = "entropy") -> None:
        super().__init__(name, gamma, variables)

    def replaced_sites(self, module: nn.Module | None) -> tuple[str, ...]:
        """Every c_i, whose KL the entropy and aggregate terms replace."""
        return tuple(variable.class_site for variable in self.class_variables(module))

    def evaluate(self, sites: TermSites) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``(sum_i mean_n H(q(c_i|x_n)), {})``."""
        variables = self.class_variables(sites.module)
        entropy = sites.model_site(variables[0].site)["value"].new_zeros(())
        for variable in variables:
            q, log_q = self.class_probabilities(variable, sites)
            if log_q is not None:
                entropy = entropy - (q * log_q).sum(-1).mean()
        return entropy, {}


class AggregateClassKL(ClassTerm):
    r""":math:`\sum_i KL(\hat q(c_i) \| p(c_i))` with :math:`\hat q(c_i) = \frac{1}{B}\sum_n q(c_i|x_n)`
    over the (global) minibatch, p(c_i) the model's categorical (PartedVAE Eq. 6). Zero for a
    variable given by labels; replaces the KL of c with :class:`ClassEntropy`.

    :param gamma: weight gamma_c.
    :param variables: see :class:`ClassTerm`.
    :param name: the factor's name.
    """

    def __init__(self, gamma: float, variables: Sequence[ClassVariable] | None = None, name: str = "aggregate_kl") -> None:
        super().__init__(name, gamma, variables)

    def replaced_sites(self, module: nn.Module | None) -> tuple[str, ...]:
        """Every c_i, whose KL the entropy and aggregate terms replace."""
        return tuple(variable.class_site for variable in self.class_variables(module))

    def evaluate(self, sites: TermSites) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``(sum_i KL(qhat(c_i) || p(c_i)), {})``."""
        variables = self.class_variables(sites.module)
        total = sites.model_site(variables[0].site)["value"].new_zeros(())
        for variable in variables:
            _, log_q = self.class_probabilities(variable, sites)
            if log_q is None:
                continue
            log_p = sites.model_site(variable.class_site)["fn"].logits.log_softmax(-1)
            total = total + self.aggregate_kl(all_gather(log_q), all_gather(log_p))
        return total, {}

    @staticmethod
    def aggregate_kl(log_q: torch.Tensor, log_p: torch.Tensor) -> torch.Tensor:
        r"""KL(qhat || pbar) with ``log qhat = logsumexp_n log q(c|x_n) - log B`` from ``(B, L)``
        log-probabilities (p averaged the same way; it is the same for every point)."""
        log_batch = math.log(log_q.shape[0])
        log_q_hat = torch.logsumexp(log_q, dim=0) - log_batch
        log_p_bar = torch.logsumexp(log_p, dim=0) - log_batch
        return (log_q_hat.exp() * (log_q_hat - log_p_bar)).sum()


class BhattacharyyaPenalty(ClassTerm):
    r""":math:`\sum_i \sum_{j<k} \max(BC(p(u_i|c_i{=}j), p(u_i|c_i{=}k)) - \delta, 0)`, the hinge
    on the Bhattacharyya coefficient between every pair of class priors (PartedVAE Eq. 6).

    :param gamma: weight gamma_BC.
    :param delta: the threshold in [0, 1].
    :param variables: see :class:`ClassTerm`.
    :param name: the factor's name.
    """

    def __init__(
        self, gamma: float, delta: float = 0.1, variables: Sequence[ClassVariable] | None = None, name: str = "bhattacharyya"
    ) -> None:
        super().__init__(name, gamma, variables)
        if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0.0 <= delta <= 1.0:
            raise ValueError(f"delta must be a number in [0, 1], got {delta!r}")
        self.delta = float(delta)

    def evaluate(self, sites: TermSites) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``(sum_i sum_{j<k} max(BC_jk - delta, 0), {})`` over the class priors."""
        total = 0.0
        for variable in self.class_variables(sites.module):
            priors = self.class_priors(variable, sites.module)
            loc, scale = priors.loc, priors.scale
            coefficients = bhattacharyya_coefficient(
                dist.Normal(loc.unsqueeze(1), scale.unsqueeze(1)).to_event(1),
                dist.Normal(loc.unsqueeze(0), scale.unsqueeze(0)).to_event(1),
            )
            rows, columns = torch.triu_indices(loc.shape[0], loc.shape[0], offset=1, device=loc.device)
            total = total + (coefficients[rows, columns] - self.delta).clamp_min(0.0).sum()
        return total, {}


DIVERGENCES = ("mmd", "inclusive_kl")


def _prior_draws(prior: dist.Distribution) -> torch.Tensor:
    """One draw of the model's prior site per data point ``(B, D)``, reparameterised when the
    prior allows it, so that the divergence's gradient reaches learned prior parameters."""
    z = prior.rsample() if prior.has_rsample else prior.sample()
    return z.reshape(-1, z.shape[-1])


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
        if divergence not in DIVERGENCES:
            raise ValueError(f"divergence must be one of {DIVERGENCES}, got {divergence!r}")
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
        self.site = _check_name(site, "site")
        self.divergence = divergence
        self.length_scales = tuple(float(s) for s in length_scales)
        self.chunk_size = chunk_size

    def num_points(self, sites: TermSites) -> torch.Tensor | float:
        """N of the latent site."""
        return sites.num_points(self.site)

    def inputs(self) -> tuple[str, ...]:
        """``("aggregate_data",)``: keyword arguments of the guide for a whole data set, e.g.
        ``{"x": X (N, ...)}`` (inclusive KL only), re-encoded with gradients on every call, chunk
        by chunk under activation checkpointing (memory O(N D) plus one chunk's activations)."""
        return (self.AGGREGATE_DATA,)

    def evaluate(self, sites: TermSites) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``(D(q(z), p(z)), {})``, the MMD or the inclusive KL."""
        aggregate_data = sites.inputs.get(self.AGGREGATE_DATA)
        if aggregate_data is not None and self.divergence != "inclusive_kl":
            raise ValueError(f"aggregate_data is used by the inclusive KL only, got divergence={self.divergence!r}")
        guide_site = sites.guide_site(self.site)
        prior = sites.model_site(self.site)["fn"]
        prior_z = _prior_draws(prior)
        if self.divergence == "mmd":
            posterior_z = guide_site["value"].reshape(-1, prior_z.shape[-1])
            return mmd_dimensionwise(all_gather(posterior_z), all_gather(prior_z), self.length_scales), {}
        prior_log_prob = prior.log_prob(prior_z.reshape(prior.shape())).reshape(-1)
        if aggregate_data is None:
            loc, scale = _diagonal_normal(guide_site["fn"], self.site)
            loc, scale = all_gather(loc.reshape(-1, loc.shape[-1])), all_gather(scale.reshape(-1, scale.shape[-1]))
        else:
            loc, scale = aggregate_encodings(sites.guide, aggregate_data, self.site, self.chunk_size, prior_z.device)
        log_ratio = prior_log_prob - aggregate_log_density(prior_z, loc, scale, self.chunk_size)
        estimate = log_ratio.mean()
        if not prior.has_rsample and prior_log_prob.requires_grad:
            detached = log_ratio.detach()
            every_draw = all_gather(detached)
            if every_draw.shape[0] > 1:
                baseline = (every_draw.sum() - detached) / (every_draw.shape[0] - 1)
                estimate = estimate + ((detached - baseline) * (prior_log_prob - prior_log_prob.detach())).mean()
        return estimate, {}


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
        loc, scale = _diagonal_normal(node["fn"], site)
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


def permute_shared(s: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """Samples of q(s) q(z) from joint samples: ``[s_n, z_pi(n)] (B, D_s + D_z)`` for a random
    permutation pi of the batch (the authors swap the halves of the batch instead).

    Under data parallelism pi permutes the global batch (one permutation for every process,
    :func:`~ppl_vae.infer.distributed.shared_permutation`) and each process returns its own
    rows n, whose partner z_pi(n) may live on another process (gathered): together the
    processes build exactly the pairs one process with the global batch would."""
    every_z = all_gather(z)
    partners = local_rows(shared_permutation(every_z.shape[0], device=z.device), z.shape[0])
    return torch.cat([s, every_z[partners]], dim=-1)


def discriminator_loss(discriminator: nn.Module, s: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """``mean_n [-log D([s_n, z_n]) - log(1 - D([s_n, z_pi(n)]))]``, the logistic loss of
    joint against permuted samples (Abid & Zou 2019, appendix C), from logits. Under data
    parallelism the mean runs over this process's rows of the global batch (pairs from
    :func:`permute_shared`); DDP's average of the processes' gradients is the gradient of the
    global mean."""
    joint = discriminator(torch.cat([s, z], dim=-1))
    product = discriminator(permute_shared(s, z))
    return torch.nn.functional.softplus(-joint).mean() + torch.nn.functional.softplus(product).mean()


class TotalCorrelation(Term):
    r"""The total correlation :math:`TC(s, z) = KL(q(s, z) \| q(s) q(z))` of two latent sites
    under the guide (Abid & Zou 2019, Eq. 5; appendix C), by the density-ratio trick: a
    discriminator D tells joint samples ``v = [s, z]`` from samples whose s and z come from
    different points, and at its optimum ``logit D(v) = log q(s, z) / q(s) q(z)``, so
    :math:`TC \approx \frac{1}{B}\sum_n \mathrm{logit}\, D(v_n)`.

    D belongs to this term (not to the model or Pyro's parameter store). The factor evaluates D
    with its parameters detached, so the ELBO's gradient never reaches D; D is trained by the
    term's own step (:meth:`auxiliary_steps`, after each ELBO step) on detached samples: those
    of the ELBO step, which hands them to the step as arguments (:meth:`step_arguments`).

    :param salient_site: the site of s.
    :param shared_site: the site of z.
    :param gamma: weight gamma.
    :param discriminator: ``"linear"`` (the paper's logistic regression) or ``"mlp"``.
    :param discriminator_hidden: widths of the MLP discriminator's hidden layers.
    :param discriminator_lr: learning rate of the discriminator step (``None``: the engine's).
    :param name: the factor's name.
    """

    #: The name of the discriminator's auxiliary step (its loss is logged as ``discriminator_loss``).
    STEP = "discriminator"

    def __init__(
        self,
        salient_site: str,
        shared_site: str,
        gamma: float,
        discriminator: str = "linear",
        discriminator_hidden: Sequence[int] = (64, 64),
        discriminator_lr: float | None = None,
        name: str = "total_correlation",
    ) -> None:
        super().__init__(name, gamma, "gamma")
        if discriminator_lr is not None and not discriminator_lr > 0:
            raise ValueError(f"discriminator_lr must be > 0 or None, got {discriminator_lr!r}")
        self.salient_site = _check_name(salient_site, "salient_site")
        self.shared_site = _check_name(shared_site, "shared_site")
        self.discriminator = TCDiscriminator(discriminator, discriminator_hidden)
        self.discriminator_lr = discriminator_lr

    def num_points(self, sites: TermSites) -> torch.Tensor | float:
        """N of the salient site."""
        return sites.num_points(self.salient_site)

    def log_density_ratio(self, s: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """``log D(v) / (1 - D(v))`` per point ``(B,)`` for ``s (B, D_s)``, ``z (B, D_z)``, with D's
        parameters detached (gradients flow to s and z only)."""
        v = torch.cat([s, z], dim=-1)
        self.discriminator.build(v.shape[-1], v.device)
        detached = {name: p.detach() for name, p in self.discriminator.named_parameters()}
        return functional_call(self.discriminator, detached, (v,))

    def evaluate(self, sites: TermSites) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``(mean_n logit D([s_n, z_n]), {})``."""
        s = sites.model_site(self.salient_site)["value"]
        z = sites.model_site(self.shared_site)["value"]
        return self.log_density_ratio(s, z).mean(), {}

    def step_arguments(self, sites: TermSites) -> dict[str, dict[str, torch.Tensor]]:
        """``{"discriminator": {"salient_sample": s, "shared_sample": z}}``, the ELBO step's
        samples, detached, for the discriminator step; none when the weight is 0 (no step)."""
        if self.weight == 0:
            return {}
        s = sites.model_site(self.salient_site)["value"]
        z = sites.model_site(self.shared_site)["value"]
        return {self.STEP: {"salient_sample": s.detach(), "shared_sample": z.detach()}}

    def auxiliary_modules(self) -> dict[str, nn.Module]:
        """``{"discriminator": D}``, for the engine to move and checkpoint."""
        return {"discriminator": self.discriminator}

    def auxiliary_steps(self, model: nn.Module) -> list[AuxiliaryStep]:
        """The discriminator step (after each ELBO step): :func:`discriminator_loss` on detached
        ``[s, z]``: ``salient_sample`` and ``shared_sample`` when given (the samples the ELBO
        step drew on the same batch, :meth:`step_arguments`: no second pass through the
        encoders), else fresh ones from ``model.guide`` on the batch (a plain SVI loop); none
        when the weight is 0."""
        if self.weight == 0:
            return []
        self.discriminator.build(model.salient_dim + model.shared_dim)

        def loss(
            salient_sample: torch.Tensor | None = None, shared_sample: torch.Tensor | None = None, **batch: torch.Tensor
        ) -> torch.Tensor:
            if salient_sample is None or shared_sample is None:
                salient_sample, shared_sample = self.guide_samples(model, **batch)
            return discriminator_loss(self.discriminator, salient_sample, shared_sample)

        return [AuxiliaryStep(self.STEP, loss, list(self.discriminator.parameters()), when="after", lr=self.discriminator_lr)]

    @torch.no_grad()
    def guide_samples(self, model: nn.Module, **batch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Detached ``s (B, D_s)``, ``z (B, D_z)`` sampled from the guide on the target batch
        (the background is not encoded: the discriminator never sees it)."""
        target_only = {name: value for name, value in batch.items() if name != "background"}
        with poutine.block():
            nodes = poutine.trace(model.guide).get_trace(**target_only).nodes
        return nodes[self.salient_site]["value"], nodes[self.shared_site]["value"]
