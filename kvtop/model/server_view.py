"""The server view (``i``): health of ``ollama serve`` and its runners, its limits and restarts,
next to the traffic (``model.traffic``) and the pre-flight (``model.preflight``).

The data (``ServerInfo`` and its parts, in ``model.server_health``) is filled by
``sources.health.HealthSource`` and ``sources.pulled.PulledSource``; ``fold_server`` keeps it in
the state and counts a changed ``ollama serve`` PID as a restart; ``state_preflight`` and
``server_json`` read a state. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from kvtop.model import plan
from kvtop.model.gpu import gpu_free_bytes
from kvtop.model.gpu_snapshots import ProcSnapshot, ServerProcess
from kvtop.model.known import Known
from kvtop.model.ladder import RunnerIndex
from kvtop.model.next_load import NextLoad
from kvtop.model.next_load_view import forecast_model, next_load_json
from kvtop.model.preflight import (
    PreflightRow,
    ServerDefaults,
    defaults_json,
    preflight,
    preflight_json,
    server_defaults,
)
from kvtop.model.server_health import ServerHealth, ServerInfo
from kvtop.model.snapshots import PulledSnapshot
from kvtop.model.traffic import traffic_json
from kvtop.model.views import AppState


PIDS_KEPT = 16


def fold_health(info: ServerInfo, health: ServerHealth) -> ServerInfo:
    """``info`` with a new health sample; a PID other than the last one seen counts a restart."""
    pids, changes = info.server_pids, info.pid_changes
    pid = health.tree.pid if health.tree is not None else None
    if pid is not None and (not pids or pids[-1] != pid):
        if pids:
            changes += 1
        pids = (pids + (pid,))[-PIDS_KEPT:]
    return dataclasses.replace(info, health=health, server_pids=pids, pid_changes=changes)


def fold_pulled(info: ServerInfo, pulled: PulledSnapshot) -> ServerInfo:
    """``info`` with a new read of the pulled models."""
    return dataclasses.replace(info, pulled=pulled)


def health_json(info: ServerInfo) -> dict[str, Any] | None:
    """``server.health`` of ``--once --json`` (docs/json.md), None without a sample."""
    h = info.health
    if h is None:
        return None
    t, c, r = h.tree, h.cgroup, h.restarts
    return {
        "pid": t.pid if t else None,
        "processes": t.processes if t else None,
        "cpu_percent": t.cpu_percent if t else None,
        "rss_bytes": t.rss_bytes if t else None,
        "started_at": t.started_at if t else None,
        "uptime_s": (h.taken_at - t.started_at) if t and t.started_at is not None else None,
        "runners": [{"pid": p, "rss_bytes": rss, "cpu_percent": cpu} for p, rss, cpu in t.runners] if t else [],
        "error": h.error,
        "restarts": {"count": r.count, "source": r.source, "error": r.error, "pid_changes_seen": info.pid_changes},
        "cgroup": None
        if c is None
        else {
            "path": c.path,
            "version": c.version,
            "memory_max_bytes": c.memory_max_bytes,
            "memory_current_bytes": c.memory_current_bytes,
            "cpu_max_cores": c.cpu_max_cores,
        },
        "settings": dict(h.env),
        "settings_source": h.env_source,
    }


def server_for(procs: ProcSnapshot | None, host_url: str) -> ServerProcess | None:
    """The ``ollama serve`` of ``host_url`` in ``procs``: the one whose ``OLLAMA_HOST`` says it
    listens on that port (``model.ladder.RunnerIndex``), else the only one; None when there is
    none, or several and none can be told apart."""
    if procs is None or not procs.servers:
        return None
    index = RunnerIndex(procs, None, host_url)
    if index.server is not None:
        return index.server
    return procs.servers[0] if len(procs.servers) == 1 else None


def state_preflight(state: AppState) -> tuple[ServerDefaults, tuple[PreflightRow, ...]]:
    """The defaults and the pre-flight rows of ``state``: the server's version, its environment
    (the service rung), the GPUs' total and free memory (the GPU sample: this machine's, so the
    local server's only) and the models loaded now (``/api/ps``)."""
    snap = state.last_ok
    version = snap.version if snap is not None else None
    server = server_for(state.procs, state.host_url)
    env = server.env.values if server is not None and server.env is not None else None
    health = state.server.health
    if env is None and health is not None and health.env_source is not None:
        env = health.env  # the same rung, read by the server view's health sample
    gpu = state.gpu
    total = None
    if (
        gpu is not None
        and gpu.ok
        and gpu.devices
        and all(d.error is None and d.memory_total_bytes for d in gpu.devices)
    ):
        total = sum(d.memory_total_bytes or 0 for d in gpu.devices)
    defaults = server_defaults(version, env, total)
    rows = preflight(
        state.server.pulled,
        defaults,
        free_bytes=gpu_free_bytes(gpu),
        loaded=snap.models if snap is not None else (),
        engine=plan.engine_for_version(version),
        views=state.models,
    )
    return defaults, rows


