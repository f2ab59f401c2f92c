"""GPU, process and system-memory snapshots: the data ``sources.gpu`` and ``sources.procs`` fill.

``sources.gpu.GpuSource`` fills a ``GpuSnapshot`` (devices, their processes, system memory) and
``sources.procs.ProcSource`` a ``ProcSnapshot`` (the Ollama server, its runners and what is known
about every PID on a GPU). Frozen data only, below the model's views (``model.views``): the joins
with the loaded models are in ``model.gpu``. No I/O, no clock;
all sizes are bytes and ``None`` means "not available".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

GpuBackend = Literal["nvml", "amd-sysfs", "intel-sysfs", "sysfs", "ioreg"]
"""``sysfs``: AMD and Intel cards read together from sysfs; ``ioreg``: Apple Silicon (macOS ``ioreg``)."""
GpuProblem = Literal[
    "no_pynvml",
    "no_library",
    "no_driver",
    "version_mismatch",
    "no_permission",
    "no_devices",
    "lost",
    "vanished",
    "not_supported",
    "error",
    "not_sampled",
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
        memory_pool: Which of the driver's pools ``memory_*`` count: ``vram`` (the GPU's own
            memory), ``vram+gtt`` (AMD APU, or a GPU whose GTT holds more than its VRAM could: VRAM
            carve-out + GTT, the system RAM the GPU maps, summed) or None (one pool, not split).
        gtt_total_bytes / gtt_used_bytes: AMD: the GTT pool as ``mem_info_gtt_total``/``_used``
            report it (system RAM mapped for the GPU), counted in ``memory_*`` only with
            ``memory_pool == "vram+gtt"``; None elsewhere.
        vram_total_bytes / vram_used_bytes: The VRAM pool alone when ``memory_*`` are a sum of
            pools (``vram+gtt``); None otherwise (``memory_*`` are then the VRAM).
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
    memory_pool: Literal["vram", "vram+gtt"] | None = None
    gtt_total_bytes: int | None = None
    gtt_used_bytes: int | None = None
    vram_total_bytes: int | None = None
    vram_used_bytes: int | None = None


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
