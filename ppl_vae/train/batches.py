"""Minibatches drawn from tensors that live on the training device.

Small data sets (dSprites as bits, MNIST, pinwheel, Grassy-MNIST) fit in GPU memory;
indexing them there avoids DataLoader workers and host-to-device copies altogether.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from math import ceil

import torch

from ppl_vae._storage import stored_as_float
from ppl_vae._validation import integer, positive_integer

#: Training data as :func:`as_groups` normalises it: group name -> {tensor name -> tensor}, the
#: tensors of one group aligned along their first dimension.
TensorGroups = dict[str, dict[str, torch.Tensor]]


def as_groups(data: Mapping[str, torch.Tensor | Mapping[str, torch.Tensor]]) -> TensorGroups:
    """Normalise training data to named groups of aligned tensors.

    ``{"x": X}`` becomes ``{"x": {"x": X}}``; ``{"labelled": {"x": XL, "y": YL}}`` stays.
    Tensors in one group must share their first dimension; groups may differ in size
    (unpaired target and background data, a small labelled set).

    :param data: name -> tensor (a group of its own, of that name), or name -> {key: tensor}.
    """
    if not isinstance(data, Mapping) or not data:
        raise ValueError(
            "data must be a non-empty mapping of name -> tensor or name -> {key: tensor}, "
            f"got {type(data).__name__}"
        )
    groups: TensorGroups = {}
    for name, value in data.items():
        if isinstance(value, torch.Tensor):
            group = {name: value}
        elif isinstance(value, Mapping):
            group = dict(value)
        else:
            raise ValueError(
                f"data[{name!r}] must be a torch.Tensor or a mapping of tensors, got {type(value).__name__}"
            )
        if not group:
            raise ValueError(f"data group {name!r} is empty")
        sizes = set()
        for key, tensor in group.items():
            where = f"data[{name!r}]" if isinstance(value, torch.Tensor) else f"data[{name!r}][{key!r}]"
            if not isinstance(tensor, torch.Tensor):
                raise ValueError(f"{where} must be a torch.Tensor, got {type(tensor).__name__}")
            if tensor.dim() == 0 or tensor.shape[0] == 0:
                raise ValueError(f"{where} has no rows: shape {tuple(tensor.shape)}")
            if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                raise ValueError(f"{where} contains NaN or inf values")
            sizes.add(tensor.shape[0])
        if len(sizes) != 1:
            raise ValueError(f"tensors of data group {name!r} differ in length: {sorted(sizes)}")
        groups[name] = group
    return groups


class TensorBatches:
    """An iterable of ``num_batches`` minibatches ``{group: {key: tensor (B_g, ...)}}``.

    Each group is reshuffled every time it is exhausted; the permutation of pass ``e`` of
    group ``g`` is a function of ``(seed, g, e)`` alone, so a run that is resumed at
    iteration ``t`` (``seek(t)``) sees exactly the batches an uninterrupted run would.
    Under data parallelism each of ``world_size`` ranks takes every ``world_size``-th
    batch-sized slice of the same permutation.

    Storage dtypes: ``bool`` tensors are returned as float {0, 1} and ``uint8`` as float
    in [0, 1], so images can be stored compactly on the device.

    :param groups: from :func:`as_groups`; the first group sets the pass length.
    :param batch_size: rows per batch for every group (``batch_sizes`` overrides per group);
        a group smaller than its batch size is used whole.
    :param num_batches: total number of batches to yield (the length of training).
    :param seed: seeds the permutations (with the group and the pass).
    :param batch_sizes: group name -> rows per batch, for the groups whose batches differ from
        ``batch_size``.
    :param rank: this process's index among ``world_size`` (as :meth:`shard`).
    :param world_size: number of data-parallel processes sharing the batches.
    :param binarize: keys whose values, grey levels in [0, 1], are drawn as
        ``Bernoulli(grey)`` in {0, 1} every time a batch is made (dynamic binarisation; the
        draws use torch's global generator, which checkpoints restore).
    """

    def __init__(
        self,
        groups: TensorGroups,
        batch_size: int,
        num_batches: int,
        seed: int = 0,
        batch_sizes: Mapping[str, int] | None = None,
        rank: int = 0,
        world_size: int = 1,
        binarize: Sequence[str] = (),
    ) -> None:
        self.groups = groups
        self.binarize = frozenset(binarize)
        keys = {key for group in groups.values() for key in group}
        if self.binarize - keys:
            raise ValueError(f"binarize names keys {sorted(self.binarize - keys)} that no data group has; keys: {sorted(keys)}")
        for name, group in groups.items():
            for key in self.binarize & set(group):
                tensor = group[key]
                if tensor.is_floating_point() and not bool(((tensor >= 0) & (tensor <= 1)).all()):
                    where = f"data[{name!r}]" if set(group) == {name} else f"data[{name!r}][{key!r}]"
                    raise ValueError(f"binarize: {where} must hold grey levels in [0, 1] to draw from")
        self.num_batches = integer("num_batches", num_batches, minimum=0)
        self.seed = integer("seed", seed, minimum=0)
        self.batch_size = positive_integer("batch_size", batch_size)
        self.requested_batch_sizes = {
            name: positive_integer(f"batch_sizes[{name!r}]", size) for name, size in dict(batch_sizes or {}).items()
        }
        unknown = set(self.requested_batch_sizes) - set(groups)
        if unknown:
            raise ValueError(f"batch_sizes names unknown data groups {sorted(unknown)}")
        self.shard(rank, world_size)
        self.start = 0

    def shard(self, rank: int, world_size: int) -> None:
        """Make this the batches of process ``rank`` out of ``world_size``.

        :param rank: the process's index, ``0 <= rank < world_size``.
        :param world_size: number of data-parallel processes.
        """
        world_size = positive_integer("world_size", world_size)
        self.rank, self.world_size = integer("rank", rank, minimum=0, maximum=world_size - 1), world_size
        self.batch_sizes = {}
        for name in self.groups:
            size = self.rows(name)
            if size < world_size:
                raise ValueError(
                    f"data group {name!r} has {size} rows, fewer than world_size={world_size}"
                )
            wanted = int(self.requested_batch_sizes.get(name, self.batch_size))
            self.batch_sizes[name] = min(wanted, size // world_size)

    def __len__(self) -> int:
        return self.num_batches

    def seek(self, iteration: int) -> None:
        """Start the next iteration over the batches at batch number ``iteration``.

        :param iteration: the training iteration to resume at, ``0 <= iteration <= num_batches``.
        """
        self.start = integer("iteration", iteration, minimum=0, maximum=self.num_batches)

    def rows(self, name: str) -> int:
        """Number of rows of group ``name`` (its tensors' first dimension).

        :param name: a group of the data.
        """
        return next(iter(self.groups[name].values())).shape[0]

    def batches_per_pass(self, name: str) -> int:
        """Number of batches in one pass over group ``name`` (per rank).

        :param name: a group of the data.
        """
        return max(self.rows(name) // (self.batch_sizes[name] * self.world_size), 1)

    def _permutation(self, name: str, pass_index: int, size: int, device: torch.device) -> torch.Tensor:
        generator = torch.Generator()
        group_id = list(self.groups).index(name)
        generator.manual_seed(self.seed * 1_000_003 + group_id * 10_007 + pass_index)
        return torch.randperm(size, generator=generator).to(device)

    def _batch(self, name: str, iteration: int, cache: dict) -> dict[str, torch.Tensor]:
        group = self.groups[name]
        first = next(iter(group.values()))
        per_pass = self.batches_per_pass(name)
        pass_index, within = divmod(iteration, per_pass)
        if cache.get(name, (None,))[0] != pass_index:
            cache[name] = (pass_index, self._permutation(name, pass_index, first.shape[0], first.device))
        permutation = cache[name][1]
        size = self.batch_sizes[name]
        offset = (within * self.world_size + self.rank) * size
        index = permutation[offset : offset + size]
        batch = {key: stored_as_float(tensor.index_select(0, index)) for key, tensor in group.items()}
        for key in self.binarize & set(batch):
            batch[key] = torch.bernoulli(batch[key])
        return batch

    def __iter__(self) -> Iterator[dict[str, dict[str, torch.Tensor]]]:
        return self._generate()

    def _generate(self) -> Iterator[dict[str, dict[str, torch.Tensor]]]:
        start, self.start = self.start, 0
        cache: dict = {}
        for iteration in range(start, self.num_batches):
            yield {name: self._batch(name, iteration, cache) for name in self.groups}

    def state_dict(self) -> dict[str, int]:
        """What a checkpoint records of the batch order; the position is the training
        module's iteration count, restored through :meth:`seek`."""
        return {"seed": self.seed, "num_batches": self.num_batches, "world_size": self.world_size}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        """Check that a resumed run draws its batches as the checkpointed run did.

        :param state: the checkpoint's :meth:`state_dict`.
        """
        if dict(state) != self.state_dict():
            raise ValueError(
                f"the checkpoint's batch order {dict(state)} differs from this run's "
                f"{self.state_dict()}: resume with the same seed, steps and number of devices"
            )

    def pin_memory(self) -> TensorBatches:
        """Page-lock the host tensors so per-batch copies to a GPU are asynchronous."""
        self.groups = {name: {key: t.pin_memory() for key, t in group.items()} for name, group in self.groups.items()}
        return self

    def to(self, device: torch.device | str) -> TensorBatches:
        """Move every tensor to ``device`` (once, before training).

        :param device: e.g. ``"cuda"`` or a torch device.
        """
        self.groups = {
            name: {key: t.to(device) for key, t in group.items()} for name, group in self.groups.items()
        }
        return self


class BatchBlocks:
    """The minibatches of a :class:`TensorBatches` in blocks of ``size`` consecutive ones:
    each item is a list of up to ``size`` minibatches (the last block of a run may be
    shorter), so that one Lightning training step can take several training iterations.

    It reads ``batches`` lazily, so sharding, moving, pinning or seeking ``batches`` after
    the blocks were made is seen by them; a run resumed at iteration ``t`` gets blocks that
    start at ``t``.

    :param batches: the minibatches to group.
    :param size: minibatches per block (training iterations per Lightning step).
    """

    def __init__(self, batches: TensorBatches, size: int) -> None:
        self.batches = batches
        self.size = positive_integer("size", size)

    def __len__(self) -> int:
        return ceil(len(self.batches) / self.size)

    def __iter__(self) -> Iterator[list[TensorGroups]]:
        block: list[TensorGroups] = []
        for batch in self.batches:
            block.append(batch)
            if len(block) == self.size:
                yield block
                block = []
        if block:
            yield block

    def state_dict(self) -> dict[str, int]:
        """The batch order a checkpoint records (:meth:`TensorBatches.state_dict`)."""
        return self.batches.state_dict()

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        """Check a resumed run's batch order (:meth:`TensorBatches.load_state_dict`).

        :param state: the checkpoint's :meth:`state_dict`.
        """
        self.batches.load_state_dict(state)
