r"""An objective's loss recorded once per batch shape and replayed as a tensor program.

An ELBO step through Pyro runs Python on every step besides the networks: the handler stack
for every sample site and plate, a distribution object per site, the trace and replay
bookkeeping, the KL dispatch. On a small network that is a large share of the step (the
contrastive VAE's MLP at batch 128: about a fifth, docs/performance.md). When the model's
computation on a batch is the same sequence of tensor operations on every step ("static
structure", the assumption of Pyro's ``JitTrace_ELBO``), that sequence can be recorded once
and replayed: :class:`ReplayedLoss` records the objective's ELBO step
(``objective.training_loss(model, guide, **batch)``, ``ppl_vae.infer.steps.training_loss``) with :func:`torch.fx.experimental.proxy_tensor.make_fx` (pre-dispatch ATen ops,
grad-mode switches included) into a graph whose inputs are the parameters and buffers of the
modules involved and the batch tensors, and calls that graph on every later step with the
same batch shapes. The recording is simplified (operations that compute nothing are dropped,
``_simplify``) and its operators are called through torch's generated bindings
(``python_binding``). The value and the gradient are those of the eager loss:

- random draws (``rsample``, the contrastive VAE's permutation, prior draws of the MMD) are
  operations of the graph, drawn afresh from torch's generator on each call, in the order the
  eager code draws them; recording restores the generator, so a replayed run gives the same
  numbers as an eager one;
- parameters and buffers are graph inputs, read as they are at each call (the optimiser's
  in-place updates are seen), and autograd runs through the graph as through eager code;
- what the step returns besides the loss (:class:`~ppl_vae.infer.steps.TrainingLoss`: the
  logged terms, the samples the contrastive discriminator's step takes) are graph outputs,
  returned in the same structure on every call.

What a recording freezes: Python numbers (weights such as beta or gamma, the data-set scales,
shapes), control flow on tensor values, Python-side randomness. So it refuses what it can
detect changing: components that hold a training-step schedule
(:func:`~ppl_vae.infer.schedules.holds_schedule`: PartedVAE's capacities and attention
sharpness), Pyro validation (its checks read each step's values), autocast, data parallelism
(the batch-level terms' collectives), and arguments other than tensors (the whole-data
``aggregate_data`` of :class:`~ppl_vae.infer.decomposition.AggregateDivergence`, encoded under
activation checkpointing, which a recording would unroll). After changing a setting of the model or the objective
between steps, call :meth:`ReplayedLoss.clear`.
"""
from __future__ import annotations

import operator
import types
import warnings
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import pyro
import torch
from pyro.infer.util import is_validation_enabled
from torch import fx, nn
from torch.fx.experimental.proxy_tensor import make_fx

from ppl_vae.infer.distributed import world_size
from ppl_vae.infer.schedules import holds_schedule
from ppl_vae.infer.steps import TrainingLoss, training_loss

#: The torch releases (major, minor) the recording and its simplification are tested on; on
#: others :class:`ReplayedLoss` warns and computes the eager loss.
TESTED_TORCH_VERSIONS: tuple[tuple[int, int], ...] = ((2, 14),)


def torch_release() -> tuple[int, int]:
    """``(major, minor)`` of the torch in use."""
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return int(major), int(minor)


Signature = tuple[tuple[str, tuple[int, ...], torch.dtype, torch.device], ...]
_VIEW_NO_OPS = {
    torch.ops.aten.expand.default,
    torch.ops.aten.alias.default,
    torch.ops.aten.view.default,
    torch.ops.aten.reshape.default,
    torch.ops.aten.flatten.using_ints,
    torch.ops.aten.to.device,
    torch.ops.aten.to.dtype,
    torch.ops.aten.to.dtype_layout,
}
_IDENTITY_ARITHMETIC = {
    torch.ops.aten.add.Tensor: 0,
    torch.ops.aten.sub.Tensor: 0,
    torch.ops.aten.mul.Tensor: 1,
    torch.ops.aten.div.Tensor: 1,
}


def replay_obstacle(objective: Any, modules: Sequence[nn.Module]) -> str | None:
    """Why ``objective`` with ``modules`` cannot be recorded once and replayed, or ``None``:
    a component that holds a training-step schedule.

    :param objective: the ELBO whose step would be recorded.
    :param modules: the modules whose parameters and buffers the loss reads (as given to
        :class:`ReplayedLoss`)."""
    for component in (objective, *modules):
        if holds_schedule(component):
            return (
                f"{type(component).__name__} changes with the training step (it holds a schedule), "
                "and a replayed loss would keep the first step's values"
            )
    return None


