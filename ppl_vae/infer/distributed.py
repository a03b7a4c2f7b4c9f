r"""Batch-level terms over the global batch under data parallelism.

Most of an ELBO is a sum over data points, and data-parallel training (the engine's DDP:
each of N processes takes its own B rows of one shared permutation, and parameter
gradients are averaged over processes) computes such sums exactly. A few terms are
functions of the *whole* minibatch instead: the MMD and the inclusive KL between the
aggregate posterior and the prior (:class:`~ppl_vae.infer.decomposition.DecompositionELBO`),
the aggregate q(c) of PartedVAE, the shuffled pairs of the contrastive VAE's TC
discriminator. Computed per process they would see B points rather than N B. The
functions here give them the global batch:

- :func:`all_gather` concatenates a ``(B, ...)`` tensor of every process into the
  ``(N B, ...)`` tensor that one process with batch N B would have built, in rank order
  (rank r holds rows ``r B`` to ``(r + 1) B`` of the global batch, as
  :class:`~ppl_vae.train.TensorBatches` deals them), and keeps gradients;
- :func:`shared_permutation` draws one permutation of the global batch for every process;
- :func:`local_rows` picks this process's rows out of a global tensor.

They only act inside :func:`global_batch`, which the engine enters around each training
step when it runs on more than one process. Everywhere else (a plain SVI loop, a
notebook, the evaluation after training, which runs on one process) they return their
input unchanged and draw their randomness from the ordinary torch generator, so an
objective that uses them behaves exactly as before on one process.

Gradients. With losses :math:`L_1, \dots, L_N` on the N processes, DDP averages the
parameter gradients, i.e. it follows :math:`\nabla \frac{1}{N}\sum_r L_r`. A term of
:math:`L_r` that depends on other processes' rows through :func:`all_gather` contributes
to their gradients, so the backward pass of :func:`all_gather` sums the incoming
gradients over processes and hands each process the rows it contributed. The average
over processes of the resulting parameter gradients is then exactly
:math:`\nabla \frac{1}{N}\sum_r L_r`.

This module imports neither Lightning nor the engine, so objectives can use it.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.distributed as dist

__all__ = [
    "all_gather",
    "global_batch",
    "is_gathering",
    "local_rows",
    "process_rank",
    "shared_permutation",
    "world_size",
]

_gathering = False


def _initialised() -> bool:
    return dist.is_available() and dist.is_initialized()


def world_size() -> int:
    """The number of processes of the default process group (1 when there is none)."""
    return dist.get_world_size() if _initialised() else 1


def process_rank() -> int:
    """This process's rank in the default process group (0 when there is none)."""
    return dist.get_rank() if _initialised() else 0


def is_gathering() -> bool:
    """Whether batch-level terms are computed over every process's batch right now: inside
    :func:`global_batch`, with an initialised process group of more than one process."""
    return _gathering and world_size() > 1


@contextmanager
def global_batch() -> Iterator[None]:
    """Within this block, :func:`all_gather`, :func:`shared_permutation` and
    :func:`local_rows` act over all processes of the default process group.

    Every process must run the same sequence of gathers inside the block (the same
    objective on batches of the same shapes), as with any collective. The engine enters it
    around each training step; a hand-written DDP loop would do the same around its loss.
    """
    global _gathering
    previous, _gathering = _gathering, True
    try:
        yield
    finally:
        _gathering = previous


class _AllGather(torch.autograd.Function):
    """``(B, ...) -> (N B, ...)`` in rank order; backward: the gradient summed over
    processes, rows of this process."""

    @staticmethod
    def forward(ctx, tensor: torch.Tensor) -> torch.Tensor:
        tensor = tensor.contiguous()
        pieces = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
        dist.all_gather(pieces, tensor)
        ctx.rows = slice(dist.get_rank() * tensor.shape[0], (dist.get_rank() + 1) * tensor.shape[0])
        return torch.cat(pieces)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM)
        return grad[ctx.rows]


def all_gather(tensor: torch.Tensor) -> torch.Tensor:
    """This process's ``(B, ...)`` rows of a batch-level quantity -> the global ``(N B, ...)``.

    Rows come in rank order, so the result is what one process with the whole global batch
    would compute. Differentiable: the gradient reaching ``tensor`` is the sum over
    processes of the gradients of their losses with respect to its rows (see the module's
    docstring for why the sum is right under DDP's averaging). Every process must pass the
    same shape (the engine's batches have the same size on every process).

    Outside :func:`global_batch`, or on one process, returns ``tensor`` itself.

    :param tensor: this process's ``(B, ...)`` rows, the same shape on every process.
    """
    if not is_gathering():
        return tensor
    return _AllGather.apply(tensor)


def local_rows(tensor: torch.Tensor, num_rows: int) -> torch.Tensor:
    """This process's ``num_rows`` rows of a global ``(N num_rows, ...)`` tensor (the rows
    :func:`all_gather` took from it); the tensor itself outside :func:`global_batch`.

    :param tensor: a global ``(N num_rows, ...)`` tensor, its rows in rank order.
    :param num_rows: B, the rows each process contributed."""
    if not is_gathering():
        return tensor
    start = process_rank() * num_rows
    return tensor[start : start + num_rows]


def shared_permutation(size: int, device: torch.device | str | None = None) -> torch.Tensor:
    """A random permutation of ``range(size)`` ``(size,)``, the same on every process: drawn
    by ``torch.randperm`` on rank 0 and broadcast (processes draw from different seeds).
    Outside :func:`global_batch` it is ``torch.randperm(size, device=device)``.

    :param size: the number of items permuted (the global batch size).
    :param device: the device the permutation is drawn on (``None``: the default device)."""
    permutation = torch.randperm(size, device=device)
    if is_gathering():
        dist.broadcast(permutation, src=0)
    return permutation
