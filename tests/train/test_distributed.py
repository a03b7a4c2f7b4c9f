"""Data parallelism on 2 CPU processes (gloo): batch-level terms over the global batch,
the gather's gradient, DDP training runs through the engine (a library model with its
discriminator, and a user's model function with its autoguide), and the sweep runner.

Exactness: every standard-normal draw (guide samples, prior draws) and every permutation is
replayed from a generator seeded by its call number, drawn at the GLOBAL batch's shape, and
process r of N keeps rows ``r B .. (r + 1) B`` of it. One process with batch 2B and two with
batch B therefore use the very same noise for the very same data points, and their
objectives agree to floating-point rounding, not merely in expectation.
"""
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from pyro.infer import TraceMeanField_ELBO
from torch import nn

from ppl_vae.distributions import AnisotropicGaussianPrior
from ppl_vae.infer.contrastive import ContrastiveELBO
from ppl_vae.infer.decomposition import DecompositionELBO
from ppl_vae.infer.distributed import GlobalBatch, process_rank, world_size
from ppl_vae.infer.parted import PartedELBO
from ppl_vae.models.contrastive import ContrastiveVAE
from ppl_vae.models.decomposition import DecompositionVAE
from ppl_vae.models.parted import PartedVAE
from ppl_vae.models.vae import VAE
from ppl_vae.nn import MLP, mlp_decoder
from ppl_vae.schedules import LinearCapacity

WORLD = 2
LOCAL_BATCH = 8
FEATURES = 6


class ReplayedNoise:
    """Standard-normal draws and permutations as functions of (call number, global shape),
    each process taking its own rows."""

    def __init__(self, monkeypatch) -> None:
        self.normal_calls = 0
        self.permutation_calls = 0
        self.randperm = torch.randperm
        monkeypatch.setattr(torch.distributions.normal, "_standard_normal", self.standard_normal)
        monkeypatch.setattr(torch, "randperm", self.permutation)
        self.uniform_calls = 0
        self.rand = torch.rand
        monkeypatch.setattr(torch, "rand", self.uniform)

    def uniform(self, shape, *args, dtype=None, device=None, **kwargs):
        """Uniform draws (the Gumbel-softmax noise of PartedVAE's relaxed c), replayed like the normals."""
        shape = torch.Size(shape)
        generator = torch.Generator().manual_seed(9000 + self.uniform_calls)
        self.uniform_calls += 1
        processes = world_size()
        rows = shape[0]
        full = self.rand((rows * processes, *shape[1:]), generator=generator, dtype=dtype)
        start = process_rank() * rows if processes > 1 else 0
        return full[start : start + rows].to(device)

    def standard_normal(self, shape, dtype, device):
        shape = torch.Size(shape)
        generator = torch.Generator().manual_seed(1000 + self.normal_calls)
        self.normal_calls += 1
        processes = world_size()
        rows = shape[0]
        full = torch.randn((rows * processes, *shape[1:]), generator=generator, dtype=dtype)
        start = process_rank() * rows if processes > 1 else 0
        return full[start : start + rows].to(device)

    def permutation(self, n, *args, generator=None, **kwargs):
        if generator is None:
            generator = torch.Generator().manual_seed(5000 + self.permutation_calls)
            self.permutation_calls += 1
        return self.randperm(n, *args, generator=generator, **kwargs)


def _mlp_networks(latent_dim: int) -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(3)
    return MLP([FEATURES, 16], final_activation=nn.ReLU()), mlp_decoder(latent_dim, [16], (FEATURES,))


def vae_case():
    model = VAE(*_mlp_networks(2), 2, likelihood="gaussian", likelihood_scale=0.5)
    return model, TraceMeanField_ELBO(), "sum"


def mmd_case():
    prior = AnisotropicGaussianPrior(2, [0.5, -0.5], learn=True)
    model = DecompositionVAE(*_mlp_networks(2), 2, prior, "gaussian", 0.5)
    return model, DecompositionELBO(beta=1.0, alpha=20.0, divergence="mmd"), "sum"


def inclusive_kl_case():
    prior = AnisotropicGaussianPrior(2, [0.5, -0.5], learn=True)
    model = DecompositionVAE(*_mlp_networks(2), 2, prior, "gaussian", 0.5, data_size=100)
    return model, DecompositionELBO(beta=0.5, alpha=20.0, divergence="inclusive_kl"), "mean"


