r"""The disentangling objectives the PartedVAE paper compares against, as terms and presets.

Each objective is a :class:`~ppl_vae.infer.MeanFieldELBO` with a weight beta on its KLs and
terms (:mod:`ppl_vae.infer.terms`), on any model whose latent site is a diagonal Gaussian
``(B, D)`` vector in the data plate (the guide's ``Normal(loc, scale).to_event(1)``), a model of
the library or the user's own:

- :class:`KLDecomposition`: beta-TCVAE's split of the KL into index-code mutual information,
  total correlation and dimension-wise KL, each weighted (Chen et al. 2018);
- :class:`DIPCovariance`: DIP-VAE-I and -II's penalty pushing the aggregate posterior's
  covariance to the identity (Kumar et al. 2018);
- :class:`FactorTotalCorrelation`: FactorVAE's total correlation by a density-ratio
  discriminator on dimension-permuted samples (Kim & Mnih 2018), the dimension-wise case of
  the contrastive VAE's :class:`~ppl_vae.infer.TotalCorrelation`.

The presets :func:`beta_vae`, :func:`annealed_beta_vae`, :func:`factor_vae`,
:func:`beta_tcvae`, :func:`dip_vae` and :func:`info_vae` return the objectives. The batch-level
quantities (the aggregate posterior's density and covariance, the permutations) are taken over
the global batch under data parallelism (the ``global_batch`` of
:class:`~ppl_vae.infer.TermSites`), and within each particle's batch under Pyro's
``vectorize_particles`` (the value the mean over particles, as sequential particles give it).
"""
from __future__ import annotations

import inspect
import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.distributions import Normal

from ppl_vae._validation import choice, finite, positive_integer, site_name
from ppl_vae.infer.decomposition import AggregateDivergence
from ppl_vae.infer.distributed import GlobalBatch
from ppl_vae.infer.mean_field import MeanFieldELBO
from ppl_vae.infer.terms import Capacity, Term, TermSites, diagonal_normal_parameters, per_particle
from ppl_vae.infer.total_correlation import DensityRatioTotalCorrelation
from ppl_vae.schedules import LinearCapacity

__all__ = [
    "DIPCovariance",
    "FactorTotalCorrelation",
    "KLDecomposition",
    "annealed_beta_vae",
    "beta_tcvae",
    "beta_vae",
    "dip_vae",
    "factor_vae",
    "info_vae",
    "log_importance_weights",
]

#: The estimators of log q(z) of :class:`KLDecomposition`: minibatch weighted and stratified sampling.
ESTIMATORS = ("mws", "mss")


