"""What one apply step folds: the staged messages of a server, in arrival order.

A staged message is a function ``AppState -> AppState`` (a poll, a GPU sample, a ``/slots``
round, a health read) or a :class:`LogRun` (consecutive log batches merged as they arrive, so the
log's loads are grouped once for all of them). :func:`fold_pending` folds them; the alerts are
evaluated once afterwards by the engine's apply step, never here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from kvtop.logparse.events import LogEvent
from kvtop.model.queue import requeue
from kvtop.model.state import fold_log_events
from kvtop.model.views import AppState

__all__ = ["LogRun", "Pending", "fold_pending"]


@dataclasses.dataclass(slots=True)
class LogRun:
    """Consecutive log batches waiting for the next apply step (folded as one batch)."""

    events: list[LogEvent]
    source: str | None = None
    status: str | None = None
    ok: bool = True
    lines: int = 0
    dropped_lines: int = 0
    raw_lines: list[str] = dataclasses.field(default_factory=list)

    def add(
        self,
        events: Sequence[LogEvent],
        *,
        source: str | None,
        status: str | None,
        ok: bool,
        lines: int,
        dropped_lines: int,
        raw_lines: Sequence[str],
    ) -> None:
        """Merge one more batch (the newest source and status win; counts add up)."""
        self.events.extend(events)
        self.source, self.status, self.ok = source, status, ok
        self.lines += lines
        self.dropped_lines += dropped_lines
        self.raw_lines.extend(raw_lines)

    def fold(self, state: AppState) -> AppState:
        return fold_log_events(
            state,
            self.events,
            source=self.source,
            status=self.status,
            ok=self.ok,
            lines=self.lines,
            dropped_lines=self.dropped_lines,
            raw_lines=self.raw_lines,
        )


Pending = Callable[[AppState], AppState] | LogRun
"""One staged message."""


def fold_pending(state: AppState, pending: Sequence[Pending]) -> AppState:
    """``state`` with the messages of one apply step folded in, in arrival order (consecutive
    log batches were merged into one :class:`LogRun` as they arrived); alerts not evaluated."""
    for item in pending:
        state = item.fold(state) if isinstance(item, LogRun) else item(state)
    return requeue(state)  # the queue's slots figures follow the models' slots folded in just now
