"""Networks: plain ``nn.Module`` s with no Pyro in them.

Encoders map data to features, :class:`GaussianHead` maps features to a Gaussian's
``(loc, scale)``, decoders map latents to the parameters of the likelihood;
:func:`full_precision` brings a network output back to float32 under mixed precision.
"""
from ppl_vae.nn.activations import ACTIVATIONS, activation
from ppl_vae.nn.attention import AttentionGate
from ppl_vae.nn.conv import ConvDecoder, ConvEncoder
from ppl_vae.nn.discriminator import DISCRIMINATORS, TCDiscriminator
from ppl_vae.nn.heads import GaussianHead
from ppl_vae.nn.init import WEIGHT_INITS, initialise
from ppl_vae.nn.mlp import MLP, Unflatten, mlp_decoder
from ppl_vae.nn.precision import full_precision

__all__ = [
    "ACTIVATIONS",
    "DISCRIMINATORS",
    "AttentionGate",
    "ConvDecoder",
    "ConvEncoder",
    "GaussianHead",
    "MLP",
    "TCDiscriminator",
    "Unflatten",
    "WEIGHT_INITS",
    "activation",
    "full_precision",
    "initialise",
    "mlp_decoder",
]
