"""The server view's data (``i``): health of ``ollama serve`` and its runners, its limits and
restarts, next to the traffic (``model.traffic``) and the pre-flight (``model.preflight``).

The types are filled by ``sources.health.HealthSource`` and ``sources.pulled.PulledSource``;
``fold_server`` keeps them in the state and counts a changed ``ollama serve`` PID as a restart.
Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # model.state keeps a ServerInfo; preflight imports plan, which imports state
    from kvtop.model.gpu import ProcSnapshot, ServerProcess
    from kvtop.model.preflight import PreflightRow, PulledSnapshot, ServerDefaults
    from kvtop.model.state import AppState


@dataclass(frozen=True, slots=True)
class ProcessTree:
    """``ollama serve`` and every process under it (the runners).

    Attributes:
        pid: The server's PID.
        processes: Processes in the tree, the server included.
        cpu_percent: CPU use of the tree since the previous sample, percent of one core (psutil's
            ``cpu_percent``: 200 is two cores busy); None on the first sample of a process.
        rss_bytes: Resident memory of the tree (the runners' mapped weights included).
        started_at: The server's start, Unix seconds.
        runners: ``(pid, rss_bytes, cpu_percent)`` per process under the server.
    """

    pid: int
    processes: int
    cpu_percent: float | None
    rss_bytes: int | None
    started_at: float | None
    runners: tuple[tuple[int, int | None, float | None], ...] = ()


@dataclass(frozen=True, slots=True)
class CgroupLimits:
    """The memory and CPU limits of the server's cgroup (a container, or systemd's ``MemoryMax``).

    Attributes:
        path: The cgroup directory read (``/sys/fs/cgroup/system.slice/ollama.service``).
        version: 2 (unified) or 1.
        memory_max_bytes: ``memory.max`` (v1 ``memory.limit_in_bytes``), None when unlimited.
        memory_current_bytes: ``memory.current`` (v1 ``memory.usage_in_bytes``), None when unreadable.
        cpu_max_cores: ``cpu.max`` quota / period (v1 ``cfs_quota_us / cfs_period_us``), None when unlimited.
    """

    path: str
    version: int
    memory_max_bytes: int | None = None
    memory_current_bytes: int | None = None
    cpu_max_cores: float | None = None


@dataclass(frozen=True, slots=True)
class Restarts:
    """How often the service was restarted, and by whom it is counted.

    Attributes:
        count: The count, None when not known.
        source: ``systemd NRestarts (ollama.service)``, ``docker RestartCount (abc123)``.
        error: Why it is not known, None when it is.
    """

    count: int | None = None
    source: str | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ServerHealth:
    """One health sample of the server on this machine.

    Attributes:
        taken_at: Unix time.
        tree: The process tree, None when no ``ollama serve`` is visible.
        cgroup: Its limits, None when not readable (or not Linux).
        restarts: From systemd or docker (slow cadence).
        error: Why there is no tree, None when there is one.
        env: The server's settings (the service rung, secrets masked at the source), by name.
        env_source: Where they were read, None when not readable.
    """

    taken_at: float
    tree: ProcessTree | None = None
    cgroup: CgroupLimits | None = None
    restarts: Restarts = Restarts()
    error: str | None = None
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    env_source: str | None = None


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """The server view's state.

    Attributes:
        health: The newest health sample (None when the server is not on this machine).
        pulled: The newest read of the pulled models.
        server_pids: Every ``ollama serve`` PID seen, oldest first (at most ``PIDS_KEPT``).
        pid_changes: How often the PID changed while kvtop watched (a restart kvtop saw).
    """

    health: ServerHealth | None = None
    pulled: PulledSnapshot | None = None
    server_pids: tuple[int, ...] = ()
    pid_changes: int = 0


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
        "cgroup": None if c is None else {"path": c.path, "version": c.version, "memory_max_bytes": c.memory_max_bytes,
                                           "memory_current_bytes": c.memory_current_bytes,
                                           "cpu_max_cores": c.cpu_max_cores},
        "settings": dict(h.env),
        "settings_source": h.env_source,
    }


def server_for(procs: ProcSnapshot | None, host_url: str) -> ServerProcess | None:
    """The ``ollama serve`` of ``host_url`` in ``procs``: the one whose ``OLLAMA_HOST`` says it
    listens on that port (``model.ladder.RunnerIndex``), else the only one; None when there is
    none, or several and none can be told apart."""
    if procs is None or not procs.servers:
        return None
    from kvtop.model.ladder import RunnerIndex

    index = RunnerIndex(procs, None, host_url)
    if index.server is not None:
        return index.server
    return procs.servers[0] if len(procs.servers) == 1 else None


def state_preflight(state: AppState) -> tuple[ServerDefaults, tuple[PreflightRow, ...]]:
    """The defaults and the pre-flight rows of ``state``: the server's version, its environment
    (the service rung), the GPUs' total and free memory (the GPU sample: this machine's, so the
    local server's only) and the models loaded now (``/api/ps``)."""
    from kvtop.model import plan
    from kvtop.model.gpu import gpu_free_bytes
    from kvtop.model.preflight import preflight, server_defaults

    snap = state.last_ok
    version = snap.version if snap is not None else None
    server = server_for(state.procs, state.host_url)
    env = server.env.values if server is not None and server.env is not None else None
    health = state.server.health
    if env is None and health is not None and health.env_source is not None:
        env = health.env  # the same rung, read by the server view's health sample
    gpu = state.gpu
    total = None
    if gpu is not None and gpu.ok and gpu.devices and all(d.error is None and d.memory_total_bytes for d in gpu.devices):
        total = sum(d.memory_total_bytes or 0 for d in gpu.devices)
    defaults = server_defaults(version, env, total)
    rows = preflight(state.server.pulled, defaults, free_bytes=gpu_free_bytes(gpu),
                     loaded=snap.models if snap is not None else (), engine=plan.engine_for_version(version),
                     views=state.models)
    return defaults, rows


def server_json(state: AppState, now: Any = None) -> dict[str, Any]:
    """The ``server`` section of ``--once --json`` (docs/json.md): traffic from the log, health of
    the local ``ollama serve``, and the pre-flight of every pulled model. ``now``: the naive local
    time requests per minute count up to (None: the newest access line)."""
    from kvtop.model.preflight import defaults_json, preflight_json
    from kvtop.model.traffic import traffic_json

    defaults, rows = state_preflight(state)
    pulled = state.server.pulled
    return {
        "traffic": traffic_json(state.log.traffic, now) if state.log.source is not None else None,
        "health": health_json(state.server),
        "defaults": defaults_json(defaults),
        "preflight": [preflight_json(r) for r in rows],
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
