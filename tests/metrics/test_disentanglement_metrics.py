"""MIG, SAP, DCI and the beta-VAE metric on a synthetic factor data set whose images hold their
factor values: the true factors score (near) 1, noise (near) 0 or chance, bad inputs are named."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from ppl_vae.metrics import (
    BetaVAEResult,
    DCIResult,
    MIGResult,
    SAPResult,
    beta_vae_score,
    dci,
    disentanglement_scores,
    factor_scores,
    mig,
    sap_score,
)
from ppl_vae.metrics.synthetic import SyntheticFactors

SIZES = (1, 3, 4, 5)  # a single-valued factor first, like dSprites' color
FAST = {
    "mig": {"n_train": 2000},
    "sap": {"n_train": 1000, "n_test": 500},
    "dci": {"n_train": 600, "n_test": 300, "model": "forest"},
    "beta_vae": {"n_train": 300, "n_eval": 200, "batch_size": 16},
}
METRICS = {"mig": mig, "sap": sap_score, "dci": dci, "beta_vae": beta_vae_score}


@pytest.fixture
def dataset() -> SyntheticFactors:
    return SyntheticFactors(SIZES)


def noise_encoder(num_dims: int, seed: int = 1):
    """An encoder ignoring its input: standard normal (n, num_dims)."""
    generator = torch.Generator().manual_seed(seed)
    return lambda images: torch.randn(images.shape[0], num_dims, generator=generator)


def permuted_true_factors(dataset: SyntheticFactors):
    """The varying factors in another order, scaled and shifted, plus one constant dimension."""

    def encode(images):
        values = dataset.true_factors(images)
        return torch.stack([2.0 * values[:, 3] - 1.0, values[:, 1], 0.5 * values[:, 2], torch.ones(len(values))], 1)

    return encode


def test_mig_of_the_true_factors_is_one(dataset):
    result = mig(dataset.true_factors, dataset, **FAST["mig"])

    assert isinstance(result, MIGResult) and float(result) == result.score
    assert result.score > 0.99, "1 less the sample mutual information of independent factors"
    assert result.gaps[0] == 0.0 and result.mutual_information[:, 0].sum() == 0.0
    np.testing.assert_allclose(result.factor_entropy[1:], np.log(SIZES[1:]), atol=0.01)


def test_mig_finds_factors_in_any_dimension_and_scale(dataset):
    result = mig(permuted_true_factors(dataset), dataset, **FAST["mig"])

    assert result.score > 0.99
    assert result.mutual_information.argmax(axis=0)[1:].tolist() == [1, 2, 0]


def test_mig_of_noise_is_near_zero(dataset):
    assert mig(noise_encoder(4), dataset, **FAST["mig"]).score < 0.05


def test_mig_of_one_dimension_takes_the_second_best_as_zero(dataset):
    result = mig(lambda images: dataset.true_factors(images)[:, 1:2], dataset, **FAST["mig"])

    assert result.gaps[1] == pytest.approx(1.0)
    assert result.score == pytest.approx(np.mean(result.gaps[1:]))


def test_sap_of_true_binary_factors_is_one_minus_chance():
    """Each factor's own dimension predicts it exactly; the second best is at chance (1/2)."""
    dataset = SyntheticFactors((1, 2, 2, 2))
    result = sap_score(dataset.true_factors, dataset, **FAST["sap"])

    assert isinstance(result, SAPResult) and float(result) == result.score
    np.testing.assert_array_equal(np.diag(result.accuracy)[1:], 1.0)
    assert result.score == pytest.approx(0.5, abs=0.03)


def test_sap_of_true_factors_with_more_values_is_below_one_but_well_above_noise(dataset):
    """Below 1 - chance as well: a one-vs-rest linear SVM on one dimension cannot single out
    the middle values of a factor, so the own dimension's accuracy falls below 1."""
    result = sap_score(dataset.true_factors, dataset, **FAST["sap"])

    assert result.score > 0.4
    assert result.accuracy[1, 1] == 1.0
    assert result.accuracy.argmax(axis=0)[1:].tolist() == [1, 2, 3]
    assert np.all(result.accuracy[:, 0] == 0.0)


def test_sap_of_noise_is_near_zero(dataset):
    assert sap_score(noise_encoder(3), dataset, **FAST["sap"]).score < 0.05


