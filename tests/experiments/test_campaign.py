"""The evidence campaign at a tiny size: runs resume after a kill exactly, a run whose
checkpoint is gone restarts with a message, records carry what the tables need, and the
tables in the docs are the ones the committed records give."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
CAMPAIGN = ROOT / "experiments" / "campaign.py"
TABLES = ROOT / "experiments" / "tables.py"
FIGURES = ROOT / "experiments" / "figures.py"
TINY = {
    "name": "tiny-parted", "recipe": "parted", "seeds": [0], "steps": 40, "curve_every": 20, "curve_votes": 20,
    "votes": 20,
    "settings": {"num_train": 256, "hidden": 8, "num_labels": 30, "label_fraction": None, "capacity_steps": 40,
                 "factor_score_votes": 0, "num_eval": 50, "train.batch_size": 16, "train.log_every_n_steps": 5,
                 "train.checkpoint_every_n_steps": 10},
}


def campaign(tmp: Path, *arguments: str, **popen) -> list[str]:
    """The command line of campaign.py on the tiny manifest with folders under ``tmp``."""
    manifest = tmp / "manifest.json"
    if not manifest.is_file():
        manifest.write_text(json.dumps({"experiments": [TINY]}))
    return [sys.executable, str(CAMPAIGN), "--manifest", str(manifest), "--checkpoints", str(tmp / "checkpoints"),
            "--results", str(tmp / "results"), *arguments]


def run(command: list[str]) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(command, capture_output=True, text=True, timeout=600, env=environment)


def record(tmp: Path) -> dict:
    return json.loads((tmp / "results" / "tiny-parted" / "seed0.json").read_text())


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("uninterrupted")
    done = run(campaign(tmp, "run", "--budget-minutes", "10", "--poll-seconds", "0.2"))
    assert done.returncode == 0, done.stdout + done.stderr
    return record(tmp)


def test_a_run_writes_a_complete_record_with_settings_versions_metrics_and_curve(uninterrupted):
    assert uninterrupted["complete"] and uninterrupted["steps"] == uninterrupted["target_steps"] == 40
    assert uninterrupted["experiment"] == "tiny-parted" and uninterrupted["seed"] == 0
    assert uninterrupted["settings"]["train"]["steps"] == 40 and uninterrupted["settings"]["hidden"] == 8
    assert set(uninterrupted["versions"]) >= {"ppl_vae", "torch", "pyro", "lightning"}
    assert uninterrupted["commit"] and uninterrupted["wall_seconds"] > uninterrupted["training_seconds"] > 0
    assert {"factor_score", "factor_score_parted", "mig", "sap", "dci_disentanglement", "beta_vae",
            "shape_accuracy"} <= set(uninterrupted["metrics"])
    assert [point["step"] for point in uninterrupted["curve"]] == [20, 40]
    assert set(uninterrupted["curve"][0]["metrics"]) == {"factor_score", "factor_score_parted"}


def test_a_killed_run_resumes_from_its_checkpoint_and_ends_as_an_uninterrupted_one_its_time_counted(tmp_path, uninterrupted):
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(campaign(tmp_path, "run", "--budget-minutes", "10", "--poll-seconds", "0.2"),
                               env=environment, start_new_session=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    checkpoint = tmp_path / "checkpoints" / "tiny-parted" / "seed0" / "checkpoints" / "last.ckpt"
    deadline = time.time() + 300
    while not checkpoint.is_file() and time.time() < deadline and process.poll() is None:
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)  # the campaign and its worker, at their first checkpoint
    process.wait()
    assert checkpoint.is_file()
    trained_before_the_kill = next(state["seconds"] for key, state in torch.load(checkpoint)["callbacks"].items()
                                   if "TrainingClock" in key)

    resumed = run(campaign(tmp_path, "run", "--budget-minutes", "10", "--poll-seconds", "0.2"))

    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    log = (tmp_path / "checkpoints" / "tiny-parted" / "seed0.log").read_text()
    assert "resuming from" in log
    assert record(tmp_path)["complete"]
    assert record(tmp_path)["metrics"] == uninterrupted["metrics"]
    assert record(tmp_path)["curve"] == uninterrupted["curve"]
    assert record(tmp_path)["training_seconds"] > trained_before_the_kill > 0  # the killed invocation's time counts


def test_the_training_time_of_earlier_invocations_is_read_from_the_checkpoint(tmp_path):
    past = str(time.time() - 1)  # a spent budget: the worker stops at its first checkpoint
    assert run(campaign(tmp_path, "worker", "tiny-parted", "0", "--deadline", past)).returncode == 0
    path = tmp_path / "checkpoints" / "tiny-parted" / "seed0" / "checkpoints" / "last.ckpt"
    checkpoint = torch.load(path, weights_only=True)
    key = next(key for key in checkpoint["callbacks"] if "TrainingClock" in key)
    checkpoint["callbacks"][key]["seconds"] = 1000.0  # as if the first invocation had trained that long
    torch.save(checkpoint, path)  # the digest covers weights and optimiser states, not callbacks

    resumed = run(campaign(tmp_path, "run", "--budget-minutes", "10", "--poll-seconds", "0.2"))

    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert record(tmp_path)["complete"] and 1000.0 < record(tmp_path)["training_seconds"] < 1000.0 + 600


def test_a_run_whose_checkpoint_is_gone_restarts_with_a_message(tmp_path):
    started = {"experiment": "tiny-parted", "seed": 0, "complete": False, "steps": 30, "target_steps": 40,
               "wall_seconds": 12.0, "invocations": 1, "curve": [], "metrics": {}}
    (tmp_path / "results" / "tiny-parted").mkdir(parents=True)
    (tmp_path / "results" / "tiny-parted" / "seed0.json").write_text(json.dumps(started))

    listed = run(campaign(tmp_path, "list"))
    past = str(time.time() - 1)  # a spent budget: the worker stops at its first checkpoint
    worker = run(campaign(tmp_path, "worker", "tiny-parted", "0", "--deadline", past))

    assert "lost" in listed.stdout
    assert worker.returncode == 0, worker.stdout + worker.stderr
    assert "is gone; restarting it from step 0" in worker.stdout
    assert record(tmp_path)["steps"] == 10 and not record(tmp_path)["complete"]
    assert record(tmp_path)["wall_seconds"] < 12.0 + 600 and record(tmp_path)["invocations"] == 1



TINY_MNIST = {
    "name": "tiny-mnist", "recipe": "parted", "scoring": "mnist-labels", "seeds": [0], "steps": 60, "curve_every": 10,
    "patience": 2, "validation_images": 200,
    "settings": {"dataset": "mnist", "num_train": 300, "label_fraction": None, "num_labels": 30, "network": "mlp",
                 "hidden": 16, "z_dim": 3, "u_dim": 2, "factor_score_votes": 0, "num_eval": 400,
                 "train.batch_size": 16, "train.log_every_n_steps": 5, "train.checkpoint_every_n_steps": 10},
}


def test_an_mnist_run_stops_on_a_plateau_and_is_scored_against_its_labels_alone(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"experiments": [TINY_MNIST]}))

    done = run(campaign(tmp_path, "run", "--budget-minutes", "10", "--poll-seconds", "0.2"))

    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((tmp_path / "results" / "tiny-mnist" / "seed0.json").read_text())
    assert result["complete"]
    assert set(result["metrics"]) >= {"accuracy", "labels_alone_accuracy", "gap", "best_step"}
    assert result["metrics"]["gap"] == pytest.approx(result["metrics"]["accuracy"] - result["metrics"]["labels_alone_accuracy"])
    curve = [point["metrics"]["accuracy"] for point in result["curve"]]
    if result["stopped_at"] is not None:  # a plateau: the last `patience` points did not beat the best
        assert result["steps"] == result["stopped_at"] < 60
        assert max(curve[-2:]) <= max(curve[:-2])
    assert result["metrics"]["best_step"] == 10 * (1 + curve.index(max(curve)))

def test_a_bad_manifest_is_named(tmp_path):
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"experiments": [{**TINY, "recipe": "nope"}]}))

    listed = run([sys.executable, str(CAMPAIGN), "--manifest", str(manifest), "list"])

    assert listed.returncode != 0
    assert str(manifest) in listed.stderr and "recipe must be one of" in listed.stderr


def _record(experiment: str, seed: int, score: float, complete: bool = True) -> dict:
    return {"experiment": experiment, "seed": seed, "complete": complete, "steps": 25000, "target_steps": 25000,
            "wall_seconds": 3600.0, "commit": "0123456789abcdef", "settings": {"label_fraction": 0.005},
            "metrics": {"factor_score": score, "factor_score_parted": score, "mig": 0.3, "sap": 0.1,
                        "dci_disentanglement": 0.4, "beta_vae": 1.0, "shape_accuracy": 0.99}}


def documents_with_a_table(root: Path) -> None:
    """Every document tables.py writes, under ``root``, each holding the parted-dsprites table's
    markers between a line before and a line after."""
    (root / "docs" / "results").mkdir(parents=True)
    for document in ("README.md", "docs/parted.md", "docs/decomposition.md", "docs/results/parted.md",
                     "docs/results/decomposition.md"):
        (root / document).write_text("before\n<!-- campaign-table: parted-dsprites -->\n<!-- /campaign-table -->\nafter\n")


def test_tables_are_written_from_records_and_check_fails_when_they_differ(tmp_path):
    results, root = tmp_path / "results", tmp_path / "root"
    documents_with_a_table(root)
    for seed, (labels, no_bc) in enumerate([(0.93, 0.85), (0.91, 0.80), (0.90, 0.88)]):
        for experiment, score in (("parted-dsprites-labels", labels), ("parted-dsprites-no-bc", no_bc)):
            (results / experiment).mkdir(parents=True, exist_ok=True)
            (results / experiment / f"seed{seed}.json").write_text(json.dumps(_record(experiment, seed, score)))
    command = [sys.executable, str(TABLES), "--results", str(results), "--root", str(root)]

    assert run([*command, "--check"]).returncode == 1
    assert run(command).returncode == 0
    assert run([*command, "--check"]).returncode == 0
    table = (root / "README.md").read_text()
    assert "| `parted-dsprites-labels` | 3 (0, 1, 2) | 25,000 | 60 min | 0123456 |" in table
    assert "| `parted-dsprites-labels` | 0.913 +- 0.015 |" in table
    assert "**met**: >= 0.9 over 3 seeds: 0.913" in table
    assert "**met**: below parted-dsprites-labels for every seed: 0.850 vs 0.930, 0.800 vs 0.910, 0.880 vs 0.900" in table
    assert table.startswith("before\n") and table.endswith("<!-- /campaign-table -->\nafter\n")


def test_a_target_out_of_reach_before_every_seed_is_in_is_reported_not_met(tmp_path):
    results, root = tmp_path / "results", tmp_path / "root"
    documents_with_a_table(root)
    scores = {"parted-dsprites-labels": [0.93, 0.91], "parted-dsprites-no-bc": [0.85, 0.95],
              "parted-dsprites-unsupervised": [0.40, 0.45], "parted-dsprites-unsupervised-ramped": [0.80]}
    for experiment, values in scores.items():
        (results / experiment).mkdir(parents=True)
        for seed, score in enumerate(values):
            (results / experiment / f"seed{seed}.json").write_text(json.dumps(_record(experiment, seed, score)))

    assert run([sys.executable, str(TABLES), "--results", str(results), "--root", str(root)]).returncode == 0

    table = (root / "README.md").read_text()
    assert "**not met**: below parted-dsprites-labels for every seed: 0.850 vs 0.930, 0.950 vs 0.910" in table
    assert "**not met**: >= 0.775 over 3 seeds: at most 0.617 even if the other 1 scored 1 (0.400, 0.450 so far)" in table
    assert "not yet decided: >= 0.9 over 3 seeds: 2 of 3 seeds so far" in table
    assert "not yet decided: >= 0.775 over 3 seeds: 1 of 3 seeds so far" in table  # 0.80 and two perfect seeds could


def test_a_row_whose_seeds_stopped_at_different_steps_shows_each_seeds_steps_in_seed_order(tmp_path):
    results, root = tmp_path / "results", tmp_path / "root"
    documents_with_a_table(root)
    (results / "parted-dsprites-labels").mkdir(parents=True)
    for seed, steps in enumerate([30000, 25000, 27500]):
        record = {**_record("parted-dsprites-labels", seed, 0.9), "steps": steps}
        (results / "parted-dsprites-labels" / f"seed{seed}.json").write_text(json.dumps(record))

    assert run([sys.executable, str(TABLES), "--results", str(results), "--root", str(root)]).returncode == 0

    assert "| 3 (0, 1, 2) | 30,000, 25,000, 27,500 | 60 min | 0123456 |" in (root / "README.md").read_text()


def test_a_comparison_with_a_reference_of_several_seeds_lists_each_seed_beside_the_mean(tmp_path):
    results, root = tmp_path / "results", tmp_path / "root"
    documents_with_a_table(root)
    (root / "README.md").write_text("<!-- campaign-table: decomposition-dsprites -->\n<!-- /campaign-table -->\n")
    scores = {"decomposition-dsprites-isotropic": [0.72, 0.60], "decomposition-dsprites-pca": [0.70]}
    for experiment, values in scores.items():
        (results / experiment).mkdir(parents=True)
        for seed, score in enumerate(values):
            (results / experiment / f"seed{seed}.json").write_text(json.dumps(_record(experiment, seed, score)))

    assert run([sys.executable, str(TABLES), "--results", str(results), "--root", str(root)]).returncode == 0

    assert ("**met**: above decomposition-dsprites-isotropic: 0.700 vs 0.660 (0.720, 0.600)"
            in (root / "README.md").read_text())


def test_the_tables_in_the_docs_are_the_ones_the_committed_records_give():
    checked = run([sys.executable, str(TABLES), "--check"])
    assert checked.returncode == 0, checked.stderr


def test_figures_are_drawn_from_records_and_check_fails_when_the_records_change(tmp_path):
    results, figures = tmp_path / "results", tmp_path / "figures"
    record = json.loads((ROOT / "results" / "parted-dsprites-labels" / "seed0.json").read_text())
    (results / "parted-dsprites-labels").mkdir(parents=True)
    path = results / "parted-dsprites-labels" / "seed0.json"
    path.write_text(json.dumps(record))
    command = [sys.executable, str(FIGURES), "--results", str(results), "--figures", str(figures)]
    assert run([*command, "--check"]).returncode == 1  # no figure yet
    assert run(command).returncode == 0
    assert (figures / "parted-dsprites-labels.png").read_bytes().startswith(b"\x89PNG")
    assert run([*command, "--check"]).returncode == 0
    record["curve"][-1]["metrics"]["factor_score"] = 0.5
    path.write_text(json.dumps(record))
    checked = run([*command, "--check"])
    assert checked.returncode == 1 and "parted-dsprites-labels.png" in checked.stderr


def test_the_figures_in_the_docs_are_the_ones_the_committed_records_give():
    checked = run([sys.executable, str(FIGURES), "--check"])
    assert checked.returncode == 0, checked.stderr


def test_the_mnist_rerun_plateaus_per_authors_epoch_of_938_steps_and_can_reach_their_80_epochs(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "experiments"))
    import campaign as manifest

    runs = [run for run in manifest.read_manifest(manifest.MANIFEST) if run.experiment == "parted-mnist-authors-epoch"]
    assert [run.seed for run in runs] == [0, 1, 2]
    config = manifest.run_config(runs[0], "cpu")
    assert {name: p.every_n_steps for name, p in config.train.lr_plateau.items()} == {"elbo": 938, "classifier": 938}
    assert config.train.steps == 80 * 938 and runs[0].curve_every == 938
    assert runs[0].patience * runs[0].curve_every >= config.train.steps  # no early stop before the authors' length
    assert (config.top_activation, config.negative_slope, config.class_prior_init) == ("leaky_relu", 0.1, "randn")


def test_the_mnist_variant_at_938_step_epochs_differs_from_parted_mnist_in_the_plateau_epoch_alone(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "experiments"))
    import campaign as manifest

    runs = {run.experiment: run for run in manifest.read_manifest(manifest.MANIFEST) if run.seed == 0}
    base, variant = runs["parted-mnist"], runs["parted-mnist-plateau-938"]
    assert (variant.curve_every, variant.patience) == (base.curve_every, base.patience)  # the control's stop
    base_config, variant_config = manifest.run_config(base, "cpu"), manifest.run_config(variant, "cpu")
    assert {name: p.every_n_steps for name, p in variant_config.train.lr_plateau.items()} == {
        "elbo": 938, "classifier": 938}
    assert {name: p.every_n_steps for name, p in base_config.train.lr_plateau.items()} == {
        "elbo": None, "classifier": None}
    assert variant_config.train.steps == base_config.train.steps


def test_a_variant_row_is_judged_against_the_control_of_the_row_it_varies(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "experiments"))
    import tables

    def records(experiment: str, gaps: list[float]) -> list[dict]:
        return [{"experiment": experiment, "seed": seed, "complete": True, "metrics": {"gap": gap}}
                for seed, gap in enumerate(gaps)]

    ours = {"parted-mnist-plateau-938": records("parted-mnist-plateau-938", [0.07, 0.08, 0.06])}
    controls = {"parted-mnist": records("parted-mnist", [0.09, 0.11])}
    text = tables.render("parted-mnist", ours, controls, part="verdicts")
    row = next(line for line in text.splitlines() if "`parted-mnist-plateau-938`" in line)
    assert "cause: implementation |" in row and row.endswith("| 0.070 +- 0.010 | 0.100 +- 0.014 |")


def test_student_t_runs_at_the_paper_settings_sweep_df_9_and_3_and_are_scored_after_the_authors_cdf_map(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "experiments"))
    import campaign as manifest

    runs = [run for run in manifest.read_manifest(manifest.MANIFEST) if run.experiment.endswith("-paper")]
    configs = {(run.experiment, run.seed): manifest.run_config(run, "cpu") for run in runs}
    assert sorted({config.df for config in configs.values()}) == [3.0, 9.0]
    assert all(seed in {0, 1} for _, seed in configs) and len(configs) == 4  # two seeds per df
    assert {(c.train.lr, c.train.batch_size, c.prior) for c in configs.values()} == {(1e-4, 256, "student-t")}
    by_name = {run.experiment: run for run in manifest.read_manifest(manifest.MANIFEST)}
    df9 = by_name["decomposition-dsprites-student-t-df9-paper"]
    assert manifest.DSpritesScoring(df9, manifest.run_config(df9, "cpu")).student_t_df == 9.0
    isotropic = by_name["decomposition-dsprites-isotropic"]
    assert manifest.DSpritesScoring(isotropic, manifest.run_config(isotropic, "cpu")).student_t_df is None


@pytest.mark.parametrize(("control", "cause"), [
    ([0.80, 0.82], "implementation"),  # every control seed beats every one of ours
    ([0.50, 0.55], "budget"),  # the authors' code at our budget does no better
    ([0.48, 0.70], "undecided (seeds overlap)"),
])
def test_a_short_row_shows_paper_control_and_ours_and_names_the_cause_of_the_shortfall(tmp_path, control, cause):
    results, root = tmp_path / "results", tmp_path / "root"
    documents_with_a_table(root)
    experiment = "parted-dsprites-unsupervised"
    for seed, (ours, theirs) in enumerate(zip([0.50, 0.60, 0.55], [*control, None], strict=True)):
        for folder, score in ((results / experiment, ours), (results / "controls" / experiment, theirs)):
            if score is not None:
                folder.mkdir(parents=True, exist_ok=True)
                record = _record(experiment, seed, score)
                record["metrics"]["factor_score"] = 0.1  # the row is judged on the authors' protocol
                (folder / f"seed{seed}.json").write_text(json.dumps({**record, "implementation": "authors"}))

    assert run([sys.executable, str(TABLES), "--results", str(results), "--root", str(root)]).returncode == 0

    table = (root / "README.md").read_text()
    row = next(line for line in table.splitlines() if "capacity ramps at the authors' rate" in line)
    spread = f"{sum(control) / 2:.3f} +- {abs(control[0] - control[1]) / 2 ** 0.5:.3f}"
    assert f"| **not met**: >= 0.775 over 3 seeds: 0.550; cause: {cause} | 0.775 | 0.550 +- 0.050 | {spread} |" in row
    assert "| no control yet |" in next(line for line in table.splitlines() if "3,686 shape labels" in line)


def test_the_scoring_encodes_at_most_64_images_a_call_on_the_cpu_to_the_same_codes(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "experiments"))
    import campaign

    calls = []

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 3)

        def encode(self, x):
            calls.append(x.shape[0])
            return self.linear(x)

    model, x = Encoder(), torch.randn(150, 4)
    codes = campaign.scoring_encoder(model)(x)

    assert calls == [64, 64, 22]
    torch.testing.assert_close(codes, model.linear(x), rtol=0, atol=0)


def test_a_figures_block_may_list_several_prefixes(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "experiments"))
    import figures

    text = "<!-- campaign-figures: vae-dsprites,dip-vae-i -->\n<!-- /campaign-figures -->\n"
    written = figures.with_figures(text, ["vae-dsprites", "dip-vae-i-dsprites", "parted-mnist"], "figures")

    assert "figures/vae-dsprites.png" in written and "figures/dip-vae-i-dsprites.png" in written
    assert "parted-mnist" not in written
