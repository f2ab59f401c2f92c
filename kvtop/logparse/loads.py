"""Group events into model loads and build the ``kvtop inspect-log --json`` document.

The document's shape and the conventions behind it are those of the corpus oracles
(``tests/fixtures/logs/expected/README`` = ``corpus/expected/README.md``):

- A load starts at a runner spawn with ``--model`` (``runner_started``), a load request, a
  scheduler decision (``offload`` estimate, ``loading first model``, ``new model will fit
  … loading``, ``loading model "model layers"``), or the first llama.cpp model/context/
  allocation line. Later lines of the same runner join it: fit/alloc/commit requests,
  repeated identical estimates, ``llama runner started``, ``loaded runners``.
- A llama.cpp model-load line (``loaded meta data … from``, ``using device``, ``srv
  load_model: loading``, ``llama.cpp: loading model from``) starts a new load only when the
  current one already has context/allocation lines or has finished starting.
- Allocations: lines for the same component and device add up within one context creation
  (an iSWA model prints two KV lines per device). When an allocation sequence is printed
  again (a fit/probe pass, then the real load: a weights or compute line for a device
  already seen, or a component earlier in weights → KV → compute order), the later
  sequence replaces the earlier one.
- Interleaved-SWA models build two caches (``creating non-SWA KV cache`` then ``creating SWA KV
  cache``, each with its size line): the context, slots and K/V types are the non-SWA cache's, the
  KV bytes are both caches' (the KV buffer lines' total when a size line is missing).
- A llama-server fit pass (``common_params_fit_impl: … N layers (M overflowing)``) runs before
  the model is loaded: the ``llama_model_loader`` line after it is the same load.
- The 2024 server's ``initializing slots`` / ``new slot`` lines give slots and per-slot context.
- Flash attention: a resolution by the runner wins (``flash_attn = 0|1``, ``Flash Attention
  was auto, set to …``, ``resolve_fused_ops``, ``forcing off``); otherwise Ollama's decision
  (``--flash-attn``, ``enabling flash attention``, ``FlashAttention:true|Enabled``, ``flash
  attention enabled but not supported by model|gpu`` = disabled); a
  complete A/B1 command line without ``--flash-attn`` means disabled; ``auto`` that is never
  resolved stays None.
- Events are counted per incident: consecutive OOM, load-failure, eviction, unload,
  forced-off or fallback lines of one load give one event.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from kvtop.logparse.cmdline import era_of_version
from kvtop.logparse.events import (
    Allocation,
    ContextOverTraining,
    ContextParams,
    DeviceFree,
    Eviction,
    FitOverflow,
    FlashAttention,
    FlashAttentionDecision,
    FlashAttentionForcedOff,
    KvSummary,
    KvTypeFallback,
    LoadDecision,
    LoadFailed,
    LoadRequest,
    LogEvent,
    ModelLoad,
    OffloadedLayers,
    Oom,
    RequestTiming,
    RunnerReady,
    RunnerStarted,
    SchedulerEstimate,
    ServerConfig,
    ServerListening,
    PromptRejected,
    Truncation,
    Unload,
)

COMPONENTS = ("weights", "kv", "compute")
"""Memory components of the JSON document (allocations only)."""

REPORTED_KINDS = frozenset({
    "truncation", "kv_type_fallback", "flash_attention_forced_off", "oom", "eviction", "load_failed", "unload",
    "request_timing", "prompt_rejected",
})
"""Event kinds listed in the document's ``events``."""

INCIDENT_KINDS = frozenset({"oom", "load_failed", "eviction", "unload", "flash_attention_forced_off",
                            "kv_type_fallback"})
"""Kinds whose consecutive lines (within one load) are one incident."""

INCIDENT_GAP_S = 60.0
"""Two lines of the same kind further apart than this are separate incidents."""

_ROUNDING_SLACK = 64 * 1024
"""KV buffer lines and size lines both print MiB with two decimals: sums may differ by this much."""

