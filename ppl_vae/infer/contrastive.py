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

from collections.abc import Callable, Sequence

import pyro
import torch
from pyro import poutine
from pyro.poutine.messenger import Messenger
from torch import nn
from torch.func import functional_call
from torch.nn import functional as F

from ppl_vae.infer.distributed import all_gather, local_rows, shared_permutation
from ppl_vae.infer.mean_field import MeanFieldELBO
from ppl_vae.infer.steps import AuxiliaryStep
from ppl_vae.nn.discriminator import TCDiscriminator


def permute_shared(s: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """Samples of q(s) q(z) from joint samples: ``[s_n, z_pi(n)] (B, D_s + D_z)`` for a random
    permutation pi of the batch (the authors swap the halves of the batch instead).

    Under data parallelism pi permutes the global batch (one permutation for every process,
    :func:`~ppl_vae.infer.distributed.shared_permutation`) and each process returns its own
    rows n, whose partner z_pi(n) may live on another process (gathered): together the
    processes build exactly the pairs one process with the global batch would."""
    every_z = all_gather(z)
    partners = local_rows(shared_permutation(every_z.shape[0], device=z.device), z.shape[0])
    return torch.cat([s, every_z[partners]], dim=-1)


def discriminator_loss(discriminator: nn.Module, s: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """``mean_n [-log D([s_n, z_n]) - log(1 - D([s_n, z_pi(n)]))]``, the logistic loss of
    joint against permuted samples (appendix C), computed from logits. Under data
    parallelism the mean runs over this process's rows of the global batch (pairs from
    :func:`permute_shared`); DDP's average of the processes' gradients is the gradient of
    the global mean."""
    joint = discriminator(torch.cat([s, z], dim=-1))
    product = discriminator(permute_shared(s, z))
    return F.softplus(-joint).mean() + F.softplus(product).mean()


class _SiteCapture(Messenger):
    """Keeps the messages of the sample sites ``names`` (value and scale as the model's
    handlers left them) while the model runs: a lighter record than a full trace."""

    def __init__(self, names: Sequence[str]) -> None:
        super().__init__()
        self.names = frozenset(names)
        self.sites: dict[str, dict] = {}

    def _pyro_post_sample(self, msg: dict) -> None:
        if msg["name"] in self.names:
            self.sites[msg["name"]] = msg


class ContrastiveELBO(MeanFieldELBO):
    r"""The contrastive VAE's objective (Abid & Zou 2019, eqs. 3-5):

    .. math::

        \sum_{n \in target} \big(E_q[\log p(x_n|s_n,z_n)] - KL(q(s_n|x_n)\|p(s)) - KL(q(z_n|x_n)\|p(z))
            - \gamma \log\tfrac{D(v_n)}{1 - D(v_n)}\big)
        + \sum_{m \in background} \big(E_q[\log p(b_m|0,z_m)] - KL(q(z_m|b_m)\|p(z))\big)

    with analytic KLs (:class:`~pyro.infer.TraceMeanField_ELBO`) and ``v_n = [s_n, z_n]``
    sampled from the guide. The TC term enters as a ``pyro.factor`` site named
    ``"total_correlation"`` that a small wrapper appends to the model after it has run (the
    values of s and z are the guide's, replayed into the model); it carries the target
    plate's data-set scale N / B, so ``loss`` and ``differentiable_loss`` report the same
    objective and gamma weighs the TC per data point as in the authors' code.

    The discriminator D belongs to this objective, not to the model: it is not in Pyro's
    parameter store and not in ``model.parameters()``. The TC factor evaluates D with its
    parameters detached, so the ELBO's gradient never reaches D; D is trained by its own
    step, :meth:`auxiliary_steps`, on detached guide samples.

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
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not gamma >= 0:
            raise ValueError(f"gamma must be a number >= 0, got {gamma!r}")
        if discriminator_lr is not None and not discriminator_lr > 0:
            raise ValueError(f"discriminator_lr must be > 0 or None, got {discriminator_lr!r}")
        self.gamma = float(gamma)
        self.discriminator = TCDiscriminator(discriminator, discriminator_hidden)
        self.discriminator_lr = discriminator_lr
        self.salient_site = salient_site
        self.shared_site = shared_site
        self.terms: dict[str, torch.Tensor] = {}
        self._last_samples: tuple[torch.Tensor, torch.Tensor] | None = None

    def log_density_ratio(self, s: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """``log D(v) / (1 - D(v))`` per point ``(B,)`` for ``s (B, D_s)``, ``z (B, D_z)``, with D's
        parameters detached (gradients flow to s and z only)."""
        v = torch.cat([s, z], dim=-1)
        self.discriminator.build(v.shape[-1], v.device)
        detached = {name: p.detach() for name, p in self.discriminator.named_parameters()}
        return functional_call(self.discriminator, detached, (v,))

    def _with_total_correlation(self, model: Callable) -> Callable:
        """``model`` followed by the factor ``-gamma * (N / B) * sum_n log ratio(v_n)``."""

        def model_with_total_correlation(*args, **kwargs):
            self._last_samples = None
            with _SiteCapture((self.salient_site, self.shared_site)) as capture:
                result = model(*args, **kwargs)
            nodes = capture.sites
            if self.salient_site in nodes and self.shared_site in nodes:
                salient = nodes[self.salient_site]
                shared = nodes[self.shared_site]["value"]
                log_ratio = self.log_density_ratio(salient["value"], shared)
                self.terms["total_correlation"] = log_ratio.detach().mean()
                self._last_samples = (salient["value"].detach(), shared.detach())
                pyro.factor("total_correlation", -self.gamma * salient["scale"] * log_ratio.sum())
            return result

        return model_with_total_correlation

    def _get_trace(self, model, guide, args, kwargs):
        if self.gamma > 0:
            model = self._with_total_correlation(model)
        return super()._get_trace(model, guide, args, kwargs)

    def step_outputs(self) -> dict[str, torch.Tensor]:
        """The logged terms and the detached ``s``, ``z`` the discriminator step reuses."""
        outputs = super().step_outputs()
        if self._last_samples is not None:
            outputs["salient_sample"], outputs["shared_sample"] = self._last_samples
        return outputs

    def load_step_outputs(self, outputs: dict[str, torch.Tensor]) -> None:
        super().load_step_outputs(outputs)
        if "salient_sample" in outputs:
            self._last_samples = (outputs["salient_sample"], outputs["shared_sample"])

    def auxiliary_steps(self, model: nn.Module) -> list[AuxiliaryStep]:
        """The discriminator step (after each ELBO step): :func:`discriminator_loss` on
        detached ``[s, z]``: the samples the ELBO step just drew on the same target batch (no
        second pass through the encoders), or fresh ones from ``model.guide`` when the step
        is taken on its own; none when gamma is 0."""
        if self.gamma == 0:
            return []
        self.discriminator.build(model.salient_dim + model.shared_dim)

        def loss(**batch: torch.Tensor) -> torch.Tensor:
            samples, self._last_samples = self._last_samples, None
            target = batch.get("target")
            if samples is None or target is None or samples[0].shape[0] != target.shape[0]:
                samples = self.guide_samples(model, **batch)
            return discriminator_loss(self.discriminator, *samples)

        return [
            AuxiliaryStep(
                "discriminator", loss, list(self.discriminator.parameters()), when="after", lr=self.discriminator_lr
            )
        ]

    def auxiliary_modules(self) -> dict[str, nn.Module]:
        """``{"discriminator": D}``, for the engine to move and checkpoint."""
        return {"discriminator": self.discriminator}

    @torch.no_grad()
    def guide_samples(self, model: nn.Module, **batch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Detached ``s (B, D_s)``, ``z (B, D_z)`` sampled from the guide on the target batch
        (the background is not encoded: the discriminator never sees it)."""
        target_only = {name: value for name, value in batch.items() if name != "background"}
        with poutine.block():
            nodes = poutine.trace(model.guide).get_trace(**target_only).nodes
        return nodes[self.salient_site]["value"], nodes[self.shared_site]["value"]
