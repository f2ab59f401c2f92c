"""One model load as the log tells it (:class:`Load`), and how its lines build it: the mutable
builder that adds up allocations per component and device, replaces a printed-again sequence,
and resolves flash attention. The rules are listed in :mod:`kvtop.logparse.loads`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kvtop.logparse.events import (
    ContextOverTraining,
    FlashAttentionForcedOff,
    KvTypeFallback,
    LoadFailed,
    LogEvent,
    Oom,
    SchedulerEstimate,
)
from kvtop.logparse.fit_events import FitOverflow, FitPlan
from kvtop.logparse.memory_events import ContextCheckpoint, PromptCacheState

COMPONENTS = ("weights", "kv", "compute")
"""Memory components of the JSON document (allocations only)."""

_ROUNDING_SLACK = 64 * 1024
"""KV buffer lines and size lines both print MiB with two decimals: sums may differ by this much."""

_ORDER = {"weights": 0, "kv": 1, "recurrent": 1, "compute": 2}


@dataclass(frozen=True, slots=True)
class FitFacts:
    """What llama.cpp's fit pass said about a load before it was loaded (Era C, ``common_params_fit_impl``;
    docs/ollama-internals.md §4.4): sizes in bytes, None where no line said it; the last line of each kind wins.

    Attributes:
        memory: ``device`` (GPU memory) or ``host`` (a CPU-only runner).
        target_bytes: The margin the fit keeps free on each device (``LLAMA_ARG_FIT_TARGET``, default 1024 MiB,
            plus Ollama's projector pad).
        projected_bytes / free_bytes: The memory the load was projected to use, and the memory free then.
        left_bytes: The least memory the fit leaves free on a device (``will leave L >= T MiB``).
        shortfall_bytes: How much memory the fit had to cut to keep the margin (``need to reduce … by R MiB``).
        overflowing_layers: Layers that overflow the devices after the fit (sum of the per-device lines).
        devices: Per device as printed (``ROCm0``): ``margin_bytes`` (free after the fit, negative for a
            deficit), ``used_bytes``, ``layers`` and ``overflowing``, each only when printed.
    """

    memory: str = "device"
    target_bytes: int | None = None
    projected_bytes: int | None = None
    free_bytes: int | None = None
    left_bytes: int | None = None
    shortfall_bytes: int | None = None
    overflowing_layers: int | None = None
    devices: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The facts as a JSON-ready dict (``devices`` copied)."""
        return {
            "memory": self.memory,
            "target_bytes": self.target_bytes,
            "projected_bytes": self.projected_bytes,
            "free_bytes": self.free_bytes,
            "left_bytes": self.left_bytes,
            "shortfall_bytes": self.shortfall_bytes,
            "overflowing_layers": self.overflowing_layers,
            "devices": {d: dict(v) for d, v in self.devices.items()},
        }


@dataclass(frozen=True, slots=True)
class SingleGpu:
    """The one GPU Ollama's scheduler gave a load (``… in single GPU, loading gpu=… available=… required=…``;
    v0.1.3x–v0.11 ``server/sched.go`` ``pickBestFullFitByLibrary``, docs/placement.md §1): its id, its free memory
    then and the model's estimated VRAM, in bytes (None where the line does not say)."""

    gpu: str
    available_bytes: int | None
    required_bytes: int | None


@dataclass(frozen=True, slots=True)
class Load:
    """One model load as the log tells it. Sizes in bytes; None where the log does not say."""

    index: int
    first_line: int
    last_line: int
    time: datetime | None
    era: str | None
    engine: str | None
    model_blob: str | None
    model_name: str | None
    mmproj_blob: str | None
    port: int | None
    pid: int | None
    num_ctx_total: int | None
    parallel: int | None
    num_ctx_per_seq: int | None
    kv_type_k: str | None
    kv_type_v: str | None
    flash_attention: str | None
    flash_attention_reason: str | None
    flash_attention_requested: str | None
    layers_offloaded: int | None
    layers_total: int | None
    layers_requested: int | None
    memory: Mapping[str, Mapping[str, int]]
    """``weights``/``kv``/``compute`` (and ``output``/``input``/``recurrent``) → device → bytes."""
    kv_bytes: int | None
    kv_bytes_stated: bool
    estimate: SchedulerEstimate | None
    fit_overflowing: int | None
    device_free: Mapping[str, int]
    ready: bool
    events: tuple[LogEvent, ...]
    """The incidents and requests of this load (OOM, failures, fallbacks, truncations…)."""
    n_ctx_train: int | None = None
    """The model's training context, when llama.cpp printed it (``n_ctx_per_seq (N) <|> n_ctx_train (M)``)."""
    over_training: ContextOverTraining | None = None
    """llama.cpp's ``n_ctx_per_seq (N) > n_ctx_train (M)`` warning for this load (corpus 006), if printed."""
    event_counts: Mapping[str, int] | None = None
    """Incidents per kind when ``events`` keeps only some of them (:class:`LoadStream`); None: ``events`` is all."""
    events_left_out: int = 0
    """Incidents that give a finding line each but are not in ``events`` (:data:`MAX_FINDING_EVENTS` reached)."""
    fit: FitFacts | None = None
    """llama.cpp's fit pass for this load (Era C), when the log has its lines."""
    single_gpu: SingleGpu | None = None
    """The scheduler's ``new model will fit in available VRAM in single GPU`` choice for this load (corpus 051)."""
    kv_swa: Mapping[str, int] = field(default_factory=dict)
    """Device → bytes of an interleaved-SWA model's sliding-window KV cache (``creating SWA KV cache`` and the
    buffer lines after it; corpus 042, fixture ollama-16480); part of ``memory["kv"]``, empty when not iSWA."""
    recurrent_size_bytes: int | None = None
    """``llama_memory_recurrent: size = X MiB (…)``: a hybrid model's recurrent state in all (corpus 043)."""
    projector_bytes: int | None = None
    """llama-server's ``[mtmd] estimated worst-case memory usage of mmproj`` (bytes), when printed."""
    prompt_cache: PromptCacheState | None = None
    """The newest ``cache state:`` line of this runner: its host prompt cache (llama-server)."""
    checkpoint_bytes: int | None = None
    """The slots' live context checkpoints in host RAM: per slot, the checkpoints its current task created
    (``created context checkpoint N of M (…, size = X MiB)``; a checkpoint N drops the slot's N and later ones)."""
    checkpoint_count: int = 0
    """How many checkpoints ``checkpoint_bytes`` adds up."""
    draft: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    """A draft model's buffers (``weights``/``kv``/``compute``/``output`` → device → bytes): the load lines after
    ``loading draft model``, kept apart from the target's ``memory`` (fixture llama-server-runs/draft-…)."""
    draft_blob: str | None = None
    """The draft model's weights blob, when its path is one."""

    @property
    def estimates(self) -> dict[str, int | None]:
        """The scheduler estimate's ``memory.required.kv/full/partial``."""
        e = self.estimate
        return {
            "kv": e.kv_bytes if e else None,
            "full": e.full_bytes if e else None,
            "partial": e.partial_bytes if e else None,
        }

    def findings(self) -> list[str]:
        """Plain-language problems: spill, fallbacks, forced-off flash attention, OOM, failures.

        Weights in ``CPU_Mapped``/``CPU`` buffers count as spill only when not every layer is
        offloaded: with full offload they are the mmap'ed file and the input embeddings, which
        llama.cpp always keeps on the CPU.
        """
        out: list[str] = []
        over = self.over_training
        if over is not None:
            out.append(
                f"context over training: {over.n_ctx_per_seq} tokens per slot > the model's training context "
                f"{over.n_ctx_train} (llama.cpp: possible training context overflow)"
            )
        per_device = [d for c in COMPONENTS for d in self.memory.get(c, {})]
        gpu = any(not is_cpu_device(d) for d in per_device) or bool(self.layers_offloaded)
        full = (
            self.layers_offloaded is not None
            and self.layers_total is not None
            and (self.layers_offloaded >= self.layers_total)
        )
        if per_device and not gpu:
            out.append("CPU only: every buffer is in system memory")
        if self.layers_offloaded is not None and self.layers_total is not None and not full:
            out.append(f"spill: only {self.layers_offloaded}/{self.layers_total} layers offloaded to GPU")
        if self.fit_overflowing:
            out.append(f"spill: {self.fit_overflowing} layers overflow the GPU (llama-server fit)")
        if gpu:
            for component, label in (("kv", "KV cache"), ("weights", "weights")):
                if component == "weights" and full:
                    continue
                cpu = sorted(d for d, b in self.memory.get(component, {}).items() if is_cpu_device(d) and b > 0)
                if cpu:
                    out.append(f"spill: {label} partly in system memory ({', '.join(cpu)})")
        counts: dict[str, int] = {}
        for e in self.events:
            counts[e.kind] = counts.get(e.kind, 0) + 1
            if isinstance(e, KvTypeFallback):
                out.append(f"KV type fallback to f16 (requested {e.requested or '?'}): {e.reason}")
            elif isinstance(e, FlashAttentionForcedOff):
                out.append(f"flash attention forced off: {e.reason}")
            elif isinstance(e, Oom):
                out.append(f"out of memory: {e.reason}")
            elif isinstance(e, LoadFailed):
                out.append(f"load failed: {e.reason}")
        if self.events_left_out:
            out.append(f"… {self.events_left_out} more incident(s) like the ones above (--json's events lists all)")
        if self.event_counts is not None:
            counts = dict(self.event_counts)
        if counts.get("truncation"):
            out.append(f"{counts['truncation']} prompt truncation(s)")
        if counts.get("context_overflow"):
            out.append(f"{counts['context_overflow']} prompt(s) over the context (chat history cut or HTTP 400)")
        if counts.get("prompt_rejected"):
            out.append(f"{counts['prompt_rejected']} prompt(s) rejected: longer than the context")
        if counts.get("eviction"):
            out.append(f"{counts['eviction']} eviction line(s)")
        return out


def is_cpu_device(device: str) -> bool:
    """True for a buffer device in system memory (``CPU``, ``CPU_Mapped``, ``CUDA_Host``, ``BLAS``)."""
    d = device.upper()
    return d == "CPU" or d.startswith("CPU_") or d.endswith("_HOST") or d == "BLAS"


class _Builder:
    """The mutable state of one load while events are read (slotted: a grouper keeps one per load
    of the log kept, thousands in a busy log)."""

    __slots__ = (
        "alloc",
        "checkpoints",
        "device_free",
        "draft_alloc",
        "draft_blob",
        "drafting",
        "engine",
        "era",
        "era_rank",
        "estimate",
        "events",
        "fa_ollama_off",
        "fa_requested",
        "fa_strong",
        "fa_weak",
        "first_line",
        "fit",
        "fit_devices",
        "fit_overflowing",
        "single_gpu",
        "has_alloc",
        "has_request",
        "has_spawn",
        "index",
        "kv_ctx_set",
        "kv_sizes",
        "kv_swa",
        "kv_swa_alloc",
        "last_line",
        "max_order",
        "mmproj_blob",
        "model_blob",
        "model_name",
        "over_training",
        "pid",
        "port",
        "projector_bytes",
        "prompt_cache",
        "ready",
        "recurrent_size",
        "time",
        "touched",
        "values",
    )

    def __init__(self, index: int, event: LogEvent) -> None:
        self.index = index
        self.first_line = event.line_no
        self.last_line = event.line_no
        self.time = event.time
        self.era: str | None = None
        self.era_rank = 0
        self.engine: str | None = None
        self.model_blob: str | None = None
        self.model_name: str | None = None
        self.mmproj_blob: str | None = None
        self.port: int | None = None
        self.pid: int | None = None
        self.values: dict[str, tuple[int, Any]] = {}
        self.fa_strong: tuple[str, str] | None = None
        self.fa_weak: tuple[str, str] | None = None
        self.fa_requested: str | None = None
        self.fa_ollama_off = False
        """Ollama said flash attention is not supported (by the model or GPU) before spawning this runner."""
        self.alloc: dict[str, dict[str, int]] = {}
        self.kv_sizes: list[int] = []
        self.max_order = -1
        self.kv_swa: bool | None = None
        """Which iSWA cache the following KV lines describe (``creating [non-]SWA KV cache``); None: not iSWA."""
        self.kv_ctx_set = False
        """A KV summary of this context creation already gave the context (an iSWA SWA cache never does)."""
        self.kv_swa_alloc: dict[str, int] = {}
        """The SWA cache's KV buffers per device (a part of ``alloc["kv"]``)."""
        self.recurrent_size: int | None = None
        self.projector_bytes: int | None = None
        self.prompt_cache: PromptCacheState | None = None
        self.checkpoints: dict[int | None, dict[int, int]] = {}
        """Slot → checkpoint number → bytes (the slot's current task's checkpoints)."""
        self.drafting = False
        """The lines read now are a draft model's load (after ``loading draft model``)."""
        self.draft_alloc: dict[str, dict[str, int]] = {}
        self.draft_blob: str | None = None
        self.over_training: ContextOverTraining | None = None
        self.estimate: SchedulerEstimate | None = None
        self.fit_overflowing: int | None = None
        self.fit: dict[str, Any] | None = None
        """The fit pass's facts so far (:class:`FitFacts` fields but ``devices``); None: no fit line."""
        self.fit_devices: dict[str, dict[str, int]] = {}
        self.single_gpu: SingleGpu | None = None
        self.device_free: dict[str, int] = {}
        self.has_spawn = False
        self.has_request = False
        self.has_alloc = False
        self.ready = False
        self.events: list[LogEvent] = []
        self.touched = 0
        """Events that changed this builder (``LoadGrouper`` rebuilds a load only when it moved)."""

    # values with provenance: a higher rank (printed by the runner) wins over a lower one
    def put(self, name: str, value: Any, rank: int) -> None:
        if value is None:
            return
        old = self.values.get(name)
        if old is None or rank >= old[0]:
            self.values[name] = (rank, value)

    def get(self, name: str) -> Any:
        v = self.values.get(name)
        return v[1] if v is not None else None

    def set_era(self, era: str | None, rank: int) -> None:
        if era is not None and rank >= self.era_rank:
            self.era, self.era_rank = era, rank

    def blob_ok(self, blob: str | None) -> bool:
        return blob is None or self.model_blob is None or blob == self.model_blob

    def set_blob(self, blob: str | None) -> None:
        if blob is not None and self.model_blob is None:
            self.model_blob = blob

    def pre_spawn(self) -> bool:
        return not self.has_spawn and not self.has_alloc and not self.ready

    def add_alloc(self, component: str, device: str, nbytes: int) -> None:
        order = _ORDER.get(component)
        if order is not None:
            seen = self.alloc.get(component, {})
            if order < self.max_order or (component != "kv" and component != "recurrent" and device in seen):
                self.reset_epoch()
            self.max_order = max(self.max_order, order)
        per = self.alloc.setdefault(component, {})
        per[device] = per.get(device, 0) + nbytes
        if component == "kv" and self.kv_swa:
            self.kv_swa_alloc[device] = self.kv_swa_alloc.get(device, 0) + nbytes

    def add_checkpoint(self, e: ContextCheckpoint) -> None:
        """A slot's checkpoint N: the slot's checkpoints N and later are replaced (a new task numbers from 1)."""
        slot = self.checkpoints.setdefault(e.slot, {})
        for number in [k for k in slot if k >= e.number]:
            del slot[number]
        slot[e.number] = e.size_bytes

    def add_kv_size(self, size: int) -> None:
        if self.max_order > 1:
            self.reset_epoch()
        self.max_order = max(self.max_order, 1)
        self.kv_sizes.append(size)

    def reset_epoch(self) -> None:
        self.alloc = {}
        self.kv_sizes = []
        self.max_order = -1
        self.kv_swa = None
        self.kv_swa_alloc = {}
        self.kv_ctx_set = False

    def build(self, server_era: str | None) -> Load:
        n_ctx = self.get("num_ctx_total")
        parallel = self.get("parallel")
        per_seq = self.get("num_ctx_per_seq")
        if parallel is None and n_ctx and per_seq and n_ctx % per_seq == 0:
            parallel = n_ctx // per_seq
        if per_seq is None and n_ctx and parallel:
            per_seq = n_ctx // parallel
        if n_ctx is None and per_seq and parallel:  # the 2024 server's slot lines: n_slots × n_ctx_slot
            n_ctx = per_seq * parallel
        if self.fa_strong is not None:
            fa: str | None = self.fa_strong[0]
            fa_reason: str | None = self.fa_strong[1]
        elif self.fa_weak is not None:
            fa, fa_reason = self.fa_weak
        else:
            fa = fa_reason = None
        kv_bytes: int | None
        buffers = sum(self.alloc.get("kv", {}).values())
        if self.kv_sizes and sum(self.kv_sizes) >= buffers - _ROUNDING_SLACK:
            kv_bytes, stated = sum(self.kv_sizes), True
        elif self.alloc.get("kv"):  # (also when a size line is missing, e.g. an iSWA SWA cache's line was cut)
            kv_bytes, stated = sum(self.alloc["kv"].values()), False
        else:
            kv_bytes, stated = None, False
        memory: dict[str, dict[str, int]] = {c: dict(self.alloc.get(c, {})) for c in COMPONENTS}
        for c, per in self.alloc.items():
            if c not in memory:
                memory[c] = dict(per)
        return Load(
            index=self.index,
            first_line=self.first_line,
            last_line=self.last_line,
            time=self.time,
            era=self.era if self.era is not None else server_era,
            engine=self.engine,
            model_blob=self.model_blob,
            model_name=self.model_name,
            mmproj_blob=self.mmproj_blob,
            port=self.port,
            pid=self.pid,
            num_ctx_total=n_ctx,
            parallel=parallel,
            num_ctx_per_seq=per_seq,
            kv_type_k=self.get("kv_type_k"),
            kv_type_v=self.get("kv_type_v"),
            flash_attention=fa,
            flash_attention_reason=fa_reason,
            flash_attention_requested=self.fa_requested,
            layers_offloaded=self.get("layers_offloaded"),
            layers_total=self.get("layers_total"),
            layers_requested=self.get("layers_requested"),
            memory=memory,
            kv_bytes=kv_bytes,
            kv_bytes_stated=stated,
            estimate=self.estimate,
            fit_overflowing=self.fit_overflowing,
            device_free=dict(self.device_free),
            ready=self.ready,
            events=tuple(self.events),
            n_ctx_train=self.get("n_ctx_train"),
            over_training=self.over_training,
            fit=self.fit_facts(),
            single_gpu=self.single_gpu,
            kv_swa=dict(self.kv_swa_alloc),
            recurrent_size_bytes=self.recurrent_size,
            projector_bytes=self.projector_bytes,
            prompt_cache=self.prompt_cache,
            checkpoint_bytes=sum(b for slot in self.checkpoints.values() for b in slot.values())
            if self.checkpoints
            else None,
            checkpoint_count=sum(len(slot) for slot in self.checkpoints.values()),
            draft={c: dict(per) for c, per in self.draft_alloc.items()},
            draft_blob=self.draft_blob,
        )

    def add_fit(self, e: FitPlan | FitOverflow) -> None:
        """One line of the fit pass: its facts replace the same facts of an earlier line."""
        facts = self.fit if self.fit is not None else {}
        self.fit = facts
        if isinstance(e, FitOverflow):
            self.fit_overflowing = (self.fit_overflowing or 0) + e.overflowing
            dev = self.fit_devices.setdefault(e.device, {})
            dev["layers"], dev["overflowing"] = e.layers, e.overflowing
            if e.used_bytes is not None:
                dev["used_bytes"] = e.used_bytes
            if e.free_bytes is not None:
                dev["margin_bytes"] = e.free_bytes
            return
        facts["memory"] = e.memory if e.device is None else facts.get("memory", "device")
        for name in ("projected_bytes", "free_bytes", "left_bytes", "target_bytes", "shortfall_bytes"):
            value = getattr(e, name)
            if value is not None:
                facts[name] = value
        if e.device is not None and e.margin_bytes is not None:
            self.fit_devices.setdefault(e.device, {})["margin_bytes"] = e.margin_bytes

    def fit_facts(self) -> FitFacts | None:
        """The :class:`FitFacts` of the lines so far; None when the load has no fit line."""
        if self.fit is None:
            return None
        return FitFacts(
            devices={d: dict(v) for d, v in self.fit_devices.items()},
            overflowing_layers=self.fit_overflowing,
            **self.fit,
        )
