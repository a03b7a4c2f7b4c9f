r"""Divergences D(q(z), p(z)) between the aggregate posterior and the prior.

The Decomposition paper's objective (Mathieu et al., 2019, Eq. 7) adds
``- alpha D(q(z), p(z))`` to a beta-ELBO, with ``q(z) = (1/N) sum_j q(z | x_j)`` the
aggregate encoding. Two choices of D are used there:

- :func:`inclusive_kl`, KL(p(z) || q(z)), for the pinwheel clustering experiment;
- :func:`mmd_dimensionwise`, an MMD with a dimension-wise Cauchy kernel (Eq. 10), for
  the sparsity experiment, computed between samples of q(z) and of p(z).

Both are plain differentiable functions of tensors; an objective adds them to its loss.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor
from torch.distributions import Distribution
from torch.utils.checkpoint import checkpoint

from ppl_vae._validation import positive_integer

__all__ = [
    "DEFAULT_MMD_LENGTH_SCALES",
    "aggregate_log_density",
    "inclusive_kl",
    "mmd_dimensionwise",
]

#: Length scales l of the authors' code; the kernel uses C = 2 l, i.e. the paper's list
#: {0.2, 0.4, 1, 2, 4, 10} of Eq. 10. Both describe the same kernel.
DEFAULT_MMD_LENGTH_SCALES: tuple[float, ...] = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0)

# Largest number of (pair, dimension) kernel entries evaluated at once by mmd_dimensionwise.
_MMD_BLOCK_ELEMENTS = 2**22


def _check_samples(x: Tensor, name: str) -> None:
    if x.dim() != 2:
        raise ValueError(f"{name} must have shape (num_samples, D), got {tuple(x.shape)}")
    if x.shape[0] < 2:
        raise ValueError(f"{name} needs at least 2 samples for the unbiased MMD, got {x.shape[0]}")


def _cauchy_kernel_sum(squared_distances: Tensor, constants: Sequence[float]) -> Tensor:
    """Sum over all entries and length scales of C / (C + d^2)."""
    return sum((c / (c + squared_distances)).sum() for c in constants)


def mmd_dimensionwise(
    x: Tensor,
    y: Tensor,
    length_scales: Sequence[float] = DEFAULT_MMD_LENGTH_SCALES,
    dims_per_chunk: int | None = None,
) -> Tensor:
    r"""Squared MMD between samples with a dimension-wise Cauchy kernel (Eq. 10, App. B).

    The kernel sums one-dimensional inverse multiquadratic (Cauchy) kernels over
    dimensions d and length scales l:

    .. math::

        k(a, b) = \sum_d \sum_l \frac{C_l}{C_l + (a_d - b_d)^2}, \qquad C_l = 2 l,

    and the estimate is

    .. math::

        \frac{1}{n(n-1)} \sum_{i \ne j} k(x_i, x_j) + \frac{1}{m(m-1)} \sum_{i \ne j} k(y_i, y_j)
        - \frac{2}{nm} \sum_{i, j} k(x_i, y_j),

    unbiased within samples (U-statistics), so it can be slightly negative when the two
    distributions agree. Because the kernel is a sum over dimensions, the MMD only
    compares the *marginals* of x and y, on purpose (App. B).

    Default length scales: the authors' code's ``(0.1, 0.2, 0.5, 1, 2, 5)`` with
    ``C = 2 l``. The paper lists ``{0.2, 0.4, 1, 2, 4, 10}`` as the constants of Eq. 10,
    which are exactly these ``C = 2 l``: the two lists give the same kernel.

    :param x: ``(n, D)`` samples, e.g. from the aggregate posterior.
    :param y: ``(m, D)`` samples, e.g. from the prior.
    :param length_scales: positive length scales l.
    :param dims_per_chunk: dimensions evaluated together; default keeps each block of
        pairwise differences under about 4M entries. Without gradients, peak memory is
        ``O(max(n, m)^2 * dims_per_chunk)``; with gradients, autograd keeps
        ``O(L * max(n, m)^2 * D)`` for the backward pass (L length scales).
    :returns: scalar tensor, differentiable with respect to ``x`` and ``y``.
    :raises ValueError: if the shapes differ in D, a sample has fewer than 2 points, or a
        length scale is not positive.
    """
    _check_samples(x, "x")
    _check_samples(y, "y")
    if x.shape[1] != y.shape[1]:
        raise ValueError(
            f"x and y must have the same dimension D, got {x.shape[1]} and {y.shape[1]}"
        )
    scales = [float(s) for s in length_scales]
    if not scales or any(not (math.isfinite(s) and s > 0) for s in scales):
        raise ValueError(
            f"length_scales must be non-empty and positive, got {tuple(length_scales)}"
        )
    (n, dim), m = x.shape, y.shape[0]
    if dims_per_chunk is None:
        dims_per_chunk = max(1, _MMD_BLOCK_ELEMENTS // max(n, m) ** 2)
    else:
        positive_integer("dims_per_chunk", dims_per_chunk)
    constants = [2.0 * s for s in scales]
    # k(a, a) = len(scales) per dimension: the diagonal is removed analytically.
    diagonal = len(constants)
    total = x.new_zeros(())
    for start in range(0, dim, dims_per_chunk):
        xc, yc = x[:, start : start + dims_per_chunk], y[:, start : start + dims_per_chunk]
        width = xc.shape[1]
        within_x = _cauchy_kernel_sum((xc.unsqueeze(1) - xc.unsqueeze(0)).pow(2), constants)
        within_y = _cauchy_kernel_sum((yc.unsqueeze(1) - yc.unsqueeze(0)).pow(2), constants)
        cross = _cauchy_kernel_sum((xc.unsqueeze(1) - yc.unsqueeze(0)).pow(2), constants)
        total = total + (within_x - diagonal * width * n) / (n * (n - 1))
        total = total + (within_y - diagonal * width * m) / (m * (m - 1))
        total = total - 2.0 * cross / (n * m)
    return total


def _log_density_block(z: Tensor, loc: Tensor, scale: Tensor) -> Tensor:
    """``(B,)`` logsumexp_j log N(z_i; loc_j, diag(scale_j^2)) over one block of encodings."""
    standardised = (z.unsqueeze(1) - loc) / scale  # (B, c, D)
    log_probs = -0.5 * standardised.pow(2).sum(-1) - scale.log().sum(-1)  # (B, c)
    return torch.logsumexp(log_probs, dim=1) - 0.5 * z.shape[-1] * math.log(2.0 * math.pi)


def aggregate_log_density(z: Tensor, loc: Tensor, scale: Tensor, chunk_size: int = 4096) -> Tensor:
    r"""Log-density of the aggregate encoding ``q(z) = (1/N) sum_j N(z; loc_j, diag(scale_j^2))``.

    .. math::

        \log q(z_i) = \operatorname{logsumexp}_j \log q(z_i \mid x_j) - \log N.

    The N encodings are processed in blocks of ``chunk_size``; each block materialises a
    ``(B, chunk_size, D)`` tensor and, when gradients are needed and there is more than
    one block, is recomputed in the backward pass (activation checkpointing), so peak
    memory stays ``O(B * chunk_size * D)`` rather than ``O(B * N * D)``.

    :param z: ``(B, D)`` points.
    :param loc: ``(N, D)`` encoding means.
    :param scale: ``(N, D)`` encoding standard deviations (> 0).
    :param chunk_size: encodings per block (>= 1).
    :returns: ``(B,)`` log q(z_i), differentiable with respect to ``z``, ``loc`` and ``scale``.
    :raises ValueError: on mismatched shapes or a non-positive ``chunk_size``.
    """
    if loc.dim() != 2 or loc.shape != scale.shape or loc.shape[0] < 1:
        raise ValueError(
            f"loc and scale must have the same shape (N, D) with N >= 1, got {tuple(loc.shape)} "
            f"and {tuple(scale.shape)}"
        )
    if z.dim() != 2 or z.shape[1] != loc.shape[1]:
        raise ValueError(f"z must have shape (B, {loc.shape[1]}), got {tuple(z.shape)}")
    positive_integer("chunk_size", chunk_size)
    num_encodings = loc.shape[0]
    if num_encodings <= chunk_size:
        blocks = [_log_density_block(z, loc, scale)]
    else:
        recompute = torch.is_grad_enabled() and (
            z.requires_grad or loc.requires_grad or scale.requires_grad
        )
        blocks = []
        for start in range(0, num_encodings, chunk_size):
            block = (z, loc[start : start + chunk_size], scale[start : start + chunk_size])
            if recompute:
                blocks.append(checkpoint(_log_density_block, *block, use_reentrant=False))
            else:
                blocks.append(_log_density_block(*block))
    return torch.logsumexp(torch.stack(blocks, dim=-1), dim=-1) - math.log(num_encodings)


def inclusive_kl(
    prior: Distribution,
    posterior_loc: Tensor,
    posterior_scale: Tensor,
    num_samples: int | None = None,
    chunk_size: int = 4096,
    seed: int | None = None,
) -> Tensor:
    r"""Monte Carlo estimate of the inclusive KL(p(z) || q(z)) to the aggregate encoding.

    .. math::

        \mathrm{KL}(p \,\|\, q) \approx
        \frac{1}{B} \sum_{i=1}^{B} \big[\log p(z_i) - \log q(z_i)\big], \qquad z_i \sim p(z),

    with ``log q`` from :func:`aggregate_log_density` over the N encodings given (the
    whole data set in the paper's pinwheel experiment, App. B, with B = N = 400). The
    paper's printed formula sums over i and takes the log of a *sum* over encodings;
    like the authors' code we average both, so the estimate is a KL (about 0 when
    q = p) rather than ``B * (KL - log N)``; the gradients differ only by the factor B.
    The estimate is consistent; for finite N it is biased upward, since ``log q`` is
    the log of an average.

    Gradients: with respect to ``posterior_loc``/``posterior_scale`` through ``log q``.
    With respect to learnable prior parameters, pathwise through ``rsample`` when the
    prior has it (Gaussian, Student-t priors); otherwise (mixtures) the samples are not
    reparameterised and a score-function term with a leave-one-out baseline is added,
    which leaves the value unchanged and makes the gradient unbiased.

    :param prior: p(z) with ``batch_shape == ()`` and ``event_shape == (D,)``.
    :param posterior_loc: ``(N, D)`` means of q(z | x_j).
    :param posterior_scale: ``(N, D)`` standard deviations of q(z | x_j).
    :param num_samples: B, the number of prior samples; default N.
    :param chunk_size: encodings per block in :func:`aggregate_log_density`.
    :param seed: if given, the prior samples are drawn from a forked RNG seeded with it
        (the global RNG state is left untouched).
    :returns: scalar tensor.
    :raises ValueError: on shapes that do not match the prior, a non-positive scale, or
        a non-positive ``num_samples``.
    """
    if prior.batch_shape != () or len(prior.event_shape) != 1:
        raise ValueError(
            "prior must have batch_shape () and event_shape (D,), got batch_shape "
            f"{tuple(prior.batch_shape)} and event_shape {tuple(prior.event_shape)}"
        )
    dim = prior.event_shape[0]
    if posterior_loc.dim() != 2 or posterior_loc.shape[1] != dim:
        raise ValueError(
            f"posterior_loc must have shape (N, {dim}), got {tuple(posterior_loc.shape)}"
        )
    if posterior_scale.shape != posterior_loc.shape:
        raise ValueError(
            f"posterior_scale must have shape {tuple(posterior_loc.shape)}, "
            f"got {tuple(posterior_scale.shape)}"
        )
    if not (posterior_scale > 0).all():
        raise ValueError("posterior_scale must be positive")
    if num_samples is None:
        num_samples = posterior_loc.shape[0]
    positive_integer("num_samples", num_samples)

    sample = prior.rsample if prior.has_rsample else prior.sample
    if seed is None:
        z = sample((num_samples,))
    else:
        devices = [posterior_loc.device] if posterior_loc.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            z = sample((num_samples,))

    log_p = prior.log_prob(z)
    log_q = aggregate_log_density(z, posterior_loc, posterior_scale, chunk_size)
    log_ratio = log_p - log_q
    estimate = log_ratio.mean()
    if not prior.has_rsample and log_p.requires_grad and num_samples > 1:
        detached = log_ratio.detach()
        baseline = (detached.sum() - detached) / (num_samples - 1)
        estimate = estimate + ((detached - baseline) * (log_p - log_p.detach())).mean()
    return estimate
