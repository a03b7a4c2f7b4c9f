"""``ppl-vae``: train, evaluate and demo the library's models from the shell::

    ppl-vae train MODEL [--config FILE] [--set name=value ...] [--steps N] [--run-dir DIR]
    ppl-vae train MODEL --help            (every setting with its type, default and doc)
    ppl-vae train --resume RUN_DIR
    ppl-vae sweep MODEL --grid name=v1,v2 [--grid ...] --seeds 0,1,2 [--jobs N] [--out DIR] [--set ...]
    ppl-vae evaluate RUN_DIR
    ppl-vae demo [--out DIR] [--models vae,...]
    ppl-vae list

Settings are the fields of the recipe's config dataclass (``--set beta=4 --set
train.lr=1e-3``, or a JSON/YAML ``--config`` file that ``--set`` overrides); each value is
parsed to the field's type and checked before anything is built, and the whole config is
saved in ``RUN_DIR/config.json``. Errors print one line: exit status 2 for bad input, 1 for
a run that failed (``--debug`` shows the traceback). Parsing and ``--help`` import no torch.
"""
from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import sys
import textwrap
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any

from ppl_vae._files import check_stays_within, read_json, write_atomically
from ppl_vae._progress import someone_is_watching
from ppl_vae._validation import threads_from_environment
from ppl_vae.recipes.registry import RECIPES, Recipe
from ppl_vae.recipes.settings import (
    config_from_file,
    flatten_settings,
    read_settings_file,
    setting_hint,
    setting_value,
    settings_of,
    text_holds_commas,
    with_overrides,
)

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
_INPUT_ERRORS = (ValueError, TypeError, LookupError, FileNotFoundError, FileExistsError, NotADirectoryError)


class UsageError(ValueError):
    """Bad command-line input."""


def _recipe(name: str) -> Recipe:
    if name not in RECIPES:
        raise UsageError(f"unknown model {name!r}; available: {', '.join(sorted(RECIPES))}")
    return RECIPES[name]


def _parse_sets(pairs: Sequence[str]) -> dict[str, str]:
    """``name=value`` texts as ``{name: value text}`` (typed later, by the config's fields)."""
    settings = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"--set expects name=value, got {pair!r}")
        settings[name.strip()] = value
    return settings


def _command_line_settings(args: argparse.Namespace, config_class: type) -> dict[str, Any]:
    """The settings of ``--config``, then the shortcut options, then ``--set`` (later wins)."""
    settings: dict[str, Any] = {}
    if args.config:
        settings.update(flatten_settings(config_class, read_settings_file(args.config)))
    for option, name in _TRAIN_SHORTCUTS.items():
        if getattr(args, option) is not None:
            settings[name] = getattr(args, option)
    settings.update(_parse_sets(args.set))
    if not args.progress:
        settings["train.progress_bar"] = False
    return settings


def _existing_run_dir(path: str) -> Path:
    """``path`` as a run directory that exists and holds a ``config.json``."""
    run_dir = Path(path)
    if not run_dir.is_dir():
        raise UsageError(f"run directory {path!r} does not exist")
    check_stays_within(run_dir / "config.json", run_dir)  # a link out of the run or into a loop
    if not (run_dir / "config.json").is_file():
        raise UsageError(f"{path!r} is not a run directory: it holds no config.json")
    return run_dir


def _default_run_dir(name: str) -> Path:
    return Path("runs") / f"{name}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


def _print_figures(figures: dict[str, Any], run_dir: Path) -> None:
    flat = {k: v for k, v in figures.items() if isinstance(v, (int, float))}
    for key, value in flat.items():
        print(f"  {key}: {value:.4g}")
    print(f"run directory: {run_dir.resolve()}")


class _StderrLines(logging.Handler):
    """Each log record as one line ``[HH:MM:SS] message`` on the current ``sys.stderr``."""

    def emit(self, record: logging.LogRecord) -> None:
        print(f"[{time.strftime('%H:%M:%S', time.localtime(record.created))}] {record.getMessage()}",
              file=sys.stderr, flush=True)


def _show_library_messages() -> None:
    """The library's INFO messages (what a run evaluates, how long it took) on stderr."""
    logger = logging.getLogger("ppl_vae")
    logger.setLevel(logging.INFO)
    if not any(isinstance(handler, _StderrLines) for handler in logger.handlers):
        logger.addHandler(_StderrLines())


