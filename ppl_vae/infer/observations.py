"""What a trace of a model on its data says before training or checking it.

Observations a likelihood can score (``check_observations_in_support``): every observed
value must lie in the support of its site's distribution. A Bernoulli likelihood scores grey
levels in (0, 1) with the binary cross-entropy without complaint when Pyro's validation is off
(as it is in training), but its replicates are binary, so a posterior predictive check then
compares binary replicates with grey data and flags every fit.

The model's global latents (``global_latents``), and whether minibatches stand for the whole
data set (``warn_if_minibatches_unscaled``): a model whose observed sites count each batch
once gives its global latents the posterior of one batch.
"""
from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence

import pyro.distributions as dist
import torch
from pyro.poutine import Trace
from pyro.poutine.util import site_is_subsample

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


def global_latents(trace: Trace, replicated: Sequence[str]) -> frozenset[str]:
    """The latent sample sites of ``trace`` outside every plate of the ``replicated`` sites:
    the model's global latents (a rate shared by all points, a regression's weights), which the
    marginal replicates hold at their posterior mean, as against the points' own latents (a
    VAE's z, in the data's plate), which they draw from the prior. None where the replicated
    sites lie in no plate: without plates the points' own latents cannot be told from global
    ones, and every latent is drawn from the prior.

    :param trace: a trace of the model run on the data.
    :param replicated: the replicated observed sites.
    """
    data_plates = {frame.name for site in replicated for frame in trace.nodes[site]["cond_indep_stack"]}
    if not data_plates:
        return frozenset()
    return frozenset(
        name
        for name, node in trace.nodes.items()
        if node["type"] == "sample" and not node["is_observed"] and not site_is_subsample(node)
        and not any(frame.name in data_plates for frame in node["cond_indep_stack"])
    )


def warn_if_minibatches_unscaled(trace: Trace, batch_rows: int, data_rows: int) -> None:
    """Warn when each step's ELBO is that of its batch alone although the model has global
    latents: a model traced on a batch of ``batch_rows`` of ``data_rows`` rows whose observed
    sites in a plate count each point once (scale 1). Each step then estimates the ELBO of a
    data set of ``batch_rows`` points, and the global latents (a regression's weights, outside
    the data's plate) get that posterior, about sqrt(data_rows / batch_rows) times too wide.
    Pyro's minibatch idiom says the data's size, ``pyro.plate("points", N, subsample_size=B)``,
    which scales the sites by N / B. A model without global latents (a VAE's z is in the data's
    plate) is left alone: its per-point objective is the same at any scale.

    :param trace: a trace of the model on its first batch.
    :param batch_rows: B, the rows of that batch.
    :param data_rows: N, the rows of the data it was drawn from."""
    if batch_rows >= data_rows:
        return
    unscaled = [name for name, node in trace.nodes.items()
                if node["type"] == "sample" and node["is_observed"] and node["cond_indep_stack"]
                and torch.as_tensor(node["scale"]).numel() == 1 and float(node["scale"]) == 1.0]
    shared = sorted(global_latents(trace, unscaled)) if unscaled else []
    if shared:
        stack = trace.nodes[unscaled[0]]["cond_indep_stack"]
        plate = next((frame.name for frame in stack if frame.size == batch_rows), stack[0].name)
        warnings.warn(
            f"the model's global latents {shared} are fitted on batches of {batch_rows} of {data_rows} rows, but its "
            f"observed sites {unscaled} count each batch once: each step's ELBO is that of {batch_rows} points, and "
            f"these latents get the posterior of {batch_rows} points, too wide. Say the data's size in the plate, "
            f"pyro.plate({plate!r}, {data_rows}, subsample_size=len(batch)), or scale the sites by {data_rows} / "
            f"{batch_rows} (pyro.poutine.scale)",
            UserWarning,
            stacklevel=2,
        )
