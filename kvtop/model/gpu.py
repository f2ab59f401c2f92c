"""GPU and process snapshots, and the pure joins that turn them into per-GPU and per-model views.

``sources.gpu.GpuSource`` fills a ``GpuSnapshot`` (devices, their processes, system memory) and
``sources.procs.ProcSource`` a ``ProcSnapshot`` (the Ollama server, its runners and what is known
about every PID on a GPU). The functions here join those two with the loaded models
(``state.ModelView``): which runner serves which model (its ``--model`` blob against
``/api/show``'s ``FROM`` blob), how much GPU memory each model really holds according to NVML,
what else is on each GPU, and what is free. No I/O, no clock, no Textual; all sizes are bytes and
``None`` means "not available".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # annotations only: state.py may import this module (AppState.gpu / .procs)
    from kvtop.model.state import ModelView

GpuBackend = Literal["nvml", "amd-sysfs", "intel-sysfs", "sysfs", "ioreg"]
"""``sysfs``: AMD and Intel cards read together from sysfs; ``ioreg``: Apple Silicon (macOS ``ioreg``)."""
GpuProblem = Literal[
    "no_pynvml", "no_library", "no_driver", "version_mismatch", "no_permission", "no_devices",
    "lost", "vanished", "not_supported", "error", "not_sampled",
]
"""Why GPU telemetry is missing or incomplete (machine-readable twin of ``GpuSnapshot.status``)."""

RunnerKind = Literal["ollama_llama_server", "ollama runner", "llama-server", "mlx runner"]
"""The runner's command-line shape (docs/ollama-internals.md §7)."""

ProcKind = Literal["model", "ollama", "other", "unknown"]
"""A GPU process as the panel groups it: a loaded model's runner, another Ollama process (GPU
discovery, a runner no ``/api/ps`` row matches), anything else, or a PID that cannot be named
(another PID namespace)."""

SplitKind = Literal["model", "ollama", "other", "unattributed", "free"]

NOT_SAMPLED = "GPU telemetry: waiting for the first sample"


# --------------------------------------------------------------------------------------------
# Snapshots (filled by the sources)


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """One process NVML lists on a device.

    Attributes:
        pid: The PID as the driver reports it (a host PID, even inside a container).
        used_memory_bytes: GPU memory the process holds; None where the driver does not say
            (Windows WDDM, WSL2).
        kinds: ``("compute",)``, ``("graphics",)`` or both.
    """

    pid: int
    used_memory_bytes: int | None
    kinds: tuple[str, ...] = ("compute",)


@dataclass(frozen=True, slots=True)
class GpuDevice:
    """One GPU, read once per sample.

    Attributes:
        index: NVML device index (AMD, Intel: position among the cards read from sysfs; Apple: the
            accelerator's position in ``ioreg``'s list).
        vendor: ``nvidia``, ``amd``, ``intel`` or ``apple``.
        bus_id: PCI bus id (NVML form ``00000000:01:00.0``, sysfs form ``0000:03:00.0``).
        memory_total_bytes / memory_used_bytes / memory_free_bytes: As the driver reports them.
            With NVML's v2 memory info ``used`` excludes, and ``free`` is net of, the driver's
            reserved memory.
        memory_reserved_bytes: Driver-reserved memory (v2 memory info only).
        gpu_util_percent / memory_util_percent: Utilization over the driver's last sample period.
        temperature_c: Core (AMD: edge) temperature.
        power_draw_mw / power_limit_mw: Power draw and the enforced limit, milliwatts.
        processes: Processes on this GPU; None when the driver cannot list them.
        processes_note: Why ``processes`` (or their memory) is missing.
        error: Set when the device itself failed (lost, vanished, not accessible): in plain words.
        unified_memory: The GPU has no memory of its own and shares system RAM (Apple Silicon;
            NVIDIA GB10 / DGX Spark and Jetson, whose NVML answers NotSupported for memory info):
            ``memory_total_bytes`` is the RAM, ``memory_free_bytes`` the RAM available
            (psutil: ``MemAvailable`` of ``/proc/meminfo`` on Linux), ``memory_used_bytes`` what
            the GPU holds when the driver says it (Apple: ioreg's "In use system memory"), else
            the RAM in use.
        memory_allocated_bytes: Apple: ioreg's "Alloc system memory" (what the GPU driver has
            allocated, in use or not); None elsewhere.
        memory_note: Where the memory figures come from when not from the GPU driver's own
            counters, or why they are missing (one sentence); None when the driver gave them.
    """

    index: int
    vendor: Literal["nvidia", "amd", "intel", "apple"] = "nvidia"
    name: str | None = None
    uuid: str | None = None
    bus_id: str | None = None
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    memory_free_bytes: int | None = None
    memory_reserved_bytes: int | None = None
    gpu_util_percent: int | None = None
    memory_util_percent: int | None = None
    temperature_c: int | None = None
    power_draw_mw: int | None = None
    power_limit_mw: int | None = None
    processes: tuple[GpuProcess, ...] | None = None
    processes_note: str | None = None
    error: str | None = None
    unified_memory: bool = False
    memory_allocated_bytes: int | None = None
    memory_note: str | None = None


