"""Prior modules: densities against scipy, moments, shapes, constraints, gradients, errors."""

import math

import numpy as np
import pyro
import pytest
import torch
from pyro.distributions.torch_distribution import TorchDistributionMixin
from scipy import stats
from scipy.special import logsumexp

from ppl_vae.distributions import (
    SPARSE_SIGMA0_AUTHORS_CODE,
    SPARSE_SIGMA0_PAPER_TEXT,
    AnisotropicGaussianPrior,
    ClassConditionalGaussianPrior,
    IsotropicGaussianPrior,
    MixtureOfGaussiansPrior,
    SparsePrior,
    StudentTPrior,
    trace_normalised_variances,
)

PRIOR_FACTORIES = {
    "isotropic": lambda: IsotropicGaussianPrior(3),
    "anisotropic": lambda: AnisotropicGaussianPrior(3, [0.0, 1.0, -1.0]),
    "anisotropic_learned": lambda: AnisotropicGaussianPrior(3, learn=True),
    "student_t": lambda: StudentTPrior(3, df=4.0),
    "mixture": lambda: MixtureOfGaussiansPrior(torch.randn(5, 3), 0.2),
    "pinwheel": lambda: MixtureOfGaussiansPrior.pinwheel(),
    "sparse": lambda: SparsePrior(3),
}


def _points(dim, n=7, spread=3.0):
    return torch.randn(n, dim, dtype=torch.float64).float() * spread


# --- densities against independent computations ----------------------------------------


def test_isotropic_log_prob_matches_scipy_standard_normal():
    z = _points(4)
    expected = stats.norm.logpdf(z.numpy()).sum(-1)
    np.testing.assert_allclose(IsotropicGaussianPrior(4)().log_prob(z).numpy(), expected, rtol=1e-5)


def test_anisotropic_log_prob_matches_scipy_with_trace_normalised_variances():
    log_variances = torch.tensor([0.5, -1.0, 2.0, 0.0])
    prior = AnisotropicGaussianPrior(4, log_variances, total_variance=2.0)
    variances = 2.0 * 4 * np.exp(log_variances.numpy()) / np.exp(log_variances.numpy()).sum()
    z = _points(4)
    expected = stats.norm.logpdf(z.numpy(), scale=np.sqrt(variances)).sum(-1)
    np.testing.assert_allclose(prior().log_prob(z).detach().numpy(), expected, rtol=1e-5)


@pytest.mark.parametrize("df", [0.5, 2.0, 9.0])
def test_student_t_log_prob_matches_scipy_t(df):
    z = _points(3)
    expected = stats.t.logpdf(z.numpy(), df).sum(-1)
    np.testing.assert_allclose(StudentTPrior(3, df)().log_prob(z).numpy(), expected, rtol=1e-5)


def test_student_t_with_log_variances_uses_trace_normalised_scale():
    log_variances = torch.tensor([1.0, 0.0, -2.0])
    scale = np.sqrt(3 * np.exp(log_variances.numpy()) / np.exp(log_variances.numpy()).sum())
    z = _points(3)
    expected = stats.t.logpdf(z.numpy(), 5.0, scale=scale).sum(-1)
    actual = StudentTPrior(3, 5.0, log_variances)().log_prob(z).numpy()
    np.testing.assert_allclose(actual, expected, rtol=1e-5)


def test_mixture_log_prob_matches_hand_computed_scipy_mixture():
    means = torch.randn(3, 2)
    variances = torch.rand(3, 2) + 0.1
    weights = torch.tensor([0.2, 0.5, 0.3])
    prior = MixtureOfGaussiansPrior(means, variances, weights)
    z = _points(2).numpy()
    per_component = stats.norm.logpdf(z[:, None, :], means.numpy(), np.sqrt(variances.numpy())).sum(
        -1
    )
    expected = logsumexp(per_component + np.log(weights.numpy()), axis=1)
    np.testing.assert_allclose(prior().log_prob(torch.from_numpy(z)).numpy(), expected, rtol=1e-5)


