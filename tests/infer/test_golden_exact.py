"""Every output of every objective stays bit for bit what it was before ``MeanFieldELBO`` was
rebuilt on Pyro's public hooks: losses, gradients, logged values and step arguments of
``differentiable_loss``, ``training_loss``, ``loss`` and ``loss_and_grads`` (``golden_exact.py``,
values in ``golden_exact.pt``)."""
from pathlib import Path

import pytest
import torch
from golden_exact import EXACT_CASES, outputs

GOLDEN = torch.load(Path(__file__).with_name("golden_exact.pt"), weights_only=True)


def assert_identical(actual, expected, where: str) -> None:
    if isinstance(expected, dict):
        assert actual.keys() == expected.keys(), where
        for key in expected:
            assert_identical(actual[key], expected[key], f"{where}/{key}")
    elif torch.is_tensor(expected):
        assert actual.dtype == expected.dtype and torch.equal(actual, expected), f"{where}: {actual} != {expected}"
    else:
        assert actual == expected, where


def test_every_case_is_recorded():
    assert sorted(GOLDEN) == sorted(EXACT_CASES)


@pytest.mark.parametrize("case", sorted(EXACT_CASES))
def test_objective_keeps_every_output_bit_for_bit(case):
    model, guide, objective, kwargs, params = EXACT_CASES[case]()
    expected = GOLDEN[case]
    assert params.keys() == expected["params"].keys()
    with torch.no_grad():
        for name, parameter in params.items():
            parameter.copy_(expected["params"][name])
    assert_identical(outputs(model, guide, objective, kwargs, params), expected, case)