@dataclass(frozen=True, slots=True)
class SystemMemory:
    """RAM and swap (psutil): a model that spilled lives in RAM, and swap is the second cliff."""

    ram_total_bytes: int | None = None
    ram_available_bytes: int | None = None
    ram_used_bytes: int | None = None
    swap_total_bytes: int | None = None
    swap_used_bytes: int | None = None

    @property
    def ram_in_use_bytes(self) -> int | None:
        """RAM in use: psutil's ``used``, else total minus available (None when neither is known)."""
        if self.ram_used_bytes is not None:
            return self.ram_used_bytes
        if self.ram_total_bytes is not None and self.ram_available_bytes is not None:
            return self.ram_total_bytes - self.ram_available_bytes
        return None


@dataclass(frozen=True, slots=True)
class GpuSnapshot:
    """One complete GPU sample. Never an exception: a machine without a GPU is a snapshot too.

    Attributes:
        taken_at: Wall-clock time (Unix seconds).
        status: One line in plain words, starting ``GPU telemetry:``.
        ok: True when at least one device reported data.
        backend: Where the data came from.
        problem: Machine-readable reason when telemetry is missing or partial.
        driver_version: The NVIDIA driver version, when known.
        devices: Every device, including lost/vanished ones (their ``error`` says so).
        system: RAM and swap, None when psutil could not read them.
        notes: More plain-word lines (another vendor's GPU found, a device vanished).
    """

    taken_at: float
    status: str
    ok: bool = False
    backend: GpuBackend | None = None
    problem: GpuProblem | None = None
    driver_version: str | None = None
    devices: tuple[GpuDevice, ...] = ()
    system: SystemMemory | None = None
    notes: tuple[str, ...] = ()

    @property
    def pids(self) -> tuple[int, ...]:
        """Every PID on any GPU, sorted (what ``ProcSource.sample`` should describe)."""
        return tuple(sorted({p.pid for d in self.devices for p in (d.processes or ())}))


@dataclass(frozen=True, slots=True)
class ServiceEnv:
    """The environment ``ollama serve`` runs with: the **service** rung (``sources.service_env``).

    Attributes:
        values: ``OLLAMA_*``, ``LLAMA_ARG_*`` and GPU-selection variables by name, secrets already
            masked; empty when nothing could be read.
        source: Where they were read (``/proc/1234/environ``, ``systemctl show ollama.service``,
            ``docker inspect 0123abcd4567``, ``launchctl getenv``), None when nowhere.
        error: What was tried and why it failed (or a partial failure, such as an unreadable
            ``EnvironmentFile``), None when everything was read.
    """

    values: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    source: str | None = None
    error: str | None = None

    @property
    def readable(self) -> bool:
        """True when the environment was read from somewhere (it may still set nothing)."""
        return self.source is not None

    def get(self, key: str) -> str | None:
        """Ollama's own reading of a variable (``envconfig.Var``: spaces and quotes trimmed);
        None when unset or empty (Ollama treats both alike)."""
        value = self.values.get(key)
        if value is None:
            return None
        value = value.strip().strip("\"'")
        return value or None


@dataclass(frozen=True, slots=True)
class ServerProcess:
    """An ``ollama serve`` process and, when readable, its environment (``env``)."""

    pid: int
    user: str | None = None
    cmdline: tuple[str, ...] = ()
    env: ServiceEnv | None = None