_ORDER = {"weights": 0, "kv": 1, "recurrent": 1, "compute": 2}
_FA_REQUEST = {"true": "enabled", "enabled": "enabled", "on": "enabled", "1": "enabled",
               "false": "disabled", "disabled": "disabled", "off": "disabled", "0": "disabled"}


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
            out.append(f"context over training: {over.n_ctx_per_seq} tokens per slot > the model's training context "
                       f"{over.n_ctx_train} (llama.cpp: possible training context overflow)")
        per_device = [d for c in COMPONENTS for d in self.memory.get(c, {})]
        gpu = any(not is_cpu_device(d) for d in per_device) or bool(self.layers_offloaded)
        full = self.layers_offloaded is not None and self.layers_total is not None and (
            self.layers_offloaded >= self.layers_total)
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
        "alloc", "device_free", "engine", "era", "era_rank", "estimate", "events", "fa_ollama_off", "fa_requested",
        "fa_strong", "fa_weak", "first_line", "fit_overflowing", "has_alloc", "has_request", "has_spawn", "index",
        "kv_ctx_set", "kv_sizes", "kv_swa", "last_line", "max_order", "mmproj_blob", "model_blob", "model_name",
        "over_training", "pid", "port", "ready", "time", "touched", "values",
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
        self.over_training: ContextOverTraining | None = None
        self.estimate: SchedulerEstimate | None = None
        self.fit_overflowing: int | None = None
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
        )


_GRAMMAR_ERA = {
    "sched_reserve": "C", "resolve_fused_ops": "C", "llama-server": "C",
    "llama_model_load_internal": "pre-A", "llama.cpp": "pre-A",
}


