"""PeriodicEvaluation: the curve of held-out figures, stopping on a plateau, the best weights, resume."""
import pytest
import torch
from pyro.infer import TraceMeanField_ELBO
from test_engine import FAST, Interrupt, InterruptAt, small_vae

from ppl_vae import fit
from ppl_vae.train import PeriodicEvaluation, read_checkpoint


def scripted(values):
    """An evaluation that returns the next of ``values`` each time and notes the mode it ran in."""
    calls = []

    def evaluate(model):
        calls.append((model.training, torch.is_grad_enabled()))
        return {"score": values[len(calls) - 1]}

    return evaluate, calls


def test_evaluates_at_every_multiple_and_at_the_end_in_eval_mode_without_gradients(data):
    evaluate, calls = scripted([0.1, 0.2, 0.3, 0.4])
    curve = PeriodicEvaluation(evaluate, every_n_steps=10)
    fit(small_vae(), TraceMeanField_ELBO(), data, steps=35, callbacks=[curve], **FAST)
    assert [record["step"] for record in curve.history] == [10, 20, 30, 35]
    assert [record["score"] for record in curve.history] == [0.1, 0.2, 0.3, 0.4]
    assert calls == [(False, False)] * 4
    assert curve.best is None and curve.stopped_at is None



def test_without_evaluate_at_end_the_curve_keeps_to_the_multiples(data):
    evaluate, calls = scripted([0.1, 0.2, 0.3, 0.4])
    curve = PeriodicEvaluation(evaluate, every_n_steps=10, evaluate_at_end=False)
    fit(small_vae(), TraceMeanField_ELBO(), data, steps=35, callbacks=[curve], **FAST)
    assert [record["step"] for record in curve.history] == [10, 20, 30]
    assert len(calls) == 3

def test_stops_after_patience_evaluations_without_improvement_and_returns_the_best_weights(data):
    weights = []

    def evaluate(model):
        weights.append({k: v.clone() for k, v in model.state_dict().items()})
        return {"accuracy": [0.5, 0.7, 0.69, 0.7, 0.6, 0.9][len(weights) - 1]}

    stop = PeriodicEvaluation(evaluate, every_n_steps=5, monitor="accuracy", patience=3)
    result = fit(small_vae(), TraceMeanField_ELBO(), data, steps=100, callbacks=[stop], **FAST)
    assert [record["step"] for record in stop.history] == [5, 10, 15, 20, 25]
    assert stop.stopped_at == 25 and result.steps == 25
    assert stop.best == {"step": 10, "accuracy": 0.7}
    for name, value in result.model.state_dict().items():
        torch.testing.assert_close(value, weights[1][name])


def test_min_mode_watches_a_falling_figure(data):
    stop = PeriodicEvaluation(lambda model: {"loss": 1.0}, every_n_steps=5, monitor="loss", mode="min", patience=2)
    fit(small_vae(), TraceMeanField_ELBO(), data, steps=100, callbacks=[stop], **FAST)
    assert stop.stopped_at == 15 and stop.best["step"] == 5


def test_a_resumed_run_keeps_the_curve_and_the_patience_used(data, tmp_path):
    scores = [0.5, 0.6, 0.4, 0.4, 0.4, 0.4]
    settings = dict(steps=60, checkpoint_every_n_steps=10, **FAST)
    evaluate, _ = scripted(scores)
    first = PeriodicEvaluation(evaluate, every_n_steps=10, monitor="score", patience=3)
    with pytest.raises(Interrupt):
        fit(small_vae(), TraceMeanField_ELBO(), data, run_dir=tmp_path, callbacks=[first, InterruptAt(35)], **settings)
    assert read_checkpoint(tmp_path / "checkpoints" / "last.ckpt")["ppl_vae"]["iteration"] == 30
    evaluate, _ = scripted(scores[3:])
    resumed = PeriodicEvaluation(evaluate, every_n_steps=10, monitor="score", patience=3)
    result = fit(small_vae(), TraceMeanField_ELBO(), data, run_dir=tmp_path, resume=True, callbacks=[resumed], **settings)
    assert [record["step"] for record in resumed.history] == [10, 20, 30, 40, 50]
    assert resumed.stopped_at == 50 and result.steps == 50 and resumed.best["step"] == 20


@pytest.mark.parametrize(
    "arguments, message",
    [
        (dict(evaluate=None, every_n_steps=5), "evaluate"),
        (dict(every_n_steps=0), "every_n_steps"),
        (dict(every_n_steps=5, patience=0), "patience"),
        (dict(every_n_steps=5, mode="up"), "mode"),
        (dict(every_n_steps=5, min_delta=-1.0), "min_delta"),
        (dict(every_n_steps=5, evaluate_at_end="no"), "evaluate_at_end"),
    ],
)
def test_bad_settings_are_named(arguments, message):
    with pytest.raises(ValueError, match=message):
        PeriodicEvaluation(**{"evaluate": lambda model: {}, **arguments})


def test_a_missing_monitored_figure_is_named(data):
    stop = PeriodicEvaluation(lambda model: {"other": 1.0}, every_n_steps=5, monitor="accuracy")
    with pytest.raises(KeyError, match="accuracy"):
        fit(small_vae(), TraceMeanField_ELBO(), data, steps=10, callbacks=[stop], **FAST)
