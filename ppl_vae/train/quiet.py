"""Lightning's chatter kept out of :func:`~ppl_vae.fit`'s output, by Lightning's own switches and
filters scoped to the call."""
from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

from lightning.pytorch.utilities import disable_possible_user_warnings

__all__ = ["quiet_lightning"]

#: The logger of Lightning's rank-zero messages (devices, advertisements, "`Trainer.fit` stopped").
_RANK_ZERO_LOG = logging.getLogger("lightning.pytorch.utilities.rank_zero")


class _BelowWarning(logging.Filter):
    """Drops the records below WARNING."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING


@contextmanager
def quiet_lightning() -> Iterator[None]:
    """While the block runs: Lightning's rank-zero messages below WARNING dropped (by a filter
    on its logger, removed afterwards, so the logger's level, which the user may set meanwhile,
    is never touched), its ``PossibleUserWarning`` s turned off (advice that does not apply:
    the engine indexes tensors on the device, without DataLoader workers), and torch's
    deprecation of ``LeafSpec``, which Lightning's pytree helper constructs, ignored by
    category and message. Warnings are Python's own scoped ``catch_warnings``."""
    chatter = _BelowWarning()
    _RANK_ZERO_LOG.addFilter(chatter)
    try:
        with warnings.catch_warnings():
            disable_possible_user_warnings()
            warnings.filterwarnings(
                "ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated", category=FutureWarning
            )
            yield
    finally:
        _RANK_ZERO_LOG.removeFilter(chatter)