def server_json(state: AppState, now: Any = None) -> dict[str, Any]:
    """The ``server`` section of ``--once --json`` (docs/json.md): traffic from the log, health of
    the local ``ollama serve``, and the pre-flight of every pulled model. ``now``: the naive local
    time requests per minute count up to (None: the newest access line)."""
    defaults, rows = state_preflight(state)
    nexts = state_next_loads(state, rows)
    pulled = state.server.pulled
    return {
        "traffic": traffic_json(state.log.traffic, now) if state.log.source is not None else None,
        "health": health_json(state.server),
        "defaults": defaults_json(defaults),
        "preflight": [
            preflight_json(r) | {"next_load": next_load_json(n) if n is not None else None} for r, n in zip(rows, nexts)
        ],
        "pulled_error": pulled.error if pulled is not None else "not read",
    }


def fold_server(state: AppState, health: ServerHealth | None = None, pulled: PulledSnapshot | None = None) -> AppState:
    """``state`` with a health sample and/or a read of the pulled models (alerts unchanged)."""
    info = state.server
    if health is not None:
        info = fold_health(info, health)
    if pulled is not None:
        info = fold_pulled(info, pulled)
    return dataclasses.replace(state, server=info)


def state_next_load(
    state: Any, name: str, spec: plan.ModelSpec | None, num_ctx: Known[int] | None, free_bytes: int | None = None
) -> NextLoad | None:
    """The forecast of loading ``name`` now on the server of ``state`` (an ``AppState``): its version,
    its environment (the service rung, as the pre-flight reads it), the GPU sample (total, free and
    count: this machine's), ``/api/ps``, the weights blobs of ``/api/show`` and the models' busy slots
    (``ModelView.slots``). ``num_ctx``: a request's own (the what-if screen's); ``free_bytes``: the free
    GPU memory the face shows (default: the GPU sample's)."""
    snap = state.last_ok
    if snap is None:
        return None
    server = server_for(state.procs, state.host_url)
    env = server.env.values if server is not None and server.env is not None else None
    health = state.server.health
    if env is None and health is not None and health.env_source is not None:
        env = health.env
    gpu = state.gpu
    total = count = None
    if gpu is not None and gpu.ok and gpu.devices:
        count = len(gpu.devices)
        if all(d.error is None and d.memory_total_bytes for d in gpu.devices):
            total = sum(d.memory_total_bytes or 0 for d in gpu.devices)
    blobs = {m.name: s.model_blob for m in snap.models if (s := snap.shows.get(m.digest)) is not None and s.model_blob}
    busy: dict[str, Known[bool]] = {}
    for view in state.models:
        use = view.slots
        if use is not None and use.busy is not None and use.source is not None:
            busy[view.name] = Known(use.busy > 0, "runner" if use.source == "runner" else "estimated", use.note)
    own = next((m for m in snap.models if m.name == name), None)
    show = snap.shows.get(own.digest) if own is not None else None
    defaults = server_defaults(snap.version, env, total)
    view = next((v for v in state.models if v.name == name), None)
    if view is not None:  # loaded: the settings its runner shows are the server's
        kv_type = (view.kv_type.value or "").split("/")[0] or None
        fa = view.flash_attention.value
        defaults = dataclasses.replace(
            defaults,
            cache_type=Known(kv_type, view.kv_type.source, view.kv_type.note) if kv_type else defaults.cache_type,
            parallel=view.parallel if view.parallel.value else defaults.parallel,
            flash_attention=Known(fa != "disabled", view.flash_attention.source, view.flash_attention.note)
            if fa
            else defaults.flash_attention,
        )
    return forecast_model(
        name,
        spec,
        defaults,
        version=snap.version,
        env=env,
        loaded=snap.models,
        free_bytes=free_bytes if free_bytes is not None else gpu_free_bytes(gpu),
        gpu_count=count,
        now_s=snap.taken_at,
        show=show,
        blobs=blobs,
        busy=busy,
        num_ctx=num_ctx,
        engine=plan.engine_for_version(snap.version),
    )


def state_next_loads(state: AppState, rows: tuple[PreflightRow, ...]) -> tuple[NextLoad | None, ...]:
    """Per pre-flight row, what loading it now would do (:func:`state_next_load` with its ``/api/show``),
    None for a model whose ``/api/show`` was not read (or failed, or is a cloud model)."""
    pulled = state.server.pulled
    shows = pulled.shows if pulled is not None else {}
    out: list[NextLoad | None] = []
    for r in rows:
        show = shows.get(r.digest)
        if show is None or show.error or show.remote:
            out.append(None)
            continue
        spec = plan.model_spec(r.name, show.model_info, file_size=r.size_bytes)
        out.append(state_next_load(state, r.name, spec, None))
    return tuple(out)
