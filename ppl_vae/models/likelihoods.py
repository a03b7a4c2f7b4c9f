"""Observation models p(x | decoder output) shared by every model in the library.

Each returns a distribution whose event covers every non-batch dimension of the data,
so ``log_prob(x)`` has shape ``(batch,)``.
"""
from __future__ import annotations

import pyro.distributions as dist
import torch

from ppl_vae.distributions.fixed_scale import FixedScaleLaplace, FixedScaleNormal

LIKELIHOODS = ("bernoulli", "gaussian", "laplace")


def check_likelihood(name: str, scale: float | None) -> None:
    """Raise ``ValueError`` for an unknown likelihood name or a non-positive scale."""
    if name not in LIKELIHOODS:
        raise ValueError(f"likelihood must be one of {LIKELIHOODS}, got {name!r}")
    if name != "bernoulli" and (scale is None or not scale > 0):
        raise ValueError(f"likelihood_scale must be > 0 for a {name} likelihood, got {scale}")


def likelihood(
    name: str, decoded: torch.Tensor, event_dim: int, scale: float | None = None
) -> dist.TorchDistribution:
    """The distribution of x given the decoder's output ``decoded`` ``(batch, *event)``.

    - ``"bernoulli"``: ``decoded`` are logits. Validation is off for this site so that
      grey levels in [0, 1] are scored with the binary cross-entropy, as the papers'
      code does for MNIST; samples are binary.
    - ``"gaussian"``: ``decoded`` is the mean, ``scale`` the fixed standard deviation
      (:class:`~ppl_vae.distributions.FixedScaleNormal`).
    - ``"laplace"``: ``decoded`` is the location, ``scale`` the fixed scale (the
      Decomposition paper uses 0.1 for Fashion-MNIST;
      :class:`~ppl_vae.distributions.FixedScaleLaplace`).

    :param event_dim: number of trailing dimensions that form one observation
        (3 for images ``(C, H, W)``, 1 for vectors).
    """
    check_likelihood(name, scale)
    if name == "bernoulli":
        base = dist.Bernoulli(logits=decoded, validate_args=False)
    elif name == "gaussian":
        base = FixedScaleNormal(decoded, scale)
    else:
        base = FixedScaleLaplace(decoded, scale)
    return base.to_event(event_dim)


def likelihood_mean(name: str, decoded: torch.Tensor) -> torch.Tensor:
    """The mean of p(x | decoded): ``sigmoid(logits)`` for Bernoulli, the location otherwise."""
    return torch.sigmoid(decoded) if name == "bernoulli" else decoded
