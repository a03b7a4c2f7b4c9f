"""Bhattacharyya coefficient and distance between diagonal Gaussians."""

import math

import pyro.distributions as dist
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, stats

from ppl_vae.distributions import bhattacharyya_coefficient, bhattacharyya_distance


def _numerical_bc_1d(mu1, s1, mu2, s2):
    def integrand(x):
        return math.sqrt(stats.norm.pdf(x, mu1, s1) * stats.norm.pdf(x, mu2, s2))

    lo = min(mu1 - 12 * s1, mu2 - 12 * s2)
    hi = max(mu1 + 12 * s1, mu2 + 12 * s2)
    value, _ = integrate.quad(integrand, lo, hi, points=[mu1, mu2], limit=200)
    return value


@pytest.mark.parametrize(
    "mu1, s1, mu2, s2",
    [(0.0, 1.0, 0.0, 1.0), (0.0, 1.0, 1.5, 1.0), (-1.0, 0.3, 2.0, 2.5), (0.5, 0.1, 0.6, 0.05)],
)
def test_coefficient_of_normals_matches_numerical_integration(mu1, s1, mu2, s2):
    p = dist.Normal(torch.tensor(mu1, dtype=torch.float64), torch.tensor(s1, dtype=torch.float64))
    q = dist.Normal(torch.tensor(mu2, dtype=torch.float64), torch.tensor(s2, dtype=torch.float64))
    expected = _numerical_bc_1d(mu1, s1, mu2, s2)
    assert bhattacharyya_coefficient(p, q).item() == pytest.approx(expected, rel=1e-6, abs=1e-10)


def test_coefficient_of_diagonal_gaussians_is_product_over_dimensions():
    loc1, scale1 = [0.2, -1.0], [0.7, 1.3]
    loc2, scale2 = [1.0, 0.5], [1.1, 0.4]
    p = dist.Normal(
        torch.tensor(loc1, dtype=torch.float64), torch.tensor(scale1, dtype=torch.float64)
    ).to_event(1)
    q = dist.Normal(
        torch.tensor(loc2, dtype=torch.float64), torch.tensor(scale2, dtype=torch.float64)
    ).to_event(1)
    expected = _numerical_bc_1d(loc1[0], scale1[0], loc2[0], scale2[0]) * _numerical_bc_1d(
        loc1[1], scale1[1], loc2[1], scale2[1]
    )
    actual = bhattacharyya_coefficient(p, q)
    assert actual.shape == ()
    assert actual.item() == pytest.approx(expected, rel=1e-6)


def test_distance_matches_closed_form_of_notes():
    mu1, mu2 = torch.randn(4, dtype=torch.float64), torch.randn(4, dtype=torch.float64)
    var1, var2 = torch.rand(4, dtype=torch.float64) + 0.1, torch.rand(4, dtype=torch.float64) + 0.1
    s2 = (var1 + var2) / 2
    expected = ((mu1 - mu2) ** 2 / s2).sum() / 8 + 0.5 * (
        s2.log().sum() - 0.5 * (var1.log().sum() + var2.log().sum())
    )
    p, q = dist.Normal(mu1, var1.sqrt()).to_event(1), dist.Normal(mu2, var2.sqrt()).to_event(1)
    torch.testing.assert_close(bhattacharyya_distance(p, q), expected)
    torch.testing.assert_close(bhattacharyya_coefficient(p, q), torch.exp(-expected))


def test_coefficient_is_one_for_identical_distributions():
    loc, scale = torch.randn(3, 5), torch.rand(3, 5) + 0.01
    p = dist.Normal(loc, scale).to_event(1)
    torch.testing.assert_close(bhattacharyya_coefficient(p, p), torch.ones(3))
    torch.testing.assert_close(
        bhattacharyya_coefficient(dist.Normal(loc, scale), dist.Normal(loc, scale)),
        torch.ones(3, 5),
    )


