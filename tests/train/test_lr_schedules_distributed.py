"""Learning-rate schedules under data parallelism (2 CPU processes, gloo): every process
reduces its rates at the same iterations, from the mean over processes of the watched loss,
and a run interrupted inside a window resumes to the rates and parameters of an
uninterrupted run."""
from pathlib import Path

import pytest
import torch
from test_distributed import (
    WORLD,
    Interrupted,
    contrastive_case,
    free_port,
    global_data,
    interrupt_after,
    join_as_process,
    run_two_processes,
)

SCHEDULE = {"every_n_steps": 2, "factor": 0.5, "patience": 0, "threshold": 0.5}


def _plateau_worker(rank: int, port: int, run_dir: str, interrupt_at: int | None) -> None:
    """Two-process contrastive training to 8 steps with plateau schedules on both optimisers,
    windows of 2 and a checkpoint every 3 iterations (inside a window); with ``interrupt_at``
    both processes stop after that iteration and the run is resumed."""
    join_as_process(rank, port)
    from ppl_vae import fit

    data = global_data()
    data = {"target": data["target"], "background": data["background"]}
    settings = dict(steps=8, batch_size=4, lr=1e-2, log_every_n_steps=1, checkpoint_every_n_steps=3,
                    progress_bar=False, devices=WORLD, strategy="ddp", run_dir=run_dir,
                    lr_plateau={"elbo": SCHEDULE, "discriminator": SCHEDULE})
    model, objective, _ = contrastive_case()
    if interrupt_at is not None:
        with pytest.raises(Interrupted):
            fit(model, objective, data, overwrite=True, callbacks=[interrupt_after(interrupt_at)], **settings)
        model, objective, _ = contrastive_case()
        result = fit(model, objective, data, resume=True, **settings)
    else:
        result = fit(model, objective, data, overwrite=True, **settings)
    torch.save({
        "rates": [(r["step"], r["lr/elbo"], r["lr/discriminator"]) for r in result.history],
        "model": {n: p.detach() for n, p in result.model.named_parameters()},
    }, Path(run_dir) / f"rank{rank}.pt")


def test_two_processes_reduce_their_rates_together_and_resume_inside_a_window_exactly(tmp_path):
    run_two_processes(_plateau_worker, free_port(), str(tmp_path / "straight"), None)
    run_two_processes(_plateau_worker, free_port(), str(tmp_path / "resumed"), 4)
    straight = [torch.load(tmp_path / "straight" / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]
    resumed = [torch.load(tmp_path / "resumed" / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]
    rates = straight[0]["rates"]
    assert [step for step, *_ in rates] == list(range(1, 9))
    assert min(elbo for _, elbo, _ in rates) < 1e-2  # the schedules did reduce
    for run in (*straight, *resumed):
        assert run["rates"] == rates
        for name, value in straight[0]["model"].items():
            torch.testing.assert_close(run["model"][name], value, rtol=0, atol=0)
