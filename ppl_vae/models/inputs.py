"""Checks of a model's arguments at the entry of its ``model`` and ``guide``, before any network
or distribution sees them, each refusal one line naming the argument.

Pyro's trace handler (``pyro.poutine.trace_messenger.TraceHandler``, under every ELBO,
``Predictive`` and ``poutine.trace``) re-raises a ``ValueError`` or ``RuntimeError`` raised
inside a trace as a new exception of the same class whose message is the original's with the
trace's shape table appended. For a batch of the wrong shape or with NaN the table says nothing
that the message does not; :class:`ModelInputError` keeps the first line of the message it is
built with, so that the error stays the one line naming the argument.
"""
from __future__ import annotations

import math

import torch
from pyro.infer.util import is_validation_enabled
from torch import nn

from ppl_vae.nn import MLP, ConvDecoder, ConvEncoder

__all__ = [
    "ModelInputError", "all_finite", "check_batch", "check_decoder_size", "check_dtype", "decoder_input_size",
    "encoder_input_shape", "network_dtype",
]


class ModelInputError(ValueError):
    """A model's argument that does not fit the model: one line naming the argument, also when
    Pyro's trace handler re-raises it with its shape table appended (the first line is kept).

    :param message: ``"{argument} must ..., got ..."``.
    """

    def __init__(self, message: str) -> None:
        super().__init__(str(message).partition("\n")[0])


def encoder_input_shape(encoder: nn.Module) -> tuple[int, ...] | int | None:
    """What one point must be for a network of :mod:`ppl_vae.nn`: the shape ``(C, S, S)`` for a
    :class:`~ppl_vae.nn.ConvEncoder`; the number of features ``F`` for an
    :class:`~ppl_vae.nn.MLP`, which flattens a point of any shape of ``F`` elements; ``None`` for
    another network (its input is unknown).

    :param encoder: the model's encoder network."""
    if isinstance(encoder, ConvEncoder):
        return (encoder.channels, encoder.image_size, encoder.image_size)
    if isinstance(encoder, MLP):
        return encoder.in_features
    return None


def decoder_input_size(decoder: nn.Module) -> int | None:
    """The latent size a network of :mod:`ppl_vae.nn` decodes: a
    :class:`~ppl_vae.nn.ConvDecoder`'s ``latent_dim``, the input width of an
    :class:`~ppl_vae.nn.MLP` or of :func:`~ppl_vae.nn.mlp_decoder` (an ``nn.Sequential`` that
    starts with one); ``None`` for another network.

    :param decoder: the model's decoder network."""
    if isinstance(decoder, ConvDecoder):
        return decoder.latent_dim
    if isinstance(decoder, nn.Sequential) and len(decoder) > 0 and not isinstance(decoder, MLP):
        decoder = decoder[0]
    if isinstance(decoder, MLP):
        return decoder.in_features
    return None


def check_decoder_size(decoder: nn.Module, latent_size: int, what: str = "latent_dim") -> None:
    """Refuse a library decoder whose input width is not ``latent_size`` (at construction, where
    torch would otherwise fail at the first batch with ``mat1 and mat2 shapes cannot be multiplied``).

    :param decoder: the model's decoder network.
    :param latent_size: the number of latent features the model feeds it.
    :param what: how the model's arguments name that size, for the message.
    :raises ValueError: naming the decoder's width and ``what`` (``"latent_dim"``, ``"z_dim + u_dims"``).
    """
    size = decoder_input_size(decoder)
    if size is not None and size != latent_size:
        raise ValueError(f"decoder must take latents of {what}={latent_size} features, got a decoder of {size}")


def all_finite(data: torch.Tensor) -> bool:
    """Whether every value of the floating-point tensor ``data`` is finite, by one sum (which a
    NaN or an infinity makes non-finite) and, only where that sum is not finite, the
    element-wise check (finite values whose sum overflows pass it): on a CPU a fraction of the
    element-wise check's time, which a training step on a small network pays at every call of
    its model and guide.

    :param data: ``(...)`` floating-point tensor; its values are read back (a host synchronisation).
    """
    return bool(torch.isfinite(data.detach().sum())) or bool(torch.isfinite(data).all())


def network_dtype(network: nn.Module) -> torch.dtype | None:
    """The dtype of the first floating-point parameter of ``network`` (``None`` without one):
    what its input must be, float32 unless the model was converted (``model.double()``).

    :param network: a model's network, e.g. its encoder."""
    return next((p.dtype for p in network.parameters() if p.is_floating_point()), None)


def check_dtype(name: str, data: torch.Tensor, dtype: torch.dtype | None) -> None:
    """Refuse ``data`` whose dtype is not ``dtype`` (``None``: any), the dtype of the network
    that takes it (:func:`network_dtype`), before torch's matrix product refuses it without
    naming it; numpy's arrays come as float64 and counts as int64.

    :param name: the argument's name, e.g. ``"x"``.
    :param data: the argument's value.
    :param dtype: the dtype it must have.
    :raises ModelInputError: ``"{name} must have the dtype of the model's parameters, ..."``."""
    if dtype is not None and data.dtype != dtype:
        raise ModelInputError(
            f"{name} must have the dtype of the model's parameters, {dtype} (convert with {name}.to({dtype}); "
            f"numpy's arrays come as float64), got dtype {data.dtype}"
        )


def check_batch(
    name: str, data: object, event: tuple[int, ...] | int | None = None, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """``data`` itself, refused unless it is a tensor ``(B >= 1, *event)`` of real values of
    ``dtype``, free of NaN and infinities, whose points fit ``event`` when it is known (a
    shape, or a number of features, :func:`encoder_input_shape`). The values are read back (a
    host synchronisation) only on the CPU or under Pyro's validation (on by default;
    :func:`~ppl_vae.fit` trains without it and checks its data once before training).

    :param name: the argument's name, e.g. ``"x"``.
    :param data: the argument's value: ``(B, *event)``.
    :param event: one point's shape, its number of features, or ``None`` when unknown.
    :param dtype: the dtype of the network that takes it (:func:`network_dtype`), or ``None``.
    :raises ModelInputError: ``"{name} must ..., got ..."``, one line.
    """
    if not isinstance(data, torch.Tensor):
        raise ModelInputError(f"{name} must be a torch.Tensor, got {type(data).__name__}")
    if data.dtype == torch.bool or data.is_complex():
        raise ModelInputError(f"{name} must hold real numbers (convert with .float()), got dtype {data.dtype}")
    check_dtype(name, data, dtype)
    if isinstance(event, tuple):
        expected, fits = "(batch, " + ", ".join(map(str, event)) + ")", tuple(data.shape[1:]) == event
    elif isinstance(event, int):
        expected, fits = f"(batch, *features) with {event} features per point", math.prod(data.shape[1:]) == event
    else:
        expected, fits = "(batch >= 1, *features)", True
    if data.dim() < 2 or data.shape[0] == 0 or not fits:
        raise ModelInputError(f"{name} must have shape {expected}, got {tuple(data.shape)}")
    if data.is_floating_point() and (data.device.type == "cpu" or is_validation_enabled()) and not all_finite(data):
        bad = int((~torch.isfinite(data)).sum())
        raise ModelInputError(
                f"{name} must be finite, got {bad} NaN or infinite value(s) among its {data.numel()}"
            )
    return data
