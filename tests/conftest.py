"""Test-wide settings: one torch thread (CI machines have 2 cores), Pyro validation on; a
child process with little memory for the tests of readers that must not allocate what a
hostile file declares."""
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pyro
import pytest
import torch

torch.set_num_threads(int(os.environ.get("PPL_VAE_TEST_THREADS", "1")))


@pytest.fixture(autouse=True)
def _fresh_pyro_state():
    """Each test starts with an empty param store, validation on and a fixed seed."""
    pyro.clear_param_store()
    pyro.enable_validation(True)
    pyro.set_rng_seed(0)
    yield
    pyro.clear_param_store()


HEADROOM = 768 * 2**20
REPOSITORY = Path(__file__).resolve().parents[1]

_PRELUDE = """
import resource
{imports}
size = int(next(line for line in open("/proc/self/status") if line.startswith("VmSize")).split()[1]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (size + {headroom}, size + {headroom}))
"""


def _run_with_little_memory(imports: str, code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Import ``imports`` freely, then run ``code`` with :data:`HEADROOM` more address space;
    returns the finished process (its stdout and stderr as text)."""
    script = _PRELUDE.format(imports=imports, headroom=HEADROOM) + textwrap.dedent(code)
    environment = {**os.environ, "PYTHONPATH": str(REPOSITORY), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout, env=environment, check=False
    )


@pytest.fixture
def run_with_little_memory() -> Callable[..., subprocess.CompletedProcess]:
    """``run(imports, code)``: run ``code`` in a child process whose address space may grow by
    only :data:`HEADROOM` past what ``imports`` took (a reader that allocates what a hostile
    header declares fails there with MemoryError instead of exhausting the machine)."""
    return _run_with_little_memory
