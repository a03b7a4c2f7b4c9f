r"""Batch-level terms over the global batch under data parallelism.

Most of an ELBO is a sum over data points, and data-parallel training (the engine's DDP:
each of N processes takes its own B rows of one shared permutation, and parameter
gradients are averaged over processes) computes such sums exactly. A few terms are
functions of the *whole* minibatch instead: the MMD and the inclusive KL between the
aggregate posterior and the prior (:class:`~ppl_vae.infer.decomposition.DecompositionELBO`),
the aggregate q(c) of PartedVAE, the shuffled pairs of the contrastive VAE's TC
discriminator. Computed per process they would see B points rather than N B. The
methods of :class:`GlobalBatch` give them the global batch:

- :meth:`~GlobalBatch.all_gather` concatenates a ``(B, ...)`` tensor of every process into the
  ``(N B, ...)`` tensor that one process with batch N B would have built, in rank order
  (rank r holds rows ``r B`` to ``(r + 1) B`` of the global batch, as
  :class:`~ppl_vae.train.TensorBatches` deals them), and keeps gradients;
- :meth:`~GlobalBatch.shared_permutation` draws one permutation of the global batch for every process;
- :meth:`~GlobalBatch.local_rows` picks this process's rows out of a global tensor.

The training iteration (:class:`~ppl_vae.infer.TrainingIteration`,
which the engine runs) owns one and hands it to each call of the objective (its ``global_batch``
argument), a term reads it as the ``global_batch`` of :class:`~ppl_vae.infer.terms.TermSites`,
and the ELBO step hands it on to the auxiliary steps after it. On one process, and for a call
that gives none (a plain SVI loop, a notebook, the evaluation after training), every method is
the identity on its input (:data:`~ppl_vae.infer.LOCAL_BATCH`) and randomness comes from the ordinary torch
generator, so an objective behaves exactly as it does without data parallelism.

Gradients. With losses :math:`L_1, \dots, L_N` on the N processes, DDP averages the
parameter gradients, i.e. it follows :math:`\nabla \frac{1}{N}\sum_r L_r`. A term of
:math:`L_r` that depends on other processes' rows through :meth:`~GlobalBatch.all_gather` contributes
to their gradients, so the backward pass of :meth:`~GlobalBatch.all_gather` sums the incoming
gradients over processes and hands each process the rows it contributed. The average
over processes of the resulting parameter gradients is then exactly
:math:`\nabla \frac{1}{N}\sum_r L_r`.

This module imports neither Lightning nor the engine, so objectives can use it.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

__all__ = ["LOCAL_BATCH", "GlobalBatch", "process_rank", "world_size"]


def _initialised() -> bool:
    return dist.is_available() and dist.is_initialized()


def world_size() -> int:
    """The number of processes of the default process group (1 when there is none)."""
    return dist.get_world_size() if _initialised() else 1


def process_rank() -> int:
    """This process's rank in the default process group (0 when there is none)."""
    return dist.get_rank() if _initialised() else 0


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


class GlobalBatch:
    """The global batch of one training iteration: this process's ``(B, ...)`` rows and, under
    data parallelism, every other process's (the module's docstring).

    Every process must run the same sequence of gathers (the same objective on batches of the
    same shapes), as with any collective.

    :param across_processes: take batch-level quantities over the processes of the default
        process group (when it has more than one); ``False`` keeps them to this process's rows
        (:data:`LOCAL_BATCH`).
    """

    def __init__(self, across_processes: bool = True) -> None:
        self.across_processes = bool(across_processes)

    @property
    def gathering(self) -> bool:
        """Whether batch-level quantities are taken over several processes: across processes,
        with an initialised process group of more than one process."""
        return self.across_processes and world_size() > 1

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """This process's ``(B, ...)`` rows of a batch-level quantity -> the global ``(N B, ...)``.

        Rows come in rank order, so the result is what one process with the whole global batch
        would compute. Differentiable: the gradient reaching ``tensor`` is the sum over
        processes of the gradients of their losses with respect to its rows (see the module's
        docstring for why the sum is right under DDP's averaging). ``tensor`` itself when not
        :attr:`gathering`.

        :param tensor: this process's ``(B, ...)`` rows, the same shape on every process."""
        return _AllGather.apply(tensor) if self.gathering else tensor

    def local_rows(self, tensor: torch.Tensor, num_rows: int) -> torch.Tensor:
        """This process's ``num_rows`` rows of a global ``(N num_rows, ...)`` tensor (the rows
        :meth:`all_gather` took from it); the tensor itself when not :attr:`gathering`.

        :param tensor: a global ``(N num_rows, ...)`` tensor, its rows in rank order.
        :param num_rows: B, the rows each process contributed."""
        if not self.gathering:
            return tensor
        start = process_rank() * num_rows
        return tensor[start : start + num_rows]

    def shared_permutation(self, size: int, device: torch.device | str | None = None) -> torch.Tensor:
        """A random permutation of ``range(size)`` ``(size,)``, the same on every process: drawn
        by ``torch.randperm`` on rank 0 and broadcast (processes draw from different seeds);
        ``torch.randperm(size, device=device)`` when not :attr:`gathering`.

        :param size: the number of items permuted (the global batch size).
        :param device: the device the permutation is drawn on (``None``: the default device)."""
        permutation = torch.randperm(size, device=device)
        if self.gathering:
            dist.broadcast(permutation, src=0)
        return permutation

    def __repr__(self) -> str:
        return f"GlobalBatch(across_processes={self.across_processes})"


#: One process's batch alone: what a call of an objective that gives no global batch uses.
LOCAL_BATCH = GlobalBatch(across_processes=False)
