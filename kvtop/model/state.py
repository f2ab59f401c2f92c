"""Application state and the pure folds of every message into it.

``fold(state, snapshot)`` is pure: the same inputs give an equal ``AppState``, so an
unchanged poll repaints nothing. Everything the dashboard shows about a model is derived here
into a ``ModelView`` whose every number carries its source (``Known``). The view types
(``AppState``, ``ModelView``, ``Memory``) are defined in ``model.views``.

This module folds each message into the state; one model's row is derived in ``model.model_row``,
the table's order and filter are ``model.view_order``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import tzinfo
from typing import Any

from kvtop.logparse.events import LogEvent
from kvtop.model.alerts.types import Thresholds
from kvtop.model.gpu_snapshots import GpuSnapshot, ProcSnapshot, SystemMemory
from kvtop.model import ladder
from kvtop.model.logstate import LogState, fold_events
from kvtop.model.slot_snapshots import DecodeRate, SlotsSnapshot
from kvtop.model.slots import decode_rates, runners_by_pid, slot_use
from kvtop.model.snapshots import OllamaSnapshot
from kvtop.model.model_row import RowMemo
from kvtop.model.views import AppState, ModelView


def initial_state(host_url: str, alert_settings: Mapping[str, Any], naive_tz: tzinfo) -> tuple[AppState, list[str]]:
    """The state before the first poll, with the configured alert thresholds.

    Args:
        host_url: The server watched.
        alert_settings: The ``[alerts]`` table of ``config.toml``.
        naive_tz: The zone of log timestamps that carry none (the local one for a local log).

    Returns:
        The state and one warning per unusable threshold (its default is kept).
    """
    thresholds, warnings = Thresholds.from_mapping(alert_settings)
    return AppState(host_url=host_url, thresholds=thresholds, naive_tz=naive_tz), warnings


# Each ``fold_*`` is one message folded into the state, alerts left as they were: the engine
# (``kvtop.engine.Engine.apply_step``, behind every face) folds every message of a step, then
# evaluates the alerts once. ``kvtop.model.fold_alerts`` has each fold with the alerts evaluated, for
# tests and tools that take one message at a time: state holds data, evaluation reads it.


def fold(state: AppState, snap: OllamaSnapshot) -> AppState:
    """The state after ``snap``, alerts not re-evaluated; failed polls keep the last known models
    (marked stale)."""
    if not snap.reachable:
        return dataclasses.replace(state, ollama=snap, failures=state.failures + 1)
    models = derive_models(snap, state.log, state.procs, state.slots, state.slot_rates, state.models)
    latencies = (
        state.latencies_s if snap.latency_s is None else (state.latencies_s + (snap.latency_s,))[-LATENCY_WINDOW:]
    )
    return dataclasses.replace(
        state,
        ollama=snap,
        last_ok=snap,
        models=models,
        failures=0,
        blob_names=_remember_names(state.blob_names, models),
        latencies_s=latencies,
        latency_s=_steady_latency(state.latency_s, latencies),
    )


BLOB_NAMES_KEPT = 256

LATENCY_WINDOW = 9
"""Answered polls the header's latency is the median of (``AppState.latency_s``)."""

LATENCY_STEADY = (0.25, 0.002)
"""The shown latency follows the median when it moves by more than this fraction of the shown
figure and this many seconds."""

RAM_STEADY_FRACTION = 0.01
"""A RAM (or swap) figure that moved by less than this fraction of its total keeps the previous
sample's (an exact, recent measurement) on screen: the GPU line does not repaint every second
for noise of a few megabytes."""


