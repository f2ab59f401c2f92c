"""Health of the ``ollama serve`` on this machine: its process tree's CPU and memory, uptime,
restarts and cgroup limits (the server view, ``i``).

``HealthSource.sample(procs, host_url)`` takes the process sample ``sources.procs`` already made
(which ``ollama serve`` serves ``host_url``: ``model.ladder.RunnerIndex``), then reads with psutil
the server and every process under it (CPU since the previous sample, RSS, start time). Slow
facts are read at most every ``SLOW_EVERY_S``: the restart count — systemd's ``NRestarts``
(``systemctl show -p NRestarts --value UNIT``, the unit from ``/proc/PID/cgroup``) or docker's
``RestartCount`` (``docker inspect``) — and the cgroup limits (``memory.max``, ``memory.current``,
``cpu.max`` under ``/sys/fs/cgroup`` + the process's cgroup path; cgroup v1's
``memory.limit_in_bytes``, ``memory.usage_in_bytes``, ``cpu.cfs_quota_us``/``cpu.cfs_period_us``
as a fallback). A failure costs only its figure, with the reason. Nothing here imports Textual.
"""

from __future__ import annotations

import asyncio
import importlib
import re
import time
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType
from typing import Any

from kvtop.model.gpu_snapshots import ProcSnapshot
from kvtop.model.server_view import server_for
from kvtop.model.server_health import CgroupLimits, ProcessTree, Restarts, ServerHealth
from kvtop.sources.service_env import Runner, _run

TREE_WALK_EVERY_S = 10.0
"""The server's descendants are listed again (``children(recursive=True)`` reads every process's
parent) when the Ollama processes of the process sample changed, or at least this often; in
between the members already known are read (back off reading processes while nothing changes)."""

SLOW_EVERY_S = 30.0
"""Restarts and cgroup limits are read again at most this often (they change on a restart)."""

V1_UNLIMITED = 1 << 62
"""cgroup v1 writes "no limit" as a huge number (``PAGE_COUNTER_MAX`` × page size, ~2^63)."""

_UNIT = re.compile(r"/([^/]+\.service)$")
_DOCKER = re.compile(r"(?:docker-|/docker/)([0-9a-f]{12,64})")


def _int(text: str) -> int | None:
    try:
        return int(text.strip())
    except ValueError:
        return None


