"""The memory map: where each device's memory went, as segments in bytes (pure).

One :class:`DeviceBar` per GPU and one for system RAM. A GPU's bar holds, for each loaded model,
its weights, KV cache and compute buffers on that GPU (and what NVML measures beyond them: the
runner's CUDA context and buffers the log does not list), then runners still loading (``loading
<model>``, :func:`loading_runners`), other Ollama processes, foreign
processes (one segment each, named by user and program), unattributed memory and free memory. The
RAM bar holds each *spilled* model's CPU part, the rest of RAM in use, and free (available) RAM.

Every segment carries its source in the one vocabulary of ``kvtop.model.known``:

* ``allocated``: the runner's log gives the bytes per device (``load_tensors: CUDA0 model buffer
  size``, ``llama_kv_cache: CUDA0 KV buffer size``, ``CUDA0 compute buffer size``; Ollama's
  ``msg="model weights" device=CUDA0``: docs/ollama-internals.md §4.3, §4.5 and §8);
* ``reported``: NVML (a process's used memory, free memory) or ``/api/ps`` (``size_vram``, and a
  spilled model's ``size − size_vram`` in RAM, as the table's VRAM+RAM and ``ollama ps``'s split);
* ``estimated``: a split or a difference kvtop computed (a model's parts in proportion to its
  whole-model figures, unattributed = total − free − listed processes).

Log devices are joined to NVML GPUs by the runner's PID, never by the number in ``CUDA0``: Ollama
sets ``CUDA_VISIBLE_DEVICES`` per runner, so its ``CUDA0`` need not be physical GPU 0
(docs/ollama-internals.md §7, caveats). With one GPU under the runner the pairing is certain; with
several, the log's devices are paired with the runner's GPUs in index order, and then by size when
index order does not fit the measured bytes; when neither fits, the split is estimated instead.

Without GPU telemetry the map is the RAM bar and one ``VRAM`` bar of what ``/api/ps`` says each
model holds in VRAM (``size_vram``, reported; split by the log when it gives per-device figures),
with no total or free (nothing measured them).

No I/O, no clock, no Textual. All sizes are bytes; ``None`` means not known.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Literal

from kvtop.model.gpu import GpuView, gpu_views, match_runners
from kvtop.model.gpu_snapshots import GpuSnapshot, ProcSnapshot, RunnerProcess, SystemMemory
from kvtop.model.known import Known, Source
from kvtop.model.ledger import gpu_device_index, model_ledger, pair_devices
from kvtop.model.model_row import SHOW_PENDING

if TYPE_CHECKING:
    from kvtop.model.logstate import LogState
    from kvtop.model.views import AppState, ModelView

SegmentKind = Literal[
    "weights",
    "kv",
    "kv_swa",
    "recurrent",
    "compute",
    "output",
    "model",
    "overhead",
    "ollama",
    "other",
    "unattributed",
    "free",
]
"""``weights``/``kv``/``compute``: a model's parts; ``model``: a model's memory not broken down;
``overhead``: what NVML measures for a model's runner beyond its listed parts; ``ollama``: other
Ollama processes; ``other``: one foreign process; ``unattributed``: used memory nobody listed (or
RAM in use by the OS and other programs); ``free``."""

MODEL_KINDS = frozenset({"weights", "kv", "kv_swa", "recurrent", "compute", "output", "model", "overhead"})
"""Segment kinds that belong to a model (``Segment.model`` is set)."""

ModelKey = tuple[str, str]
"""``(name, digest)``, as the table keys a model."""

_PARTS: tuple[SegmentKind, ...] = ("weights", "kv", "compute")
_LEDGER_KINDS = frozenset({"weights", "kv", "kv_swa", "recurrent", "compute", "output"})
"""The ledger's components that are buffers on a device (the map draws each)."""
_OVERHEAD_MIN_BYTES = 1024 * 1024
"""A model's measured bytes beyond its listed parts form a segment from this size on; less is the
log's rounding (it prints MiB with two decimals per buffer), not memory."""


@dataclass(frozen=True, slots=True)
class Segment:
    """One stretch of a device's bar.

    Attributes:
        kind: What it is (:data:`SegmentKind`).
        bytes: Its size (≥ 0).
        source: Where the size comes from (``allocated``, ``reported`` or ``estimated``).
        label: The model name, ``user program`` of a foreign process, or the kind in words.
        model: ``(name, digest)`` for a model's segments, else None.
        note: How the size was found, in plain words.
    """

    kind: SegmentKind
    bytes: int
    source: Source
    label: str
    model: ModelKey | None = None
    note: str = ""
    signed_bytes: int | None = None
    """An ``overhead`` segment's remainder as computed (measured − listed, ``model.ledger``), negative when the log
    lists more than is measured (``bytes`` is then 0); None for every other segment."""


