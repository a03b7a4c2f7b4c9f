"""Statistics of a data site for posterior predictive checks, and the defaults for each kind of data.

A statistic T maps a site's values ``(N, ...)`` (the data or one replicate of it) to a tensor.
Two shapes matter:

- a **per-point** statistic gives one value per point, ``(N,)``: the check compares each point's
  value with the same point's replicates (a probability integral transform, see
  :mod:`ppl_vae.checks.pit`), so N points give N calibrated comparisons and the verdict can
  count them. The built-in ones carry ``per_point = True``; mark a function of your own with
  :func:`per_point`.
- a **data-set** statistic gives a scalar or a vector of a few elements (one per class, one per
  pixel): each element is compared with its replicates.

Each statistic may name what "higher" and "lower" mean for it (``higher``, ``lower``
attributes), which the findings use ("rougher", "smoother").
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import torch

Statistic = Callable[[torch.Tensor], torch.Tensor]
DataKind = Literal["binary", "counts", "continuous"]

#: Vectors with at most this many features get one per-point statistic per feature by default.
FEATURES_ONE_BY_ONE = 10


def per_point(statistic: Statistic, higher: str = "higher", lower: str = "lower") -> Statistic:
    """Mark ``statistic`` (``(N, ...) -> (N,)``, one value per point) as per-point, so that the
    check's verdict compares each point with its own replicates.

    :param statistic: the function to mark (it is returned, with attributes set).
    :param higher: what a larger value means, in a finding ("higher", "brighter", "rougher").
    :param lower: what a smaller value means.
    """
    statistic.per_point = True  # type: ignore[attr-defined]
    statistic.higher, statistic.lower = higher, lower  # type: ignore[attr-defined]
    return statistic


def is_per_point(statistic: Statistic) -> bool:
    """Whether ``statistic`` gives one value per point (marked by :func:`per_point`)."""
    return bool(getattr(statistic, "per_point", False))


def _flat(x: torch.Tensor) -> torch.Tensor:
    return x.float().reshape(x.shape[0], -1)


def mean_intensity(x: torch.Tensor) -> torch.Tensor:
    """Mean value over every point and feature: ``(N, ...) -> ()``. One number over the whole
    data set has little spread across replicates, so any bias reads as p near 0 or 1; prefer
    :func:`point_means`.

    :param x: ``(N, ...)`` data or one replicate of it.
    """
    return x.float().mean()


def point_means(x: torch.Tensor) -> torch.Tensor:
    """Mean over the features of each point (an image's mean intensity): ``(N, ...) -> (N,)``.

    :param x: ``(N, ...)`` data or one replicate of it.
    """
    return _flat(x).mean(1)


def pixel_means(x: torch.Tensor) -> torch.Tensor:
    """Mean over points of each feature (pixel): ``(N, ...) -> (prod(...),)``, a data-set statistic.

    :param x: ``(N, ...)`` data or one replicate of it.
    """
    return _flat(x).mean(0)


def point_roughness(x: torch.Tensor) -> torch.Tensor:
    """Mean absolute difference between neighbouring features of each point: ``(N, ...) ->
    (N,)``. For images ``(N, [C,] H, W)`` the neighbours are the horizontally and vertically
    adjacent pixels; for vectors ``(N, F)``, features ``f`` and ``f + 1``. Independent draws
    from blurred means (a factorised likelihood) are rougher than strokes, which this shows.

    :param x: ``(N, ...)`` data or one replicate of it, at least two features along the last axis.
    :raises ValueError: a point with fewer than two features along its last axis.
    """
    if x.dim() < 2 or x.shape[-1] < 2:
        raise ValueError(f"point_roughness needs points with >= 2 features along the last axis, got shape {tuple(x.shape)}")
    x = x.float()
    horizontal = (x[..., 1:] - x[..., :-1]).abs().reshape(x.shape[0], -1)
    if x.dim() < 3:
        return horizontal.mean(1)
    vertical = (x[..., 1:, :] - x[..., :-1, :]).abs().reshape(x.shape[0], -1)
    return torch.cat([horizontal, vertical], dim=1).mean(1)


def zero_fraction(x: torch.Tensor) -> torch.Tensor:
    """Fraction of each point's features that are exactly 0: ``(N, ...) -> (N,)``. For counts,
    a model with too few zeros (a Poisson fit to zero-inflated or overdispersed counts) shows here.

    :param x: ``(N, ...)`` data or one replicate of it.
    """
    return (_flat(x) == 0).float().mean(1)


def point_dispersion(x: torch.Tensor) -> torch.Tensor:
    """Index of dispersion of each point's features, variance over mean: ``(N, ...) -> (N,)``
    (0 for a point whose features are all 0). Counts more variable than the likelihood allows
    (overdispersion: a Poisson fit to negative-binomial counts) have a larger index than the
    replicates.

    :param x: ``(N, F)`` or ``(N, ...)`` counts, at least two features per point.
    :raises ValueError: a point with fewer than two features.
    """
    flat = _flat(x)
    if flat.shape[1] < 2:
        raise ValueError(f"point_dispersion needs >= 2 features per point, got shape {tuple(x.shape)}")
    mean = flat.mean(1)
    return torch.where(mean > 0, flat.var(1) / mean.clamp_min(1e-12), torch.zeros_like(mean))


class feature:  # noqa: N801 (a statistic, called like the functions above)
    """The value of one feature of each point: ``(N, F) -> (N,)``.

    :param index: the feature (column) ``f``.
    """

    per_point = True
    higher, lower = "higher", "lower"

    def __init__(self, index: int) -> None:
        self.index = int(index)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """``x[:, index]`` of the flattened points, as float."""
        return _flat(x)[:, self.index]

    def __repr__(self) -> str:
        return f"feature({self.index})"


class per_class_mass:  # noqa: N801 (a statistic, called like the functions above)
    """A statistic giving, for each class k, the mean total mass (sum over features) of the
    points labelled k: ``(N, ...) -> (K,)``.

    :param labels: ``(N,)`` int class of each point; the classes in increasing order name the
        statistic's elements (its ``element_labels``).
    """

    def __init__(self, labels: torch.Tensor | Sequence[int]) -> None:
        self.labels = torch.as_tensor(labels).long()
        if self.labels.dim() != 1:
            raise ValueError(f"labels must have shape (N,), got {tuple(self.labels.shape)}")
        self.classes = torch.unique(self.labels)
        self.element_labels = tuple(f"class {int(k)}" for k in self.classes)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """``(N, ...) -> (K,)``: the mean of ``x_n.sum()`` over the points n of each class."""
        if x.shape[0] != self.labels.shape[0]:
            raise ValueError(f"labels has {self.labels.shape[0]} entries but the data has {x.shape[0]} points")
        mass = _flat(x).sum(1)
        labels = self.labels.to(x.device)
        return torch.stack([mass[labels == k].mean() for k in self.classes])


per_point(point_means)
per_point(point_roughness, "rougher", "smoother")
per_point(zero_fraction, "more often zero", "less often zero")
per_point(point_dispersion, "more dispersed", "less dispersed")


def data_kind(observed: torch.Tensor) -> DataKind:
    """``"binary"`` (every value 0 or 1), ``"counts"`` (non-negative integers, not all 0/1) or
    ``"continuous"``.

    :param observed: a site's data ``(N, ...)``.
    """
    values = observed.float()
    if bool(((values == 0) | (values == 1)).all()):
        return "binary"
    if bool((values >= 0).all() and (values == values.round()).all()):
        return "counts"
    return "continuous"


def is_image(observed: torch.Tensor) -> bool:
    """Whether points are images, ``(N, [C,] H, W)``: two or more event dimensions."""
    return observed.dim() >= 3


def default_statistics(observed: torch.Tensor) -> dict[str, Statistic]:
    """The statistics a site gets when none are named for it, by the kind of its data:

    - images ``(N, [C,] H, W)``: :func:`point_means`, :func:`point_roughness` (per point) and
      :func:`pixel_means` (per pixel);
    - vectors ``(N, F)``: one :class:`feature` each when ``F <= 10``, else :func:`point_means`;
    - counts (either): also :func:`zero_fraction` and, with ``F >= 2``, :func:`point_dispersion`.

    :param observed: the site's data ``(N, ...)``.
    """
    features = observed[0].numel() if observed.shape[0] else 0
    statistics: dict[str, Statistic] = {}
    if is_image(observed):
        statistics.update(point_means=point_means, pixel_means=pixel_means)
        if observed.shape[-1] >= 2:
            statistics["point_roughness"] = point_roughness
    elif features <= FEATURES_ONE_BY_ONE:
        statistics.update({f"feature_{f}": feature(f) for f in range(features)})
    else:
        statistics["point_means"] = point_means
    if data_kind(observed) == "counts":
        statistics["zero_fraction"] = zero_fraction
        if features >= 2:
            statistics["point_dispersion"] = point_dispersion
    return statistics