@dataclass(frozen=True, slots=True)
class RunnerProcess:
    """A model runner started by Ollama, from its command line (docs/ollama-internals.md §7).

    Attributes:
        kind: The command-line shape.
        era: Ollama releases that start runners this way.
        model_arg: The ``--model`` value as given (a blob path; a model name for MLX).
        blob: ``sha256-<hex>`` of the weights blob, None when ``--model`` is not a blob path.
        model_name: The model name an MLX runner gets instead of a blob.
        port / ctx_size / parallel: From ``--port``, ``--ctx-size``/``-c`` (total cells) and
            ``--parallel``/``-np`` when the command line has them.
        engine: ``ollama`` (``--ollama-engine``), ``mlx`` or ``llama.cpp``.
        cache_type_k / cache_type_v: ``--cache-type-k``/``--cache-type-v`` (Era C) or
            ``--kv-cache-type`` (B1, both K and V: ``cache_type_v`` stays None), lower-cased.
        flash_attn: ``--flash-attn`` as given: ``on``/``off``/``auto`` (Era C), ``true`` for the bare
            flag (A/B1); None when absent (A/B1: off).
        n_gpu_layers / tensor_split: ``-ngl``/``--n-gpu-layers`` and ``--tensor-split`` (``3,1``).
        server_pid: The ``ollama serve`` parent, when it is one.
        rss_bytes: Resident memory (a spilled model's CPU part lives here).
    """

    pid: int
    kind: RunnerKind
    era: str
    model_arg: str | None = None
    blob: str | None = None
    model_name: str | None = None
    port: int | None = None
    ctx_size: int | None = None
    parallel: int | None = None
    engine: str | None = None
    ppid: int | None = None
    server_pid: int | None = None
    user: str | None = None
    rss_bytes: int | None = None
    cmdline: tuple[str, ...] = ()
    cache_type_k: str | None = None
    cache_type_v: str | None = None
    flash_attn: str | None = None
    n_gpu_layers: int | None = None
    tensor_split: str | None = None

    @property
    def flags(self) -> str:
        """What the command line requests, for a detail line (``-c 16384 -np 2 --cache-type-k q8_0``)."""
        parts = []
        if self.ctx_size is not None:
            parts.append(f"{'-c' if self.kind == 'llama-server' else '--ctx-size'} {self.ctx_size}")
        if self.parallel is not None:
            parts.append(f"{'-np' if self.kind == 'llama-server' else '--parallel'} {self.parallel}")
        if self.cache_type_k is not None:
            if self.kind == "llama-server" or self.cache_type_v is not None:
                parts.append(f"--cache-type-k {self.cache_type_k}")
            else:
                parts.append(f"--kv-cache-type {self.cache_type_k}")
        if self.cache_type_v is not None:
            parts.append(f"--cache-type-v {self.cache_type_v}")
        if self.flash_attn is not None:
            parts.append("--flash-attn" + ("" if self.flash_attn == "true" else f" {self.flash_attn}"))
        if self.n_gpu_layers is not None:
            parts.append(f"{'-ngl' if self.kind == 'llama-server' else '--n-gpu-layers'} {self.n_gpu_layers}")
        if self.tensor_split is not None:
            parts.append(f"--tensor-split {self.tensor_split}")
        return " ".join(parts)


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    """What is known about one PID (asked for because it is on a GPU).

    Attributes:
        visible: The PID exists in kvtop's PID namespace.
        cmdline: None when it could not be read (access denied, exited).
        note: Why something is missing (``access denied``, ``exited``, ``not visible here``).
    """

    pid: int
    visible: bool = True
    user: str | None = None
    name: str | None = None
    cmdline: tuple[str, ...] | None = None
    rss_bytes: int | None = None
    note: str | None = None


@dataclass(frozen=True, slots=True)
class PidNamespace:
    """Whether NVML's PIDs can be looked up locally.

    Attributes:
        container: ``docker``, ``podman``, ``kubernetes``, ``lxc``… when kvtop runs in one.
        private: True when kvtop's PID namespace is not the host's; None when unknown.
        mismatch: NVML's (host) PIDs do not name local processes: show PIDs, not names.
        note: The plain-word explanation for the panel.
    """

    container: str | None = None
    private: bool | None = None
    mismatch: bool = False
    note: str | None = None


