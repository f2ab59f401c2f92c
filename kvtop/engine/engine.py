"""The engine every face drives: :class:`EngineCore` (staging, the apply step, the loop:
``kvtop.engine.core``) with the synchronous reads of ``kvtop.engine.once`` (one sample of
everything for ``--once``/``--check``/``--stream``; one round of the server view).

The split keeps each module to one idea and the import graph without a circle: ``once`` reads
through an ``EngineCore``, this module joins the two. Nothing here imports Textual or Rich.
"""

from __future__ import annotations

from kvtop.engine.core import EngineCore
from kvtop.engine.once import sample_everything, sample_server_info
from kvtop.model.views import AppState

__all__ = ["Engine"]


class Engine(EngineCore):
    """Each server's state, kept by one apply path whoever drives it (see :class:`EngineCore`)."""

    async def step(self, *, backlog: bool = False) -> list[AppState]:
        """One sample of everything, applied in one apply step; each server's state, in order
        (``--once``, ``--check``, each line of ``--stream``: :func:`kvtop.engine.once.sample_everything`)."""
        return await sample_everything(self, backlog=backlog)

    async def sample_server_info(self, host: str, *, wait_s: float | None = None) -> None:
        """One round of the server view (``i``) for ``host``, staged for its next apply step
        (health and pulled models: :func:`kvtop.engine.once.sample_server_info`)."""
        await sample_server_info(self, host, wait_s=wait_s)