@dataclass(frozen=True, slots=True)
class DeviceBar:
    """One device: a GPU, the ``/api/ps`` VRAM figure when there is no telemetry, or RAM.

    Attributes:
        key: ``GPU0``, ``AMD1``, ``VRAM`` (no telemetry) or ``RAM``.
        title: ``GPU 0 NVIDIA RTX A6000``, ``VRAM (/api/ps, no GPU telemetry)``, ``RAM``.
        total_bytes / free_bytes: As the driver or psutil reports them (RAM: free is
            ``available``); None when not known.
        segments: In drawing order; zero-byte parts are left out.
        error: The device failed (lost, not accessible): in plain words.
        note: Why the split is incomplete.
    """

    key: str
    title: str
    total_bytes: int | None
    free_bytes: int | None
    segments: tuple[Segment, ...] = ()
    error: str | None = None
    note: str | None = None

    @property
    def used_bytes(self) -> int | None:
        """``total − free`` when both are known."""
        if self.total_bytes is None or self.free_bytes is None:
            return None
        return max(0, self.total_bytes - self.free_bytes)


@dataclass(frozen=True, slots=True)
class MemoryMap:
    """Every device's bar, and the models in the server's order (their colours follow it).

    Attributes:
        bars: GPUs (or the ``VRAM`` bar), then RAM.
        models: ``(name, digest)`` of the loaded models, in the server's order.
        telemetry: True when GPU telemetry works (the GPU bars are measured).
        status: The GPU status line (``GPU telemetry: …``) when it does not.
    """

    bars: tuple[DeviceBar, ...] = ()
    models: tuple[ModelKey, ...] = ()
    telemetry: bool = False
    status: str = ""


def _log_parts(devices: Mapping[str, Mapping[str, int]], device: str) -> dict[str, int]:
    return {p: devices.get(p, {}).get(device, 0) for p in _PARTS if device in devices.get(p, {})}


def _gpu_log_devices(view: ModelView) -> list[str]:
    names = {d for p in _PARTS for d in view.devices.get(p, {}) if gpu_device_index(d) is not None}
    return sorted(names, key=lambda d: (gpu_device_index(d) or 0, d))


def _cpu_ledger_parts(view: ModelView) -> dict[SegmentKind, int]:
    """The ledger's buffers on CPU-side devices, per component (both KV pools, recurrent state and output apart)."""
    out: dict[SegmentKind, int] = {}
    for r in model_ledger(view, None).rows:
        if r.component in _LEDGER_KINDS and r.device not in ("?", "host") and gpu_device_index(r.device) is None:
            kind: SegmentKind = r.component  # type: ignore[assignment]
            out[kind] = out.get(kind, 0) + r.bytes
    return out


def _pair_devices(view: ModelView, on_gpus: Sequence[tuple[int, int | None]]) -> dict[int, str] | None:
    """GPU index -> the log device whose parts it holds, or None when no pairing fits (``model.ledger``)."""
    return pair_devices(view.devices, on_gpus, _PARTS)