@dataclass(frozen=True, slots=True)
class ProcSnapshot:
    """One complete process sample.

    Attributes:
        ok: False when the process table could not be read at all (``error`` says why).
        servers: ``ollama serve`` processes.
        runners: Model runners (every era), with their blobs.
        discovery_pids: Ollama's short-lived GPU-discovery runners (no ``--model``).
        processes: What is known about each PID asked for (the GPU PIDs), by PID.
        namespace: Container / PID-namespace findings.
    """

    taken_at: float
    ok: bool = True
    error: str | None = None
    servers: tuple[ServerProcess, ...] = ()
    runners: tuple[RunnerProcess, ...] = ()
    discovery_pids: tuple[int, ...] = ()
    processes: Mapping[int, ProcessInfo] = field(default_factory=lambda: MappingProxyType({}))
    namespace: PidNamespace = PidNamespace()


# --------------------------------------------------------------------------------------------
# Joins


@dataclass(frozen=True, slots=True)
class RunnerMatch:
    """A runner and the loaded model it serves (None when no ``/api/ps`` row matches)."""

    runner: RunnerProcess
    model: ModelView | None
    note: str


@dataclass(frozen=True, slots=True)
class GpuProcessView:
    """One process on one GPU, named as well as kvtop can.

    Attributes:
        kind: ``model`` (a loaded model's runner), ``ollama``, ``other`` or ``unknown``.
        command: The command line joined with spaces (not shell-quoted), None when unknown.
        model: The model name, for a runner.
        note: What is missing and why (access denied, another PID namespace…).
    """

    pid: int
    kind: ProcKind
    gpu_memory_bytes: int | None
    user: str | None = None
    name: str | None = None
    command: str | None = None
    model: str | None = None
    note: str | None = None


@dataclass(frozen=True, slots=True)
class ModelOnGpu:
    """One loaded model's share of one GPU, as NVML measures its runner(s)."""

    name: str
    digest: str
    pids: tuple[int, ...]
    measured_bytes: int | None


@dataclass(frozen=True, slots=True)
class SplitPart:
    """One segment of a GPU's memory bar."""

    kind: SplitKind
    label: str
    bytes: int


@dataclass(frozen=True, slots=True)
class GpuView:
    """A GPU with its memory split into models, other Ollama processes, other processes,
    unattributed (driver reserve, CUDA contexts NVML does not list) and free.

    Attributes:
        device: The device as sampled.
        models: Each loaded model's measured share, in the server's model order.
        processes: Every process on the device.
        ollama_bytes: Ollama processes not matched to a loaded model.
        other_bytes: Everything else NVML lists.
        unattributed_bytes: ``total − free − listed processes``; None when unknown.
        processes_known: NVML listed processes with their memory.
        note: Why the split is incomplete, in plain words.
    """

    device: GpuDevice
    models: tuple[ModelOnGpu, ...] = ()
    processes: tuple[GpuProcessView, ...] = ()
    ollama_bytes: int = 0
    other_bytes: int = 0
    unattributed_bytes: int | None = None
    processes_known: bool = False
    note: str | None = None

    @property
    def others(self) -> tuple[GpuProcessView, ...]:
        """Processes that are not Ollama's (``other`` and ``unknown``)."""
        return tuple(p for p in self.processes if p.kind in ("other", "unknown"))

    @property
    def split(self) -> tuple[SplitPart, ...]:
        """The memory bar's segments, in drawing order; zero-byte parts are left out."""
        d = self.device
        parts: list[SplitPart] = [SplitPart("model", m.name, m.measured_bytes or 0) for m in self.models]
        parts.append(SplitPart("ollama", "other Ollama processes", self.ollama_bytes))
        parts.append(SplitPart("other", "other processes", self.other_bytes))
        if self.unattributed_bytes is not None:
            parts.append(SplitPart("unattributed", "rest of the RAM in use" if d.unified_memory else
                                   "driver, reserved and unlisted", self.unattributed_bytes))
        elif d.memory_total_bytes is not None and d.memory_free_bytes is not None:
            listed = sum(p.bytes for p in parts)
            parts.append(SplitPart("unattributed", "used (not broken down)",
                                   max(0, d.memory_total_bytes - d.memory_free_bytes - listed)))
        if d.memory_free_bytes is not None:
            parts.append(SplitPart("free", "free", d.memory_free_bytes))
        return tuple(p for p in parts if p.bytes > 0)


