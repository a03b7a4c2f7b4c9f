"""Progress bars of the long metric loops (tqdm on stderr, shown only on a terminal)."""
from __future__ import annotations

from tqdm import tqdm


def progress_bar(total: int, description: str, enabled: bool) -> tqdm:
    """A tqdm bar of ``total`` steps, written to stderr and cleared when closed.

    Shown only when ``enabled`` and stderr is a terminal (tqdm's ``disable=None``); otherwise
    the bar does nothing (its ``update`` still works).
    """
    return tqdm(total=total, desc=description, disable=None if enabled else True, leave=False)
