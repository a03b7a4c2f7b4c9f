"""The examples (``>>>``) in the docstrings of the main entry points run and print what they
show."""
from __future__ import annotations

import doctest
import importlib

import pytest

#: Modules whose docstrings hold examples.
MODULES_WITH_EXAMPLES = [
    "ppl_vae.models.vae",
    "ppl_vae.models.parted",
    "ppl_vae.models.contrastive",
    "ppl_vae.models.decomposition",
    "ppl_vae.metrics.accuracy",
    "ppl_vae.metrics.factor_score",
    "ppl_vae.metrics.silhouette",
    "ppl_vae.metrics.sparsity",
    "ppl_vae.infer.mean_field",
    "ppl_vae.infer.parted",
    "ppl_vae.infer.contrastive",
    "ppl_vae.infer.decomposition",
    "ppl_vae.train.fitting",
    "ppl_vae.runs",
    "ppl_vae.checks.posterior_predictive",
]


def imported(module_name: str):
    """The module ``module_name``."""
    return importlib.import_module(module_name)


@pytest.mark.parametrize("module_name", MODULES_WITH_EXAMPLES)
def test_the_docstring_examples_of_a_module_run(module_name):
    module = imported(module_name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    examples = [test for test in finder.find(module, module_name) if test.examples]
    assert examples, f"{module_name} has no docstring example"
    for test in examples:
        runner.run(test)
    assert runner.failures == 0, f"{runner.failures} failing example(s) in {module_name} (see the captured output)"
