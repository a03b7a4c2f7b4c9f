"""``ppl-vae ARGS...`` in this process, killed with SIGKILL at a chosen moment.

    python sigkill_worker.py MOMENT N ARGS...

MOMENT is where the process kills itself, at the N-th time it gets there:
``iteration`` after training iteration N (and its logging) but before the next checkpoint;
``checkpoint-write`` halfway through writing the N-th checkpoint file; ``evaluation`` after
the N-th picture of the evaluation that follows training. Used by
``test_interrupted_training.py``: a real SIGKILL at a moment a timer could not hit reliably.
"""
import io
import os
import signal
import sys

import matplotlib.figure
import torch

from ppl_vae.cli import main
from ppl_vae.train.module import SVIModule


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def kill_after_iteration(n: int) -> None:
    training_step = SVIModule.training_step

    def step_then_die(self, *args, **kwargs):
        training_step(self, *args, **kwargs)
        if self.iteration >= n:
            die()

    SVIModule.training_step = step_then_die


def kill_during_checkpoint_write(n: int) -> None:
    save, calls = torch.save, []

    def half_then_die(obj, handle, *args, **kwargs):
        calls.append(1)
        if len(calls) < n:
            return save(obj, handle, *args, **kwargs)
        buffer = io.BytesIO()
        save(obj, buffer, *args, **kwargs)
        handle.write(buffer.getvalue()[: len(buffer.getvalue()) // 2])
        handle.flush()
        die()

    torch.save = half_then_die


def kill_during_evaluation(n: int) -> None:
    savefig, calls = matplotlib.figure.Figure.savefig, []

    def save_then_die(self, *args, **kwargs):
        savefig(self, *args, **kwargs)
        calls.append(1)
        if len(calls) >= n:
            die()

    matplotlib.figure.Figure.savefig = save_then_die


MOMENTS = {
    "iteration": kill_after_iteration,
    "checkpoint-write": kill_during_checkpoint_write,
    "evaluation": kill_during_evaluation,
}

if __name__ == "__main__":
    moment, n, *argv = sys.argv[1:]
    MOMENTS[moment](int(n))
    sys.exit(main(argv))