def batch_signature(batch: dict[str, torch.Tensor]) -> Signature:
    """``(name, shape, dtype, device)`` of every batch tensor, sorted by name: one recording each."""
    for name, value in batch.items():
        if not isinstance(value, torch.Tensor):
            raise ValueError(
                f"a replayed loss takes tensors only, got {type(value).__name__} for {name!r} (a whole-data "
                "aggregate_data is encoded under activation checkpointing, which a recording would unroll: "
                "use the eager objective)"
            )
    return tuple((name, tuple(value.shape), value.dtype, value.device) for name, value in sorted(batch.items()))


def _same_shape(a: Any, b: Any) -> bool:
    """Whether two nodes' values have the same shape, dtype and device."""
    va, vb = getattr(a, "meta", {}).get("val"), getattr(b, "meta", {}).get("val")
    return (
        isinstance(va, torch.Tensor)
        and isinstance(vb, torch.Tensor)
        and (va.shape, va.dtype, va.device) == (vb.shape, vb.dtype, vb.device)
    )


def _broadcast_by_its_users(node: fx.Node) -> bool:
    """Whether ``node`` is an ``expand`` that every reader would broadcast anyway: each is
    elementwise arithmetic whose output already has the expanded shape, dtype and device."""
    return (
        node.target is torch.ops.aten.expand.default
        and bool(node.users)
        and all(user.target in _IDENTITY_ARITHMETIC and _same_shape(user, node) for user in node.users)
    )


def _is_grad_switch(node: fx.Node) -> bool:
    """Whether ``node`` sets the grad mode (``make_fx`` records ``torch.set_grad_enabled`` and
    ``torch.no_grad`` as calls of torch's ``_set_grad_enabled``)."""
    return node.op == "call_function" and getattr(node.target, "__name__", "") == "_set_grad_enabled"


def _drop_redundant_grad_switches(graph: fx.Graph) -> None:
    """Erase grad-mode switches that change nothing: one followed by another before any
    operation runs, and one that sets the mode already in effect (the graph is called with
    gradients enabled). The mode every operation runs under, and the mode left at the end,
    are unchanged."""
    operations = [n for n in graph.nodes if n.op in ("call_function", "call_method", "call_module")]
    for node, following in zip(operations, operations[1:], strict=False):
        if _is_grad_switch(node) and _is_grad_switch(following):
            graph.erase_node(node)
    enabled = True
    for node in list(graph.nodes):
        if _is_grad_switch(node):
            if node.args[0] == enabled:
                graph.erase_node(node)
            else:
                enabled = node.args[0]


def _mutated(node: fx.Node) -> bool:
    """Whether an in-place operation writes to ``node``'s output (then it must stay a copy)."""
    return any(_is_mutable(user.target) for user in node.users)


def _is_mutable(target: Any) -> bool:
    """Whether an ATen operator overload writes to one of its inputs, as its schema says; an
    operator whose schema cannot be read counts as writing (its input is then kept)."""
    if not hasattr(target, "overloadpacket"):
        return False
    return bool(getattr(getattr(target, "_schema", None), "is_mutable", True))


def _drop_no_op(node: fx.Node, graph: fx.Graph) -> bool:
    """Erase ``node`` if it computes nothing (see :func:`_simplify`), its readers reading its
    input instead; whether it was erased."""
    aten = torch.ops.aten
    if node.op != "call_function" or _mutated(node):
        return False
    if (node.target in _VIEW_NO_OPS and _same_shape(node.args[0], node)) or _broadcast_by_its_users(node):
        node.replace_all_uses_with(node.args[0])
    elif node.target in _IDENTITY_ARITHMETIC and len(node.args) == 2 and not node.kwargs:
        source, operand = node.args
        if not (
            isinstance(operand, (int, float))
            and operand == _IDENTITY_ARITHMETIC[node.target]
            and _same_shape(source, node)
        ):
            return False
        node.replace_all_uses_with(source)
    elif node.target is aten.broadcast_tensors.default:
        sources = node.args[0]
        readers = list(node.users)
        if not all(reader.target is operator.getitem for reader in readers) or not all(
            _same_shape(sources[reader.args[1]], reader) for reader in readers
        ):
            return False
        for reader in readers:
            reader.replace_all_uses_with(sources[reader.args[1]])
            graph.erase_node(reader)
    elif node.target is aten.detach_.default:
        source = node.args[0]
        if node.users or source.target is not aten.lift_fresh_copy.default or len(source.users) != 1:
            return False
    else:
        return False
    graph.erase_node(node)
    return True


