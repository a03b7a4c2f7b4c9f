"""Run a snippet in a child process whose address space may grow by only a little past what
its imports took, so that a reader that allocates what a hostile header declares fails there
(MemoryError) instead of exhausting the machine."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

HEADROOM = 768 * 2**20
REPOSITORY = Path(__file__).resolve().parents[2]

_PRELUDE = """
import resource
{imports}
size = int(next(line for line in open("/proc/self/status") if line.startswith("VmSize")).split()[1]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (size + {headroom}, size + {headroom}))
"""


def run_with_little_memory(imports: str, code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Import ``imports`` freely, then run ``code`` with :data:`HEADROOM` more address space;
    returns the finished process (its stdout and stderr as text)."""
    script = _PRELUDE.format(imports=imports, headroom=HEADROOM) + textwrap.dedent(code)
    environment = {**os.environ, "PYTHONPATH": str(REPOSITORY), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout, env=environment, check=False
    )
