"""An alert's age as the dashboard says it (``3 min``), measured on the state's own clock.

The age is the state's newest sample time minus the alert's ``since``: never the wall clock, so a
replay (or a paused screen) draws the same text for the same state. Pure: no widget, no clock.
"""

from __future__ import annotations

from kvtop.model.alerts.types import Alert
from kvtop.model.views import AppState

__all__ = ["AGE_WIDEST", "age_text", "alert_age", "state_clock"]

AGE_WIDEST = "59 min"
"""The widest :func:`age_text` under 1,000 days (six cells): the alerts panel measures a heading
with it, so the rows it is given hold the heading whatever its age becomes."""


def state_clock(state: AppState) -> float | None:
    """The state's newest sample time in Unix seconds (its ``/api/ps`` poll, GPU, process,
    ``/slots`` and connections samples, whichever is latest); None before any sample."""
    times = [s.taken_at for s in (state.ollama, state.gpu, state.procs, state.slots, state.queue) if s is not None]
    return max(times) if times else None


def age_text(seconds: float) -> str:
    """A duration in its short form, truncated to the unit: ``<1 min`` under a minute, ``3 min``
    under an hour, ``2 h`` under two days, then ``3 d``. A negative duration (an alert stamped
    after the sample, by a clock ahead) reads ``<1 min``. Never in seconds: a text that changed
    every poll would repaint the alert bar, the alerts panel and the events pane every second
    (the idle benchmark measured 4× the CPU and 3.5 KB/s to the terminal at 80×24)."""
    s = int(max(0.0, seconds))
    if s < 60:
        return "<1 min"
    if s < 3600:
        return f"{s // 60} min"
    if s < 48 * 3600:
        return f"{s // 3600} h"
    return f"{s // 86400} d"


def alert_age(alert: Alert, now: float | None) -> str | None:
    """``alert``'s age at ``now`` (:func:`state_clock`) as :func:`age_text`; None when either time
    is not known."""
    if alert.since is None or now is None:
        return None
    return age_text(now - alert.since)