def _simplify(graph_module: fx.GraphModule) -> fx.GraphModule:
    """Drop the nodes of a recording that compute nothing, each replaced by its input: views,
    expansions, conversions and broadcasts to the shape, dtype and device their input already
    has, expansions that their readers' own broadcasting makes anyway, arithmetic by the
    identity (``x + 0``, ``x - 0``, ``x * 1``, ``x / 1``), copies of constants that nothing
    reads, and grad-mode switches that change nothing; dead code too. Passes repeat until
    nothing changes (dropping a node can make its input droppable). A node that an in-place
    operation writes to is kept. Every value the graph returns, and its gradient, is unchanged."""
    graph = graph_module.graph
    _drop_redundant_grad_switches(graph)
    changed = True
    while changed:
        changed = graph.eliminate_dead_code()
        for node in list(graph.nodes):
            changed = _drop_no_op(node, graph) or changed
    graph_module.recompile()
    return graph_module


def _public_binding(name: str) -> Callable | None:
    """The builtin (C) callable that torch's public namespaces export for the ATen operator
    ``name``: ``torch.add``, ``torch.nn.functional.linear``, ``torch.special.erf`` (operator
    ``special_erf``), ``torch.linalg.norm``, ``torch.Tensor.normal_``; ``None`` when none is."""
    candidates = [(torch, name), (torch.nn.functional, name), (torch.Tensor, name)]
    for prefix, namespace in (("special_", torch.special), ("linalg_", torch.linalg), ("fft_", torch.fft)):
        if name.startswith(prefix):
            candidates.append((namespace, name.removeprefix(prefix)))
    for namespace, attribute in candidates:
        binding = getattr(namespace, attribute, None)
        if isinstance(binding, (types.BuiltinFunctionType, types.MethodDescriptorType)):
            return binding
    return None


def python_binding(op: Any) -> Callable | None:
    """The generated C binding (``torch.add``, ``torch.nn.functional.linear``, ``Tensor.normal_``)
    of an ATen operator overload such as ``torch.ops.aten.add.Tensor``, or ``None`` when there is
    none.

    Both reach the same kernel through the dispatcher; the binding parses its arguments in
    generated C++ and picks the overload from them, while an operator-overload call goes through
    Python and a generic, schema-driven argument conversion, which costs more per operation
    (about 7% of the contrastive VAE's recorded forward and backward on a CPU). Only ``aten``
    operators and only builtin (C) callables of torch's public namespaces are returned, never a
    Python wrapper.
    """
    if getattr(op, "namespace", None) != "aten" or not hasattr(op, "overloadpacket"):
        return None
    return _public_binding(op.overloadpacket.__name__)


def _call_bindings(graph_module: fx.GraphModule) -> fx.GraphModule:
    """Call each ATen operator of a recording through its :func:`python_binding`, where it has one."""
    for node in graph_module.graph.nodes:
        binding = python_binding(node.target) if node.op == "call_function" else None
        if binding is not None:
            node.target = binding
    graph_module.recompile()
    return graph_module


def _submodules(module: nn.Module) -> list[nn.Module]:
    """``module`` and its descendants, each once, in the order of ``module.modules()``."""
    found: dict[int, nn.Module] = {}
    pending = [module]
    while pending:
        current = pending.pop()
        if id(current) not in found:
            found[id(current)] = current
            pending.extend(reversed([child for child in current._modules.values() if child is not None]))
    return list(found.values())


