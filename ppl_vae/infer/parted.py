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
penalty is a term of :mod:`ppl_vae.infer.terms` (a named ``pyro.factor`` site): the capacity
terms replace the KLs of z and u, the entropy and aggregate terms the KL of c (the ELBO's
term A, Eq. 3), so those KLs never appear as such.
Separately, on labelled batches, :meth:`PartedELBO.auxiliary_steps` declares the
cross-entropy :math:`-\sum_i \log q(c_i{=}y_i|x)` optimised only on the parameters that
produce q(c|x).
"""
from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import torch
from torch import nn
from torch.nn import functional as F

from ppl_vae.infer.mean_field import MeanFieldELBO
from ppl_vae.infer.schedules import LinearCapacity
from ppl_vae.infer.steps import AuxiliaryStep
from ppl_vae.infer.terms import (
    AggregateClassKL,
    BhattacharyyaPenalty,
    Capacity,
    ClassCapacity,
    ClassEntropy,
    Term,
    check_weight,
)

__all__ = ["PartedELBO", "classification_loss"]


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
    r"""PartedVAE's objective (module docstring; paper Eq. 6): the reconstruction plus five
    terms of :mod:`ppl_vae.infer.terms`, each a ``pyro.factor`` site named as logged:

    ==================  ======================================================  ============
    site                term                                                    replaces
    ==================  ======================================================  ============
    ``capacity_z``      :class:`~ppl_vae.infer.terms.Capacity` of ``"z"``        KL of z
    ``capacity_u``      :class:`~ppl_vae.infer.terms.ClassCapacity`             KLs of u_i
    ``entropy``         :class:`~ppl_vae.infer.terms.ClassEntropy`              KLs of c_i
    ``aggregate_kl``    :class:`~ppl_vae.infer.terms.AggregateClassKL`          KLs of c_i
    ``bhattacharyya``   :class:`~ppl_vae.infer.terms.BhattacharyyaPenalty`
    ==================  ======================================================  ============

    The class terms read the model's ``class_variables()`` (:class:`~ppl_vae.models.PartedVAE`
    declares its ``("c{i}", "u{i}", "class_priors.{i}")``). Given labels, c is observed in the
    model and absent from the guide: its one-hot value weights the KL of u, and it adds no
    entropy or aggregate term. The capacities read the training step
    (:func:`~ppl_vae.infer.schedules.set_training_step`).

    **Scaling.** The authors average every term over the minibatch. Here the loss follows
    Pyro's convention of a sum over data points: the observed sites' log-likelihood as Pyro
    scales it, plus ``N * (authors' batch-averaged penalties)``, N the number of points the
    minibatch stands for (B, or the model's ``data_size``). The weights therefore mean what
    they mean in the authors' code, and since Adam is invariant to a constant factor their
    learning rates carry over. :attr:`logged` reports every term per point (the authors'
    scale), unweighted, with each capacity's KL and C(t) as ``capacity_z/kl``,
    ``capacity_z/target`` (and the same for u).

    :param z_capacity: C_z(t); default ``LinearCapacity(0, 30, 300000)`` (authors' dSprites).
    :param u_capacity: C_u(t); default ``LinearCapacity(0, 5, 300000)``.
    :param gamma_z: weight gamma_z of the z capacity term (authors' dSprites: 50).
    :param gamma_u: weight gamma_u of the u capacity term (50).
    :param gamma_c: weight gamma_c of KL(qhat(c) || p(c)) (100).
    :param gamma_h: weight gamma_H of the conditional entropy H(q(c|x)) (10).
    :param gamma_bc: weight gamma_BC of the Bhattacharyya penalty (10).
    :param delta: Bhattacharyya threshold in [0, 1] (0.1).
    :param labelled_group: the training-data group of the cross-entropy step
        (``{"x": X, "labelled": {"x": XL, "y": YL}}``); ``None`` for unsupervised training
        (no auxiliary step).
    :param classifier_lr: learning rate of that step (``None``: the engine's).
    :param extra_terms: further terms, e.g. ``[AggregateDivergence("z", alpha=100.0)]``.
    :param num_particles, max_plate_nesting: as for :class:`~pyro.infer.Trace_ELBO`
        (``max_plate_nesting=1``, the data plate, spares Pyro a trial run of the model).

    Differences from the authors' code: their classifier step reshuffles and copies the
    whole labelled set every iteration to draw one batch; here the labelled group is batched
    like any data group (the engine keeps it on the device). The u-KL's weights q(c|x) and
    the relaxed c that gates q(u|c,x) are the same as theirs.
    """

    def __init__(
        self,
        z_capacity: LinearCapacity | None = None,
        u_capacity: LinearCapacity | None = None,
        gamma_z: float = 50.0,
        gamma_u: float = 50.0,
        gamma_c: float = 100.0,
        gamma_h: float = 10.0,
        gamma_bc: float = 10.0,
        delta: float = 0.1,
        labelled_group: str | None = "labelled",
        classifier_lr: float | None = None,
        extra_terms: Sequence[Term] = (),
        num_particles: int = 1,
        max_plate_nesting: int = 1,
    ) -> None:
        z_capacity = z_capacity if z_capacity is not None else LinearCapacity(0.0, 30.0, 300_000)
        u_capacity = u_capacity if u_capacity is not None else LinearCapacity(0.0, 5.0, 300_000)
        for name, schedule in (("z_capacity", z_capacity), ("u_capacity", u_capacity)):
            if not isinstance(schedule, LinearCapacity):
                raise ValueError(f"{name} must be a LinearCapacity, got {schedule!r}")
        terms = [
            Capacity("z", check_weight(gamma_z, "gamma_z"), z_capacity),
            ClassCapacity(check_weight(gamma_u, "gamma_u"), u_capacity),
            ClassEntropy(check_weight(gamma_h, "gamma_h")),
            AggregateClassKL(check_weight(gamma_c, "gamma_c")),
            BhattacharyyaPenalty(check_weight(gamma_bc, "gamma_bc"), delta),
        ]
        super().__init__(terms=[*terms, *extra_terms], num_particles=num_particles, max_plate_nesting=max_plate_nesting)
        if classifier_lr is not None and not classifier_lr > 0:
            raise ValueError(f"classifier_lr must be > 0 or None, got {classifier_lr!r}")
        self.labelled_group = labelled_group
        self.classifier_lr = classifier_lr

    def auxiliary_steps(self, model: nn.Module) -> list[AuxiliaryStep]:
        """The cross-entropy step on the labelled group, before each ELBO step, updating only
        ``model.classifier_parameters()`` (none when ``labelled_group`` is ``None``), then the
        extra terms' steps; the engine checks the whole labelled set's labels once before
        training."""
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
