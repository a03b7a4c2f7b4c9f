"""Process settings that Lightning changes on import and that cost time where they do nothing.

Importing Lightning sets ``PYTORCH_NVML_BASED_CUDA_CHECK=1`` for the whole process, so that
``torch.cuda.is_available()`` asks NVML (which does not initialise CUDA, and so keeps forked
workers usable) instead of the CUDA runtime. torch's optimisers call ``is_available()`` on
every ``step()``. Where NVML cannot be loaded (a CPU machine with a CUDA build of torch),
torch tries to load it again on every call, fails, and falls back to the CUDA runtime's
device count anyway: the setting buys nothing there and costs a failed ``dlopen`` per
optimiser step (about 0.1 ms on this project's CPU machine, ``docs/performance.md``).
"""
from __future__ import annotations

import ctypes
import os

NVML_CHECK_VARIABLE = "PYTORCH_NVML_BASED_CUDA_CHECK"
NVML_LIBRARY = "libnvidia-ml.so.1"


def nvml_loads() -> bool:
    """Whether the NVIDIA management library can be loaded (the library torch's check loads)."""
    try:
        ctypes.CDLL(NVML_LIBRARY)
    except OSError:
        return False
    return True


def drop_nvml_check_without_nvml() -> bool:
    """Unset ``PYTORCH_NVML_BASED_CUDA_CHECK`` when it is ``"1"`` and NVML cannot be loaded
    (module docstring); returns whether it was unset. ``torch.cuda.is_available()`` gives the
    same answer before and after: without NVML torch's NVML-based check falls back to the
    CUDA runtime, which is what it asks without the variable."""
    if os.environ.get(NVML_CHECK_VARIABLE) != "1" or nvml_loads():
        return False
    del os.environ[NVML_CHECK_VARIABLE]
    return True
