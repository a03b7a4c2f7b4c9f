"""``fit``'s training bar: redrawn at every step on a terminal, about 20 times in all where each
redraw is a new line or message (a notebook's stream, a log file)."""
import io

import torch
from lightning.pytorch.callbacks import TQDMProgressBar
from pyro.infer import TraceMeanField_ELBO

from ppl_vae import fit
from ppl_vae.models import VAE
from ppl_vae.nn import MLP, mlp_decoder
from ppl_vae.train.progress_bar import training_progress_bar


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_bar_is_redrawn_every_step_on_a_terminal_and_about_twenty_times_elsewhere():
    assert training_progress_bar(1000, Terminal()).refresh_rate == 1
    assert training_progress_bar(1000, io.StringIO()).refresh_rate == 50
    assert training_progress_bar(7, io.StringIO()).refresh_rate == 1


def test_fit_off_a_terminal_writes_a_few_redraws_not_one_per_step(capsys):
    torch.manual_seed(0)
    vae = VAE(MLP([6, 8], final_activation=torch.nn.ReLU()), mlp_decoder(2, [8], (6,)), 2)
    x = (torch.rand(64, 6, generator=torch.Generator().manual_seed(0)) > 0.5).float()
    fit(vae, TraceMeanField_ELBO(), {"x": x}, steps=200, batch_size=8, progress_bar=True)
    redraws = capsys.readouterr().out.count("\r")
    assert 0 < redraws <= 3 * 20  # Lightning writes up to two redraws per update (count, then losses)


def test_a_progress_bar_among_the_callbacks_is_used_as_given(capsys):
    torch.manual_seed(0)
    vae = VAE(MLP([6, 8], final_activation=torch.nn.ReLU()), mlp_decoder(2, [8], (6,)), 2)
    x = (torch.rand(64, 6, generator=torch.Generator().manual_seed(0)) > 0.5).float()
    fit(vae, TraceMeanField_ELBO(), {"x": x}, steps=40, batch_size=8, progress_bar=True,
        callbacks=[TQDMProgressBar(refresh_rate=1)])
    assert capsys.readouterr().out.count("\r") >= 40