def contrastive_case():
    torch.manual_seed(3)
    model = ContrastiveVAE.mlp(
        (FEATURES,), 2, 2, hidden=8, likelihood="gaussian", likelihood_scale=0.5, target_size=64, background_size=32
    )
    torch.manual_seed(4)
    return model, ContrastiveELBO(gamma=2.0, discriminator="mlp", discriminator_hidden=(8,)), "mean"


def parted_case():
    torch.manual_seed(3)
    model = PartedVAE.mlp((FEATURES,), z_dim=2, num_classes=3, u_dims=1, hidden=(16,), likelihood="gaussian",
                          likelihood_scale=0.5, data_size=100)
    objective = PartedELBO(LinearCapacity(0.0, 5.0, 10), LinearCapacity(0.0, 2.0, 10), labelled_group=None)
    return model, objective, "mean"


CASES = {
    "vae": vae_case,
    "decomposition-mmd": mmd_case,
    "decomposition-inclusive-kl": inclusive_kl_case,
    "contrastive": contrastive_case,
    "parted": parted_case,
}


def global_data() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(7)
    return {
        "x": torch.randn(WORLD * LOCAL_BATCH, FEATURES, generator=generator),
        "target": torch.randn(WORLD * LOCAL_BATCH, FEATURES, generator=generator),
        "background": torch.randn(WORLD * LOCAL_BATCH, FEATURES, generator=generator) * 0.5,
    }


def objective_and_gradients(name: str, data: dict[str, torch.Tensor]) -> dict[str, object]:
    """Loss and parameter gradients of case ``name`` (and of its auxiliary steps) on ``data``."""
    model, objective, convention = CASES[name]()
    batch = {"x": data["x"]} if name != "contrastive" else {k: data[k] for k in ("target", "background")}
    result: dict[str, object] = {"convention": convention}
    schedules = {"step": 3} if name == "parted" else {}  # the capacities' training step
    global_batch = {"global_batch": GlobalBatch()} if hasattr(objective, "training_loss") else {}
    loss = objective.differentiable_loss(model.model, model.guide, **batch, **schedules, **global_batch)
    loss.backward()
    result["loss"] = loss.detach()
    result["grads"] = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    for step in getattr(objective, "auxiliary_steps", lambda m: [])(model):
        step_loss = step.loss(**batch, **global_batch)
        step_loss.backward()
        result[f"{step.name}_loss"] = step_loss.detach()
        result[f"{step.name}_grads"] = [p.grad.clone() for p in step.parameters]
    return result


def gather_gradient() -> dict[str, torch.Tensor]:
    """Rank r sends rows (r, r + 0.5); the loss weighs the gathered rows differently per rank."""
    rank = process_rank()
    local = torch.tensor([[rank, rank + 0.5]], requires_grad=True)
    untouched = GlobalBatch(across_processes=False).all_gather(local)
    gathered = GlobalBatch().all_gather(local)
    weights = torch.arange(gathered.numel(), dtype=torch.float32).reshape(gathered.shape) * (rank + 1)
    (gathered * weights).sum().backward()
    return {"gathered": gathered.detach(), "grad": local.grad.clone(), "outside_is_identity": untouched is local}


def _equality_worker(rank: int, init_file: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    monkeypatch = pytest.MonkeyPatch()
    try:
        results = {"gather": gather_gradient()}
        data = {k: v[rank * LOCAL_BATCH : (rank + 1) * LOCAL_BATCH] for k, v in global_data().items()}
        for name in CASES:
            ReplayedNoise(monkeypatch)
            results[name] = objective_and_gradients(name, data)
            monkeypatch.undo()
        torch.save(results, Path(out_dir) / f"rank{rank}.pt")
    finally:
        monkeypatch.undo()
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory) -> list[dict]:
    folder = tmp_path_factory.mktemp("equality")
    mp.start_processes(
        _equality_worker, args=(str(folder / "init"), str(folder)), nprocs=WORLD, start_method="fork"
    )
    return [torch.load(folder / f"rank{rank}.pt", weights_only=False) for rank in range(WORLD)]