@dataclass
class _Grouper:
    """Walks the events once, building loads and the per-incident event list."""

    loads: list[_Builder] = field(default_factory=list)
    cur: _Builder | None = None
    pending: list[LogEvent] = field(default_factory=list)
    incidents: list[list[Any]] = field(default_factory=list)
    """``[event, load index or None]`` per reported incident, in log order."""
    version: str | None = None
    config: Mapping[str, str] | None = None

    def new(self, event: LogEvent) -> _Builder:
        b = _Builder(len(self.loads), event)
        self.loads.append(b)
        self.cur = b
        pending, self.pending = self.pending, []
        for p in pending:
            if isinstance(p, FlashAttentionDecision):
                b.fa_weak = (p.state, p.reason)
            elif isinstance(p, FlashAttentionForcedOff):
                b.fa_weak = ("disabled", p.reason)
                b.fa_ollama_off = True
        return b

    def current_or_new(self, event: LogEvent) -> _Builder:
        cur = self.cur
        if cur is None or cur.ready:
            return self.new(event)
        return cur

    def feed(self, e: LogEvent) -> None:
        cur = self.cur
        b: _Builder | None = None
        target: int | None = None
        """Index of the load a reported event belongs to (``len(loads)``: the next one)."""
        if isinstance(e, RunnerStarted):
            if e.model_blob is None and e.cmd is not None and e.model_name is None:
                return  # GPU-discovery runner (no --model)
            if cur is not None and cur.pre_spawn() and cur.blob_ok(e.model_blob):
                b = cur
            else:
                b = self.new(e)
            self.spawn(b, e)
        elif isinstance(e, LoadRequest):
            if (cur is not None and not cur.ready and cur.era in (None, "B2")
                    and (cur.has_spawn or cur.has_request or not cur.has_alloc)):
                b = cur
            else:
                b = self.new(e)
            self.request(b, e)
        elif isinstance(e, SchedulerEstimate):
            if (cur is not None and not cur.ready and not cur.has_alloc
                    and (cur.estimate is None or _same_estimate(cur.estimate, e))):
                b = cur
            else:
                b = self.new(e)
            self.estimate(b, e)
        elif isinstance(e, LoadDecision):
            if cur is not None and not cur.ready and not cur.has_alloc and cur.blob_ok(e.model_blob):
                b = cur
            elif e.message == "loading model via llama-server":
                return
            else:
                b = self.new(e)
            b.set_blob(e.model_blob)
            b.put("parallel", e.parallel, 1)
            b.put("layers_total", e.layers_total, 1)
            if e.layers_requested is not None and e.layers_requested >= 0:
                b.put("layers_requested", e.layers_requested, 1)
        elif isinstance(e, (ModelLoad, DeviceFree)):
            blob = e.model_blob if isinstance(e, ModelLoad) else None
            if cur is not None and not cur.has_alloc and not cur.ready and cur.blob_ok(blob):
                b = cur
            else:
                b = self.new(e)
            b.set_blob(blob)
            if isinstance(e, ModelLoad):
                b.set_era(_GRAMMAR_ERA.get(e.grammar), 1)
            else:
                b.device_free[e.device] = e.free_bytes
        elif isinstance(e, FlashAttentionForcedOff) and e.source == "ollama":
            # "flash attention enabled but not supported by model|gpu": Ollama does not ask the runner for
            # flash attention, so it is disabled for the load it is about to start (not unknown)
            if cur is not None and cur.pre_spawn():
                b = cur
                target = cur.index
                cur.fa_weak = ("disabled", e.reason)
                cur.fa_ollama_off = True
            else:
                target = len(self.loads)  # Ollama decides before it spawns the runner
                self.pending.append(e)
        elif isinstance(e, (Allocation, KvSummary, ContextParams, OffloadedLayers, FitOverflow, FlashAttention,
                            FlashAttentionForcedOff, ContextOverTraining)):
            b = self.current_or_new(e)
            self.runner_line(b, e)
            target = b.index
        elif isinstance(e, RunnerReady):
            if cur is not None:
                b = cur
                cur.ready = True
                cur.set_blob(e.model_blob)
        elif isinstance(e, FlashAttentionDecision):
            if cur is not None and cur.pre_spawn():
                b = cur
                cur.fa_weak = (e.state, e.reason)
            else:
                self.pending.append(e)
        elif isinstance(e, KvTypeFallback):
            if cur is not None and cur.pre_spawn():
                b = cur
                target = cur.index
            else:
                target = len(self.loads)  # Ollama warns before it spawns the runner
        elif isinstance(e, (Oom, LoadFailed)):
            if cur is not None:
                b = cur
                target = cur.index
                if isinstance(e, LoadFailed):
                    cur.set_blob(e.model_blob)
        elif isinstance(e, (Truncation, PromptRejected, RequestTiming)):
            if cur is not None:
                target = cur.index
        elif isinstance(e, ServerListening):
            if e.version:
                self.version = e.version
        elif isinstance(e, ServerConfig):
            self.config = e.env
        if b is not None:
            b.last_line = max(b.last_line, e.line_no)
            b.touched += 1
        if e.kind in REPORTED_KINDS:
            self.incident(e, target)

    def incident(self, e: LogEvent, load: int | None) -> None:
        """Record a reported event, unless it continues the previous incident of its kind."""
        if self.incidents and _continues(self.incidents[-1][0], self.incidents[-1][1], e, load):
            return
        self.incidents.append([e, load])

    def finish(self) -> None:
        """Attach each incident to its load (an incident announced for a load never started has none)."""
        for item in self.incidents:
            load = item[1]
            if load is not None and load >= len(self.loads):
                item[1] = None
            elif load is not None:
                self.loads[load].events.append(item[0])

    def spawn(self, b: _Builder, e: RunnerStarted) -> None:
        b.has_spawn = True
        b.set_blob(e.model_blob)
        if e.model_name is not None:
            b.model_name = e.model_name
        b.mmproj_blob = e.mmproj_blob or b.mmproj_blob
        b.port = e.port if e.port is not None else b.port
        b.pid = e.pid if e.pid is not None else b.pid
        b.set_era(e.era, 2)
        b.engine = e.engine or b.engine
        b.put("num_ctx_total", e.ctx_size, 1)
        b.put("parallel", e.parallel, 1)
        if e.n_gpu_layers is not None and e.n_gpu_layers >= 0:
            b.put("layers_requested", e.n_gpu_layers, 1)
        k = e.cache_type_k or e.kv_cache_type
        v = e.cache_type_v or e.kv_cache_type
        b.put("kv_type_k", k or None, 1)
        b.put("kv_type_v", v or None, 1)
        if e.flash_attn is not None:
            b.fa_requested = e.flash_attn
            state = _FA_REQUEST.get(e.flash_attn.lower())
            if state is not None:
                b.fa_weak = (state, f"--flash-attn {e.flash_attn}" if e.era == "C" else "--flash-attn")
        elif e.complete and e.era in ("A", "B1") and e.cmd is not None and not b.fa_ollama_off:
            b.fa_weak = ("disabled", "no --flash-attn on the runner command line")

    def request(self, b: _Builder, e: LoadRequest) -> None:
        b.has_request = True
        b.set_era("B2", 2)
        b.put("num_ctx_total", e.kv_size, 2)
        b.put("parallel", e.parallel, 2)
        if e.kv_cache_type:
            b.put("kv_type_k", e.kv_cache_type, 2)
            b.put("kv_type_v", e.kv_cache_type, 2)
        if e.flash_attention is not None:
            b.fa_requested = e.flash_attention
            state = _FA_REQUEST.get(e.flash_attention.lower())
            if state is not None:
                b.fa_weak = (state, f"load request FlashAttention:{e.flash_attention}")
        if e.gpu_layers is not None:
            b.put("layers_offloaded", e.gpu_layers, 1)

    @staticmethod
    def estimate(b: _Builder, e: SchedulerEstimate) -> None:
        b.estimate = e
        b.put("layers_total", e.layers_model, 1)
        b.put("layers_offloaded", e.layers_offload, 1)
        if e.layers_requested is not None and e.layers_requested >= 0:
            b.put("layers_requested", e.layers_requested, 1)

    @staticmethod
    def runner_line(b: _Builder, e: LogEvent) -> None:
        # a fit pass (``N layers (M overflowing)``) runs before the runner loads the model, so it does not
        # end the load's spawn phase: the ``llama_model_loader`` line that follows is the same load
        b.has_alloc = b.has_alloc or not isinstance(e, (FlashAttention, FlashAttentionForcedOff, FitOverflow))
        if isinstance(e, Allocation):
            b.add_alloc(e.component, e.device, e.bytes)
            b.set_era("B2" if e.grammar == "ollama" else _GRAMMAR_ERA.get(e.grammar), 1)
        elif isinstance(e, KvSummary):
            if e.swa is not None:  # llama_kv_cache_iswa: creating [non-]SWA KV cache, size = N cells
                if not e.swa:
                    b.kv_ctx_set = False  # a new pair of caches: the non-SWA one gives the context
                b.kv_swa = e.swa
                b.set_era(_GRAMMAR_ERA.get(e.grammar), 1)
                return
            if e.size_bytes is not None and not e.recurrent:
                b.add_kv_size(e.size_bytes)  # an iSWA model's two caches add up
            # the context, slots and K/V types are the full-context cache's: an iSWA model's SWA cache has
            # far fewer cells (n_swa × slots + n_ubatch) and may keep f16 when the main cache is quantized
            if not e.recurrent and not b.kv_swa and not (b.kv_ctx_set and e.cells is not None):
                b.put("kv_type_k", e.k_type, 3)
                b.put("kv_type_v", e.v_type, 3)
                if e.cells is not None and e.streams is not None:
                    b.put("num_ctx_total", e.cells * e.streams, 3)
                elif e.cells is not None and e.size_bytes is None:
                    b.put("num_ctx_total", e.cells, 2)
                b.put("parallel", e.seqs, 3)
                if e.cells is not None:
                    b.kv_ctx_set = True
            b.set_era(_GRAMMAR_ERA.get(e.grammar), 1)
        elif isinstance(e, ContextParams):
            if e.flash_attn is not None and e.flash_attn.lower() == "auto":
                b.fa_requested = "auto"
            b.put("num_ctx_total", e.n_ctx, 3)
            b.put("num_ctx_per_seq", e.n_ctx_per_seq, 3)
            b.put("n_ctx_train", e.n_ctx_train, 3)
            b.put("parallel", e.n_seq_max, 3)
            b.set_era(_GRAMMAR_ERA.get(e.grammar), 1)
        elif isinstance(e, OffloadedLayers):
            b.put("layers_offloaded", e.n, 3)
            b.put("layers_total", e.total, 3)
        elif isinstance(e, FitOverflow):
            b.fit_overflowing = (b.fit_overflowing or 0) + e.overflowing
            b.set_era("C", 1)
        elif isinstance(e, ContextOverTraining):
            b.over_training = e
            b.put("num_ctx_per_seq", e.n_ctx_per_seq, 3)
            b.put("n_ctx_train", e.n_ctx_train, 3)
        elif isinstance(e, FlashAttention):
            b.fa_strong = (e.state, e.reason)
            if e.reason.startswith("resolve_fused_ops"):
                b.set_era("C", 1)
        elif isinstance(e, FlashAttentionForcedOff):
            b.fa_strong = ("disabled", e.reason)