def test_pinwheel_is_four_equal_components_with_variance_003():
    prior = MixtureOfGaussiansPrior.pinwheel()
    expected_means = [[0.0, -1.0], [0.0, 1.0], [1.0, 0.0], [-1.0, 0.0]]
    assert prior.dim == 2
    torch.testing.assert_close(prior.means, torch.tensor(expected_means))
    torch.testing.assert_close(prior.variances, torch.full((4, 2), 0.03))
    torch.testing.assert_close(prior.weights, torch.full((4,), 0.25))


@pytest.mark.parametrize(
    "gamma, sigma0", [(0.8, 0.05), (0.3, SPARSE_SIGMA0_PAPER_TEXT), (0.0, 0.05)]
)
def test_sparse_log_prob_matches_scipy_two_component_mixture(gamma, sigma0):
    z = _points(4, spread=0.5).numpy()
    per_dim = np.logaddexp(
        np.log1p(-gamma) + stats.norm.logpdf(z),
        (np.log(gamma) if gamma > 0 else -np.inf) + stats.norm.logpdf(z, scale=sigma0),
    )
    actual = SparsePrior(4, gamma, sigma0)().log_prob(torch.from_numpy(z)).numpy()
    np.testing.assert_allclose(actual, per_dim.sum(-1), rtol=1e-5)


def test_sparse_default_sigma0_is_the_authors_code_std():
    assert SparsePrior(2).sigma0 == SPARSE_SIGMA0_AUTHORS_CODE == 0.05
    assert math.isclose(SPARSE_SIGMA0_PAPER_TEXT**2, 0.05)


def test_class_conditional_log_prob_matches_scipy_per_class():
    prior = ClassConditionalGaussianPrior(num_classes=3, dim=2)
    c = torch.tensor([0, 2, 1, 2])
    u = torch.randn(4, 2)
    loc = prior.loc.detach().numpy()[c.numpy()]
    std = np.exp(0.5 * prior.log_variance.detach().numpy())[c.numpy()]
    expected = stats.norm.logpdf(u.numpy(), loc, std).sum(-1)
    np.testing.assert_allclose(prior(c).log_prob(u).detach().numpy(), expected, rtol=1e-5)


# --- sample moments ----------------------------------------------------------------------


def test_student_t_sample_variance_is_nu_over_nu_minus_2():
    samples = StudentTPrior(2, df=6.0)().sample((200_000,))
    torch.testing.assert_close(samples.mean(0), torch.zeros(2), atol=0.02, rtol=0)
    torch.testing.assert_close(samples.var(0), torch.full((2,), 6.0 / 4.0), rtol=0.05, atol=0)


def test_sparse_sample_variance_is_mixture_of_slab_and_spike():
    gamma, sigma0 = 0.8, 0.05
    samples = SparsePrior(3, gamma, sigma0)().sample((200_000,))
    expected = (1 - gamma) + gamma * sigma0**2
    torch.testing.assert_close(samples.mean(0), torch.zeros(3), atol=0.01, rtol=0)
    torch.testing.assert_close(samples.var(0), torch.full((3,), expected), rtol=0.03, atol=0)
    off = (samples.abs() < 4 * sigma0).float().mean()
    assert abs(off - (gamma + (1 - gamma) * 0.16)) < 0.01


def test_pinwheel_sample_moments_match_component_layout():
    samples = MixtureOfGaussiansPrior.pinwheel()().sample((200_000,))
    torch.testing.assert_close(samples.mean(0), torch.zeros(2), atol=0.01, rtol=0)
    torch.testing.assert_close(samples.var(0), torch.full((2,), 0.5 + 0.03), rtol=0.02, atol=0)


def test_anisotropic_sample_variance_matches_prior_variances():
    prior = AnisotropicGaussianPrior(3, [1.0, 0.0, -1.0])
    samples = prior().sample((200_000,))
    torch.testing.assert_close(samples.var(0), prior.variances, rtol=0.02, atol=0)


# --- trace constraint and PCA --------------------------------------------------------------


def test_anisotropic_variances_sum_to_dim_times_total_variance():
    prior = AnisotropicGaussianPrior(6, torch.randn(6) * 3, total_variance=2.5)
    torch.testing.assert_close(prior.variances.sum(), torch.tensor(6 * 2.5))
    torch.testing.assert_close(prior().variance.sum(), torch.tensor(6 * 2.5))


