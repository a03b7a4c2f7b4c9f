r"""Linear baselines.

Contrastive PCA (cPCA; Abid, Zhang, Bagaria & Zou 2018) is the linear method the contrastive
VAE generalises: the directions v that maximise the target's variance while penalising the
background's,

.. math:: v^* = \operatorname{argmax}_{\lVert v \rVert = 1} v^\top (C_\text{target} - \alpha C_\text{background}) v,

i.e. the leading eigenvectors of ``C_target - alpha C_background`` (each covariance about its
own data set's mean). ``alpha = 0`` is PCA of the target.
"""
from __future__ import annotations

import numpy as np
import torch

from ppl_vae._validation import finite, positive_integer


def _as_matrix(data: np.ndarray | torch.Tensor, name: str) -> np.ndarray:
    if isinstance(data, torch.Tensor):
        data = data.detach().cpu().numpy()
    data = np.asarray(data)
    if not (np.issubdtype(data.dtype, np.floating) or np.issubdtype(data.dtype, np.integer)):
        raise ValueError(f"{name} must hold numbers, got dtype {data.dtype}")
    if data.ndim < 2 or data.shape[0] < 2:
        raise ValueError(f"{name} must have shape (n >= 2, *features), got {data.shape}")
    data = data.reshape(data.shape[0], -1).astype(np.float64)
    if not np.isfinite(data).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    return data


class ContrastivePCA:
    """cPCA with a fixed contrast strength.

    :param n_components: number of contrastive directions k.
    :param alpha: contrast strength, >= 0.

    After :meth:`fit`, ``components`` is ``(k, F)`` (rows are unit eigenvectors, by decreasing
    eigenvalue) and ``eigenvalues`` is ``(k,)``. The cPCA paper picks alpha by spectral
    clustering of the subspaces of many alphas; here alpha is given (sweep it and compare).
    """

    def __init__(self, n_components: int = 2, alpha: float = 1.0) -> None:
        self.n_components = positive_integer("n_components", n_components)
        self.alpha = finite("alpha", alpha, low=0)
        self.components: np.ndarray | None = None
        self.eigenvalues: np.ndarray | None = None
        self.mean: np.ndarray | None = None

    def fit(self, target: np.ndarray | torch.Tensor, background: np.ndarray | torch.Tensor) -> ContrastivePCA:
        """Fit on ``target (N, *features)`` and ``background (M, *features)``.

        :param target: ``(N, *features)`` the data whose specific directions are sought.
        :param background: ``(M, *features)`` the data whose variance is penalised, same features.
        """
        x, b = _as_matrix(target, "target"), _as_matrix(background, "background")
        if x.shape[1] != b.shape[1]:
            raise ValueError(f"background must have {x.shape[1]} features like the target, got {b.shape[1]}")
        if self.n_components > x.shape[1]:
            raise ValueError(f"n_components must be <= the {x.shape[1]} features, got {self.n_components}")
        contrast = np.cov(x, rowvar=False) - self.alpha * np.cov(b, rowvar=False)
        values, vectors = np.linalg.eigh(np.atleast_2d(contrast))
        order = np.argsort(values)[::-1][: self.n_components]
        self.eigenvalues, self.components = values[order], vectors[:, order].T
        self.mean = x.mean(axis=0)
        return self

    def transform(self, data: np.ndarray | torch.Tensor) -> np.ndarray:
        """Project ``data (n, *features)`` (centred by the target's mean) onto the components: ``(n, k)``.

        :param data: ``(n, *features)``, the features of the fitted data.
        """
        if self.components is None:
            raise ValueError("ContrastivePCA must be fitted before transform")
        x = _as_matrix(data, "data")
        if x.shape[1] != self.components.shape[1]:
            raise ValueError(f"data must have {self.components.shape[1]} features, got {x.shape[1]}")
        return (x - self.mean) @ self.components.T

    def fit_transform(self, target: np.ndarray | torch.Tensor, background: np.ndarray | torch.Tensor) -> np.ndarray:
        """Fit, then project the target: ``(N, k)``.

        :param target: ``(N, *features)`` the data whose specific directions are sought.
        :param background: ``(M, *features)`` the data whose variance is penalised, same features.
        """
        return self.fit(target, background).transform(target)
