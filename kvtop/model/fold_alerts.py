"""One message folded into a server's state, with its alerts evaluated (``fold_*_with_alerts``).

``kvtop.model.state`` folds messages into the state (``fold_*``: pure data, no alert
evaluation); ``kvtop.model.alerts`` evaluates the alerts of a state. This module joins them for
tests and tools that take one message at a time. Every face (the dashboard, ``--once``,
``--check``, ``--stream``, the exporter) goes through the engine instead, which folds every
message of a step and evaluates once (``kvtop.engine.Engine.apply_step``, with :func:`with_alerts`).
So state never imports the alert rules, and the rules read the state.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvtop.logparse.events import LogEvent
from kvtop.model.alerts import evaluate_state
from kvtop.model.gpu_snapshots import GpuSnapshot, ProcSnapshot
from kvtop.model.slot_snapshots import SlotsSnapshot
from kvtop.model.snapshots import OllamaSnapshot
from kvtop.model.state import fold, fold_gpu, fold_log_events, fold_procs, fold_slots, runner_facts
from kvtop.model.views import AppState

__all__ = [
    "fold_with_alerts",
    "fold_gpu_with_alerts",
    "fold_log_with_alerts",
    "fold_procs_with_alerts",
    "fold_slots_with_alerts",
    "with_alerts",
]


def with_alerts(state: AppState) -> AppState:
    """The state with its alerts re-evaluated: ``kvtop.model.alerts.evaluate_state`` (``since``
    carried over from the previous ones; the same object when they did not change)."""
    return evaluate_state(state)


def fold_with_alerts(state: AppState, snap: OllamaSnapshot) -> AppState:
    """Return the state after ``snap`` (``fold``) with its alerts evaluated."""
    return with_alerts(fold(state, snap))


def fold_procs_with_alerts(state: AppState, procs: ProcSnapshot) -> AppState:
    """Return the state after a process sample alone (``fold_procs``), alerts evaluated when the
    runners or environments changed."""
    if runner_facts(procs) == runner_facts(state.procs):
        return fold_procs(state, procs)
    return with_alerts(fold_procs(state, procs))


def fold_gpu_with_alerts(state: AppState, gpu: GpuSnapshot, procs: ProcSnapshot) -> AppState:
    """Return the state after one GPU + process sample (``fold_gpu``) with its alerts evaluated."""
    return with_alerts(fold_gpu(state, gpu, procs))


def fold_log_with_alerts(state: AppState, events: Sequence[LogEvent], **batch: Any) -> AppState:
    """Return the state after one batch of parsed log events (``fold_log_events``) with its
    alerts evaluated."""
    return with_alerts(fold_log_events(state, events, **batch))


def fold_slots_with_alerts(state: AppState, snap: SlotsSnapshot) -> AppState:
    """Return the state after one ``/slots`` round (``fold_slots``); the alerts are evaluated
    when a row's slots or context changed (the KV estimate covers another slot count: fixes change)."""
    new = fold_slots(state, snap)
    if any(a.parallel != b.parallel or a.context != b.context for a, b in zip(new.models, state.models, strict=False)):
        return with_alerts(new)
    return new