def test_dci_of_the_true_factors_is_near_one(dataset):
    result = dci(permuted_true_factors(dataset), dataset, **FAST["dci"])

    assert isinstance(result, DCIResult) and result.model == "forest"
    assert result.disentanglement > 0.95
    assert result.completeness > 0.95
    assert result.informativeness == pytest.approx(1.0)
    assert result.importance.argmax(axis=0)[1:].tolist() == [1, 2, 0]
    assert np.all(result.importance[3] == 0.0), "a constant dimension is never split on"


def test_dci_of_noise_is_near_zero_and_informativeness_near_chance(dataset):
    result = dci(noise_encoder(3), dataset, **FAST["dci"])

    assert result.disentanglement < 0.1
    assert result.completeness < 0.1
    chance = np.mean([1 / size for size in SIZES[1:]])
    assert result.informativeness == pytest.approx(chance, abs=0.1)


def test_dci_with_disentanglement_libs_gradient_boosting(dataset):
    result = dci(dataset.true_factors, dataset, n_train=200, n_test=100, model="gbt")

    assert result.model == "gbt"
    assert result.disentanglement > 0.95 and result.completeness > 0.95
    assert result.informativeness == pytest.approx(1.0)


def test_beta_vae_score_of_the_true_factors_is_one(dataset):
    result = beta_vae_score(dataset.true_factors, dataset, **FAST["beta_vae"])

    assert isinstance(result, BetaVAEResult) and float(result) == result.score
    assert result.score == result.train_accuracy == 1.0


def test_beta_vae_score_of_noise_is_near_chance(dataset):
    result = beta_vae_score(noise_encoder(3), dataset, n_train=500, n_eval=1500, batch_size=16)

    assert result.score == pytest.approx(1 / 3, abs=0.06)


@pytest.mark.parametrize("name", METRICS)
def test_same_seed_gives_same_scores_and_another_seed_other_draws(name, dataset):
    def encode(images):  # deterministic and entangled
        values = dataset.true_factors(images)
        return torch.stack([values[:, 1] + 0.3 * values[:, 2], values[:, 2] - values[:, 3], values[:, 3]], 1)

    first, again, other = (METRICS[name](encode, dataset, seed=seed, **FAST[name]) for seed in (0, 0, 1))

    assert _scores(first) == _scores(again)
    assert _scores(first) != _scores(other)


def _scores(result) -> tuple[float, ...]:
    if isinstance(result, DCIResult):
        return (result.disentanglement, result.completeness, result.informativeness)
    if isinstance(result, MIGResult):
        return (result.score, *result.mutual_information.ravel())
    if isinstance(result, SAPResult):
        return (result.score, *result.accuracy.ravel())
    return (result.score, result.train_accuracy)


@pytest.mark.parametrize("name", METRICS)
def test_encode_never_receives_more_than_encode_batch_size_images(name, dataset):
    calls = []

    def encode(images):
        calls.append(images.shape[0])
        assert not torch.is_grad_enabled()
        return dataset.true_factors(images)

    METRICS[name](encode, dataset, encode_batch_size=40, **FAST[name])

    assert max(calls) <= 40


@pytest.mark.parametrize("name", METRICS)
def test_encode_may_return_a_numpy_array(name, dataset):
    METRICS[name](lambda images: dataset.true_factors(images).numpy(), dataset, **FAST[name])


@pytest.mark.parametrize("name", METRICS)
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_encode_returning_a_non_finite_value_raises_value_error(name, value, dataset):
    def encode(images):
        values = dataset.true_factors(images).clone()
        values[-1, 0] = value
        return values

    with pytest.raises(ValueError, match="representation returned by encode must be finite"):
        METRICS[name](encode, dataset, **FAST[name])


@pytest.mark.parametrize("name", METRICS)
@pytest.mark.parametrize(
    "encode",
    [lambda images: images[:, 0, 0, 1], lambda images: images[1:, 0, 0, :4]],
    ids=["one-dimensional", "missing-row"],
)
def test_encode_returning_a_wrong_shape_raises_value_error(name, encode, dataset):
    with pytest.raises(ValueError, match="encode must return a 2-D representation"):
        METRICS[name](encode, dataset, **FAST[name])