def _model_segments(
    view: ModelView, budget: int, source_whole: Source, *, log_device: str | None, alone: bool, where: str
) -> list[Segment]:
    """A model's segments on one device holding ``budget`` bytes of it (measured or reported).

    ``log_device``: the runner log's name for this device (allocated parts); ``alone``: the whole
    model is on this device (its whole-model figures apply as they are)."""
    key = (view.name, view.digest)
    out: list[Segment] = []
    if log_device is not None:
        # the ledger's rows on this device (model.ledger: both KV pools, recurrent state, output buffer)
        for r in model_ledger(view, None).on(log_device):
            kind: SegmentKind = r.component if r.component in _LEDGER_KINDS else "compute"  # type: ignore[assignment]
            out.append(Segment(kind, r.bytes, "allocated", view.name, key, f"the runner log's {r.note}"))
        remainder = budget - sum(s.bytes for s in out)
        # never hidden: the unexplained remainder (measured − listed) is a segment even at 0 or below; below 1 MiB
        # it is the log's rounding (two decimals of MiB per buffer) and takes no cell (``bytes`` 0)
        return [
            *out,
            Segment(
                "overhead",
                remainder if remainder >= _OVERHEAD_MIN_BYTES else 0,
                "estimated",
                view.name,
                key,
                f"{where} − the parts listed: unexplained (CUDA context, buffers the log does not itemise)",
                signed_bytes=remainder,
            ),
        ]
    else:
        m = view.memory
        known: list[tuple[SegmentKind, Known[int]]] = [
            (p, k) for p, k in zip(_PARTS, (m.weights, m.kv, m.compute)) if k.value is not None and k.source is not None
        ]
        whole = sum(k.value or 0 for _, k in known)
        if alone and len(known) == 3 and whole <= budget:
            for p, k in known:
                if k.value:
                    out.append(Segment(p, k.value, k.source or "estimated", view.name, key, k.note))
        elif len(known) == 3 and whole > 0:
            # the log does not say what is where: the parts in proportion to the whole model's
            placed = 0
            for i, (p, k) in enumerate(known):
                n = budget - placed if i == len(known) - 1 else (k.value or 0) * budget // whole
                placed += n
                if n:
                    out.append(
                        Segment(
                            p,
                            n,
                            "estimated",
                            view.name,
                            key,
                            f"{where}: in proportion to the model's weights, KV and compute "
                            "(the log gives no per-device figures)",
                        )
                    )
            return out
        else:
            return (
                [
                    Segment(
                        "model",
                        budget,
                        source_whole,
                        view.name,
                        key,
                        f"{where}: not broken down (weights, KV or compute not known)",
                    )
                ]
                if budget
                else []
            )
    listed = sum(s.bytes for s in out)
    if budget - listed >= _OVERHEAD_MIN_BYTES:
        out.append(
            Segment(
                "overhead",
                budget - listed,
                "estimated",
                view.name,
                key,
                f"{where} − the parts listed: CUDA context and buffers not itemised",
            )
        )
    return out


def _gpu_bar(
    v: GpuView,
    models: Mapping[ModelKey, ModelView],
    on_gpus: Mapping[ModelKey, list[tuple[int, int | None]]],
    pairings: Mapping[ModelKey, dict[int, str] | None],
    loading: Mapping[int, str],
) -> DeviceBar:
    d = v.device
    prefix = "AMD" if d.vendor == "amd" else "GPU"
    key, title = f"{prefix}{d.index}", f"{prefix} {d.index} {d.name or '?'}"
    if d.error:
        return DeviceBar(key, title, d.memory_total_bytes, d.memory_free_bytes, error=d.error)
    segments: list[Segment] = []
    for mg in v.models:
        mkey = (mg.name, mg.digest)
        view = models.get(mkey)
        measured = mg.measured_bytes
        if view is None or measured is None:
            if measured:
                segments.append(Segment("model", measured, "reported", mg.name, mkey, "NVML: the runner's used memory"))
            continue
        gpus = on_gpus.get(mkey, [])
        pairing = pairings.get(mkey)
        segments.extend(
            _model_segments(
                view,
                measured,
                "reported",
                log_device=pairing.get(d.index) if pairing else None,
                alone=len(gpus) == 1 and not view.spilled,
                where=f"NVML's {measured:,} B on {prefix} {d.index}",
            )
        )
    rest = v.ollama_bytes
    for p in v.processes:
        if p.kind == "ollama" and p.pid in loading and p.gpu_memory_bytes:
            segments.append(
                Segment(
                    "ollama",
                    p.gpu_memory_bytes,
                    "reported",
                    loading[p.pid],
                    note=f"NVML: PID {p.pid}, a runner not paired with a loaded model yet",
                )
            )
            rest -= p.gpu_memory_bytes
    if rest > 0:
        segments.append(
            Segment(
                "ollama",
                rest,
                "reported",
                "other Ollama processes",
                note="NVML: Ollama processes no loaded model matches (GPU discovery, a runner starting)",
            )
        )
    for p in v.others:
        if p.gpu_memory_bytes:
            who = " ".join(x for x in (p.user, p.name) if x) or f"PID {p.pid}"
            segments.append(
                Segment(
                    "other",
                    p.gpu_memory_bytes,
                    "reported",
                    who,
                    note=f"NVML: PID {p.pid}" + (f" ({p.note})" if p.note else ""),
                )
            )
    if v.unattributed_bytes is not None:
        if v.unattributed_bytes:
            segments.append(
                Segment(
                    "unattributed",
                    v.unattributed_bytes,
                    "estimated",
                    "unattributed",
                    note="total − free − listed processes: driver, reserve, unlisted contexts",
                )
            )
    elif d.memory_total_bytes is not None and d.memory_free_bytes is not None:
        rest = max(0, d.memory_total_bytes - d.memory_free_bytes - sum(s.bytes for s in segments))
        if rest:
            segments.append(
                Segment(
                    "unattributed", rest, "estimated", "used", note="total − free: the driver does not break it down"
                )
            )
    if d.memory_free_bytes:
        segments.append(Segment("free", d.memory_free_bytes, "reported", "free", note="NVML free memory"))
    return DeviceBar(key, title, d.memory_total_bytes, d.memory_free_bytes, tuple(segments), note=v.note)


