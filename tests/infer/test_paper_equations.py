"""Each objective's loss, and its gradient, is the paper's equation written out by hand.

Small fixed networks and batches. The hand-written side uses the model's networks only for
the distributions' parameters (means, scales, logits, decoded batches) and writes everything
else with elementary torch operations: the reparameterised samples (the noise drawn from
torch's generator in the order the guide and the objective draw it, after the same seed), the
log-likelihoods, the KLs and log-densities, and each paper's extra terms. The library's loss
is Pyro's convention, ``-ELBO`` summed over the points the minibatch stands for, so each
per-point penalty of a paper appears here times N.

- PartedVAE (Hajimiri et al. 2021): Eq. 6 with its capacities, entropy, aggregate KL of
  q(c) and Bhattacharyya hinge (closed form of App. A.1), on unlabelled and labelled batches,
  and the semi-supervised cross-entropy L_S that follows it.
- Contrastive VAE (Abid & Zou 2019): the target and background ELBOs (Eqs. 3, 4) plus the
  density-ratio estimate of the total correlation (Eq. 5, App. C), and the discriminator's
  logistic loss (App. C).
- Decomposition VAE (Mathieu et al. 2019): Eq. 7 with the dimension-wise MMD (Eq. 10) or
  the inclusive KL (App. B), with each prior family's KL (closed form for Gaussians, Monte
  Carlo with its own log-density otherwise).
"""
from __future__ import annotations

import itertools
import math

import pyro
import pytest
import torch
from torch.nn import functional as F

from ppl_vae.distributions import (
    AnisotropicGaussianPrior,
    IsotropicGaussianPrior,
    MixtureOfGaussiansPrior,
    SparsePrior,
    StudentTPrior,
)
from ppl_vae.infer import (
    ContrastiveELBO,
    DecompositionELBO,
    LinearCapacity,
    PartedELBO,
    discriminator_loss,
)
from ppl_vae.models import ContrastiveVAE, DecompositionVAE, PartedVAE
from ppl_vae.nn import MLP, TCDiscriminator, mlp_decoder

SEED = 11
FEATURES = 12
LOG_2PI = math.log(2 * math.pi)


def binary(n: int, seed: int) -> torch.Tensor:
    return (torch.rand(n, FEATURES, generator=torch.Generator().manual_seed(seed)) > 0.5).float()


def normal_noise(loc: torch.Tensor) -> torch.Tensor:
    """Standard normal noise of ``loc``'s shape, drawn as a reparameterised sample draws it."""
    return torch.empty_like(loc).normal_()