def test_learned_anisotropic_variances_keep_their_trace_after_an_optimiser_step():
    prior = AnisotropicGaussianPrior(4, learn=True, total_variance=0.5)
    optimiser = torch.optim.SGD(prior.parameters(), lr=1.0)
    loss = -prior().log_prob(torch.tensor([[3.0, 0.0, 0.0, 0.1]])).sum()
    loss.backward()
    optimiser.step()
    assert not torch.allclose(prior.variances, torch.full((4,), 0.5))
    torch.testing.assert_close(prior.variances.sum(), torch.tensor(2.0))


def test_isotropic_default_of_trace_normalised_priors_has_unit_variance():
    torch.testing.assert_close(AnisotropicGaussianPrior(5).variances, torch.ones(5))
    torch.testing.assert_close(StudentTPrior(5, 3.0).scale, torch.ones(5))
    torch.testing.assert_close(
        trace_normalised_variances(torch.zeros(5), 2.0), torch.full((5,), 2.0)
    )


def test_principal_component_prior_takes_largest_singular_values_first():
    generator = torch.Generator().manual_seed(1)
    stds = torch.tensor([0.5, 5.0, 1.0, 3.0, 0.1])
    data = torch.randn(2000, 5, generator=generator, dtype=torch.float64) * stds + 7.0
    prior = AnisotropicGaussianPrior.from_principal_components(data, dim=3)
    variances = prior.variances
    assert torch.all(variances[:-1] > variances[1:])
    centred = data - data.mean(0)
    squared = np.linalg.svd(centred.numpy(), compute_uv=False)[:3] ** 2
    expected = torch.tensor(3 * squared / squared.sum(), dtype=torch.float32)
    torch.testing.assert_close(variances, expected, rtol=1e-4, atol=0)
    torch.testing.assert_close(
        variances / variances[0], torch.tensor([1.0, 9 / 25, 1 / 25]), atol=0.02, rtol=0
    )


def test_principal_component_prior_works_with_more_features_than_points():
    data = torch.randn(20, 50)
    prior = AnisotropicGaussianPrior.from_principal_components(data, dim=4, learn=True)
    assert isinstance(prior.log_variances, torch.nn.Parameter)
    squared = np.linalg.svd((data - data.mean(0)).numpy(), compute_uv=False)[:4] ** 2
    torch.testing.assert_close(
        prior.variances.detach(), torch.tensor(4 * squared / squared.sum()), rtol=1e-4, atol=0
    )


def test_principal_component_prior_without_centring_uses_raw_singular_values():
    data = torch.randn(300, 6, dtype=torch.float64) + 2.0
    prior = AnisotropicGaussianPrior.from_principal_components(data, dim=2, center=False)
    squared = np.linalg.svd(data.numpy(), compute_uv=False)[:2] ** 2
    expected = torch.tensor(2 * squared / squared.sum(), dtype=torch.float32)
    torch.testing.assert_close(prior.variances, expected, rtol=1e-4, atol=0)


def test_principal_component_prior_rejects_dim_above_data_rank():
    data = torch.randn(100, 2) @ torch.randn(2, 6)
    with pytest.raises(ValueError, match="dim=3"):
        AnisotropicGaussianPrior.from_principal_components(data, dim=3)


# --- shapes -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PRIOR_FACTORIES))
def test_prior_has_event_shape_dim_and_expands_to_model_batch(name):
    module = PRIOR_FACTORIES[name]()
    prior = module()
    assert prior.batch_shape == () and prior.event_shape == (module.dim,)
    expanded = prior.expand((5,))
    z = expanded.sample()
    assert z.shape == (5, module.dim)
    assert expanded.log_prob(z).shape == (5,)
    assert prior.log_prob(z).shape == (5,)
    assert prior.sample((2, 4)).shape == (2, 4, module.dim)


@pytest.mark.parametrize("name", sorted(PRIOR_FACTORIES))
def test_prior_is_usable_as_a_pyro_sample_site_in_a_data_plate(name):
    module = PRIOR_FACTORIES[name]()

    def model():
        with pyro.plate("data", 6):
            return pyro.sample("z", module().expand((6,)))

    trace = pyro.poutine.trace(model).get_trace()
    trace.compute_log_prob()
    assert trace.nodes["z"]["value"].shape == (6, module.dim)
    assert trace.nodes["z"]["log_prob"].shape == (6,)


