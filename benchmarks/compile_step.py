"""Does ``torch.compile`` pay on the library's training iteration? Issue #27.

For each workload of :mod:`overhead` (Decomposition, Parted, Contrastive; smaller settings by
flags) one :class:`~ppl_vae.infer.TrainingIteration` in a plain loop (as ``harness.plain_loop``)
is built, on fresh networks from the workload's seed, in these variants:

- ``eager``: the library's default (the objective's ``training_loss``, foreach Adam, int step);
- ``loss``: ``elbo_loss=torch.compile(training_loss(objective, model.model, model.guide),
  dynamic=False)``, the training step passed as a 0-dim tensor (so a schedule's value is a
  tensor, not a Python number that ``dynamic=False`` would specialise on);
- ``loss_opt``: the same compiled loss and every optimiser's ``step`` compiled
  (``torch.compile(optimizer.step)``, the PyTorch recipe for compiling an optimiser);
- ``step``: ``torch.compile`` of one function that runs the whole iteration (auxiliary steps,
  loss, backward, optimiser steps: ``TrainingIteration.__call__``), tensor step.

Inductor's ``fallback_random`` is set so that compiled random draws (``rsample``, the
discriminator's permutation, the MMD's prior draws) take torch's eager generator in the eager
order: :func:`check_equal` then compares loss, gradients and parameters after a few iterations
against eager on the same seed and prints the largest absolute difference.

Timing: CPU time (``time.process_time``) per iteration, the variants interleaved iteration by
iteration (eager, loss, ..., step, eager, ...), after a warm-up whose first call (the
compilation) is timed separately (wall and CPU seconds). Per variant: the median over all timed
iterations of the paired ratio ``variant_i / eager_i``, the spread of the per-round medians of
that ratio (min-max) and the interquartile range of the paired ratios. Graph breaks, graphs
compiled and recompilations are counted with ``torch._dynamo.explain`` on one call and with
dynamo's counters around the warm-up and the timed iterations.

    python benchmarks/compile_step.py --models contrastive --rounds 3 --steps 30 --json out.json
    python benchmarks/compile_step.py --quick   # tiny sizes: checks the script, not speed
"""
from __future__ import annotations

import argparse
import itertools
import logging
import statistics
import subprocess
import time
import warnings
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyro
import torch
import torch._dynamo
from harness import DSPRITES_IMAGES, Workload, adam
from overhead import workloads as overhead_workloads
from reporting import machine_description, recorded_path, write_results
from torch._dynamo.utils import counters

from ppl_vae.infer import TrainingIteration
from ppl_vae.infer.iteration import step_inputs
from ppl_vae.infer.steps import training_loss

DEFAULT_JSON = Path(__file__).resolve().parent / "results" / "compile_step.json"
VARIANTS = ("eager", "loss", "loss_opt", "step")
Step = Callable[[], None]
BACKEND = {"backend": "inductor"}  # torch.compile's backend (--backend; "eager" checks capture only)


class CompiledStepOptimizer:
    """An optimiser whose ``step`` is ``torch.compile(optimizer.step)``; ``zero_grad`` eager."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer = optimizer
        self.step = torch.compile(optimizer.step, dynamic=False, **BACKEND)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)


def elbo_inputs(iteration: TrainingIteration, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The tensors the ELBO step of ``iteration`` reads from ``batch`` (as its ``__call__`` does)."""
    inputs = step_inputs(batch, None)
    for group in iteration.elbo_groups(name for name, value in batch.items() if isinstance(value, dict)):
        inputs.update(batch[group])
    return inputs


def build_iteration(workload: Workload, variant: str) -> tuple[TrainingIteration, Callable[[dict, Any], Any], bool]:
    """``(iteration, call, tensor_step)`` of ``variant`` on fresh networks: ``call(batch, step)``
    runs one iteration; ``tensor_step`` says whether it takes the step as a 0-dim tensor."""
    model, objective = workload.build()
    loss = None
    if variant in ("loss", "loss_opt"):
        loss = torch.compile(training_loss(objective, model.model, model.guide), dynamic=False, **BACKEND)
    iteration = TrainingIteration(model, objective, workload.lr, optimizer=adam, elbo_loss=loss)
    if variant == "loss_opt":
        iteration.optimizers = [CompiledStepOptimizer(optimizer) for optimizer in iteration.optimizers]
    call: Callable[[dict, Any], Any] = iteration
    if variant == "step":
        call = torch.compile(iteration.__call__, dynamic=False, **BACKEND)
    return iteration, call, variant != "eager"


