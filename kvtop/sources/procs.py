"""Process source: the Ollama server, its runners (every era) and the processes on the GPUs.

``ProcSource.sample(gpu_pids)`` reads every process's name once (``/proc/<pid>/comm`` on Linux,
psutil elsewhere), then everything else with psutil for the candidates only, and returns a
``ProcSnapshot``: ``ollama serve`` processes, runners with the weights blob from ``--model``
(docs/ollama-internals.md §7), Ollama's GPU-discovery runners (no ``--model``: not models), what is
known about each GPU PID (user, name, command line) and whether NVML's PIDs can be trusted to
name local processes at all (a container with its own PID namespace sees other PIDs than the
driver reports). ``AccessDenied``/``NoSuchProcess`` for one process costs only that process's
missing fields, never the sample. What a command line says (server, runner, discovery) is
``proc_cmdline.py``'s ``classify_cmdline``. Nothing here imports Textual or Rich.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from kvtop.redact import mask_argv
from kvtop.model.gpu_snapshots import PidNamespace, ProcSnapshot, ProcessInfo, RunnerProcess, ServerProcess
from kvtop.sources.proc_cmdline import Cmdline, classify_cmdline, runner_process
from kvtop.sources.service_env import ServiceEnvReader

HOST_INIT_NAMES = frozenset({"systemd", "init", "launchd", "upstart", "openrc-init", "runit"})
"""PID 1 names that mean kvtop sees the host's PID namespace."""


def _candidate_name(name: str | None) -> bool:
    """Names worth reading a command line for: ``ollama``, ``ollama_llama_se`` (15-character
    comm), ``llama-server`` and the like (every Ollama era's runner binary has one of these)."""
    return name is not None and ("ollama" in name.lower() or "llama" in name.lower())


def container_kind(root: Path, proc_root: Path, environ: Mapping[str, str]) -> str | None:
    """The container kvtop runs in (``docker``, ``podman``, ``kubernetes``, ``lxc``…), None on a host."""
    if (root / ".dockerenv").exists():
        return "docker"
    if (root / "run" / ".containerenv").exists():
        return "podman"
    if environ.get("KUBERNETES_SERVICE_HOST"):
        return "kubernetes"
    if environ.get("container"):
        return environ["container"]
    try:
        cgroup = (proc_root / "1" / "cgroup").read_text(encoding="utf-8", errors="replace")
    except OSError:
        cgroup = ""
    for marker, kind in (
        ("kubepods", "kubernetes"),
        ("docker", "docker"),
        ("libpod", "podman"),
        ("containerd", "containerd"),
        ("lxc", "lxc"),
    ):
        if marker in cgroup:
            return kind
    return None


def pid_namespace(
    container: str | None,
    pid1_name: str | None,
    gpu_pids: Collection[int],
    visible: Collection[int],
    ollama_pids: Collection[int],
) -> PidNamespace:
    """Decide whether NVML's PIDs (host PIDs) name local processes.

    Inside a container with its own PID namespace the driver still reports host PIDs: a local
    PID that happens to be equal names the wrong process. An Ollama process whose local PID is
    on the GPU proves the namespaces agree; NVML PIDs none of which exist here prove they don't.
    """
    private: bool | None = None
    if container is not None:
        private = None if pid1_name is None else pid1_name not in HOST_INIT_NAMES
    gpu = set(gpu_pids)
    if not gpu or gpu & set(ollama_pids):
        return PidNamespace(container=container, private=private, mismatch=False)
    missing = gpu - set(visible)
    if private:
        return PidNamespace(
            container=container,
            private=True,
            mismatch=True,
            note=f"kvtop runs in a {container} container with its own PID namespace: NVML reports host PIDs,"
            " so process names are not shown (run with --pid=host to see them)",
        )
    if missing == gpu:
        return PidNamespace(
            container=container,
            private=private,
            mismatch=True,
            note="none of the PIDs NVML reports exist here: kvtop is probably in a container or another"
            " PID namespace, so process names are not shown",
        )
    return PidNamespace(container=container, private=private, mismatch=False)