def _particle_gaussian(sites: TermSites, site: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(z, loc, scale)``, each ``(P, B, D)`` (:func:`~ppl_vae.infer.terms.per_particle`): the
    guide's sample of a diagonal Gaussian site and its parameters, one batch per particle."""
    guide_site = sites.guide_site(site)
    loc, scale = diagonal_normal_parameters(guide_site["fn"], site)
    z = guide_site["value"]
    return per_particle(z), per_particle(loc.expand_as(z)), per_particle(scale.expand_as(z))


def _gather_batches(global_batch: GlobalBatch, tensor: torch.Tensor) -> torch.Tensor:
    """Each particle's rows of the global batch: ``(P, B, ...)`` -> ``(P, M, ...)``."""
    return global_batch.all_gather(tensor.transpose(0, 1)).transpose(0, 1)


def log_importance_weights(
    batch_size: int, data_size: int, estimator: str, global_batch: GlobalBatch, local_rows: int
) -> torch.Tensor:
    r"""``log w_ij (B_local, M)``, the weights of :math:`q(z_i) \approx \sum_j w_{ij}\, q(z_i \mid x_j)`
    over a global batch of M points from a data set of N (Chen et al. 2018, Appendix C), for
    this process's rows i:

    - ``"mws"`` (minibatch weighted sampling): :math:`w_{ij} = 1 / (N M)`;
    - ``"mss"`` (minibatch stratified sampling): :math:`w_{ii} = 1/N`,
      :math:`w_{i, i+1 \bmod M} = (N - M + 1) / (N (M - 1))` and :math:`1 / (M - 1)` for the
      others (each row sums to 1).

    :param batch_size: M, the global batch size.
    :param data_size: N.
    :param estimator: ``"mws"`` or ``"mss"``.
    :param global_batch: the global batch (its rows of this process are taken).
    :param local_rows: B_local, this process's rows."""
    if estimator == "mws":
        return torch.full((local_rows, batch_size), -math.log(data_size * batch_size))
    if batch_size < 2:
        raise ValueError(f"minibatch stratified sampling needs a global batch of at least 2 points, got {batch_size}")
    others = batch_size - 1
    weights = torch.full((batch_size, batch_size), 1.0 / others, dtype=torch.float64)
    rows = torch.arange(batch_size)
    weights[rows, (rows + 1) % batch_size] = (data_size - others) / (data_size * others)
    weights[rows, rows] = 1.0 / data_size
    return global_batch.local_rows(weights.log(), local_rows)


class KLDecomposition(Term):
    r"""beta-TCVAE's KL of a latent site split into three weighted parts (Chen et al. 2018,
    Eqs. 2 and 4), replacing that site's KL in the ELBO:

    .. math::

        v = \alpha \underbrace{E[\log q(z \mid x) - \log q(z)]}_{\text{index-code MI}}
          + \beta \underbrace{E\big[\log q(z) - \textstyle\sum_d \log q(z_d)\big]}_{\text{total correlation}}
          + \gamma \underbrace{E\big[\textstyle\sum_d \log q(z_d) - \log p(z)\big]}_{\text{dimension-wise KL}}

    the expectations the mean over the (global) batch of ``z_i ~ q(z | x_i)``, and the aggregate
    posterior :math:`q(z) = \frac{1}{N}\sum_n q(z \mid x_n)` and its marginals q(z_d) estimated
    from the M points of the global batch, out of a data set of N:

    .. math::

        \log q(z_i) \approx \operatorname{logsumexp}_j \big[\log w_{ij} + \log q(z_i \mid x_j)\big],
        \qquad \log q(z_{id}) \approx \operatorname{logsumexp}_j \big[\log w_{ij} + \log q(z_{id} \mid x_j)\big]

    with the weights of minibatch weighted sampling (``"mws"``, :math:`w_{ij} = 1/(NM)`) or
    minibatch stratified sampling (``"mss"``), :func:`log_importance_weights`. With
    alpha = beta = gamma = 1 the parts add up to the Monte Carlo KL
    :math:`E[\log q(z \mid x) - \log p(z)]`, whatever the estimator. The paper's beta-TCVAE is
    alpha = gamma = 1, beta > 1. The term's weight is 1 (alpha, beta and gamma weigh the parts);
    it logs ``<name>/mutual_information``, ``<name>/total_correlation`` and
    ``<name>/dimension_kl``, unweighted.

    Differences from the authors' code (rtqichen/beta-tcvae, ``vae_quant.py``): their
    stratified weight matrix fills the first two columns instead of the diagonal and the next
    point (its strides skip whole rows, their pull request #1); here the weights are the
    paper's. The minibatch weighted estimate's constant ``- log(N M)`` is theirs: it shifts the
    total correlation by (D - 1) log N from the full-data value and leaves gradients alone.

    :param site: the latent site (in model and guide), a diagonal Gaussian ``(B, D)`` in the
        guide; the prior ``p(z)`` the model's (factorised for the dimension-wise KL to mean
        what its name says).
    :param data_size: N, the number of points of the data set.
    :param alpha: weight of the index-code mutual information.
    :param beta: weight of the total correlation.
    :param gamma: weight of the dimension-wise KL.
    :param estimator: ``"mws"`` or ``"mss"``.
    :param name: the factor's name; default ``"kl_decomposition_<site>"``.
    """

    def __init__(
        self,
        site: str,
        data_size: int,
        alpha: float = 1.0,
        beta: float = 1.0,
        gamma: float = 1.0,
        estimator: str = "mws",
        name: str | None = None,
    ) -> None:
        super().__init__(name or f"kl_decomposition_{site}", 1.0)
        self.site = site_name("site", site)
        self.data_size = positive_integer("data_size", data_size)
        self.alpha = finite("alpha", alpha, low=0)
        self.beta = finite("beta", beta, low=0)
        self.gamma = finite("gamma", gamma, low=0)
        self.estimator = choice("estimator", estimator, ESTIMATORS)

    def evaluate(self, sites: TermSites) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``(alpha MI + beta TC + gamma dimension-wise KL, {"mutual_information": MI,
        "total_correlation": TC, "dimension_kl": KL})``.

        :param sites: what the term reads for one particle."""
        z, loc, scale = _particle_gaussian(sites, self.site)  # (P, B, D)
        particles, rows = z.shape[:2]
        every_loc, every_scale = (_gather_batches(sites.global_batch, t) for t in (loc, scale))  # (P, M, D)
        # log q(z_pid | x_pjd), (P, B, M, D)
        log_pairs = Normal(every_loc.unsqueeze(1), every_scale.unsqueeze(1)).log_prob(z.unsqueeze(2))
        log_weights = log_importance_weights(
            every_loc.shape[1], self.data_size, self.estimator, sites.global_batch, rows
        ).to(z)
        log_q = torch.logsumexp(log_weights + log_pairs.sum(-1), dim=-1)  # (P, B)
        log_q_marginals = torch.logsumexp(log_weights.unsqueeze(-1) + log_pairs, dim=-2).sum(-1)
        log_q_given_x = Normal(loc, scale).log_prob(z).sum(-1)
        prior = sites.model_site(self.site)["fn"]
        log_p = prior.log_prob(sites.guide_site(self.site)["value"]).reshape(particles, rows)

        def mean(per_point: torch.Tensor) -> torch.Tensor:  # over the global batch and the particles
            return _gather_batches(sites.global_batch, per_point).mean()

        mutual_information = mean(log_q_given_x - log_q)
        total_correlation = mean(log_q - log_q_marginals)
        dimension_kl = mean(log_q_marginals - log_p)
        value = self.alpha * mutual_information + self.beta * total_correlation + self.gamma * dimension_kl
        return value, {
            "mutual_information": mutual_information,
            "total_correlation": total_correlation,
            "dimension_kl": dimension_kl,
        }

    def num_points(self, sites: TermSites) -> torch.Tensor | float:
        """N of the latent site (the points the ELBO's sum stands for).

        :param sites: what the term reads for one particle."""
        return sites.num_points(self.site)

    def replaced_sites(self, module: nn.Module | None) -> tuple[str, ...]:
        """The latent site, whose KL this term replaces.

        :param module: the module whose ``model`` method is run (not read)."""
        return (self.site,)

    def __repr__(self) -> str:
        return (f"KLDecomposition(name={self.name!r}, alpha={self.alpha}, beta={self.beta}, gamma={self.gamma}, "
                f"estimator={self.estimator!r}, data_size={self.data_size})")


class DIPCovariance(Term):
    r"""DIP-VAE's penalty on the covariance of the aggregate posterior of a latent site (Kumar
    et al. 2018, Eqs. 6 and 7), added to the ELBO:

    .. math::

        v = \lambda_{od} \sum_{i \ne j} C_{ij}^2 + \lambda_d \sum_i (C_{ii} - 1)^2

    with, over the (global) batch of encoder means :math:`\mu(x_n)` and variances
    :math:`\sigma^2(x_n)`,

    - DIP-VAE-I (``kind="i"``): :math:`C = \mathrm{Cov}_n[\mu(x_n)]`;
    - DIP-VAE-II (``kind="ii"``): :math:`C = E_n[\mathrm{diag}\, \sigma^2(x_n)] + \mathrm{Cov}_n[\mu(x_n)]`,
      the covariance of the aggregate posterior :math:`\frac{1}{B}\sum_n q(z \mid x_n)`.

    The covariance divides by the batch size (as disentanglement_lib's ``vae.py`` does). The
    term's weight is 1 (lambda_od and lambda_d weigh the parts); it logs
    ``<name>/off_diagonal`` and ``<name>/diagonal``, unweighted.

    :param site: the latent site, a diagonal Gaussian ``(B, D)`` in the guide.
    :param lambda_od: weight of the off-diagonal entries.
    :param lambda_d: weight of the diagonal's distance from 1.
    :param kind: ``"i"`` or ``"ii"``.
    :param name: the factor's name; default ``"dip_<site>"``.
    """

    def __init__(self, site: str, lambda_od: float, lambda_d: float, kind: str = "i", name: str | None = None) -> None:
        super().__init__(name or f"dip_{site}", 1.0)
        self.site = site_name("site", site)
        self.lambda_od = finite("lambda_od", lambda_od, low=0)
        self.lambda_d = finite("lambda_d", lambda_d, low=0)
        self.kind = choice("kind", kind, ("i", "ii"))

    def covariance(self, sites: TermSites) -> torch.Tensor:
        """C ``(P, D, D)`` of the class docstring over the global batch, one per particle (P the
        particles drawn at once under ``vectorize_particles``, else 1).

        :param sites: what the term reads for one particle."""
        _, loc, scale = _particle_gaussian(sites, self.site)
        every_loc = _gather_batches(sites.global_batch, loc)  # (P, M, D)
        centred = every_loc - every_loc.mean(1, keepdim=True)
        covariance = centred.transpose(-2, -1) @ centred / every_loc.shape[1]
        if self.kind == "ii":
            covariance = covariance + torch.diag_embed(_gather_batches(sites.global_batch, scale.pow(2)).mean(1))
        return covariance

    def evaluate(self, sites: TermSites) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``(lambda_od off + lambda_d diag, {"off_diagonal": off, "diagonal": diag})``, each the
        mean over particles.

        :param sites: what the term reads for one particle."""
        covariance = self.covariance(sites)
        diagonal = torch.diagonal(covariance, dim1=-2, dim2=-1)
        off_diagonal = (covariance - torch.diag_embed(diagonal)).pow(2).sum((-2, -1)).mean()
        on_diagonal = (diagonal - 1).pow(2).sum(-1).mean()
        value = self.lambda_od * off_diagonal + self.lambda_d * on_diagonal
        return value, {"off_diagonal": off_diagonal, "diagonal": on_diagonal}

    def num_points(self, sites: TermSites) -> torch.Tensor | float:
        """N of the latent site.

        :param sites: what the term reads for one particle."""
        return sites.num_points(self.site)

    def __repr__(self) -> str:
        return f"DIPCovariance(name={self.name!r}, kind={self.kind!r}, lambda_od={self.lambda_od}, lambda_d={self.lambda_d})"


class FactorTotalCorrelation(DensityRatioTotalCorrelation):
    r"""FactorVAE's total correlation :math:`TC(z) = KL(q(z) \| \prod_d q(z_d))` of one latent
    site (Kim & Mnih 2018, Eq. 2), added to the ELBO with weight gamma, by the density-ratio
    trick: a discriminator D tells samples ``z_n ~ q(z | x_n)`` from samples whose coordinates
    are permuted over the batch independently (:func:`~ppl_vae.infer.total_correlation.permute_factors`
    with one factor per dimension), and

    .. math::

        TC(z) \approx \frac{1}{B} \sum_n \log \frac{D(z_n)}{1 - D(z_n)} = \frac{1}{B} \sum_n \mathrm{logit}\, D(z_n).

    D is the term's own (not the model's), trained by its step after each ELBO step on the ELBO
    step's detached samples (the argument ``sample``) by the logistic loss
    :func:`~ppl_vae.infer.total_correlation.density_ratio_loss`: the contrastive VAE's
    :class:`~ppl_vae.infer.TotalCorrelation` with a factor per coordinate instead of per site.

    Differences from the paper and disentanglement_lib's ``vae.py``: the permuted samples come
    from the same batch as the joint ones (as disentanglement_lib's; the paper draws a second
    batch), the first coordinate keeps its rows (the product of the marginals is the same), D
    returns one logit rather than two softmax logits (``logit D = l_0 - l_1``), and its loss is
    the logistic loss, twice disentanglement_lib's ``0.5 (log D + log(1 - D~))``.

    :param site: the latent site, ``(B, D)``.
    :param gamma: weight gamma.
    :param discriminator: ``"mlp"`` (the default: the paper's, six hidden layers of 1000
        LeakyReLU(0.2) units) or ``"linear"`` (which sees no dependence, see
        :class:`~ppl_vae.nn.TCDiscriminator`).
    :param discriminator_hidden: widths of the MLP discriminator's hidden layers.
    :param discriminator_lr: learning rate of the discriminator step (``None``: the engine's;
        disentanglement_lib's is 1e-4).
    :param input_dim: D; ``None`` reads it from one prior draw of the model
        (``model.model(batch_size=1)``).
    :param guide_arguments: the keyword arguments of the guide that hold the data, for the
        fresh samples of a plain SVI loop's discriminator step.
    :param name: the factor's name.
    :param discriminator_betas: Adam betas of the discriminator step (``None``: the engine's;
        disentanglement_lib's are (0.5, 0.9)).
    """

    def __init__(
        self,
        site: str,
        gamma: float,
        discriminator: str = "mlp",
        discriminator_hidden: Sequence[int] = (1000,) * 6,
        discriminator_lr: float | None = None,
        input_dim: int | None = None,
        guide_arguments: Sequence[str] = ("x",),
        name: str = "total_correlation",
        discriminator_betas: tuple[float, float] | None = None,
    ) -> None:
        super().__init__(
            (site_name("site", site),), "dimensions", gamma, ("sample",), discriminator, discriminator_hidden,
            discriminator_lr, input_dim, guide_arguments, name, discriminator_betas,
        )

    @property
    def site(self) -> str:
        """The latent site."""
        return self.sites[0]


def _split_arguments(term: type, kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(those of kwargs that term's constructor takes, the others)``: a preset's keyword
    arguments for its term and for :class:`~ppl_vae.infer.MeanFieldELBO`."""
    taken = inspect.signature(term).parameters
    return ({k: v for k, v in kwargs.items() if k in taken}, {k: v for k, v in kwargs.items() if k not in taken})


def beta_vae(beta: float, extra_terms: Sequence[Term] = (), **kwargs: Any) -> MeanFieldELBO:
    r"""beta-VAE (Higgins et al. 2017, Eq. 4): :math:`E_q[\log p(x \mid z)] - \beta\, KL(q(z \mid x) \| p(z))`,
    ``MeanFieldELBO(beta=beta)``: beta on every latent's KL.

    :param beta: weight of the KLs, >= 0 (> 1 for the paper's pressure towards the prior).
    :param extra_terms: further terms of :mod:`ppl_vae.infer.terms`.
    :param kwargs: passed to :class:`~ppl_vae.infer.MeanFieldELBO` (``num_particles``)."""
    return MeanFieldELBO(beta=beta, terms=extra_terms, **kwargs)


def annealed_beta_vae(
    gamma: float, capacity: LinearCapacity, site: str = "z", extra_terms: Sequence[Term] = (), **kwargs: Any
) -> MeanFieldELBO:
    r"""The capacity-annealed beta-VAE (Burgess et al. 2018, Eq. 8):
    :math:`E_q[\log p(x \mid z)] - \gamma\, |KL(q(z \mid x) \| p(z)) - C(t)|`, one
    :class:`~ppl_vae.infer.Capacity` term replacing the site's KL. Call the objective with the
    training step (``svi.step(x, step=t)``).

    :param gamma: weight gamma (the paper's 1000 on dSprites).
    :param capacity: C(t), e.g. ``LinearCapacity(0, 25, 100_000)`` (the paper's dSprites schedule).
    :param site: the latent site.
    :param extra_terms: further terms of :mod:`ppl_vae.infer.terms`.
    :param kwargs: passed to :class:`~ppl_vae.infer.MeanFieldELBO` (``num_particles``)."""
    return MeanFieldELBO(terms=[Capacity(site, gamma, capacity), *extra_terms], **kwargs)


def factor_vae(gamma: float, site: str = "z", extra_terms: Sequence[Term] = (), **kwargs: Any) -> MeanFieldELBO:
    r"""FactorVAE (Kim & Mnih 2018, Eq. 2): :math:`\mathrm{ELBO} - \gamma\, TC(z)`, one
    :class:`FactorTotalCorrelation` term (its discriminator step comes with the objective's
    ``auxiliary_steps(model)``; the term is ``elbo.term("total_correlation")``).

    :param gamma: weight gamma (the paper's dSprites range is 10 to 100).
    :param site: the latent site.
    :param extra_terms: further terms of :mod:`ppl_vae.infer.terms`.
    :param kwargs: those of :class:`FactorTotalCorrelation` go to the term (``discriminator``,
        ``discriminator_hidden``, ``discriminator_lr``, ``discriminator_betas``, ``input_dim``,
        ``guide_arguments``, ``name``), the others to :class:`~ppl_vae.infer.MeanFieldELBO`
        (``num_particles``, ``vectorize_particles``, ``max_plate_nesting``)."""
    term_kwargs, elbo_kwargs = _split_arguments(FactorTotalCorrelation, kwargs)
    return MeanFieldELBO(terms=[FactorTotalCorrelation(site, gamma, **term_kwargs), *extra_terms], **elbo_kwargs)


def beta_tcvae(
    data_size: int,
    beta: float,
    site: str = "z",
    alpha: float = 1.0,
    gamma: float = 1.0,
    estimator: str = "mws",
    extra_terms: Sequence[Term] = (),
    **kwargs: Any,
) -> MeanFieldELBO:
    r"""beta-TCVAE (Chen et al. 2018, Eq. 4): the reconstruction minus alpha MI, beta TC and
    gamma dimension-wise KL, one :class:`KLDecomposition` term replacing the site's KL.

    :param data_size: N, the number of points of the data set.
    :param beta: weight of the total correlation (the paper's 6 on dSprites).
    :param site: the latent site.
    :param alpha: weight of the index-code mutual information.
    :param gamma: weight of the dimension-wise KL.
    :param estimator: ``"mws"`` (the paper's default) or ``"mss"``.
    :param extra_terms: further terms of :mod:`ppl_vae.infer.terms`.
    :param kwargs: passed to :class:`~ppl_vae.infer.MeanFieldELBO` (``num_particles``)."""
    return MeanFieldELBO(terms=[KLDecomposition(site, data_size, alpha, beta, gamma, estimator), *extra_terms], **kwargs)


def dip_vae(
    kind: str, lambda_od: float, lambda_d: float | None = None, site: str = "z", extra_terms: Sequence[Term] = (),
    **kwargs: Any,
) -> MeanFieldELBO:
    r"""DIP-VAE-I or -II (Kumar et al. 2018, Eqs. 6 and 7): the ELBO minus the
    :class:`DIPCovariance` penalty.

    :param kind: ``"i"`` or ``"ii"``.
    :param lambda_od: weight of the off-diagonal entries.
    :param lambda_d: weight of the diagonal; ``None`` takes the paper's: ``10 lambda_od`` for
        DIP-VAE-I, ``lambda_od`` for DIP-VAE-II.
    :param site: the latent site.
    :param extra_terms: further terms of :mod:`ppl_vae.infer.terms`.
    :param kwargs: passed to :class:`~ppl_vae.infer.MeanFieldELBO` (``num_particles``)."""
    choice("kind", kind, ("i", "ii"))
    if lambda_d is None:
        lambda_d = finite("lambda_od", lambda_od, low=0) * (10.0 if kind == "i" else 1.0)
    return MeanFieldELBO(terms=[DIPCovariance(site, lambda_od, lambda_d, kind), *extra_terms], **kwargs)


def info_vae(
    lambda_: float, alpha: float = 0.0, site: str = "z", extra_terms: Sequence[Term] = (), **kwargs: Any
) -> MeanFieldELBO:
    r"""InfoVAE (Zhao et al. 2019, Eq. 6) with the MMD divergence (MMD-VAE):

    .. math::

        E_q[\log p(x \mid z)] - (1 - \alpha)\, KL(q(z \mid x) \| p(z)) - (\alpha + \lambda - 1)\, \mathrm{MMD}(q(z), p(z)),

    ``MeanFieldELBO(beta=1 - alpha)`` with the :class:`~ppl_vae.infer.AggregateDivergence` MMD
    term, weight alpha + lambda - 1. The MMD's kernel is the Decomposition VAE's dimension-wise
    Cauchy kernel (:func:`~ppl_vae.infer.mmd_dimensionwise`), not InfoVAE's Gaussian kernel.

    :param lambda_: lambda > 0 (the paper's MMD-VAE: alpha = 0, lambda = 1000).
    :param alpha: alpha <= 1.
    :param site: the latent site.
    :param extra_terms: further terms of :mod:`ppl_vae.infer.terms`.
    :param kwargs: those of :class:`~ppl_vae.infer.AggregateDivergence` go to the term
        (``length_scales``), the others to :class:`~ppl_vae.infer.MeanFieldELBO` (``num_particles``)."""
    alpha = finite("alpha", alpha, high=1, closed=True)
    weight = alpha + finite("lambda_", lambda_, positive=True) - 1
    if weight < 0:
        raise ValueError(f"InfoVAE needs alpha + lambda_ >= 1 (the MMD's weight), got alpha={alpha}, lambda_={lambda_}")
    term_kwargs, elbo_kwargs = _split_arguments(AggregateDivergence, kwargs)
    term = AggregateDivergence(site, weight, "mmd", name=f"mmd_{site}", **term_kwargs)
    return MeanFieldELBO(beta=1.0 - alpha, terms=[term, *extra_terms], **elbo_kwargs)
