"""What the engine hands out and the timing of its apply step: :class:`Notice` (a failure or a note
a face says once), :class:`Step` (what one apply step did) with its :class:`Poll` records, and
the constants that pace :class:`kvtop.engine.core.EngineCore` (``APPLY_SETTLE_S``,
``LOG_APPLY_GAP_INTERVALS``, ``QUEUE_EVERY_S``, ``REPLAY_PENDING_MAX``). Data only, no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from kvtop.logparse.events import LogEvent
from kvtop.model.snapshots import OllamaSnapshot
from kvtop.model.views import AppState

__all__ = ["APPLY_SETTLE_S", "LOG_APPLY_GAP_INTERVALS", "QUEUE_EVERY_S", "REPLAY_PENDING_MAX", "Notice", "Poll", "Step"]

APPLY_SETTLE_S = 0.05
"""A poll result waits this long for the other samples of its tick (the GPU sample and
``/slots`` start together with the local server's poll) so that one apply step takes them all."""
LOG_APPLY_GAP_INTERVALS = 1.5
"""While the servers are polled, log batches alone are applied at most every this many
intervals: the next poll's apply step normally takes them first (one apply per interval)."""
QUEUE_EVERY_S = 5.0
"""Seconds between two reads of the connections to the local API port (the queue): each read of
the kernel's socket tables costs about 5 ms of system time (``EngineCore._poll_connections``)."""
REPLAY_PENDING_MAX = 64
"""A replay: records a server may have waiting for the recording's next ``apply`` record; past
it they are applied anyway (a recording whose header promises apply records but holds none)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Notice:
    """Something a face must say once: a source that failed (``error``) or a note on what was read.

    Attributes:
        source: ``ollama``, ``gpu``, ``procs``, ``slots``, ``log``, ``health``, ``pulled``, ``apply``
            or ``recording``.
        host: The server it concerns, None for this machine's sources.
        text: One plain sentence, e.g. ``log parser error: ValueError: …``.
        error: False for a note (``--once``'s "read its newest 2,000 lines").
    """

    source: str
    host: str | None
    text: str
    error: bool = True


@dataclasses.dataclass(frozen=True, slots=True)
class Poll:
    """One server poll staged in a step, and how long it took."""

    snapshot: OllamaSnapshot
    duration_s: float | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Step:
    """What one apply step did.

    Attributes:
        number: ``Engine.apply_steps`` after it.
        states: Every server's state after the step (host → ``AppState``, in ``--host`` order).
        changed: The servers whose state object changed.
        previous: Their states before the step.
        polls: The polls staged in this step, by server.
        log_events: The log events folded in (the log's server), in log order.
    """

    number: int
    states: Mapping[str, AppState]
    changed: tuple[str, ...] = ()
    previous: Mapping[str, AppState] = dataclasses.field(default_factory=dict)
    polls: Mapping[str, tuple[Poll, ...]] = dataclasses.field(default_factory=dict)
    log_events: tuple[LogEvent, ...] = ()
