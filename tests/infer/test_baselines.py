"""The disentangling baselines' terms (beta-TCVAE's KL decomposition, DIP-VAE's covariance
penalty, FactorVAE's total correlation): each term's value and gradient on fixed inputs equal an
independent computation from the paper's equation, and the published code's formula ported here
(rtqichen/beta-tcvae's ``vae_quant.py`` and ``elbo_decomposition.py``, disentanglement_lib's
``methods/unsupervised/vae.py``); every preset trains on a library VAE and on a user's own model."""
import math
from typing import Any

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro import poutine
from pyro.infer import SVI
from torch import nn

from ppl_vae.infer import (
    DIPCovariance,
    FactorTotalCorrelation,
    KLDecomposition,
    LinearCapacity,
    MeanFieldELBO,
    TermSites,
    TrainingIteration,
    annealed_beta_vae,
    beta_tcvae,
    beta_vae,
    dip_vae,
    factor_vae,
    info_vae,
    permute_factors,
)
from ppl_vae.infer.total_correlation import density_ratio_loss
from ppl_vae.models import VAE
from ppl_vae.nn import MLP, TCDiscriminator, mlp_decoder

B, D, N = 6, 3, 50


def fixed_inputs(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Encoder means and scales (leaves with gradients) and the standard normal noise of z."""
    generator = torch.Generator().manual_seed(seed)
    loc = torch.randn(B, D, generator=generator, dtype=torch.float64).requires_grad_()
    scale = (0.3 + torch.rand(B, D, generator=generator, dtype=torch.float64)).requires_grad_()
    noise = torch.randn(B, D, generator=generator, dtype=torch.float64)
    return loc, scale, noise


def term_sites(loc: torch.Tensor, scale: torch.Tensor, noise: torch.Tensor) -> TermSites:
    """What a term reads when the guide draws z = loc + scale * noise from N(loc, scale) and the
    prior is N(0, I): the sites of a Pyro model and guide, traced."""
    z = loc + scale * noise

    def guide():
        with pyro.plate("data", loc.shape[0]):
            pyro.sample("z", dist.Normal(loc, scale).to_event(1), obs=z)

    def model():
        with pyro.plate("data", loc.shape[0]):
            pyro.sample("z", dist.Normal(torch.zeros_like(loc), 1.0).to_event(1), obs=z)

    guide_trace = poutine.trace(guide).get_trace()
    model_trace = poutine.trace(model).get_trace()
    return TermSites(guide_trace, {k: v for k, v in model_trace.nodes.items() if v["type"] == "sample"}, None, guide)


def vectorized_term_sites(loc: torch.Tensor, scale: torch.Tensor, noise: torch.Tensor) -> TermSites:
    """:func:`term_sites` of P particles drawn at once, as Pyro's ``vectorize_particles`` draws
    them: ``noise (P, B, D)``, ``loc`` and ``scale`` ``(B, D)`` or one per particle
    ``(P, B, D)``, the particles in a plate left of the data plate."""
    z = loc + scale * noise

    def guide():
        with pyro.plate("particles", noise.shape[0], dim=-2), pyro.plate("data", noise.shape[1], dim=-1):
            pyro.sample("z", dist.Normal(loc, scale).to_event(1), obs=z)

    def model():
        with pyro.plate("particles", noise.shape[0], dim=-2), pyro.plate("data", noise.shape[1], dim=-1):
            pyro.sample("z", dist.Normal(torch.zeros_like(z), 1.0).to_event(1), obs=z)

    guide_trace = poutine.trace(guide).get_trace()
    model_trace = poutine.trace(model).get_trace()
    return TermSites(guide_trace, {k: v for k, v in model_trace.nodes.items() if v["type"] == "sample"}, None, guide)


def grads(value: torch.Tensor, loc: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return torch.autograd.grad(value, (loc, scale), retain_graph=True, materialize_grads=True)


def assert_same_value_and_gradient(ours: torch.Tensor, reference: torch.Tensor, loc, scale) -> None:
    torch.testing.assert_close(ours, reference)
    for mine, theirs in zip(grads(ours, loc, scale), grads(reference, loc, scale), strict=True):
        torch.testing.assert_close(mine, theirs)


# --- beta-TCVAE (Chen et al. 2018) -----------------------------------------------------------


def normal_density(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    return torch.exp(-0.5 * ((x - mean) / std) ** 2) / (std * math.sqrt(2 * math.pi))


def paper_weight(i: int, j: int, estimator: str) -> float:
    """w_ij of q(z_i) ~ sum_j w_ij q(z_i | x_j): MWS 1/(NM); MSS (Appendix C.2) 1/N for the
    point itself, (N - M + 1)/(N (M - 1)) for one other (the next) and 1/(M - 1) for the rest."""
    if estimator == "mws":
        return 1.0 / (N * B)
    if j == i:
        return 1.0 / N
    if j == (i + 1) % B:
        return (N - B + 1) / (N * (B - 1))
    return 1.0 / (B - 1)


def paper_decomposition(loc, scale, noise, estimator: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(MI, TC, dimension-wise KL) of Eq. 2, term by term, with densities (not logs) summed over j."""
    z = loc + scale * noise
    mi = tc = dim_kl = 0.0
    for i in range(B):
        q_given_x = torch.prod(normal_density(z[i], loc[i], scale[i]))
        q = sum(paper_weight(i, j, estimator) * torch.prod(normal_density(z[i], loc[j], scale[j])) for j in range(B))
        marginals = torch.prod(torch.stack([
            sum(paper_weight(i, j, estimator) * normal_density(z[i, d], loc[j, d], scale[j, d]) for j in range(B))
            for d in range(D)
        ]))
        p = torch.prod(normal_density(z[i], torch.zeros(()), torch.ones(())))
        mi = mi + torch.log(q_given_x / q) / B
        tc = tc + torch.log(q / marginals) / B
        dim_kl = dim_kl + torch.log(marginals / p) / B
    return mi, tc, dim_kl


@pytest.mark.parametrize("estimator", ["mws", "mss"])
def test_kl_decomposition_equals_the_papers_equation_in_value_and_gradient(estimator):
    loc, scale, noise = fixed_inputs()
    term = KLDecomposition("z", N, alpha=0.5, beta=6.0, gamma=2.0, estimator=estimator)

    value, parts = term.evaluate(term_sites(loc, scale, noise))
    mi, tc, dim_kl = paper_decomposition(loc, scale, noise, estimator)

    assert_same_value_and_gradient(parts["mutual_information"], mi, loc, scale)
    assert_same_value_and_gradient(parts["total_correlation"], tc, loc, scale)
    assert_same_value_and_gradient(parts["dimension_kl"], dim_kl, loc, scale)
    assert_same_value_and_gradient(value, 0.5 * mi + 6.0 * tc + 2.0 * dim_kl, loc, scale)


@pytest.mark.parametrize("estimator", ["mws", "mss"])
def test_kl_decomposition_parts_add_up_to_the_monte_carlo_kl(estimator):
    loc, scale, noise = fixed_inputs(1)
    z = loc + scale * noise
    _, parts = KLDecomposition("z", N, estimator=estimator).evaluate(term_sites(loc, scale, noise))
    kl = (dist.Normal(loc, scale).log_prob(z) - dist.Normal(0.0, 1.0).log_prob(z)).sum(-1).mean()
    torch.testing.assert_close(sum(parts.values()), kl)


def authors_log_importance_weight_matrix(batch_size: int, dataset_size: int) -> torch.Tensor:
    """rtqichen/beta-tcvae ``vae_quant.py`` ``_log_importance_weight_matrix``, with its strides
    corrected to the diagonal and the row of the last point (their pull request #1): theirs,
    ``[::M+1]``, steps down the first column."""
    n = dataset_size
    m = batch_size - 1
    strat_weight = (n - m) / (n * m)
    w = torch.empty(batch_size, batch_size, dtype=torch.float64).fill_(1 / m)
    w.view(-1)[:: m + 2] = 1 / n
    w.view(-1)[1 :: m + 2] = strat_weight
    w[m, 0] = strat_weight
    return w.log()


def authors_elbo_terms(loc, scale, noise, dataset_size: int, mss: bool) -> tuple[torch.Tensor, ...]:
    """rtqichen/beta-tcvae ``vae_quant.py`` ``VAE.elbo``: log q(z|x), log q(z), log prod_d q(z_d),
    log p(z) per point (their Normal's ``log_density`` with logsigma)."""
    batch_size = loc.shape[0]
    zs = loc + scale * noise
    logsigma = scale.log()

    def log_density(sample, mu, logsigma):
        tmp = (sample - mu) * torch.exp(-logsigma)
        return -0.5 * (tmp * tmp + 2 * logsigma + math.log(2 * math.pi))

    logpz = log_density(zs, torch.zeros_like(zs), torch.zeros_like(zs)).sum(1)
    logqz_condx = log_density(zs, loc, logsigma).sum(1)
    _logqz = log_density(zs.view(batch_size, 1, -1), loc.view(1, batch_size, -1), logsigma.view(1, batch_size, -1))
    if not mss:
        logqz_prodmarginals = (torch.logsumexp(_logqz, dim=1) - math.log(batch_size * dataset_size)).sum(1)
        logqz = torch.logsumexp(_logqz.sum(2), dim=1) - math.log(batch_size * dataset_size)
    else:
        logiw_matrix = authors_log_importance_weight_matrix(batch_size, dataset_size)
        logqz = torch.logsumexp(logiw_matrix + _logqz.sum(2), dim=1)
        logqz_prodmarginals = torch.logsumexp(logiw_matrix.view(batch_size, batch_size, 1) + _logqz, dim=1).sum(1)
    return logqz_condx, logqz, logqz_prodmarginals, logpz


@pytest.mark.parametrize("estimator", ["mws", "mss"])
def test_kl_decomposition_equals_the_authors_modified_elbo(estimator):
    loc, scale, noise = fixed_inputs(2)
    beta = 6.0
    value, _ = KLDecomposition("z", N, beta=beta, estimator=estimator).evaluate(term_sites(loc, scale, noise))

    logqz_condx, logqz, logqz_prodmarginals, logpz = authors_elbo_terms(loc, scale, noise, N, estimator == "mss")
    # modified_elbo = logpx - (logqz_condx - logqz) - beta (logqz - logqz_prodmarginals) - (1 - lamb) (...), lamb = 0
    kl_part = ((logqz_condx - logqz) + beta * (logqz - logqz_prodmarginals) + (logqz_prodmarginals - logpz)).mean()
    assert_same_value_and_gradient(value, kl_part, loc, scale)


def test_kl_decomposition_over_the_whole_data_set_is_the_authors_elbo_decomposition_up_to_log_n():
    """rtqichen/beta-tcvae ``elbo_decomposition.py`` (``estimate_entropies``, S = 1) takes
    log q(z) = logsumexp_n log q(z|x_n) - log N over the whole data set; with the batch the whole
    set (M = N), MWS's - log(N M) takes log N more from log q(z) and each log q(z_d)."""
    loc, scale, noise = fixed_inputs(3)
    qz_samples = (loc + scale * noise).T  # (K, S): the authors' layout, one sample per point
    size = loc.shape[0]

    def log_density(sample, mu, logsigma):
        tmp = (sample - mu) * torch.exp(-logsigma)
        return -0.5 * (tmp * tmp + 2 * logsigma + math.log(2 * math.pi))

    logqz_i = log_density(qz_samples.view(1, D, size), loc.view(size, D, 1), scale.log().view(size, D, 1))
    marginal_entropies = (math.log(size) - torch.logsumexp(logqz_i, dim=0)).sum(1) / size
    joint_entropy = (math.log(size) - torch.logsumexp(logqz_i.sum(1), dim=0)).sum(0) / size
    nlogpz = -log_density(qz_samples.T, torch.zeros(()), torch.zeros(())).mean(0)
    dependence = -joint_entropy + marginal_entropies.sum()
    dimwise_kl = (-marginal_entropies + nlogpz).sum()

    _, parts = KLDecomposition("z", data_size=size).evaluate(term_sites(loc, scale, noise))

    assert_same_value_and_gradient(parts["total_correlation"], dependence + (D - 1) * math.log(size), loc, scale)
    assert_same_value_and_gradient(parts["dimension_kl"], dimwise_kl - D * math.log(size), loc, scale)


def disentanglement_lib_total_correlation(z, z_mean, z_logvar) -> torch.Tensor:
    """disentanglement_lib ``vae.py`` ``total_correlation`` (TensorFlow ported to torch)."""
    def gaussian_log_density(samples, mean, log_var):
        normalization = math.log(2.0 * math.pi)
        inv_sigma = torch.exp(-log_var)
        tmp = samples - mean
        return -0.5 * (tmp * tmp * inv_sigma + log_var + normalization)

    log_qz_prob = gaussian_log_density(z.unsqueeze(1), z_mean.unsqueeze(0), z_logvar.unsqueeze(0))
    log_qz_product = torch.logsumexp(log_qz_prob, dim=1).sum(dim=1)
    log_qz = torch.logsumexp(log_qz_prob.sum(dim=2), dim=1)
    return (log_qz - log_qz_product).mean()


def test_total_correlation_part_is_disentanglement_libs_up_to_its_dropped_constant():
    """Their docstring: 'The constant should be equal to (num_latents - 1) * log(batch_size * dataset_size)'."""
    loc, scale, noise = fixed_inputs(4)
    _, parts = KLDecomposition("z", N).evaluate(term_sites(loc, scale, noise))
    theirs = disentanglement_lib_total_correlation(loc + scale * noise, loc, 2 * scale.log())
    assert_same_value_and_gradient(parts["total_correlation"], theirs + (D - 1) * math.log(B * N), loc, scale)


# --- DIP-VAE (Kumar et al. 2018) ---------------------------------------------------------------


def paper_dip(loc, scale, kind: str, lambda_od: float, lambda_d: float) -> torch.Tensor:
    """Eqs. 6-7 entry by entry: Cov_p(x)[mu(x)] (+ E_p(x)[diag sigma^2(x)] for DIP-VAE-II)."""
    mean = [sum(loc[n, i] for n in range(B)) / B for i in range(D)]
    total = 0.0
    for i in range(D):
        for j in range(D):
            c = sum((loc[n, i] - mean[i]) * (loc[n, j] - mean[j]) for n in range(B)) / B
            if kind == "ii" and i == j:
                c = c + sum(scale[n, i] ** 2 for n in range(B)) / B
            total = total + (lambda_d * (c - 1) ** 2 if i == j else lambda_od * c**2)
    return total


def disentanglement_lib_dip(z_mean, z_logvar, kind: str, lambda_od: float, lambda_d: float) -> torch.Tensor:
    """disentanglement_lib ``vae.py``: ``compute_covariance_z_mean``, ``regularize_diag_off_diag_dip``
    and ``DIPVAE.regularizer`` without its KL."""
    expectation_z_mean_z_mean_t = (z_mean.unsqueeze(2) * z_mean.unsqueeze(1)).mean(0)
    expectation_z_mean = z_mean.mean(0)
    cov = expectation_z_mean_z_mean_t - expectation_z_mean.unsqueeze(1) * expectation_z_mean.unsqueeze(0)
    if kind == "ii":
        cov = torch.diag_embed(torch.exp(z_logvar)).mean(0) + cov
    diagonal = torch.diagonal(cov)
    off_diagonal = cov - torch.diag(diagonal)
    return lambda_od * (off_diagonal**2).sum() + lambda_d * ((diagonal - 1) ** 2).sum()


@pytest.mark.parametrize("kind", ["i", "ii"])
def test_dip_penalty_equals_the_papers_equation_and_disentanglement_libs_formula(kind):
    loc, scale, noise = fixed_inputs(5)
    value, parts = DIPCovariance("z", lambda_od=2.0, lambda_d=20.0, kind=kind).evaluate(term_sites(loc, scale, noise))

    assert_same_value_and_gradient(value, paper_dip(loc, scale, kind, 2.0, 20.0), loc, scale)
    assert_same_value_and_gradient(value, disentanglement_lib_dip(loc, 2 * scale.log(), kind, 2.0, 20.0), loc, scale)
    torch.testing.assert_close(2.0 * parts["off_diagonal"] + 20.0 * parts["diagonal"], value)


def test_dip_vae_preset_takes_the_papers_diagonal_weights():
    assert dip_vae("i", lambda_od=5.0).terms[0].lambda_d == 50.0
    assert dip_vae("ii", lambda_od=5.0).terms[0].lambda_d == 5.0
    with pytest.raises(ValueError, match="kind"):
        dip_vae("iii", lambda_od=1.0)


# --- FactorVAE (Kim & Mnih 2018) ---------------------------------------------------------------


def linear_discriminator(seed: int) -> TCDiscriminator:
    torch.manual_seed(seed)
    return TCDiscriminator("linear").build(D).double()


def test_factor_tc_is_the_mean_log_density_ratio_and_disentanglement_libs_logit_difference():
    loc, scale, noise = fixed_inputs(6)
    term = FactorTotalCorrelation("z", gamma=10.0, discriminator="linear")
    term.discriminator = linear_discriminator(0)
    value, _ = term.evaluate(term_sites(loc, scale, noise))

    z = loc + scale * noise
    weight, bias = term.discriminator.net[0].weight.detach(), term.discriminator.net[0].bias.detach()
    probability = torch.sigmoid(z @ weight.T + bias).squeeze(-1)
    paper = torch.log(probability / (1 - probability)).mean()  # Kim & Mnih: E log D / (1 - D)
    # disentanglement_lib: a two-logit discriminator, tc = mean(logits[:, 0] - logits[:, 1]);
    # the two logits [l, 0] give softmax probability sigmoid(l)
    logits = torch.cat([z @ weight.T + bias, torch.zeros(B, 1, dtype=z.dtype)], dim=1)
    theirs = (logits[:, 0] - logits[:, 1]).mean()

    assert_same_value_and_gradient(value, paper, loc, scale)
    assert_same_value_and_gradient(value, theirs, loc, scale)


def test_factor_tc_gradient_never_reaches_its_discriminator():
    loc, scale, noise = fixed_inputs(6)
    term = FactorTotalCorrelation("z", gamma=10.0, discriminator="linear")
    term.discriminator = linear_discriminator(0)
    value, _ = term.evaluate(term_sites(loc, scale, noise))
    value.backward()
    assert all(p.grad is None for p in term.discriminator.parameters())


def test_permuted_factors_keep_the_first_and_permute_each_other_dimension_on_its_own():
    v = torch.arange(200.0).reshape(40, 5) + 1000 * torch.arange(5.0)
    torch.manual_seed(0)
    permuted = permute_factors(v, (1,) * 5)
    torch.testing.assert_close(permuted[:, 0], v[:, 0])
    orders = []
    for d in range(1, 5):
        assert sorted(permuted[:, d].tolist()) == v[:, d].tolist()  # each column a permutation of its own
        orders.append(((permuted[:, d] - 1000 * d) / 5).long())
    assert len({tuple(order.tolist()) for order in orders}) == 4, "one permutation per dimension"


def test_factor_discriminator_loss_is_twice_disentanglement_libs_on_the_same_shuffle():
    loc, scale, noise = fixed_inputs(7)
    z = (loc + scale * noise).detach()
    discriminator = linear_discriminator(1)
    torch.manual_seed(3)
    ours = density_ratio_loss(discriminator, z, (1,) * D)
    torch.manual_seed(3)
    z_shuffle = permute_factors(z, (1,) * D)

    def probs(x):  # a two-logit softmax discriminator with logits [l, 0]
        logits = torch.stack([discriminator(x), torch.zeros(B, dtype=x.dtype)], dim=1)
        return torch.softmax(logits, dim=1)

    discr_loss = 0.5 * torch.log(probs(z)[:, 0]).mean() + 0.5 * torch.log(probs(z_shuffle)[:, 1]).mean()
    torch.testing.assert_close(ours, -2 * discr_loss)  # they minimise -discr_loss


# --- presets train, on a library VAE and on a user's own model -----------------------------------


def presets() -> dict[str, MeanFieldELBO]:
    return {
        "beta_vae": beta_vae(4.0),
        "annealed_beta_vae": annealed_beta_vae(gamma=100.0, capacity=LinearCapacity(0, 5, 10)),
        "factor_vae": factor_vae(gamma=10.0, discriminator_hidden=(16,)),
        "beta_tcvae_mws": beta_tcvae(data_size=64, beta=6.0),
        "beta_tcvae_mss": beta_tcvae(data_size=64, beta=6.0, estimator="mss"),
        "dip_vae_i": dip_vae("i", lambda_od=10.0),
        "dip_vae_ii": dip_vae("ii", lambda_od=10.0),
        "info_vae": info_vae(lambda_=100.0),
    }


class UsersModel(nn.Module):
    """A user's own Pyro model (not a library class): a Gaussian latent site "code", a Gaussian likelihood."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Linear(5, 4)
        self.decoder = nn.Linear(2, 5)

    def model(self, x: torch.Tensor | None = None, batch_size: int | None = None) -> None:
        pyro.module("decoder", self.decoder)
        size = x.shape[0] if x is not None else batch_size
        with pyro.plate("points", size):
            code = pyro.sample("code", dist.Normal(torch.zeros(size, 2), 1.0).to_event(1))
            pyro.sample("x", dist.Normal(self.decoder(code), 0.5).to_event(1), obs=x)

    def guide(self, x: torch.Tensor) -> None:
        pyro.module("encoder", self.encoder)
        loc, log_scale = self.encoder(x).chunk(2, dim=-1)
        with pyro.plate("points", x.shape[0]):
            pyro.sample("code", dist.Normal(loc, log_scale.exp()).to_event(1))


def on_site(name: str, site: str, **elbo: Any) -> MeanFieldELBO:
    """The preset ``name`` on the latent site ``site``, with the ELBO's settings ``elbo``."""
    return {
        "beta_vae": lambda: beta_vae(4.0, **elbo),
        "annealed_beta_vae": lambda: annealed_beta_vae(100.0, LinearCapacity(0, 5, 10), site=site, **elbo),
        "factor_vae": lambda: factor_vae(10.0, site=site, discriminator_hidden=(16,), **elbo),
        "beta_tcvae_mws": lambda: beta_tcvae(64, 6.0, site=site, **elbo),
        "beta_tcvae_mss": lambda: beta_tcvae(64, 6.0, site=site, estimator="mss", **elbo),
        "dip_vae_i": lambda: dip_vae("i", 10.0, site=site, **elbo),
        "dip_vae_ii": lambda: dip_vae("ii", 10.0, site=site, **elbo),
        "info_vae": lambda: info_vae(100.0, site=site, **elbo),
    }[name]()


PRESETS = sorted(presets())


def train(model: nn.Module, objective: MeanFieldELBO, x: torch.Tensor, steps: int = 5) -> list[dict[str, torch.Tensor]]:
    pyro.clear_param_store()
    iteration = TrainingIteration(model, objective, lr=1e-2)
    history = []
    for step in range(steps):
        history.append(iteration({"x": x[torch.randperm(len(x))[:16]]}, step))
    return history


@pytest.mark.parametrize("name", PRESETS)
def test_each_preset_trains_a_library_vae(name):
    torch.manual_seed(0)
    vae = VAE(MLP([5, 8]), mlp_decoder(3, [8], (5,)), latent_dim=3, likelihood="gaussian", likelihood_scale=0.5)
    history = train(vae, on_site(name, "z"), torch.randn(64, 5))
    for term in on_site(name, "z").terms:
        assert term.name in history[-1]
    assert all(torch.isfinite(values["elbo_loss"]) for values in history)
    if name == "factor_vae":
        assert torch.isfinite(history[-1]["discriminator_loss"])


@pytest.mark.parametrize("name", PRESETS)
def test_each_preset_trains_a_users_own_model_with_its_terms_by_name(name):
    torch.manual_seed(0)
    model, objective = UsersModel(), on_site(name, "code")
    history = train(model, objective, torch.randn(64, 5))
    assert all(torch.isfinite(values["elbo_loss"]) for values in history)
    model_trace, _ = objective.traces(model.model, model.guide, torch.randn(16, 5), step=0)
    for term in objective.terms:
        assert model_trace.nodes[term.name]["type"] == "sample" and model_trace.nodes[term.name]["is_observed"]


def test_beta_tcvae_terms_added_by_name_train_a_users_model_function_in_a_plain_svi_loop():
    torch.manual_seed(0)
    users = UsersModel()
    objective = MeanFieldELBO(terms=[KLDecomposition("code", data_size=64, beta=6.0, name="tc_split")])
    pyro.clear_param_store()
    svi = SVI(users.model, users.guide, pyro.optim.Adam({"lr": 1e-2}), objective)
    x = torch.randn(64, 5)
    losses = [svi.step(x[:16]) for _ in range(5)]
    assert all(math.isfinite(loss) for loss in losses)
    assert {"tc_split", "tc_split/total_correlation"} <= set(objective.logged)
    assert "kl" not in objective.logged, "the decomposition replaces the site's KL"


def test_kl_decomposition_refuses_bad_settings_by_name():
    with pytest.raises(ValueError, match="data_size"):
        KLDecomposition("z", data_size=0)
    with pytest.raises(ValueError, match="estimator"):
        KLDecomposition("z", data_size=10, estimator="exact")
    with pytest.raises(ValueError, match="beta"):
        KLDecomposition("z", data_size=10, beta=-1.0)
    with pytest.raises(ValueError, match="lambda_"):
        info_vae(lambda_=0.5, alpha=0.0)



def test_presets_compose_with_further_terms_on_one_model():
    torch.manual_seed(0)
    objective = beta_tcvae(64, 6.0, site="code", extra_terms=[DIPCovariance("code", 1.0, 10.0, name="dip")])
    history = train(UsersModel(), objective, torch.randn(64, 5))
    assert {"kl_decomposition_code", "dip", "dip/off_diagonal"} <= set(history[-1])
    assert all(torch.isfinite(values["elbo_loss"]) for values in history)


PARTICLE_TERMS = {
    "beta_tcvae_mws": lambda: KLDecomposition("z", N, alpha=0.5, beta=6.0, gamma=2.0, estimator="mws"),
    "beta_tcvae_mss": lambda: KLDecomposition("z", N, alpha=0.5, beta=6.0, gamma=2.0, estimator="mss"),
    "dip_vae_i": lambda: DIPCovariance("z", lambda_od=2.0, lambda_d=20.0, kind="i"),
    "dip_vae_ii": lambda: DIPCovariance("z", lambda_od=2.0, lambda_d=20.0, kind="ii"),
}


@pytest.mark.parametrize("name", sorted(PARTICLE_TERMS))
@pytest.mark.parametrize("per_particle_encoder", [False, True], ids=["shared_encoder", "per_particle_encoder"])
def test_a_batch_term_over_vectorized_particles_is_the_mean_of_its_value_on_each_particle(name, per_particle_encoder):
    """Under ``vectorize_particles`` a term sees P particles at once; each particle's batch is
    its own batch (the aggregate posterior, its covariance and the stratified weights are taken
    within a particle, never across particles), and the value is the mean over particles, as
    sequential particles give it."""
    term, particles = PARTICLE_TERMS[name](), 3
    generator = torch.Generator().manual_seed(7)
    shape = (particles, B, D) if per_particle_encoder else (B, D)
    loc = torch.randn(shape, generator=generator, dtype=torch.float64).requires_grad_()
    scale = (0.3 + torch.rand(shape, generator=generator, dtype=torch.float64)).requires_grad_()
    noise = torch.randn(particles, B, D, generator=generator, dtype=torch.float64)

    value, parts = term.evaluate(vectorized_term_sites(loc, scale, noise))
    each = [term.evaluate(term_sites(loc[p] if per_particle_encoder else loc,
                                     scale[p] if per_particle_encoder else scale, noise[p]))
            for p in range(particles)]

    assert_same_value_and_gradient(value, torch.stack([v for v, _ in each]).mean(), loc, scale)
    for part in parts:
        assert_same_value_and_gradient(parts[part], torch.stack([p[part] for _, p in each]).mean(), loc, scale)


@pytest.mark.parametrize("name", PRESETS)
def test_each_preset_trains_a_users_model_with_vectorized_particles(name):
    torch.manual_seed(0)
    model = UsersModel()
    objective = on_site(name, "code", num_particles=3, vectorize_particles=True, max_plate_nesting=1)
    history = train(model, objective, torch.randn(64, 5))
    assert all(torch.isfinite(values["elbo_loss"]) for values in history)


class RecordingUsersModel(UsersModel):
    """:class:`UsersModel` whose guide keeps its last draw of "code"."""

    def guide(self, x: torch.Tensor) -> None:
        pyro.module("encoder", self.encoder)
        loc, log_scale = self.encoder(x).chunk(2, dim=-1)
        with pyro.plate("points", x.shape[0]):
            self.drawn = pyro.sample("code", dist.Normal(loc, log_scale.exp()).to_event(1))


def test_factor_discriminator_trains_on_the_last_particles_batch_under_vectorized_particles():
    """The discriminator step takes one batch of joint samples (B, D), as after sequential
    particles: the last of the vectorised particles, whose rows it permutes."""
    torch.manual_seed(0)
    model = RecordingUsersModel()
    objective = factor_vae(gamma=10.0, site="code", discriminator_hidden=(16,), num_particles=3,
                           vectorize_particles=True, max_plate_nesting=1)

    result = objective.training_loss(model.model, model.guide, x=torch.randn(16, 5), step=0)

    assert model.drawn.shape == (3, 16, 2)
    torch.testing.assert_close(result.step_arguments["discriminator"]["sample"], model.drawn[-1].detach())
