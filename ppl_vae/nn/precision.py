"""Where a network's output meets a distribution under mixed precision."""
from __future__ import annotations

import torch


def full_precision(t: torch.Tensor) -> torch.Tensor:
    """``t`` in float32 when a mixed-precision context (``torch.autocast``) left it in a
    lower floating-point precision (bfloat16, float16); unchanged otherwise (float32,
    float64, integers).

    The models call it on every network output that becomes the parameter of a
    distribution (Gaussian heads, class logits, decoder outputs, discriminator logits), so
    that under ``precision="bf16-mixed"`` the networks' layers run in bfloat16 while every
    log-density, KL and loss term is computed in float32. Outside autocast it is a no-op.

    :param t: a network's output, any shape and dtype.
    """
    if t.is_floating_point() and torch.finfo(t.dtype).bits < 32:
        return t.float()
    return t