@pytest.mark.parametrize("name", list(CASES))
def test_two_processes_with_batch_b_give_the_objective_and_gradients_of_one_with_batch_2b(
    name, two_processes, monkeypatch
):
    ReplayedNoise(monkeypatch)
    single = objective_and_gradients(name, global_data())
    ranks = [results[name] for results in two_processes]
    combine = (lambda values: sum(values)) if single["convention"] == "sum" else (lambda values: sum(values) / WORLD)
    torch.testing.assert_close(combine([r["loss"] for r in ranks]), single["loss"], rtol=1e-5, atol=1e-5)
    assert set(single["grads"]) == set(ranks[0]["grads"])
    for param, grad in single["grads"].items():
        torch.testing.assert_close(combine([r["grads"][param] for r in ranks]), grad, rtol=1e-4, atol=1e-5)
    if name == "contrastive":
        torch.testing.assert_close(
            sum(r["discriminator_loss"] for r in ranks) / WORLD, single["discriminator_loss"], rtol=1e-5, atol=1e-6
        )
        for index, grad in enumerate(single["discriminator_grads"]):
            mean = sum(r["discriminator_grads"][index] for r in ranks) / WORLD
            torch.testing.assert_close(mean, grad, rtol=1e-4, atol=1e-6)


def test_gather_concatenates_in_rank_order_and_sums_gradients_over_processes(two_processes):
    expected_rows = torch.tensor([[0.0, 0.5], [1.0, 1.5]])
    weights = torch.arange(4, dtype=torch.float32).reshape(2, 2)
    summed_weights = weights * 1 + weights * 2
    for rank, results in enumerate(two_processes):
        torch.testing.assert_close(results["gather"]["gathered"], expected_rows)
        torch.testing.assert_close(results["gather"]["grad"], summed_weights[rank : rank + 1])
        assert results["gather"]["outside_is_identity"]


