"""The evidence campaign: the papers' experiments at training lengths that can show their
results, started or resumed from checkpoints across invocations, one committed record per run.

    python experiments/campaign.py list                                  # each run and its state
    python experiments/campaign.py run --budget-minutes 150 --workers 2  # start or resume runs
    python experiments/campaign.py run --only parted-dsprites-labels --budget-minutes 60

The manifest (``experiments/campaign.json``, or ``--manifest``) lists experiments: a name, the
recipe (``ppl-vae train RECIPE``), its settings (as ``--set`` takes them), the seeds, the
training steps, the interval of the curve's evaluation points and the votes that size the
metrics. Each (experiment, seed) is one run, trained by :func:`ppl_vae.fit` in a worker process
with one torch thread, in the manifest's order.

Checkpoints live outside the repository, under ``--checkpoints`` (default
``$XDG_CACHE_HOME/ppl_vae/campaign``, i.e. ``~/.cache/ppl_vae/campaign``): a later invocation
that finds a run's checkpoint resumes it exactly; one whose checkpoint is gone although the
run's record says it had started says so and restarts the run from step 0.

Training stops at the budget (``--budget-minutes``, wall clock): each worker checkpoints and
exits at its next iteration after it, and no run starts with less than ``--min-start-minutes``
left. A run that has done its steps is scored (the final metrics) only when the budget allows
that too; otherwise the next invocation scores it.

Records: ``results/<experiment>/seed<k>.json`` (or ``--results``), written whenever a worker
stops, and when a run has done its steps, before it is scored: ``experiment``, ``seed``,
``complete`` (steps done and scored), ``steps`` (done), ``target_steps``, ``training_seconds``
(training and the curve's evaluations, summed over invocations and kept in the checkpoints, so
that an invocation killed before it wrote the record loses at most the time since its last
checkpoint), ``wall_seconds`` (that, plus the setup and scoring of every invocation that wrote
the record), ``commit`` (of the code that wrote the record; ``dirty`` when it had uncommitted
changes), ``versions``, ``machine``, ``settings`` (the recipe's full config), ``metrics`` (the
final figures, empty until complete) and ``curve`` (``[{"step", "metrics"}]``, the Factor score
under both protocols at every ``curve_every`` steps). ``experiments/tables.py`` turns them into
the results tables.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import lightning as L

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "experiments" / "campaign.json"
RESULTS = ROOT / "results"
SCORINGS = ("dsprites", "mnist-labels")
MANIFEST_KEYS = {"name", "recipe", "seeds", "steps", "curve_every", "curve_votes", "votes", "scoring", "settings",
                 "patience", "validation_images", "description"}


def default_checkpoints() -> Path:
    """``$XDG_CACHE_HOME/ppl_vae/campaign`` (``~/.cache`` when the variable is unset)."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "ppl_vae" / "campaign"


@dataclasses.dataclass(frozen=True)
class Run:
    """One (experiment, seed) of the manifest.

    :param experiment: the experiment's name (records go to ``results/<experiment>/``).
    :param recipe: the ``ppl-vae train`` recipe that builds it.
    :param seed: ``train.seed``.
    :param steps: training iterations to reach.
    :param curve_every: iterations between the curve's evaluation points.
    :param curve_votes: Factor-score votes of each curve point.
    :param votes: votes of the final metrics (10,000: disentanglement_lib's standard size).
    :param scoring: the curve and the final metrics: ``"dsprites"`` (:class:`DSpritesScoring`)
        or ``"mnist-labels"`` (:class:`MNISTLabelsScoring`).
    :param settings: the recipe's settings besides ``train.seed`` and ``train.steps``.
    :param patience: ``"mnist-labels"``: curve points without improvement before the run stops.
    :param validation_images: ``"mnist-labels"``: held-out images of the curve (the rest score).
    """

    experiment: str
    recipe: str
    seed: int
    steps: int
    curve_every: int
    curve_votes: int
    votes: int
    scoring: str
    settings: Mapping[str, Any]
    patience: int = 5
    validation_images: int = 1000

    @property
    def name(self) -> str:
        return f"{self.experiment}/seed{self.seed}"

    def record_path(self, results: Path) -> Path:
        return results / self.experiment / f"seed{self.seed}.json"

    def run_dir(self, checkpoints: Path) -> Path:
        return checkpoints / self.experiment / f"seed{self.seed}"


