"""The pure joins that turn GPU and process snapshots into per-GPU and per-model views.

The snapshots themselves (``GpuSnapshot``, ``ProcSnapshot`` and their parts, filled by
``sources.gpu.GpuSource`` and ``sources.procs.ProcSource``) are in ``model.gpu_snapshots``
(import them from there). The functions here join those two with the loaded models (``views.ModelView``):
which runner serves which model (its ``--model`` blob against ``/api/show``'s ``FROM`` blob), how
much GPU memory each model really holds according to NVML, what else is on each GPU, and what is
free. No I/O, no clock, no Textual; all sizes are bytes and ``None`` means "not available".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kvtop.model.gpu_snapshots import (
    NOT_SAMPLED,
    GpuDevice,
    GpuProcess,
    GpuSnapshot,
    ProcKind,
    ProcSnapshot,
    ProcessInfo,
    RunnerProcess,
    SplitKind,
    SystemMemory,
)
from kvtop.model.views import ModelView


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
            parts.append(
                SplitPart(
                    "unattributed",
                    "rest of the RAM in use" if d.unified_memory else "driver, reserved and unlisted",
                    self.unattributed_bytes,
                )
            )
        elif d.memory_total_bytes is not None and d.memory_free_bytes is not None:
            listed = sum(p.bytes for p in parts)
            parts.append(
                SplitPart(
                    "unattributed",
                    "used (not broken down)",
                    max(0, d.memory_total_bytes - d.memory_free_bytes - listed),
                )
            )
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


def _process_view(
    p: GpuProcess,
    procs: ProcSnapshot | None,
    matches: Mapping[int, RunnerMatch],
    servers: frozenset[int],
    discovery: frozenset[int],
) -> GpuProcessView:
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
        return GpuProcessView(p.pid, "ollama", mem, user or r.user, name or "ollama runner", command, note=match.note)
    if p.pid in servers:
        return GpuProcessView(p.pid, "ollama", mem, user, name or "ollama", _command(info), note="ollama serve")
    if p.pid in discovery:
        return GpuProcessView(p.pid, "ollama", mem, user, name, _command(info), note="Ollama GPU discovery runner")
    if info is None:
        return GpuProcessView(p.pid, "other", mem, note="not in the process sample")
    return GpuProcessView(p.pid, "other", mem, user, name, _command(info), note=info.note)


def gpu_views(gpu: GpuSnapshot | None, procs: ProcSnapshot | None, models: Sequence[ModelView]) -> tuple[GpuView, ...]:
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
        views.append(
            GpuView(
                device=d,
                models=on_gpu,
                processes=pviews,
                ollama_bytes=ollama_bytes,
                other_bytes=other_bytes,
                unattributed_bytes=unattributed,
                processes_known=memory_known,
                note=note,
            )
        )
    return tuple(views)


def model_gpu_usage(
    gpu: GpuSnapshot | None,
    procs: ProcSnapshot | None,
    models: Sequence[ModelView],
    *,
    views: Sequence[GpuView] | None = None,
) -> dict[tuple[str, str], ModelGpu]:
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
        overhead = (
            None if measured is None or m.size_vram_bytes is None or not measured else measured - m.size_vram_bytes
        )
        out[key] = ModelGpu(
            name=m.name,
            digest=m.digest,
            runner_pids=pids,
            by_gpu=by_gpu,
            measured_bytes=measured,
            size_vram_bytes=m.size_vram_bytes,
            overhead_bytes=overhead,
            note=note,
        )
    return out


def _processes_listed(gpu: GpuSnapshot) -> bool:
    devices = [d for d in gpu.devices if d.error is None]
    return bool(devices) and all(
        d.processes is not None and all(p.used_memory_bytes is not None for p in d.processes) for d in devices
    )


def _usage_note(
    m: ModelView,
    pids: tuple[int, ...],
    by_gpu: tuple[tuple[int, int | None], ...],
    measured: int | None,
    gpu: GpuSnapshot | None,
    procs: ProcSnapshot | None,
    matches: Mapping[int, RunnerMatch],
    listed: bool,
) -> str:
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
        return (
            f"{runner}; not on any GPU NVML lists processes for"
            if listed
            else f"{runner}; the driver gives no per-process GPU memory"
        )
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
        "ram_total": s.ram_total_bytes,
        "ram_available": s.ram_available_bytes,
        "ram_used": s.ram_used_bytes,
        "swap_total": s.swap_total_bytes,
        "swap_used": s.swap_used_bytes,
    }


def _process_json(p: GpuProcessView) -> dict[str, Any]:
    return {
        "pid": p.pid,
        "user": p.user,
        "name": p.name,
        "command": p.command,
        "gpu_memory": p.gpu_memory_bytes,
        "model": p.model,
        "kind": p.kind,
        "note": p.note,
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
            "total": d.memory_total_bytes,
            "used": d.memory_used_bytes,
            "free": d.memory_free_bytes,
            "reserved": d.memory_reserved_bytes,
            "allocated": d.memory_allocated_bytes,
            "pool": d.memory_pool,
            "vram_total": d.vram_total_bytes,
            "vram_used": d.vram_used_bytes,
            "gtt_total": d.gtt_total_bytes,
            "gtt_used": d.gtt_used_bytes,
        },
        "unified_memory": d.unified_memory,
        "memory_note": d.memory_note,
        "utilization": {"gpu": d.gpu_util_percent, "memory": d.memory_util_percent},
        "temperature_c": d.temperature_c,
        "power": {"draw_mw": d.power_draw_mw, "limit_mw": d.power_limit_mw},
        "processes": None if d.processes is None else [_process_json(p) for p in v.processes],
        "split": {
            "models": [
                {"name": m.name, "digest": m.digest, "pids": list(m.pids), "gpu_memory": m.measured_bytes}
                for m in v.models
            ],
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


def gpu_panel_data(gpu: GpuSnapshot | None, procs: ProcSnapshot | None, models: Sequence[ModelView]) -> GpuPanelData:
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
