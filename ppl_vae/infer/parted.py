r"""PartedVAE's objective (Hajimiri et al. 2021, Eq. 6) and its semi-supervised step.

Per data point, averaged over the minibatch as in the authors' code, the loss to minimise is

.. math::

    \mathcal{L} = -E_q[\log p(x \mid z, u)]
        + \gamma_z \big|KL(q(z|x) \,\|\, p(z)) - C_z(t)\big|
        + \gamma_u \Big|\sum_i \sum_k q(c_i{=}k|x)\, KL(q(u_i|c_i,x) \,\|\, p(u_i|c_i{=}k)) - C_u(t)\Big|
        + \gamma_H \sum_i H(q(c_i|x))
        + \gamma_c \sum_i KL(\hat q(c_i) \,\|\, p(c_i))
        + \gamma_{BC} \sum_i \sum_{j<k} \max(BC(p(u_i|c_i{=}j), p(u_i|c_i{=}k)) - \delta, 0)

with :math:`\hat q(c_i) = \frac{1}{B}\sum_n q(c_i|x_n)` the minibatch aggregate. Each
penalty is a term (a named ``pyro.factor`` site; the class terms are defined here, the
capacity of z is :class:`~ppl_vae.infer.terms.Capacity`): the capacity
terms replace the KLs of z and u, the entropy and aggregate terms the KL of c (the ELBO's
term A, Eq. 3), so those KLs never appear as such.
Separately, on labelled batches, :meth:`PartedELBO.auxiliary_steps` declares the
cross-entropy :math:`-\sum_i \log q(c_i{=}y_i|x)` optimised only on the parameters that
produce q(c|x).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from functools import partial

import pyro.distributions as dist
import torch
from torch import nn
from torch.distributions import kl_divergence
from torch.nn import functional as F

from ppl_vae._constants import PARTED
from ppl_vae._validation import finite
from ppl_vae.distributions import bhattacharyya_coefficient
from ppl_vae.infer.mean_field import MeanFieldELBO
from ppl_vae.infer.steps import AuxiliaryStep
from ppl_vae.infer.terms import Capacity, Term, TermSites, diagonal_normal_parameters
from ppl_vae.schedules import LinearCapacity
from ppl_vae.variables import ClassVariable

__all__ = [
    "AggregateClassKL",
    "BhattacharyyaPenalty",
    "ClassCapacity",
    "ClassEntropy",
    "ClassTerm",
    "PartedELBO",
    "classification_loss",
]


class ClassTerm(Term):
    """A term over categorical latents and their class-conditional latents.

    :param name: the factor's name.
    :param weight: its weight.
    :param variables: the :class:`ClassVariable` s; ``None`` takes the model's own
        (``module.class_variables()``, as :class:`~ppl_vae.models.PartedVAE` declares them).
    :param weight_name: the weight's name in errors (see :class:`~ppl_vae.infer.terms.Term`).
    """

    def __init__(
        self, name: str, weight: float, variables: Sequence[ClassVariable] | None = None, weight_name: str = "gamma"
    ) -> None:
        super().__init__(name, weight, weight_name)
        if variables is not None:
            variables = tuple(ClassVariable(*variable) for variable in variables)
            if not variables:
                raise ValueError("variables must hold at least one ClassVariable, or be None")
        self.variables = variables

    def class_variables(self, module: nn.Module | None) -> tuple[ClassVariable, ...]:
        """The variables given, or those ``module.class_variables()`` declares.

        :param module: the module whose ``model`` method is run (``None`` for a plain model
            function: then the variables must have been given)."""
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
        """N of the first variable's u site.

        :param sites: what the term reads for one particle."""
        return sites.num_points(self.class_variables(sites.module)[0].site)

    @staticmethod
    def class_priors(variable: ClassVariable, module: nn.Module | None) -> dist.Normal:
        """The ``(L,)`` class priors of ``variable`` as one batched Normal (event dimension last).

        :param variable: the class variable whose ``priors`` submodule is read.
        :param module: the module that holds that submodule (the model's)."""
        if module is None:
            raise ValueError(f"class priors {variable.priors!r} are read from the model's module; the model is not a module method")
        loc, scale = diagonal_normal_parameters(module.get_submodule(variable.priors)(), variable.priors)
        return dist.Normal(loc, scale)

    @staticmethod
    def class_probabilities(variable: ClassVariable, sites: TermSites) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(q, log_q)`` of q(c | x), ``(B, L)``: from the guide's logits; the one-hot labels and
        ``None`` when c is observed in the model and absent from the guide.

        :param variable: the class variable (its ``class_site`` is read).
        :param sites: what the term reads for one particle."""
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
    :param weight_name: gamma's name in errors (:class:`PartedELBO` passes ``"gamma_u"``).
    """

    def __init__(
        self,
        gamma: float,
        capacity: LinearCapacity,
        variables: Sequence[ClassVariable] | None = None,
        name: str = "capacity_u",
        *,
        weight_name: str = "gamma",
    ) -> None:
        super().__init__(name, gamma, variables, weight_name)
        LinearCapacity.required("capacity", capacity)
        self.capacity = capacity

    def replaced_sites(self, module: nn.Module | None) -> tuple[str, ...]:
        """Every u_i, whose KLs this term replaces.

        :param module: the module whose ``model`` method is run (see
            :meth:`~ppl_vae.infer.ClassTerm.class_variables`)."""
        return tuple(variable.site for variable in self.class_variables(module))

    def evaluate(self, sites: TermSites) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``(|KL_u - C(t)|, {"kl": KL_u, "target": C(t)})``.

        :param sites: what the term reads for one particle."""
        kl = 0.0
        for variable in self.class_variables(sites.module):
            q, _ = self.class_probabilities(variable, sites)
            priors = self.class_priors(variable, sites.module)
            loc, scale = diagonal_normal_parameters(sites.guide_site(variable.site)["fn"], variable.site)
            kl_to_classes = kl_divergence(
                dist.Normal(loc.unsqueeze(-2), scale.unsqueeze(-2)).to_event(1), priors.to_event(1)
            )
            kl = kl + sites.global_batch.all_gather((q * kl_to_classes).sum(-1)).mean()
        target = torch.as_tensor(sites.at_step(self.capacity, self.name), dtype=kl.dtype, device=kl.device)
        return (kl - target).abs(), {"kl": kl, "target": target}


class _ReplacesClassKL(ClassTerm):
    """A class term that stands in for the KL of every c_i (with its partner, the entropy and
    the aggregate KL together replace it)."""

    replacement_group = "class_kl"

    def replaced_sites(self, module: nn.Module | None) -> tuple[str, ...]:
        """Every c_i, whose KL the entropy and aggregate terms replace."""
        return tuple(variable.class_site for variable in self.class_variables(module))


class ClassEntropy(_ReplacesClassKL):
    r""":math:`\sum_i H(q(c_i|x))`, the minibatch average of the entropy of each q(c_i|x)
    (PartedVAE Eq. 6; with :class:`AggregateClassKL` it replaces the KL of c, whose relaxed
    samples are never scored). Zero for a variable given by labels.

    :param gamma: weight gamma_H.
    :param variables: see :class:`ClassTerm`.
    :param name: the factor's name.
    :param weight_name: gamma's name in errors (:class:`PartedELBO` passes ``"gamma_h"``).
    """

    def __init__(
        self, gamma: float, variables: Sequence[ClassVariable] | None = None, name: str = "entropy", *, weight_name: str = "gamma"
    ) -> None:
        super().__init__(name, gamma, variables, weight_name)

    def evaluate(self, sites: TermSites) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``(sum_i mean_n H(q(c_i|x_n)), {})``.

        :param sites: what the term reads for one particle."""
        variables = self.class_variables(sites.module)
        entropy = sites.model_site(variables[0].site)["value"].new_zeros(())
        for variable in variables:
            q, log_q = self.class_probabilities(variable, sites)
            if log_q is not None:
                entropy = entropy - (q * log_q).sum(-1).mean()
        return entropy, {}


class AggregateClassKL(_ReplacesClassKL):
    r""":math:`\sum_i KL(\hat q(c_i) \| p(c_i))` with :math:`\hat q(c_i) = \frac{1}{B}\sum_n q(c_i|x_n)`
    over the (global) minibatch, p(c_i) the model's categorical (PartedVAE Eq. 6). Zero for a
    variable given by labels; replaces the KL of c with :class:`ClassEntropy`.

    :param gamma: weight gamma_c.
    :param variables: see :class:`ClassTerm`.
    :param name: the factor's name.
    :param weight_name: gamma's name in errors (:class:`PartedELBO` passes ``"gamma_c"``).
    """

    def __init__(
        self,
        gamma: float,
        variables: Sequence[ClassVariable] | None = None,
        name: str = "aggregate_kl",
        *,
        weight_name: str = "gamma",
    ) -> None:
        super().__init__(name, gamma, variables, weight_name)

    def evaluate(self, sites: TermSites) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``(sum_i KL(qhat(c_i) || p(c_i)), {})``.

        :param sites: what the term reads for one particle."""
        variables = self.class_variables(sites.module)
        total = sites.model_site(variables[0].site)["value"].new_zeros(())
        for variable in variables:
            _, log_q = self.class_probabilities(variable, sites)
            if log_q is None:
                continue
            log_p = sites.model_site(variable.class_site)["fn"].logits.log_softmax(-1)
            gather = sites.global_batch.all_gather
            total = total + self.aggregate_kl(gather(log_q), gather(log_p))
        return total, {}

    @staticmethod
    def aggregate_kl(log_q: torch.Tensor, log_p: torch.Tensor) -> torch.Tensor:
        r"""KL(qhat || pbar) with ``log qhat = logsumexp_n log q(c|x_n) - log B`` from ``(B, L)``
        log-probabilities (p averaged the same way; it is the same for every point).

        :param log_q: ``(B, L)`` log q(c|x_n) of the (global) batch.
        :param log_p: ``(B, L)`` log p(c) of the model's categorical, one row per point."""
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
    :param weight_name: gamma's name in errors (:class:`PartedELBO` passes ``"gamma_bc"``).
    """

    def __init__(
        self,
        gamma: float,
        delta: float = PARTED.delta,
        variables: Sequence[ClassVariable] | None = None,
        name: str = "bhattacharyya",
        *,
        weight_name: str = "gamma",
    ) -> None:
        super().__init__(name, gamma, variables, weight_name)
        self.delta = finite("delta", delta, low=0, high=1, closed=True)

    def evaluate(self, sites: TermSites) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``(sum_i sum_{j<k} max(BC_jk - delta, 0), {})`` over the class priors.

        :param sites: what the term reads for one particle."""
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


def classification_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    r"""The semi-supervised cross-entropy :math:`\frac{1}{B}\sum_n \sum_i -\log q(c_i{=}y_{n,i}|x_n)`.

    :param model: a :class:`~ppl_vae.models.parted.PartedVAE` (``class_logits``, ``check_labels``).
    :param x: ``(B, *event)`` labelled data.
    :param y: ``(B,)`` or ``(B, V)`` int labels.
    :returns: scalar, batch-averaged as in the authors' code.
    """
    labels = model.check_labels(y, x.shape[0])
    logits = model.class_logits(x)
    return sum(F.cross_entropy(logit, labels[:, i]) for i, logit in enumerate(logits))


class PartedELBO(MeanFieldELBO):
    r"""PartedVAE's objective (:mod:`ppl_vae.infer.parted`; paper Eq. 6): the reconstruction plus five
    terms, each a ``pyro.factor`` site named as logged:

    ==================  ======================================================  ============
    site                term                                                    replaces
    ==================  ======================================================  ============
    ``capacity_z``      :class:`~ppl_vae.infer.terms.Capacity` of ``"z"``        KL of z
    ``capacity_u``      :class:`ClassCapacity`                                  KLs of u_i
    ``entropy``         :class:`ClassEntropy`                                   KLs of c_i
    ``aggregate_kl``    :class:`AggregateClassKL`                               KLs of c_i
    ``bhattacharyya``   :class:`BhattacharyyaPenalty`
    ==================  ======================================================  ============

    The class terms read the model's ``class_variables()`` (:class:`~ppl_vae.models.PartedVAE`
    declares its ``("c{i}", "u{i}", "class_priors.{i}")``). Given labels, c is observed in the
    model and absent from the guide: its one-hot value weights the KL of u, and it adds no
    entropy or aggregate term. The capacities read the training step, the ``step`` keyword
    of the objective's call (``svi.step(x, step=t)``), which the objective also passes to the
    model and guide (their attention sharpness follows it: ``model_takes_step``).

    **Scaling.** The authors average every term over the minibatch. Here the loss follows
    Pyro's convention of a sum over data points: the observed sites' log-likelihood as Pyro
    scales it, plus ``N * (authors' batch-averaged penalties)``, N the number of points the
    minibatch stands for (B, or the model's ``data_size``). The weights therefore mean what
    they mean in the authors' code, and since Adam is invariant to a constant factor their
    learning rates carry over. :attr:`~ppl_vae.infer.MeanFieldELBO.logged` reports every term per point (the authors'
    scale), unweighted, with each capacity's KL and C(t) as ``capacity_z/kl``,
    ``capacity_z/target`` (and the same for u).

    The defaults are the authors' dSprites settings, written once in ``ppl_vae._constants``
    and shared with the settings of ``ppl-vae train parted``. Each weight is checked once, by
    the term it weighs, under the name it has here.

    Example, the loss of a small PartedVAE at step 0 (for training, pass the objective to
    Pyro's ``SVI`` or to :func:`ppl_vae.fit`); :attr:`~ppl_vae.infer.MeanFieldELBO.logged` then
    holds every term per point:

    >>> import torch
    >>> from ppl_vae.models import PartedVAE
    >>> elbo = PartedELBO()
    >>> [term.name for term in elbo.terms]
    ['capacity_z', 'capacity_u', 'entropy', 'aggregate_kl', 'bhattacharyya']
    >>> model = PartedVAE.mlp((1, 8, 8), z_dim=2, num_classes=3, u_dims=1, hidden=(32,))
    >>> loss = elbo.loss(model.model, model.guide, torch.rand(16, 1, 8, 8).round(), step=0)
    >>> sorted(elbo.logged)  # doctest: +NORMALIZE_WHITESPACE
    ['aggregate_kl', 'bhattacharyya', 'capacity_u', 'capacity_u/kl', 'capacity_u/target',
     'capacity_z', 'capacity_z/kl', 'capacity_z/target', 'entropy', 'reconstruction']

    :param z_capacity: C_z(t); ``None``: ``LinearCapacity(0, 30, 300000)``.
    :param u_capacity: C_u(t); ``None``: ``LinearCapacity(0, 5, 300000)``.
    :param gamma_z: weight gamma_z of the z capacity term, >= 0 (authors' dSprites: 50).
    :param gamma_u: weight gamma_u of the u capacity term, >= 0 (50).
    :param gamma_c: weight gamma_c of KL(qhat(c) || p(c)), >= 0 (100).
    :param gamma_h: weight gamma_H of the conditional entropy H(q(c|x)), >= 0 (10).
    :param gamma_bc: weight gamma_BC of the Bhattacharyya penalty, >= 0 (10).
    :param delta: Bhattacharyya threshold in [0, 1] (0.1).
    :param labelled_group: the training-data group of the cross-entropy step
        (``{"x": X, "labelled": {"x": XL, "y": YL}}``); ``None`` for unsupervised training
        (no auxiliary step).
    :param classifier_lr: learning rate of that step (``None``: the engine's).
    :param extra_terms: further terms, e.g. ``[AggregateDivergence("z", alpha=100.0)]``.
    :param num_particles: as for :class:`~pyro.infer.Trace_ELBO`.
    :param max_plate_nesting: as for :class:`~pyro.infer.Trace_ELBO` (1, the data plate, spares
        Pyro a trial run of the model).

    Differences from the authors' code: their classifier step reshuffles and copies the
    whole labelled set every iteration to draw one batch; here the labelled group is batched
    like any data group (the engine keeps it on the device). The u-KL's weights q(c|x) and
    the relaxed c that gates q(u|c,x) are the same as theirs.
    """

    def __init__(
        self,
        z_capacity: LinearCapacity | None = None,
        u_capacity: LinearCapacity | None = None,
        gamma_z: float = PARTED.gamma_z,
        gamma_u: float = PARTED.gamma_u,
        gamma_c: float = PARTED.gamma_c,
        gamma_h: float = PARTED.gamma_h,
        gamma_bc: float = PARTED.gamma_bc,
        delta: float = PARTED.delta,
        labelled_group: str | None = "labelled",
        classifier_lr: float | None = None,
        extra_terms: Sequence[Term] = (),
        num_particles: int = 1,
        max_plate_nesting: int = 1,
    ) -> None:
        z_capacity = z_capacity if z_capacity is not None else LinearCapacity(*PARTED.z_capacity, PARTED.capacity_steps)
        u_capacity = u_capacity if u_capacity is not None else LinearCapacity(*PARTED.u_capacity, PARTED.capacity_steps)
        LinearCapacity.required("z_capacity", z_capacity)
        LinearCapacity.required("u_capacity", u_capacity)
        terms = [
            Capacity("z", gamma_z, z_capacity, weight_name="gamma_z"),
            ClassCapacity(gamma_u, u_capacity, weight_name="gamma_u"),
            ClassEntropy(gamma_h, weight_name="gamma_h"),
            AggregateClassKL(gamma_c, weight_name="gamma_c"),
            BhattacharyyaPenalty(gamma_bc, delta, weight_name="gamma_bc"),
        ]
        super().__init__(terms=[*terms, *extra_terms], model_takes_step=True, num_particles=num_particles,
                         max_plate_nesting=max_plate_nesting)
        self.labelled_group = labelled_group
        self.classifier_lr = None if classifier_lr is None else finite("classifier_lr", classifier_lr, positive=True)

    def auxiliary_steps(self, model: nn.Module) -> list[AuxiliaryStep]:
        """The cross-entropy step on the labelled group, before each ELBO step, updating only
        ``model.classifier_parameters()`` (none when ``labelled_group`` is ``None``), then the
        extra terms' steps; the engine checks the whole labelled set's labels once before
        training.

        :param model: the :class:`~ppl_vae.models.PartedVAE` being trained."""
        steps = super().auxiliary_steps(model)
        if self.labelled_group is None:
            return steps

        def check_labelled_set(group: dict[str, torch.Tensor]) -> None:
            if "y" not in group:
                raise ValueError(f"data group {self.labelled_group!r} needs labels 'y', got keys {sorted(group)}")
            model.check_labels(group["y"].cpu(), group["y"].shape[0])

        classifier = AuxiliaryStep(
            name="classifier",
            loss=partial(classification_loss, model),
            parameters=list(model.classifier_parameters()),
            data_group=self.labelled_group,
            when="before",
            lr=self.classifier_lr,
            check_data=check_labelled_set,
        )
        return [classifier, *steps]