def _vram_bar(models: Sequence[ModelView]) -> DeviceBar | None:
    """No GPU telemetry: what ``/api/ps`` says each model holds in VRAM."""
    segments: list[Segment] = []
    for m in models:
        if m.cloud or not m.size_vram_bytes:
            continue
        devices = _gpu_log_devices(m)
        if len(devices) == 1:
            segments.extend(
                _model_segments(
                    m,
                    m.size_vram_bytes,
                    "reported",
                    log_device=devices[0],
                    alone=True,
                    where=f"/api/ps size_vram {m.size_vram_bytes:,} B",
                )
            )
        else:
            segments.extend(
                _model_segments(
                    m,
                    m.size_vram_bytes,
                    "reported",
                    log_device=None,
                    alone=not m.spilled,
                    where=f"/api/ps size_vram {m.size_vram_bytes:,} B",
                )
            )
    if not segments:
        return None
    return DeviceBar(
        "VRAM", "VRAM (/api/ps, no GPU telemetry)", None, None, tuple(segments), note="nothing measured the GPU"
    )


def _ram_bar(system: SystemMemory | None, models: Sequence[ModelView]) -> DeviceBar | None:
    segments: list[Segment] = []
    for m in models:
        if not m.spilled or m.size_bytes is None or m.size_vram_bytes is None:
            continue
        key = (m.name, m.digest)
        cpu = _cpu_ledger_parts(m)
        if cpu:
            for kind, nbytes in cpu.items():
                segments.append(
                    Segment(
                        kind,
                        nbytes,
                        "allocated",
                        m.name,
                        key,
                        f"the runner log's CPU-side {kind} buffers (CPU, CPU_Mapped, *_Host)",
                    )
                )
        else:
            # both /api/ps figures, as the table's VRAM+RAM (model.placement.vram_ram) and ollama ps's split
            segments.append(
                Segment(
                    "model",
                    m.size_bytes - m.size_vram_bytes,
                    "reported",
                    m.name,
                    key,
                    f"/api/ps size − size_vram = {m.size_bytes - m.size_vram_bytes:,} B",
                )
            )
    if system is None or system.ram_total_bytes is None:
        if not segments:
            return None
        return DeviceBar("RAM", "RAM", None, None, tuple(segments), note="system memory not read")
    total, free = system.ram_total_bytes, system.ram_available_bytes
    if free is not None:
        rest = total - free - sum(s.bytes for s in segments)
        if rest > 0:
            segments.append(
                Segment(
                    "unattributed",
                    rest,
                    "estimated",
                    "OS and other programs",
                    note="total − available − the models' CPU parts",
                )
            )
        if free:
            segments.append(Segment("free", free, "reported", "free", note="psutil: available"))
    return DeviceBar("RAM", "RAM", total, free, tuple(segments))


def _cells_fit(r: RunnerProcess, m: ModelView) -> bool:
    if r.ctx_size is None or m.context.value is None:
        return False
    return r.ctx_size == m.context.value * (r.parallel or m.parallel.value or 1)


RECENT_LOAD_S = 30.0
"""A runner log load that started this many seconds before the process sample is a new one."""


def _recent(when: datetime | None, now_s: float) -> bool:
    if when is None or when.tzinfo is None:
        return False
    return 0 <= now_s - when.timestamp() <= RECENT_LOAD_S


