"""How compactly stored data become floats, in one place for every path that reads them."""
from __future__ import annotations

import torch


def stored_as_float(tensor: torch.Tensor) -> torch.Tensor:
    """Compact storage to float32: bool -> {0, 1}, uint8 -> [0, 1] (divided by 255); other
    dtypes unchanged (floating data, integer labels).

    :param tensor: ``(N, ...)`` data as stored.
    :returns: a tensor of the same shape.
    """
    if tensor.dtype == torch.bool:
        return tensor.float()
    if tensor.dtype == torch.uint8:
        return tensor.float().div_(255.0)
    return tensor