def _engine(args: argparse.Namespace) -> ModuleType:
    """:mod:`ppl_vae.recipes.base` (torch, Pyro, Lightning: seconds to import), with
    Lightning's info messages off, the library's on (:func:`_show_library_messages`) and
    ``--threads`` applied."""
    import torch

    from ppl_vae.recipes import base

    for name in ("lightning.pytorch", "lightning.fabric"):  # after Lightning set them up
        logging.getLogger(name).setLevel(logging.WARNING)
    _show_library_messages()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    return base


def _train(args: argparse.Namespace) -> int:
    if args.resume:
        return _resume(args)
    recipe = _recipe(args.model)
    settings = _command_line_settings(args, recipe.config_class)
    config = with_overrides(recipe.demo() if args.demo_settings else recipe.config_class(), settings)
    run_dir = Path(args.run_dir) if args.run_dir else _default_run_dir(recipe.name)
    figures = _engine(args).train_recipe(recipe, config, run_dir, overwrite=args.overwrite, threads=args.threads)
    _print_figures(figures, run_dir)
    return 0


def _resume(args: argparse.Namespace) -> int:
    if args.model:
        raise UsageError("give either MODEL or --resume RUN_DIR, not both")
    changes = [option for option, given in (("--config", args.config), ("--set", args.set), ("--demo-settings", args.demo_settings)) if given]
    changes += [f"--{option.replace('_', '-')}" for option in _TRAIN_SHORTCUTS if getattr(args, option) is not None]
    if changes:
        raise UsageError(f"--resume continues a run with its saved settings; {', '.join(changes)} cannot change them")
    run_dir = _existing_run_dir(args.resume)
    saved_path = run_dir / "config.json"
    saved = read_json(saved_path, "run config")
    recipe_name = saved.get("recipe") if isinstance(saved, dict) else None
    if not isinstance(recipe_name, str) or recipe_name not in RECIPES or not isinstance(saved.get("config"), dict):
        raise UsageError(f"{saved_path} is no run config: it needs a \"recipe\" (one of {sorted(RECIPES)}) and a \"config\"")
    recipe = RECIPES[recipe_name]
    config = config_from_file(recipe.config_class, saved["config"], saved_path)
    figures = _engine(args).train_recipe(recipe, config, run_dir, resume=True, threads=args.threads)
    _print_figures(figures, run_dir)
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    run_dir = _existing_run_dir(args.run_dir)
    _engine(args)
    from ppl_vae.runs import evaluate_run

    figures = evaluate_run(run_dir, RECIPES)
    _print_figures(figures, run_dir)
    return 0


def _demo(args: argparse.Namespace) -> int:
    names = args.models.split(",") if args.models else list(RECIPES)
    recipes = [_recipe(name) for name in names]
    train_recipe = _engine(args).train_recipe
    out = Path(args.out) if args.out else _default_run_dir("demo")
    summary = {}
    progress = someone_is_watching() if args.progress is None else args.progress
    for recipe in recipes:
        config = with_overrides(recipe.demo(), {"train.progress_bar": progress})
        print(f"[demo] {recipe.name}: {recipe.description}", flush=True)
        start = time.perf_counter()
        figures = train_recipe(recipe, config, out / recipe.name, overwrite=args.overwrite, threads=args.threads)
        seconds = time.perf_counter() - start
        numbers = {k: v for k, v in figures.items() if isinstance(v, (int, float))}
        summary[recipe.name] = {"seconds": round(seconds, 1), **numbers}
        print(f"[demo] {recipe.name} done in {seconds:.0f} s: " + ", ".join(f"{k}={v:.4g}" for k, v in numbers.items()), flush=True)
    write_atomically(out / "summary.json", lambda handle: handle.write(json.dumps(summary, indent=2) + "\n"))
    print(f"demo runs (config, checkpoints, metrics, pictures) are in {out.resolve()}")
    return 0


def _parse_grid(entries: Sequence[str], config_class: type) -> dict[str, list[Any]]:
    """``name=v1,v2`` entries as ``{name: [typed values]}``; the values of settings written
    with commas themselves (pairs such as ``z_capacity=0,5``, mappings) are separated by
    semicolons instead: ``z_capacity=0,5;0,10``."""
    grid: dict[str, list[Any]] = {}
    for entry in entries:
        name, sep, values = entry.partition("=")
        name = name.strip()
        if not sep or not name or not values:
            raise UsageError(f"--grid expects name=value1,value2,... (or value1;value2;... for pairs), got {entry!r}")
        separator = ";" if text_holds_commas(setting_hint(config_class, name)) else ","
        grid[name] = [setting_value(config_class, name, value) for value in values.split(separator)]
    return grid


