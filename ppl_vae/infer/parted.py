r"""PartedVAE's objective (Hajimiri et al. 2021, Eq. 6) and its semi-supervised step.

Per data point, averaged over the minibatch as in the authors' code (NOTES Sec. 1), the
loss to minimise is

.. math::

    \mathcal{L} = -E_q[\log p(x \mid z, u)]
        + \gamma_z \big|KL(q(z|x) \,\|\, p(z)) - C_z(t)\big|
        + \gamma_u \Big|\sum_i \sum_k q(c_i{=}k|x)\, KL(q(u_i|c_i,x) \,\|\, p(u_i|c_i{=}k)) - C_u(t)\Big|
        + \gamma_H \sum_i H(q(c_i|x))
        + \gamma_c \sum_i KL(\hat q(c_i) \,\|\, p(c_i))
        + \gamma_{BC} \sum_i \sum_{j<k} \max(BC(p(u_i|c_i{=}j), p(u_i|c_i{=}k)) - \delta, 0)

with :math:`\hat q(c_i) = \frac{1}{B}\sum_n q(c_i|x_n)` the minibatch aggregate. The
entropy replaces the ELBO's term A (Eq. 3), so the KL of c never appears as such.
Separately, on labelled batches, :meth:`PartedELBO.auxiliary_steps` declares the
cross-entropy :math:`-\sum_i \log q(c_i{=}y_i|x)` optimised only on the parameters that
produce q(c|x).
"""
from __future__ import annotations

import math
from functools import partial

import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.infer.util import is_validation_enabled
from pyro.poutine.util import prune_subsample_sites
from pyro.util import check_model_guide_match
from torch import nn
from torch.distributions import Distribution, Independent, Normal, kl_divergence
from torch.nn import functional as F

from ppl_vae.distributions import bhattacharyya_coefficient
from ppl_vae.infer.distributed import all_gather
from ppl_vae.infer.mean_field import MeanFieldELBO
from ppl_vae.infer.schedules import LinearCapacity
from ppl_vae.infer.steps import AuxiliaryStep

__all__ = ["TERM_NAMES", "PartedELBO", "classification_loss"]

#: The terms :attr:`PartedELBO.terms` reports, each a minibatch average per data point.
TERM_NAMES = (
    "reconstruction",
    "kl_z",
    "kl_u",
    "capacity_z",
    "capacity_u",
    "entropy",
    "aggregate_kl",
    "bhattacharyya",
)


