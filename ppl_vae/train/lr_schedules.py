"""Learning rates reduced on a plateau of a step's loss, under manual optimisation.

``PlateauSchedules`` builds one ``torch.optim.lr_scheduler.ReduceLROnPlateau`` for each
step that the ``lr_plateau`` of a :class:`~ppl_vae.train.TrainConfig` names and feeds it, at the end of each
window of iterations, the mean of that step's loss over the window. The training module hands
the schedulers to Lightning (which saves and restores their state with the checkpoint) and
calls ``PlateauSchedules.observe`` after every iteration; the sums of an unfinished window
go into the checkpoint too, so a resumed run reduces its rates exactly when an uninterrupted
one would.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
from torch.optim.lr_scheduler import ReduceLROnPlateau

from ppl_vae.train.config import LRPlateau


class PlateauSchedules:
    """The plateau schedules of the steps named in ``schedules``.

    :param schedules: ``{step name: LRPlateau}`` (:attr:`~ppl_vae.train.TrainConfig.lr_plateau`).
    :param step_names: the names of the run's steps in the order of its optimisers:
        ``"elbo"``, then the auxiliary steps'.
    :raises ValueError: ``schedules`` names a step the run does not take.
    """

    def __init__(self, schedules: Mapping[str, LRPlateau], step_names: Sequence[str]) -> None:
        unknown = sorted(set(schedules) - set(step_names))
        if unknown:
            raise ValueError(
                f"lr_plateau names steps {unknown} that this objective does not take; its steps are {list(step_names)}"
            )
        self.step_names = list(step_names)
        self.names = [name for name in self.step_names if name in schedules]
        self.schedules = {name: schedules[name] for name in self.names}
        self.windows: dict[str, int] = {}
        self.sums: dict[str, torch.Tensor] = {}

    def schedulers(self, optimizers: Sequence[torch.optim.Optimizer]) -> list[ReduceLROnPlateau]:
        """One scheduler per scheduled step (in :attr:`names`' order), on that step's optimiser;
        ``optimizers`` are the run's, in :attr:`step_names`' order."""
        return [
            ReduceLROnPlateau(optimizers[self.step_names.index(name)], **self.schedules[name].scheduler_arguments())
            for name in self.names
        ]

    def set_windows(self, epoch: int) -> None:
        """Fix each schedule's window: its ``every_n_steps``, or ``epoch`` iterations (one pass
        over the ELBO step's data) where that is ``None``."""
        self.windows = {name: schedule.every_n_steps or epoch for name, schedule in self.schedules.items()}

    def observe(
        self,
        iteration: int,
        values: Mapping[str, torch.Tensor],
        schedulers: Sequence[ReduceLROnPlateau],
        reduce: Callable[[torch.Tensor], torch.Tensor] = lambda values: values,
    ) -> None:
        """Add the losses of the iteration that ends at ``iteration`` (counted from 1) to their
        windows, and step the scheduler of each window that ends there with the window's mean.

        :param values: the iteration's detached values; step ``name``'s loss is ``values[f"{name}_loss"]``.
        :param schedulers: from :meth:`schedulers` (Lightning's copies after a restore).
        :param reduce: averages a ``(1,)`` mean over processes (data parallelism); it runs on
            every process at the same iterations.
        """
        for name, scheduler in zip(self.names, schedulers, strict=True):
            loss = values[f"{name}_loss"].detach().float()
            self.sums[name] = loss if name not in self.sums else self.sums[name] + loss
            window = self.windows[name]
            if iteration % window == 0:
                mean = reduce((self.sums.pop(name) / window).reshape(1))
                scheduler.step(float(mean))

    def state_dict(self, reduce: Callable[[torch.Tensor], torch.Tensor] = lambda values: values) -> dict[str, float]:
        """The sums of the unfinished windows, as plain numbers (for a weights-only checkpoint);
        ``reduce`` averages them over processes, so every process resumes from the same sums."""
        return {name: float(reduce(total.reshape(1))) for name, total in self.sums.items()}

    def load_state_dict(self, state: Mapping[str, float]) -> None:
        """Restore the sums of :meth:`state_dict`."""
        self.sums = {name: torch.tensor(float(total)) for name, total in state.items()}
