"""``ppl-vae``: train, evaluate and demo the library's models from the shell.

    ppl-vae train MODEL [--steps N] [--set key=value ...] [--run-dir DIR]
    ppl-vae train --resume RUN_DIR
    ppl-vae sweep MODEL --grid key=v1,v2 [--grid ...] --seeds 0,1,2 [--jobs N] [--out DIR] [--set ...]
    ppl-vae evaluate RUN_DIR
    ppl-vae demo [--out DIR] [--models vae,...]
    ppl-vae list

Settings map onto the recipe's config dataclass (``--set beta=4 --set train.lr=1e-3``);
the whole config is saved in ``RUN_DIR/config.json``. Errors in the input print one line
and exit with status 2.
"""
from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import torch

from ppl_vae.recipes import RECIPES, config_from_dict, evaluate_run, train_recipe, with_overrides
from ppl_vae.train import CheckpointError, RunDirectory, RunDirectoryExistsError
from ppl_vae.train.sweep import plan_sweep, run_sweep, visible_gpus

_TRAIN_SHORTCUTS = {
    "steps": "train.steps",
    "batch_size": "train.batch_size",
    "lr": "train.lr",
    "seed": "train.seed",
    "device": "train.device",
    "devices": "train.devices",
    "num_nodes": "train.num_nodes",
    "strategy": "train.strategy",
    "precision": "train.precision",
}


class UsageError(ValueError):
    """Bad command-line input."""


