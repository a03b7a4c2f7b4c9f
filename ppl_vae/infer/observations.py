"""Observations a likelihood can score: every observed value must lie in the support of its
site's distribution.

A Bernoulli likelihood scores grey levels in (0, 1) with the binary cross-entropy without
complaint when Pyro's validation is off (as it is in training), but its replicates are binary,
so a posterior predictive check then compares binary replicates with grey data and flags every
fit. ``check_observations_in_support(trace, sites)`` refuses such data before training or checking.
"""
from __future__ import annotations

from collections.abc import Iterable

import pyro.distributions as dist
import torch
from pyro.poutine import Trace

#: What to do about data outside a likelihood's support, by the support's constraint name.
_REMEDIES = {
    "Boolean": (
        "binarise the data (e.g. MNIST(binarize='fixed'), or binarize='dynamic' for training), or choose "
        "a likelihood for grey levels (likelihood='gaussian' or 'laplace')"
    ),
}


def _base_distribution(fn: dist.Distribution) -> dist.Distribution:
    """The distribution under ``Independent``/``Expanded``/``MaskedDistribution`` wrappers."""
    while hasattr(fn, "base_dist"):
        fn = fn.base_dist
    return fn


def _constraint_name(constraint: object) -> str:
    """``"Boolean"`` for ``independent(boolean, 3)``, the class name of any other constraint."""
    while hasattr(constraint, "base_constraint"):
        constraint = constraint.base_constraint
    return type(constraint).__name__.lstrip("_")


def check_observations_in_support(trace: Trace, sites: Iterable[str] | None = None) -> None:
    """Raise unless the observed value of each observed sample site of ``trace`` lies in the
    support of the site's distribution.

    :param trace: a model's trace (``pyro.poutine.trace(model).get_trace(**data)``); for a site
        whose observation was removed by ``poutine.uncondition`` the observation is read from
        ``node["infer"]["obs"]``.
    :param sites: the sites to check; ``None``: every observed site.
    :raises ValueError: naming the site, the likelihood (the base distribution's class), the
        support, the data's range ``[min, max]`` and, for a Bernoulli, what to do.
    """
    wanted = None if sites is None else set(sites)
    for name, node in trace.nodes.items():
        if node["type"] != "sample" or (wanted is not None and name not in wanted):
            continue
        observed = node["value"] if node["is_observed"] else node["infer"].get("obs")
        if observed is None or not isinstance(observed, torch.Tensor):
            continue
        fn = node["fn"]
        support = fn.support
        if _constraint_name(support) == "Real":
            continue
        try:
            inside = support.check(observed)
        except (RuntimeError, NotImplementedError):  # a support that depends on parameters of another shape
            continue
        if bool(inside.all()):
            continue
        values = observed.detach().float()
        constraint = _constraint_name(support)
        remedy = _REMEDIES.get(constraint)
        raise ValueError(
            f"site {name!r}: the {type(_base_distribution(fn)).__name__} likelihood's support is "
            f"{constraint.lower()} values, but the observed data range over [{float(values.min()):.4g}, "
            f"{float(values.max()):.4g}] ({int((~inside).sum())} of {inside.numel()} points outside)"
            + (f"; {remedy}" if remedy else "")
        )
