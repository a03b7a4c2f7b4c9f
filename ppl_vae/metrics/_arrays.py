"""Conversion of array-like inputs (torch tensors, numpy arrays, sequences) to numpy."""
from __future__ import annotations

from typing import Any

import numpy as np
import torch


def as_numpy(x: Any) -> np.ndarray:
    """Return ``x`` as a numpy array; a torch tensor is detached and moved to the CPU first."""
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def as_float_matrix(x: Any, name: str) -> np.ndarray:
    """Return ``x`` as a float64 array of shape (n, D); ValueError naming ``name`` otherwise."""
    array = as_numpy(x)
    if array.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n, D), got shape {array.shape}")
    return array.astype(np.float64, copy=False)


def as_label_vector(x: Any, name: str) -> np.ndarray:
    """Return ``x`` as an int64 vector of shape (n,); ValueError if not 1-D or not integer-valued."""
    array = as_numpy(x)
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-D (n,), got shape {array.shape}")
    if array.dtype.kind not in "iub" and not _integer_valued_floats(array):
        raise ValueError(f"{name} must hold integer labels, got dtype {array.dtype}")
    return array.astype(np.int64)


def _integer_valued_floats(array: np.ndarray) -> bool:
    """Whether ``array`` is a float array of finite whole numbers (e.g. labels as 0.0, 1.0)."""
    if array.dtype.kind != "f":
        return False
    return bool(np.all(np.isfinite(array) & (array == np.round(array))))


def check_finite(array: np.ndarray, name: str) -> None:
    """ValueError naming ``name`` when ``array`` holds NaN or an infinity."""
    if not np.isfinite(array).all():
        bad = np.count_nonzero(~np.isfinite(array))
        raise ValueError(f"{name} must be finite, got {bad} NaN or infinite value(s) of {array.size}")
