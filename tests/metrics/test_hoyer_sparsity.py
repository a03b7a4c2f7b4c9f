"""Hoyer sparsity: hand-computed values, degenerate inputs and invariances."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from ppl_vae.metrics import hoyer_sparsity


def hoyer(point: list[float]) -> float:
    """Hoyer sparsity of one point, by the formula."""
    root = math.sqrt(len(point))
    l1 = sum(abs(value) for value in point)
    l2 = math.sqrt(sum(value * value for value in point))
    return (root - l1 / l2) / (root - 1)


def test_one_hot_points_score_one():
    assert hoyer_sparsity(np.eye(4)) == pytest.approx(1.0)


def test_equal_magnitudes_after_normalisation_score_zero():
    """Every column has as many +c as -c, so all columns have std c."""
    rng = np.random.default_rng(0)
    signs = np.stack([rng.permutation([1.0, -1.0] * 25) for _ in range(6)], axis=1)

    assert hoyer_sparsity(signs * [1, 2, 3, 4, 5, 6]) == pytest.approx(0.0, abs=1e-12)


def test_matches_hand_computed_value():
    """Both columns of [[3, 1], [1, 3]] have std 1, so the points are scored as they are."""
    assert hoyer_sparsity([[3.0, 1.0], [1.0, 3.0]]) == pytest.approx(hoyer([3.0, 1.0]))
    assert hoyer([3.0, 1.0]) == pytest.approx(0.36045, abs=1e-5)


def test_each_dimension_is_divided_by_its_std_first():
    """Column stds are (1, 0.5): the point (2, 1) becomes (2, 2), which is dense."""
    z = [[2.0, 1.0], [0.0, 0.0]]

    assert hoyer([2.0, 1.0]) == pytest.approx(0.1752, abs=1e-4)
    assert hoyer_sparsity(z) == pytest.approx(0.0, abs=1e-12)


def test_zero_std_dimension_is_treated_as_zero():
    z = [[5.0, 1.0, 0.0], [5.0, 0.0, 1.0]]

    assert hoyer_sparsity(z) == pytest.approx(1.0)


def test_zero_rows_are_left_out_of_the_mean():
    z = [[3.0, 1.0], [1.0, 3.0], [0.0, 0.0]]
    normalised = np.asarray(z) / np.std(z, axis=0)

    assert hoyer_sparsity(z) == pytest.approx(hoyer(list(normalised[0])))


def test_constant_representation_scores_zero_without_nan():
    assert hoyer_sparsity(np.full((10, 3), 2.0)) == 0.0


def test_accepts_a_torch_tensor():
    assert hoyer_sparsity(torch.eye(3)) == pytest.approx(1.0)


@pytest.mark.parametrize("z", [np.ones((5, 1)), np.ones(5), np.ones((2, 2, 2))])
def test_fewer_than_two_dimensions_or_wrong_rank_raises_value_error(z):
    with pytest.raises(ValueError, match="z"):
        hoyer_sparsity(z)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_codes_with_nan_or_inf_raise_value_error_naming_z(value):
    z = torch.eye(3)
    z[1, 2] = value

    with pytest.raises(ValueError, match="z must be finite"):
        hoyer_sparsity(z)


finite = st.floats(min_value=-1e3, max_value=1e3, allow_nan=False, allow_subnormal=False)


@settings(max_examples=50, deadline=None)
@given(arrays(np.float64, st.tuples(st.integers(1, 20), st.integers(2, 8)), elements=finite))
def test_lies_in_unit_interval(z):
    assert 0.0 <= hoyer_sparsity(z) <= 1.0


@settings(max_examples=50, deadline=None)
@given(
    arrays(np.float64, (12, 4), elements=finite),
    arrays(np.float64, (4,), elements=st.floats(min_value=1e-2, max_value=1e2)),
)
def test_is_invariant_to_rescaling_each_dimension(z, scale):
    assert hoyer_sparsity(z * scale) == pytest.approx(hoyer_sparsity(z), abs=1e-9)
