"""Observation models p(x | decoder output) shared by every model in the library.

Each returns a distribution whose event covers every non-batch dimension of the data,
so ``log_prob(x)`` has shape ``(batch,)``.
"""
from __future__ import annotations

import pyro.distributions as dist
import torch
from torch import nn

from ppl_vae._constants import COUNT_LIKELIHOODS as COUNT_LIKELIHOODS  # re-exported: the names live with the function
from ppl_vae._constants import LIKELIHOODS
from ppl_vae._validation import choice, finite, require
from ppl_vae.distributions.fixed_scale import FixedScaleLaplace, FixedScaleNormal
from ppl_vae.nn.precision import full_precision


def check_likelihood(name: str, scale: float | None) -> None:
    """Raise ``ValueError`` for an unknown likelihood name or a scale that is not a finite
    number > 0 where the likelihood has one."""
    choice("likelihood", name, LIKELIHOODS)
    if name != "bernoulli":
        require("likelihood_scale", scale, scale is not None, f"given for a {name} likelihood")
        finite("likelihood_scale", scale, positive=True)


def likelihood(
    name: str, decoded: torch.Tensor, event_dim: int, scale: float | None = None
) -> dist.TorchDistribution:
    """The distribution of x given the decoder's output ``decoded`` ``(batch, *event)``.

    - ``"bernoulli"``: ``decoded`` are logits; the support is {0, 1}, and samples are
      binary. :func:`ppl_vae.fit` and :func:`ppl_vae.checks.posterior_predictive_check`
      refuse grey levels for it (:mod:`ppl_vae.infer.observations`): binarise them
      (``MNIST(binarize="fixed")``, or ``fit(..., binarize=("x",))`` for a fresh draw per
      batch) or choose a Gaussian or Laplace likelihood.
    - ``"gaussian"``: ``decoded`` is the mean, ``scale`` the fixed standard deviation
      (:class:`~ppl_vae.distributions.FixedScaleNormal`).
    - ``"laplace"``: ``decoded`` is the location, ``scale`` the fixed scale (the
      Decomposition paper uses 0.1 for Fashion-MNIST;
      :class:`~ppl_vae.distributions.FixedScaleLaplace`).

    :param name: ``"bernoulli"``, ``"gaussian"`` or ``"laplace"``.
    :param decoded: ``(batch, *event)`` the decoder's output, as above.
    :param event_dim: number of trailing dimensions that form one observation
        (3 for images ``(C, H, W)``, 1 for vectors).
    :param scale: the fixed scale of a Gaussian or Laplace likelihood (> 0); ``None`` for Bernoulli.

    The distribution's parameters are float32 even when the decoder ran in bfloat16 under
    mixed precision (:func:`~ppl_vae.nn.full_precision`).
    """
    check_likelihood(name, scale)
    decoded = full_precision(decoded)
    if name == "bernoulli":
        base = dist.Bernoulli(logits=decoded, validate_args=False)
    elif name == "gaussian":
        base = FixedScaleNormal(decoded, scale)
    else:
        base = FixedScaleLaplace(decoded, scale)
    return base.to_event(event_dim)


def likelihood_mean(name: str, decoded: torch.Tensor) -> torch.Tensor:
    """The mean of p(x | decoded): ``sigmoid(logits)`` for Bernoulli, the location otherwise.

    :param name: ``"bernoulli"``, ``"gaussian"`` or ``"laplace"``.
    :param decoded: ``(batch, *event)`` the decoder's output (logits for Bernoulli).
    """
    return torch.sigmoid(decoded) if name == "bernoulli" else decoded


class CountLikelihood(nn.Module):
    r"""Negative binomial (optionally zero-inflated) observation model for count data.

    The decoder's output is the log mean :math:`\log\mu` of every feature, ``(batch, F)``; the
    inverse dispersion :math:`\theta_f` (``total_count``) and, for ``"zinb"``, the gate logit
    :math:`\pi_f` are learned per feature (scVI's ``dispersion="gene"``)::

        x_f ~ NB(total_count=theta_f, logits=log mu_f - log theta_f)        mean mu_f
        x_f ~ pi_f delta_0 + (1 - pi_f) NB(...)                             ("zinb")

    :param features: F.
    :param zero_inflated: ``True`` for the ZINB.
    """

    def __init__(self, features: int, zero_inflated: bool = False) -> None:
        super().__init__()
        self.log_total_count = nn.Parameter(torch.zeros(features))
        self.gate_logits = nn.Parameter(torch.full((features,), -2.0)) if zero_inflated else None

    def forward(self, log_mean: torch.Tensor) -> dist.TorchDistribution:
        """The distribution of counts ``(batch, F)`` given ``log_mean (batch, F)``; event dim 1
        (float32 parameters under mixed precision too).

        :param log_mean: ``(batch, F)`` the decoder's output, log mu.
        """
        log_mean = full_precision(log_mean)
        total_count = self.log_total_count.exp()
        logits = log_mean - self.log_total_count
        if self.gate_logits is None:
            return dist.NegativeBinomial(total_count, logits=logits).to_event(1)
        gate_logits = self.gate_logits.expand_as(log_mean)
        return dist.ZeroInflatedNegativeBinomial(total_count, logits=logits, gate_logits=gate_logits).to_event(1)

    def mean(self, log_mean: torch.Tensor) -> torch.Tensor:
        """E[x] ``(batch, F)``: ``mu``, times ``1 - sigmoid(gate)`` when zero-inflated.

        :param log_mean: ``(batch, F)`` the decoder's output, log mu.
        """
        mean = log_mean.exp()
        return mean if self.gate_logits is None else mean * torch.sigmoid(-self.gate_logits)