@dataclass(frozen=True, slots=True)
class ModelGpu:
    """One loaded model's measured GPU memory over all GPUs, for the detail view and JSON.

    Attributes:
        runner_pids: Runner PIDs matched to the model (usually one).
        by_gpu: ``(gpu index, measured bytes)`` for every GPU the runner is on.
        measured_bytes: Sum over GPUs; None when NVML gives no per-process memory.
        size_vram_bytes: ``/api/ps`` ``size_vram`` (reported).
        overhead_bytes: ``measured − size_vram``: CUDA context and other overhead Ollama does not count.
        note: How the numbers were found, or why they are missing.
    """

    name: str
    digest: str
    runner_pids: tuple[int, ...] = ()
    by_gpu: tuple[tuple[int, int | None], ...] = ()
    measured_bytes: int | None = None
    size_vram_bytes: int | None = None
    overhead_bytes: int | None = None
    note: str = ""


def _model_key(m: ModelView) -> tuple[str, str]:
    return m.name, m.digest


def _name_matches(runner_name: str, model_name: str) -> bool:
    if runner_name == model_name:
        return True
    return ":" not in runner_name and model_name == f"{runner_name}:latest"


def match_runners(procs: ProcSnapshot | None, models: Sequence[ModelView]) -> dict[int, RunnerMatch]:
    """Which loaded model each runner serves, by runner PID.

    A runner's ``--model`` blob is compared with each model's ``model_blob`` (``/api/show``'s
    ``FROM`` line); MLX runners carry the model name instead. When two loaded models share one
    blob (a custom Modelfile on the same weights), the runner's cell count (``--ctx-size``/``-c``)
    must equal the model's ``context × slots`` to decide; otherwise the runner stays unmatched.
    """
    out: dict[int, RunnerMatch] = {}
    if procs is None:
        return out
    by_blob: dict[str, list[ModelView]] = {}
    for m in models:
        if m.model_blob is not None:
            by_blob.setdefault(m.model_blob, []).append(m)
    for r in procs.runners:
        if r.blob is not None:
            candidates = list(by_blob.get(r.blob, ()))
            what = f"--model {r.blob[:19]}…"
        elif r.model_name is not None:
            candidates = [m for m in models if _name_matches(r.model_name, m.name)]
            what = f"--model {r.model_name}"
        else:
            out[r.pid] = RunnerMatch(r, None, "the runner's command line names no model blob")
            continue
        if len(candidates) > 1 and r.ctx_size is not None:
            by_cells = [m for m in candidates if _cells_match(r, m)]
            if by_cells:
                candidates = by_cells
        if len(candidates) == 1:
            out[r.pid] = RunnerMatch(r, candidates[0], f"PID {r.pid} {what} = /api/show FROM blob")
        elif not candidates:
            out[r.pid] = RunnerMatch(r, None, f"no loaded model has {what} (unloading, or /api/show not read yet)")
        else:
            names = ", ".join(m.name for m in candidates)
            out[r.pid] = RunnerMatch(r, None, f"{what} is shared by {names}; the command line cannot tell which")
    return out


def _cells_match(r: RunnerProcess, m: ModelView) -> bool:
    if r.ctx_size is None or m.context.value is None:
        return False
    if r.parallel is not None:
        return r.ctx_size == m.context.value * r.parallel
    return m.total_ctx_cells is not None and r.ctx_size == m.total_ctx_cells


def _command(info: ProcessInfo | None) -> str | None:
    if info is None or info.cmdline is None:
        return None
    return " ".join(info.cmdline) if info.cmdline else None


def _process_view(p: GpuProcess, procs: ProcSnapshot | None, matches: Mapping[int, RunnerMatch],
                  servers: frozenset[int], discovery: frozenset[int]) -> GpuProcessView:
    mem = p.used_memory_bytes
    if procs is None:
        return GpuProcessView(p.pid, "unknown", mem, note="process table not sampled")
    if procs.namespace.mismatch:
        return GpuProcessView(p.pid, "unknown", mem, note=procs.namespace.note or "host PID: not visible here")
    info = procs.processes.get(p.pid)
    user = info.user if info else None
    name = info.name if info else None
    match = matches.get(p.pid)
    if match is not None:
        r = match.runner
        command = " ".join(r.cmdline) if r.cmdline else _command(info)
        if match.model is not None:
            return GpuProcessView(p.pid, "model", mem, user or r.user, name, command, match.model.name)
        return GpuProcessView(p.pid, "ollama", mem, user or r.user, name or "ollama runner", command,
                              note=match.note)
    if p.pid in servers:
        return GpuProcessView(p.pid, "ollama", mem, user, name or "ollama", _command(info), note="ollama serve")
    if p.pid in discovery:
        return GpuProcessView(p.pid, "ollama", mem, user, name, _command(info), note="Ollama GPU discovery runner")
    if info is None:
        return GpuProcessView(p.pid, "other", mem, note="not in the process sample")
    return GpuProcessView(p.pid, "other", mem, user, name, _command(info), note=info.note)