def _parse_value(text: str) -> Any:
    """JSON literals (numbers, true/false/null, lists) or a plain string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _parse_sets(pairs: Sequence[str]) -> dict[str, Any]:
    overrides = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--set expects key=value, got {pair!r}")
        overrides[key.strip()] = _parse_value(value)
    return overrides


def _default_run_dir(name: str) -> Path:
    return Path("runs") / f"{name}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


def _print_figures(figures: dict[str, Any], run_dir: Path) -> None:
    flat = {k: v for k, v in figures.items() if isinstance(v, (int, float))}
    for key, value in flat.items():
        print(f"  {key}: {value:.4g}")
    print(f"run directory: {run_dir.resolve()}")


def _train(args: argparse.Namespace) -> int:
    if args.resume:
        if args.model:
            raise UsageError("give either MODEL or --resume RUN_DIR, not both")
        run = RunDirectory(args.resume, resume=True)
        saved = run.read_config()
        recipe = RECIPES.get(saved.get("recipe"))
        if recipe is None:
            raise UsageError(f"{run.config_path} names unknown recipe {saved.get('recipe')!r}")
        config = config_from_dict(recipe.config_class, saved["config"])
        figures = train_recipe(recipe, config, run.path, resume=True)
        _print_figures(figures, run.path)
        return 0
    if args.model not in RECIPES:
        raise UsageError(f"unknown model {args.model!r}; available: {', '.join(sorted(RECIPES))}")
    recipe = RECIPES[args.model]
    config = recipe.demo() if args.demo_settings else recipe.config_class()
    overrides = {dotted: getattr(args, name) for name, dotted in _TRAIN_SHORTCUTS.items() if getattr(args, name) is not None}
    overrides.update(_parse_sets(args.set))
    if not args.progress:
        overrides["train.progress_bar"] = False
    config = with_overrides(config, overrides)
    run_dir = Path(args.run_dir) if args.run_dir else _default_run_dir(recipe.name)
    figures = train_recipe(recipe, config, run_dir, overwrite=args.overwrite)
    _print_figures(figures, run_dir)
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    figures = evaluate_run(args.run_dir, RECIPES)
    _print_figures(figures, Path(args.run_dir))
    return 0


def _demo(args: argparse.Namespace) -> int:
    names = args.models.split(",") if args.models else list(RECIPES)
    unknown = [n for n in names if n not in RECIPES]
    if unknown:
        raise UsageError(f"unknown models {unknown}; available: {', '.join(sorted(RECIPES))}")
    out = Path(args.out) if args.out else _default_run_dir("demo")
    summary = {}
    for name in names:
        recipe = RECIPES[name]
        config = with_overrides(recipe.demo(), {"train.progress_bar": bool(args.progress)})
        print(f"[demo] {name}: {recipe.description}", flush=True)
        start = time.perf_counter()
        figures = train_recipe(recipe, config, out / name, overwrite=args.overwrite)
        seconds = time.perf_counter() - start
        summary[name] = {"seconds": round(seconds, 1), **{k: v for k, v in figures.items() if isinstance(v, (int, float))}}
        print(f"[demo] {name} done in {seconds:.0f} s: " + ", ".join(f"{k}={v:.4g}" for k, v in summary[name].items() if k != "seconds"), flush=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"demo runs (config, checkpoints, metrics, pictures) are in {out.resolve()}")
    return 0


def _parse_grid(entries: Sequence[str]) -> dict[str, list[Any]]:
    grid: dict[str, list[Any]] = {}
    for entry in entries:
        key, sep, values = entry.partition("=")
        if not sep or not key or not values:
            raise UsageError(f"--grid expects key=value1,value2,..., got {entry!r}")
        grid[key.strip()] = [_parse_value(value) for value in values.split(",")]
    return grid


def _sweep(args: argparse.Namespace) -> int:
    if args.model not in RECIPES:
        raise UsageError(f"unknown model {args.model!r}; available: {', '.join(sorted(RECIPES))}")
    recipe = RECIPES[args.model]
    grid = _parse_grid(args.grid)
    try:
        seeds = [int(seed) for seed in args.seeds.split(",")]
    except ValueError:
        raise UsageError(f"--seeds expects comma-separated integers, got {args.seeds!r}") from None
    if args.jobs < 1:
        raise UsageError(f"--jobs must be >= 1, got {args.jobs}")
    overrides = _parse_sets(args.set)
    base = recipe.demo() if args.demo_settings else recipe.config_class()
    for values in itertools.product(*grid.values()):
        with_overrides(base, {**overrides, **dict(zip(grid, values, strict=True))})
    threads = args.threads
    if threads is None and not visible_gpus():
        threads = max(1, (os.cpu_count() or 1) // args.jobs)
    out = Path(args.out) if args.out else _default_run_dir(f"sweep-{recipe.name}")
    jobs = plan_sweep(recipe.name, grid, seeds, out, overrides, args.demo_settings, threads)
    table = run_sweep(jobs, out, parallel=args.jobs)
    print(f"sweep table: {(out / 'sweep.json').resolve()} and sweep.csv")
    return 0 if all(run["status"] == "ok" for run in table["runs"]) else 1


def _list(args: argparse.Namespace) -> int:
    for name, recipe in sorted(RECIPES.items()):
        print(f"{name:14s} {recipe.description}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``ppl-vae`` argument parser."""
    parser = argparse.ArgumentParser(prog="ppl-vae", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--threads",
        type=int,
        default=int(os.environ["PPL_VAE_NUM_THREADS"]) if os.environ.get("PPL_VAE_NUM_THREADS") else None,
        help="torch CPU threads (default: $PPL_VAE_NUM_THREADS, else torch's choice); "
        "use 1 when other processes share the CPU",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="train a model and write a run directory")
    train.add_argument("model", nargs="?", help=f"one of: {', '.join(sorted(RECIPES))}")
    train.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its last checkpoint")
    train.add_argument("--run-dir", help="where to write the run (default runs/MODEL-TIMESTAMP)")
    train.add_argument("--overwrite", action="store_true", help="replace a run already in --run-dir")
    train.add_argument("--demo-settings", action="store_true", help="start from the small demo settings")
    train.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="any config setting, dotted for nested ones (train.lr=1e-3)")
    train.add_argument("--steps", type=int)
    train.add_argument("--batch-size", type=int)
    train.add_argument("--lr", type=float)
    train.add_argument("--seed", type=int)
    train.add_argument("--device", choices=["cpu", "cuda", "auto"])
    train.add_argument("--devices", type=int, help="devices (processes) for data parallelism")
    train.add_argument("--num-nodes", type=int)
    train.add_argument("--strategy", help="Lightning strategy, e.g. ddp")
    train.add_argument("--precision", choices=["32-true", "bf16-mixed"], help="bf16-mixed: networks in bfloat16, losses in float32")
    train.add_argument("--no-progress", dest="progress", action="store_false", help="hide the progress bar")
    train.set_defaults(handler=_train)

    sweep = sub.add_parser("sweep", help="train a grid of settings x seeds as separate jobs and tabulate them")
    sweep.add_argument("model", help=f"one of: {', '.join(sorted(RECIPES))}")
    sweep.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2", help="a setting and its values (repeatable)")
    sweep.add_argument("--seeds", default="0", help="comma-separated seeds (default 0)")
    sweep.add_argument("--jobs", type=int, default=1, help="jobs at once on a CPU-only machine (GPUs: one job per GPU)")
    sweep.add_argument("--out", help="sweep folder (default runs/sweep-MODEL-TIMESTAMP)")
    sweep.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a setting shared by every run")
    sweep.add_argument("--demo-settings", action="store_true", help="start every run from the small demo settings")
    sweep.set_defaults(handler=_sweep)

    evaluate = sub.add_parser("evaluate", help="re-evaluate a run from its last checkpoint")
    evaluate.add_argument("run_dir")
    evaluate.set_defaults(handler=_evaluate)

    demo = sub.add_parser("demo", help="train small versions of every model on a CPU in a few minutes")
    demo.add_argument("--out", help="output folder (default runs/demo-TIMESTAMP)")
    demo.add_argument("--models", help="comma-separated subset of models")
    demo.add_argument("--overwrite", action="store_true")
    demo.add_argument("--progress", action="store_true", help="show progress bars")
    demo.set_defaults(handler=_demo)

    listing = sub.add_parser("list", help="list the models")
    listing.set_defaults(handler=_list)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``ppl-vae``; returns the exit status."""
    args = build_parser().parse_args(argv)
    if args.command == "train" and not args.model and not args.resume:
        print("ppl-vae: error: train needs MODEL or --resume RUN_DIR", file=sys.stderr)
        return 2
    if args.threads is not None:
        if args.threads < 1:
            print(f"ppl-vae: error: --threads must be >= 1, got {args.threads}", file=sys.stderr)
            return 2
        torch.set_num_threads(args.threads)
    for name in ("lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        return args.handler(args)
    except (UsageError, ValueError, TypeError, FileNotFoundError, RunDirectoryExistsError, CheckpointError) as error:
        print(f"ppl-vae: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