def bernoulli_log_likelihood(x: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """``sum_d x_d log sigmoid(l_d) + (1 - x_d) log(1 - sigmoid(l_d))`` per point ``(B,)``."""
    return (x * logits - F.softplus(logits)).sum(-1)


def normal_log_density(x: torch.Tensor, loc: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``log N(x; loc, diag scale^2)`` summed over the last dimension."""
    return (-0.5 * ((x - loc) / scale).pow(2) - scale.log() - 0.5 * LOG_2PI).sum(-1)


def gaussian_kl(loc_q, scale_q, loc_p, scale_p) -> torch.Tensor:
    """``KL(N(loc_q, scale_q^2) || N(loc_p, scale_p^2))`` of diagonal Gaussians, summed over the last dimension."""
    variance_q, variance_p = scale_q.pow(2), scale_p.pow(2)
    return 0.5 * (variance_q / variance_p + (loc_q - loc_p).pow(2) / variance_p - 1 + variance_p.log() - variance_q.log()).sum(-1)


def assert_same_loss_and_gradients(library: torch.Tensor, by_hand: torch.Tensor, parameters: list[torch.nn.Parameter]) -> None:
    torch.testing.assert_close(library, by_hand, rtol=1e-5, atol=1e-4)
    library_grads = torch.autograd.grad(library, parameters, retain_graph=True, allow_unused=True)
    hand_grads = torch.autograd.grad(by_hand, parameters, allow_unused=True)
    for parameter, ours, expected in zip(parameters, library_grads, hand_grads, strict=True):
        ours = torch.zeros_like(parameter) if ours is None else ours
        expected = torch.zeros_like(parameter) if expected is None else expected
        torch.testing.assert_close(ours, expected, rtol=1e-4, atol=1e-5)


# --- PartedVAE, Eq. 6 ----------------------------------------------------------------------


def parted_model(num_classes) -> PartedVAE:
    torch.manual_seed(0)
    model = PartedVAE.mlp((FEATURES,), z_dim=2, num_classes=num_classes, u_dims=2, hidden=(16,))
    with torch.no_grad():  # overlapping class priors: the Bhattacharyya hinge is active
        for prior in model.class_priors:
            prior.loc.mul_(0.05)
            prior.log_variance_logit.uniform_(-0.5, 0.5)
    return model


def bhattacharyya_coefficient(loc_1, variance_1, loc_2, variance_2) -> torch.Tensor:
    """App. A.1: ``exp(-D_B)`` of two diagonal Gaussians,
    ``D_B = 1/8 (mu_1 - mu_2)^T S^-1 (mu_1 - mu_2) + 1/2 log(det S / sqrt(det S_1 det S_2))``, ``S = (S_1 + S_2) / 2``."""
    mean_variance = 0.5 * (variance_1 + variance_2)
    distance = 0.125 * ((loc_1 - loc_2).pow(2) / mean_variance).sum() + 0.5 * (
        mean_variance.log().sum() - 0.5 * (variance_1.log().sum() + variance_2.log().sum())
    )
    return torch.exp(-distance)


def parted_eq6(model: PartedVAE, objective: PartedELBO, x: torch.Tensor, y: torch.Tensor | None, t: int) -> torch.Tensor:
    r"""``sum_n -log p(x_n | z_n, u_n) + B [gamma_z |KL_z - C_z(t)| + gamma_u |KL_u - C_u(t)|
    + gamma_H H + gamma_c KL(qhat(c) || p(c)) + gamma_BC sum_{j<k} max(BC_jk - delta, 0)]``,
    each KL, H and qhat a minibatch average, summed over the categorical variables; given labels
    ``y (B, V)`` q(c|x) is their one-hot code and H and the aggregate KL vanish."""
    weights = {term.name: term.weight for term in objective.terms}
    capacity_z, capacity_u = objective.term("capacity_z").capacity, objective.term("capacity_u").capacity
    delta = objective.term("bhattacharyya").delta
    batch = x.shape[0]
    pyro.set_rng_seed(SEED)
    h = model.encoder(x)
    z_loc, z_scale = model.z_head(h)
    z = z_loc + z_scale * normal_noise(z_loc)
    latents, kl_u, entropy, aggregate_kl, overlap = [z], 0.0, 0.0, 0.0, 0.0
    sharpness = model.sharpness_at(t)
    for i, size in enumerate(model.num_classes):
        if y is None:
            logits = model.class_heads[i](h)
            gumbel = -torch.log(-torch.log(torch.rand_like(logits)))
            c = torch.softmax((logits + gumbel) / model.temperature, dim=-1)  # Gumbel-softmax
            log_q = torch.log_softmax(logits, dim=-1)
            q = log_q.exp()
            entropy = entropy - (q * log_q).sum(-1).mean()
            q_hat = q.mean(0)
            p_c = torch.full((size,), 1.0 / size)
            aggregate_kl = aggregate_kl + (q_hat * (q_hat.log() - p_c.log())).sum()
        else:
            q = c = F.one_hot(y[:, i], size).float()
        u_loc, u_scale = model.u_heads[i](h * model.attention[i](c, sharpness))
        latents.append(u_loc + u_scale * normal_noise(u_loc))
        priors = model.class_priors[i]().base_dist
        prior_loc, prior_scale = priors.loc, priors.scale
        kl_to_class = torch.stack(
            [gaussian_kl(u_loc, u_scale, prior_loc[k], prior_scale[k]) for k in range(size)], dim=-1
        )
        kl_u = kl_u + (q * kl_to_class).sum(-1).mean()
        for j, k in itertools.combinations(range(size), 2):
            bc = bhattacharyya_coefficient(prior_loc[j], prior_scale[j].pow(2), prior_loc[k], prior_scale[k].pow(2))
            overlap = overlap + torch.clamp(bc - delta, min=0.0)
    reconstruction = -bernoulli_log_likelihood(x, model.decoder(torch.cat(latents, dim=-1))).sum()
    kl_z = gaussian_kl(z_loc, z_scale, torch.zeros(()), torch.ones(())).mean()
    penalties = (
        weights["capacity_z"] * (kl_z - capacity_z(t)).abs()
        + weights["capacity_u"] * (kl_u - capacity_u(t)).abs()
        + weights["entropy"] * entropy
        + weights["aggregate_kl"] * aggregate_kl
        + weights["bhattacharyya"] * overlap
    )
    return reconstruction + batch * penalties


@pytest.mark.parametrize("num_classes", [3, (4, 2)], ids=["one variable", "two variables"])
@pytest.mark.parametrize("labelled", [False, True], ids=["unlabelled", "labelled"])
def test_parted_loss_is_eq_6_written_out(num_classes, labelled):
    model = parted_model(num_classes)
    objective = PartedELBO(
        z_capacity=LinearCapacity(0.0, 10.0, 100), u_capacity=LinearCapacity(1.0, 4.0, 100),
        gamma_z=3.0, gamma_u=5.0, gamma_c=7.0, gamma_h=2.0, gamma_bc=11.0, delta=0.05,
    )
    x, t = binary(16, 1), 40
    sizes = (num_classes,) if isinstance(num_classes, int) else num_classes
    y = torch.stack([torch.arange(16) % size for size in sizes], dim=-1) if labelled else None
    pyro.set_rng_seed(SEED)
    loss = objective.differentiable_loss(model.model, model.guide, x, y, step=t)
    assert objective.logged["bhattacharyya"] > 0
    assert_same_loss_and_gradients(loss, parted_eq6(model, objective, x, y, t), list(model.parameters()))


def test_parted_classifier_step_is_the_cross_entropy_of_q_c():
    r"""``L_S = -(1/B) sum_n sum_i log q(c_i = y_{n,i} | x_n)``."""
    model = parted_model((4, 2))
    objective = PartedELBO(z_capacity=LinearCapacity(0.0, 10.0, 100), u_capacity=LinearCapacity(0.0, 4.0, 100))
    (step,) = objective.auxiliary_steps(model)
    x, y = binary(8, 2), torch.tensor([[0, 1], [1, 0], [2, 1], [3, 0], [0, 0], [1, 1], [2, 0], [3, 1]])
    h = model.encoder(x)
    by_hand = 0.0
    for i, head in enumerate(model.class_heads):
        log_q = torch.log_softmax(head(h), dim=-1)
        by_hand = by_hand - log_q[torch.arange(8), y[:, i]].mean()
    assert_same_loss_and_gradients(step.loss(x=x, y=y), by_hand, list(model.parameters()))


# --- Contrastive VAE, Eqs. 3-5 -------------------------------------------------------------


def discriminator_logit(discriminator: TCDiscriminator, v: torch.Tensor, detach: bool = False) -> torch.Tensor:
    """D's logit: affine layers with LeakyReLU(0.2) between them, ``(B,)``; with ``detach``
    D's parameters get no gradient."""
    layers = [module for module in discriminator.net if isinstance(module, torch.nn.Linear)]
    for index, layer in enumerate(layers):
        weight, bias = (layer.weight.detach(), layer.bias.detach()) if detach else (layer.weight, layer.bias)
        v = v @ weight.T + bias
        if index < len(layers) - 1:
            v = torch.where(v > 0, v, 0.2 * v)
    return v.squeeze(-1)


def contrastive_eqs_3_to_5(model: ContrastiveVAE, objective: ContrastiveELBO, target, background) -> torch.Tensor:
    r"""``-(N_t/B_t) sum_n [log p(x_n|s_n,z_n) - KL(q(s|x_n)||N(0,I)) - KL(q(z|x_n)||N(0,I))]
    - (N_b/B_b) sum_m [log p(b_m|0,z_m) - KL(q(z|b_m)||N(0,I))] + gamma N_t mean_n logit D([s_n, z_n])``,
    Gaussian likelihood of fixed scale sigma; the ELBO's gradient does not reach D."""
    sigma = torch.tensor(model.likelihood_scale)
    standard = (torch.zeros(()), torch.ones(()))
    pyro.set_rng_seed(SEED)
    s_loc, s_scale = model.salient_head(model.salient_encoder(target))
    z_loc, z_scale = model.shared_head(model.shared_encoder(target))
    b_loc, b_scale = model.shared_head(model.shared_encoder(background))
    s, z = s_loc + s_scale * normal_noise(s_loc), z_loc + z_scale * normal_noise(z_loc)
    b = b_loc + b_scale * normal_noise(b_loc)
    target_elbo = (
        normal_log_density(target, model.decoder(torch.cat([s, z], -1)), sigma)
        - gaussian_kl(s_loc, s_scale, *standard) - gaussian_kl(z_loc, z_scale, *standard)
    )
    salient_off = torch.zeros(len(b), s.shape[-1])
    background_elbo = (
        normal_log_density(background, model.decoder(torch.cat([salient_off, b], -1)), sigma)
        - gaussian_kl(b_loc, b_scale, *standard)
    )
    total_correlation = discriminator_logit(objective.discriminator, torch.cat([s, z], -1), detach=True)
    n_target, n_background = model.target_size, model.background_size
    return (
        -(n_target / len(target)) * target_elbo.sum()
        - (n_background / len(background)) * background_elbo.sum()
        + objective.gamma * n_target * total_correlation.mean()
    )


@pytest.mark.parametrize("kind", ["linear", "mlp"])
def test_contrastive_loss_is_eqs_3_to_5_with_the_density_ratio_tc(kind):
    torch.manual_seed(0)
    model = ContrastiveVAE.mlp((FEATURES,), 2, 3, hidden=16, likelihood="gaussian", likelihood_scale=0.7,
                               target_size=40, background_size=30)
    objective = ContrastiveELBO(gamma=2.5, discriminator=kind, discriminator_hidden=(8,))
    objective.discriminator.build(5)
    target, background = torch.randn(8, FEATURES), torch.randn(6, FEATURES)
    pyro.set_rng_seed(SEED)
    loss = objective.differentiable_loss(model.model, model.guide, target=target, background=background)
    by_hand = contrastive_eqs_3_to_5(model, objective, target, background)
    assert_same_loss_and_gradients(loss, by_hand, [*model.parameters(), *objective.discriminator.parameters()])


def test_discriminator_loss_is_the_logistic_loss_of_joint_against_permuted_pairs():
    r"""``mean_n [-log sigmoid(D([s_n, z_n])) - log(1 - sigmoid(D([s_n, z_pi(n)])))]`` for a
    permutation pi of the batch: for every seed the value is the hand-written loss of one of
    the B! permutations, and over the seeds more than one permutation occurs."""
    torch.manual_seed(0)
    discriminator = TCDiscriminator("mlp", hidden=(8,)).build(4)
    s, z = torch.randn(4, 2), torch.randn(4, 2)
    joint = -F.logsigmoid(discriminator_logit(discriminator, torch.cat([s, z], -1))).mean()

    def by_hand(order) -> torch.Tensor:
        permuted = discriminator_logit(discriminator, torch.cat([s, z[list(order)]], -1))
        return joint - torch.log1p(-torch.sigmoid(permuted)).mean()

    candidates = {order: by_hand(order) for order in itertools.permutations(range(4))}
    seen = set()
    for seed in range(12):
        torch.manual_seed(seed)
        value = discriminator_loss(discriminator, s, z)
        matches = [order for order, expected in candidates.items() if torch.allclose(value, expected, rtol=1e-6, atol=1e-6)]
        assert matches, f"seed {seed}: {float(value)} is no permutation's logistic loss"
        seen.update(matches)
    assert len(seen) > 1  # a random permutation, not a fixed pairing


# --- Decomposition VAE, Eq. 7 --------------------------------------------------------------

MMD_CONSTANTS = (0.2, 0.4, 1.0, 2.0, 4.0, 10.0)  # the C_l of Eq. 10


def laplace_log_likelihood(x: torch.Tensor, loc: torch.Tensor, scale: float) -> torch.Tensor:
    """``sum_d log Laplace(x_d; loc_d, scale)`` per point ``(B,)``."""
    return (-(x - loc).abs() / scale - math.log(2 * scale)).sum(-1)


def student_t_log_density(z: torch.Tensor, df: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Factored zero-mean Student-t, summed over dimensions."""
    return (
        torch.lgamma((df + 1) / 2) - torch.lgamma(df / 2) - 0.5 * torch.log(df * math.pi) - scale.log()
        - (df + 1) / 2 * torch.log1p((z / scale).pow(2) / df)
    ).sum(-1)


def mixture_log_density(z: torch.Tensor, prior: MixtureOfGaussiansPrior) -> torch.Tensor:
    """``log sum_k pi_k N(z; mu_k, diag v_k)`` for ``z (B, D)``."""
    per_component = torch.stack(
        [prior.weights[k].log() + normal_log_density(z, prior.means[k], prior.variances[k].sqrt())
         for k in range(prior.num_components)], dim=-1,
    )
    return torch.logsumexp(per_component, dim=-1)


def sparse_log_density(z: torch.Tensor, prior: SparsePrior) -> torch.Tensor:
    """``sum_d log[(1 - gamma) N(z_d; 0, 1) + gamma N(z_d; 0, sigma0^2)]``."""
    slab = math.log(1 - prior.gamma) - 0.5 * z.pow(2) - 0.5 * LOG_2PI
    spike = math.log(prior.gamma) - 0.5 * (z / prior.sigma0).pow(2) - math.log(prior.sigma0) - 0.5 * LOG_2PI
    return torch.logaddexp(slab, spike).sum(-1)


def cauchy_kernel(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Eq. 10: ``k(a, b) = sum_d sum_l C_l / (C_l + (a_d - b_d)^2)``."""
    return sum(c / (c + (a - b).pow(2)) for c in MMD_CONSTANTS).sum()


def mmd(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    r"""``1/(n(n-1)) sum_{i != j} k(x_i, x_j) + 1/(m(m-1)) sum_{i != j} k(y_i, y_j) - 2/(nm) sum_{i,j} k(x_i, y_j)``."""
    n, m = len(x), len(y)
    within_x = sum(cauchy_kernel(x[i], x[j]) for i in range(n) for j in range(n) if i != j)
    within_y = sum(cauchy_kernel(y[i], y[j]) for i in range(m) for j in range(m) if i != j)
    cross = sum(cauchy_kernel(x[i], y[j]) for i in range(n) for j in range(m))
    return within_x / (n * (n - 1)) + within_y / (m * (m - 1)) - 2 * cross / (n * m)


def inclusive_kl(prior_z: torch.Tensor, prior_log_density: torch.Tensor, loc: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    r"""App. B: ``mean_i [log p(z'_i) - log q(z'_i)]``, ``q(z) = (1/B) sum_j N(z; loc_j, scale_j^2)``."""
    log_q = torch.stack([normal_log_density(prior_z, loc[j], scale[j]) for j in range(len(loc))], dim=-1)
    return (prior_log_density - (torch.logsumexp(log_q, dim=-1) - math.log(len(loc)))).mean()


DECOMPOSITION_PRIORS = {
    "isotropic": lambda: IsotropicGaussianPrior(2),
    "learned anisotropic": lambda: AnisotropicGaussianPrior(2, [0.5, -0.5], learn=True),
    "learned student-t": lambda: StudentTPrior(2, df=3.0, learn=True),
    "pinwheel mixture": lambda: MixtureOfGaussiansPrior.pinwheel(),
    "sparse": lambda: SparsePrior(2, gamma=0.8),
}


def per_point_kl(prior, loc: torch.Tensor, scale: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """KL(q(z|x_n) || p(z)) per point: in closed form for the Gaussian priors, else
    ``log q(z_n|x_n) - log p(z_n)`` at the guide's sample."""
    if isinstance(prior, (IsotropicGaussianPrior, AnisotropicGaussianPrior)):
        return gaussian_kl(loc, scale, torch.zeros(()), prior().base_dist.scale)
    return normal_log_density(z, loc, scale) - prior_log_density(prior, z)


def prior_log_density(prior, z: torch.Tensor) -> torch.Tensor:
    if isinstance(prior, StudentTPrior):
        return student_t_log_density(z, prior.df, prior.scale)
    if isinstance(prior, MixtureOfGaussiansPrior):
        return mixture_log_density(z, prior)
    if isinstance(prior, SparsePrior):
        return sparse_log_density(z, prior)
    return normal_log_density(z, torch.zeros(()), prior().base_dist.scale)


def decomposition_eq7(model: DecompositionVAE, objective: DecompositionELBO, x: torch.Tensor) -> torch.Tensor:
    r"""``-(N/B) sum_n [log p(x_n|z_n) - beta KL(q(z|x_n) || p(z))] + alpha N D(q(z), p(z))``,
    Laplace likelihood, one prior draw ``z'_n`` per point (taken after the guide's sample)."""
    batch, size = x.shape[0], model.data_size
    pyro.set_rng_seed(SEED)
    loc, scale = model.head(model.encoder(x))
    z = loc + scale * normal_noise(loc)
    prior_distribution = model.prior().expand([batch])
    prior_z = prior_distribution.rsample() if prior_distribution.has_rsample else prior_distribution.sample()
    elbo = laplace_log_likelihood(x, model.decoder(z), model.likelihood_scale) - objective.beta * per_point_kl(model.prior, loc, scale, z)
    if objective.divergence == "mmd":
        divergence = mmd(z, prior_z)
    else:
        divergence = inclusive_kl(prior_z, prior_log_density(model.prior, prior_z), loc, scale)
    return -(size / batch) * elbo.sum() + objective.alpha * size * divergence


@pytest.mark.parametrize("divergence", ["mmd", "inclusive_kl"])
@pytest.mark.parametrize("prior", sorted(DECOMPOSITION_PRIORS))
def test_decomposition_loss_is_eq_7_written_out(prior, divergence):
    torch.manual_seed(0)
    encoder, decoder = MLP([FEATURES, 16], final_activation=torch.nn.ReLU()), mlp_decoder(2, [16], (FEATURES,))
    model = DecompositionVAE(encoder, decoder, 2, DECOMPOSITION_PRIORS[prior](), "laplace", 0.3, data_size=40)
    objective = DecompositionELBO(beta=0.5, alpha=3.0, divergence=divergence)
    x = torch.rand(10, FEATURES, generator=torch.Generator().manual_seed(3))
    pyro.set_rng_seed(SEED)
    loss = objective.differentiable_loss(model.model, model.guide, x)
    assert_same_loss_and_gradients(loss, decomposition_eq7(model, objective, x), list(model.parameters()))
