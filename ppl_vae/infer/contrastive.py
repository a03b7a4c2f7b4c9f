"""The contrastive VAE's objective: the ELBO plus a total-correlation penalty between s and z.

Abid & Zou (2019), eq. (5) and appendix C: the total correlation of the salient and shared
latents under the guide,

    TC = KL( q(s, z) || q(s) q(z) ),

is estimated with the density-ratio trick (Nguyen et al. 2010; Kim & Mnih 2018): a
discriminator D tells joint samples v = [s, z] from samples whose s and z come from different
points of the batch, and at its optimum ``log D(v) / (1 - D(v)) = log q(s, z) / q(s) q(z)``, so

    TC ~ mean_n  log D(v_n) / (1 - D(v_n)) = mean_n logit D(v_n).
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from ppl_vae._constants import CONTRASTIVE
from ppl_vae._validation import site_name
from ppl_vae.infer.distributed import LOCAL_BATCH, GlobalBatch
from ppl_vae.infer.mean_field import MeanFieldELBO
from ppl_vae.infer.terms import Term
from ppl_vae.infer.total_correlation import DensityRatioTotalCorrelation, density_ratio_loss, permute_factors
from ppl_vae.nn.discriminator import TCDiscriminator

__all__ = ["ContrastiveELBO", "TotalCorrelation", "discriminator_loss", "permute_shared"]


def permute_shared(s: torch.Tensor, z: torch.Tensor, global_batch: GlobalBatch = LOCAL_BATCH) -> torch.Tensor:
    """Samples of q(s) q(z) from joint samples: ``[s_n, z_pi(n)] (B, D_s + D_z)`` for a random
    permutation pi of the batch (the authors swap the halves of the batch instead):
    :func:`~ppl_vae.infer.total_correlation.permute_factors` with the two factors s and z.

    Under data parallelism pi permutes the global batch (one permutation for every process,
    :meth:`~ppl_vae.infer.distributed.GlobalBatch.shared_permutation`) and each process returns
    its own rows n, whose partner z_pi(n) may live on another process (gathered): together the
    processes build exactly the pairs one process with the global batch would.

    :param s: ``(B, D_s)`` samples of the salient latent s.
    :param z: ``(B, D_z)`` samples of the shared latent z, row n from the same point as ``s``'s.
    :param global_batch: the global batch the rows belong to (this process's alone by default)."""
    return permute_factors(torch.cat([s, z], dim=-1), (s.shape[-1], z.shape[-1]), global_batch)


def discriminator_loss(
    discriminator: nn.Module, s: torch.Tensor, z: torch.Tensor, global_batch: GlobalBatch = LOCAL_BATCH
) -> torch.Tensor:
    """``mean_n [-log D([s_n, z_n]) - log(1 - D([s_n, z_pi(n)]))]``, the logistic loss of
    joint against permuted samples (Abid & Zou 2019, appendix C), from logits:
    :func:`~ppl_vae.infer.total_correlation.density_ratio_loss` with the two factors s and z.
    Under data parallelism the mean runs over this process's rows of the global batch (pairs
    from :func:`permute_shared`); DDP's average of the processes' gradients is the gradient of
    the global mean.

    :param discriminator: D, mapping ``(B, D_s + D_z)`` inputs to ``(B,)`` logits.
    :param s: ``(B, D_s)`` detached samples of the salient latent s.
    :param z: ``(B, D_z)`` detached samples of the shared latent z, row n from the same point
        as ``s``'s.
    :param global_batch: the global batch the rows belong to (this process's alone by default)."""
    return density_ratio_loss(discriminator, torch.cat([s, z], dim=-1), (s.shape[-1], z.shape[-1]), global_batch)


class TotalCorrelation(DensityRatioTotalCorrelation):
    r"""The total correlation :math:`TC(s, z) = KL(q(s, z) \| q(s) q(z))` of two latent sites
    under the guide (Abid & Zou 2019, Eq. 5; appendix C), by the density-ratio trick: a
    discriminator D tells joint samples ``v = [s, z]`` from samples whose s and z come from
    different points, and at its optimum ``logit D(v) = log q(s, z) / q(s) q(z)``, so
    :math:`TC \approx \frac{1}{B}\sum_n \mathrm{logit}\, D(v_n)`: a
    :class:`~ppl_vae.infer.total_correlation.DensityRatioTotalCorrelation` with one factor per site.

    D belongs to this term (not to the model or Pyro's parameter store). The factor evaluates D
    with its parameters detached, so the ELBO's gradient never reaches D; D is trained by the
    term's own step (:meth:`~ppl_vae.infer.DensityRatioTotalCorrelation.auxiliary_steps`, after each ELBO step) on detached
    samples: those of the ELBO step, which hands them to the step as the arguments
    ``salient_sample`` and ``shared_sample`` (:meth:`~ppl_vae.infer.DensityRatioTotalCorrelation.step_arguments`).

    :param salient_site: the site of s.
    :param shared_site: the site of z.
    :param gamma: weight gamma.
    :param discriminator: ``"linear"`` (the paper's logistic regression, the default) or ``"mlp"``.
    :param discriminator_hidden: widths of the MLP discriminator's hidden layers.
    :param discriminator_lr: learning rate of the discriminator step (``None``: the engine's).
    :param input_dim: D's input size, D_s + D_z; ``None`` reads it from the two sites of one
        prior draw of the model (``model.model(batch_size=1)``, the library's prior-predictive
        call), so a model whose ``model`` takes no ``batch_size`` needs it given.
    :param guide_arguments: the keyword arguments of the guide that hold the data the two sites
        encode (the target group), for the fresh samples of a plain SVI loop's discriminator
        step; the other groups of the batch (the background) are not encoded.
    :param name: the factor's name.
    """

    def __init__(
        self,
        salient_site: str,
        shared_site: str,
        gamma: float,
        discriminator: str = CONTRASTIVE.discriminator,
        discriminator_hidden: Sequence[int] = (64, 64),
        discriminator_lr: float | None = None,
        input_dim: int | None = None,
        guide_arguments: Sequence[str] = ("target",),
        name: str = "total_correlation",
    ) -> None:
        super().__init__(
            (site_name("salient_site", salient_site), site_name("shared_site", shared_site)),
            "sites",
            gamma,
            ("salient_sample", "shared_sample"),
            discriminator,
            discriminator_hidden,
            discriminator_lr,
            input_dim,
            guide_arguments,
            name,
        )

    @property
    def salient_site(self) -> str:
        """The site of s."""
        return self.sites[0]

    @property
    def shared_site(self) -> str:
        """The site of z."""
        return self.sites[1]

    def log_density_ratio(self, s: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """``log D(v) / (1 - D(v))`` per point ``(B,)`` for ``s (B, D_s)``, ``z (B, D_z)``, with D's
        parameters detached (gradients flow to s and z only).

        :param s: ``(B, D_s)`` samples of the salient latent s.
        :param z: ``(B, D_z)`` samples of the shared latent z, row n from the same point as ``s``'s."""
        return self.ratio(torch.cat([s, z], dim=-1))


class ContrastiveELBO(MeanFieldELBO):
    r"""The contrastive VAE's objective (Abid & Zou 2019, eqs. 3-5):

    .. math::

        \sum_{n \in target} \big(E_q[\log p(x_n|s_n,z_n)] - KL(q(s_n|x_n)\|p(s)) - KL(q(z_n|x_n)\|p(z))
            - \gamma \log\tfrac{D(v_n)}{1 - D(v_n)}\big)
        + \sum_{m \in background} \big(E_q[\log p(b_m|0,z_m)] - KL(q(z_m|b_m)\|p(z))\big)

    with analytic KLs (:class:`~ppl_vae.infer.MeanFieldELBO`) and ``v_n = [s_n, z_n]``
    sampled from the guide. The TC term is :class:`TotalCorrelation`, a
    ``pyro.factor`` site named ``"total_correlation"`` added after the model has run (the
    values of s and z are the guide's, replayed into the model); it carries the target
    plate's data-set scale N / B, so ``loss`` and ``differentiable_loss`` report the same
    objective and gamma weighs the TC per data point as in the authors' code.

    The discriminator D (:attr:`discriminator`) belongs to that term, not to the model: it is
    not in Pyro's parameter store and not in ``model.parameters()``. The TC factor evaluates D
    with its parameters detached, so the ELBO's gradient never reaches D; D is trained by its
    own step, :meth:`auxiliary_steps`, on detached guide samples.

    Example, plain SVI with the discriminator's step after each ELBO step:

    >>> import pyro, torch
    >>> from pyro.infer import SVI
    >>> from ppl_vae.models import ContrastiveVAE
    >>> vae = ContrastiveVAE.mlp((10,), salient_dim=2, shared_dim=2, hidden=16)
    >>> elbo = ContrastiveELBO(gamma=1.0, discriminator="mlp")
    >>> (step,) = elbo.auxiliary_steps(vae)
    >>> d_optim = torch.optim.Adam(step.parameters, lr=1e-3)
    >>> svi = SVI(vae.model, vae.guide, pyro.optim.Adam({"lr": 1e-3}), elbo)
    >>> batches = [(torch.rand(8, 10).round(), torch.rand(8, 10).round()) for _ in range(2)]
    >>> for target, background in batches:
    ...     loss = svi.step(target=target, background=background)
    ...     d_optim.zero_grad()
    ...     step.loss(target=target, background=background).backward()
    ...     d_optim.step()
    >>> sorted(elbo.logged)  # per-point values of the last step
    ['kl', 'reconstruction', 'total_correlation']

    :param gamma: weight of the TC term, >= 0 (default 1); 0 gives the plain contrastive ELBO
        and no discriminator step.
    :param discriminator: ``"linear"`` (the paper's logistic regression, the default) or ``"mlp"``.
    :param discriminator_hidden: widths of the MLP discriminator's hidden layers.
    :param discriminator_lr: learning rate of the discriminator step (``None``: the engine's).
    :param salient_site: the model's site of s on the target.
    :param shared_site: the model's site of z on the target.
    :param extra_terms: further terms of :mod:`ppl_vae.infer.terms`, e.g.
        ``[Capacity("target_z", gamma=10.0, capacity=LinearCapacity(0, 5, 10_000))]``.
    :param input_dim: the discriminator's input size D_s + D_z (``None``: read from a prior
        draw of the model, :meth:`~ppl_vae.infer.DensityRatioTotalCorrelation.discriminator_input_dim`).
    :param kwargs: passed to :class:`~ppl_vae.infer.MeanFieldELBO` (``num_particles``).

    Differences from the authors' code: they train D and the VAE with one loss and one
    optimiser (D's loss added to the VAE's, no stop-gradient), squash D's output into
    [0.085, 0.935] before taking logs, and split the batch in halves to pair s with another
    point's z; here D has its own loss and optimiser on detached samples (FactorVAE's
    design), the log ratio is D's logit (no squashing needed), and z is permuted over the
    whole batch (the global batch of all processes under data parallelism).
    """

    def __init__(
        self,
        gamma: float = CONTRASTIVE.gamma,
        discriminator: str = CONTRASTIVE.discriminator,
        discriminator_hidden: Sequence[int] = (64, 64),
        discriminator_lr: float | None = None,
        salient_site: str = "target_s",
        shared_site: str = "target_z",
        extra_terms: Sequence[Term] = (),
        input_dim: int | None = None,
        **kwargs,
    ) -> None:
        self.total_correlation = TotalCorrelation(
            salient_site, shared_site, gamma, discriminator, discriminator_hidden, discriminator_lr, input_dim
        )
        super().__init__(terms=[self.total_correlation, *extra_terms], **kwargs)

    @property
    def gamma(self) -> float:
        """Weight of the TC term."""
        return self.total_correlation.weight

    @property
    def discriminator(self) -> TCDiscriminator:
        """The TC term's discriminator D."""
        return self.total_correlation.discriminator

    def log_density_ratio(self, s: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """``logit D([s, z])`` per point ``(B,)``, D's parameters detached
        (:meth:`TotalCorrelation.log_density_ratio`).

        :param s: ``(B, D_s)`` samples of the salient latent s.
        :param z: ``(B, D_z)`` samples of the shared latent z, row n from the same point as ``s``'s."""
        return self.total_correlation.log_density_ratio(s, z)