def _continues(prev: LogEvent, prev_load: int | None, e: LogEvent, load: int | None) -> bool:
    """``e`` is another line of the incident ``prev`` (same kind and load, close in time)."""
    return (e.kind in INCIDENT_KINDS and prev.kind == e.kind and prev_load == load
            and not _far_apart(prev.time, e.time)
            and getattr(prev, "requested", None) == getattr(e, "requested", None))


def _same_estimate(a: SchedulerEstimate, b: SchedulerEstimate) -> bool:
    return (a.layers_model, a.layers_offload, a.kv_bytes, a.full_bytes, a.partial_bytes) == (
        b.layers_model, b.layers_offload, b.kv_bytes, b.full_bytes, b.partial_bytes)


def _far_apart(a: datetime | None, b: datetime | None) -> bool:
    if a is None or b is None or (a.tzinfo is None) != (b.tzinfo is None):
        return False
    return abs((b - a).total_seconds()) > INCIDENT_GAP_S


def _group(events: Iterable[LogEvent]) -> tuple[_Grouper, list[Load]]:
    g = _Grouper()
    for e in events:
        g.feed(e)
    g.finish()
    server_era = era_of_version(g.version)
    return g, [b.build(server_era) for b in g.loads]


def group_loads(events: Iterable[LogEvent]) -> list[Load]:
    """The model loads in ``events``, in log order (see the module docstring for the rules)."""
    return _group(events)[1]


