"""Heads that turn features into the parameters of a variational distribution."""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from ppl_vae._validation import finite
from ppl_vae.nn.precision import full_precision


class GaussianHead(nn.Module):
    """Affine map from features ``(batch, in_features)`` to a diagonal Gaussian's
    ``loc`` and ``scale``, each ``(batch, out_features)``.

    The scale is ``softplus(raw) + min_scale``, which keeps it positive without the
    overflow of ``exp(log_var / 2)`` at large pre-activations. Both are returned in float32
    (at least) even when the affine maps run in bfloat16 under mixed precision, so the
    distributions built from them, and their KLs, are computed in float32.

    :param in_features: width of the input features.
    :param out_features: D, the dimension of the Gaussian.
    :param bias: ``False`` gives a head with ``head(0) = (0, softplus(0) + min_scale)``.
    :param min_scale: the smallest standard deviation (>= 0), added to the softplus.
    """

    def __init__(
        self, in_features: int, out_features: int, bias: bool = True, min_scale: float = 1e-4
    ) -> None:
        super().__init__()
        finite("min_scale", min_scale, low=0)
        self.loc = nn.Linear(in_features, out_features, bias=bias)
        self.raw_scale = nn.Linear(in_features, out_features, bias=bias)
        self.min_scale = float(min_scale)
        self.out_features = int(out_features)

    def forward(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(loc, scale)``, each ``(..., out_features)`` and at least float32, of features ``h: (..., in_features)``.

        :param h: ``(..., in_features)`` features, e.g. an encoder's output.
        """
        loc, raw_scale = full_precision(self.loc(h)), full_precision(self.raw_scale(h))
        return loc, F.softplus(raw_scale) + self.min_scale

