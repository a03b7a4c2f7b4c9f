"""One device vocabulary for the whole library: :func:`ppl_vae.fit`, :func:`ppl_vae.load_run`,
the recipes and ``ppl-vae --device`` take what ``torch.device`` takes (``"cpu"``, ``"cuda"``,
``"cuda:1"``, ``"mps"``, a ``torch.device``) and ``"auto"`` (the first CUDA device when torch
sees one, else the CPU).

A setting is checked in two stages: :func:`device_setting` checks its form where a config is
built (without importing torch for ``"auto"``, ``"cpu"`` and ``"cuda"``, so that the command
line checks its settings before the engine loads); :func:`available_device` checks that the
device is on this machine, once, before anything is built on it or written, and refuses a
missing one in one line naming it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ppl_vae._validation import shown

if TYPE_CHECKING:
    import torch

AUTO = "auto"
_WITHOUT_TORCH = (AUTO, "cpu", "cuda")
EXPECTED = "'auto' or a torch device such as 'cpu', 'cuda', 'cuda:1' or 'mps'"


def device_setting(name: str, value: Any) -> str:
    """``value`` as the text a config saves: ``"auto"`` or a device torch parses
    (a ``torch.device`` becomes its text, ``torch.device("cuda", 1)`` -> ``"cuda:1"``).

    :raises ValueError: ``"{name} must be 'auto' or a torch device ..., got {value}"``.
    """
    if type(value).__name__ == "device" and type(value).__module__ == "torch":
        return str(value)
    if isinstance(value, str) and value in _WITHOUT_TORCH:
        return value
    if isinstance(value, str) and value.isprintable() and len(value) <= 40:
        import torch

        try:
            return str(torch.device(value))
        except (RuntimeError, ValueError):
            pass
    raise ValueError(f"{name} must be {EXPECTED}, got {shown(value)}")


def available_device(value: Any, name: str = "device") -> torch.device:
    """The ``torch.device`` that ``value`` names on this machine (``"auto"``: ``cuda:0`` when
    torch sees a CUDA device, else ``cpu``), checked to be there.

    :raises ValueError: naming the device when its form is wrong, when torch sees no device of
        its type (no CUDA driver or GPU, a torch built without CUDA, no Apple GPU) or when its
        index is past the devices torch sees.
    """
    import torch

    text = device_setting(name, value)
    if text == AUTO:
        return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    device = torch.device(text)
    if device.type == "cuda":
        _check_cuda(text, device, name)
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"{name}={text!r} is not available: torch sees no Apple GPU (MPS)")
    return device


def _check_cuda(text: str, device: torch.device, name: str) -> None:
    import torch

    if not torch.cuda.is_available():
        why = "this torch build has no CUDA support" if torch.version.cuda is None else "no NVIDIA driver or GPU found"
        raise ValueError(f"{name}={text!r} is not available: torch sees no CUDA device ({why}); use 'cpu' or 'auto'")
    count = torch.cuda.device_count()
    if device.index is not None and device.index >= count:
        raise ValueError(
            f"{name}={text!r} is not available: torch sees {count} CUDA device(s), cuda:0 to cuda:{count - 1}"
        )
