"""The headless engine every face shares (``ARCHITECTURE.md``): sources built once, one apply step.

- :mod:`kvtop.engine.sources`: :func:`build_sources`, the one factory of a run's sources.
- :mod:`kvtop.engine.logfeed`: :class:`LogFeed`, the one log-batch parser loop.
- :mod:`kvtop.engine.fold`: the staged messages and :func:`fold_pending`.
- :mod:`kvtop.engine.core`: :class:`EngineCore` (staging, the apply step, ``run``, ``subscribe``).
- :mod:`kvtop.engine.steps`: :class:`Notice`, :class:`Step`, :class:`Poll` and the apply step's timing constants.
- :mod:`kvtop.engine.engine`: :class:`Engine`, the core with ``step`` and ``sample_server_info``.
- :mod:`kvtop.engine.once`: what ``Engine.step`` and ``Engine.sample_server_info`` read (one sample of
  everything; one round of the server view).

asyncio only: nothing here imports Textual or Rich (``tests/unit/test_layering.py``).
"""

from kvtop.engine.engine import Engine
from kvtop.engine.fold import LogRun, Pending, fold_pending
from kvtop.engine.logfeed import LogFeed
from kvtop.engine.sources import EngineSources, build_sources, machine_sources, ollama_client
from kvtop.engine.steps import APPLY_SETTLE_S, LOG_APPLY_GAP_INTERVALS, REPLAY_PENDING_MAX, Notice, Poll, Step

__all__ = [
    "APPLY_SETTLE_S",
    "LOG_APPLY_GAP_INTERVALS",
    "REPLAY_PENDING_MAX",
    "Engine",
    "EngineSources",
    "LogFeed",
    "LogRun",
    "Notice",
    "Pending",
    "Poll",
    "Step",
    "build_sources",
    "fold_pending",
    "machine_sources",
    "ollama_client",
]
