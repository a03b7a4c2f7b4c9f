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

from ppl_vae.infer.mean_field import MeanFieldELBO
from ppl_vae.infer.terms import Term, TotalCorrelation, discriminator_loss, permute_shared
from ppl_vae.nn.discriminator import TCDiscriminator

__all__ = ["ContrastiveELBO", "discriminator_loss", "permute_shared"]


class ContrastiveELBO(MeanFieldELBO):
    r"""The contrastive VAE's objective (Abid & Zou 2019, eqs. 3-5):

    .. math::

        \sum_{n \in target} \big(E_q[\log p(x_n|s_n,z_n)] - KL(q(s_n|x_n)\|p(s)) - KL(q(z_n|x_n)\|p(z))
            - \gamma \log\tfrac{D(v_n)}{1 - D(v_n)}\big)
        + \sum_{m \in background} \big(E_q[\log p(b_m|0,z_m)] - KL(q(z_m|b_m)\|p(z))\big)

    with analytic KLs (:class:`~ppl_vae.infer.MeanFieldELBO`) and ``v_n = [s_n, z_n]``
    sampled from the guide. The TC term is :class:`~ppl_vae.infer.terms.TotalCorrelation`, a
    ``pyro.factor`` site named ``"total_correlation"`` added after the model has run (the
    values of s and z are the guide's, replayed into the model); it carries the target
    plate's data-set scale N / B, so ``loss`` and ``differentiable_loss`` report the same
    objective and gamma weighs the TC per data point as in the authors' code.

    The discriminator D (:attr:`discriminator`) belongs to that term, not to the model: it is
    not in Pyro's parameter store and not in ``model.parameters()``. The TC factor evaluates D
    with its parameters detached, so the ELBO's gradient never reaches D; D is trained by its
    own step, :meth:`auxiliary_steps`, on detached guide samples.

    Example (plain SVI)::

        elbo = ContrastiveELBO(gamma=1.0, discriminator="mlp")
        (step,) = elbo.auxiliary_steps(vae)
        d_optim = torch.optim.Adam(step.parameters, lr=1e-3)
        svi = SVI(vae.model, vae.guide, pyro.optim.Adam({"lr": 1e-3}), elbo)
        for target, background in batches:
            svi.step(target=target, background=background)
            d_optim.zero_grad()
            step.loss(target=target, background=background).backward()
            d_optim.step()

    :param gamma: weight of the TC term, >= 0; 0 gives the plain contrastive ELBO and no
        discriminator step.
    :param discriminator: ``"linear"`` (the paper's logistic regression) or ``"mlp"``.
    :param discriminator_hidden: widths of the MLP discriminator's hidden layers.
    :param discriminator_lr: learning rate of the discriminator step (``None``: the engine's).
    :param salient_site: the model's site of s on the target.
    :param shared_site: the model's site of z on the target.
    :param extra_terms: further terms of :mod:`ppl_vae.infer.terms`, e.g.
        ``[Capacity("target_z", gamma=10.0, capacity=LinearCapacity(0, 5, 10_000))]``.
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
        gamma: float = 1.0,
        discriminator: str = "linear",
        discriminator_hidden: Sequence[int] = (64, 64),
        discriminator_lr: float | None = None,
        salient_site: str = "target_s",
        shared_site: str = "target_z",
        extra_terms: Sequence[Term] = (),
        **kwargs,
    ) -> None:
        self.total_correlation = TotalCorrelation(
            salient_site, shared_site, gamma, discriminator, discriminator_hidden, discriminator_lr
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
        (:meth:`~ppl_vae.infer.terms.TotalCorrelation.log_density_ratio`)."""
        return self.total_correlation.log_density_ratio(s, z)