def read_manifest(path: Path) -> list[Run]:
    """The runs of the manifest at ``path``, in its order.

    :raises ValueError: naming the file and the entry, for a manifest that is not the
        documented JSON (unknown or missing keys, a recipe or scoring not known).
    """
    try:
        entries = json.loads(Path(path).read_text(encoding="utf-8"))["experiments"]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as error:
        raise ValueError(f"manifest {path}: expected a JSON object with a list 'experiments' ({error})") from None
    from ppl_vae.recipes import RECIPES

    runs, names = [], set()
    for position, entry in enumerate(entries):
        where = f"manifest {path}, experiment {position}"
        if not isinstance(entry, dict) or set(entry) - MANIFEST_KEYS or not {"name", "recipe", "seeds", "steps"} <= set(entry):
            raise ValueError(f"{where}: expected keys {sorted(MANIFEST_KEYS)} (name, recipe, seeds, steps required), "
                             f"got {entry!r}")
        if entry["recipe"] not in RECIPES:
            raise ValueError(f"{where}: recipe must be one of {sorted(RECIPES)}, got {entry['recipe']!r}")
        scoring = entry.get("scoring", "dsprites")
        if scoring not in SCORINGS:
            raise ValueError(f"{where}: scoring must be one of {SCORINGS}, got {scoring!r}")
        if entry["name"] in names:
            raise ValueError(f"{where}: the name {entry['name']!r} is used twice")
        names.add(entry["name"])
        for seed in entry["seeds"]:
            runs.append(Run(
                experiment=entry["name"], recipe=entry["recipe"], seed=int(seed), steps=int(entry["steps"]),
                curve_every=int(entry.get("curve_every", entry["steps"])), curve_votes=int(entry.get("curve_votes", 1000)),
                votes=int(entry.get("votes", 10_000)), scoring=scoring, settings=dict(entry.get("settings", {})),
                patience=int(entry.get("patience", 5)), validation_images=int(entry.get("validation_images", 1000)),
            ))
    return runs


def run_config(run: Run, device: str) -> Any:
    """The recipe config of ``run``: the recipe's defaults, the manifest's settings, the
    run's seed and steps, and what a campaign worker needs (no progress bar, ``device``)."""
    from ppl_vae.recipes import RECIPES
    from ppl_vae.recipes.settings import with_overrides

    recipe = RECIPES[run.recipe]
    overrides = {**run.settings, "train.seed": run.seed, "train.steps": run.steps, "train.progress_bar": False,
                 "train.device": device}
    return with_overrides(recipe.config_class(), overrides)


def read_record(path: Path) -> dict[str, Any] | None:
    """The record at ``path``, or ``None`` when there is none."""
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def write_record(path: Path, record: Mapping[str, Any]) -> None:
    """Write ``record`` as indented JSON with the library's atomic writer."""
    from ppl_vae._files import write_atomically

    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, lambda handle: handle.write(json.dumps(record, indent=1) + "\n"))