def _steady_latency(shown: float | None, latencies: tuple[float, ...]) -> float | None:
    if not latencies:
        return shown
    median = sorted(latencies)[len(latencies) // 2]
    if shown is None or abs(median - shown) > max(LATENCY_STEADY[0] * shown, LATENCY_STEADY[1]):
        return median
    return shown


def _steady_system(old: SystemMemory | None, new: SystemMemory | None) -> SystemMemory | None:
    """``old`` when ``new`` differs from it only by less than ``RAM_STEADY_FRACTION`` of the totals."""
    if old is None or new is None or old == new:
        return new
    if old.ram_total_bytes != new.ram_total_bytes or old.swap_total_bytes != new.swap_total_bytes:
        return new
    for total, a, b in (
        (new.ram_total_bytes, old.ram_in_use_bytes, new.ram_in_use_bytes),
        (new.swap_total_bytes, old.swap_used_bytes, new.swap_used_bytes),
    ):
        if a == b:
            continue
        if not total or a is None or b is None or abs(a - b) >= RAM_STEADY_FRACTION * total:
            return new
    return old


def _remember_names(known: Mapping[str, str], models: Sequence[ModelView]) -> Mapping[str, str]:
    """``known`` with the blobs of ``models`` named (the same object when nothing is new)."""
    new = {m.model_blob: m.name for m in models if m.model_blob and known.get(m.model_blob) != m.name}
    if not new:
        return known
    merged = {b: n for b, n in known.items() if b not in new}
    merged.update(new)
    return dict(list(merged.items())[-BLOB_NAMES_KEPT:])


def derive_models(
    snap: OllamaSnapshot,
    log: LogState,
    procs: ProcSnapshot | None,
    slots: SlotsSnapshot | None,
    rates: Mapping[int, DecodeRate],
    previous: Sequence[ModelView] = (),
) -> tuple[ModelView, ...]:
    """Every row of ``snap`` through the source ladder, with its slots in use.

    A row whose inputs (``RowInputs``) equal those of its last derivation is not derived again:
    ``ROW_MEMO`` gives the same ``ModelView`` with only its time-dependent fields brought up to
    ``snap.taken_at``. A resulting row equal to the row at the same place in ``previous`` (the
    state's rows before) is that object, and when every row is, ``previous`` itself is returned:
    an unchanged poll keeps the rows' identity, so the caches keyed on it (the memory map) hold.
    The result equals a derivation from scratch (``model_view`` per row, then ``with_slot_use``).
    """
    index = ladder.RunnerIndex(procs, slots, snap.host_url)
    memo = ROW_MEMO
    views = tuple(memo.view(m, snap, log, index, rates) for m in snap.models)
    rows = with_slot_use(views, slots, log)
    for m, view, row in zip(snap.models, views, rows):
        if row is not view:
            memo.dressed(snap.host_url, m, view, row)
    return _keep_equal(rows, previous)


def _keep_equal(rows: tuple[ModelView, ...], previous: Sequence[ModelView]) -> tuple[ModelView, ...]:
    """``rows`` with each row equal to ``previous``'s at the same place replaced by that object;
    ``previous`` itself when every row is (same length)."""
    if not previous:
        return rows
    kept = (
        tuple(old if new is old or new == old else new for new, old in zip(rows, previous, strict=False))
        + rows[len(previous) :]
    )
    if len(kept) == len(previous) and all(a is b for a, b in zip(kept, previous)):
        return previous if isinstance(previous, tuple) else kept
    return kept


ROW_MEMO = RowMemo()
"""The rows' memo of this process (``derive_models``)."""


def runner_facts(procs: ProcSnapshot | None) -> object:
    """What the rows take from a process sample: runners' command lines and servers' environments."""
    if procs is None:
        return None
    return (procs.ok, procs.runners, tuple((s.pid, s.env) for s in procs.servers))


def fold_procs(state: AppState, procs: ProcSnapshot) -> AppState:
    """The state after a process sample alone, alerts not re-evaluated: for another server on
    this machine, whose runners, command lines and environment are readable here although this
    machine's GPU sample belongs to the first one (docs/reference.md "Several servers"). The same object
    when the sample equals the last one."""
    if runner_facts(procs) == runner_facts(state.procs):
        return state if procs == state.procs else dataclasses.replace(state, procs=procs)
    new = dataclasses.replace(state, procs=procs)
    if state.last_ok is not None:
        new = dataclasses.replace(
            new, models=derive_models(state.last_ok, state.log, procs, state.slots, state.slot_rates, state.models)
        )
    return new


def fold_gpu(state: AppState, gpu: GpuSnapshot, procs: ProcSnapshot) -> AppState:
    """The state after one GPU + process sample (joined with the models at render time), alerts
    not re-evaluated; the rows are derived again only when a runner's command line or a
    server's environment changed (the requested and service rungs). RAM and swap that moved by
    less than ``RAM_STEADY_FRACTION`` keep the previous sample's figures."""
    if state.gpu is not None:
        system = _steady_system(state.gpu.system, gpu.system)
        if system is not gpu.system:
            gpu = dataclasses.replace(gpu, system=system)
    new = dataclasses.replace(state, gpu=gpu, procs=procs)
    if state.last_ok is not None and runner_facts(procs) != runner_facts(state.procs):
        new = dataclasses.replace(
            new, models=derive_models(state.last_ok, state.log, procs, state.slots, state.slot_rates, state.models)
        )
    return new


def fold_log_events(state: AppState, events: Sequence[LogEvent], **batch: Any) -> AppState:
    """The state after one batch of parsed log events (``batch``: ``logstate.fold_events``
    keywords), alerts not re-evaluated; the model rows are re-derived when the loads changed."""
    log = fold_events(state.log, events, **batch)
    if state.last_ok is None:
        return dataclasses.replace(state, log=log)
    if log.loads is state.log.loads:  # per-request lines only: the slots may have changed
        models = with_slot_use(state.models, state.slots, log)
    else:
        models = derive_models(state.last_ok, log, state.procs, state.slots, state.slot_rates, state.models)
    return dataclasses.replace(state, log=log, models=models)


def _endpoint_facts(snap: SlotsSnapshot | None) -> object:
    """What the rows' figures (not their busy slots) take from a ``/slots`` round."""
    if snap is None:
        return None
    return tuple(
        (r.pid, r.props, r.error is None, len(r.slots), r.slots[0].n_ctx if r.slots else None) for r in snap.runners
    )


def fold_slots(state: AppState, snap: SlotsSnapshot) -> AppState:
    """The state after one ``/slots`` round, alerts not re-evaluated: busy / total slots and
    context fill re-derived, decode speed measured against the previous round
    (``decode_rates``), and the rows derived again when the runner rung changed (its ``/props``
    or slot count answered, or a new speed). The same object when nothing a widget shows changed."""
    rates = decode_rates(state.slots, snap, state.slot_rates)
    if state.last_ok is not None and (
        rates != state.slot_rates or _endpoint_facts(snap) != _endpoint_facts(state.slots)
    ):
        models = derive_models(state.last_ok, state.log, state.procs, snap, rates, state.models)
    else:
        models = with_slot_use(state.models, snap, state.log)
    if (
        models == state.models
        and rates == state.slot_rates
        and snap.runners == (state.slots.runners if state.slots is not None else ())
    ):
        return state  # nothing a widget shows changed (the round's time alone does not repaint)
    return dataclasses.replace(state, slots=snap, models=models, slot_rates=rates)


def with_slot_use(models: tuple[ModelView, ...], slots: SlotsSnapshot | None, log: LogState) -> tuple[ModelView, ...]:
    """The rows with their ``slots`` re-derived from the ``/slots`` round and the log's slot lines,
    and their runner's answer (``local.endpoints``: each slot's fill) taken from that round."""
    era_c = sum(1 for v in models if v.load is not None and v.load.era == "C")
    by_pid = {r.pid: r for r in slots.runners} if slots is not None else {}
    first_by_pid = runners_by_pid(slots)
    out = []
    for v in models:
        if v.local.process is not None and by_pid.get(v.local.process.pid, v.local.endpoints) is not v.local.endpoints:
            v = dataclasses.replace(v, local=dataclasses.replace(v.local, endpoints=by_pid[v.local.process.pid]))
        use = slot_use(v, slots, log.recent, log.loads, era_c, runners_by_pid=first_by_pid)
        out.append(v if use == v.slots else dataclasses.replace(v, slots=use))
    return tuple(out)