def make_loop(workload: Workload, variant: str, seed: int = 0) -> Step:
    """One iteration per call of ``variant`` on the workload's batches, Pyro's validation off."""
    _, call, tensor_step = build_iteration(workload, variant)
    batches, counter = workload.batches(seed), itertools.count()

    def step() -> None:
        t = next(counter)
        with pyro.validation_enabled(False):
            call(batches(), torch.tensor(t) if tensor_step else t)

    return step


def check_equal(workload: Workload, variant: str, iterations: int = 3, seed: int = 123) -> dict[str, float]:
    """Largest absolute differences against eager on the same seed: the ELBO loss and its
    gradients on the first batch (``loss``/``loss_opt``: the compiled loss function itself), and
    every parameter after ``iterations`` iterations of the variant's loop."""
    result: dict[str, float] = {}
    runs = {}
    for name in ("eager", variant):
        pyro.clear_param_store()
        iteration, call, tensor_step = build_iteration(workload, name)
        model_params = [p for group in getattr(iteration.optimizers[0], "optimizer", iteration.optimizers[0]).param_groups
                        for p in group["params"]]
        batches = workload.batches(seed)
        first = batches()
        # loss and gradients of one ELBO step, same seed
        torch.manual_seed(seed)
        with pyro.validation_enabled(False):
            elbo = iteration.elbo_loss(**elbo_inputs(iteration, first), step=torch.tensor(5) if tensor_step else 5)
        grads = torch.autograd.grad(elbo.loss, model_params, allow_unused=True)
        # a few whole iterations, same seed
        torch.manual_seed(seed)
        batches = workload.batches(seed)
        with pyro.validation_enabled(False):
            for t in range(iterations):
                call(batches(), torch.tensor(t) if tensor_step else t)
        params = [p.detach().clone() for optimizer in iteration.optimizers
                  for group in getattr(optimizer, "optimizer", optimizer).param_groups for p in group["params"]]
        runs[name] = (elbo.loss.detach(), grads, params)
    (loss_e, grads_e, params_e), (loss_v, grads_v, params_v) = runs["eager"], runs[variant]
    result["loss"] = float((loss_e - loss_v).abs())
    result["loss_relative"] = result["loss"] / max(float(loss_e.abs()), 1e-30)
    result["gradients"] = max((float((a - b).abs().max()) for a, b in zip(grads_e, grads_v, strict=True)
                               if a is not None and b is not None), default=0.0)
    result[f"parameters_after_{iterations}"] = max(float((a - b).abs().max()) for a, b in zip(params_e, params_v, strict=True))
    return result


def explain_loss(workload: Workload) -> dict[str, Any]:
    """``torch._dynamo.explain`` of the ELBO loss on one batch (tensor step): graphs, breaks,
    the distinct break reasons (first line) with where they happened, counted."""
    model, objective = workload.build()
    iteration = TrainingIteration(model, objective, workload.lr, optimizer=adam)
    torch._dynamo.reset()
    with pyro.validation_enabled(False):
        explanation = torch._dynamo.explain(training_loss(objective, model.model, model.guide))(
            **elbo_inputs(iteration, workload.batches()()), step=torch.tensor(3))
    reasons: dict[str, int] = {}
    for reason in explanation.break_reasons:
        frame = reason.user_stack[-1] if reason.user_stack else None
        where = f" at {frame.filename.split('site-packages/')[-1]}:{frame.lineno} ({frame.name})" if frame else ""
        key = reason.reason.strip().splitlines()[0][:160] + where
        reasons[key] = reasons.get(key, 0) + 1
    torch._dynamo.reset()
    return {"graphs": explanation.graph_count, "graph_breaks": explanation.graph_break_count,
            "ops_in_graphs": explanation.op_count, "break_reasons": reasons}