def test_rsample_is_available_for_gaussian_and_student_t_priors():
    for module in (IsotropicGaussianPrior(2), AnisotropicGaussianPrior(2), StudentTPrior(2, 3.0)):
        assert module().rsample((3,)).shape == (3, 2)


def test_class_conditional_prior_shapes_for_none_indices_and_weights():
    prior = ClassConditionalGaussianPrior(num_classes=4, dim=3)
    assert prior().batch_shape == (4,) and prior().event_shape == (3,)
    indices = torch.tensor([[0, 3], [1, 2]])
    assert prior(indices).batch_shape == (2, 2)
    relaxed = torch.softmax(torch.randn(5, 4), -1)
    assert prior(relaxed).batch_shape == (5,)


def test_class_conditional_one_hot_equals_indices():
    prior = ClassConditionalGaussianPrior(num_classes=4, dim=3)
    c = torch.tensor([2, 0, 3])
    one_hot = torch.nn.functional.one_hot(c, 4).float()
    torch.testing.assert_close(prior(one_hot).mean, prior(c).mean)
    torch.testing.assert_close(prior(one_hot).variance, prior(c).variance)


def test_class_conditional_log_variance_is_bounded():
    prior = ClassConditionalGaussianPrior(num_classes=2, dim=2)
    with torch.no_grad():
        prior.log_variance_logit.copy_(torch.tensor([[-1e4, 1e4], [0.0, 0.3]]))
    log_variance = prior.log_variance
    assert log_variance.min() >= -3.0 and log_variance.max() <= 1.0
    torch.testing.assert_close(log_variance[0], torch.tensor([-3.0, 1.0]))


def test_class_conditional_rejects_out_of_range_indices_and_wrong_width_weights():
    prior = ClassConditionalGaussianPrior(num_classes=3, dim=2)
    with pytest.raises(ValueError, match="c must"):
        prior(torch.tensor([0, 3]))
    with pytest.raises(ValueError, match="c must"):
        prior(torch.ones(2, 4))


# --- parameters and gradients ---------------------------------------------------------------


def test_fixed_priors_have_no_parameters_but_keep_state():
    for module in (
        IsotropicGaussianPrior(2),
        AnisotropicGaussianPrior(2),
        StudentTPrior(2, 2.0),
        SparsePrior(2),
        MixtureOfGaussiansPrior.pinwheel(),
    ):
        assert list(module.parameters()) == []
        assert len(module.state_dict()) > 0


def test_log_prob_gradient_reaches_learned_anisotropic_log_variances():
    prior = AnisotropicGaussianPrior(3, learn=True)
    prior().log_prob(torch.tensor([[2.0, 0.1, 0.0]])).sum().backward()
    assert prior.log_variances.grad is not None and prior.log_variances.grad.abs().sum() > 0


def test_log_prob_gradient_reaches_learned_student_t_scales():
    prior = StudentTPrior(3, 4.0, learn=True)
    prior().log_prob(torch.tensor([[2.0, 0.1, 0.0]])).sum().backward()
    assert prior.log_variances.grad.abs().sum() > 0


def test_log_prob_gradient_reaches_learned_mixture_means_and_variances():
    prior = MixtureOfGaussiansPrior.pinwheel(learn=True)
    assert {name for name, _ in prior.named_parameters()} == {"means", "log_variances"}
    prior().log_prob(torch.tensor([[0.1, 0.9], [0.5, 0.5]])).sum().backward()
    assert prior.means.grad.abs().sum() > 0
    assert prior.log_variances.grad.abs().sum() > 0


def test_log_prob_gradient_reaches_class_conditional_parameters():
    prior = ClassConditionalGaussianPrior(num_classes=3, dim=2)
    prior(torch.tensor([0, 1])).log_prob(torch.randn(2, 2)).sum().backward()
    assert prior.loc.grad[:2].abs().sum() > 0 and prior.loc.grad[2].abs().sum() == 0
    assert prior.log_variance_logit.grad[:2].abs().sum() > 0