class LoadGrouper(_Grouper):
    """:func:`group_loads`, incrementally: :meth:`extend` with events in log order, then
    :meth:`loads_now` is ``group_loads(every event so far)`` (``tests/unit/test_logstate.py``
    checks this on real logs), at a cost that grows with the new events, not with the history.

    An incident is attached to its load as soon as that load exists (``group_loads`` attaches
    them all at the end: the same lists, in the same order); a load is built again only when an
    event changed it (``_Builder.touched``) or the server's version changed the era.
    """

    def __init__(self) -> None:
        super().__init__()
        self._waiting: list[tuple[LogEvent, int]] = []
        """Incidents announced for a load not started yet, in log order."""
        self._built: list[tuple[tuple[int, int, str | None], Load, bool]] = []
        """Per load: ``(key, load, own_era)``, ``key`` = ``(touched, incidents, server era)`` when it was
        built, ``own_era`` whether its own lines gave its era (else the server's version does)."""
        self.mark: object = None
        """Set by the owner after each use (``model.logstate.apply_log``) to tell whether it moved on."""

    def extend(self, events: Iterable[LogEvent]) -> None:
        """Group ``events`` (the next ones in log order)."""
        for e in events:
            self.feed(e)

    def new(self, event: LogEvent) -> _Builder:
        b = super().new(event)
        if self._waiting:
            waiting, self._waiting = self._waiting, []
            for e, load in waiting:
                self._attach(e, load)
        return b

    def _attach(self, e: LogEvent, load: int) -> None:
        if load < len(self.loads):
            b = self.loads[load]
            if b is None:  # (never: an incident names the newest load or the next one, see loads_now)
                return
            b.events.append(e)
            b.touched += 1
        else:
            self._waiting.append((e, load))

    def incident(self, e: LogEvent, load: int | None) -> None:
        if self.incidents and _continues(self.incidents[-1][0], self.incidents[-1][1], e, load):
            return
        self.incidents = [[e, load]]  # only the last one is ever looked at again (``_continues``)
        if load is not None:
            self._attach(e, load)

    def finish(self) -> None:
        """Nothing to do: incidents are attached as their loads start."""

    def loads_now(self) -> list[Load]:
        """The loads so far, in log order (the same objects as last time for loads that did not move).

        Every event changes the newest load or starts the next one (an incident names one of the
        two; :class:`LoadStream` relies on the same), so a load that is not the newest is final: once
        built, its builder is released and only its :class:`Load` kept; only a new server version
        can still change it (its era, when its own lines gave none).
        """
        era = era_of_version(self.version)
        out: list[Load] = []
        builders: list[_Builder | None] = self.loads  # type: ignore[assignment]
        newest = len(builders) - 1
        built = self._built
        for i, b in enumerate(builders):
            if b is None:  # final: released
                key, load, own_era = built[i]
                if key[2] != era:
                    if not own_era:
                        load = replace(load, era=era)
                    built[i] = ((key[0], key[1], era), load, own_era)
                out.append(load)
                continue
            key = (b.touched, len(b.events), era)
            if i < len(built) and built[i][0] == key:
                load = built[i][1]
            else:
                load = b.build(era)
                entry = (key, load, b.era is not None)
                if i < len(built):
                    built[i] = entry
                else:
                    built.append(entry)
            if i < newest:
                builders[i] = None
            out.append(load)
        return out


