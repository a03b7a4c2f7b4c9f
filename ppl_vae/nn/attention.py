r"""The attention gate of PartedVAE's class-related encoder q(u_i | c_i, x).

The gate turns a (relaxed) one-hot class ``c_i`` into a soft mask over the encoder's
features ``h``; u_i's mean and scale are read from ``h * a_i``, so each class can attend
to its own features (Hajimiri et al. 2021, Sec. 4.3 and Fig. 2; the authors' code).
"""
from __future__ import annotations

import torch
from torch import nn


class AttentionGate(nn.Module):
    r"""``a = sigmoid(k (W c + b))``: class weights ``c (B, L)`` -> gate ``a (B, F)`` in (0, 1).

    The sharpness k is passed to :meth:`forward` rather than stored, so the schedule that
    sets it (PartedVAE: 1 growing by 2e-4 per step up to 8, and 8 at evaluation) lives
    with the model, whose guide takes the training step as an argument.

    :param num_classes: L, the number of values of the categorical variable.
    :param features: F, the width of the encoder features the gate multiplies.
    """

    def __init__(self, num_classes: int, features: int) -> None:
        super().__init__()
        if num_classes < 1 or features < 1:
            raise ValueError(
                f"num_classes and features must be >= 1, got {num_classes} and {features}"
            )
        self.linear = nn.Linear(num_classes, features)
        self.num_classes = int(num_classes)
        self.features = int(features)

    def forward(self, c: torch.Tensor, sharpness: float | torch.Tensor = 1.0) -> torch.Tensor:
        """Gate ``(B, F)`` for one-hot or relaxed one-hot ``c (B, L)``; ``sharpness`` k > 0.

        :param c: ``(B, L)`` one-hot or relaxed one-hot class codes.
        :param sharpness: k > 0, a float or a 0-dim tensor; multiplies the logits before the
            sigmoid (larger: closer to 0/1).
        """
        if c.shape[-1] != self.num_classes:
            raise ValueError(
                f"c must have shape (batch, {self.num_classes}), got {tuple(c.shape)}"
            )
        return torch.sigmoid(sharpness * self.linear(c))
