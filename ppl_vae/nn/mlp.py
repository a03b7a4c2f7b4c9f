"""Fully connected networks (pinwheel, Grassy-MNIST, tabular and count data)."""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


class MLP(nn.Sequential):
    """A stack of ``Linear`` layers with an activation between them.

    Maps ``(batch, sizes[0])`` to ``(batch, sizes[-1])``. Inputs with more than one
    feature dimension (images ``(batch, 1, 28, 28)``) are flattened first.

    :param sizes: layer widths, input first, at least two entries.
    :param activation: module class put after every layer but the last.
    :param bias: ``False`` builds every layer without bias, so that ``MLP(0) = 0``
        (with an activation that maps 0 to 0, such as ReLU); the contrastive VAE's
        denoising relies on it.
    :param final_activation: optional module applied after the last layer.
    """

    def __init__(
        self,
        sizes: Sequence[int],
        activation: type[nn.Module] = nn.ReLU,
        bias: bool = True,
        final_activation: nn.Module | None = None,
    ) -> None:
        if len(sizes) < 2 or any(int(s) < 1 for s in sizes):
            raise ValueError(f"sizes must list at least two positive widths, got {list(sizes)}")
        layers: list[nn.Module] = [nn.Flatten()]
        for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=False)):
            layers.append(nn.Linear(int(n_in), int(n_out), bias=bias))
            if i < len(sizes) - 2:
                layers.append(activation())
        if final_activation is not None:
            layers.append(final_activation)
        super().__init__(*layers)
        self.in_features = int(sizes[0])
        self.out_features = int(sizes[-1])


class Unflatten(nn.Module):
    """Reshape ``(batch, prod(shape))`` to ``(batch, *shape)``: an MLP decoder's image view.

    :param shape: the shape of one output, e.g. ``(1, 28, 28)``.
    """

    def __init__(self, shape: Sequence[int]) -> None:
        super().__init__()
        self.shape = tuple(int(s) for s in shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x: (..., prod(shape))`` viewed as ``(..., *shape)``.

        :param x: ``(..., prod(shape))`` flat values.
        """
        return x.reshape(*x.shape[:-1], *self.shape)


def mlp_decoder(
    latent_dim: int,
    hidden: Sequence[int],
    output_shape: Sequence[int],
    bias: bool = True,
    activation: type[nn.Module] = nn.ReLU,
) -> nn.Sequential:
    """An MLP from ``(batch, latent_dim)`` to ``(batch, *output_shape)`` (pre-likelihood values).

    Only the latent is flattened, so the input must be 2-D; the output is reshaped to
    ``output_shape`` (e.g. ``(1, 28, 28)`` or ``(2,)``).

    :param latent_dim: size of the latent codes.
    :param hidden: widths of the hidden layers.
    :param output_shape: shape of one output.
    :param bias: ``False`` builds every layer without bias (``decoder(0) = 0``).
    :param activation: module class put after every hidden layer.
    """
    out_features = 1
    for s in output_shape:
        out_features *= int(s)
    body = MLP([latent_dim, *hidden, out_features], activation=activation, bias=bias)
    return nn.Sequential(body, Unflatten(output_shape))