class _Names(dict[int, "str | None"]):
    """PID -> process name for every process, plus the psutil objects when psutil listed them."""

    def __init__(self, names: dict[int, str | None], processes: dict[int, Any]) -> None:
        super().__init__(names)
        self._processes = processes

    def process(self, pid: int) -> Any:
        """The psutil-like process for ``pid``, None when it must be created."""
        return self._processes.get(pid)


def _proc_comm_names(
    proc_root: Path, known: Mapping[int, str | None] | None = None, reads: list[int] | None = None
) -> dict[int, str | None] | None:
    """``{pid: comm}`` from ``<proc_root>/*/comm``; None when ``proc_root`` cannot be listed.
    ``known``: names already read, kept for the PIDs still listed (only new PIDs are read);
    ``reads``: a one-item counter of the files read."""
    try:
        entries = os.listdir(proc_root)
    except OSError:
        return None
    root = str(proc_root)
    out: dict[int, str | None] = {}
    for entry in entries:
        if not entry.isdigit():
            continue
        pid = int(entry)
        if known is not None and pid in known:
            out[pid] = known[pid]
            continue
        if reads is not None:
            reads[0] += 1
        try:
            with open(f"{root}/{entry}/comm", "rb") as f:
                out[pid] = f.read().decode("utf-8", errors="replace").rstrip("\n")
        except FileNotFoundError:
            continue  # exited while listing
        except OSError:
            out[pid] = None
    return out


NAMES_FULL_EVERY_S = 10.0
"""Every process's name, and every candidate's command line, user and parent, are read again at
least this often; in between only new PIDs' names are read, and a candidate's command line only
when the candidates' PID set changed or until two reads agreed (a child between fork and exec
still has its parent's). A process that execs into Ollama under a PID already seen is found
within this (before, the process table was read in full every second)."""


