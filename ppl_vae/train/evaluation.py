"""Evaluation during training: a curve of held-out figures against training steps, and
stopping on a plateau of one of them::

    accuracy = PeriodicEvaluation(lambda model: {"accuracy": held_out_accuracy(model)},
                                  every_n_steps=500, monitor="accuracy", patience=5)
    result = ppl_vae.fit(model, objective, data, config, callbacks=[accuracy])
    accuracy.history   # [{"step": 500, "accuracy": 0.81}, {"step": 1000, ...}, ...]
    accuracy.best      # {"step": ..., "accuracy": ...}: the best evaluation, whose weights
                       # the model holds at the end (restore_best=True)
"""
from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

import lightning as L
import torch
from torch import nn

from ppl_vae._validation import boolean, finite, positive_integer

__all__ = ["PeriodicEvaluation"]


class PeriodicEvaluation(L.Callback):
    """Evaluate the model every ``every_n_steps`` training iterations and at the end of
    training; optionally stop once the figure ``monitor`` has not improved for ``patience``
    evaluations in a row.

    :param evaluate: ``model -> {name: number}``, called with the model in eval mode and
        gradients off (train mode is restored afterwards). It should read held-out data only.
    :param every_n_steps: evaluation interval, in training iterations (the engine's
        ``module.iteration``; with several iterations per training step, an evaluation runs
        at the end of the first training step at or after each multiple).
    :param monitor: the figure that decides stopping and the best evaluation; ``None``
        records the curve and never stops.
    :param mode: ``"max"`` (higher is better) or ``"min"``.
    :param patience: stop after this many evaluations without an improvement of more than
        ``min_delta`` over the best so far.
    :param min_delta: the smallest change that counts as an improvement.
    :param restore_best: at the end of training, load the weights of the best evaluation
        into the model (kept on the CPU meanwhile; the figures of :attr:`best` then describe
        the returned model).
    :param evaluate_at_end: evaluate the model when training ends between two multiples of
        ``every_n_steps`` (a stop on a plateau, a time budget); ``False`` keeps the curve to
        the multiples, so that a run stopped and resumed has the points of one that was not.

    :attr:`history` lists every evaluation as ``{"step": iteration, **figures}``;
    :attr:`best` is the best of them (``None`` before the first, or without ``monitor``);
    :attr:`stopped_at` is the iteration of a plateau stop, else ``None``. The callback's
    state travels in the run's checkpoints, so a resumed run keeps its curve and patience.
    With data parallelism every process evaluates, and all stop together when any has run
    out of patience.
    """

    def __init__(
        self,
        evaluate: Callable[[nn.Module], Mapping[str, float]],
        every_n_steps: int,
        monitor: str | None = None,
        mode: str = "max",
        patience: int = 5,
        min_delta: float = 0.0,
        restore_best: bool = True,
        evaluate_at_end: bool = True,
    ) -> None:
        if not callable(evaluate):
            raise ValueError(f"evaluate must be a function model -> dict of figures, got {evaluate!r}")
        if mode not in ("max", "min"):
            raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")
        if monitor is not None and not isinstance(monitor, str):
            raise ValueError(f"monitor must be the name of a figure or None, got {monitor!r}")
        self.evaluate = evaluate
        self.every_n_steps = positive_integer("every_n_steps", every_n_steps)
        self.monitor = monitor
        self.mode = mode
        self.patience = positive_integer("patience", patience)
        self.min_delta = finite("min_delta", min_delta, low=0.0)
        self.restore_best = boolean("restore_best", restore_best)
        self.evaluate_at_end = boolean("evaluate_at_end", evaluate_at_end)
        #: Every evaluation so far, as ``{"step": iteration, **figures}``.
        self.history: list[dict[str, float]] = []
        #: The best evaluation of :attr:`history` (``None`` before the first, or without ``monitor``).
        self.best: dict[str, float] | None = None
        #: The iteration of a plateau stop, else ``None``.
        self.stopped_at: int | None = None
        self._best_weights: dict[str, torch.Tensor] | None = None
        self._waited = 0

    def _improves(self, value: float) -> bool:
        if self.best is None:
            return True
        best = self.best[self.monitor]
        return value > best + self.min_delta if self.mode == "max" else value < best - self.min_delta

    def _run(self, model: nn.Module, step: int) -> None:
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                figures = {name: float(value) for name, value in self.evaluate(model).items()}
        finally:
            model.train(was_training)
        if self.monitor is not None and self.monitor not in figures:
            raise KeyError(f"evaluate returned {sorted(figures)}, without the monitored figure {self.monitor!r}")
        record = {"step": step, **figures}
        self.history.append(record)
        if self.monitor is None:
            return
        if self._improves(figures[self.monitor]):
            self.best, self._waited = record, 0
            if self.restore_best:
                self._best_weights = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
        else:
            self._waited += 1

    def on_train_batch_end(self, trainer: L.Trainer, module: L.LightningModule, *args: Any) -> None:
        """Evaluate when the iterations crossed a multiple of ``every_n_steps``; stop on a plateau.

        :param trainer: the Lightning trainer (told to stop on a plateau).
        :param module: the training module, with the ``model`` and its ``iteration`` count.
        :param args: Lightning's other arguments (outputs, batch, batch index), unused.
        """
        step = module.iteration
        last = self.history[-1]["step"] if self.history else 0
        if step // self.every_n_steps <= last // self.every_n_steps:
            return
        self._run(module.model, step)
        out_of_patience = self.monitor is not None and self._waited >= self.patience
        if trainer.strategy.reduce_boolean_decision(out_of_patience, all=False):
            self.stopped_at = step
            trainer.should_stop = True

    def on_train_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        """Evaluate the final model (unless just done, or ``evaluate_at_end`` is off); load
        the best weights if asked.

        :param trainer: the Lightning trainer.
        :param module: the training module, with the ``model`` and its ``iteration`` count.
        """
        if self.evaluate_at_end and (not self.history or self.history[-1]["step"] != module.iteration):
            self._run(module.model, module.iteration)
        if self.restore_best and self._best_weights is not None:
            module.model.load_state_dict(self._best_weights)

    def state_dict(self) -> dict[str, Any]:
        """The curve, the best evaluation (with its weights) and the patience used so far."""
        return {"history": copy.deepcopy(self.history), "best": copy.deepcopy(self.best),
                "stopped_at": self.stopped_at, "waited": self._waited, "best_weights": self._best_weights}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict` (a resumed run).

        :param state_dict: the checkpoint's :meth:`state_dict` of this callback.
        """
        self.history = list(state_dict["history"])
        self.best = state_dict["best"]
        self.stopped_at = state_dict["stopped_at"]
        self._waited = int(state_dict["waited"])
        self._best_weights = state_dict["best_weights"]