def code_commit() -> str:
    """``git rev-parse HEAD`` of the repository, ``+dirty`` when tracked files differ from it;
    ``"unknown"`` outside a git checkout."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def versions() -> dict[str, str]:
    """Versions of Python and of the libraries the figures depend on."""
    import lightning
    import pyro
    import torch

    import ppl_vae

    return {"ppl_vae": ppl_vae.__version__, "torch": torch.__version__, "pyro": pyro.__version__,
            "lightning": lightning.__version__, "python": platform.python_version()}


def machine(device: str) -> dict[str, Any]:
    """Where the run trained: the processor (or GPU) and the torch threads."""
    import torch

    described = {"device": device, "threads": torch.get_num_threads(), "cpu": platform.processor() or platform.machine()}
    if device == "cuda" and torch.cuda.is_available():
        described["gpu"] = torch.cuda.get_device_name()
    return described


class BudgetSpent(Exception):
    """Raised by :class:`Deadline` to end training right after a checkpoint."""


class Deadline(L.Callback):
    """Ends training at the first checkpoint written after ``deadline`` (seconds since the
    epoch), by raising :class:`BudgetSpent` before the next iteration: the run then resumes
    from that checkpoint exactly as after a kill. (Stopping through ``trainer.should_stop``
    would close Lightning's epoch, and the engine's one epoch holds the whole run.)"""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self._checkpointed_after_deadline = False

    def on_train_batch_end(self, trainer: L.Trainer, module: L.LightningModule, *args: Any) -> None:
        if module.checkpoint_due and time.time() >= self.deadline:
            self._checkpointed_after_deadline = True  # the engine's checkpoint callback writes it now

    def on_train_batch_start(self, trainer: L.Trainer, module: L.LightningModule, *args: Any) -> None:
        if self._checkpointed_after_deadline:
            raise BudgetSpent(f"the budget ended at iteration {module.iteration}")


class TrainingClock(L.Callback):
    """The wall seconds a run has spent training (curve evaluations included) over all its
    invocations, kept in its checkpoints: an invocation killed before it writes its record (at
    the end of a session, during scoring) loses at most the time since its last checkpoint."""

    def __init__(self, before: float = 0.0) -> None:
        """:param before: the seconds of earlier invocations where the checkpoint resumed holds
            none (written before the clock existed); the checkpoint's own value replaces it."""
        self.before = before
        self._started: float | None = None

    def on_train_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self._started = time.time()

    @property
    def seconds(self) -> float:
        return self.before + (time.time() - self._started if self._started is not None else 0.0)

    def state_dict(self) -> dict[str, float]:
        return {"seconds": self.seconds}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.before = float(state_dict["seconds"])


#: Images per call of a model's encoder when the campaign scores it on the CPU: on one core a
#: convolutional encoder codes 64 images at a time about twice as fast as the metrics' 1,024,
#: to the same bits (``benchmarks/scoring_encode.py``).
CPU_ENCODE_CHUNK = 64


def scoring_encoder(model: Any) -> Any:
    """``model.encode`` for the scoring: on a model whose parameters are on the CPU, called on
    at most :data:`CPU_ENCODE_CHUNK` images at a time and the codes concatenated (the same
    codes); as it is on another device, where larger batches run faster."""
    import torch

    if any(parameter.device.type != "cpu" for parameter in model.parameters()):
        return model.encode

    def encode(x: Any) -> Any:
        return torch.cat([model.encode(part) for part in x.split(CPU_ENCODE_CHUNK)])

    return encode