def test_gather_outside_data_parallel_training_is_the_identity():
    x = torch.randn(3, 2, requires_grad=True)
    assert GlobalBatch().all_gather(x) is x


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def join_as_process(rank: int, port: int) -> None:
    """Set the environment Lightning's DDP reads to join a WORLD-process group on this machine
    (rendezvous at ``port``) as process ``rank``, with one torch thread."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(WORLD), NODE_RANK="0",
                      LOCAL_RANK=str(rank))
    torch.set_num_threads(1)


class Interrupted(Exception):
    """Raised by :func:`interrupt_after` to stop training between iterations, as a crash would."""


def interrupt_after(iteration: int):
    """A callback that raises :class:`Interrupted` once training has finished ``iteration``."""
    import lightning as L

    class InterruptAt(L.Callback):
        def on_train_batch_end(self, trainer, module, *args) -> None:
            if module.iteration == iteration:
                raise Interrupted

    return InterruptAt()


def _engine_worker(rank: int, port: int, run_dir: str) -> None:
    join_as_process(rank, port)
    from ppl_vae import fit

    model, objective, _ = contrastive_case()
    objective.auxiliary_steps(model)
    before = {n: p.detach().clone() for n, p in objective.discriminator.named_parameters()}
    data = global_data()
    result = fit(model, objective, {"target": data["target"], "background": data["background"]},
                 steps=6, batch_size=4, lr=1e-2, log_every_n_steps=3, checkpoint_every_n_steps=3,
                 progress_bar=False, devices=WORLD, strategy="ddp", run_dir=run_dir, overwrite=True)
    torch.save({
        "rank": result.global_rank,
        "history": result.history,
        "model": {n: p.detach() for n, p in result.model.named_parameters()},
        "discriminator": {n: p.detach() for n, p in objective.discriminator.named_parameters()},
        "discriminator_before": before,
    }, Path(run_dir) / f"rank{rank}.pt")


def test_two_process_training_keeps_model_and_discriminator_in_sync_and_writes_once(tmp_path):
    mp.start_processes(_engine_worker, args=(free_port(), str(tmp_path)), nprocs=WORLD, start_method="fork")
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert ranks[0]["history"] == ranks[1]["history"] and [h["step"] for h in ranks[0]["history"]] == [3, 6]
    for part in ("model", "discriminator"):
        for name, value in ranks[0][part].items():
            torch.testing.assert_close(ranks[1][part][name], value, rtol=0, atol=0)
    before = ranks[0]["discriminator_before"]
    assert before and all(not torch.equal(ranks[0]["discriminator"][n], v) for n, v in before.items())
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["last.ckpt"]
    saved = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    assert isinstance(saved["ppl_vae"]["rng"], list) and len(saved["ppl_vae"]["rng"]) == WORLD


def test_sweep_gathers_every_run_into_one_table(tmp_path):
    command = [
        sys.executable, "-m", "ppl_vae.cli", "sweep", "vae", "--demo-settings",
        "--grid", "beta=2", "--seeds", "0,1", "--jobs", "2", "--out", str(tmp_path),
        "--set", "dataset=pinwheel", "--set", "num_train=200", "--set", "latent_dim=2", "--set", "hidden=8",
        "--set", "train.steps=20", "--set", "train.batch_size=50", "--set", "train.log_every_n_steps=10",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    table = json.loads((tmp_path / "sweep.json").read_text())
    assert [(run["settings"], run["seed"], run["status"]) for run in table["runs"]] == [
        ({"beta": 2}, 0, "ok"),
        ({"beta": 2}, 1, "ok"),
    ]
    assert all("elbo_per_point" in run["metrics"] for run in table["runs"])
    assert table["summary"][0]["runs"] == 2
    csv_lines = (tmp_path / "sweep.csv").read_text().splitlines()
    assert len(csv_lines) == 3 and "elbo_per_point" in csv_lines[0]
    assert "elbo_per_point" in done.stdout


def _resume_worker(rank: int, port: int, run_dir: str, interrupt_at: int | None) -> None:
    """Two-process contrastive training to 6 steps; with ``interrupt_at`` both processes stop
    after that iteration (the checkpoint of step 3 written) and the run is resumed."""
    import lightning as L

    join_as_process(rank, port)
    from ppl_vae import fit
    from ppl_vae.train import read_checkpoint

    class CountIterations(L.Callback):
        count = 0

        def on_train_batch_end(self, trainer, module, *args) -> None:
            self.count += 1

    data = global_data()
    data = {"target": data["target"], "background": data["background"]}
    settings = dict(steps=6, batch_size=4, lr=1e-2, log_every_n_steps=3, checkpoint_every_n_steps=3,
                    progress_bar=False, devices=WORLD, strategy="ddp", run_dir=run_dir)
    model, objective, _ = contrastive_case()
    resumed_from = None
    if interrupt_at is not None:
        with pytest.raises(Interrupted):
            fit(model, objective, data, overwrite=True, callbacks=[interrupt_after(interrupt_at)], **settings)
        resumed_from = read_checkpoint(Path(run_dir) / "checkpoints" / "last.ckpt")["ppl_vae"]["iteration"]
        model, objective, _ = contrastive_case()
        counter = CountIterations()
        result = fit(model, objective, data, resume=True, callbacks=[counter], **settings)
        resumed_from = (resumed_from, counter.count)
    else:
        result = fit(model, objective, data, overwrite=True, **settings)
    torch.save({
        "resumed_from": resumed_from,
        "steps": result.steps,
        "model": {n: p.detach() for n, p in result.model.named_parameters()},
        "discriminator": {n: p.detach() for n, p in objective.discriminator.named_parameters()},
    }, Path(run_dir) / f"rank{rank}.pt")


def run_two_processes(worker, *args, timeout: float = 180.0) -> None:
    context = mp.start_processes(worker, args=args, nprocs=WORLD, start_method="fork", join=False)
    deadline = time.monotonic() + timeout
    while not context.join(timeout=5):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            pytest.fail(f"the {WORLD} training processes did not finish within {timeout} s")


def test_two_process_run_interrupted_mid_training_resumes_to_the_uninterrupted_result(tmp_path):
    run_two_processes(_resume_worker, free_port(), str(tmp_path / "straight"), None)
    run_two_processes(_resume_worker, free_port(), str(tmp_path / "resumed"), 4)
    for rank in range(WORLD):
        straight = torch.load(tmp_path / "straight" / f"rank{rank}.pt", weights_only=False)
        resumed = torch.load(tmp_path / "resumed" / f"rank{rank}.pt", weights_only=False)
        assert straight["steps"] == resumed["steps"] == 6
        assert resumed["resumed_from"] == (3, 3)  # the checkpoint of step 3, then 3 more iterations
        for part in ("model", "discriminator"):
            for name, value in straight[part].items():
                torch.testing.assert_close(resumed[part][name], value, rtol=0, atol=0)


def _failing_setup_worker(rank: int, port: int, run_dir: str, bad_rank: int | None) -> None:
    """Two processes start a run; rank 0 finds an earlier run in ``run_dir`` (``bad_rank=None``),
    or process ``bad_rank`` gets data with a NaN. Each writes the error it raised."""
    join_as_process(rank, port)
    from ppl_vae import fit

    model, objective, _ = vae_case()
    data = {"x": global_data()["x"].clone()}
    if rank == bad_rank:
        data["x"][3, 1] = float("nan")
    try:
        fit(model, objective, data, steps=4, batch_size=4, progress_bar=False, devices=WORLD, strategy="ddp",
            run_dir=run_dir)
    except Exception as error:
        (Path(run_dir) / f"error{rank}.txt").write_text(f"{type(error).__name__}: {error}")


@pytest.mark.parametrize("bad_rank, expected", [(None, "already holds a run"), (1, "NaN")])
def test_a_setup_error_on_one_process_reaches_every_process_with_the_same_message(bad_rank, expected, tmp_path):
    if bad_rank is None:
        (tmp_path / "config.json").write_text("{}")
    run_two_processes(_failing_setup_worker, free_port(), str(tmp_path), bad_rank, timeout=120)
    messages = [(tmp_path / f"error{rank}.txt").read_text() for rank in range(WORLD)]
    assert messages[0] == messages[1]
    assert expected in messages[0] and "\n" not in messages[0]
    assert not (tmp_path / "checkpoints" / "last.ckpt").exists()


def _model_function_worker(rank: int, port: int, run_dir: str) -> None:
    """Two processes fit a model function with its autoguide, each guide started from a
    different point (rank 1's far from rank 0's), and write what they trained to."""
    join_as_process(rank, port)
    from pyro.infer.autoguide import AutoNormal
    from pyro.infer.autoguide.initialization import init_to_value
    from test_fit_model_and_guide import RATES, counts_model

    from ppl_vae import fit
    from ppl_vae.infer import MeanFieldELBO

    start = torch.full((5,), 0.0 if rank == 0 else 3.0)
    guide = AutoNormal(counts_model, init_loc_fn=init_to_value(values={"log_rate": start}))
    counts = torch.poisson(RATES.expand(64, 5), generator=torch.Generator().manual_seed(0))
    result = fit(counts_model, MeanFieldELBO(), {"x": counts}, guide=guide, steps=40, batch_size=8, lr=0.05,
                 log_every_n_steps=20, progress_bar=False, devices=WORLD, strategy="ddp", run_dir=run_dir,
                 overwrite=True)
    torch.save({"history": result.history,
                "guide": {n: p.detach().clone() for n, p in guide.named_parameters()}},
               Path(run_dir) / f"rank{rank}.pt")


def test_two_process_training_of_a_model_function_keeps_its_autoguide_in_sync_from_rank_0s_start(tmp_path):
    run_two_processes(_model_function_worker, free_port(), str(tmp_path))
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]
    assert ranks[0]["history"] == ranks[1]["history"] and [h["step"] for h in ranks[0]["history"]] == [20, 40]
    assert sorted(ranks[0]["guide"]) == ["locs.log_rate_unconstrained", "scales.log_rate_unconstrained"]
    for name, value in ranks[0]["guide"].items():
        torch.testing.assert_close(ranks[1]["guide"][name], value, rtol=0, atol=0)
    # 40 Adam steps of 0.05 towards log(1) = 0 end near 0 from rank 0's start (0), near 1.4 from rank 1's (3)
    fitted_log_rate_1 = ranks[0]["guide"]["locs.log_rate_unconstrained"][0]
    assert abs(fitted_log_rate_1) < 0.5, fitted_log_rate_1
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["last.ckpt"]
