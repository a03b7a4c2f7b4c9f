"""Weight initialisation schemes chosen by name."""
from __future__ import annotations

from torch import nn

from ppl_vae._constants import WEIGHT_INITS
from ppl_vae._validation import choice

_LAYERS = (nn.Linear, nn.Conv2d, nn.ConvTranspose2d)


def initialise(module: nn.Module, scheme: str) -> nn.Module:
    """Re-draw the weights of every linear and convolution layer of ``module`` in place and
    return it: ``"torch"`` keeps torch's defaults (Kaiming-uniform weights, uniform biases);
    ``"glorot"`` draws weights from Glorot's uniform distribution and sets biases to zero
    (Keras's defaults for ``Dense`` and ``Conv2D``, which the contrastive VAE's authors used).

    :param module: the network whose layers are re-drawn (nested modules included).
    :param scheme: ``"torch"`` or ``"glorot"``.
    :raises ValueError: an unknown ``scheme``.
    """
    choice("weight init scheme", scheme, WEIGHT_INITS)
    if scheme == "glorot":
        for layer in module.modules():
            if isinstance(layer, _LAYERS):
                nn.init.xavier_uniform_(layer.weight)
                if layer.bias is not None:
                    nn.init.zeros_(layer.bias)
    return module
