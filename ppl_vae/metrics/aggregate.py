r"""How far the aggregate encoding q(z) is from the prior p(z): the figure the
Decomposition paper's Fig. 3 shows as pictures and Fig. 4 (right) as a number.

``q(z) = (1/N) sum_j N(z; loc_j, diag(scale_j^2))`` is given by its N components (the
encodings of a data set), p(z) by a distribution; nothing here knows about models.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from torch.distributions import Distribution

from ppl_vae.infer.divergences import DEFAULT_MMD_LENGTH_SCALES, inclusive_kl, mmd_dimensionwise


@torch.no_grad()
def aggregate_posterior_mismatch(
    loc: Tensor,
    scale: Tensor,
    prior: Distribution,
    num_samples: int | None = 2000,
    seed: int = 0,
    length_scales: Sequence[float] = DEFAULT_MMD_LENGTH_SCALES,
    chunk_size: int = 4096,
) -> dict[str, float]:
    r"""MMD and inclusive KL between the aggregate encoding q(z) and the prior p(z).

    - ``mmd``: :func:`~ppl_vae.infer.mmd_dimensionwise` (Eq. 10, marginals only) between
      M draws of q(z) (a random component j, then ``z ~ q(z | x_j)``) and M draws of p(z).
    - ``mmd_prior_floor``: the same estimator between two independent sets of M prior
      draws: the value an exact match would show at this M (about 0, either sign). Read
      ``mmd`` against it.
    - ``inclusive_kl``: KL(p || q) by :func:`~ppl_vae.infer.inclusive_kl` with M prior
      draws and all N components (biased upward for finite N, see there).

    :param loc: ``(N, D)`` means of q(z | x_j).
    :param scale: ``(N, D)`` standard deviations of q(z | x_j).
    :param prior: p(z), ``batch_shape ()`` and ``event_shape (D,)`` (e.g. ``model.prior()``).
    :param num_samples: M, at least 2; ``None`` takes N.
    :param seed: seeds a forked RNG (the global RNG state is left untouched).
    :param length_scales: positive length scales of the MMD's kernels (as in
        :func:`~ppl_vae.infer.mmd_dimensionwise`).
    :param chunk_size: encodings of q(z) per block when the KL evaluates the density of q (bounds
        the memory, not the result).
    :returns: ``{"mmd", "mmd_prior_floor", "inclusive_kl"}`` as floats.
    :raises ValueError: on shapes that do not match, non-positive scales, or M < 2.
    """
    if loc.dim() != 2 or scale.shape != loc.shape:
        raise ValueError(
            f"loc and scale must have the same shape (N, D), got {tuple(loc.shape)} and {tuple(scale.shape)}"
        )
    if prior.batch_shape != () or tuple(prior.event_shape) != (loc.shape[1],):
        raise ValueError(
            f"prior must have batch_shape () and event_shape ({loc.shape[1]},), got "
            f"{tuple(prior.batch_shape)} and {tuple(prior.event_shape)}"
        )
    if not (scale > 0).all():
        raise ValueError("scale must be positive")
    num_samples = loc.shape[0] if num_samples is None else num_samples
    if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 2:
        raise ValueError(f"num_samples must be an integer >= 2 or None, got {num_samples!r}")
    devices = [loc.device] if loc.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        components = torch.randint(loc.shape[0], (num_samples,), device=loc.device)
        posterior_z = loc[components] + scale[components] * torch.randn_like(loc[components])
        prior_z, other_prior_z = prior.sample((2, num_samples))
        kl = inclusive_kl(prior, loc, scale, num_samples=num_samples, chunk_size=chunk_size)
    return {
        "mmd": float(mmd_dimensionwise(posterior_z, prior_z, length_scales)),
        "mmd_prior_floor": float(mmd_dimensionwise(other_prior_z, prior_z, length_scales)),
        "inclusive_kl": float(kl),
    }