class ReplayedLoss:
    """The ELBO step of ``objective`` (``ppl_vae.infer.steps.training_loss``), recorded on
    the first call for each batch signature and replayed on later calls
    (:mod:`ppl_vae.infer.replay`).
    Each call returns a :class:`~ppl_vae.infer.steps.TrainingLoss`, as the eager step does.

    :param objective: an ELBO with ``training_loss`` (:class:`~ppl_vae.infer.MeanFieldELBO`
        and its presets) or ``differentiable_loss``.
    :param model: the model callable (e.g. ``vae.model``).
    :param guide: the guide callable.
    :param modules: every module whose parameters or buffers the loss reads (the model's
        ``nn.Module`` and the objective's auxiliary modules); they become graph inputs. A
        tensor that requires grad and is not among them is refused when recorded.
    :param max_recordings: batch signatures kept (least recently used dropped first).
    :raises ValueError: when :func:`replay_obstacle` names a reason.

    On a torch release outside ``ppl_vae.infer.replay.TESTED_TORCH_VERSIONS`` it warns once and computes the
    eager loss (``eager`` is then ``True``): the recording relies on ``make_fx``'s
    pre-dispatch tracing, which torch documents as experimental.

    Example::

        loss_fn = ReplayedLoss(elbo, vae.model, vae.guide, [vae])
        for x in batches:
            optimizer.zero_grad()
            loss_fn(x=x).loss.backward()
            optimizer.step()
    """

    def __init__(
        self,
        objective: Any,
        model: Callable,
        guide: Callable,
        modules: Sequence[nn.Module],
        max_recordings: int = 4,
    ) -> None:
        if isinstance(max_recordings, bool) or not isinstance(max_recordings, int) or max_recordings < 1:
            raise ValueError(f"max_recordings must be a positive integer, got {max_recordings!r}")
        reason = replay_obstacle(objective, modules)
        if reason is not None:
            raise ValueError(f"this loss cannot be replayed: {reason}")
        self.objective = objective
        self.model = model
        self.guide = guide
        self.training_loss = training_loss(objective, model, guide)
        self.modules = list(modules)
        self.max_recordings = max_recordings
        self.eager = torch_release() not in TESTED_TORCH_VERSIONS
        if self.eager:
            warnings.warn(
                f"ReplayedLoss is tested on torch {', '.join(f'{a}.{b}' for a, b in TESTED_TORCH_VERSIONS)}, "
                f"not {torch.__version__}: it computes the eager loss instead of recording it",
                RuntimeWarning,
                stacklevel=2,
            )
        self._recordings: OrderedDict[Signature, fx.GraphModule] = OrderedDict()

    def __call__(self, step: int | torch.Tensor | None = None, **batch: torch.Tensor) -> TrainingLoss:
        """The ELBO step on ``batch`` (its loss a scalar tensor with gradients), by replay;
        ``step`` is not read (a replayed objective follows no schedule)."""
        if self.eager:
            return self.training_loss(**batch)
        self._check_call()
        signature = batch_signature(batch)
        names = [name for name, *_ in signature]
        inputs = [*self._state_tensors(), *(batch[name] for name in names)]
        if signature not in self._recordings:
            self._recordings[signature] = self._record(names, inputs)
            while len(self._recordings) > self.max_recordings:
                self._recordings.popitem(last=False)
        self._recordings.move_to_end(signature)
        return self._recordings[signature](*inputs)

    def clear(self) -> None:
        """Forget every recording (after changing a setting the recordings froze)."""
        self._recordings.clear()

    @property
    def recordings(self) -> int:
        """Number of batch signatures recorded and kept."""
        return len(self._recordings)

    def _check_call(self) -> None:
        if not torch.is_grad_enabled():
            raise RuntimeError("a replayed loss is for training steps: call it with gradients enabled")
        if is_validation_enabled():
            raise RuntimeError(
                "a replayed loss runs no Pyro validation (its checks read each step's values); "
                "disable it (pyro.enable_validation(False)) or use the eager objective"
            )
        if torch.is_autocast_enabled() or torch.is_autocast_enabled("cpu"):
            raise RuntimeError("a replayed loss does not record autocast; use float32 or the eager objective")
        if world_size() > 1:
            raise RuntimeError(
                "a replayed loss cannot record the collectives of data parallelism; use the eager objective"
            )

    def _state_tensors(self) -> list[torch.Tensor]:
        """Parameters then buffers of every module, each tensor once, in a fixed order.

        Read afresh on every call (a parameter replaced since the recording is seen), by a walk
        over the submodules' own tables: what ``parameters()`` and ``buffers()`` yield, without
        their generators and name prefixes."""
        seen: dict[int, torch.Tensor] = {}
        for module in self.modules:
            submodules = _submodules(module)
            for table in ("_parameters", "_buffers"):
                for submodule in submodules:
                    for tensor in getattr(submodule, table).values():
                        if tensor is not None:
                            seen.setdefault(id(tensor), tensor)
        return list(seen.values())

    def _record(self, names: list[str], inputs: list[torch.Tensor]) -> fx.GraphModule:
        state = len(inputs) - len(names)

        def step(*tensors: torch.Tensor) -> TrainingLoss:
            result = self.training_loss(**dict(zip(names, tensors[state:], strict=True)))
            if not isinstance(result.loss, torch.Tensor):
                raise ValueError(f"the loss must be a tensor to be replayed, got {type(result.loss).__name__}")
            return result

        devices = sorted({t.device.index or 0 for t in inputs if t.device.type == "cuda"})
        with torch.random.fork_rng(devices=devices), pyro.validation_enabled(False):
            try:
                graph = make_fx(step, pre_dispatch=True)(*inputs)
            except RuntimeError as error:
                if "get value out of a tracing tensor" not in str(error):
                    raise
                raise ValueError(
                    "this loss reads a tensor's value on the host (.item(), float(), bool(): control flow "
                    "on values), which a recording cannot replay; Pyro's own ELBOs do (torch_item), the "
                    "library's objectives (ppl_vae.infer.MeanFieldELBO and its subclasses) do not"
                ) from error
        for node in graph.graph.nodes:
            if node.op == "get_attr":
                constant = getattr(graph, node.target)
                if isinstance(constant, torch.Tensor) and constant.requires_grad:
                    raise ValueError(
                        f"the loss reads a tensor that requires grad (shape {tuple(constant.shape)}) but is not a "
                        "parameter or buffer of the modules given to ReplayedLoss; its gradient would be lost"
                    )
        return _call_bindings(_simplify(graph))