def _check_weight(value: float, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def _normal_parts(fn: Distribution, site: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(loc, scale)`` of a diagonal Gaussian (``Normal(...).to_event(1)``)."""
    if isinstance(fn, Independent) and isinstance(fn.base_dist, Normal) and fn.reinterpreted_batch_ndims == 1:
        return fn.base_dist.loc, fn.base_dist.scale
    raise TypeError(f"site {site!r} must be a diagonal Normal(...).to_event(1), got {fn}")


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
    r"""PartedVAE's objective (module docstring; paper Eq. 6) as a Pyro ELBO.

    Works with any model/guide pair that follows :class:`~ppl_vae.models.parted.PartedVAE`'s
    site conventions: the guide's class-related sites (``"u{i}"``, diagonal Normals) name
    their categorical site in ``infer["class_site"]``, and the model writes them as
    ``MixtureSameFamily(Categorical(c), class priors)`` with the L_i class priors (diagonal
    Normals, the same for every point) as components. The categorical site is a relaxed
    one-hot in the guide when unobserved; when it is observed (labels given to the model) its one-hot value weights
    the KL of u, and it adds no entropy or aggregate term. Every other latent site counts
    towards KL_z (analytic KL when registered, else the single-sample estimate
    ``log q - log p``); every observed site (``"x"``, any ``pyro.factor`` a user adds)
    towards the reconstruction term, except observed c, whose log p(c = y) is a constant.

    **Scaling.** The authors average every term over the minibatch. Here the loss follows
    Pyro's convention of a sum over data points: the observed sites' log-likelihood as Pyro
    scales it, plus ``n * (authors' batch-averaged penalties)``, where n is the number of
    points the minibatch stands for (B, or N with the model's ``data_size``). The weights
    therefore mean what they mean in the authors' code, and since Adam is invariant to a
    constant factor their learning rates carry over. :attr:`terms` reports every term as a
    per-point minibatch average (the authors' scale), unweighted.

    **Why ``_differentiable_loss_particle`` is overridden** rather than adding
    ``pyro.factor`` sites: the capacity terms are absolute values of minibatch-average KLs
    and the aggregate term is a function of the whole minibatch, neither a sum of per-point
    log-densities; and the ELBO's own KL(q(c|x) || p(c)) has to go (the entropy and
    aggregate terms replace it), which Pyro has no closed form for anyway (relaxed c).
    ``_get_trace`` is overridden only to score the model's observed sites: Pyro would
    otherwise evaluate the relaxed c's log-density, which underflows at low temperature
    (pyro issue 3304), and the model's categorical at a relaxed value. All c terms are
    computed from the guide's logits in closed form.

    Set the training step with :meth:`set_training_step` (the engine does it).

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
        num_particles: int = 1,
        max_plate_nesting: int = 1,
    ) -> None:
        super().__init__(num_particles=num_particles, max_plate_nesting=max_plate_nesting)
        self.z_capacity = z_capacity if z_capacity is not None else LinearCapacity(0.0, 30.0, 300_000)
        self.u_capacity = u_capacity if u_capacity is not None else LinearCapacity(0.0, 5.0, 300_000)
        for name, schedule in (("z_capacity", self.z_capacity), ("u_capacity", self.u_capacity)):
            if not isinstance(schedule, LinearCapacity):
                raise ValueError(f"{name} must be a LinearCapacity, got {schedule!r}")
        self.gamma_z = _check_weight(gamma_z, "gamma_z")
        self.gamma_u = _check_weight(gamma_u, "gamma_u")
        self.gamma_c = _check_weight(gamma_c, "gamma_c")
        self.gamma_h = _check_weight(gamma_h, "gamma_h")
        self.gamma_bc = _check_weight(gamma_bc, "gamma_bc")
        if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0.0 <= delta <= 1.0:
            raise ValueError(f"delta must be a number in [0, 1], got {delta!r}")
        self.delta = float(delta)
        if classifier_lr is not None and not classifier_lr > 0:
            raise ValueError(f"classifier_lr must be > 0 or None, got {classifier_lr!r}")
        self.labelled_group = labelled_group
        self.classifier_lr = classifier_lr
        self.training_step = 0
        self.terms: dict[str, torch.Tensor] = {}

    def set_training_step(self, step: int) -> None:
        """Set t, the step the capacity schedules read."""
        self.training_step = int(step)

    def auxiliary_steps(self, model: nn.Module) -> list[AuxiliaryStep]:
        """The cross-entropy step on the labelled group, before each ELBO step, updating only
        ``model.classifier_parameters()`` (none when ``labelled_group`` is ``None``); the
        engine checks the whole labelled set's labels once before training."""
        if self.labelled_group is None:
            return []

        def check_labelled_set(group: dict[str, torch.Tensor]) -> None:
            if "y" not in group:
                raise ValueError(f"data group {self.labelled_group!r} needs labels 'y', got keys {sorted(group)}")
            model.check_labels(group["y"].cpu(), group["y"].shape[0])

        return [
            AuxiliaryStep(
                name="classifier",
                loss=partial(classification_loss, model),
                parameters=list(model.classifier_parameters()),
                data_group=self.labelled_group,
                when="before",
                lr=self.classifier_lr,
                check_data=check_labelled_set,
            )
        ]

    def _get_trace(self, model, guide, args, kwargs):
        guide_trace = poutine.trace(guide).get_trace(*args, **kwargs)
        model_trace = poutine.trace(poutine.replay(model, trace=guide_trace)).get_trace(*args, **kwargs)
        if is_validation_enabled():
            check_model_guide_match(model_trace, guide_trace, self.max_plate_nesting)
        guide_trace = prune_subsample_sites(guide_trace)
        model_trace = prune_subsample_sites(model_trace)
        model_trace.compute_log_prob(site_filter=lambda name, site: site["is_observed"])
        return model_trace, guide_trace

    def differentiable_terms(self, model, guide, *args, **kwargs) -> dict[str, torch.Tensor]:
        """Every term of one particle, differentiable and unweighted (see :data:`TERM_NAMES`):
        for inspecting which parameters each term reaches."""
        model_trace, guide_trace = self._get_trace(model, guide, args, kwargs)
        return self._terms(model_trace, guide_trace)[0]

    def _terms(self, model_trace, guide_trace) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """Per-point minibatch averages of every term, and n (points the minibatch stands for).

        Under data parallelism the terms that are not sums over points (the capacity terms'
        batch-average KLs inside |KL - C|, the aggregate q(c)) are taken over the global batch
        (:func:`~ppl_vae.infer.distributed.all_gather`; the identity on one process)."""
        u_sites = [
            name
            for name, site in guide_trace.nodes.items()
            if site["type"] == "sample" and "class_site" in site["infer"]
        ]
        if not u_sites:
            raise ValueError("PartedELBO needs a guide with class-related sites (infer['class_site'])")
        class_sites = {guide_trace.nodes[name]["infer"]["class_site"] for name in u_sites}
        first = model_trace.nodes[u_sites[0]]
        num_points = first["scale"] * first["fn"].batch_shape.numel()
        log_likelihood = 0.0
        kl_z = 0.0
        for name, site in model_trace.nodes.items():
            if site["type"] != "sample" or name in class_sites or name in u_sites:
                continue
            if site["is_observed"]:
                log_likelihood = log_likelihood + site["log_prob_sum"]
            else:
                kl_z = kl_z + all_gather(self._kl(guide_trace.nodes[name], site)).mean()
        kl_u = entropy = aggregate_kl = bhattacharyya = 0.0
        for name in u_sites:
            class_priors = self._class_priors(model_trace.nodes[name])
            class_site = guide_trace.nodes[name]["infer"]["class_site"]
            if class_site in guide_trace.nodes:
                log_q = guide_trace.nodes[class_site]["fn"].logits.log_softmax(-1)
                q = log_q.exp()
                entropy = entropy - (q * log_q).sum(-1).mean()
                log_p = model_trace.nodes[class_site]["fn"].logits.log_softmax(-1)
                aggregate_kl = aggregate_kl + self._aggregate_kl(all_gather(log_q), all_gather(log_p))
            else:
                q = model_trace.nodes[class_site]["value"]
            loc, scale = _normal_parts(guide_trace.nodes[name]["fn"], name)
            kl_to_classes = kl_divergence(
                dist.Normal(loc.unsqueeze(-2), scale.unsqueeze(-2)).to_event(1), class_priors.to_event(1)
            )
            kl_u = kl_u + all_gather((q * kl_to_classes).sum(-1)).mean()
            bhattacharyya = bhattacharyya + self._bhattacharyya_penalty(class_priors)
        zero = torch.zeros((), device=loc.device)
        terms = {
            "reconstruction": -log_likelihood / num_points + zero,
            "kl_z": kl_z + zero,
            "kl_u": kl_u + zero,
            "capacity_z": zero + self.z_capacity(self.training_step),
            "capacity_u": zero + self.u_capacity(self.training_step),
            "entropy": entropy + zero,
            "aggregate_kl": aggregate_kl + zero,
            "bhattacharyya": bhattacharyya + zero,
        }
        return terms, num_points

    @staticmethod
    def _class_priors(model_site: dict) -> dist.Normal:
        """The ``(L,)`` class priors of a class-related model site, as one batched Normal
        (event dimension last): the mixture's components, taken from the first point."""
        fn = model_site["fn"]
        components = getattr(fn, "component_distribution", None)
        if components is None:
            raise TypeError(
                f"model site {model_site['name']!r} must be a MixtureSameFamily over the class priors, got {fn}"
            )
        loc, scale = _normal_parts(components, model_site["name"])
        num_classes, dim = loc.shape[-2:]
        return dist.Normal(loc.reshape(-1, num_classes, dim)[0], scale.reshape(-1, num_classes, dim)[0])

    @staticmethod
    def _kl(guide_site: dict, model_site: dict) -> torch.Tensor:
        """Per-point KL(q || p) of a latent site: analytic when registered, else log q - log p
        at the guide's sample."""
        try:
            return kl_divergence(guide_site["fn"], model_site["fn"])
        except NotImplementedError:
            value = guide_site["value"]
            return guide_site["fn"].log_prob(value) - model_site["fn"].log_prob(value)

    @staticmethod
    def _aggregate_kl(log_q: torch.Tensor, log_p: torch.Tensor) -> torch.Tensor:
        r"""KL(qhat || p) with ``log qhat = logsumexp_n log q(c|x_n) - log B``; ``(B, L)`` inputs
        (p is the same for every point; it is averaged the same way)."""
        log_batch = math.log(log_q.shape[0])
        log_q_hat = torch.logsumexp(log_q, dim=0) - log_batch
        log_p_bar = torch.logsumexp(log_p, dim=0) - log_batch
        return (log_q_hat.exp() * (log_q_hat - log_p_bar)).sum()

    def _bhattacharyya_penalty(self, class_priors: dist.Normal) -> torch.Tensor:
        r""":math:`\sum_{j<k} \max(BC(p_j, p_k) - \delta, 0)` over the class priors ``(L, D)``."""
        loc, scale = class_priors.loc, class_priors.scale
        coefficients = bhattacharyya_coefficient(
            dist.Normal(loc.unsqueeze(1), scale.unsqueeze(1)).to_event(1),
            dist.Normal(loc.unsqueeze(0), scale.unsqueeze(0)).to_event(1),
        )
        rows, columns = torch.triu_indices(loc.shape[0], loc.shape[0], offset=1, device=loc.device)
        return (coefficients[rows, columns] - self.delta).clamp_min(0.0).sum()

    def _differentiable_loss_particle(self, model_trace, guide_trace):
        terms, num_points = self._terms(model_trace, guide_trace)
        penalties = (
            self.gamma_z * (terms["kl_z"] - terms["capacity_z"]).abs()
            + self.gamma_u * (terms["kl_u"] - terms["capacity_u"]).abs()
            + self.gamma_h * terms["entropy"]
            + self.gamma_c * terms["aggregate_kl"]
            + self.gamma_bc * terms["bhattacharyya"]
        )
        loss = num_points * (terms["reconstruction"] + penalties)
        self.terms = {name: value.detach() for name, value in terms.items()}
        return loss.detach(), loss
