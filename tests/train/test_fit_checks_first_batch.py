"""``fit`` refuses, before training, data its likelihood cannot score and ``pyro.param`` sites
it would not train; parameters the module owns train as usual."""
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import TraceMeanField_ELBO
from pyro.nn import PyroModule, PyroParam, pyro_method

from ppl_vae import fit
from ppl_vae.models import VAE
from ppl_vae.nn import MLP, mlp_decoder


def bernoulli_vae() -> VAE:
    torch.manual_seed(0)
    return VAE(MLP([6, 8], final_activation=torch.nn.ReLU()), mlp_decoder(2, [8], (6,)), 2)


def test_a_bernoulli_model_given_grey_data_is_refused_naming_site_likelihood_and_range():
    grey = torch.rand(32, 6, generator=torch.Generator().manual_seed(0)) * 0.5 + 0.25
    with pytest.raises(ValueError, match=r"site 'x': the Bernoulli likelihood's support is boolean .*\[0\.2\d*, 0\.7\d*\]"):
        fit(bernoulli_vae(), TraceMeanField_ELBO(), {"x": grey}, steps=2, batch_size=8, progress_bar=False)


class PriorLocation(PyroModule):
    """A Gaussian latent model whose prior location is a parameter, declared in one of three ways."""

    def __init__(self, how: str) -> None:
        super().__init__(name=f"prior_location_{how}")
        self.how = how
        self.net = torch.nn.Linear(1, 1)
        if how == "nn.Parameter":
            self.loc = torch.nn.Parameter(torch.zeros(1))
        elif how == "PyroParam":
            self.scale = PyroParam(torch.ones(1), dist.constraints.positive)

    def prior_loc(self) -> torch.Tensor:
        if self.how == "pyro.param":
            return pyro.param("user_prior_loc", torch.zeros(1))
        return self.loc if self.how == "nn.Parameter" else torch.zeros(1)

    @pyro_method
    def model(self, x: torch.Tensor) -> None:
        scale = self.scale if self.how == "PyroParam" else torch.ones(1)
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(self.prior_loc(), scale).to_event(1))
            pyro.sample("x", dist.Normal(z, 0.1).to_event(1), obs=x)

    @pyro_method
    def guide(self, x: torch.Tensor) -> None:
        with pyro.plate("data", x.shape[0]):
            pyro.sample("z", dist.Normal(self.net(x), 0.1).to_event(1))


def data() -> dict[str, torch.Tensor]:
    return {"x": 3.0 + 0.1 * torch.randn(64, 1, generator=torch.Generator().manual_seed(0))}


def test_a_pyro_param_prior_in_the_model_is_refused_by_name():
    with pytest.raises(ValueError, match=r"pyro.param sites \['user_prior_loc'\] that fit would not train"):
        fit(PriorLocation("pyro.param"), TraceMeanField_ELBO(), data(), steps=2, batch_size=16, progress_bar=False)


@pytest.mark.parametrize("how", ["nn.Parameter", "PyroParam"])
def test_a_prior_parameter_owned_by_the_module_trains(how):
    model = PriorLocation(how)
    before = {name: value.detach().clone() for name, value in model.named_parameters()}
    fit(model, TraceMeanField_ELBO(), data(), steps=20, batch_size=16, lr=0.05, progress_bar=False)
    changed = [name for name, value in model.named_parameters() if not torch.equal(value, before[name])]
    assert ("loc" if how == "nn.Parameter" else "scale_unconstrained") in changed


def test_dynamic_binarization_lets_a_bernoulli_model_train_on_grey_data():
    grey = torch.rand(32, 6, generator=torch.Generator().manual_seed(0))
    result = fit(bernoulli_vae(), TraceMeanField_ELBO(), {"x": grey}, steps=4, batch_size=8, binarize=("x",), progress_bar=False)
    assert result.steps == 4


def test_dynamic_binarization_draws_binary_batches_afresh():
    from ppl_vae.train.batches import TensorBatches, as_groups

    grey = torch.full((8, 100), 0.5)
    batches = list(TensorBatches(as_groups({"x": grey}), batch_size=8, num_batches=2, binarize=["x"]))
    first, second = batches[0]["x"]["x"], batches[1]["x"]["x"]
    assert set(first.unique().tolist()) == {0.0, 1.0} and not torch.equal(first, second)
    with pytest.raises(ValueError, match=r"binarize names keys \['y'\]"):
        TensorBatches(as_groups({"x": grey}), batch_size=8, num_batches=2, binarize=["y"])
