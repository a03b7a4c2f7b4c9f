"""Convolutional encoders and decoders for 64x64 and 28x28/32x32 single-channel images.

The 64x64 encoder is the one both the PartedVAE and the Decomposition VAE authors use for
dSprites and CelebA: four 4x4 stride-2 convolutions with 32, 32, 64, 64 channels, then
``Linear(1024 -> hidden)``. The decoder mirrors it with transposed convolutions by default
(64, 64, 32, 32 input channels); ``conv_channels`` sets other widths (the Decomposition VAE
authors' decoder takes 64, 64, 64, 32).
The small pair is the same design with three stride-2 layers for 28x28 or 32x32 inputs
(MNIST, Fashion-MNIST).

Both run their convolutions in the channels-last memory format by default: the activations
are stored as N, H, W, C (they keep their logical N, C, H, W shape, so nothing outside the
network sees a difference beyond float rounding), and torch picks the channels-last kernels
from them. The weights stay in the usual contiguous layout: Pyro's parameter store keeps a
contiguous copy of every parameter it registers, so a channels-last weight would be a
different tensor from the one ``pyro.optim`` updates under plain SVI (it would never train).
On the CPU the oneDNN kernels are faster on channels-last activations (forward and backward
of the 64x64 encoder 50.5 -> 43.1 ms and of the decoder 69.2 -> 61.6 ms at batch 64 on one
thread, measured with channels-last weights too). Its effect on a GPU was not measured;
``channels_last=False`` gives the usual layout.

Every activation runs in place (``nn.ReLU(inplace=True)``, likewise ``nn.LeakyReLU``): it overwrites the output of the
layer before it, which only the ReLU reads (a convolution's and a linear layer's backward
pass need their input and weight, not their output), so the values and gradients are
exactly those of out-of-place ReLUs. It saves one activation-sized allocation and write per
layer; on the CPU, where these layers are memory-bound, forward and backward of the 64x64
pair took 0.89 of the time and a PartedVAE training iteration about 0.95
(``docs/performance.md``). A forward hook that keeps a layer's
output sees it after the ReLU.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from ppl_vae.nn.activations import activation

_CHANNELS_64 = (32, 32, 64, 64)
_CHANNELS_LAST = torch.channels_last
_CHANNELS_SMALL = (32, 64, 64)


def _check_image_batch(x: torch.Tensor, channels: int, size: int, name: str = "x") -> None:
    if x.dim() != 4 or x.shape[1] != channels or x.shape[-2:] != (size, size):
        raise ValueError(
            f"{name} must have shape (batch, {channels}, {size}, {size}), got {tuple(x.shape)}"
        )


def _conv_channels(image_size: int, conv_channels: Sequence[int] | None) -> tuple[int, ...]:
    """The channel widths for ``image_size`` (the papers' unless given); rejects other sizes."""
    if image_size not in (28, 32, 64):
        raise ValueError(f"image_size must be 28, 32 or 64, got {image_size}")
    return tuple(conv_channels or (_CHANNELS_64 if image_size == 64 else _CHANNELS_SMALL))


class ConvEncoder(nn.Module):
    """Image ``(batch, channels, size, size)`` -> features ``(batch, hidden_dim)``.

    ``size`` 64 uses four stride-2 layers (64 -> 4), ``size`` 32 three (32 -> 4),
    ``size`` 28 three with padding that maps 28 -> 14 -> 7 -> 4.

    :param image_size: side of the square input images: 64, 32 or 28.
    :param channels: channels of the input images (1 for grey, 3 for colour).
    :param hidden_dim: number of output features (the linear layer's width).
    :param bias: ``False`` builds bias-free layers (``encoder(0) = 0``).
    :param conv_channels: output channels of each convolution; ``None`` for the papers'
        (32, 32, 64, 64) at size 64, (32, 64, 64) otherwise.
    :param channels_last: run the convolutions on channels-last activations
        (:mod:`ppl_vae.nn.conv`).
    :param last_conv_activation: the activation after the last convolution, by name
        (:func:`~ppl_vae.nn.activations.activation`); the other convolutions are always
        followed by ReLU. The PartedVAE authors use ``"leaky_relu"`` with slope 0.1.
    :param hidden_activation: the activation after the linear layer. The PartedVAE authors
        use ``"leaky_relu"`` with slope 0.1, the Decomposition VAE authors ``"identity"``.
    :param negative_slope: the slope of ``"leaky_relu"`` for negative inputs.
    """

    def __init__(
        self,
        image_size: int = 64,
        channels: int = 1,
        hidden_dim: int = 256,
        bias: bool = True,
        conv_channels: Sequence[int] | None = None,
        channels_last: bool = True,
        last_conv_activation: str = "relu",
        hidden_activation: str = "relu",
        negative_slope: float = 0.01,
    ) -> None:
        super().__init__()
        conv_channels = _conv_channels(image_size, conv_channels)
        top = activation(hidden_activation, negative_slope)  # refuses a bad name or slope before building
        layers: list[nn.Module] = []
        c_in = channels
        for i, c_out in enumerate(conv_channels):
            padding = 2 if (image_size == 28 and i == 2) else 1
            after = last_conv_activation if i == len(conv_channels) - 1 else "relu"
            layers += [nn.Conv2d(c_in, c_out, 4, 2, padding, bias=bias), activation(after, negative_slope)]
            c_in = c_out
        self.conv = nn.Sequential(*layers)
        self.image_size = image_size
        self.channels = channels
        with torch.no_grad():
            flat = self.conv(torch.zeros(1, channels, image_size, image_size)).numel()
        self.fc = nn.Sequential(nn.Flatten(), nn.Linear(flat, hidden_dim, bias=bias), top)
        self.out_features = hidden_dim
        self.channels_last = bool(channels_last)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Features ``(B, hidden_dim)`` of images ``x: (B, channels, image_size, image_size)``.

        :param x: ``(B, channels, image_size, image_size)`` images.
        :raises ValueError: ``x`` is not a batch of such images.
        """
        _check_image_batch(x, self.channels, self.image_size)
        if self.channels_last:
            x = x.contiguous(memory_format=_CHANNELS_LAST)
        return self.fc(self.conv(x))


class ConvDecoder(nn.Module):
    """Latent ``(batch, latent_dim)`` -> image-sized pre-likelihood values
    ``(batch, channels, size, size)`` (logits for a Bernoulli likelihood, means otherwise).

    Mirrors :class:`ConvEncoder`: ``Linear(latent -> hidden -> 64*4*4)`` then
    transposed 4x4 stride-2 convolutions.

    :param latent_dim: size of the latent codes decoded.
    :param image_size: side of the square output images: 64, 32 or 28.
    :param channels: channels of the output images.
    :param hidden_dim: width of the first linear layer.
    :param bias: ``False`` builds bias-free layers (``decoder(0) = 0``).
    :param conv_channels: the encoder's convolution channels, which the transposed convolutions
        mirror; ``None`` for the papers' (see :class:`ConvEncoder`).
    :param channels_last: run the transposed convolutions on channels-last activations
        (:mod:`ppl_vae.nn.conv`); the output is then channels-last too.
    """

    def __init__(
        self,
        latent_dim: int,
        image_size: int = 64,
        channels: int = 1,
        hidden_dim: int = 256,
        bias: bool = True,
        conv_channels: Sequence[int] | None = None,
        channels_last: bool = True,
    ) -> None:
        super().__init__()
        conv_channels = _conv_channels(image_size, conv_channels)
        reversed_channels = list(reversed(conv_channels))
        self.start_channels = reversed_channels[0]
        self.fc = nn.Sequential(
            nn.Linear(latent_dim, hidden_dim, bias=bias),
            nn.ReLU(inplace=True),
            nn.Linear(hidden_dim, self.start_channels * 16, bias=bias),
            nn.ReLU(inplace=True),
        )
        layers: list[nn.Module] = []
        outs = reversed_channels[1:] + [channels]
        for i, (c_in, c_out) in enumerate(zip(reversed_channels, outs, strict=False)):
            first_of_28 = image_size == 28 and i == 0
            padding, output_padding = (2, 1) if first_of_28 else (1, 0)
            layers.append(
                nn.ConvTranspose2d(c_in, c_out, 4, 2, padding, output_padding, bias=bias)
            )
            if i < len(outs) - 1:
                layers.append(nn.ReLU(inplace=True))
        self.deconv = nn.Sequential(*layers)
        self.latent_dim = latent_dim
        self.output_shape = (channels, image_size, image_size)
        self.channels_last = bool(channels_last)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """Pre-likelihood values ``(..., channels, image_size, image_size)`` of latents ``z: (..., latent_dim)``.

        :param z: ``(..., latent_dim)`` latent codes, any batch shape.
        :raises ValueError: the last dimension of ``z`` is not ``latent_dim``.
        """
        if z.shape[-1] != self.latent_dim:
            raise ValueError(
                f"latent must have last dimension {self.latent_dim}, got shape {tuple(z.shape)}"
            )
        batch_shape = z.shape[:-1]
        h = self.fc(z.reshape(-1, self.latent_dim)).reshape(-1, self.start_channels, 4, 4)
        if self.channels_last:
            h = h.contiguous(memory_format=_CHANNELS_LAST)
        out = self.deconv(h)
        return out.reshape(*batch_shape, *self.output_shape)
