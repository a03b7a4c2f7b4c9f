r"""Total correlation by the density-ratio trick, of latent sites or of one site's coordinates.

The total correlation of a vector split into factors :math:`v = [v_1, \dots, v_K]` under the
guide is

.. math::

    TC = KL\Big(q(v) \,\Big\|\, \prod_k q(v_k)\Big).

A discriminator D tells joint samples v from samples of the product of the marginals (each
factor but the first taken from another point of the batch, by its own random permutation), and
at its optimum ``log D(v) / (1 - D(v)) = log q(v) / prod_k q(v_k)`` (Nguyen et al. 2010; Kim &
Mnih 2018, Sec. 3), so

.. math::

    TC \approx \frac{1}{B} \sum_n \mathrm{logit}\, D(v_n).

Two uses: the contrastive VAE's TC between its salient and shared latents (two factors, one per
site; :class:`~ppl_vae.infer.TotalCorrelation`, Abid & Zou 2019) and FactorVAE's TC of one
latent's coordinates (a factor per dimension; :class:`~ppl_vae.infer.FactorTotalCorrelation`,
Kim & Mnih 2018). Both are :class:`DensityRatioTotalCorrelation`, which owns D and its step.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from pyro import poutine
from torch import nn
from torch.func import functional_call

from ppl_vae._validation import adam_betas, choice, finite, positive_integer, site_name
from ppl_vae.infer.distributed import LOCAL_BATCH, GlobalBatch
from ppl_vae.infer.steps import AuxiliaryStep
from ppl_vae.infer.terms import Term, TermSites, per_particle
from ppl_vae.nn.discriminator import TCDiscriminator

__all__ = ["DensityRatioTotalCorrelation", "density_ratio_loss", "permute_factors"]

#: How a term splits its joint sample into factors: one factor per site, or per coordinate.
FACTORS = ("sites", "dimensions")


def permute_factors(v: torch.Tensor, widths: Sequence[int], global_batch: GlobalBatch = LOCAL_BATCH) -> torch.Tensor:
    r"""Samples of :math:`\prod_k q(v_k)` from joint samples: ``v (B, sum(widths))`` split into
    factors of ``widths`` columns; the first factor's rows are kept, and each other factor k
    takes the rows ``pi_k(n)`` of a random permutation ``pi_k`` of the batch of its own, drawn
    in factor order.

    Under data parallelism each ``pi_k`` permutes the global batch (one permutation for every
    process, :meth:`~ppl_vae.infer.distributed.GlobalBatch.shared_permutation`) and each
    process returns its own rows n, whose partners may live on another process (gathered):
    together the processes build exactly the samples one process with the global batch would.

    :param v: ``(B, D)`` joint samples, row n from one data point.
    :param widths: the factors' widths, summing to D (e.g. ``(D_s, D_z)``, or ``(1,) * D``).
    :param global_batch: the global batch the rows belong to (this process's alone by default)."""
    every_v = global_batch.all_gather(v)
    pieces, start = [v[:, : widths[0]]], widths[0]
    for width in widths[1:]:
        partners = global_batch.local_rows(global_batch.shared_permutation(every_v.shape[0], device=v.device), v.shape[0])
        pieces.append(every_v[partners, start : start + width])
        start += width
    return torch.cat(pieces, dim=-1)


def density_ratio_loss(
    discriminator: nn.Module, v: torch.Tensor, widths: Sequence[int], global_batch: GlobalBatch = LOCAL_BATCH
) -> torch.Tensor:
    """``mean_n [-log D(v_n) - log(1 - D(v~_n))]``, the logistic loss of joint samples v against
    samples v~ of the product of the factors' marginals (:func:`permute_factors`), from logits.
    Under data parallelism the mean runs over this process's rows of the global batch; DDP's
    average of the processes' gradients is the gradient of the global mean.

    :param discriminator: D, mapping ``(B, D)`` inputs to ``(B,)`` logits.
    :param v: ``(B, D)`` detached joint samples.
    :param widths: the factors' widths, summing to D.
    :param global_batch: the global batch the rows belong to (this process's alone by default)."""
    joint = discriminator(v)
    product = discriminator(permute_factors(v, widths, global_batch))
    return torch.nn.functional.softplus(-joint).mean() + torch.nn.functional.softplus(product).mean()


class DensityRatioTotalCorrelation(Term):
    r"""The total correlation :math:`KL(q(v) \| \prod_k q(v_k))` of ``v``, the guide's values of
    ``sites`` side by side, estimated as :math:`\frac{1}{B}\sum_n \mathrm{logit}\, D(v_n)`
    (the module's docstring), with the factors v_k the sites (``factors="sites"``) or the
    coordinates of v (``factors="dimensions"``).

    D belongs to this term (not to the model or Pyro's parameter store). The factor evaluates D
    with its parameters detached, so the ELBO's gradient never reaches D; D is trained by the
    term's own step (:meth:`auxiliary_steps`, after each ELBO step, :func:`density_ratio_loss`)
    on detached samples: those of the ELBO step, which hands them to the step as arguments
    (:meth:`step_arguments`) named ``sample_arguments``.

    :param sites: the latent sites, each ``(B, D_k)``.
    :param factors: ``"sites"`` or ``"dimensions"``.
    :param gamma: weight gamma.
    :param sample_arguments: the names of the discriminator step's arguments that hold the
        sites' samples, one per site.
    :param discriminator: ``"linear"`` or ``"mlp"`` (:class:`~ppl_vae.nn.TCDiscriminator`).
    :param discriminator_hidden: widths of the MLP discriminator's hidden layers.
    :param discriminator_lr: learning rate of the discriminator step (``None``: the engine's).
    :param input_dim: D's input size, the sum of the sites' sizes; ``None`` reads it from the
        sites of one prior draw of the model (``model.model(batch_size=1)``, the library's
        prior-predictive call), so a model whose ``model`` takes no ``batch_size`` needs it given.
    :param guide_arguments: the keyword arguments of the guide that hold the data the sites
        encode, for the fresh samples of a plain SVI loop's discriminator step.
    :param name: the factor's name.
    :param discriminator_betas: Adam betas of the discriminator step (``None``: the engine's).
    """

    #: The name of the discriminator's auxiliary step (its loss is logged as ``discriminator_loss``).
    STEP = "discriminator"

    def __init__(
        self,
        sites: Sequence[str],
        factors: str,
        gamma: float,
        sample_arguments: Sequence[str],
        discriminator: str,
        discriminator_hidden: Sequence[int],
        discriminator_lr: float | None,
        input_dim: int | None,
        guide_arguments: Sequence[str],
        name: str,
        discriminator_betas: tuple[float, float] | None = None,
    ) -> None:
        super().__init__(name, gamma, "gamma")
        self.sites = tuple(site_name("sites", site) for site in sites)
        self.factors = choice("factors", factors, FACTORS)
        if len(sample_arguments) != len(self.sites):
            raise ValueError(f"sample_arguments must name one argument per site {self.sites}, got {sample_arguments!r}")
        self.sample_arguments = tuple(site_name("sample_arguments", argument) for argument in sample_arguments)
        self.discriminator = TCDiscriminator(discriminator, discriminator_hidden)
        self.discriminator_lr = None if discriminator_lr is None else finite("discriminator_lr", discriminator_lr, positive=True)
        self.discriminator_betas = (None if discriminator_betas is None
                                    else adam_betas("discriminator_betas", discriminator_betas))
        self.input_dim = None if input_dim is None else positive_integer("input_dim", input_dim)
        if isinstance(guide_arguments, str) or not guide_arguments:
            raise ValueError(f"guide_arguments must be a non-empty sequence of argument names, got {guide_arguments!r}")
        self.guide_arguments = tuple(site_name("guide_arguments", argument) for argument in guide_arguments)

    def num_points(self, sites: TermSites) -> torch.Tensor | float:
        """N of the first site.

        :param sites: what the term reads for one particle."""
        return sites.num_points(self.sites[0])

    def factor_widths(self, samples: Sequence[torch.Tensor]) -> tuple[int, ...]:
        """The factors' widths for the sites' ``samples``: each site's size, or ones.

        :param samples: the sites' ``(B, D_k)`` samples."""
        widths = tuple(int(sample.shape[-1]) for sample in samples)
        return widths if self.factors == "sites" else (1,) * sum(widths)

    def ratio(self, v: torch.Tensor) -> torch.Tensor:
        """``log D(v) / (1 - D(v))`` per point ``(B,)`` for ``v (B, D)``, with D's parameters
        detached (gradients flow to v only).

        :param v: ``(B, D)`` joint samples."""
        self.discriminator.build(v.shape[-1], v.device)
        detached = {name: p.detach() for name, p in self.discriminator.named_parameters()}
        return functional_call(self.discriminator, detached, (v,))

    def samples(self, sites: TermSites) -> list[torch.Tensor]:
        """The sites' values ``(B, D_k)`` (the guide's, replayed into the model).

        :param sites: what the term reads for one particle."""
        return [sites.model_site(site)["value"] for site in self.sites]

    def evaluate(self, sites: TermSites) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``(mean_n logit D(v_n), {})``.

        :param sites: what the term reads for one particle."""
        return self.ratio(torch.cat(self.samples(sites), dim=-1)).mean(), {}

    def step_arguments(self, sites: TermSites) -> dict[str, dict[str, Any]]:
        """``{"discriminator": {<sample argument>: sample, ..., "global_batch": ...}}``: the ELBO
        step's samples ``(B, D_k)``, detached (of its last particle, also among particles
        vectorised), and the global batch they belong to, for the discriminator step; none
        when the weight is 0 (no step).

        :param sites: what the term read for the ELBO step's (last) particle."""
        if self.weight == 0:
            return {}
        samples = {argument: per_particle(sample)[-1].detach()
                   for argument, sample in zip(self.sample_arguments, self.samples(sites), strict=True)}
        return {self.STEP: {**samples, "global_batch": sites.global_batch}}

    def auxiliary_modules(self) -> dict[str, nn.Module]:
        """``{"discriminator": D}``, for the engine to move and checkpoint."""
        return {"discriminator": self.discriminator}

    def auxiliary_steps(self, model: nn.Module) -> list[AuxiliaryStep]:
        """The discriminator step (after each ELBO step): :func:`density_ratio_loss` on the
        detached samples named ``sample_arguments`` when given (those the ELBO step drew on the
        same batch, :meth:`step_arguments`: no second pass through the encoders), else fresh
        ones from ``model.guide`` on the batch (a plain SVI loop), permuted over the
        ``global_batch`` the ELBO step hands on; none when the weight is 0.

        :param model: the model being trained (its ``guide`` draws the fresh samples, its
            ``model`` gives D's input size when ``input_dim`` was not given)."""
        if self.weight == 0:
            return []
        self.discriminator.build(self.discriminator_input_dim(model))

        def loss(global_batch: GlobalBatch = LOCAL_BATCH, **arguments: torch.Tensor) -> torch.Tensor:
            samples = [arguments.pop(argument, None) for argument in self.sample_arguments]
            if any(sample is None for sample in samples):
                samples = self.guide_samples(model, **arguments)
            v = torch.cat(samples, dim=-1)
            return density_ratio_loss(self.discriminator, v, self.factor_widths(samples), global_batch)

        return [AuxiliaryStep(self.STEP, loss, list(self.discriminator.parameters()), when="after", lr=self.discriminator_lr,
                              betas=self.discriminator_betas)]

    def discriminator_input_dim(self, model: nn.Module) -> int:
        """The sum of the sites' sizes: ``input_dim`` when given, else the last dimensions of
        the sites in one prior draw of ``model.model(batch_size=1)``, drawn apart from the
        global random state.

        :param model: the model whose ``model`` method takes ``batch_size`` (read only when
            ``input_dim`` was not given)."""
        if self.input_dim is not None:
            return self.input_dim
        try:
            with torch.no_grad(), torch.random.fork_rng(), poutine.block():
                nodes = poutine.trace(model.model).get_trace(batch_size=1).nodes
        except TypeError as error:
            raise ValueError(f"{type(self).__name__} needs input_dim (the sum of the sites' sizes) for a model "
                             f"whose model() takes no batch_size: {error}") from None
        missing = [site for site in self.sites if site not in nodes]
        if missing:
            raise ValueError(f"the model's prior draw has no sites {missing}; its sites are {sorted(nodes)}")
        return sum(int(nodes[site]["value"].shape[-1]) for site in self.sites)

    @torch.no_grad()
    def guide_samples(self, model: nn.Module, **batch: torch.Tensor) -> list[torch.Tensor]:
        """Detached samples ``(B, D_k)`` of the sites drawn from the guide on the batch's
        ``guide_arguments`` (the other tensors of the batch are not encoded).

        :param model: the model whose ``guide`` method is run.
        :param batch: the batch's tensors by argument name."""
        encoded = {name: value for name, value in batch.items() if name in self.guide_arguments}
        with poutine.block():
            nodes = poutine.trace(model.guide).get_trace(**encoded).nodes
        return [nodes[site]["value"] for site in self.sites]
