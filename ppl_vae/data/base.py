"""Shared building blocks for the data sets: a data set held as named tensors."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch.utils.data import Dataset


class TensorDictDataset(Dataset):
    """A data set held in memory as named tensors that share their first dimension.

    Items are tuples in the order the tensors were given (like ``torch.utils.data.TensorDataset``),
    and ``tensors()`` hands all of them over at once so that small data sets can be moved to the
    GPU and batched there without DataLoader workers.

    :param tensors: name -> tensor, every tensor of shape ``(N, ...)`` with the same ``N``.
    """

    def __init__(self, tensors: Mapping[str, torch.Tensor]) -> None:
        if not tensors:
            raise ValueError("tensors must name at least one tensor; got an empty mapping")
        lengths = {name: t.shape[0] if t.dim() > 0 else None for name, t in tensors.items()}
        if None in lengths.values() or len(set(lengths.values())) != 1:
            raise ValueError(f"tensors must share their first dimension; got lengths {lengths}")
        self._tensors = dict(tensors)

    def __len__(self) -> int:
        return next(iter(self._tensors.values())).shape[0]

    def __getitem__(self, index: int) -> tuple[torch.Tensor, ...]:
        return tuple(t[index] for t in self._tensors.values())

    def tensors(self) -> dict[str, torch.Tensor]:
        """All the data as named tensors (the stored tensors themselves, not copies)."""
        return dict(self._tensors)
