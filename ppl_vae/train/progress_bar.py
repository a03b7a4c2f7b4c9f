"""The training bar of :func:`~ppl_vae.fit`: Lightning's tqdm bar, redrawn as often as where it
is written can show."""
from __future__ import annotations

import sys
from math import ceil
from typing import TextIO

import lightning as L
from lightning.pytorch.callbacks import ProgressBar, TQDMProgressBar

from ppl_vae.train.config import TrainConfig

__all__ = ["training_progress_bar", "with_progress_bar"]

#: How often the training bar is redrawn, in all, where each redraw is a new line or message.
_REDRAWS_OFF_A_TERMINAL = 20


def training_progress_bar(training_steps: int, stream: TextIO | None = None) -> TQDMProgressBar:
    """Lightning's tqdm bar over ``training_steps`` Lightning training steps, with a refresh rate
    for where it is written (Lightning writes it to stdout).

    On a terminal it is redrawn at every step, in place. Elsewhere each redraw is a new line
    (a log file) or a new stream message (Jupyter, where a 1,000-step run would otherwise
    store thousands of them in the notebook): there it is redrawn about 20 times in all.
    With ipywidgets installed, Lightning draws tqdm's notebook widget in Jupyter
    (``tqdm.auto``), updated in place.

    :param training_steps: number of Lightning training steps of the run (iterations divided
        by ``TrainConfig.iterations_per_training_step``, rounded up).
    :param stream: the stream the bar is written to, asked only whether it is a terminal
        (``isatty``); ``None`` for ``sys.stdout``, where Lightning writes it.
    """
    stream = sys.stdout if stream is None else stream
    on_terminal = bool(getattr(stream, "isatty", None) and stream.isatty())
    refresh_rate = 1 if on_terminal else max(1, training_steps // _REDRAWS_OFF_A_TERMINAL)
    return TQDMProgressBar(refresh_rate=refresh_rate)


def with_progress_bar(callbacks: list[L.Callback], config: TrainConfig) -> list[L.Callback]:
    """``callbacks`` and, when ``config.progress_bar`` is on and none of them is a progress
    bar, a bar whose redraws suit where it is written (:func:`training_progress_bar`).

    :param callbacks: the Lightning callbacks of the run; a new list is returned, this one is
        not changed.
    :param config: the training settings; ``config.progress_bar``, ``config.steps`` and
        ``config.iterations_per_training_step`` are read.
    """
    if not config.progress_bar or any(isinstance(callback, ProgressBar) for callback in callbacks):
        return callbacks
    training_steps = ceil(config.steps / config.iterations_per_training_step)
    return [*callbacks, training_progress_bar(training_steps)]
