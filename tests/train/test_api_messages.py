"""fit says what the command line says: close names for an unknown setting, the data's own
name for NaN, and $PPL_VAE_NUM_THREADS; a model function is refused with what fit takes."""
import pytest
import torch
from pyro.infer import TraceMeanField_ELBO
from test_engine import FAST, small_vae

from ppl_vae import fit


def test_an_unknown_training_setting_gets_the_command_lines_suggestion(data):
    with pytest.raises(TypeError, match=r"^unknown training setting 'learning_rate'; did you mean 'lr'\?$"):
        fit(small_vae(), TraceMeanField_ELBO(), data, learning_rate=1e-3, steps=1)
    with pytest.raises(TypeError, match=r"^unknown training setting 'colour'; valid: steps, batch_size, lr,"):
        fit(small_vae(), TraceMeanField_ELBO(), data, colour="red", steps=1)


@pytest.mark.parametrize(
    "data, named",
    [({"x": torch.tensor([[float("nan")] * 8] * 4)}, r"^data\['x'\] contains NaN or inf values$"),
     ({"labelled": {"x": torch.tensor([[float("inf")] * 8] * 4)}}, r"^data\['labelled'\]\['x'\] contains NaN or inf values$"),
     ({"x": torch.full((4, 8), 2.0)}, r"^binarize: data\['x'\] must hold grey levels in \[0, 1\]")],
)
def test_fit_names_bad_data_as_it_was_given(data, named):
    with pytest.raises(ValueError, match=named):
        fit(small_vae(), TraceMeanField_ELBO(), data, steps=1, binarize=("x",), **FAST)


def test_fit_trains_with_the_threads_it_is_given_before_ppl_vae_num_threads(data, monkeypatch):
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        monkeypatch.setenv("PPL_VAE_NUM_THREADS", "3")
        fit(small_vae(), TraceMeanField_ELBO(), data, steps=1, threads=2, **FAST)
        assert torch.get_num_threads() == 2
        with pytest.raises(ValueError, match="^threads must be a positive integer"):
            fit(small_vae(), TraceMeanField_ELBO(), data, steps=1, threads=0, **FAST)
    finally:
        torch.set_num_threads(threads)


def test_fit_trains_with_the_threads_of_ppl_vae_num_threads(data, monkeypatch):
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        monkeypatch.setenv("PPL_VAE_NUM_THREADS", "2")
        fit(small_vae(), TraceMeanField_ELBO(), data, steps=1, **FAST)
        assert torch.get_num_threads() == 2
        monkeypatch.setenv("PPL_VAE_NUM_THREADS", "many")
        with pytest.raises(ValueError, match="^PPL_VAE_NUM_THREADS must be a positive integer"):
            fit(small_vae(), TraceMeanField_ELBO(), data, steps=1, **FAST)
    finally:
        torch.set_num_threads(threads)


def test_a_pyro_model_function_without_its_guide_is_refused_with_what_fit_takes(data):
    def model(x):
        pass

    with pytest.raises(TypeError, match=r"^model must have model\(\) and guide\(\) methods .* an nn.Module of yours .*, "
                                        r"or be a Pyro model callable given with its guide \(guide=\); got function 'model', "
                                        r"which has no model\(\) method$"):
        fit(model, TraceMeanField_ELBO(), data, steps=1, **FAST)


def test_an_object_with_model_and_guide_methods_that_is_not_a_module_is_refused(data):
    class Plain:
        def model(self, x):
            pass

        def guide(self, x):
            pass

    with pytest.raises(TypeError, match=r"^model must be an nn.Module whose parameters fit trains, got Plain$"):
        fit(Plain(), TraceMeanField_ELBO(), data, steps=1, **FAST)