def gpu_views(gpu: GpuSnapshot | None, procs: ProcSnapshot | None,
              models: Sequence[ModelView]) -> tuple[GpuView, ...]:
    """Join a GPU sample, a process sample and the loaded models into one view per GPU."""
    if gpu is None:
        return ()
    matches = match_runners(procs, models)
    servers = frozenset(s.pid for s in procs.servers) if procs else frozenset()
    discovery = frozenset(procs.discovery_pids) if procs else frozenset()
    order = {_model_key(m): i for i, m in enumerate(models)}
    views: list[GpuView] = []
    for d in gpu.devices:
        if d.processes is None:
            views.append(GpuView(device=d, note=d.processes_note or ("" if d.error else "processes not available")))
            continue
        pviews = tuple(_process_view(p, procs, matches, servers, discovery) for p in d.processes)
        per_model: dict[tuple[str, str], tuple[list[int], int | None]] = {}
        ollama_bytes = other_bytes = 0
        memory_known = all(p.gpu_memory_bytes is not None for p in pviews)
        for pv in pviews:
            mem = pv.gpu_memory_bytes
            match = matches.get(pv.pid)
            if pv.kind == "model" and match is not None and match.model is not None:
                key = _model_key(match.model)
                pids, total = per_model.get(key, ([], 0))
                pids.append(pv.pid)
                per_model[key] = (pids, None if total is None or mem is None else total + mem)
            elif pv.kind == "ollama":
                ollama_bytes += mem or 0
            else:
                other_bytes += mem or 0
        on_gpu = tuple(
            ModelOnGpu(name=k[0], digest=k[1], pids=tuple(sorted(v[0])), measured_bytes=v[1])
            for k, v in sorted(per_model.items(), key=lambda kv: order.get(kv[0], len(order)))
        )
        unattributed: int | None = None
        if memory_known and d.memory_total_bytes is not None and d.memory_free_bytes is not None:
            listed = sum(pv.gpu_memory_bytes or 0 for pv in pviews)
            unattributed = max(0, d.memory_total_bytes - d.memory_free_bytes - listed)
        note = d.processes_note
        if not memory_known and note is None:
            note = "the driver lists processes but not their memory (Windows WDDM / WSL2)"
        views.append(GpuView(
            device=d, models=on_gpu, processes=pviews, ollama_bytes=ollama_bytes, other_bytes=other_bytes,
            unattributed_bytes=unattributed, processes_known=memory_known, note=note,
        ))
    return tuple(views)


