"""Count matrices for the contrastive VAE: a synthetic data set with known salient structure,
and helpers that turn user tables (numpy, torch, scipy sparse, AnnData) into target and
background tensors.

The synthetic data mimics the RNA-seq experiment of Abid & Zou (2019, fig. 5): cells whose
dominant variation (cell cycle, batch, cell type) is shared with a control population, plus
a weaker subgroup signal present only in the target. For cell n and gene g::

    log mu_ng = base_g + sum_k u_nk W_kg + c_{t(n), g}              (shared: both data sets)
                       + fold * [g in genes of subgroup y(n)]       (salient: target only)
    x_ng ~ NegativeBinomial(mean mu_ng, inverse dispersion theta)

``u_n ~ N(0, I)`` are continuous shared factors with strong loadings W on every gene, ``t(n)``
a shared cell type with per-type offsets c, and ``y(n)`` the target's subgroup, which
up-regulates its own block of ``salient_genes`` genes. The background draws u and t from the
same distributions and never has the subgroup genes switched on.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from ppl_vae._validation import finite, integer, positive_integer, shown
from ppl_vae.data.base import TensorDictDataset

DENSE_BUDGET_BYTES = 2**32
"""The most memory (4 GiB) a sparse table may take once made dense as float32; larger ones are refused."""


def _to_array(table: Any, name: str, layer: str | None, counts: bool) -> tuple[np.ndarray, Any]:
    """``(array (n, F), feature names or None)`` from numpy/torch/scipy-sparse/AnnData; sparse
    tables are checked while sparse and made dense only within ``DENSE_BUDGET_BYTES``."""
    names = None
    if hasattr(table, "X") and hasattr(table, "var_names"):
        names = list(table.var_names)
        if layer is not None:
            layers = getattr(table, "layers", None)
            if not isinstance(layers, Mapping) or layer not in layers:
                known = sorted(layers) if isinstance(layers, Mapping) else "none"
                raise ValueError(f"{name} has no layer {shown(layer)}; layers: {known}")
            table = layers[layer]
        else:
            table = table.X
    elif layer is not None:
        raise ValueError(f"layer={shown(layer)} needs AnnData input, but {name} is a {type(table).__name__}")
    if isinstance(table, torch.Tensor):
        table = _tensor_as_array(table, name)
    elif hasattr(table, "toarray") and hasattr(table, "shape"):
        table = _dense(table, name, counts)
    try:
        array = np.asarray(table)
    except (ValueError, TypeError) as error:
        raise ValueError(f"{name} must be a rectangular (cells, features) table of numbers ({error})") from None
    return array, names


def _check_budget(shape: tuple[int, ...], name: str) -> None:
    """Refuse a table whose dense float32 form exceeds ``DENSE_BUDGET_BYTES``."""
    needed = math.prod(shape) * 4
    if needed > DENSE_BUDGET_BYTES:
        raise ValueError(
            f"{name} is a sparse table of shape {tuple(shape)}: dense float32 it would take {needed / 2**30:.1f} GiB, "
            f"above the {DENSE_BUDGET_BYTES / 2**30:.0f} GiB this function makes dense; select genes or cells first"
        )


def _dense(table: Any, name: str, counts: bool) -> np.ndarray:
    """A scipy sparse matrix as a dense array, its stored values checked first (numeric,
    finite, counts when asked) and its size against ``DENSE_BUDGET_BYTES``."""
    _check_budget(tuple(table.shape), name)
    stored = np.asarray(getattr(table, "data", np.zeros(0)))
    _check_values(stored, name, counts)
    return table.toarray()


def _tensor_as_array(table: torch.Tensor, name: str) -> np.ndarray:
    """A torch tensor (sparse ones within ``DENSE_BUDGET_BYTES``, bfloat16 ones as float32) as a numpy array."""
    if table.layout != torch.strided:
        _check_budget(tuple(table.shape), name)
        table = table.to_dense()
    if table.dtype == torch.bfloat16:
        table = table.float()
    if table.is_complex() or table.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer or floating-point numbers, got dtype {table.dtype}")
    return table.detach().cpu().numpy()


def _check_values(array: np.ndarray, name: str, counts: bool) -> None:
    """Refuse non-numeric or boolean dtypes, values that are not finite once in float32, and
    (with ``counts``) values that are not non-negative integers."""
    if array.dtype == bool or not (np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)):
        raise ValueError(f"{name} must hold integer or floating-point numbers, got dtype {array.dtype}")
    with np.errstate(over="ignore"):
        in_float32 = array.astype(np.float32)
    if not np.isfinite(in_float32).all():
        raise ValueError(f"{name} contains NaN or infinite values (or values beyond float32's range, 3.4e38)")
    if counts and ((array < 0).any() or (array != np.round(array)).any()):
        raise ValueError(f"{name} must hold non-negative integer counts (counts=True)")


def contrastive_tensors(
    target: Any, background: Any, counts: bool = False, layer: str | None = None
) -> dict[str, torch.Tensor]:
    """Check and convert a target and a background table for :class:`~ppl_vae.models.contrastive.ContrastiveVAE`.

    Two conversions are deliberate: a torch sparse tensor (COO, CSR, ...) is made dense (within
    ``DENSE_BUDGET_BYTES``) and checked as the dense table; a bfloat16 or float16 table is
    widened to float32, which holds each of its values exactly. Such a table's counts were
    already rounded when it was made (bfloat16 holds the integers up to 256 exactly, float16
    those up to 2048): keep count tables in an integer or float32 dtype.

    :param target: ``(N, F)`` numbers: numpy array, torch tensor (dense or sparse), scipy
        sparse matrix or AnnData (its ``.X``, or ``.layers[layer]``; AnnData is read by duck
        typing, never imported). Sparse tables are checked while sparse and made dense only
        when they fit ``DENSE_BUDGET_BYTES`` as float32.
    :param background: ``(M, F)`` in the same form, with the same features (same ``var_names``
        when both are AnnData).
    :param counts: also require non-negative integer values (for the count likelihoods).
    :param layer: AnnData layer to read instead of ``.X`` (raw counts are often in ``"counts"``).
    :returns: ``{"target": (N, F) float32, "background": (M, F) float32}``, ready for
        :func:`ppl_vae.fit`.
    :raises ValueError: naming the argument, for empty or ragged tables, non-numeric, complex
        or boolean dtypes, values that are not finite in float32, different numbers or names
        of features, non-count values when ``counts`` is set, a missing layer, or a sparse
        table beyond the dense budget.
    """
    arrays = {}
    names = {}
    for name, table in (("target", target), ("background", background)):
        array, names[name] = _to_array(table, name, layer, counts)
        if array.ndim != 2 or array.shape[0] == 0 or array.shape[1] == 0:
            raise ValueError(f"{name} must be a non-empty (cells, features) table, got shape {array.shape}")
        _check_values(array, name, counts)
        arrays[name] = array
    if arrays["target"].shape[1] != arrays["background"].shape[1]:
        raise ValueError(
            f"background must have the target's {arrays['target'].shape[1]} features, got {arrays['background'].shape[1]}"
        )
    if names["target"] is not None and names["background"] is not None and names["target"] != names["background"]:
        raise ValueError("background's var_names differ from the target's: align the genes first")
    return {name: torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32)) for name, array in arrays.items()}


MAX_LOG_CHANGE = 20.0
"""Bound on ``fold_change`` and ``shared_strength`` (log-scale: e^20 is 5e8 times the mean)."""
MAX_BASE_MEAN = 1e6
"""Bound on ``base_mean``, so that means and counts stay finite."""


class SyntheticCounts:
    """Target and background count matrices with a known salient subgroup structure.

    See :mod:`ppl_vae.data.counts` for the generative process.

    :param num_target: N target cells.
    :param num_background: M background cells.
    :param num_genes: F genes.
    :param num_subgroups: K salient subgroups of the target (its labels).
    :param salient_genes: genes switched on per subgroup (disjoint blocks; K * this <= F).
    :param fold_change: the subgroup genes' log-mean increase (``log(3)`` triples them).
    :param shared_factors: number of continuous shared factors u.
    :param shared_strength: std of their loadings W (larger hides the subgroups from PCA).
    :param cell_types: number of shared cell types t (0 for none).
    :param base_mean: typical mean count of a gene.
    :param inverse_dispersion: NB theta (variance ``mu + mu^2 / theta``).
    :param seed: seed of every draw.
    :raises ValueError: naming the argument: counts that are not positive integers, a
        ``fold_change`` or ``shared_strength`` not finite in (0, 20), a ``base_mean`` not in
        (0, 1e6), a non-positive or infinite ``inverse_dispersion``, negative ``cell_types``,
        ``shared_factors`` or ``seed``.

    Attributes: ``target`` (data set of ``(x (F,), y ())``), ``background`` (of ``(x (F,),)``),
    ``salient_gene_blocks (K, salient_genes)`` int64.
    """

    def __init__(
        self,
        num_target: int = 2000,
        num_background: int = 2000,
        num_genes: int = 200,
        num_subgroups: int = 3,
        salient_genes: int = 15,
        fold_change: float = float(np.log(3.0)),
        shared_factors: int = 3,
        shared_strength: float = 0.6,
        cell_types: int = 4,
        base_mean: float = 5.0,
        inverse_dispersion: float = 5.0,
        seed: int = 0,
    ) -> None:
        positive = {"num_target": num_target, "num_background": num_background, "num_genes": num_genes,
                    "num_subgroups": num_subgroups, "salient_genes": salient_genes}
        for name, value in positive.items():
            positive_integer(name, value)
        if num_subgroups < 2 or num_subgroups * salient_genes > num_genes:
            raise ValueError(
                f"num_subgroups must be >= 2 with num_subgroups * salient_genes <= num_genes; got "
                f"{num_subgroups} * {salient_genes} and {num_genes} genes"
            )
        finite("fold_change", fold_change, high=MAX_LOG_CHANGE, positive=True)
        finite("shared_strength", shared_strength, high=MAX_LOG_CHANGE, positive=True)
        finite("base_mean", base_mean, high=MAX_BASE_MEAN, positive=True)
        finite("inverse_dispersion", inverse_dispersion, positive=True)
        integer("cell_types", cell_types, minimum=0)
        integer("shared_factors", shared_factors, minimum=0)
        integer("seed", seed, minimum=0)
        rng = np.random.default_rng(seed)
        base = np.log(base_mean) + 0.5 * rng.standard_normal(num_genes)
        loadings = shared_strength * rng.standard_normal((shared_factors, num_genes))
        type_offsets = rng.standard_normal((max(cell_types, 1), num_genes)) if cell_types else np.zeros((1, num_genes))
        blocks = rng.permutation(num_genes)[: num_subgroups * salient_genes].reshape(num_subgroups, salient_genes)

        def shared_log_mean(n: int) -> np.ndarray:
            u = rng.standard_normal((n, shared_factors))
            types = rng.integers(0, type_offsets.shape[0], n)
            return base + u @ loadings + type_offsets[types]

        def counts(log_mean: np.ndarray) -> np.ndarray:
            mean = np.exp(log_mean)
            return rng.negative_binomial(inverse_dispersion, inverse_dispersion / (inverse_dispersion + mean))

        labels = rng.integers(0, num_subgroups, num_target)
        target_log_mean = shared_log_mean(num_target)
        for k in range(num_subgroups):
            target_log_mean[np.ix_(labels == k, blocks[k])] += fold_change
        target = counts(target_log_mean)
        background = counts(shared_log_mean(num_background))
        self.target = TensorDictDataset(
            {"x": torch.as_tensor(target, dtype=torch.float32), "y": torch.as_tensor(labels, dtype=torch.int64)}
        )
        self.background = TensorDictDataset({"x": torch.as_tensor(background, dtype=torch.float32)})
        self.salient_gene_blocks = torch.as_tensor(blocks, dtype=torch.int64)

    def tensors(self) -> dict[str, torch.Tensor]:
        """``{"target": (N, F) float32 counts, "target_labels": (N,) int64, "background": (M, F) float32}``
        (the keys of :meth:`ppl_vae.data.GrassyMNIST.tensors`)."""
        target = self.target.tensors()
        return {"target": target["x"], "target_labels": target["y"], "background": self.background.tensors()["x"]}