KV_ROUNDING_BYTES = 1024 * 1024
"""Per-device KV lines are printed in MiB with two decimals: sums within 1 MiB of the total agree."""


def kv_coverage(load: Mapping[str, Any]) -> dict[str, Any] | None:
    """What the excerpt's per-device KV lines say about a load's KV total, or None when they
    account for it (or there is no total or no per-device line to compare).

    ``load`` is a load object of the ``--json`` document (``kv_bytes``, ``memory``,
    ``layers_offloaded``; :func:`load_json` without ``kv_coverage``). The result, which
    :func:`load_json` adds to that object as ``kv_coverage`` when it is not None:

    * ``unlisted_bytes`` (int): the part of the total on devices whose KV lines are not in the
      excerpt (more than :data:`KV_ROUNDING_BYTES`; 0 when the total is the listed one),
    * ``listed_bytes`` (int) and ``listed_devices`` (list of str): the KV lines that are there,
    * ``other_devices`` (list of str): GPUs the load used (weights/compute lines) with no KV line,
    * ``gpu_kv_line_missing`` (bool): the KV lines are the CPU's only while the load used a GPU
      (``layers_offloaded`` > 0 or a GPU in the other lines).

    Corpus 045 (a 39040 MiB total, one CPU KV line of 31360 MiB, three CUDA devices in the compute
    lines) and 032 (the CPU's 112 MiB while 29/37 layers are on the GPU) are the cases.
    """
    total = load.get("kv_bytes")
    memory = load.get("memory") or {}
    kv: Mapping[str, int] = memory.get("kv") or {}
    if not isinstance(total, int) or not kv:
        return None
    listed = sum(kv.values())
    elsewhere = sorted({d for part, per in memory.items() if part != "kv" for d in per
                        if d not in kv and not is_cpu_device(d)})
    base = {"listed_bytes": listed, "listed_devices": list(kv), "other_devices": elsewhere}
    if total - listed > KV_ROUNDING_BYTES:
        return {"unlisted_bytes": total - listed, **base, "gpu_kv_line_missing": False}
    offloaded = load.get("layers_offloaded")
    on_gpu = bool(elsewhere) or (isinstance(offloaded, int) and offloaded > 0)
    if on_gpu and all(is_cpu_device(d) for d in kv):
        return {"unlisted_bytes": 0, **base, "gpu_kv_line_missing": True}
    return None