def model_gpu_usage(gpu: GpuSnapshot | None, procs: ProcSnapshot | None,
                    models: Sequence[ModelView], *,
                    views: Sequence[GpuView] | None = None) -> dict[tuple[str, str], ModelGpu]:
    """Each loaded model's runner PIDs and measured GPU memory, keyed by ``(name, digest)``.

    Every model gets an entry (with ``note`` saying why a figure is missing), so the detail view
    can always show a line. Linear in models, runners and GPU processes.

    Args:
        gpu: The GPU sample, None before one.
        procs: The process sample taken with it.
        models: The loaded models.
        views: ``gpu_views(gpu, procs, models)`` when the caller has it already (else computed).
    """
    matches = match_runners(procs, models)
    pids_by_model: dict[tuple[str, str], list[int]] = {}
    for pid, match in matches.items():
        if match.model is not None:
            pids_by_model.setdefault(_model_key(match.model), []).append(pid)
    if views is None:
        views = gpu_views(gpu, procs, models)
    on_gpus: dict[tuple[str, str], list[tuple[int, int | None]]] = {}
    for v in views:
        for mg in v.models:
            on_gpus.setdefault((mg.name, mg.digest), []).append((v.device.index, mg.measured_bytes))
    listed = gpu is not None and gpu.ok and _processes_listed(gpu)
    out: dict[tuple[str, str], ModelGpu] = {}
    for m in models:
        key = _model_key(m)
        pids = tuple(sorted(pids_by_model.get(key, ())))
        by_gpu = tuple(on_gpus.get(key, ()))
        measured: int | None = None
        if by_gpu and all(b is not None for _, b in by_gpu):
            measured = sum(b or 0 for _, b in by_gpu)
        note = _usage_note(m, pids, by_gpu, measured, gpu, procs, matches, listed)
        if measured is None and pids and not by_gpu and listed and procs is not None and not procs.namespace.mismatch:
            measured = 0  # NVML lists processes and this runner is not among them: CPU only
        overhead = None if measured is None or m.size_vram_bytes is None or not measured else measured - m.size_vram_bytes
        out[key] = ModelGpu(name=m.name, digest=m.digest, runner_pids=pids, by_gpu=by_gpu, measured_bytes=measured,
                            size_vram_bytes=m.size_vram_bytes, overhead_bytes=overhead, note=note)
    return out


def _processes_listed(gpu: GpuSnapshot) -> bool:
    devices = [d for d in gpu.devices if d.error is None]
    return bool(devices) and all(
        d.processes is not None and all(p.used_memory_bytes is not None for p in d.processes) for d in devices
    )


def _usage_note(m: ModelView, pids: tuple[int, ...], by_gpu: tuple[tuple[int, int | None], ...],
                measured: int | None, gpu: GpuSnapshot | None, procs: ProcSnapshot | None,
                matches: Mapping[int, RunnerMatch], listed: bool) -> str:
    if m.cloud:
        return "cloud model: no local runner"
    if procs is None:
        return "process table not sampled yet"
    if not procs.ok:
        return f"process table not readable: {procs.error or 'unknown error'}"
    if not pids:
        if m.model_blob is None:
            return "the model's weights blob is not known yet (/api/show)"
        shared = [x for x in matches.values() if x.model is None and x.runner.blob == m.model_blob]
        if shared:
            return shared[0].note
        return f"no runner process with --model {m.model_blob[:19]}… found (another host or container?)"
    runner = "runner PID " + ", ".join(str(p) for p in pids)
    if gpu is None:
        return f"{runner}; GPU not sampled yet"
    if not gpu.ok:
        return f"{runner}; {gpu.status}"
    if procs.namespace.mismatch:
        return f"{runner}; {procs.namespace.note or 'NVML PIDs are not local PIDs'}"
    if not by_gpu:
        return f"{runner}; not on any GPU NVML lists processes for" if listed else \
            f"{runner}; the driver gives no per-process GPU memory"
    if measured is None:
        return f"{runner}; the driver lists the process but not its memory"
    return f"{runner}; NVML per-process memory on GPU " + ", ".join(str(i) for i, _ in by_gpu)


def gpu_free_bytes(gpu: GpuSnapshot | None) -> int | None:
    """Free memory over all working GPUs (the what-if screen's budget); None when not known.

    With several GPUs this is an upper bound: Ollama splits a model's layers over GPUs, and no
    single allocation can use all of it.
    """
    if gpu is None or not gpu.ok:
        return None
    free = [d.memory_free_bytes for d in gpu.devices if d.error is None]
    if not free or any(f is None for f in free):
        return None
    return sum(f or 0 for f in free)


# --------------------------------------------------------------------------------------------
# --once --json


def system_json(s: SystemMemory | None) -> dict[str, int | None] | None:
    """RAM and swap in bytes."""
    if s is None:
        return None
    return {
        "ram_total": s.ram_total_bytes, "ram_available": s.ram_available_bytes, "ram_used": s.ram_used_bytes,
        "swap_total": s.swap_total_bytes, "swap_used": s.swap_used_bytes,
    }


def _process_json(p: GpuProcessView) -> dict[str, Any]:
    return {
        "pid": p.pid, "user": p.user, "name": p.name, "command": p.command, "gpu_memory": p.gpu_memory_bytes,
        "model": p.model, "kind": p.kind, "note": p.note,
    }


