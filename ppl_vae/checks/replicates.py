"""Which sites a check replicates, and the effect handler that replicates them.

The model's observed sites split into the *replicated* sites, the data x the check criticises
(by default the sites that observe one of the tensors passed as data), and the *conditioning*
sites c, which stay observed (PartedVAE's labels, for instance).

Plain Pyro does the same with :class:`pyro.infer.Predictive` on a model whose data sites are
unobserved; ``Predictive(model.model, guide=model.guide, ...)(x)`` returns x itself at an
observed site, as Pyro does for every observed site.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
from pyro.poutine.messenger import Messenger
from pyro.poutine.trace_struct import Trace

from ppl_vae.checks.statistics import Statistic, default_statistics


class replicate_sites(Messenger):  # noqa: N801 (a Pyro effect handler, used like poutine's)
    """Unobserve the named sample sites and nothing else, as ``poutine.uncondition`` does for
    every site: at each named observed site the model samples a replicate, the observation is
    kept in ``msg["infer"]["obs"]`` and ``msg["infer"]["was_observed"]`` is set.

    :param sites: the names of the sites to replicate.
    """

    def __init__(self, sites: Iterable[str]) -> None:
        super().__init__()
        self.sites = frozenset(sites)

    def _pyro_sample(self, msg: dict[str, Any]) -> None:
        if msg["name"] in self.sites and msg["is_observed"]:
            msg["is_observed"] = False
            msg["infer"]["obs"] = msg["value"]
            msg["infer"]["was_observed"] = True
            msg["value"] = None
            msg["done"] = False


def _holds_data(value: Any, data: Mapping[str, Any]) -> bool:
    """Whether ``value`` is one of the tensors of ``data`` (the same object or equal)."""
    if not isinstance(value, torch.Tensor):
        return False
    return any(
        isinstance(tensor, torch.Tensor)
        and (value is tensor or (value.shape == tensor.shape and torch.equal(value, tensor.to(value))))
        for tensor in data.values()
    )


def data_sites(trace: Trace, data: Mapping[str, Any]) -> tuple[str, ...]:
    """The observed sample sites of a model's ``trace`` whose observed value is one of the
    tensors of ``data``, in the model's order: the default replicated sites. A site that
    observes something derived from the data (PartedVAE's one-hot classes from ``y``) is not
    among them and stays observed in the replicates.

    :param trace: a trace of the model run on ``data``.
    :param data: the tensors the model was given, by name.
    """
    return tuple(
        name
        for name, node in trace.nodes.items()
        if node["type"] == "sample" and node["is_observed"] and _holds_data(node["value"], data)
    )


def replicated_sites(trace: Trace, data: Mapping[str, Any], sites: Sequence[str] | None) -> tuple[str, ...]:
    observed = [name for name, node in trace.nodes.items() if node["type"] == "sample" and node["is_observed"]]
    if sites is None:
        found = data_sites(trace, data)
        if not found:
            raise ValueError(
                f"no observed site of the model holds one of the data tensors {sorted(data)} (observed sites: "
                f"{observed}): name the sites to replicate with sites="
            )
        return found
    if isinstance(sites, str):
        sites = [sites]
    unknown = [site for site in sites if site not in observed]
    if unknown or not sites:
        raise ValueError(f"sites must name observed sites of the model, one of {observed}; got {list(sites)}")
    return tuple(sites)


def statistics_by_site(
    statistics: Mapping[str, Statistic] | Mapping[str, Mapping[str, Statistic]] | None,
    sites: tuple[str, ...],
    observed: Mapping[str, torch.Tensor],
) -> dict[str, dict[str, Statistic]]:
    """Each replicated site's statistics: those named for it, else :func:`default_statistics`."""
    if statistics is None:
        return {site: default_statistics(observed[site]) for site in sites}
    if not isinstance(statistics, Mapping):
        raise ValueError(f"statistics must be a mapping, got {type(statistics).__name__}")
    values = list(statistics.values())
    if values and all(callable(v) and not isinstance(v, Mapping) for v in values):
        if len(sites) > 1:
            raise ValueError(
                f"statistics maps names to statistics but {len(sites)} sites are replicated {list(sites)}: give "
                "{site: {name: statistic}} so that each statistic applies to the site it was made for"
            )
        return {sites[0]: dict(statistics)}
    if not all(isinstance(v, Mapping) for v in values):
        raise ValueError("statistics must map names to statistics, or sites to {name: statistic}, not a mix")
    unknown = sorted(set(statistics) - set(sites))
    if unknown:
        raise ValueError(f"statistics names sites {unknown} that are not replicated; replicated sites: {list(sites)}")
    return {site: dict(statistics[site]) if site in statistics else default_statistics(observed[site]) for site in sites}
