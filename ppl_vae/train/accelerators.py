"""Where :func:`~ppl_vae.fit` trains: Lightning's accelerator and devices for a
:class:`~ppl_vae.train.TrainConfig`, and whether its precision pays on that hardware."""
from __future__ import annotations

import warnings
from pathlib import Path

import torch

from ppl_vae._devices import available_device
from ppl_vae.train.config import TrainConfig

__all__ = ["cpu_has_amx_bf16", "lightning_devices", "warn_if_bf16_is_slow"]

_LIGHTNING_ACCELERATORS = {"cpu": "cpu", "cuda": "gpu", "mps": "mps"}


def lightning_devices(config: TrainConfig) -> tuple[str, int | list[int]]:
    """Lightning's ``accelerator`` and ``devices`` for ``config.device``, checked once to be on
    this machine (torch sees a device of its type, and its index if it has one) before anything
    is built or written: ``"cuda:1"`` is Lightning's ``devices=[1]``; ``"cuda"`` and ``"auto"``
    take ``config.devices`` devices.

    :param config: the training settings; ``config.device`` (``"cpu"``, ``"cuda"``,
        ``"cuda:N"``, ``"mps"`` or ``"auto"``) and ``config.devices`` (the number of devices)
        are read.
    :returns: Lightning's accelerator (``"cpu"``, ``"gpu"`` or ``"mps"``) and its devices:
        ``config.devices`` (a count), or ``[N]`` for a device with index ``N``.
    :raises ValueError: naming the device when it is not there, is not one Lightning trains on,
        or has an index while ``config.devices`` asks for more than one.
    """
    device = available_device(config.device)
    if device.type not in _LIGHTNING_ACCELERATORS:
        raise ValueError(f"device={config.device!r}: fit trains on 'cpu', 'cuda', 'cuda:N', 'mps' or 'auto'")
    if device.index is None or config.device == "auto":
        return _LIGHTNING_ACCELERATORS[device.type], config.devices
    if config.devices > 1:
        raise ValueError(
            f"device={config.device!r} names one device but devices={config.devices}: use device='cuda' "
            "with devices=N (and CUDA_VISIBLE_DEVICES to pick them)"
        )
    return _LIGHTNING_ACCELERATORS[device.type], [device.index]


def cpu_has_amx_bf16() -> bool:
    """Whether the CPU multiplies bfloat16 matrices in hardware (Intel AMX: the ``amx_bf16``
    flag of ``/proc/cpuinfo``; ``False`` where that file does not exist)."""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return "amx_bf16" in cpuinfo.split()


def warn_if_bf16_is_slow(config: TrainConfig, accelerator: str) -> None:
    """Warn when ``config.precision`` is ``"bf16-mixed"`` on hardware where it is slower than
    float32. bf16-mixed pays on GPUs that support it and on CPUs with AMX; on other CPUs
    (AVX512-BF16 included: measured 0.74-0.92x of float32's speed) and GPUs without bfloat16
    it is slower than float32.

    :param config: the training settings; only ``config.precision`` is read.
    :param accelerator: Lightning's accelerator (``"cpu"``, ``"gpu"`` or ``"mps"``, from
        :func:`lightning_devices`); ``"gpu"`` asks torch whether the current CUDA device
        supports bfloat16, anything else checks the CPU for AMX.
    """
    if config.precision != "bf16-mixed":
        return
    on_gpu = accelerator == "gpu"
    supported = torch.cuda.is_bf16_supported() if on_gpu else cpu_has_amx_bf16()
    if not supported:
        where = "GPU without bfloat16 support" if on_gpu else "CPU without AMX"
        warnings.warn(
            f"precision='bf16-mixed' on a {where}: bfloat16 matrix products are emulated or slower "
            "there, usually slower than precision='32-true'",
            stacklevel=3,
        )