# --- numerics ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "module",
    [
        MixtureOfGaussiansPrior(torch.zeros(2, 2), torch.tensor([[1e-8], [1e-6]]), learn=True),
        StudentTPrior(2, df=0.1, learn=True),
        SparsePrior(2, gamma=0.99, sigma0=1e-4),
        AnisotropicGaussianPrior(2, [10.0, -10.0], learn=True),
    ],
    ids=[
        "mixture_tiny_variances",
        "student_t_small_df",
        "sparse_tiny_spike",
        "anisotropic_extreme",
    ],
)
def test_log_prob_and_gradient_are_finite_for_extreme_legal_inputs(module):
    z = torch.tensor([[1e3, -1e3], [0.0, 1e-6]], requires_grad=True)
    log_prob = module().log_prob(z)
    assert torch.isfinite(log_prob).all()
    log_prob.sum().backward()
    assert torch.isfinite(z.grad).all()
    for parameter in module.parameters():
        assert torch.isfinite(parameter.grad).all()


# --- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make, argument, value",
    [
        (lambda: SparsePrior(2, gamma=1.0), "gamma", "1.0"),
        (lambda: SparsePrior(2, gamma=-0.1), "gamma", "-0.1"),
        (lambda: SparsePrior(2, sigma0=0.0), "sigma0", "0.0"),
        (lambda: StudentTPrior(2, df=0.0), "df", "0.0"),
        (lambda: StudentTPrior(2, df=-3), "df", "-3"),
        (
            lambda: MixtureOfGaussiansPrior(torch.zeros(2, 2), 1.0, weights=[0.5, 0.4]),
            "weights",
            "0.4",
        ),
        (
            lambda: MixtureOfGaussiansPrior(torch.zeros(2, 2), 1.0, weights=[1.5, -0.5]),
            "weights",
            "-0.5",
        ),
        (lambda: MixtureOfGaussiansPrior(torch.zeros(2, 2), [1.0, 0.0]), "variances", "0.0"),
        (lambda: MixtureOfGaussiansPrior(torch.zeros(2, 2), -0.1), "variances", "-0.1"),
        (lambda: MixtureOfGaussiansPrior(torch.zeros(2, 2), torch.ones(3)), "variances", "(3,)"),
        (lambda: AnisotropicGaussianPrior(2, total_variance=0.0), "total_variance", "0.0"),
        (lambda: AnisotropicGaussianPrior(3, [0.0, 1.0]), "log_variances", "(2,)"),
        (lambda: IsotropicGaussianPrior(0), "dim", "0"),
        (lambda: AnisotropicGaussianPrior(-1), "dim", "-1"),
        (lambda: StudentTPrior(0, 2.0), "dim", "0"),
        (lambda: SparsePrior(0), "dim", "0"),
        (lambda: ClassConditionalGaussianPrior(0, 2), "num_classes", "0"),
        (lambda: ClassConditionalGaussianPrior(2, 0), "dim", "0"),
        (lambda: ClassConditionalGaussianPrior(2, 1, log_variance_init="ones"), "log_variance_init", "'ones'"),
    ],
)
def test_bad_arguments_raise_value_error_naming_argument_and_value(make, argument, value):
    with pytest.raises(ValueError) as info:
        make()
    assert argument in str(info.value) and value in str(info.value)


def test_priors_are_pyro_distributions():
    for factory in PRIOR_FACTORIES.values():
        assert isinstance(factory()(), TorchDistributionMixin)


def test_class_prior_log_variances_start_at_zero_or_from_a_standard_normal_draw():
    torch.manual_seed(4)
    assert torch.equal(ClassConditionalGaussianPrior(3, 2).log_variance_logit, torch.zeros(3, 2))
    torch.manual_seed(4)
    drawn = ClassConditionalGaussianPrior(3, 2, log_variance_init="randn")
    torch.manual_seed(4)
    loc, logit = torch.randn(3, 2), torch.randn(3, 2)
    assert torch.equal(drawn.loc, loc) and torch.equal(drawn.log_variance_logit, logit)
    torch.testing.assert_close(drawn.log_variance, 2 * torch.tanh(logit) - 1)