def loading_runners(
    procs: ProcSnapshot | None,
    models: Sequence[ModelView],
    log: LogState | None = None,
    blob_names: Mapping[str, str] | None = None,
) -> dict[int, str]:
    """``loading <model>`` per runner PID that no loaded model matches yet but that is a load in progress.

    A runner is matched to a loaded model by its ``--model`` blob and the model's ``/api/show``
    ``FROM`` blob (``kvtop.model.gpu.match_runners``). Until then NVML's bytes for it would read as
    "other Ollama processes"; it is a load in progress when the runner log's newest load of its blob
    has not finished (no ``model loaded`` / ``llama runner started`` / ``llama-server started`` yet;
    docs/ollama-internals.md §4.2, §4.4),
    or is the log's newest load and ``/api/ps`` never listed its blob or it started less than
    :data:`RECENT_LOAD_S` before the process sample (loaded, not listed yet: Ollama lists a runner
    once it is up; an older one of a blob listed before is a runner exiting), or when ``/api/ps`` lists a model whose ``/api/show`` has not been
    read yet (its blob is not known) and that model is the runner's by name or, alone of the waiting
    rows, by its cells (``-c`` = ``num_ctx`` × slots). The name comes from a model ``/api/ps`` showed earlier with this
    blob (``blob_names``), the log's load, the runner's ``--model`` name (MLX) or that waiting row;
    without one the label is ``loading a model``. Runners that are neither stay unnamed.

    Args:
        procs: The process sample (its ``runners``); None gives ``{}``.
        models: The loaded models.
        log: The runner log read so far, None without one.
        blob_names: Weights blob -> the name ``/api/ps`` last showed for it (``AppState.blob_names``).
    """
    if procs is None or not procs.runners:
        return {}
    waiting = [m for m in models if not m.cloud and m.model_blob is None and m.kv_unavailable == SHOW_PENDING]
    out: dict[int, str] = {}
    for pid, match in match_runners(procs, models).items():
        if match.model is not None:
            continue
        r = match.runner
        load = log.latest_load(r.blob) if log is not None and r.blob else None
        name = (blob_names or {}).get(r.blob or "") or (load.model_name if load is not None else None) or r.model_name
        waits = [m for m in waiting if m.name == name] if name else [m for m in waiting if _cells_fit(r, m)]
        if name is None and len(waits) == 1:
            name = waits[0].name
        newest = (
            load is not None
            and log is not None
            and load is log.loads[-1]
            and (r.blob not in (blob_names or {}) or _recent(load.time, procs.taken_at))
        )
        if (load is not None and not load.ready) or len(waits) == 1 or newest:
            out[pid] = f"loading {name}" if name else "loading a model"
    return out


def memory_map(
    gpu: GpuSnapshot | None,
    procs: ProcSnapshot | None,
    models: Sequence[ModelView],
    *,
    views: Sequence[GpuView] | None = None,
    loading: Mapping[int, str] | None = None,
) -> MemoryMap:
    """The map of one server's machine.

    Args:
        gpu: The GPU sample (None before one, or for a server on another machine).
        procs: The process sample taken with it.
        models: The loaded models (``AppState.models``), in the server's order.
        views: ``gpu_views(gpu, procs, models)`` when the caller has it already.
        loading: :func:`loading_runners`: runners drawn as ``loading <model>`` instead of "other
            Ollama processes".

    Returns:
        A :class:`MemoryMap`; never raises on missing data (a missing figure leaves a part out).
    """
    order = tuple((m.name, m.digest) for m in models if not m.cloud)
    by_key = {(m.name, m.digest): m for m in models}
    system = gpu.system if gpu is not None else None
    bars: list[DeviceBar] = []
    telemetry = gpu is not None and gpu.ok
    if telemetry:
        views = gpu_views(gpu, procs, models) if views is None else views
        on_gpus: dict[ModelKey, list[tuple[int, int | None]]] = {}
        for v in views:
            for mg in v.models:
                on_gpus.setdefault((mg.name, mg.digest), []).append((v.device.index, mg.measured_bytes))
        pairings = {k: _pair_devices(by_key[k], g) for k, g in on_gpus.items() if k in by_key}
        bars.extend(_gpu_bar(v, by_key, on_gpus, pairings, loading or {}) for v in views)
    else:
        vram = _vram_bar(models)
        if vram is not None:
            bars.append(vram)
    ram = _ram_bar(system, models)
    if ram is not None:
        bars.append(ram)
    status = "" if telemetry else (gpu.status if gpu is not None else "GPU telemetry: waiting for the first sample")
    return MemoryMap(tuple(bars), order, telemetry, status)


def state_memory_map(state: AppState) -> MemoryMap:
    """:func:`memory_map` of an ``AppState`` (its GPU, process and model samples, its log)."""
    return memory_map(
        state.gpu,
        state.procs,
        state.models,
        loading=loading_runners(state.procs, state.models, state.log, state.blob_names),
    )