class DSpritesScoring:
    """dSprites: the curve holds the Factor score under both protocols at ``curve_votes``
    votes; the final figures are the Factor score under the standard protocol (``votes``
    training and ``votes // 2`` evaluation votes, as disentanglement_lib's 10,000 / 5,000) and
    the parted one, MIG, SAP, DCI and the beta-VAE metric
    (:func:`ppl_vae.metrics.disentanglement_scores` at ``votes``), and for a model with a class
    variable the accuracy of q(c|x) on the shape factor of 10,000 fresh images (plain accuracy
    and clustering accuracy). A model with a Student-t prior also gets ``factor_score_cdf``: the
    standard Factor score of its codes mapped to the normal scale as the Decomposition VAE
    authors score them (:class:`ppl_vae.metrics.StudentTToNormal` with the prior's df). The run
    is done at its last step."""

    def __init__(self, run: Run, config: Any) -> None:
        from ppl_vae.data.dsprites import DSprites

        self.run, self.source = run, DSprites()
        #: the Student-t prior's degrees of freedom, or None for another prior.
        self.student_t_df = float(config.df) if getattr(config, "prior", None) == "student-t" else None

    def curve(self) -> Any:
        from ppl_vae.metrics import factor_scores
        from ppl_vae.train import PeriodicEvaluation

        run, source = self.run, self.source
        return PeriodicEvaluation(
            lambda model: factor_scores(scoring_encoder(model), source, votes=run.curve_votes, seed=run.seed,
                                        progress=False),
            every_n_steps=run.curve_every, evaluate_at_end=False,
        )

    def score(self, model: Any) -> dict[str, float]:
        import torch

        from ppl_vae.metrics import (
            StudentTToNormal,
            classification_accuracy,
            clustering_accuracy,
            disentanglement_scores,
            factor_score,
        )

        run, source, votes = self.run, self.source, self.run.votes
        standard = {"n_train": votes, "n_eval": max(votes // 2, 1), "n_variance": max(2 * votes, 1000), "seed": run.seed,
                    "progress": False}
        encode = scoring_encoder(model)
        scores = {"factor_score": factor_score(encode, source, **standard).score}
        if self.student_t_df is not None:
            scores["factor_score_cdf"] = factor_score(StudentTToNormal(encode, self.student_t_df), source,
                                                      **standard).score
        scores.update(disentanglement_scores(encode, source, votes=votes, seed=run.seed, progress=False))
        if hasattr(model, "classify"):
            generator = torch.Generator().manual_seed(run.seed + 20_000)
            indices = torch.randint(len(source), (10_000,), generator=generator)
            tensors = source.tensors(indices, dtype=torch.float32)
            probs = torch.cat([model.classify(tensors["x"][i : i + 500])[0] for i in range(0, 10_000, 500)])
            shape = tensors["factors"][:, 1]
            scores["shape_accuracy"] = classification_accuracy(probs, shape)
            scores["shape_clustering_accuracy"] = clustering_accuracy(probs, shape)
        return {name: float(value) for name, value in scores.items()}


class MNISTLabelsScoring:
    """PartedVAE on MNIST against its labels alone (the paper's +12 points): the curve is the
    accuracy of q(c|x) on ``validation_images`` held-out images every ``curve_every`` steps,
    and the run stops once it has not improved for ``patience`` points (or at its steps); the
    final figures are the accuracy, at the best curve point's weights, on the other held-out
    images (``accuracy``), that of the same encoder and class head trained on the labels alone
    to the same kind of plateau (``labels_alone_accuracy``,
    :func:`experiments.held_out.train_classifier_alone`), their difference (``gap``) and the
    best steps of both."""

    def __init__(self, run: Run, config: Any) -> None:
        from experiments.held_out import split_held_out
        from ppl_vae.recipes.parted import mnist_pools

        self.run, self.config = run, config
        self.pool, held_out = mnist_pools(config)
        self.validation, self.test = split_held_out(held_out, run.validation_images, run.seed)

    def curve(self) -> Any:
        from experiments.held_out import held_out_accuracy
        from ppl_vae.train import PeriodicEvaluation

        validation = self.validation
        return PeriodicEvaluation(lambda model: {"accuracy": held_out_accuracy(model, validation)},
                                  every_n_steps=self.run.curve_every, monitor="accuracy", patience=self.run.patience,
                                  evaluate_at_end=False)

    def score(self, model: Any, labelled: Mapping[str, Any], best_step: int) -> dict[str, float]:
        from experiments.held_out import held_out_accuracy, train_classifier_alone

        accuracy = held_out_accuracy(model, self.test)
        alone, trained = train_classifier_alone(self.config, tuple(self.pool.x.shape[1:]), model.num_classes[0],
                                                labelled, self.validation,
                                                self.run.curve_every, self.run.patience, self.run.steps)
        alone_accuracy = held_out_accuracy(alone, self.test)
        return {"accuracy": accuracy, "labels_alone_accuracy": alone_accuracy, "gap": accuracy - alone_accuracy,
                "best_step": float(best_step), "labels_alone_best_step": float(trained["best_step"]),
                "test_images": float(self.test.x.shape[0]), "training_pool": float(self.pool.x.shape[0])}


def train_one(run: Run, checkpoints: Path, results: Path, deadline: float, device: str) -> dict[str, Any]:
    """Train ``run`` from scratch or from its checkpoint until its steps or ``deadline``,
    score it when it is done and time allows, and write its record; returns the record."""
    import pyro
    import torch

    import ppl_vae
    from ppl_vae.recipes import RECIPES
    from ppl_vae.recipes.settings import config_to_dict
    from ppl_vae.train import read_checkpoint

    start = time.time()
    previous = read_record(run.record_path(results)) or {}
    run_dir = run.run_dir(checkpoints)
    resume = (run_dir / "checkpoints" / "last.ckpt").is_file()
    if not resume and previous.get("steps", 0) > 0:
        print(f"{run.name}: its checkpoint ({run_dir}) is gone; restarting it from step 0 "
              f"(the record had {previous['steps']} steps)", flush=True)
        previous = {}
    elif resume:
        print(f"{run.name}: resuming from {run_dir / 'checkpoints' / 'last.ckpt'}", flush=True)
    else:
        print(f"{run.name}: starting in {run_dir}", flush=True)

    config = run_config(run, device)
    recipe = RECIPES[run.recipe]
    pyro.set_rng_seed(run.seed)
    experiment = recipe.build(config)
    scoring = DSpritesScoring(run, config) if run.scoring == "dsprites" else MNISTLabelsScoring(run, config)
    curve = scoring.curve()
    # a record from before the training clock holds wall time only: count it all as training
    previous_training = previous.get("training_seconds", previous.get("wall_seconds", 0.0))
    previous_other = previous.get("wall_seconds", 0.0) - previous_training  # setup and scoring so far
    clock = TrainingClock(before=previous_training)
    fit_start = time.time()
    try:
        result = ppl_vae.fit(
            experiment.model, experiment.objective, experiment.train_data, config.train, run_dir=run_dir,
            resume=resume, overwrite=not resume,
            extra_config={"recipe": recipe.name, "config": config_to_dict(config),
                          "model_inputs": experiment.model_inputs},
            callbacks=[curve, Deadline(deadline), clock], elbo_arguments=experiment.elbo_arguments,
        )
        model = result.model
    except BudgetSpent:
        model = None
    fit_end = time.time()
    checkpoint = read_checkpoint(run_dir / "checkpoints" / "last.ckpt")
    saved_clock = next((value for key, value in checkpoint["callbacks"].items() if "TrainingClock" in key), None)
    training_seconds = saved_clock["seconds"] if saved_clock else clock.before + fit_end - fit_start
    steps = int(checkpoint["ppl_vae"]["iteration"])
    state = next(value for key, value in checkpoint["callbacks"].items() if "PeriodicEvaluation" in key)
    history = state["history"]
    done = steps == run.steps or state["stopped_at"] is not None
    settings = config_to_dict(config)
    curve_points = [{"step": int(point["step"]), "metrics": {k: float(v) for k, v in point.items() if k != "step"}}
                    for point in history]

    def record_with(metrics: dict[str, float]) -> dict[str, Any]:
        return {
            "experiment": run.experiment,
            "seed": run.seed,
            "complete": bool(metrics),
            "steps": steps,
            "target_steps": run.steps,
            "stopped_at": state["stopped_at"],
            "training_seconds": round(training_seconds, 1),
            "wall_seconds": round(training_seconds + previous_other + (fit_start - start) + (time.time() - fit_end), 1),
            "invocations": previous.get("invocations", 0) + 1,
            "updated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "commit": code_commit(),
            "versions": versions(),
            "machine": machine(device),
            "recipe": run.recipe,
            "settings": settings,
            "votes": run.votes,
            "metrics": metrics,
            "curve": curve_points,
        }

    metrics: dict[str, float] = {}
    if done and time.time() < deadline:
        write_record(run.record_path(results), record_with({}))  # trained: says so even if scoring is interrupted
        print(f"{run.name}: trained ({steps} steps); scoring", flush=True)
        model.eval()
        with torch.no_grad():
            if isinstance(scoring, DSpritesScoring):
                metrics = scoring.score(model)
        if isinstance(scoring, MNISTLabelsScoring):
            model.load_state_dict(state["best_weights"])  # the weights of the best curve point
            metrics = scoring.score(model, experiment.train_data["labelled"], state["best"]["step"])
    elif done:
        print(f"{run.name}: trained; the budget leaves no time to score it (the next invocation will)", flush=True)
    record = record_with(metrics)
    write_record(run.record_path(results), record)
    progress = "complete" if record["complete"] else f"{record['steps']} of {run.steps} steps"
    print(f"{run.name}: {progress}, {record['wall_seconds']:.0f} s in all; record {run.record_path(results)}",
          flush=True)
    return record


def state_of(run: Run, checkpoints: Path, results: Path) -> str:
    """One word on where ``run`` stands: complete, resumable, lost (started, checkpoint gone) or new."""
    record = read_record(run.record_path(results))
    if record is not None and record.get("complete"):
        return "complete"
    if (run.run_dir(checkpoints) / "checkpoints" / "last.ckpt").is_file():
        return "resumable"
    if record is not None and record.get("steps", 0) > 0:
        return "lost"
    return "new"


def run_campaign(runs: Sequence[Run], args: argparse.Namespace) -> int:
    """Start or resume every unfinished run of ``runs``, ``args.workers`` at a time, each in a
    worker process with one torch thread, until they are done or the budget is spent.
    Returns the number of workers that failed."""
    deadline = time.time() + 60 * args.budget_minutes
    pending = [run for run in runs if state_of(run, args.checkpoints, args.results) != "complete"]
    running: dict[str, subprocess.Popen] = {}
    failures = 0
    print(f"campaign: {len(pending)} unfinished run(s), {args.workers} worker(s), budget {args.budget_minutes} min, "
          f"checkpoints {args.checkpoints}", flush=True)
    while pending or running:
        while pending and len(running) < args.workers and deadline - time.time() > 60 * args.min_start_minutes:
            run = pending.pop(0)
            log = run.run_dir(args.checkpoints).with_suffix(".log")
            log.parent.mkdir(parents=True, exist_ok=True)
            command = [sys.executable, str(Path(__file__).resolve()), "--checkpoints", str(args.checkpoints),
                       "--results", str(args.results), "--manifest", str(args.manifest),
                       "worker", run.experiment, str(run.seed), "--deadline", str(deadline), "--device", args.device]
            environment = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PPL_VAE_NUM_THREADS": "1",
                           "PYTHONUNBUFFERED": "1"}
            with open(log, "a", encoding="utf-8") as output:
                running[run.name] = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=environment,
                                                     cwd=ROOT)  # relative paths of the manifest are the repository's
            print(f"campaign: {run.name} started (log {log})", flush=True)
        if not running:
            break
        time.sleep(args.poll_seconds)
        for name, process in list(running.items()):
            if process.poll() is not None:
                del running[name]
                failures += process.returncode != 0
                print(f"campaign: {name} {'stopped' if process.returncode == 0 else f'FAILED ({process.returncode})'}",
                      flush=True)
    left = [run.name for run in runs if state_of(run, args.checkpoints, args.results) != "complete"]
    print(f"campaign: budget or work done; {len(left)} run(s) unfinished: {', '.join(left) or 'none'}", flush=True)
    return failures


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manifest", type=Path, default=MANIFEST)
    parser.add_argument("--checkpoints", type=Path, default=None, help="checkpoint folder (default: under the cache)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="records folder (default: results/)")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="every run of the manifest and its state")
    start = commands.add_parser("run", help="start or resume the unfinished runs within a budget")
    start.add_argument("--budget-minutes", type=float, required=True)
    start.add_argument("--workers", type=int, default=1, help="runs at a time, one torch thread each")
    start.add_argument("--only", nargs="+", default=None, help="experiment names (default: all, in the manifest's order)")
    start.add_argument("--min-start-minutes", type=float, default=2.0, help="start no run with less time left")
    start.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    start.add_argument("--poll-seconds", type=float, default=5.0)
    worker = commands.add_parser("worker", help="(used by run) train one run until the deadline")
    worker.add_argument("experiment")
    worker.add_argument("seed", type=int)
    worker.add_argument("--deadline", type=float, required=True, help="seconds since the epoch")
    worker.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    args = parser.parse_args(argv)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # experiments.held_out
    args.checkpoints = args.checkpoints or default_checkpoints()
    try:
        runs = read_manifest(args.manifest)
    except ValueError as error:
        parser.error(str(error))
    if args.command == "list":
        for run in runs:
            print(f"{run.name:45} {state_of(run, args.checkpoints, args.results)}")
        return 0
    if args.command == "worker":
        import torch

        torch.set_num_threads(1)
        matching = [run for run in runs if run.experiment == args.experiment and run.seed == args.seed]
        if not matching:
            parser.error(f"no run {args.experiment}/seed{args.seed} in {args.manifest}")
        train_one(matching[0], args.checkpoints, args.results, args.deadline, args.device)
        return 0
    if args.workers < 1 or args.budget_minutes <= 0:
        parser.error("--workers must be >= 1 and --budget-minutes > 0")
    if args.only:
        unknown = set(args.only) - {run.experiment for run in runs}
        if unknown:
            parser.error(f"--only: no experiment {sorted(unknown)} in {args.manifest}")
        runs = [run for run in runs if run.experiment in args.only]
    return 1 if run_campaign(runs, args) else 0


if __name__ == "__main__":
    sys.exit(main())