@pytest.mark.parametrize("name", METRICS)
def test_dataset_without_varying_factor_raises_value_error(name):
    constant = SyntheticFactors((1, 1))
    with pytest.raises(ValueError, match="dataset has no factor with more than one value"):
        METRICS[name](constant.true_factors, constant, **FAST[name])


@pytest.mark.parametrize(
    ("name", "argument", "value"),
    [
        ("mig", "n_train", 1),
        ("mig", "num_bins", 1),
        ("mig", "encode_batch_size", 0),
        ("sap", "n_test", 1),
        ("sap", "n_train", True),
        ("dci", "n_train", 2.5),
        ("dci", "model", "lasso"),
        ("beta_vae", "batch_size", 0),
        ("beta_vae", "n_eval", 0),
    ],
)
def test_bad_argument_raises_value_error_naming_it(name, argument, value, dataset):
    with pytest.raises(ValueError, match=f"{argument}.*{value}"):
        METRICS[name](dataset.true_factors, dataset, **{**FAST[name], argument: value})


@pytest.mark.parametrize("name", METRICS)
def test_progress_off_a_terminal_is_a_start_and_a_finish_line_with_the_time(name, dataset, capsys):
    METRICS[name](dataset.true_factors, dataset, progress=True, **FAST[name])

    lines = capsys.readouterr().err.splitlines()
    assert lines and len(lines) % 2 == 0  # one pair per loop (encoding, fitting)
    assert all(re.match(r"\[\d\d:\d\d:\d\d\] .+: started, [\d,]+ \w+$", line) for line in lines[::2])
    assert all(re.match(r"\[\d\d:\d\d:\d\d\] .+: done in \d+\.\d s$", line) for line in lines[1::2])


@pytest.mark.parametrize("name", METRICS)
def test_progress_false_writes_nothing(name, dataset, capsys):
    METRICS[name](dataset.true_factors, dataset, progress=False, **FAST[name])

    assert capsys.readouterr().err == ""


def test_disentanglement_scores_of_the_true_factors_on_dsprites_sized_factors():
    dataset = SyntheticFactors()

    scores = disentanglement_scores(dataset.true_factors, dataset, votes=50)

    assert set(scores) == {
        "factor_score_parted", "mig", "sap", "dci_disentanglement", "dci_completeness", "dci_informativeness",
        "beta_vae",
    }
    assert scores["factor_score_parted"] >= 0.99
    assert scores["beta_vae"] == 1.0
    assert scores["dci_disentanglement"] > 0.95 and scores["dci_completeness"] > 0.95
    assert scores["mig"] > 0.5, "250 points: the plug-in mutual information of independent factors is large"


def test_factor_scores_give_both_protocols_near_1_for_the_true_factors_and_near_chance_for_noise():
    dataset = SyntheticFactors()  # dSprites' factor sizes: chance is 1/5

    truth = factor_scores(dataset.true_factors, dataset, votes=200, seed=0, progress=False)
    noise = factor_scores(noise_encoder(6), dataset, votes=200, seed=0, progress=False)

    assert set(truth) == {"factor_score", "factor_score_parted"}
    assert min(truth.values()) >= 0.99
    assert all(0.1 < value < 0.35 for value in noise.values()), noise


def test_factor_scores_refuse_too_few_votes(dataset):
    with pytest.raises(ValueError, match="votes.*1"):
        factor_scores(dataset.true_factors, dataset, votes=1)


def test_disentanglement_scores_refuses_too_few_votes(dataset):
    with pytest.raises(ValueError, match="votes.*1"):
        disentanglement_scores(dataset.true_factors, dataset, votes=1)


def test_beta_vae_classifier_has_disentanglement_libs_settings():
    from ppl_vae.metrics.beta_vae import logistic_regression

    classifier = logistic_regression(seed=3)
    params = classifier.estimator.get_params()

    assert type(classifier).__name__ == "OneVsRestClassifier", "one-vs-rest, as scikit-learn 0.20's default"
    assert params["solver"] == "liblinear" and params["C"] == 1.0
    assert params["max_iter"] == 100 and params["tol"] == 1e-4 and params["fit_intercept"] is True
    assert params["random_state"] == 3
