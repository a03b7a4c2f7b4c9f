r"""Schedules: quantities that change with the training step.

A schedule is a callable ``step -> value``, and the training step reaches it as an argument:
the training loop hands its step to the objective's call (``svi.step(x, step=t)``,
:class:`~ppl_vae.infer.TrainingIteration` and the engine do it), the objective hands it to
its terms (the ``step`` of :class:`~ppl_vae.infer.terms.TermSites`) and, for a model whose
guide follows a schedule (PartedVAE's attention sharpness), to the model and guide. Nothing
is kept between calls::

    capacity = LinearCapacity(c_min=0.0, c_max=30.0, num_steps=300_000)
    capacity(0), capacity(150_000), capacity(10**6)   # 0.0, 15.0, 30.0
    capacity(torch.tensor(150_000))                    # tensor(15.): a tensor step, a tensor value

A step given as a tensor gives a tensor value, so a loss computed from schedules can be
compiled once and fed a new step every iteration.

This module needs only torch: it sits below both :mod:`ppl_vae.models` (PartedVAE's guide
follows a schedule) and :mod:`ppl_vae.infer` (capacity terms), which import it and not each
other. :mod:`ppl_vae.infer` re-exports its classes.

- :class:`LinearSchedule`: a straight line from ``start`` to ``end`` over ``num_steps``
  steps, constant afterwards, in either direction (a growing attention sharpness, a
  falling temperature).
- :class:`LinearCapacity`: the information capacity C(t) of Burgess et al. (2018), as
  PartedVAE uses it for KL_z and KL_u (Hajimiri et al. 2021, Eq. 6).
"""
from __future__ import annotations

import torch

from ppl_vae._validation import capacity_range, finite, require

__all__ = ["LinearCapacity", "LinearSchedule"]


def _check_step(step: int | torch.Tensor) -> int | torch.Tensor:
    """``step``, or a ``ValueError`` unless it is an int >= 0 or a 0-dim tensor (whose sign is
    not read: that would wait on the device)."""
    if torch.is_tensor(step):
        if step.dim() != 0:
            raise ValueError(f"step must be a non-negative integer or a 0-dim tensor, got a tensor of shape {tuple(step.shape)}")
        return step
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be a non-negative integer or a 0-dim tensor, got {step!r}")
    return step


class LinearSchedule:
    r"""``v(t) = start + (end - start) * min(t / num_steps, 1)``.

    :param start: value at step 0.
    :param end: value from step ``num_steps`` on.
    :param num_steps: length T of the ramp (> 0; need not be an integer).
    """

    def __init__(self, start: float, end: float, num_steps: float) -> None:
        self.start = finite("start", start)
        self.end = finite("end", end)
        self.num_steps = finite("num_steps", num_steps, positive=True)

    @classmethod
    def from_rate(cls, start: float, rate: float, end: float) -> LinearSchedule:
        """The schedule that moves from ``start`` by ``rate`` per step until it reaches ``end``.

        PartedVAE's attention sharpness: ``LinearSchedule.from_rate(1.0, 2e-4, 8.0)``.

        :param start: value at step 0.
        :param rate: change per step, non-zero, with the sign of ``end - start``.
        :param end: the value it stays at from step ``(end - start) / rate`` on.
        """
        start, rate, end = finite("start", start), finite("rate", rate), finite("end", end)
        if rate == 0 or (end - start) / rate <= 0:
            raise ValueError(
                f"rate must be non-zero and move start ({start}) towards end ({end}), got {rate}"
            )
        return cls(start, end, (end - start) / rate)

    def __call__(self, step: int | torch.Tensor) -> float | torch.Tensor:
        """The value at training step ``step``: a float for an int step (>= 0), a float tensor
        for a 0-dim tensor step (on its device)."""
        step = _check_step(step)
        if torch.is_tensor(step):
            progress = (step / self.num_steps).clamp(max=1.0)
        else:
            progress = min(step / self.num_steps, 1.0)
        return self.start + (self.end - self.start) * progress

    def __repr__(self) -> str:
        return f"{type(self).__name__}(start={self.start}, end={self.end}, num_steps={self.num_steps})"


class LinearCapacity(LinearSchedule):
    r"""Information capacity :math:`C(t) = \min(C_{min} + (C_{max} - C_{min})\, t / T,\ C_{max})`.

    The target of a capacity term :math:`\gamma\,|KL - C(t)|` (Burgess et al. 2018;
    PartedVAE Eq. 6), in nats; t is the training (ELBO) step.

    :param c_min: capacity at step 0, >= 0.
    :param c_max: capacity from step ``num_steps`` on, >= ``c_min`` (the rule a recipe's
        ``z_capacity`` and ``u_capacity`` are checked by too).
    :param num_steps: T, > 0.
    """

    def __init__(self, c_min: float, c_max: float, num_steps: float) -> None:
        super().__init__(*capacity_range("(c_min, c_max)", (c_min, c_max)), num_steps)

    @property
    def c_min(self) -> float:
        """Capacity at step 0."""
        return self.start

    @property
    def c_max(self) -> float:
        """Final capacity."""
        return self.end

    def __repr__(self) -> str:
        return f"LinearCapacity(c_min={self.start}, c_max={self.end}, num_steps={self.num_steps})"

    @staticmethod
    def required(name: str, value: object) -> LinearCapacity:
        """``value``, refused unless it is a :class:`LinearCapacity` (whose ends were checked when
        it was made): the one rule for every capacity argument.

        :param name: the argument's name, for the message.
        :param value: the argument.
        :raises ValueError: ``"{name} must be a LinearCapacity(c_min, c_max, num_steps), got ..."``.
        """
        require(name, value, isinstance(value, LinearCapacity), "a LinearCapacity(c_min, c_max, num_steps)")
        return value
