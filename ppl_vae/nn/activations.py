"""Activations chosen by name in the networks' and recipes' settings."""
from __future__ import annotations

from torch import nn

from ppl_vae._constants import ACTIVATIONS
from ppl_vae._validation import choice, finite


def activation(name: str, negative_slope: float = 0.01) -> nn.Module:
    """An in-place activation module: ``"relu"``, ``"leaky_relu"`` with ``negative_slope``
    (the slope for negative inputs, >= 0; ignored by the others) or ``"identity"`` (none).

    :param name: ``"relu"``, ``"leaky_relu"`` or ``"identity"``.
    :param negative_slope: the slope of ``"leaky_relu"`` for negative inputs.
    :raises ValueError: an unknown ``name`` or a negative or non-finite ``negative_slope``.
    """
    choice("activation", name, ACTIVATIONS)
    finite("negative_slope", negative_slope, low=0)
    if name == "relu":
        return nn.ReLU(inplace=True)
    if name == "identity":
        return nn.Identity()
    return nn.LeakyReLU(float(negative_slope), inplace=True)