class ProcSource:
    """Finds Ollama's processes and describes the GPU PIDs; never raises.

    Args:
        process_iter: Returns psutil-like processes (``pid``, ``oneshot()``, ``as_dict(attrs, ad_value)``);
            None uses ``psutil.process_iter``. Tests pass fakes that raise ``AccessDenied``.
        proc_root / root / environ: Where container markers are looked for (tests use ``tmp_path``).
        clock: Wall-clock time for ``taken_at``.
        env_reader: Reads each ``ollama serve``'s environment once per PID (the service rung,
            ``sources.service_env``); True builds one over ``proc_root``, False/None reads none.
        monotonic: Seconds for :data:`NAMES_FULL_EVERY_S` (tests pass their own).
    """

    def __init__(
        self,
        *,
        process_iter: Callable[[], Iterable[Any]] | None = None,
        proc_root: Path | str = "/proc",
        root: Path | str = "/",
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
        platform: str | None = None,
        env_reader: ServiceEnvReader | None | bool = True,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._process_iter = process_iter
        self._proc_root = Path(proc_root)
        self._root = Path(root)
        self._environ = environ
        self._clock = clock
        self._platform = platform if platform is not None else sys.platform
        self._lock = threading.Lock()
        self._container: str | None | bool = False  # False: not looked yet
        self._env: ServiceEnvReader | None = (
            ServiceEnvReader(self._proc_root, platform=self._platform)
            if env_reader is True
            else env_reader
            if isinstance(env_reader, ServiceEnvReader)
            else None
        )
        self._monotonic = monotonic
        self._full = True
        self._comm: dict[int, str | None] | None = None
        self._full_at = float("-inf")
        self._static: dict[int, tuple[dict[str, Any], bool]] = {}
        """Per candidate PID: its ppid, cmdline and username as last read, and whether two reads
        in a row agreed (then they are not read again until the PID set changes)."""
        self._candidates: frozenset[int] = frozenset()
        self.comm_reads = 0
        """``/proc/<pid>/comm`` files read (observer-cost tests count them)."""
        self.cmdline_reads = 0
        """Candidates whose command line, user and parent were read (observer-cost tests)."""

    async def sample(self, gpu_pids: Collection[int] = ()) -> ProcSnapshot:
        """One complete sample of the process table, in a worker thread; ``gpu_pids`` are described
        in ``ProcSnapshot.processes`` whatever their names."""
        return await asyncio.to_thread(self.sample_sync, tuple(gpu_pids))

    async def aclose(self) -> None:
        """Nothing to release (kept for symmetry with the other sources)."""

    def sample_sync(self, gpu_pids: Collection[int] = ()) -> ProcSnapshot:
        """Blocking ``sample``: never raises."""
        with self._lock:
            now = self._clock()
            try:
                return self._sample(now, tuple(gpu_pids))
            except Exception as exc:  # noqa: BLE001 - a process table we cannot read is a snapshot too
                return ProcSnapshot(taken_at=now, ok=False, error=f"{type(exc).__name__}: {exc}")

    # ----------------------------------------------------------------------------------------

    def _names(self, psutil: Any) -> _Names:
        """Every PID with its name: from ``/proc/<pid>/comm`` on Linux (about ten times cheaper
        than psutil per process, and this runs for every process every second), else psutil."""
        if self._process_iter is None and self._platform.startswith("linux"):
            reads = [0]
            names = _proc_comm_names(self._proc_root, None if self._full else self._comm, reads)
            self.comm_reads += reads[0]
            self._comm = names
            if names is not None:
                return _Names(names, {})
        it: Iterable[Any] = self._process_iter() if self._process_iter is not None else psutil.process_iter()
        out: dict[int, str | None] = {}
        procs: dict[int, Any] = {}
        for p in it:
            try:
                name = p.as_dict(attrs=["name"], ad_value=None)["name"]
            except psutil.NoSuchProcess:
                continue
            except psutil.AccessDenied:  # as_dict fills ad_value; a fake or odd platform may still raise
                name = None
            out[int(p.pid)] = name
            procs[int(p.pid)] = p
        return _Names(out, procs)

    def _container_kind(self) -> str | None:
        if self._container is False:
            if self._platform.startswith("linux"):
                env = self._environ if self._environ is not None else os.environ
                self._container = container_kind(self._root, self._proc_root, env)
            else:
                self._container = None
        return self._container if isinstance(self._container, str) else None

    def _sample(self, now: float, gpu_pids: tuple[int, ...]) -> ProcSnapshot:
        psutil: Any = importlib.import_module("psutil")  # untyped: no stubs needed for mypy --strict
        wanted = set(gpu_pids)
        now_mono = self._monotonic()
        self._full = now_mono - self._full_at >= NAMES_FULL_EVERY_S
        if self._full:
            self._full_at = now_mono
        # pass 1, every process: only its name (cheap; only new PIDs' between full reads); pass 2,
        # the candidates: their memory each sample, the rest when the PID set changed (see
        # NAMES_FULL_EVERY_S)
        names = self._names(psutil)
        candidates = {pid for pid, name in names.items() if _candidate_name(name) or pid in wanted}
        same_set = frozenset(candidates) == self._candidates and not self._full
        self._candidates = frozenset(candidates)
        full: dict[int, dict[str, Any]] = {}
        gone: set[int] = set()
        static = self._static
        for pid in sorted(candidates):
            proc, name = names.process(pid), names[pid]
            kept = static.get(pid) if same_set else None
            try:
                if proc is None:
                    proc = psutil.Process(pid)
                if kept is not None and kept[1]:
                    info = {**kept[0], "memory_info": proc.memory_info()}
                else:
                    self.cmdline_reads += 1
                    with proc.oneshot():
                        info = proc.as_dict(attrs=["ppid", "cmdline", "username", "memory_info"], ad_value=None)
                    before = static.get(pid)
                    fixed = {k: info[k] for k in ("ppid", "cmdline", "username")}
                    static[pid] = (fixed, before is not None and before[0] == fixed)
            except psutil.NoSuchProcess:  # ZombieProcess included: it exited during the sample
                gone.add(pid)
                continue
            except psutil.AccessDenied:
                info = {"ppid": None, "cmdline": None, "username": None, "memory_info": None}
                static.pop(pid, None)
            full[pid] = {"name": name, **info}
        for pid in [p for p in static if p not in candidates or p in gone]:
            del static[pid]

        servers: list[ServerProcess] = []
        parsed: dict[int, Cmdline] = {}
        for pid, info in full.items():
            cmd = info.get("cmdline")
            c = classify_cmdline(cmd) if cmd else None
            if c is None:
                continue
            parsed[pid] = c
            if c.kind == "server":
                servers.append(
                    ServerProcess(
                        pid=pid,
                        user=info.get("username"),
                        cmdline=mask_argv(cmd or ()) or (),
                        env=self._env.read(pid) if self._env is not None else None,
                    )
                )
        server_pids = {s.pid for s in servers}
        if self._env is not None:
            self._env.forget_except(server_pids)
        runners: list[RunnerProcess] = []
        discovery: list[int] = []
        for pid, c in sorted(parsed.items()):
            if c.kind == "server":
                continue
            info = full[pid]
            ppid = info.get("ppid")
            if not (c.ollama_path or ppid in server_pids):
                continue  # someone's own llama-server, not Ollama's: an "other process"
            if c.kind == "discovery":
                discovery.append(pid)
                continue
            assert c.runner_kind is not None
            mem = info.get("memory_info")
            runners.append(
                runner_process(
                    pid,
                    c,
                    ppid=ppid if isinstance(ppid, int) else None,
                    server_pid=ppid if ppid in server_pids else None,
                    user=info.get("username"),
                    rss_bytes=getattr(mem, "rss", None) if mem is not None else None,
                    cmdline=mask_argv(info.get("cmdline") or ()) or (),
                )
            )
        # psutil sees runners whose name says nothing (cmdline unreadable): keep what is known
        for pid in sorted(full):
            info = full[pid]
            if pid in parsed or info.get("cmdline") is not None:
                continue
            name = (info.get("name") or "").lower()
            if name.startswith("ollama_llama_ser") or name.startswith("llama-server"):
                runners.append(
                    RunnerProcess(
                        pid=pid,
                        kind="llama-server" if name.startswith("llama") else "ollama_llama_server",
                        era="?",
                        user=info.get("username"),
                        ppid=info.get("ppid"),
                        server_pid=info.get("ppid") if info.get("ppid") in server_pids else None,
                    )
                )

        processes: dict[int, ProcessInfo] = {}
        for pid in sorted(wanted):
            if pid in full:
                info = full[pid]
                cmd = info.get("cmdline")
                mem = info.get("memory_info")
                denied = [k for k in ("cmdline", "username") if info.get(k) is None]
                processes[pid] = ProcessInfo(
                    pid=pid,
                    visible=True,
                    user=info.get("username"),
                    name=info.get("name"),
                    cmdline=mask_argv(cmd),  # secrets (--api-key X, TOKEN=X) never leave this source
                    rss_bytes=getattr(mem, "rss", None) if mem is not None else None,
                    note=f"access denied: {' and '.join(denied)} not readable" if denied else None,
                )
            elif pid in gone:
                processes[pid] = ProcessInfo(pid=pid, visible=False, note="exited during the sample")
            else:
                processes[pid] = ProcessInfo(pid=pid, visible=False, note="no such process here")

        pid1_name = names.get(1)
        ollama_pids = server_pids | {r.pid for r in runners} | set(discovery)
        namespace = pid_namespace(
            self._container_kind(), pid1_name, wanted, [p for p in wanted if p in names], ollama_pids
        )
        return ProcSnapshot(
            taken_at=now,
            ok=True,
            servers=tuple(servers),
            runners=tuple(runners),
            discovery_pids=tuple(discovery),
            processes=MappingProxyType(processes),
            namespace=namespace,
        )
