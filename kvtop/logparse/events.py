"""The events the log parser produces: one frozen, slotted dataclass per kind, and their catalogue.

This module holds the events of the server and of a model load (config, spawn, allocations,
KV, flash attention, failures); the fit pass's and a device's free memory are in
:mod:`kvtop.logparse.fit_events` (listed in ``LogEvent`` and :data:`EVENT_TYPES`, imported from there);
the events of one request are in
:mod:`kvtop.logparse.request_events` and re-exported here, so ``LogEvent`` and
:data:`EVENT_TYPES` name them all. The fields every event has are described in
:mod:`kvtop.logparse.event_class`. Sizes are integer bytes; a size the log prints rounded
(``"1.5 GiB"``, ``"577.22 MiB"``) is the printed value times its unit, rounded to a byte.

Each class names the line grammar it comes from; sections refer to
``docs/ollama-internals.md`` and file numbers to the log corpus.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime
from typing import Any, ClassVar

from kvtop.logparse.event_class import EventBase, frozen_event
from kvtop.logparse.fit_events import DeviceFree, FitOverflow, FitPlan
from kvtop.logparse.memory_events import ContextCheckpoint, DraftModelLoad, ProjectorEstimate, PromptCacheState
from kvtop.logparse.request_events import (
    ContextOverflow,
    GinRequest,
    PrefillProgress,
    PromptRejected,
    RequestTiming,
    SlotActivity,
    Truncation,
)

__all__ = [
    "EVENT_TYPES",
    "Allocation",
    "ContextClamped",
    "ContextOverflow",
    "ContextOverTraining",
    "ContextParams",
    "Eviction",
    "FlashAttention",
    "FlashAttentionDecision",
    "FlashAttentionForcedOff",
    "GinRequest",
    "KvSummary",
    "KvTypeFallback",
    "LoadDecision",
    "LoadFailed",
    "LoadRequest",
    "LogEvent",
    "ModelLoad",
    "OffloadedLayers",
    "Oom",
    "PrefillProgress",
    "PromptRejected",
    "RequestTiming",
    "RunnerReady",
    "RunnerStarted",
    "SchedulerEstimate",
    "ServerConfig",
    "ServerListening",
    "SlotActivity",
    "Truncation",
    "Unload",
    "UnknownWarning",
    "event_to_dict",
]


@frozen_event
class ServerConfig(EventBase):
    """``msg="server config" env="map[K:V …]"`` (§3.6; corpus 018, 019, 021, 022, 033, 047).

    ``env`` holds the raw strings between ``KEY:`` and the next key (lists keep their
    brackets). ``complete`` is False when the map was cut before its closing ``]``; the
    last, possibly cut, key is then left out.
    """

    kind: ClassVar[str] = "server_config"
    env: Mapping[str, str]
    complete: bool = True


@frozen_event
class ServerListening(EventBase):
    """``msg="Listening on 127.0.0.1:11434 (version 0.33.0)"`` (§4.1; corpus 018, 033)."""

    kind: ClassVar[str] = "server_listening"
    address: str | None
    version: str | None


@frozen_event
class RunnerStarted(EventBase):
    """A runner spawn line and its argv (§4.2, §4.3, §4.4, §7; corpus 001, 004, 012, 028, 061, 062).

    ``starting llama server`` (A/B1), ``starting runner`` (B2), ``starting llama-server``
    (C), ``starting mlx runner subprocess`` and the 2023 ``starting llama runner`` (no argv,
    corpus 038). ``model_blob`` is ``sha256-<64 hex>`` from ``--model`` (never from
    ``--mmproj``); a spawn without ``--model`` is a GPU-discovery runner. ``complete`` is
    False when the command line was cut. ``flash_attn`` is the raw flag value: ``"true"`` for
    the bare A/B1 flag, ``on|off|auto`` in C, None when absent.
    """

    kind: ClassVar[str] = "runner_started"
    message: str
    era: str | None = None
    engine: str | None = None
    cmd: str | None = None
    model_blob: str | None = None
    model_path: str | None = None
    model_name: str | None = None
    mmproj_blob: str | None = None
    port: int | None = None
    pid: int | None = None
    ctx_size: int | None = None
    parallel: int | None = None
    batch_size: int | None = None
    ubatch_size: int | None = None
    n_gpu_layers: int | None = None
    tensor_split: str | None = None
    main_gpu: int | None = None
    threads: int | None = None
    flash_attn: str | None = None
    kv_cache_type: str | None = None
    cache_type_k: str | None = None
    cache_type_v: str | None = None
    no_mmap: bool = False
    complete: bool = True


@frozen_event
class LoadRequest(EventBase):
    """B2 runner ``msg=load request="{Operation:… KvSize:… …}"`` (§4.3; corpus 056, 058).

    ``kv_size`` is num_ctx × parallel. ``flash_attention`` is the raw value
    (``true|false`` up to v0.13.3, ``Enabled|Disabled|Auto`` after). ``kv_cache_type`` is
    raw; ``""`` means the default f16. ``gpu_layers`` is the count before ``[`` of
    ``GPULayers:N[…]`` (0 for ``[]``).
    """

    kind: ClassVar[str] = "load_request"
    operation: str | None = None
    kv_size: int | None = None
    parallel: int | None = None
    batch_size: int | None = None
    flash_attention: str | None = None
    kv_cache_type: str | None = None
    num_threads: int | None = None
    gpu_layers: int | None = None
    gpu_layers_raw: str | None = None
    num_gpu: int | None = None
    main_gpu: int | None = None
    use_mmap: str | None = None
    projector_path: str | None = None


@frozen_event
class LoadDecision(EventBase):
    """A scheduler decision to load a model (§4.3, §4.8; corpus 028, 030, 051).

    ``loading first model`` model=…, ``new model will fit in available VRAM …, loading``
    model=… parallel=…, B2 ``loading model "model layers"=N requested=M``, C ``loading model
    via llama-server`` model=….
    """

    kind: ClassVar[str] = "load_decision"
    message: str
    model_blob: str | None = None
    parallel: int | None = None
    layers_total: int | None = None
    layers_requested: int | None = None
    gpu: str | None = None
    """``gpu=GPU-…``: the one GPU of ``new model will fit in available VRAM in single GPU, loading`` (corpus 051)."""
    available_bytes: int | None = None
    """``available=15813967872``: that GPU's free memory in bytes, as the scheduler saw it."""
    required_bytes: int | None = None
    """``required="11.3 GiB"``: the scheduler's estimate of the model's VRAM."""


@frozen_event
class ModelLoad(EventBase):
    """A llama.cpp line saying which model file it reads, or that it starts reading one (corpus 010, 037, 038).

    ``llama_model_loader: loaded meta data … from PATH``, ``llama.cpp: loading model from
    PATH`` (2023), llama-server ``srv load_model: loading model 'PATH'``. Without a path (``model_blob``
    and ``path`` None), the first lines of a model read that name no file: ``llama_model_loader: Dumping
    metadata keys/values…`` / ``- kv   0: …``, ``print_info: file format = …`` / ``arch = …``
    (``llm_load_print_meta: format = …`` before 2025), ``load_tensors: loading model tensors, …``; so a
    load that fails before any offload or buffer line is still a load (§4.5).
    """

    kind: ClassVar[str] = "model_load"
    model_blob: str | None
    path: str | None
    grammar: str


@frozen_event
class Allocation(EventBase):
    """One allocated buffer (§4.3 memory summary, §4.5; corpus 002, 032, 035, 054, 056, 063).

    ``component`` is ``weights``, ``kv``, ``compute``, ``output``, ``input`` or
    ``recurrent``; ``device`` is as printed (``CUDA0``, ``CPU_Mapped``, ``CUDA_Host``…).
    ``grammar`` names the line: the llama.cpp function (``load_tensors``, ``llama_kv_cache``,
    ``sched_reserve``…: ``… buffer size = X MiB``) or ``ollama`` (``msg="kv cache"
    device=… size="1.5 GiB"``).
    """

    kind: ClassVar[str] = "allocation"
    component: str
    device: str
    bytes: int
    grammar: str


@frozen_event
class KvSummary(EventBase):
    """A KV cache total (§4.5; corpus 002, 006, 009, 025, 037, 043, 045).

    ``llama_kv_cache: size = X MiB (C cells, L layers, S/T seqs), K (t): … MiB, V (t): … MiB``,
    the older ``KV self size  = X MiB, K (t): …``, the 2023 ``kv self size = X MB`` (MB is
    MiB there), ``llama_kv_cache_init: kv_size = C, …, type_k = 'f16', type_v = 'f16', n_layer
    = L`` (no size) and ``llama_memory_recurrent: size = …`` (``recurrent`` True: R/S state,
    not KV). ``cells`` is per stream; ``seqs`` is n_seq_max and ``streams`` the number of
    KV streams (``4/1`` = unified).

    Interleaved-SWA models build two caches, each announced by ``llama_kv_cache_iswa: creating
    non-SWA KV cache, size = N cells`` / ``creating     SWA KV cache, size = N cells`` (older:
    ``llama_kv_cache_unified_iswa``; ollama/ollama#16480, corpus 042). Such a line is a
    ``KvSummary`` with only ``cells`` and ``swa`` (False: the full-context cache, True: the
    sliding-window one); ``swa`` is None on every other line.
    """

    kind: ClassVar[str] = "kv_summary"
    size_bytes: int | None = None
    cells: int | None = None
    layers: int | None = None
    seqs: int | None = None
    streams: int | None = None
    k_type: str | None = None
    v_type: str | None = None
    k_bytes: int | None = None
    v_bytes: int | None = None
    recurrent: bool = False
    grammar: str = ""
    swa: bool | None = None


@frozen_event
class ContextParams(EventBase):
    """One llama.cpp context parameter line (§4.5; corpus 002, 006, 008, 042, 063, 065).

    ``llama_new_context_with_model:`` / ``llama_init_from_model:`` / ``llama_context: NAME =
    VALUE`` and the 2023 ``llama_model_load_internal: n_ctx = …``. Only the field of the
    printed parameter is set. ``n_ctx_per_seq`` also takes ``n_ctx_seq`` (v0.13.4+).
    ``flash_attn`` is raw: ``0|1`` (A/B1), ``auto|enabled|disabled`` (v0.12.4+).

    The warning ``n_ctx_per_seq (4096) < n_ctx_train (40960) -- the full capacity of the model
    will not be utilized`` (``n_ctx_seq`` from v0.13.4; ollama/ollama#10999) is one too: it sets
    ``n_ctx_per_seq`` and ``n_ctx_train``. It is not a finding (the ``>`` twin is
    :class:`ContextOverTraining`).
    """

    kind: ClassVar[str] = "context_params"
    n_ctx: int | None = None
    n_ctx_per_seq: int | None = None
    n_seq_max: int | None = None
    n_batch: int | None = None
    n_ubatch: int | None = None
    flash_attn: str | None = None
    kv_unified: str | None = None
    causal_attn: str | None = None
    grammar: str = ""
    n_ctx_train: int | None = None


@frozen_event
class FlashAttention(EventBase):
    """Flash attention as resolved by the runner (§3.1, §4.6; corpus 002, 008, 025, 063).

    ``Flash Attention was auto, set to enabled|disabled``, ``resolve_fused_ops: Flash
    Attention enabled``, llama.cpp ``flash_attn = 1|0`` (A/B1) or ``= enabled|disabled``,
    the B2 load request's ``FlashAttention:true|false|Enabled|Disabled`` (emitted next to the
    ``LoadRequest``), and ``… - forcing off``. A requested ``auto`` produces no event; a later
    event for the same load overrides an earlier one.
    """

    kind: ClassVar[str] = "flash_attention"
    state: str
    reason: str


@frozen_event
class FlashAttentionDecision(EventBase):
    """Ollama's own flash-attention choice before the runner resolves it (§4.2, §4.6; corpus 001, 028, 053).

    ``enabling flash attention`` and ``model wants flash attention``: a request, not a
    resolution.
    """

    kind: ClassVar[str] = "flash_attention_decision"
    state: str
    reason: str


@frozen_event
class FlashAttentionForcedOff(EventBase):
    """Flash attention turned off against the request (§4.6; corpus 023, 025, 026).

    llama.cpp ``flash_attn is not compatible with Grok - forcing off``, ``flash_attn
    requires n_embd_head_k == n_embd_head_v - forcing off``; Ollama ``flash attention enabled
    but not supported by gpu|model`` and ``disabling flash attention for gemma4 …``.
    """

    kind: ClassVar[str] = "flash_attention_forced_off"
    reason: str
    source: str = "llama.cpp"
    """``llama.cpp`` (the runner turned it off) or ``ollama`` (Ollama did not request it)."""


@frozen_event
class KvTypeFallback(EventBase):
    """A requested KV cache type that Ollama dropped for f16 (the §3.2 warnings).

    ``quantized kv cache requested but flash attention disabled``, ``kv cache type not
    supported by model`` (except the spurious ``type=""`` one), ``model only supports
    non-quantized cache types``, ``OLLAMA_FLASH_ATTENTION must be enabled to use a quantized
    OLLAMA_KV_CACHE_TYPE``, ``unsupported OLLAMA_KV_CACHE_TYPE``.
    """

    kind: ClassVar[str] = "kv_type_fallback"
    requested: str | None
    reason: str


@frozen_event
class ContextClamped(EventBase):
    """Ollama lowered a requested num_ctx to the model's training context (§3.4, §4.4).

    ``level=WARN msg="requested context size too large for model" num_ctx=65536
    n_ctx_train=40960`` (v0.15.5+, printed before the runner is spawned). ``requested`` is the
    per-slot num_ctx asked for, ``n_ctx_train`` the ``<arch>.context_length`` it was clamped to;
    None when the line does not carry the attribute.
    """

    kind: ClassVar[str] = "context_clamped"
    requested: int | None
    n_ctx_train: int | None


@frozen_event
class ContextOverTraining(EventBase):
    """llama.cpp's per-sequence context is above the training context (§4.5; corpus 006).

    ``llama_init_from_model: n_ctx_pre_seq (32768) > n_ctx_train (8192) -- possible training
    context overflow`` (``n_ctx_pre_seq`` is llama.cpp's own 2025 typo; later builds print
    ``n_ctx_per_seq`` or ``n_ctx_seq``). The ``<`` twin ("the full capacity of the model will
    not be utilized") is not an event. Both numbers are token counts per sequence.
    """

    kind: ClassVar[str] = "context_over_training"
    n_ctx_per_seq: int
    n_ctx_train: int
    grammar: str = ""


@frozen_event
class OffloadedLayers(EventBase):
    """``offloaded N/M layers to GPU`` (llama.cpp ``load_tensors``, Ollama engine ``ggml.go``; corpus 006, 032, 054, 065)."""

    kind: ClassVar[str] = "offloaded_layers"
    n: int
    total: int


@frozen_event
class SchedulerEstimate(EventBase):
    """The scheduler's ``offload`` estimate line (§4.2; corpus 001, 012, 039).

    ``msg=offload library=…``, ``msg="offload to cuda"``, pre-0.1.45 ``offload to gpu …
    layers.real=N``. Sizes are estimates (``memory.required.*``), not allocations.
    """

    kind: ClassVar[str] = "scheduler_estimate"
    library: str | None = None
    layers_requested: int | None = None
    layers_model: int | None = None
    layers_offload: int | None = None
    kv_bytes: int | None = None
    full_bytes: int | None = None
    partial_bytes: int | None = None
    weights_total_bytes: int | None = None
    graph_full_bytes: int | None = None
    graph_partial_bytes: int | None = None
    available_bytes: tuple[int, ...] = ()
    allocations_bytes: tuple[int, ...] = ()
    layers_split: tuple[int, ...] = ()
    """``layers.split=11,11,11,11``: the layers the estimate gives each GPU, in ``memory.available``'s order."""
    gpu_overhead_bytes: int | None = None
    """``memory.gpu_overhead``: ``OLLAMA_GPU_OVERHEAD`` as the server read it (reserved on each GPU)."""
    projector_weights_bytes: int | None = None
    """``projector.weights`` (a vision model's projector, corpus 012), part of ``memory.required.*``."""
    projector_graph_bytes: int | None = None
    """``projector.graph``: the projector's compute graph (corpus 012)."""


@frozen_event
class RunnerReady(EventBase):
    """A runner finished starting (§4.2, §4.4; corpus 005, 014, 030, 035).

    ``llama runner started in 2.75 seconds``, ``llama-server started in … seconds`` and the
    DEBUG ``finished setting up runner`` model=… (which names the blob).
    """

    kind: ClassVar[str] = "runner_ready"
    seconds: float | None = None
    model_blob: str | None = None


@frozen_event
class Eviction(EventBase):
    """The scheduler makes room by unloading another model (§4.3, §4.8; corpus 050)."""

    kind: ClassVar[str] = "eviction"
    reason: str
    model_blob: str | None = None
    pid: int | None = None


@frozen_event
class Unload(EventBase):
    """A runner was unloaded (§4.8; corpus 010, 049): ``changing loaded model``, ``gpu VRAM usage didn't recover within timeout``, the DEBUG expiry sequence."""

    kind: ClassVar[str] = "unload"
    reason: str
    model_blob: str | None = None
    pid: int | None = None


@frozen_event
class Oom(EventBase):
    """Out of memory, at load or at run time (corpus 005, 009, 031).

    ``allocation`` is True on the allocator's own failure line: ggml's ``allocating X MiB on device N:
    cudaMalloc failed: out of memory`` (``hipMalloc failed`` on ROCm) and ``unable to allocate …``. Each
    such line is one failed try (a fit/alloc loop that lowers the layers prints one per try, §4.3), so it
    starts an incident of its own; the lines that report the same try after it (``failed to allocate
    CUDA0 buffer of size N``, ``failed to allocate compute buffers``) continue it.
    """

    kind: ClassVar[str] = "oom"
    reason: str
    allocation: bool = False


@frozen_event
class LoadFailed(EventBase):
    """A model load failed (corpus 009, 023, 026): ``failed to create context``, ``error starting llama server``, ``panic: unable to create llama context``…"""

    kind: ClassVar[str] = "load_failed"
    reason: str
    model_blob: str | None = None


@frozen_event
class UnknownWarning(EventBase):
    """A WARN/ERROR line no other event models, so a UI can still show it."""

    kind: ClassVar[str] = "unknown_warning"
    level: str
    message: str
    source: str | None = None


LogEvent = (
    ServerConfig
    | ServerListening
    | RunnerStarted
    | LoadRequest
    | LoadDecision
    | ModelLoad
    | Allocation
    | KvSummary
    | ContextParams
    | FlashAttention
    | FlashAttentionDecision
    | FlashAttentionForcedOff
    | KvTypeFallback
    | ContextClamped
    | ContextOverTraining
    | OffloadedLayers
    | FitOverflow
    | FitPlan
    | SchedulerEstimate
    | Truncation
    | ContextOverflow
    | PromptRejected
    | RequestTiming
    | PrefillProgress
    | SlotActivity
    | RunnerReady
    | Eviction
    | Unload
    | Oom
    | LoadFailed
    | GinRequest
    | DeviceFree
    | PromptCacheState
    | ContextCheckpoint
    | ProjectorEstimate
    | DraftModelLoad
    | UnknownWarning
)
"""Any event the parser produces."""

EVENT_TYPES: tuple[type[EventBase], ...] = (
    ServerConfig,
    ServerListening,
    RunnerStarted,
    LoadRequest,
    LoadDecision,
    ModelLoad,
    Allocation,
    KvSummary,
    ContextParams,
    FlashAttention,
    FlashAttentionDecision,
    FlashAttentionForcedOff,
    KvTypeFallback,
    ContextClamped,
    ContextOverTraining,
    OffloadedLayers,
    FitOverflow,
    FitPlan,
    SchedulerEstimate,
    Truncation,
    ContextOverflow,
    PromptRejected,
    RequestTiming,
    PrefillProgress,
    SlotActivity,
    RunnerReady,
    Eviction,
    Unload,
    Oom,
    LoadFailed,
    GinRequest,
    DeviceFree,
    PromptCacheState,
    ContextCheckpoint,
    ProjectorEstimate,
    DraftModelLoad,
    UnknownWarning,
)
"""Every event class, in catalogue order."""


def event_to_dict(event: LogEvent) -> dict[str, Any]:
    """The event as a JSON-ready dict: ``kind`` first, then every field (time as ISO 8601)."""
    out: dict[str, Any] = {"kind": event.kind}
    for f in dataclasses.fields(event):
        value = getattr(event, f.name)
        if isinstance(value, datetime):
            value = value.isoformat()
        elif isinstance(value, tuple):
            value = list(value)
        elif isinstance(value, Mapping):
            value = dict(value)
        out[f.name] = value
    return out