def _sweep(args: argparse.Namespace) -> int:
    from ppl_vae.train.sweep import plan_sweep, run_sweep, visible_gpus

    recipe = _recipe(args.model)
    grid = _parse_grid(args.grid, recipe.config_class)
    try:
        seeds = [int(seed) for seed in args.seeds.split(",")]
    except ValueError:
        raise UsageError(f"--seeds expects comma-separated integers, got {args.seeds!r}") from None
    if args.jobs < 1:
        raise UsageError(f"--jobs must be >= 1, got {args.jobs}")
    overrides = {name: setting_value(recipe.config_class, name, value) for name, value in _parse_sets(args.set).items()}
    base = recipe.demo() if args.demo_settings else recipe.config_class()
    for values in itertools.product(*grid.values()):
        with_overrides(base, {**overrides, **dict(zip(grid, values, strict=True))})
    threads = args.threads
    if threads is None and not visible_gpus():
        threads = max(1, (os.cpu_count() or 1) // args.jobs)
    out = Path(args.out) if args.out else _default_run_dir(f"sweep-{recipe.name}")
    jobs = plan_sweep(recipe.name, grid, seeds, out, overrides, args.demo_settings, threads)
    table = run_sweep(jobs, out, parallel=args.jobs, progress=args.progress)
    print(f"sweep table: {(out / 'sweep.json').resolve()} and sweep.csv")
    return 0 if all(run["status"] == "ok" for run in table["runs"]) else 1


def _list(args: argparse.Namespace) -> int:
    for name, recipe in sorted(RECIPES.items()):
        print(f"{name:14s} {recipe.description}")
    return 0


def settings_help(recipe: Recipe, width: int = 100) -> str:
    """Every setting of ``recipe``: dotted name, type, default and a one-line doc.

    :param recipe: the recipe whose config dataclass lists the settings.
    :param width: the column at which each setting's doc wraps.
    """
    lines = [f"settings of {recipe.name} (--set NAME=VALUE, or NAME: VALUE in a --config file):"]
    for setting in settings_of(recipe.config_class):
        default = setting.default
        default_text = json.dumps(list(default) if isinstance(default, tuple) else default)
        lines.append(f"  {setting.name} ({setting.type_name}, default {default_text})")
        lines += textwrap.wrap(setting.doc, width, initial_indent=" " * 6, subsequent_indent=" " * 6)
    return "\n".join(lines)


class _HelpWithSettings(argparse.Action):
    """``-h``/``--help`` of a command taking MODEL: the usual help, then MODEL's settings."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option_string: str | None = None) -> None:
        text = parser.format_help()
        model = getattr(namespace, "model", None)
        if model in RECIPES:
            text += "\n" + settings_help(RECIPES[model]) + "\n"
        else:
            text += "\nput MODEL before --help to list its settings, e.g. `ppl-vae train vae --help`\n"
        print(text, end="")
        parser.exit()


def _settings_options(parser: argparse.ArgumentParser, shared: bool = False) -> None:
    what = "a setting shared by every run" if shared else "a setting (repeatable), dotted for nested ones: train.lr=1e-3"
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help=what)
    parser.add_argument("--demo-settings", action="store_true", help="start from the recipe's small demo settings")


def build_parser() -> argparse.ArgumentParser:
    """The ``ppl-vae`` argument parser."""
    parser = argparse.ArgumentParser(prog="ppl-vae", description=__doc__.split("\n")[0].replace("``", ""))
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (default: $PPL_VAE_NUM_THREADS, else torch's choice); "
        "use 1 when other processes share the CPU",
    )
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")
    sub = parser.add_subparsers(dest="command", required=True)
    models = ", ".join(sorted(RECIPES))

    train = sub.add_parser("train", help="train a model and write a run directory", add_help=False)
    train.add_argument("-h", "--help", action=_HelpWithSettings, help="show this help and MODEL's settings")
    train.add_argument("model", nargs="?", help=f"one of: {models}")
    train.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its last checkpoint")
    train.add_argument("--run-dir", help="where to write the run (default runs/MODEL-TIMESTAMP)")
    train.add_argument("--overwrite", action="store_true", help="replace a run already in --run-dir")
    train.add_argument("--config", metavar="FILE", help="settings from a JSON (.json) or YAML file; --set overrides them")
    _settings_options(train)
    train.add_argument("--steps", metavar="N", help="train.steps")
    train.add_argument("--batch-size", metavar="N", help="train.batch_size")
    train.add_argument("--lr", metavar="LR", help="train.lr")
    train.add_argument("--seed", metavar="N", help="train.seed")
    train.add_argument("--device", metavar="DEVICE", help="train.device: cpu, cuda, cuda:N, mps or auto (CUDA when there)")
    train.add_argument("--devices", metavar="N", help="train.devices: devices (processes) for data parallelism")
    train.add_argument("--num-nodes", metavar="N", help="train.num_nodes")
    train.add_argument("--strategy", help="train.strategy: Lightning strategy, e.g. ddp")
    train.add_argument("--precision", choices=["32-true", "bf16-mixed"], help="train.precision; bf16-mixed: networks in bfloat16, losses in float32")
    train.add_argument("--no-progress", dest="progress", action="store_false", help="hide the progress bar")
    train.set_defaults(handler=_train)

    sweep = sub.add_parser("sweep", help="train a grid of settings x seeds as separate jobs and tabulate them", add_help=False)
    sweep.add_argument("-h", "--help", action=_HelpWithSettings, help="show this help and MODEL's settings")
    sweep.add_argument("model", help=f"one of: {models}")
    sweep.add_argument("--grid", action="append", default=[], metavar="NAME=V1,V2",
                       help="a setting and its values (repeatable); for pairs separate the values with ';', "
                            "e.g. 'z_capacity=0,5;0,10'")
    sweep.add_argument("--seeds", default="0", help="comma-separated seeds (default 0)")
    sweep.add_argument("--jobs", type=int, default=1, help="jobs at once on a CPU-only machine (GPUs: one job per GPU)")
    sweep.add_argument("--out", help="sweep folder (default runs/sweep-MODEL-TIMESTAMP)")
    sweep.add_argument("--no-progress", dest="progress", action="store_false", help="hide the bar of finished jobs")
    _settings_options(sweep, shared=True)
    sweep.set_defaults(handler=_sweep)

    evaluate = sub.add_parser("evaluate", help="re-evaluate a run from its last checkpoint")
    evaluate.add_argument("run_dir")
    evaluate.set_defaults(handler=_evaluate)

    demo = sub.add_parser("demo", help="train small versions of every model on a CPU in a few minutes")
    demo.add_argument("--out", help="output folder (default runs/demo-TIMESTAMP)")
    demo.add_argument("--models", help="comma-separated subset of models")
    demo.add_argument("--overwrite", action="store_true")
    demo.add_argument(
        "--progress", action=argparse.BooleanOptionalAction, default=None,
        help="show the training bars (default: where a person watches, a terminal or a Jupyter kernel; "
             "not in pipes, log files or CI)",
    )
    demo.set_defaults(handler=_demo)

    listing = sub.add_parser("list", help="list the models")
    listing.set_defaults(handler=_list)
    return parser


def _loaded_class(module: str, name: str) -> type | None:
    """Class ``name`` of ``module`` if that module is already imported (an error of a module
    never imported cannot have been raised, and importing it here would cost seconds)."""
    return getattr(sys.modules.get(module), name, None)


def failure(error: BaseException) -> tuple[int, str]:
    """Exit status and one-line message for an error a command raised: 2 for bad input
    (settings, files, run directories, checkpoints), 1 for a run that failed.

    :param error: what the command raised.
    """
    message = " ".join(str(error).split())
    non_finite = _loaded_class("ppl_vae.train.module", "NonFiniteLossError")
    if non_finite is not None and isinstance(error, non_finite):
        return 1, (
            f"training failed: {message}. Try a lower learning rate (--lr, --set train.lr=...) "
            "or smaller loss weights, and check the data for NaN or infinite values"
        )
    checkpoint_error = _loaded_class("ppl_vae.train.checkpoint", "CheckpointError")
    if isinstance(error, _INPUT_ERRORS) or (checkpoint_error is not None and isinstance(error, checkpoint_error)):
        return 2, message
    return 1, f"the run failed: {type(error).__name__}: {message} (--debug shows the traceback)"


def _run(args: argparse.Namespace) -> int:
    if args.command == "train" and not args.model and not args.resume:
        raise UsageError("train needs MODEL or --resume RUN_DIR")
    if args.threads is not None and args.threads < 1:
        raise UsageError(f"--threads must be >= 1, got {args.threads}")
    if args.threads is None:
        try:
            args.threads = threads_from_environment()
        except ValueError as error:
            raise UsageError(str(error)) from None
    return args.handler(args)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``ppl-vae``; returns the exit status.

    :param argv: the command-line arguments after the program name; ``None`` for ``sys.argv[1:]``.
    """
    args = build_parser().parse_args(argv)
    try:
        return _run(args)
    except KeyboardInterrupt:
        if args.debug:
            raise
        print("ppl-vae: interrupted", file=sys.stderr)
        return 130
    except Exception as error:
        if args.debug:
            raise
        status, message = failure(error)
        print(f"ppl-vae: error: {message}", file=sys.stderr)
        return status


if __name__ == "__main__":
    sys.exit(main())
