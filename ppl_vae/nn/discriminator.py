"""Discriminators for density-ratio estimates (the contrastive VAE's total correlation)."""
from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

import torch
from torch import nn

from ppl_vae._constants import CONTRASTIVE, DISCRIMINATORS
from ppl_vae._validation import choice
from ppl_vae.nn.precision import full_precision


class TCDiscriminator(nn.Module):
    """D(v) for ``v = [s, z] (B, D_s + D_z)``, returning logits ``(B,)``.

    ``"linear"`` is the paper's logistic regression; ``"mlp"`` has ``hidden`` LeakyReLU layers.
    The network is built on first use from the input width (the objective is created before
    it sees a model), see :meth:`build`.

    A linear discriminator can only tell distributions apart by their means, and the joint
    q(s, z) and the product q(s) q(z) have the same means: its optimum is the constant
    ``logit = 0`` for any dependence between s and z, so with ``"linear"`` the TC estimate
    (and its gradient) stays near zero. Use ``"mlp"`` for a TC term that can see dependence.

    :param kind: ``"linear"`` (the default) or ``"mlp"``.
    :param hidden: widths of the hidden layers of ``"mlp"`` (ignored by ``"linear"``).
    """

    def __init__(self, kind: str = CONTRASTIVE.discriminator, hidden: Sequence[int] = (64, 64)) -> None:
        super().__init__()
        self.kind = choice("discriminator", kind, DISCRIMINATORS)
        self.hidden = tuple(int(h) for h in hidden)
        self.input_dim: int | None = None
        self.net: nn.Module | None = None

    def build(self, input_dim: int, device: torch.device | str | None = None) -> TCDiscriminator:
        """Create the network for inputs of width ``input_dim`` on ``device`` (once; later calls
        check the width).

        :param input_dim: D_s + D_z, the width of the inputs ``v``.
        :param device: where the parameters live; ``None`` for torch's default device.
        """
        if self.net is not None:
            if input_dim != self.input_dim:
                raise ValueError(f"the discriminator was built for [s, z] of width {self.input_dim}, got {input_dim}")
            return self
        sizes = [input_dim, *(self.hidden if self.kind == "mlp" else ()), 1]
        layers: list[nn.Module] = []
        for i, (n_in, n_out) in enumerate(pairwise(sizes)):
            layers.append(nn.Linear(n_in, n_out))
            if i < len(sizes) - 2:
                layers.append(nn.LeakyReLU(0.2))
        self.net = nn.Sequential(*layers).to(device)
        self.input_dim = input_dim
        return self

    def forward(self, v: torch.Tensor) -> torch.Tensor:
        """Logits ``(B,)`` in float32 (also under mixed precision) for ``v (B, D_s + D_z)``.

        :param v: ``(B, D_s + D_z)`` codes, joint draws or draws with permuted ``s``.
        """
        self.build(v.shape[-1], v.device)
        return full_precision(self.net(v).squeeze(-1))