def test_normal_gives_elementwise_and_independent_gives_per_batch_coefficients():
    p = dist.Normal(torch.randn(2, 3), torch.rand(2, 3) + 0.5)
    q = dist.Normal(torch.randn(2, 3), torch.rand(2, 3) + 0.5)
    elementwise = bhattacharyya_coefficient(p, q)
    assert elementwise.shape == (2, 3)
    torch.testing.assert_close(
        bhattacharyya_coefficient(p.to_event(1), q.to_event(1)), elementwise.prod(-1)
    )


def test_batch_shapes_broadcast_like_kl_divergence():
    loc, scale = torch.randn(4, 2), torch.rand(4, 2) + 0.2
    p = dist.Normal(loc.unsqueeze(1), scale.unsqueeze(1)).to_event(1)  # batch (4, 1)
    q = dist.Normal(loc.unsqueeze(0), scale.unsqueeze(0)).to_event(1)  # batch (1, 4)
    pairwise = bhattacharyya_coefficient(p, q)
    assert pairwise.shape == (4, 4)
    for i in range(4):
        for j in range(4):
            expected = bhattacharyya_coefficient(
                dist.Normal(loc[i], scale[i]).to_event(1), dist.Normal(loc[j], scale[j]).to_event(1)
            )
            torch.testing.assert_close(pairwise[i, j], expected)
    torch.testing.assert_close(pairwise, pairwise.T)
    torch.testing.assert_close(pairwise.diagonal(), torch.ones(4))


def test_extreme_inputs_give_finite_coefficients_and_gradients():
    loc1 = torch.tensor([0.0, 1e6, 0.0, 0.0], requires_grad=True)
    scale1 = torch.tensor([1e-20, 1.0, 1e-30, 1e4], requires_grad=True)
    loc2 = torch.tensor([0.0, -1e6, 1.0, 0.0])
    scale2 = torch.tensor([1e-20, 1.0, 1e-30, 1e-4])
    bc = bhattacharyya_coefficient(dist.Normal(loc1, scale1), dist.Normal(loc2, scale2))
    assert torch.isfinite(bc).all()
    assert bc[0].item() == pytest.approx(1.0)
    assert bc[1].item() == 0.0 and bc[2].item() == 0.0
    assert 0.0 <= bc[3].item() < 1e-3
    bhattacharyya_distance(dist.Normal(loc1, scale1), dist.Normal(loc2, scale2))[
        [0, 3]
    ].sum().backward()
    assert torch.isfinite(loc1.grad).all() and torch.isfinite(scale1.grad).all()


def test_unsupported_distributions_raise_type_error_naming_them():
    normal = dist.Normal(torch.zeros(2), torch.ones(2)).to_event(1)
    student = dist.StudentT(3.0, torch.zeros(2), torch.ones(2)).to_event(1)
    with pytest.raises(TypeError, match=r"Independent\(StudentT\)"):
        bhattacharyya_coefficient(normal, student)
    with pytest.raises(TypeError, match="Laplace"):
        bhattacharyya_coefficient(dist.Laplace(0.0, 1.0), dist.Normal(0.0, 1.0))


def test_mismatched_event_dimensions_raise_value_error():
    normal = dist.Normal(torch.zeros(2), torch.ones(2))
    with pytest.raises(ValueError, match="event dimensions"):
        bhattacharyya_coefficient(normal, normal.to_event(1))


_gaussian_params = st.tuples(
    st.floats(-1e3, 1e3),
    st.floats(1e-3, 1e3),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(_gaussian_params, _gaussian_params), min_size=1, max_size=4))
def test_coefficient_is_symmetric_and_in_unit_interval(pairs):
    loc1, scale1 = torch.tensor([a for a, _ in pairs]).T
    loc2, scale2 = torch.tensor([b for _, b in pairs]).T
    p = dist.Normal(loc1, scale1).to_event(1)
    q = dist.Normal(loc2, scale2).to_event(1)
    forward, backward = bhattacharyya_coefficient(p, q), bhattacharyya_coefficient(q, p)
    assert torch.isfinite(forward)
    assert 0.0 <= forward.item() <= 1.0
    torch.testing.assert_close(forward, backward)
