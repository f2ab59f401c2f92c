"""The server view's state: health samples of ``ollama serve`` and the read of the pulled models.

Frozen data only, below the model's views (``AppState.server``, ``model.views``); filled by
``sources.health.HealthSource`` and ``sources.pulled.PulledSource``. The folds and the JSON are in
``model.server_view``. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from kvtop.model.snapshots import PulledSnapshot


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
