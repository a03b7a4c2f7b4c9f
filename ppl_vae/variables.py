"""What a model declares about its variables for the objectives' terms to read by name.

Plain data, below both :mod:`ppl_vae.models` (which declare variables) and
:mod:`ppl_vae.infer` (whose terms read them), so neither package imports the other for it.
"""
from __future__ import annotations

from typing import NamedTuple

__all__ = ["ClassVariable"]


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