def load_json(load: Load) -> dict[str, Any]:
    """One load in the documented JSON shape, plus ``era``, ``engine`` and a few extra keys, and
    ``kv_coverage`` (:func:`kv_coverage`) when the log's per-device KV lines do not account for
    the KV total."""
    obj = {
        "model_blob": load.model_blob,
        "num_ctx_total": load.num_ctx_total,
        "parallel": load.parallel,
        "num_ctx_per_seq": load.num_ctx_per_seq,
        "kv_type_k": load.kv_type_k,
        "kv_type_v": load.kv_type_v,
        "flash_attention": load.flash_attention,
        "layers_offloaded": load.layers_offloaded,
        "layers_total": load.layers_total,
        "memory": {c: dict(load.memory.get(c, {})) for c in COMPONENTS},
        "kv_bytes": load.kv_bytes,
        "estimates": load.estimates,
        "index": load.index,
        "flash_attention_requested": load.flash_attention_requested,
        "era": load.era,
        "engine": load.engine,
        "model_name": load.model_name,
        "mmproj_blob": load.mmproj_blob,
        "port": load.port,
        "n_ctx_train": load.n_ctx_train,
        "first_line": load.first_line,
        "last_line": load.last_line,
        "findings": load.findings(),
    }
    cover = kv_coverage(obj)
    if cover is not None:
        obj["kv_coverage"] = cover
    return obj


def event_json(event: LogEvent, load: int | None) -> dict[str, Any]:
    """One reported event: ``kind`` and its documented fields, plus ``line``, ``time`` and ``load``."""
    out: dict[str, Any] = {"kind": event.kind}
    if isinstance(event, Truncation):
        out.update(limit=event.limit, prompt=event.prompt, keep=event.keep, new=event.new)
    elif isinstance(event, PromptRejected):
        out.update(prompt=event.n_prompt_tokens, limit=event.n_ctx)
    elif isinstance(event, KvTypeFallback):
        out.update(requested=event.requested, reason=event.reason)
    elif isinstance(event, RequestTiming):
        out.update(prompt_tokens=event.prompt_tokens, prompt_tps=event.prompt_tps, eval_tokens=event.eval_tokens,
                   eval_tps=event.eval_tps, slot=event.slot, task=event.task)
    elif isinstance(event, (FlashAttentionForcedOff, Oom, LoadFailed, Eviction, Unload)):
        out["reason"] = event.reason
    out["line"] = event.line_no
    out["time"] = event.time.isoformat() if event.time is not None else None
    out["load"] = load
    return out


def inspect_events(events: Sequence[LogEvent] | Iterable[LogEvent]) -> dict[str, Any]:
    """The ``inspect-log --json`` document of already parsed events."""
    g, loads = _group(events)
    server: dict[str, Any] = {}
    if g.version is not None or g.config is not None:
        server = {"version": g.version, "config": dict(g.config) if g.config is not None else None}
    return {
        "server": server,
        "loads": [load_json(load) for load in loads],
        "events": [event_json(e, load) for e, load in g.incidents],
    }


def inspect_lines(lines: Iterable[str]) -> dict[str, Any]:
    """Parse ``lines`` and return the ``kvtop inspect-log --json`` document.

    Shape: ``{"server": {"version", "config"}, "loads": [...], "events": [...]}`` as
    described in the corpus README; loads carry ``era`` and a few extra keys. ``server`` is
    ``{}`` when the log has neither a version nor a config line (the oracles' convention).
    """
    from kvtop.logparse.parser import iter_events  # here: grouping loads needs no line grammar (startup)

    return inspect_events(iter_events(lines))


# --------------------------------------------------------------------------------------------
# Streaming: one load in memory at a time (``kvtop inspect-log`` on a log of any size)

MAX_FINDING_EVENTS = 100
"""Per load, the incidents that each give a finding line (KV type fallback, flash attention forced
off, OOM, load failure) that :class:`LoadStream` keeps; the rest are counted (``events_left_out``)."""

FINDING_KINDS = frozenset({"kv_type_fallback", "flash_attention_forced_off", "oom", "load_failed"})
"""Incident kinds that give one finding line each (:meth:`Load.findings`)."""

REQUEST_KINDS = ("truncation", "request_timing")
"""Incident kinds listed under a load's requests in the human report."""

MAX_LOAD_REQUESTS = 20
"""Per load, the requests :class:`LoadStream` keeps (the first ones); the rest are counted."""


