"""Priors p(z) for the VAEs in ppl_vae, as small modules that return Pyro distributions.

Every prior here follows one pattern. A *prior module* is a :class:`torch.nn.Module`
that holds the prior's parameters (as ``nn.Parameter`` when learned, as buffers when
fixed, so ``.to(device)`` moves them) and has

- ``.dim``: the latent dimension D;
- ``forward()`` returning a Pyro distribution with ``batch_shape == ()`` and
  ``event_shape == (D,)``.

A model draws ``z`` with its own batch shape by expanding the distribution::

    prior = StudentTPrior(dim=10, df=5.0)
    with pyro.plate("data", x.shape[0]):
        z = pyro.sample("z", prior().expand((x.shape[0],)))  # z: (batch, D)

The only exception is :class:`ClassConditionalGaussianPrior`, whose ``forward`` takes an
optional class argument and returns one Gaussian per class.

The priors of the Decomposition paper (Mathieu et al., 2019, Sec. 6 and App. B) all have
zero mean and a *trace-normalised* scale (see :func:`trace_normalised_variances`), so
that changing the prior's shape does not implicitly rescale beta.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pyro.distributions as dist
import torch
from pyro.distributions.torch_distribution import TorchDistributionMixin
from torch import Tensor, nn

from ppl_vae._constants import LOG_VARIANCE_INITS
from ppl_vae._validation import choice

__all__ = [
    "SPARSE_SIGMA0_AUTHORS_CODE",
    "SPARSE_SIGMA0_PAPER_TEXT",
    "AnisotropicGaussianPrior",
    "ClassConditionalGaussianPrior",
    "IsotropicGaussianPrior",
    "MixtureOfGaussiansPrior",
    "PriorModule",
    "SparsePrior",
    "StudentTPrior",
    "trace_normalised_variances",
]

#: Spike standard deviation of the sparse prior as the authors' code uses it (0.05 is a std).
SPARSE_SIGMA0_AUTHORS_CODE = 0.05
#: Spike standard deviation implied by the paper's text, which writes sigma_0^2 = 0.05.
SPARSE_SIGMA0_PAPER_TEXT = math.sqrt(0.05)


def _check_dim(dim: int, name: str = "dim") -> int:
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        raise ValueError(f"{name} must be a positive integer, got {dim!r}")
    return dim


def _as_number(value: float, name: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None


def _check_positive(value: float, name: str) -> float:
    number = _as_number(value, name)
    if not (math.isfinite(number) and number > 0):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return number


def _as_float_tensor(value: Tensor | Sequence | float, name: str) -> Tensor:
    tensor = torch.as_tensor(value, dtype=torch.get_default_dtype()).detach().clone()
    if not torch.isfinite(tensor).all():
        raise ValueError(f"{name} must be finite, got {value!r}")
    return tensor


def _register(module: nn.Module, name: str, tensor: Tensor, learn: bool) -> None:
    """Store ``tensor`` on ``module`` as a trainable parameter or as a fixed buffer."""
    if learn:
        module.register_parameter(name, nn.Parameter(tensor))
    else:
        module.register_buffer(name, tensor)


def _register_log_variances(
    module: PriorModule, log_variances: Tensor | Sequence[float] | None, learn: bool
) -> None:
    """Store ``(D,)`` log-variances (default zeros) on a trace-normalised prior."""
    if log_variances is None:
        log_variances = torch.zeros(module.dim)
    log_variances = _as_float_tensor(log_variances, "log_variances")
    if log_variances.shape != (module.dim,):
        raise ValueError(
            f"log_variances must have shape ({module.dim},), got {tuple(log_variances.shape)}"
        )
    _register(module, "log_variances", log_variances, learn)


def trace_normalised_variances(log_variances: Tensor, total_variance: float = 1.0) -> Tensor:
    r"""Variances ``pvs * D * softmax(logvar)``, which sum to ``D * pvs``.

    This is the prior scale of the Decomposition paper's code: only the
    *relative* sizes of ``log_variances`` matter, and the trace of the covariance is
    fixed to ``D * total_variance``, as for the isotropic N(0, pvs I). Keeping the trace
    fixed stops an anisotropic prior from rescaling the KL weight beta implicitly.

    :param log_variances: ``(..., D)`` unnormalised log-variances.
    :param total_variance: ``pvs``, the average variance per dimension.
    :returns: ``(..., D)`` positive variances with ``sum(-1) == D * total_variance``.
    """
    dim = log_variances.shape[-1]
    return total_variance * dim * torch.softmax(log_variances, dim=-1)


class PriorModule(nn.Module):
    """Base class: holds the parameters of a prior p(z) and returns it on call.

    Subclasses implement ``forward()`` returning a Pyro distribution with batch shape ``()`` and
    event shape ``(dim,)``.

    :param dim: latent dimension D, the event size of the prior.
    """

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = _check_dim(dim)

    def forward(self) -> TorchDistributionMixin:
        """The prior p(z): batch shape ``()``, event shape ``(dim,)``."""
        raise NotImplementedError

    def extra_repr(self) -> str:
        """The settings ``repr(prior)`` shows."""
        return f"dim={self.dim}"


class IsotropicGaussianPrior(PriorModule):
    """The standard normal prior p(z) = N(z; 0, I) on ``(dim,)``.

    :param dim: latent dimension D.
    """

    def __init__(self, dim: int) -> None:
        super().__init__(dim)
        self.register_buffer("loc", torch.zeros(self.dim))

    def forward(self) -> TorchDistributionMixin:
        """N(0, I): batch shape ``()``, event shape ``(dim,)``."""
        return dist.Normal(self.loc, torch.ones_like(self.loc)).to_event(1)


class AnisotropicGaussianPrior(PriorModule):
    r"""Zero-mean diagonal Gaussian p(z) = N(0, diag(v)) with a trace-normalised variance.

    ``v = pvs * D * softmax(logvar)`` (:func:`trace_normalised_variances`), so that
    ``sum(v) == D * pvs`` whatever ``logvar`` is. This is the anisotropic prior of the
    Decomposition paper (Sec. 6, Fig. 2 left; App. B), with three uses:

    - fixed variances: pass ``log_variances``;
    - PCA variances: :meth:`from_principal_components`;
    - learned variances: ``learn=True`` makes ``log_variances`` an ``nn.Parameter``.

    ``log_variances=None`` gives the isotropic N(0, pvs I).

    :param dim: latent dimension D.
    :param log_variances: ``(D,)`` unnormalised log-variances, default zeros.
    :param learn: train ``log_variances`` with the model.
    :param total_variance: ``pvs``, the average variance per dimension (> 0).
    """

    def __init__(
        self,
        dim: int,
        log_variances: Tensor | Sequence[float] | None = None,
        learn: bool = False,
        total_variance: float = 1.0,
    ) -> None:
        super().__init__(dim)
        self.total_variance = _check_positive(total_variance, "total_variance")
        _register_log_variances(self, log_variances, learn)

    @classmethod
    def from_principal_components(
        cls,
        data: Tensor,
        dim: int,
        learn: bool = False,
        total_variance: float = 1.0,
        center: bool = True,
    ) -> AnisotropicGaussianPrior:
        r"""Prior whose variances are proportional to the data's leading principal variances.

        ``logvar_d = log s_d^2`` for the ``dim`` *largest* singular values ``s_1 >= s_2 >= ...``
        of the (centred) data matrix; after trace normalisation the prior variances are
        ``v_d = D * pvs * s_d^2 / sum_{k<=D} s_k^2``, largest first (Decomposition paper,
        App. B: "standard deviations are set to be the first D singular values").

        Differences from the authors' code: their ``scipy.sparse.linalg.svds`` returns
        singular values in *ascending* order and they keep the first ``D`` of the top 20,
        i.e. the smallest ones; we take the largest, as the paper describes. They also do
        not centre the data, so their first component is mostly the data mean; we centre
        by default (``center=False`` reproduces their uncentred choice).

        :param data: ``(n, F)`` data matrix (or ``(n, ...)``, flattened to ``(n, F)``).
            For very large data sets pass a random subset.
        :param dim: latent dimension D, at most the rank of the data.
        :param learn: train ``log_variances`` with the model, starting from the principal ones.
        :param total_variance: ``pvs``, the average prior variance per dimension (> 0).
        :param center: subtract the data's mean before the decomposition (``False``: the
            authors' uncentred choice).
        """
        dim = _check_dim(dim)
        x = torch.as_tensor(data).detach().to(torch.float64)
        if x.dim() < 2:
            raise ValueError(f"data must have shape (n, F), got {tuple(x.shape)}")
        x = x.reshape(x.shape[0], -1)
        if center:
            x = x - x.mean(0)
        n, features = x.shape
        if n > features:
            squared = torch.linalg.eigvalsh(x.T @ x).flip(0).clamp_min(0.0)
        else:
            squared = torch.linalg.svdvals(x).pow(2)
        leading = squared[:dim]
        tolerance = squared[0] * max(n, features) * torch.finfo(torch.float64).eps
        if leading.numel() < dim or not (leading > tolerance).all():
            rank = int((squared > tolerance).sum())
            raise ValueError(
                f"dim={dim} exceeds the number of principal components of data ({rank})"
            )
        log_variances = leading.log().to(torch.get_default_dtype())
        return cls(dim, log_variances, learn=learn, total_variance=total_variance)

    @property
    def variances(self) -> Tensor:
        """``(D,)`` prior variances; they sum to ``D * total_variance``."""
        return trace_normalised_variances(self.log_variances, self.total_variance)

    def forward(self) -> TorchDistributionMixin:
        """N(0, diag(v)): batch shape ``()``, event shape ``(dim,)``."""
        scale = self.variances.sqrt()
        return dist.Normal(torch.zeros_like(scale), scale).to_event(1)

    def extra_repr(self) -> str:
        """The settings ``repr(prior)`` shows."""
        return f"dim={self.dim}, total_variance={self.total_variance}"


class StudentTPrior(PriorModule):
    r"""Factored Student-t prior p(z) = prod_d StudentT(z_d; nu, 0, sigma_d).

    The Decomposition paper's heavy-tailed prior (Sec. 6, Fig. 2 right); it tends to
    N(0, I) as nu -> infinity. With the default ``log_variances=None`` the scale is
    ``sigma_d = 1``. Otherwise the *squared scales* are trace-normalised like
    :class:`AnisotropicGaussianPrior`'s variances, ``sigma^2 = pvs * D * softmax(logvar)``,
    as in the authors' code (the variance of each coordinate is then
    ``sigma_d^2 nu / (nu - 2)`` for nu > 2). The log-density is the closed form of
    :class:`pyro.distributions.StudentT`, computed in log space (``log1p``), and
    ``rsample`` is available.

    :param dim: latent dimension D.
    :param df: degrees of freedom nu > 0 (the authors used 2 and 9).
    :param log_variances: ``(D,)`` unnormalised log squared scales, default zeros.
    :param learn: train ``log_variances`` with the model.
    :param total_variance: ``pvs``, the average squared scale (> 0).
    """

    def __init__(
        self,
        dim: int,
        df: float,
        log_variances: Tensor | Sequence[float] | None = None,
        learn: bool = False,
        total_variance: float = 1.0,
    ) -> None:
        super().__init__(dim)
        self.register_buffer("df", torch.tensor(_check_positive(df, "df")))
        self.total_variance = _check_positive(total_variance, "total_variance")
        _register_log_variances(self, log_variances, learn)

    @property
    def scale(self) -> Tensor:
        """``(D,)`` scales sigma_d; their squares sum to ``D * total_variance``."""
        return trace_normalised_variances(self.log_variances, self.total_variance).sqrt()

    def forward(self) -> TorchDistributionMixin:
        """Independent Student-t factors: batch shape ``()``, event shape ``(dim,)``."""
        scale = self.scale
        return dist.StudentT(self.df, torch.zeros_like(scale), scale).to_event(1)

    def extra_repr(self) -> str:
        """The settings ``repr(prior)`` shows."""
        return f"dim={self.dim}, df={float(self.df)}"


class MixtureOfGaussiansPrior(PriorModule):
    r"""Mixture of diagonal Gaussians p(z) = sum_k pi_k N(z; mu_k, diag(v_k)) (Eq. 9).

    The clustering prior of the Decomposition paper (Sec. 6, App. B); see
    :meth:`pinwheel` for the paper's setting. The log-density is a logsumexp over the
    components (via :class:`pyro.distributions.MixtureSameFamily`), so it stays finite
    far from every component (e.g. z = 1e3 with variances 1e-8). Only ``sample`` is
    available (no ``rsample``).

    :param means: ``(K, D)`` component means.
    :param variances: positive variances broadcastable to ``(K, D)`` (a number, ``(D,)``,
        ``(K, 1)`` or ``(K, D)``).
    :param weights: ``(K,)`` non-negative weights summing to 1; default uniform. Fixed.
    :param learn: train the means and (log-)variances with the model; the weights stay
        fixed, as in the paper.
    """

    def __init__(
        self,
        means: Tensor | Sequence[Sequence[float]],
        variances: Tensor | Sequence | float,
        weights: Tensor | Sequence[float] | None = None,
        learn: bool = False,
    ) -> None:
        means = _as_float_tensor(means, "means")
        if means.dim() != 2 or means.shape[0] < 1 or means.shape[1] < 1:
            raise ValueError(
                f"means must have shape (K, D) with K, D >= 1, got {tuple(means.shape)}"
            )
        super().__init__(means.shape[1])
        self.num_components = means.shape[0]
        variances = _as_float_tensor(variances, "variances")
        try:
            variances = variances.expand(means.shape).clone()
        except RuntimeError:
            raise ValueError(
                f"variances must broadcast to {tuple(means.shape)}, got {tuple(variances.shape)}"
            ) from None
        if not (variances > 0).all():
            raise ValueError(f"variances must be positive, got {variances.tolist()}")
        if weights is None:
            weights = torch.full((self.num_components,), 1.0 / self.num_components)
        weights = _as_float_tensor(weights, "weights")
        if weights.shape != (self.num_components,):
            raise ValueError(
                f"weights must have shape ({self.num_components},), got {tuple(weights.shape)}"
            )
        if (weights < 0).any() or not torch.isclose(weights.sum(), torch.tensor(1.0), atol=1e-5):
            raise ValueError(f"weights must be non-negative and sum to 1, got {weights.tolist()}")
        _register(self, "means", means, learn)
        _register(self, "log_variances", variances.log(), learn)
        self.register_buffer("weights", weights)

    @classmethod
    def pinwheel(cls, learn: bool = False) -> MixtureOfGaussiansPrior:
        """The paper's pinwheel prior: 4 equal-weight components in D = 2.

        Means (0, -1), (0, 1), (1, 0), (-1, 0); variance 0.03 per dimension (App. B).

        :param learn: train the means and (log-)variances with the model.
        """
        means = torch.tensor([[0.0, -1.0], [0.0, 1.0], [1.0, 0.0], [-1.0, 0.0]])
        return cls(means, 0.03, learn=learn)

    @property
    def variances(self) -> Tensor:
        """``(K, D)`` component variances."""
        return self.log_variances.exp()

    def forward(self) -> TorchDistributionMixin:
        """The mixture (``MixtureSameFamily``): batch shape ``()``, event shape ``(dim,)``."""
        components = dist.Normal(self.means, (0.5 * self.log_variances).exp()).to_event(1)
        return dist.MixtureSameFamily(dist.Categorical(probs=self.weights), components)

    def extra_repr(self) -> str:
        """The settings ``repr(prior)`` shows."""
        return f"dim={self.dim}, num_components={self.num_components}"


class SparsePrior(PriorModule):
    r"""Factored spike-and-slab prior of the Decomposition paper (Sec. 6, App. B).

    .. math::

        p(z) = \prod_d (1 - \gamma) N(z_d; 0, 1) + \gamma N(z_d; 0, \sigma_0^2)

    A dimension is "off" (near 0) with probability gamma. Per coordinate the mean is 0
    and the variance ``(1 - gamma) + gamma sigma0^2``. The log-density is a logsumexp of
    the two components; only ``sample`` is available.

    **sigma0 is a standard deviation**, default 0.05. The paper's text writes
    ``sigma_0^2 = 0.05`` (a std of about 0.224), while the authors' code
    (``distributions/sparse.py``) passes 0.05 as the spike's *scale*. We follow the code
    because the paper's sparsity results (Figs. 4, 5) were produced with it; pass
    ``sigma0=SPARSE_SIGMA0_PAPER_TEXT`` (``sqrt(0.05)``) for the text's reading.

    :param dim: latent dimension D.
    :param gamma: weight of the spike, in [0, 1).
    :param sigma0: standard deviation of the spike (> 0).
    """

    def __init__(
        self, dim: int, gamma: float = 0.8, sigma0: float = SPARSE_SIGMA0_AUTHORS_CODE
    ) -> None:
        super().__init__(dim)
        self.gamma = _as_number(gamma, "gamma")
        if not 0.0 <= self.gamma < 1.0:
            raise ValueError(f"gamma must be in [0, 1), got {gamma!r}")
        self.sigma0 = _check_positive(sigma0, "sigma0")
        self.register_buffer("component_probs", torch.tensor([1.0 - self.gamma, self.gamma]))
        self.register_buffer("component_scales", torch.tensor([1.0, self.sigma0]))

    def forward(self) -> TorchDistributionMixin:
        """Independent spike-and-slab factors: batch shape ``()``, event shape ``(dim,)``."""
        shape = (self.dim, 2)
        scales = self.component_scales.expand(shape)
        components = dist.Normal(torch.zeros_like(scales), scales)
        mixing = dist.Categorical(probs=self.component_probs.expand(shape))
        return dist.MixtureSameFamily(mixing, components).to_event(1)

    def extra_repr(self) -> str:
        """The settings ``repr(prior)`` shows."""
        return f"dim={self.dim}, gamma={self.gamma}, sigma0={self.sigma0}"


class ClassConditionalGaussianPrior(nn.Module):
    r"""Learnable class-conditional priors p(u | c = k) = N(u; mu_k, diag(sigma_k^2)) of PartedVAE.

    Means start from N(0, 1); log-variances are bounded, ``logvar = 2 tanh(w) - 1``, so
    each std lies in ``(exp(-1.5), exp(0.5))`` = (0.22, 1.65), as in the PartedVAE authors' code. ``w`` starts
    at 0 by default, the middle of that range (logvar = -1), where tanh's gradient is largest;
    ``log_variance_init="randn"`` draws it from N(0, 1), as the authors do.

    Calling the module:

    - ``prior()``: one Gaussian per class, batch shape ``(num_classes,)``, event ``(dim,)``;
      use it for the Bhattacharyya penalty between classes or KLs to every class.
    - ``prior(c)`` with integer class indices ``c: (...)``: batch shape ``c.shape``.
    - ``prior(c)`` with one-hot or relaxed one-hot weights ``c: (..., num_classes)``
      (floating point): batch shape ``c.shape[:-1]``; mean and log-variance are the
      weighted averages ``c @ mu`` and ``c @ logvar``, exact for one-hot ``c`` and a
      smooth interpolation for Gumbel-softmax samples.

    :param num_classes: number of values K of the categorical variable.
    :param dim: dimension of u.
    :param log_variance_init: how ``w`` starts: ``"zeros"`` or ``"randn"`` (N(0, 1)).
    """

    LOG_VARIANCE_INITS = LOG_VARIANCE_INITS

    def __init__(self, num_classes: int, dim: int, log_variance_init: str = "zeros") -> None:
        super().__init__()
        self.num_classes = _check_dim(num_classes, "num_classes")
        self.dim = _check_dim(dim)
        choice("log_variance_init", log_variance_init, self.LOG_VARIANCE_INITS)
        self.loc = nn.Parameter(torch.randn(self.num_classes, self.dim))
        start = torch.randn if log_variance_init == "randn" else torch.zeros
        self.log_variance_logit = nn.Parameter(start(self.num_classes, self.dim))

    @property
    def log_variance(self) -> Tensor:
        """``(K, D)`` bounded log-variances ``2 tanh(w) - 1``."""
        return 2.0 * torch.tanh(self.log_variance_logit) - 1.0

    def forward(self, c: Tensor | None = None) -> TorchDistributionMixin:
        """The class priors, event shape ``(dim,)`` (the cases are in the class docstring).

        :param c: ``None`` (all K priors, batch shape ``(K,)``), class indices ``(...)`` or
            one-hot weights ``(..., K)``.
        :returns: A diagonal Gaussian of batch shape ``(K,)``, ``c.shape`` or ``c.shape[:-1]``.
        :raises ValueError: class indices outside ``[0, K)``.
        """
        loc, log_variance = self.loc, self.log_variance
        if c is None:
            pass
        elif not torch.is_floating_point(c):
            if c.numel() and (c.min() < 0 or c.max() >= self.num_classes):
                raise ValueError(
                    f"c must hold class indices in [0, {self.num_classes}), "
                    f"got values in [{int(c.min())}, {int(c.max())}]"
                )
            loc, log_variance = loc[c], log_variance[c]
        elif c.dim() >= 1 and c.shape[-1] == self.num_classes:
            loc, log_variance = c @ loc, c @ log_variance
        else:
            raise ValueError(
                f"c must be integer indices or weights of shape (..., {self.num_classes}), "
                f"got shape {tuple(c.shape)} and dtype {c.dtype}"
            )
        return dist.Normal(loc, (0.5 * log_variance).exp()).to_event(1)

    def extra_repr(self) -> str:
        """The settings ``repr(prior)`` shows."""
        return f"num_classes={self.num_classes}, dim={self.dim}"
