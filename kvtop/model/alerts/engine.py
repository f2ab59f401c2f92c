"""One evaluation: every rule over one context, de-duplicated by key, ``since`` carried over,
most severe first; and the outputs (``--once --json``, ``--check``'s exit status)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone, tzinfo
from typing import TYPE_CHECKING, Any

from kvtop.model.alerts import context
from kvtop.model.alerts.current import split_current
from kvtop.model.alerts.gpus import gpu_alerts
from kvtop.model.alerts.loadstate import context_over_training, load_alerts, runner_over_training_alerts
from kvtop.model.alerts.logevents import (
    churn_alerts,
    clamp_alerts,
    incident_alerts,
    rejection_alerts,
    truncation_alerts,
)
from kvtop.model.alerts.queue import queue_alerts
from kvtop.model.alerts.server import server_alerts
from kvtop.model.alerts.spill import spill
from kvtop.model.alerts.types import DEFAULT_THRESHOLDS, KIND_RANK, SEVERITY_RANK, Alert, Thresholds
from kvtop.model.gpu_snapshots import ServiceEnv
from kvtop.model.ladder import setting_in_force

if TYPE_CHECKING:  # annotations only: the rules read the state, the state never imports the rules
    from kvtop.model.views import AppState, ModelView

__all__ = ["alert_json", "evaluate", "evaluate_state", "exit_code"]


def evaluate(
    state: AppState,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    previous: Sequence[Alert] = (),
    *,
    naive_tz: tzinfo = timezone.utc,
) -> tuple[Alert, ...]:
    """Every alert the state raises, most severe first.

    Pure: the same state gives the same alerts. The context is built once (:func:`context.build`)
    and every rule reads it, so the cost is linear in the models, loads and log events.

    Args:
        state: The application state (snapshots, derived model rows, the log so far).
        thresholds: Alert thresholds (:meth:`Thresholds.from_mapping`).
        previous: The previous result: an alert with the same ``key`` keeps its ``since``.
        naive_tz: The zone of log timestamps printed without one (journald short stamps, Go's
            standard logger). The app passes the server's local zone when it reads a local log.

    Returns:
        Alerts ordered by severity, then by kind (:data:`KINDS` order), model and key; at most
        one alert per key.
    """
    ctx = context.build(state, thresholds, naive_tz)
    found: list[Alert] = []
    found.extend(server_alerts(ctx))
    current: dict[int, ModelView] = {}
    if ctx.live:
        for view in ctx.views:
            if view.load is not None:
                current[id(view.load)] = view
            for rule in (spill, context_over_training):
                alert = rule(ctx, view)
                if alert is not None:
                    found.append(alert)
    found.extend(load_alerts(ctx, current))
    found.extend(truncation_alerts(ctx))
    found.extend(rejection_alerts(ctx))
    found.extend(clamp_alerts(ctx))
    found.extend(runner_over_training_alerts(ctx, current))
    found.extend(incident_alerts(ctx, current))
    found.extend(churn_alerts(ctx))
    found.extend(gpu_alerts(ctx))
    found.extend(queue_alerts(ctx))

    env = ctx.service_env()
    before = {a.key: a for a in previous}
    out: dict[str, Alert] = {}
    for a in found:
        if a.key in out:
            continue  # the first rule to claim a key wins (state rules run before event rules)
        if env is not None and a.fixes:
            kept = tuple(f for f in a.fixes if not _in_force(env, f.action))
            if kept != a.fixes:
                a = dataclasses.replace(a, fixes=kept)
        prev = before.get(a.key)
        if prev is not None and prev.since is not None:
            a = dataclasses.replace(a, since=prev.since)
        out[a.key] = a
    return tuple(sorted(out.values(), key=_order))


def evaluate_state(state: AppState) -> AppState:
    """The state with its alerts evaluated: one evaluation of ``state`` with its own thresholds
    and zone, ``since`` carried over from ``state.alerts``.

    Args:
        state: The state after an apply step (its ``alerts`` are the previous evaluation's).

    Returns:
        ``state`` itself when the alerts did not change (so nothing repaints), else a copy with
        the new alerts: those true now in ``alerts``, those about a model no longer loaded in
        ``past_alerts`` (:func:`kvtop.model.alerts.current.split_current`).
    """
    found = evaluate(state, state.thresholds, state.alerts + state.past_alerts, naive_tz=state.naive_tz)
    loaded = {m.name for m in state.models} if state.reachable else None
    alerts, past = split_current(found, loaded)
    if alerts == state.alerts and past == state.past_alerts:
        return state
    return dataclasses.replace(state, alerts=alerts, past_alerts=past)


_SETTING_RE = re.compile(r"(OLLAMA_[A-Z_]+)=(\S+)")


def _in_force(env: ServiceEnv, action: str) -> bool:
    """True when a fix's action is only a setting (``OLLAMA_X=v``) that the server already has:
    a fix never asks for what is already set (the source ladder's service rung)."""
    m = _SETTING_RE.fullmatch(action.strip())
    return m is not None and setting_in_force(env, m.group(1), m.group(2))


def _order(a: Alert) -> tuple[int, int, str, str]:
    return (SEVERITY_RANK.get(a.severity, 3), KIND_RANK.get(a.kind, len(KIND_RANK)), a.model or "", a.key)


def alert_json(a: Alert) -> dict[str, Any]:
    """One alert as JSON-ready data: ``{kind, severity, model, since, message, fixes}``.

    ``since`` is ISO 8601 in UTC (``2026-11-18T09:46:40+00:00``) or null; each fix is
    ``{action, detail, fits, cost}`` with ``fits`` true, false or null.
    """
    since = None
    if a.since is not None:
        try:
            since = datetime.fromtimestamp(a.since, tz=timezone.utc).isoformat()
        except (OverflowError, OSError, ValueError):
            since = None
    return {
        "kind": a.kind,
        "severity": a.severity,
        "model": a.model,
        "since": since,
        "message": a.message,
        "fixes": [{"action": f.action, "detail": f.detail, "fits": f.fits, "cost": f.cost} for f in a.fixes],
    }


def exit_code(alerts: Iterable[Alert], reachable: bool | None) -> int:
    """The ``kvtop --check`` exit status.

    Args:
        alerts: The alerts of the state checked.
        reachable: Whether the server answered (None: no poll made, counted as unreachable).

    Returns:
        2 when any alert is critical or the server is not reachable, 1 when any is a warning,
        else 0 (``info`` alerts do not count).
    """
    severities = {a.severity for a in alerts}
    if reachable is not True or "critical" in severities:
        return 2
    return 1 if "warning" in severities else 0