@dataclass
class _Kept:
    """What :class:`LoadStream` keeps of one load's incidents."""

    events: list[LogEvent] = field(default_factory=list)
    left_out: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    requests: list[LogEvent] = field(default_factory=list)
    requests_total: int = 0

    def add(self, e: LogEvent) -> None:
        self.counts[e.kind] = self.counts.get(e.kind, 0) + 1
        if e.kind in FINDING_KINDS:
            if len(self.events) < MAX_FINDING_EVENTS:
                self.events.append(e)
            else:
                self.left_out += 1
        if e.kind in REQUEST_KINDS:
            self.requests_total += 1
            if len(self.requests) < MAX_LOAD_REQUESTS:
                self.requests.append(e)


class _LastLoad:
    """Stands in for ``_Grouper.loads``: counts the loads and keeps only the last one."""

    def __init__(self) -> None:
        self.count = 0
        self.last: _Builder | None = None

    def append(self, b: _Builder) -> None:
        self.count += 1
        self.last = b

    def __len__(self) -> int:
        return self.count


class LoadStream(_Grouper):
    """The grouping of :func:`inspect_events`, one event at a time, with memory bounded by one load.

    Call :meth:`feed` with each event in log order, then :meth:`finish`. Each load is handed to
    ``on_load(load, requests, requests_total)`` once it is complete (when the next load starts,
    or at :meth:`finish`): ``load.era`` is None when only the server's version gives it (use
    :meth:`era` afterwards); ``load.events`` holds at most :data:`MAX_FINDING_EVENTS` incidents
    of :data:`FINDING_KINDS` (``events_left_out`` counts the rest, ``event_counts`` every kind),
    so ``load.findings()`` is the document's; ``requests`` are its first
    :data:`MAX_LOAD_REQUESTS` truncations and request timings of ``requests_total``. Each
    reported incident goes to ``on_incident(event, load)`` as it is recorded, in log order, with
    the load index it names; :meth:`resolve` turns that into the document's ``load`` after
    :meth:`finish` (an incident announced for a load that never started has none).

    The document these make is :func:`inspect_events`' exactly (``tests/unit/test_inspect_log_stream.py``).
    """

    def __init__(self, on_load: Callable[[Load, list[LogEvent], int], None],
                 on_incident: Callable[[LogEvent, int | None], None]) -> None:
        super().__init__()
        self.loads = _LastLoad()  # type: ignore[assignment]
        self._on_load = on_load
        self._on_incident = on_incident
        self._last_incident: tuple[LogEvent, int | None] | None = None
        self._kept = _Kept()
        self._next = _Kept()
        """Incidents announced for the load about to start (a KV type fallback before its spawn)."""
        self.incident_count = 0
        """Reported incidents so far (the document's ``events``)."""

    @property
    def load_count(self) -> int:
        """Loads started so far."""
        return len(self.loads)

    def new(self, event: LogEvent) -> _Builder:
        self._complete()
        b = super().new(event)
        self._kept, self._next = self._next, _Kept()
        return b

    def _complete(self) -> None:
        if self.cur is None:
            return
        kept = self._kept
        load = replace(self.cur.build(None), events=tuple(kept.events), event_counts=dict(kept.counts),
                       events_left_out=kept.left_out)
        self._on_load(load, kept.requests, kept.requests_total)

    def incident(self, e: LogEvent, load: int | None) -> None:
        last = self._last_incident
        if last is not None and _continues(last[0], last[1], e, load):
            return
        self._last_incident = (e, load)
        self.incident_count += 1
        if load is not None:
            (self._next if load >= len(self.loads) else self._kept).add(e)
        self._on_incident(e, load)

    def finish(self) -> None:
        """The end of the log: the last load is complete."""
        self._complete()
        self.cur = None

    def era(self) -> str | None:
        """The era the server's version gives (a load's era when its own lines give none)."""
        return era_of_version(self.version)

    def resolve(self, load: int | None) -> int | None:
        """The document's ``load`` of an incident handed over with ``load`` (after :meth:`finish`)."""
        return load if load is not None and load < len(self.loads) else None