def gpu_device_json(v: GpuView) -> dict[str, Any]:
    """One GPU for ``--once --json`` (bytes, percent, °C and milliwatts as integers; null when unknown)."""
    d = v.device
    return {
        "index": d.index,
        "vendor": d.vendor,
        "name": d.name,
        "uuid": d.uuid,
        "bus_id": d.bus_id,
        "memory": {
            "total": d.memory_total_bytes, "used": d.memory_used_bytes, "free": d.memory_free_bytes,
            "reserved": d.memory_reserved_bytes, "allocated": d.memory_allocated_bytes,
        },
        "unified_memory": d.unified_memory,
        "memory_note": d.memory_note,
        "utilization": {"gpu": d.gpu_util_percent, "memory": d.memory_util_percent},
        "temperature_c": d.temperature_c,
        "power": {"draw_mw": d.power_draw_mw, "limit_mw": d.power_limit_mw},
        "processes": None if d.processes is None else [_process_json(p) for p in v.processes],
        "split": {
            "models": [{"name": m.name, "digest": m.digest, "pids": list(m.pids), "gpu_memory": m.measured_bytes}
                       for m in v.models],
            "ollama_other": v.ollama_bytes if d.processes is not None else None,
            "other_processes": v.other_bytes if d.processes is not None else None,
            "unattributed": v.unattributed_bytes,
            "free": d.memory_free_bytes,
        },
        "note": v.note,
        "error": d.error,
    }


def gpu_status_line(gpu: GpuSnapshot | None) -> str:
    """The one-line GPU status (``GPU telemetry: …``)."""
    return NOT_SAMPLED if gpu is None else gpu.status


def gpu_notes(gpu: GpuSnapshot | None, procs: ProcSnapshot | None) -> tuple[str, ...]:
    """Extra plain-word lines: the GPU source's notes, and the PID-namespace warning."""
    notes = tuple(gpu.notes) if gpu is not None else ()
    if procs is not None and procs.namespace.mismatch and procs.namespace.note:
        notes += (procs.namespace.note,)
    if procs is not None and not procs.ok:
        notes += (f"process table not readable: {procs.error or 'unknown error'}",)
    return notes


@dataclass(frozen=True, slots=True)
class GpuPanelData:
    """Everything the GPU panel draws, joined once per state change (``gpu_panel_data``)."""

    views: tuple[GpuView, ...] = ()
    status: str = NOT_SAMPLED
    ok: bool = False
    notes: tuple[str, ...] = ()
    system: SystemMemory | None = None
    usages: tuple[ModelGpu, ...] = ()


def gpu_panel_data(gpu: GpuSnapshot | None, procs: ProcSnapshot | None,
                   models: Sequence[ModelView]) -> GpuPanelData:
    """Join the latest GPU and process samples with the loaded models for the panel."""
    usage = model_gpu_usage(gpu, procs, models)
    return GpuPanelData(
        views=gpu_views(gpu, procs, models),
        status=gpu_status_line(gpu),
        ok=gpu is not None and gpu.ok,
        notes=gpu_notes(gpu, procs),
        system=gpu.system if gpu is not None else None,
        usages=tuple(usage[(m.name, m.digest)] for m in models),
    )


def gpu_json(gpu: GpuSnapshot | None, procs: ProcSnapshot | None, models: Sequence[ModelView]) -> dict[str, Any]:
    """The GPU part of ``--once --json``: ``gpus``, ``gpu_status``, ``gpu_notes`` and ``system_memory``."""
    views = gpu_views(gpu, procs, models)
    return {
        "gpus": [gpu_device_json(v) for v in views],
        "gpu_status": gpu_status_line(gpu),
        "gpu_notes": list(gpu_notes(gpu, procs)),
        "system_memory": system_json(gpu.system) if gpu is not None else None,
    }


def model_gpu_json(usage: ModelGpu | None) -> dict[str, Any]:
    """Fields for a model's ``--once --json`` entry: runner PIDs and measured VRAM."""
    if usage is None:
        return {"runner_pids": [], "vram_measured": None, "vram_measured_by_gpu": {}, "vram_overhead": None}
    return {
        "runner_pids": list(usage.runner_pids),
        "vram_measured": usage.measured_bytes,
        "vram_measured_by_gpu": {str(i): b for i, b in usage.by_gpu},
        "vram_overhead": usage.overhead_bytes,
    }
