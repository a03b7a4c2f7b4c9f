"""read_training_metrics refuses a metrics.csv that is torn, repeated or out of order, naming the file."""
import pytest

from ppl_vae.train import read_training_metrics


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"step,elbo_loss\n5,1.0\n10,0.9", "last line is incomplete"),
        (b"step,elbo_loss,elbo_loss\n5,1.0,1.0\n", "names the column(s) ['elbo_loss'] more than once"),
        (b"step,elbo_loss\n10,1.0\n5,0.9\n", "step 5 does not follow step 10"),
        (b"step,elbo_loss\n5,1.0\n5,0.9\n", "step 5 does not follow step 5"),
        (b"step,elbo_loss\n5.5,1.0\n", "line 2 holds a cell that is not a number"),
        (b"step,elbo_loss\n5,one\n", "line 2 holds a cell that is not a number"),
        (b"step,elbo_loss\n5,1.0,2.0\n", "line 2 has 3 cells"),
        (b"step,elbo_loss\n5," + b"1" * 200_000 + b"\n", "is not a metrics table"),
        (b"step,elbo_loss\n5,\xff\n", "is not UTF-8"),
        (b"loss,step\n1.0,5\n", "does not start with 'step'"),
    ],
)
def test_a_metrics_table_that_cannot_be_trusted_is_refused_naming_the_file(tmp_path, content, message):
    (tmp_path / "metrics.csv").write_bytes(content)
    with pytest.raises(ValueError, match="metrics.csv") as refused:
        read_training_metrics(tmp_path)
    assert message in str(refused.value)


def test_a_metrics_csv_that_is_a_folder_is_named(tmp_path):
    (tmp_path / "metrics.csv").mkdir()
    with pytest.raises(ValueError, match="metrics.csv is not a file"):
        read_training_metrics(tmp_path)


def test_a_complete_table_reads_back(tmp_path):
    (tmp_path / "metrics.csv").write_text("step,elbo_loss,kl\n5,1.0,\n10,0.5,0.25\n")
    table = read_training_metrics(tmp_path)
    assert table["step"] == [5, 10] and table["elbo_loss"] == [1.0, 0.5] and table["kl"][1] == 0.25
