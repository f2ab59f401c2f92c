"""Alert rules: what is wrong with the server's memory right now, why, and what would fix it.

``evaluate(state)`` turns an :class:`~kvtop.model.state.AppState` into a tuple of
:class:`Alert`, most severe first; ``evaluate_state(state)`` returns the state with them (the
apply step calls it once per interval). It is pure: no I/O and no clock. "Now" is the latest
snapshot's ``taken_at``; a log event's time is the timestamp printed on its line.

Two kinds of rule:

* **State rules** hold while their condition holds and are re-derived from every state: a model
  spilled to system RAM, a KV cache type or flash attention that the running load did not get,
  a context above the training context, the server unreachable, the log source lost (a log that
  was being read; one never found is a status, not an alert), a GPU nearly full or shared with
  foreign processes, swap in use while a model is spilled. While the server is unreachable the
  per-model state rules are not evaluated (the rows are stale).
* **Event rules** read the server log: truncated or rejected prompts, clamped contexts, OOMs,
  failed loads, refused quantized V caches, runner crashes, evictions and reload churn. An event
  counts only while it is recent: its time is within ``Thresholds.event_window_s`` (reload
  churn: ``churn_window_s``) before now. A line printed without a timestamp (llama.cpp's own
  lines) takes the time of the nearest timestamped line before it; one with no timestamped line
  before it has no time and never counts, except the incidents of a loaded model's current
  load. Journald and Go-logger stamps carry no zone: they are read in ``naive_tz`` (UTC unless
  the caller passes the server's zone). An event of a load that a newer load of the same
  weights has replaced does not count either: a model that reloaded fine after an OOM is not
  still out of memory.

Each alert has a stable ``key`` (kind and model) so that ``since`` survives from one evaluation
to the next: pass the previous result as ``previous``. Without one, ``since`` is the snapshot's
time (state rules) or the first recent event's time (event rules).

Fixes are computed, not suggested from a list (:mod:`.spill`).

The package, one module per concern:

* :mod:`.types`: :class:`Alert`, :class:`Fix`, :data:`KINDS`, :class:`Thresholds` (imports no
  state: ``model.state`` holds these as data).
* :mod:`.context`: the evaluation context, built once per evaluation.
* :mod:`.server`, :mod:`.spill`, :mod:`.loadstate`, :mod:`.logevents`, :mod:`.gpus`: the rules.
* :mod:`.engine`: :func:`evaluate`, :func:`evaluate_state`, :func:`alert_json`, :func:`exit_code`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvtop.model.alerts.types import DEFAULT_THRESHOLDS, KINDS, Alert, Fix, Severity, Thresholds

if TYPE_CHECKING:
    from kvtop.model.alerts.engine import alert_json, evaluate, evaluate_state, exit_code

__all__ = [
    "DEFAULT_THRESHOLDS",
    "KINDS",
    "Alert",
    "Fix",
    "Severity",
    "Thresholds",
    "alert_json",
    "evaluate",
    "evaluate_state",
    "exit_code",
]

_ENGINE_NAMES = frozenset({"alert_json", "evaluate", "evaluate_state", "exit_code"})


def __getattr__(name: str) -> Any:
    """The evaluation functions, imported from :mod:`.engine` on first use: ``model.state`` imports
    this package for its data types (:mod:`.types`), and loading the state must not load the rules
    that read it."""
    if name in _ENGINE_NAMES:
        from kvtop.model.alerts import engine

        value = getattr(engine, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
