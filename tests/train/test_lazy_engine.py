"""``ppl_vae.train`` gives TrainConfig without loading the engine, and the engine's names on
first use (``fit`` the function, not the module of that name)."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_train_config_loads_no_engine_and_fit_is_the_function():
    script = (
        "import sys\n"
        "import ppl_vae.train as train\n"
        "config = train.TrainConfig(steps=3)\n"
        "print(sorted(m for m in ('torch', 'pyro', 'lightning') if m in sys.modules))\n"
        "from ppl_vae.train import fit, NonFiniteLossError\n"
        "import ppl_vae\n"
        "print(callable(fit), train.fit is fit is ppl_vae.fit, issubclass(NonFiniteLossError, FloatingPointError))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["[]", "True True True"]


def test_fit_stays_the_function_when_its_module_is_imported_first():
    script = (
        "import ppl_vae.train.fitting\n"
        "import ppl_vae, ppl_vae.train\n"
        "print(callable(ppl_vae.fit), ppl_vae.train.fit is ppl_vae.fit is ppl_vae.train.fitting.fit)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[0] == "True True"