def dynamo_counts() -> dict[str, int]:
    """Dynamo's running totals: graphs compiled, graph breaks met, frames seen."""
    return {"graphs": counters["stats"]["unique_graphs"], "graph_breaks": sum(counters["graph_break"].values()),
            "frames": counters["frames"]["total"]}


def difference(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {key: after[key] - before[key] for key in after}


def measure(workload: Workload, variants: list[str], rounds: int, steps: int, warmup: int) -> dict[str, Any]:
    """Every variant's loop built once on fresh networks and warmed up (the first call, which
    compiles, timed separately); then ``rounds`` blocks of ``steps`` iterations each, the variants
    interleaved iteration by iteration; CPU seconds per iteration by variant and round."""
    seconds: dict[str, list[list[float]]] = {name: [] for name in variants}
    first_calls: dict[str, dict[str, float]] = {}
    dynamo_warmup: dict[str, dict[str, int]] = {}
    dynamo_timed: list[dict[str, int]] = []
    torch._dynamo.reset()
    pyro.clear_param_store()
    loops = {}
    for name in variants:
        loops[name] = make_loop(workload, name)
        before = dynamo_counts()
        wall, cpu = time.perf_counter(), time.process_time()
        loops[name]()
        first = {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}
        for _ in range(max(warmup - 1, 0)):
            loops[name]()
        first |= {"warmup_wall": time.perf_counter() - wall, "warmup_cpu": time.process_time() - cpu}
        first_calls[name] = first
        dynamo_warmup[name] = difference(dynamo_counts(), before)
        print(f"  {name}: first call {first['cpu']:.1f} CPU s ({first['wall']:.0f} s wall), "
              f"dynamo {dynamo_warmup[name]}", flush=True)
    for index in range(rounds):
        before = dynamo_counts()
        timed: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(steps):
            for name in variants:
                start = time.process_time()
                loops[name]()
                timed[name].append(time.process_time() - start)
        dynamo_timed.append(difference(dynamo_counts(), before))
        for name in variants:
            seconds[name].append(timed[name])
        line = ", ".join(f"{name} {1000 * statistics.median(timed[name]):.1f}" for name in variants)
        ratios = ", ".join(f"{name}/eager {statistics.median(a / b for a, b in zip(timed[name], timed['eager'], strict=True)):.3f}"
                           for name in variants if name != "eager")
        print(f"  {workload.name} round {index + 1}/{rounds} (median CPU ms/iteration): {line}; paired {ratios}", flush=True)
    return {"seconds": seconds, "first_calls": first_calls, "dynamo_warmup": dynamo_warmup,
            "dynamo_timed": dynamo_timed}


def quartiles(values: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return q[0], q[2]


def summarise(measured: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per variant: median CPU ms per iteration (all rounds), the paired ratio to eager (median
    over all iterations, interquartile range, min-max of the per-round medians), compile seconds."""
    seconds, rows = measured["seconds"], {}
    for name, per_round in seconds.items():
        flat = [s for r in per_round for s in r]
        row: dict[str, Any] = {"median_ms": 1000 * statistics.median(flat),
                               "round_median_ms": [1000 * statistics.median(r) for r in per_round]}
        if name != "eager":
            ratios = [[a / b for a, b in zip(r, e, strict=True)] for r, e in zip(per_round, seconds["eager"], strict=True)]
            flat_ratios = [x for r in ratios for x in r]
            low, high = quartiles(flat_ratios)
            row |= {"paired_ratio_to_eager": statistics.median(flat_ratios), "paired_ratio_iqr": [low, high],
                    "round_paired_ratios": [statistics.median(r) for r in ratios]}
        row |= {"first_call": measured["first_calls"][name], "dynamo_warmup": measured["dynamo_warmup"][name]}
        rows[name] = row
    return rows


def source_commit() -> str | None:
    """The git commit of the checkout this script runs from (``None`` outside git)."""
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", choices=("decomposition", "parted", "contrastive"),
                        default=["decomposition", "parted", "contrastive"])
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--batch-size", type=int, default=64, help="batch of the conv models")
    parser.add_argument("--contrastive-batch-size", type=int, default=128)
    parser.add_argument("--pool", type=int, default=4096, help="training images drawn per data set")
    parser.add_argument("--labelled", type=int, default=round(0.005 * DSPRITES_IMAGES))
    parser.add_argument("--steps", type=int, default=20, help="timed iterations per round and variant")
    parser.add_argument("--warmup", type=int, default=3, help="iterations before timing (the first compiles)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--backend", default="inductor", help="torch.compile backend (eager, aot_eager: capture without code generation)")
    parser.add_argument("--explain-only", action="store_true", help="graph breaks and equality only, no timing")
    parser.add_argument("--skip-checks", action="store_true", help="no equality checks, no explain")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks the script, not speed")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.warmup, args.rounds = 2, 2, 1
        args.batch_size, args.contrastive_batch_size, args.pool, args.labelled = 8, 16, 64, 32
    if "eager" not in args.variants:
        args.variants.insert(0, "eager")
    torch.set_num_threads(args.threads)
    BACKEND["backend"] = args.backend
    torch._inductor.config.fallback_random = True  # compiled random draws = eager draws
    torch._inductor.config.compile_threads = 1  # the machine is shared: no compile worker pool
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=".*recompile_limit.*")

    results = {}
    for workload in overhead_workloads(args):
        print(f"\n{workload.name}: variants {args.variants}", flush=True)
        record: dict[str, Any] = {"batch_sizes": workload.batch_sizes, "settings": workload.description}
        if not args.skip_checks:
            record["explain_loss"] = explain_loss(workload)
            print(f"  explain(loss): {record['explain_loss']['graphs']} graphs, "
                  f"{record['explain_loss']['graph_breaks']} breaks", flush=True)
            for reason, count in record["explain_loss"]["break_reasons"].items():
                print(f"    {count} x {reason}")
            record["equality"] = {}
            for variant in args.variants:
                if variant != "eager":
                    torch._dynamo.reset()
                    record["equality"][variant] = check_equal(workload, variant)
                    print(f"  max |{variant} - eager|: {record['equality'][variant]}", flush=True)
        if args.explain_only:
            results[workload.name] = record
            continue
        measured = measure(workload, args.variants, args.rounds, args.steps, args.warmup)
        record["variants"] = summarise(measured)
        record["dynamo_during_timed_iterations"] = measured["dynamo_timed"]
        record["seconds"] = measured["seconds"]
        results[workload.name] = record
        torch._dynamo.reset()

    print(f"\n{args.threads} thread(s), {args.rounds} rounds x {args.steps} timed iterations per variant after "
          f"{args.warmup} warm-up; CPU time per iteration")
    for name, record in results.items():
        if "variants" not in record:
            continue
        print(f"\n{name} (batch {record['batch_sizes']})")
        print(f"  {'variant':9s} {'median ms':>9s} {'paired/eager':>12s} {'IQR':>13s} {'round medians':>22s} {'1st call CPU s':>14s}")
        for variant, row in record["variants"].items():
            ratio = f"{row['paired_ratio_to_eager']:12.3f}" if "paired_ratio_to_eager" in row else f"{'':12s}"
            iqr = f"{row['paired_ratio_iqr'][0]:.3f}-{row['paired_ratio_iqr'][1]:.3f}" if "paired_ratio_iqr" in row else ""
            per_round = " ".join(f"{x:.3f}" for x in row.get("round_paired_ratios", []))
            print(f"  {variant:9s} {row['median_ms']:9.1f} {ratio} {iqr:>13s} {per_round:>22s} "
                  f"{row['first_call']['cpu']:10.1f}")
        print(f"  dynamo during the timed iterations (per round): {record['dynamo_during_timed_iterations']}")
    write_results(args.json, {"models": results, "settings": vars(args) | {"json": recorded_path(args.json)},
                              "commit": source_commit(), "updated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                              "machine": machine_description(torch_compile={"backend": args.backend, "fallback_random": True, "dynamic": False})})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
