r"""Bhattacharyya distance and coefficient between diagonal Gaussians (PartedVAE, App. A.1).

For N(mu_1, diag(v_1)) and N(mu_2, diag(v_2)), with ``s = (v_1 + v_2) / 2``:

.. math::

    D_B = \frac{1}{8} \sum_d \frac{(\mu_{1d} - \mu_{2d})^2}{s_d}
        + \frac{1}{2} \Big[\sum_d \log s_d - \frac{1}{2}\Big(\sum_d \log v_{1d}
        + \sum_d \log v_{2d}\Big)\Big],
    \qquad BC = \exp(-D_B) \in [0, 1].

BC is symmetric and equals 1 only for identical distributions. Both functions take the
distributions like :func:`torch.distributions.kl_divergence` does and broadcast their
batch shapes; everything is computed in log space (``log v = 2 log sigma``,
``log s = logaddexp(log v_1, log v_2) - log 2``), so very distant or very narrow Gaussians
give BC = 0 rather than NaN.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.distributions import Distribution, Independent, Normal

__all__ = ["bhattacharyya_coefficient", "bhattacharyya_distance"]


def _normal_and_event_dims(d: object) -> tuple[Normal, int] | None:
    if isinstance(d, Normal):
        return d, 0
    if isinstance(d, Independent) and isinstance(d.base_dist, Normal):
        return d.base_dist, d.reinterpreted_batch_ndims
    return None


def _describe(d: object) -> str:
    if isinstance(d, Independent):
        return f"Independent({type(d.base_dist).__name__})"
    return type(d).__name__


def bhattacharyya_distance(p: Distribution, q: Distribution) -> Tensor:
    """Bhattacharyya distance D_B(p, q) >= 0 between two diagonal Gaussians.

    :param p: ``Normal`` or ``Independent(Normal, k)``.
    :param q: same kind as ``p`` (same number ``k`` of event dimensions); batch shapes
        must broadcast.
    :returns: for ``Normal``, the per-coordinate distance with the broadcast batch shape;
        for ``Independent(Normal, k)``, the sum over the ``k`` event dimensions, with the
        broadcast batch shape.
    :raises TypeError: if either argument is another kind of distribution.
    :raises ValueError: if ``p`` and ``q`` have different numbers of event dimensions.
    """
    p_parts, q_parts = _normal_and_event_dims(p), _normal_and_event_dims(q)
    if p_parts is None or q_parts is None:
        raise TypeError(
            "Bhattacharyya distance is implemented for Normal and Independent(Normal) "
            f"distributions, got p: {_describe(p)} and q: {_describe(q)}"
        )
    (p_normal, p_event_dims), (q_normal, q_event_dims) = p_parts, q_parts
    if p_event_dims != q_event_dims:
        raise ValueError(
            "p and q must have the same number of event dimensions, "
            f"got {p_event_dims} and {q_event_dims}"
        )
    log_var_p = 2.0 * p_normal.scale.log()
    log_var_q = 2.0 * q_normal.scale.log()
    log_mean_var = torch.logaddexp(log_var_p, log_var_q) - math.log(2.0)
    mahalanobis = ((p_normal.loc - q_normal.loc) * torch.exp(-0.5 * log_mean_var)).pow(2) / 8.0
    log_det_term = 0.5 * (log_mean_var - 0.5 * (log_var_p + log_var_q))
    distance = mahalanobis + log_det_term
    if p_event_dims:
        distance = distance.sum(tuple(range(-p_event_dims, 0)))
    return distance.clamp_min(0.0)


def bhattacharyya_coefficient(p: Distribution, q: Distribution) -> Tensor:
    """Bhattacharyya coefficient BC(p, q) = exp(-D_B(p, q)) in [0, 1].

    Shapes and accepted types as :func:`bhattacharyya_distance`. Example, all pairs of
    the class priors of a :class:`~ppl_vae.distributions.ClassConditionalGaussianPrior`
    (``loc, scale: (K, D)``)::

        p = Normal(loc.unsqueeze(1), scale.unsqueeze(1)).to_event(1)  # batch (K, 1)
        q = Normal(loc.unsqueeze(0), scale.unsqueeze(0)).to_event(1)  # batch (1, K)
        bhattacharyya_coefficient(p, q)                               # (K, K)

    :param p: ``Normal`` or ``Independent(Normal, k)``.
    :param q: same kind as ``p`` (same number ``k`` of event dimensions), batch shape
        broadcastable with ``p``'s.
    """
    return torch.exp(-bhattacharyya_distance(p, q))
