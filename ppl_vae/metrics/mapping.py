"""Maps of representations before scoring.

The Decomposition VAE authors score a model with a factored Student-t prior on its posterior
means mapped to the normal scale: each coordinate through the Student-t CDF with the prior's
``df``, then the inverse standard normal CDF (their ``analyse.py``), so that heavy-tailed
coordinates are not judged on a scale their tails dominate.
"""
from __future__ import annotations

import numpy as np
import torch
from scipy import special

from ppl_vae.metrics._arrays import as_numpy, check_finite
from ppl_vae.metrics.factor_score import Encode


def student_t_to_normal(codes: torch.Tensor | np.ndarray, df: float) -> np.ndarray:
    """``Phi^-1(F_df(codes))`` elementwise: ``(n, D)`` codes mapped from a standard Student-t
    with ``df`` degrees of freedom to the standard normal scale (monotone, odd).

    Computed on the lower tail, ``-Phi^-1(F_df(-|x|))`` with the sign of x, so that large
    codes map to finite values where ``F_df(x)`` rounds to 1.

    :param codes: finite ``(n, D)`` codes.
    :param df: degrees of freedom, > 0.
    :raises ValueError: ``df`` not a positive number, or codes not finite."""
    if isinstance(df, bool) or not isinstance(df, (int, float)) or not df > 0:
        raise ValueError(f"df must be a positive number, got {df!r}")
    array = as_numpy(codes).astype(np.float64)
    check_finite(array, "codes")
    lower = special.ndtri(special.stdtr(df, -np.abs(array)))
    return np.where(array > 0, -lower, lower) if array.size else array


class StudentTToNormal:
    """``encode`` followed by :func:`student_t_to_normal`: an encode callable for the metrics.

    :param encode: ``encode(images) -> (n, D)`` codes.
    :param df: the Student-t prior's degrees of freedom, > 0."""

    def __init__(self, encode: Encode, df: float) -> None:
        student_t_to_normal(np.zeros((0, 1)), df)  # refuse a bad df here, not at the first call
        self.encode, self.df = encode, df

    def __call__(self, images: torch.Tensor) -> np.ndarray:
        return student_t_to_normal(self.encode(images), self.df)