class HealthSource:
    """Samples the health of the local ``ollama serve``.

    Args:
        psutil_module: psutil (tests may pass a fake); imported on first use by default.
        proc_root: Where ``<pid>/cgroup`` is read.
        cgroup_root: The cgroup filesystem (``/sys/fs/cgroup``; tests: a temp dir).
        run: Runs ``systemctl`` / ``docker`` (``sources.service_env._run``: a 2 s deadline).
        clock: Unix seconds.
        monotonic: Seconds for :data:`TREE_WALK_EVERY_S` (tests pass their own).
    """

    def __init__(
        self,
        *,
        psutil_module: Any = None,
        proc_root: Path | str = "/proc",
        cgroup_root: Path | str = "/sys/fs/cgroup",
        run: Runner = _run,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._psutil = psutil_module
        self._proc_root = Path(proc_root)
        self._cgroup_root = Path(cgroup_root)
        self._run = run
        self._clock = clock
        self._procs: dict[int, Any] = {}
        self._new: set[int] = set()
        self._slow_at: float | None = None
        self._slow_pid: int | None = None
        self._slow: tuple[CgroupLimits | None, Restarts] = (None, Restarts())
        self._monotonic = monotonic
        self._walk_key: tuple[object, ...] | None = None
        self._walk_at = float("-inf")
        self._member_pids: tuple[int, ...] = ()
        self.tree_walks = 0
        """Times the server's descendants were listed (observer-cost tests count them)."""

    async def sample(self, procs: ProcSnapshot | None, host_url: str) -> ServerHealth:
        """One sample in a worker thread (psutil and ``systemctl`` block); never raises."""
        return await asyncio.to_thread(self.sample_sync, procs, host_url)

    async def aclose(self) -> None:
        """Nothing to close (present for the sources' common shape)."""

    def sample_sync(self, procs: ProcSnapshot | None, host_url: str) -> ServerHealth:
        """One sample (see the class doc)."""
        now = self._clock()
        server = server_for(procs, host_url)
        if server is None:
            why = (
                "no ollama serve process visible on this machine"
                if procs is None or not procs.servers
                else "several ollama serve processes, none known to listen on this host's port"
            )
            return ServerHealth(taken_at=now, error=why)
        env = server.env
        try:
            tree = self._tree(server.pid, procs)
            error = None
        except Exception as exc:  # noqa: BLE001 - NoSuchProcess, AccessDenied: said, never raised
            tree, error = None, f"cannot read process {server.pid}: {type(exc).__name__}"
        if self._slow_at is None or now - self._slow_at >= SLOW_EVERY_S or self._slow_pid != server.pid:
            self._slow_at, self._slow_pid = now, server.pid
            self._slow = (self.cgroup_limits(server.pid), self.restarts(server.pid, env.source if env else None))
        cgroup, restarts = self._slow
        return ServerHealth(
            taken_at=now,
            tree=tree,
            cgroup=cgroup,
            restarts=restarts,
            error=error,
            env=env.values if env is not None else MappingProxyType({}),
            env_source=env.source if env is not None else None,
        )

    # ----------------------------------------------------------------------------------------

    def _ps(self) -> Any:
        if self._psutil is None:
            self._psutil = importlib.import_module("psutil")
        return self._psutil

    def _process(self, pid: int) -> Any:
        """A cached ``psutil.Process`` (so ``cpu_percent`` measures since the previous sample)."""
        ps = self._ps()
        proc = self._procs.get(pid)
        if proc is None or not proc.is_running():
            proc = ps.Process(pid)
            proc.cpu_percent(None)  # the first call starts the measurement: no figure yet
            self._procs[pid] = proc
            self._new.add(pid)
        else:
            self._new.discard(pid)
        return proc

    def _tree(self, pid: int, procs: ProcSnapshot | None = None) -> ProcessTree:
        ps = self._ps()
        root = self._process(pid)
        members = [root]
        ollama = (
            (
                frozenset(s.pid for s in procs.servers)
                | frozenset(r.pid for r in procs.runners)
                | frozenset(procs.discovery_pids)
            )
            if procs is not None
            else None
        )
        key = (pid, ollama)
        now = self._monotonic()
        if key != self._walk_key or ollama is None or now - self._walk_at >= TREE_WALK_EVERY_S:
            self.tree_walks += 1
            self._walk_key, self._walk_at = key, now
            self._member_pids = tuple(child.pid for child in root.children(recursive=True))
        for child_pid in self._member_pids:
            try:
                members.append(self._process(child_pid))
            except (ps.NoSuchProcess, ps.AccessDenied):
                self._walk_key = None  # one went: list them again next time
                continue
        for gone in [p for p in self._procs if p not in {m.pid for m in members}]:
            del self._procs[gone]
            self._new.discard(gone)
        cpu_total: float | None = 0.0
        rss_total: int | None = 0
        rows: list[tuple[int, int | None, float | None]] = []
        for proc in members:
            try:
                cpu = None if proc.pid in self._new else float(proc.cpu_percent(None))
                rss = int(proc.memory_info().rss)
            except (ps.NoSuchProcess, ps.AccessDenied):
                cpu, rss = None, None
            cpu_total = None if cpu is None or cpu_total is None else cpu_total + cpu
            rss_total = None if rss is None or rss_total is None else rss_total + rss
            if proc is not root:
                rows.append((proc.pid, rss, cpu))
        try:
            started = float(root.create_time())
        except (ps.NoSuchProcess, ps.AccessDenied):
            started = None
        return ProcessTree(pid, len(members), cpu_total, rss_total, started, tuple(rows))

    def _cgroup_paths(self, pid: int) -> list[tuple[str, str]]:
        """``(controllers, path)`` per line of ``/proc/PID/cgroup``; empty when unreadable."""
        try:
            text = (self._proc_root / str(pid) / "cgroup").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return []
        out = []
        for line in text.splitlines():
            parts = line.split(":", 2)
            if len(parts) == 3:
                out.append((parts[1], parts[2]))
        return out

    def _read(self, path: Path) -> str | None:
        try:
            return path.read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            return None

    def cgroup_limits(self, pid: int) -> CgroupLimits | None:
        """The limits of ``pid``'s cgroup (v2, else v1); None when no cgroup file is readable.

        The process's own cgroup directory is read first; a container that mounts only its own
        cgroup at the root (the path it sees is not under ``cgroup_root``) falls back to the root.
        """
        paths = self._cgroup_paths(pid)
        unified = next((p for c, p in paths if c == ""), None)
        if unified is not None or not paths:
            for where in ([self._cgroup_root / unified.lstrip("/")] if unified else []) + [self._cgroup_root]:
                mem = self._read(where / "memory.max")
                cpu = self._read(where / "cpu.max")
                if mem is None and cpu is None:
                    continue
                cores = None
                if cpu:
                    quota, _, period = cpu.partition(" ")
                    q, p = _int(quota), _int(period or "100000")
                    cores = q / p if q is not None and p else None
                cur = self._read(where / "memory.current")
                return CgroupLimits(
                    str(where), 2, None if mem in (None, "max") else _int(mem or ""), _int(cur) if cur else None, cores
                )
        mem_path = next((p for c, p in paths if "memory" in c.split(",")), None)
        cpu_ctl = next(((c, p) for c, p in paths if "cpu" in c.split(",")), None)
        if mem_path is None and cpu_ctl is None:
            return None
        limits = CgroupLimits(str(self._cgroup_root), 1)
        for where in ([self._cgroup_root / "memory" / mem_path.lstrip("/")] if mem_path else []) + [
            self._cgroup_root / "memory"
        ]:
            mem = self._read(where / "memory.limit_in_bytes")
            if mem is not None:
                value = _int(mem)
                cur = self._read(where / "memory.usage_in_bytes")
                limits = CgroupLimits(
                    str(where),
                    1,
                    value if value is not None and value < V1_UNLIMITED else None,
                    _int(cur) if cur else None,
                )
                break
        if cpu_ctl is not None:
            ctl, path = cpu_ctl
            for where in (self._cgroup_root / ctl / path.lstrip("/"), self._cgroup_root / ctl):
                quota_us, period_us = self._read(where / "cpu.cfs_quota_us"), self._read(where / "cpu.cfs_period_us")
                if quota_us is not None:
                    q, p = _int(quota_us), _int(period_us or "")
                    cores = q / p if q is not None and q > 0 and p else None
                    limits = CgroupLimits(limits.path, 1, limits.memory_max_bytes, limits.memory_current_bytes, cores)
                    break
        return limits

    def restarts(self, pid: int, env_source: str | None = None) -> Restarts:
        """systemd's ``NRestarts`` of the server's unit, or docker's ``RestartCount`` of its
        container; otherwise why neither applies (kvtop then counts PID changes it sees)."""
        unit = container = None
        for _, path in self._cgroup_paths(pid):
            m = _UNIT.search(path.rstrip("/"))
            unit = unit or (m.group(1) if m else None)
            d = _DOCKER.search(path)
            container = container or (d.group(1) if d else None)
        if env_source and env_source.startswith("docker inspect ") and container is None:
            container = env_source.split()[-1]
        if env_source and env_source.startswith("systemctl show ") and unit is None:
            unit = env_source.split()[2] if len(env_source.split()) > 2 else None
        if unit:
            return self._ask(["systemctl", "show", "-p", "NRestarts", "--value", unit], f"systemd NRestarts ({unit})")
        if container:
            return self._ask(
                ["docker", "inspect", "-f", "{{.RestartCount}}", container], f"docker RestartCount ({container[:12]})"
            )
        return Restarts(error="not a systemd unit or a docker container: restarts are the PID changes kvtop sees")

    def _ask(self, argv: list[str], source: str) -> Restarts:
        try:
            code, out = self._run(argv)
        except (OSError, TimeoutError, Exception) as exc:  # noqa: BLE001 - missing tool, timeout
            return Restarts(source=source, error=f"{argv[0]}: {type(exc).__name__}")
        value = _int(out.strip().splitlines()[0] if out.strip() else "")
        if code != 0 or value is None:
            return Restarts(source=source, error=f"{argv[0]} exited {code}" if code else f"{argv[0]}: no count")
        return Restarts(count=value, source=source)
