"""Ollama's own lines: slog text records, Go standard-logger records and gin access lines.

These are printed by the server (all eras) and by the Go runners (B1/B2). Formats:

- slog text (v0.1.32+, docs/ollama-internals.md §4.0): ``time=… level=INFO source=server.go:130 msg=… k=v``.
  ``time=`` may be missing (``docker compose logs | grep``, corpus 032) and may have no zone
  (corpus 030).
- Go's standard logger (§3.6; v0.1.x–v0.6.8 server config, 2023 runners): ``2024/06/02
  18:43:45 routes.go:1007: INFO server config env="map[…]"`` (corpus 018, 019, 033, 038).
- gin (§4.9): ``[GIN] 2024/07/10 - 17:33:55 | 200 | 22.25s | 127.0.0.1 | POST "/api/generate"``.

Each message is dispatched on its ``msg`` text through a dict, so a line that no event
models costs one lookup.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime

from kvtop.logparse.cmdline import parse_cmd
from kvtop.logparse.events import (
    Allocation,
    ContextClamped,
    ContextOverflow,
    Eviction,
    FlashAttention,
    FlashAttentionDecision,
    FlashAttentionForcedOff,
    GinRequest,
    KvTypeFallback,
    LoadDecision,
    LoadFailed,
    LoadRequest,
    LogEvent,
    OffloadedLayers,
    Oom,
    RunnerReady,
    RunnerStarted,
    SchedulerEstimate,
    ServerConfig,
    ServerListening,
    Truncation,
    UnknownWarning,
    Unload,
)
from kvtop.logparse.values import (
    PLAIN_UNITS,
    blob_of,
    go_duration_s,
    quoted_end,
    quoted_value,
    size_bytes,
    size_list,
    slog_get,
    slog_pairs,
    bytes_or_none,
    to_count,
    to_float,
    to_int,
    unescape,
)
from kvtop.logparse.wrappers import go_log_time, parse_iso, sanitize, strip_ansi

Handler = Callable[[str, str, str, int, "datetime | None", str], "list[LogEvent] | None"]
"""``(msg, rest, level, line_no, time, raw) -> events``; None means "not this grammar after all"."""

_GOLOG_RE = re.compile(
    r"(\d{4}/\d\d/\d\d) (\d\d:\d\d:\d\d)(?:\.\d+)? (?:([\w.-]+\.go:\d+): )?(?:(INFO|WARN|WARNING|ERROR|DEBUG) )?(.*)"
)
_GOLOG_SPLIT_RE = re.compile(r"\s(?=[\w.]+=)")
_GIN_RE = re.compile(
    r"\[GIN\] (\d{4}/\d\d/\d\d) - (\d\d:\d\d:\d\d) \|\s*(\d{3})\s*\|\s*(\S+)\s*\|\s*(\S*)\s*\|\s*([A-Z]+)\s+\"(.*)\""
)
_LISTEN_RE = re.compile(r"Listening on (\S+)(?: \(version ([^)]*)\))?")
_VERSION_RE = re.compile(r"\(version ([^)]*)\)")
_REQUEST_RE = re.compile(
    r"[{ ](Operation|Parallel|BatchSize|FlashAttention|KvSize|KvCacheType|NumThreads|GPULayers|NumGPU"
    r"|MainGPU|UseMmap|ProjectorPath):(\S*)"
)
_OFFLOADED_RE = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
_SECONDS_RE = re.compile(r"started in (\d+(?:\.\d+)?) seconds")


# --------------------------------------------------------------------------------------------
# Handlers, one per message (or message family)


def _server_config(msg: str, rest: str, level: str, n: int, t: datetime | None, raw: str) -> list[LogEvent] | None:
    """§3.6: ``env="map[K:V K:[a b] …]"``, keys sorted, values unquoted, lists keep their brackets."""
    i = rest.find("env=")
    if i < 0:
        return None
    if rest[i + 4 : i + 5] == '"':
        value, closed = quoted_value(rest, i + 4)
    else:
        value, closed = rest[i + 4 :], True
    env, complete = parse_env_map(value)
    return [ServerConfig(n, t, raw, env, complete and closed)]


def parse_env_map(text: str) -> tuple[dict[str, str], bool]:
    """The Go map ``map[K:V K:[a b] …]`` of the server config line (§3.6).

    A value runs from ``KEY:`` to the next `` KEY:``; a value starting with ``[`` runs to its
    closing ``]`` (lists contain spaces and colons, ``app://*``). A hard wrap glued back
    without a space (``…:[ollama.com]OLLAMA_SCHED_SPREAD:false``, corpus 021) is read as two
    keys. Returns the map and whether its closing ``]`` was seen; when it was not, the last
    key (possibly cut) is dropped.
    """
    text = text.removeprefix("map[")
    complete = text.endswith("]")
    end = len(text) - 1 if complete else len(text)
    items = _ENV_ITEM_RE.findall(text, 0, end)
    if "  " in text or text[end - 1 : end] == " ":
        out = {k: v.rstrip(" ") for k, v in items}
    else:  # a value can end in spaces only before a run of two or more, or at the end
        out = dict(items)
    if not complete and out:
        del out[next(reversed(out))]
    return out, complete


_ENV_ITEM_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*):(\[[^\]]*\]|[^ ]*(?: +(?![A-Za-z_][A-Za-z0-9_]*:)[^ ]*)*) *")
"""``KEY:value``: a bracketed list, or text up to the spaces before the next ``KEY:`` (unrolled so that runs
of non-spaces are matched in one step: the same matches as ``(?:[^ ]| +(?!KEY:))*``)."""


def _listening(msg: str, rest: str, level: str, n: int, t: datetime | None, raw: str) -> list[LogEvent] | None:
    """§4.1: ``Listening on 127.0.0.1:11434 (version 0.33.0)``."""
    m = _LISTEN_RE.match(msg)
    if m is None:
        return None
    version = m.group(2)
    if version is None:
        vm = _VERSION_RE.search(rest)
        version = vm.group(1) if vm else None
    return [ServerListening(n, t, raw, m.group(1), version)]


def _spawn(msg: str, rest: str, level: str, n: int, t: datetime | None, raw: str) -> list[LogEvent] | None:
    """§4.2–§4.4, §7: ``starting llama server|runner|llama-server`` cmd=…; ``starting llama runner`` (2023)."""
    i = rest.find("cmd=")
    if i < 0:
        if msg == "starting llama runner":
            return [RunnerStarted(n, t, raw, msg, era="pre-A", engine="llama")]
        pairs = slog_pairs(rest)
        model = pairs.get("model")
        if model is None:
            return None
        return [
            RunnerStarted(
                n,
                t,
                raw,
                msg,
                engine="mlx" if "mlx" in msg else None,
                model_blob=blob_of(model),
                model_path=model,
                model_name=None if blob_of(model) else model,
                port=to_count(pairs.get("port")),
                pid=to_count(pairs.get("pid")),
            )
        ]
    complete = True
    if rest[i + 4 : i + 5] == '"':
        cmd, complete = quoted_value(rest, i + 4)
    else:
        cmd = rest[i + 4 :].split(" ", 1)[0]
    a = parse_cmd(cmd)
    return [
        RunnerStarted(
            n,
            t,
            raw,
            msg,
            era=a.era,
            engine=a.engine,
            cmd=cmd,
            model_blob=a.model_blob,
            model_path=a.model_path,
            mmproj_blob=a.mmproj_blob,
            port=a.port,
            ctx_size=a.ctx_size,
            parallel=a.parallel,
            batch_size=a.batch_size,
            ubatch_size=a.ubatch_size,
            n_gpu_layers=a.n_gpu_layers,
            tensor_split=a.tensor_split,
            main_gpu=a.main_gpu,
            threads=a.threads,
            flash_attn=a.flash_attn,
            kv_cache_type=a.kv_cache_type,
            cache_type_k=a.cache_type_k,
            cache_type_v=a.cache_type_v,
            no_mmap=a.no_mmap,
            complete=complete,
        )
    ]


def _load_request(msg: str, rest: str, level: str, n: int, t: datetime | None, raw: str) -> list[LogEvent] | None:
    """§4.3: ``msg=load request="{Operation:commit … KvSize:4096 KvCacheType: … GPULayers:20[…] …}"``."""
    i = rest.find("request=")
    if i < 0:
        return None
    text = rest[i + 8 :]
    f: dict[str, str] = {}
    for m in _REQUEST_RE.finditer(text):
        f.setdefault(m.group(1), m.group(2))
    if not f:
        return None
    gl = f.get("GPULayers")
    gpu_layers: int | None = None
    if gl is not None:
        head = gl.split("[", 1)[0]
        gpu_layers = to_count(head) if head else (0 if gl.startswith("[]") else None)
    kvct = f.get("KvCacheType")
    fa = f.get("FlashAttention")
    out: list[LogEvent] = [
        LoadRequest(
            n,
            t,
            raw,
            operation=f.get("Operation"),
            kv_size=to_count(f.get("KvSize")),
            parallel=to_count(f.get("Parallel")),
            batch_size=to_count(f.get("BatchSize")),
            flash_attention=fa,
            kv_cache_type=kvct.rstrip('}"') if kvct is not None else None,
            num_threads=to_count(f.get("NumThreads")),
            gpu_layers=gpu_layers,
            gpu_layers_raw=gl,
            num_gpu=to_int(f.get("NumGPU")),
            main_gpu=to_int(f.get("MainGPU")),
            use_mmap=(f.get("UseMmap") or "").rstrip('}"') or None,
            projector_path=f.get("ProjectorPath") or None,
        )
    ]
    state = _FA_REQUEST_STATE.get(fa.lower()) if fa else None
    if state is not None:  # B2 passes a resolved value; "Auto" is left to llama.cpp (§3.1)
        out.append(FlashAttention(n, t, raw, state, f"load request FlashAttention:{fa}"))
    return out


_FA_REQUEST_STATE = {"true": "enabled", "enabled": "enabled", "false": "disabled", "disabled": "disabled"}


def _estimate(msg: str, rest: str, level: str, n: int, t: datetime | None, raw: str) -> list[LogEvent] | None:
    """§4.2: ``msg=offload library=cuda layers.model=33 layers.offload=33 … memory.required.kv="1.0 GiB" …``."""
    library = slog_get(rest, "library")
    if library is None and msg.startswith("offload to "):
        library = msg[len("offload to ") :]
    offload = slog_get(rest, "layers.offload")
    if offload is None:
        offload = slog_get(rest, "layers.real")
    return [
        SchedulerEstimate(
            n,
            t,
            raw,
            library=library,
            layers_requested=to_int(slog_get(rest, "layers.requested")),
            layers_model=to_count(slog_get(rest, "layers.model")),
            layers_offload=to_count(offload),
            kv_bytes=size_bytes(slog_get(rest, "memory.required.kv")),
            full_bytes=size_bytes(slog_get(rest, "memory.required.full")),
            partial_bytes=size_bytes(slog_get(rest, "memory.required.partial")),
            weights_total_bytes=size_bytes(slog_get(rest, "memory.weights.total")),
            graph_full_bytes=size_bytes(slog_get(rest, "memory.graph.full")),
            graph_partial_bytes=size_bytes(slog_get(rest, "memory.graph.partial")),
            available_bytes=size_list(slog_get(rest, "memory.available")),
            allocations_bytes=size_list(slog_get(rest, "memory.required.allocations")),
        )
    ]


_ALLOC_COMPONENT = {"model weights": "weights", "kv cache": "kv", "compute graph": "compute"}
_DEVICE_SIZE_RE = re.compile(
    r' device=([^ "=]++) size="(\d++(?:\.\d++)?+) (' + "|".join(sorted(PLAIN_UNITS, key=len, reverse=True)) + r')"'
)


def _device_memory(msg: str, rest: str, level: str, n: int, t: datetime | None, raw: str) -> list[LogEvent] | None:
    """§4.3 memory summary: ``msg="kv cache" device=CUDA0 size="1.5 GiB"``; PR builds: ``buffer=`` / ``buffer_type=`` (corpus 054)."""
    m = _DEVICE_SIZE_RE.fullmatch(rest)
    if m is not None:  # fast path: exactly `` device=X size="N UNIT"``, read as below
        device, number, unit = m.groups()
        size = bytes_or_none(float(number) * PLAIN_UNITS[unit])
        if size is None:
            return None
        return [Allocation(n, t, raw, _ALLOC_COMPONENT[msg], device, size, "ollama")]
    device = (
        slog_get(rest, "device")
        or slog_get(rest, "buffer_type")
        or slog_get(rest, "buffer")
        or slog_get(rest, "backend")
    )
    nbytes = size_bytes(slog_get(rest, "size"))
    if device is None or nbytes is None:
        return None
    return [Allocation(n, t, raw, _ALLOC_COMPONENT[msg], device, nbytes, "ollama")]


def _offloaded(msg: str, rest: str, level: str, n: int, t: datetime | None, raw: str) -> list[LogEvent] | None:
    """Ollama engine ``ggml.go``: ``offloaded 29/37 layers to GPU`` (corpus 032, 054, 056)."""
    m = _OFFLOADED_RE.match(msg)
    if m is None:
        return None
    done, total = to_count(m.group(1)), to_count(m.group(2))
    if done is None or total is None:
        return None
    return [OffloadedLayers(n, t, raw, done, total)]


def _decision(msg: str, rest: str, level: str, n: int, t: datetime | None, raw: str) -> list[LogEvent] | None:
    """Scheduler load decisions (corpus 028, 030, 051)."""
    return [
        LoadDecision(
            n,
            t,
            raw,
            msg,
            model_blob=blob_of(slog_get(rest, "model") or slog_get(rest, "modelPath")),
            parallel=to_count(slog_get(rest, "parallel")),
            layers_total=to_count(slog_get(rest, '"model layers"')),
            layers_requested=to_int(slog_get(rest, "requested")),
        )
    ]


def _ready(msg: str, rest: str, level: str, n: int, t: datetime | None, raw: str) -> list[LogEvent] | None:
    """``llama runner started in 2.75 seconds`` / ``llama-server started in …`` / ``finished setting up runner`` model=…."""
    m = _SECONDS_RE.search(msg)
    blob = None
    if m is None:
        blob = blob_of(slog_get(rest, "model") or slog_get(rest, "runner.model"))
    return [RunnerReady(n, t, raw, to_float(m.group(1)) if m else None, blob)]


def _fa_decision(msg: str, rest: str, level: str, n: int, t: datetime | None, raw: str) -> list[LogEvent] | None:
    """§4.2, §4.6: ``enabling flash attention`` (v0.5.0+), ``model wants flash attention`` (v0.11.8–v0.12.3)."""
    return [FlashAttentionDecision(n, t, raw, "enabled", msg)]


def _fa_forced_off(msg: str, rest: str, level: str, n: int, t: datetime | None, raw: str) -> list[LogEvent] | None:
    """§3.1, §4.6: ``flash attention enabled but not supported by gpu|model``; ``disabling flash attention for gemma4 …``."""
    return [FlashAttentionForcedOff(n, t, raw, msg, "ollama")]


def _kv_fallback(msg: str, rest: str, level: str, n: int, t: datetime | None, raw: str) -> list[LogEvent] | None:
    """§3.2 warnings. ``kv cache type not supported by model type=""`` is Ollama's spurious one (fixed v0.11.11)."""
    requested = slog_get(rest, "type")
    if msg == "kv cache type not supported by model" and not requested:
        return None
    return [KvTypeFallback(n, t, raw, requested if requested else None, msg.strip())]


def _truncation(msg: str, rest: str, level: str, n: int, t: datetime | None, raw: str) -> list[LogEvent] | None:
    """§4.7: ``truncating input prompt limit=… prompt=… keep=… new=…`` (v0.4.0: ``numKeep``)."""
    keep = slog_get(rest, "keep")
    if keep is None:
        keep = slog_get(rest, "numKeep")
    return [
        Truncation(
            n,
            t,
            raw,
            to_count(slog_get(rest, "limit")),
            to_count(slog_get(rest, "prompt")),
            to_count(keep),
            to_count(slog_get(rest, "new")),
        )
    ]


def _messages_truncated(msg: str, rest: str, level: str, n: int, t: datetime | None, raw: str) -> list[LogEvent] | None:
    """§4.7: DEBUG ``truncating input messages which exceed context length truncated=N`` (N messages kept)."""
    return [ContextOverflow(n, t, raw, "messages", None, to_count(slog_get(rest, "truncated")))]


def _clamped(msg: str, rest: str, level: str, n: int, t: datetime | None, raw: str) -> list[LogEvent] | None:
    """§3.4, §4.4: ``requested context size too large for model num_ctx=… n_ctx_train=…`` (v0.15.5+)."""
    return [ContextClamped(n, t, raw, to_count(slog_get(rest, "num_ctx")), to_count(slog_get(rest, "n_ctx_train")))]


def _runner_ref(rest: str) -> tuple[str | None, int | None]:
    blob = blob_of(slog_get(rest, "runner.model") or slog_get(rest, "model") or slog_get(rest, "modelPath"))
    return blob, to_count(slog_get(rest, "runner.pid") or slog_get(rest, "pid"))


def _eviction(msg: str, rest: str, level: str, n: int, t: datetime | None, raw: str) -> list[LogEvent] | None:
    """§4.3, §4.8: the scheduler evicts a model to make room."""
    blob, pid = _runner_ref(rest)
    return [Eviction(n, t, raw, msg, blob, pid)]


def _unload(msg: str, rest: str, level: str, n: int, t: datetime | None, raw: str) -> list[LogEvent] | None:
    """§4.8: a runner goes away (``changing loaded model`` v0.1.28, ``gpu VRAM usage didn't recover``, DEBUG expiry)."""
    blob, pid = _runner_ref(rest)
    return [Unload(n, t, raw, msg, blob, pid)]


def _oom(msg: str, rest: str, level: str, n: int, t: datetime | None, raw: str) -> list[LogEvent] | None:
    """Memory refusals: ``model request too large for system`` (corpus 031), ``runtime OOM detected`` (C)."""
    return [Oom(n, t, raw, _with_error(msg, rest))]


def _load_failed(msg: str, rest: str, level: str, n: int, t: datetime | None, raw: str) -> list[LogEvent] | None:
    """Load failures: ``error starting llama server`` (corpus 009), ``error loading llama server``, ``Load failed`` (C)…"""
    reason = _with_error(msg, rest)
    return [LoadFailed(n, t, raw, reason, blob_of(rest))]


def _retry_evict(msg: str, rest: str, level: str, n: int, t: datetime | None, raw: str) -> list[LogEvent] | None:
    """C ``llama-server load failed; evicting all other models and retrying once``: a failed load, then an eviction."""
    return [LoadFailed(n, t, raw, msg, None), Eviction(n, t, raw, msg)]


def _with_error(msg: str, rest: str) -> str:
    err = slog_get(rest, "error") if "error=" in rest else None
    return f"{msg}: {err}" if err else msg


_PROMPT_PATHS = ("/api/chat", "/api/generate", "/v1/")
"""Paths whose HTTP 400 counts as a prompt over the context (``ContextOverflow`` ``http_400``, §4.7)."""


def _gin(body: str, n: int, raw: str) -> list[LogEvent]:
    """§4.9 gin access line (colours removed; latency as a Go duration)."""
    m = _GIN_RE.match(strip_ansi(body) if "\x1b" in body else body)
    if m is None:
        return []
    date, hms, status, latency, client, method, path = m.groups()
    when = go_log_time(date, hms)
    code = int(status)
    gin = GinRequest(n, when, raw, code, go_duration_s(latency), method, path, client)
    if code == 400 and path.startswith(_PROMPT_PATHS):
        return [gin, ContextOverflow(n, when, raw, "http_400", path.partition("?")[0])]
    return [gin]


EXACT: dict[str, Handler] = {
    "server config": _server_config,
    "starting llama server": _spawn,
    "starting runner": _spawn,
    "starting llama-server": _spawn,
    "starting llama runner": _spawn,
    "starting mlx runner subprocess": _spawn,
    "load": _load_request,
    "offload": _estimate,
    "model weights": _device_memory,
    "kv cache": _device_memory,
    "compute graph": _device_memory,
    "loading first model": _decision,
    "loading model": _decision,
    "loading model via llama-server": _decision,
    "finished setting up runner": _ready,
    "enabling flash attention": _fa_decision,
    "model wants flash attention": _fa_decision,
    "kv cache type not supported by model": _kv_fallback,
    "quantized kv cache requested but flash attention disabled": _kv_fallback,
    "OLLAMA_FLASH_ATTENTION must be enabled to use a quantized OLLAMA_KV_CACHE_TYPE": _kv_fallback,
    "unsupported OLLAMA_KV_CACHE_TYPE": _kv_fallback,
    "truncating input prompt": _truncation,
    "truncating input messages which exceed context length": _messages_truncated,
    "requested context size too large for model": _clamped,
    "changing loaded model": _unload,
    "gpu VRAM usage didn't recover within timeout": _unload,
    "timer expired, expiring to unload": _unload,
    "runner expired event received": _unload,
    "got lock to unload expired event": _unload,
    "sending an unloaded event": _unload,
    "stopping llama-server": _unload,
    "runner terminated and removed from list, blocking for VRAM recovery": _unload,
    "max runners achieved, unloading one to make room": _eviction,
    "found an idle runner to unload": _eviction,
    "resetting model to expire immediately to make room": _eviction,
    "waiting for pending requests to complete and unload to occur": _eviction,
    "evicting all other loaded models for OOM retry": _eviction,
    "model request too large for system": _oom,
    "model is too large for system memory": _oom,
    "runtime OOM detected; expiring loaded models to clear memory before next request": _oom,
    "error starting llama server": _load_failed,
    "error loading llama server": _load_failed,
    "Load failed": _load_failed,
    "failed to create server": _load_failed,
    "llama-server terminated": _load_failed,
    "memory layout cannot be allocated": _load_failed,
    "failed to commit memory for model": _load_failed,
    "llama-server startup failed with projector GPU offload; retrying with projector CPU offload": _load_failed,
    "llama-server load failed; evicting all other models and retrying once": _retry_evict,
}
"""Handlers by exact ``msg``."""

PREFIXED: tuple[tuple[str, Handler], ...] = (
    ("Listening on ", _listening),
    ("offload to ", _estimate),
    ("offloaded ", _offloaded),
    ("llama runner started in ", _ready),
    ("llama-server started in ", _ready),
    ("new model will fit in available VRAM", _decision),
    ("model requires more ", _eviction),
    ("llama-server model predicted to exceed available memory", _eviction),
    ("flash attention enabled but not supported by ", _fa_forced_off),
    ("disabling flash attention", _fa_forced_off),
    ("model only supports non-quantized cache types", _kv_fallback),
)
"""Handlers by ``msg`` prefix (messages with numbers or names inside)."""

_PREFIXES = tuple(p for p, _ in PREFIXED)


def _handler(msg: str) -> Handler | None:
    """The handler for ``msg``; None when no event models it (WARN/ERROR then fall back to UnknownWarning)."""
    handler = EXACT.get(msg)
    if handler is None and msg.startswith(_PREFIXES):
        for prefix, h in PREFIXED:
            if msg.startswith(prefix):
                return h
    return handler


def _dispatch(
    handler: Handler | None, msg: str, rest: str, level: str, n: int, t: datetime | None, raw: str, src: str | None
) -> list[LogEvent]:
    if handler is not None:
        events = handler(msg, rest, level, n, t, raw)
        if events is not None:
            return events
    if level == "WARN" or level == "ERROR" or level == "WARNING":
        return [UnknownWarning(n, t, raw, "WARN" if level == "WARNING" else level, msg, src)]
    return []


_WARN_LEVELS = frozenset(("WARN", "ERROR", "WARNING"))
_SLOG_HEAD_RE = re.compile(
    r'(?:time=([^ =]*+) )?level=([^ =]*+) (?:source=([^ =]*+) )?msg=(?:"([^"]*+)"(?<!\\")|(?!")([^ ]*+))'
)
"""The usual head of a slog record, read as :func:`parse_slog`'s general path reads it: the values before
``msg=`` hold no ``=`` (so this ``msg=`` is the first one), and a quoted message ends at the next quote,
which has no backslash before it (the general path then takes the text between the quotes as it is)."""


def parse_slog(body: str, n: int, text: str, fallback_time: Callable[[], datetime | None]) -> list[LogEvent]:
    """One slog text record (``time=… level=… source=… msg=… k=v…``).

    Args:
        body: The record without collector prefixes.
        n: Line number of the record.
        text: The whole logical line (becomes ``raw``).
        fallback_time: The wrapper's time, for records without ``time=``.
    """
    m = _SLOG_HEAD_RE.match(body)
    if m is not None:  # fast path: the usual head "time=… level=… source=… msg=…", read as below
        stamp, level, src, msg, bare = m.groups()
        if msg is None:
            msg = bare
        rest = body[m.end() :]
        handler = EXACT.get(msg)
        if handler is None and msg.startswith(_PREFIXES):
            handler = _handler(msg)
        if handler is None and level not in _WARN_LEVELS:
            return []
        t = parse_iso(stamp) if stamp is not None else fallback_time()
        raw = text if text.isprintable() else sanitize(text)
        if handler is not None:
            events = handler(msg, rest, "", n, t, raw)
            if events is not None:
                return events
        return _dispatch(None, msg, rest, level, n, t, raw, src)
    k = body.find("msg=")
    if k < 0:
        return []
    if body[k + 4 : k + 5] == '"':
        q = body.find('"', k + 5)
        if q > 0 and body[q - 1] != "\\":
            msg, rest = body[k + 5 : q], body[q + 1 :]
        else:
            e = quoted_end(body, k + 4)
            if e < 0:
                msg = unescape(body[k + 5 :])
                rest = ""
            else:
                msg = unescape(body[k + 5 : e - 1])
                rest = body[e:]
    else:
        e = body.find(" ", k + 4)
        if e < 0:
            msg, rest = body[k + 4 :], ""
        else:
            msg, rest = body[k + 4 : e], body[e:]
    handler = EXACT.get(msg)
    if handler is None and msg.startswith(_PREFIXES):
        handler = _handler(msg)
    if handler is None:
        level = _level(body, k)
        if level not in _WARN_LEVELS:
            return []
    if body.startswith("time="):
        te = body.find(" ")
        t = parse_iso(body[5:te] if te > 0 else body[5:])
    else:
        t = fallback_time()
    raw = sanitize(text)
    if handler is not None:
        events = handler(msg, rest, "", n, t, raw)
        if events is not None:
            return events
        level = _level(body, k)
    src = None
    si = body.find("source=", 0, k)
    if si >= 0:
        se = body.find(" ", si)
        src = body[si + 7 : se] if se > 0 else None
    return _dispatch(None, msg, rest, level, n, t, raw, src)


def _level(body: str, end: int) -> str:
    """The ``level=`` value of a slog record (searched before ``end``, the ``msg=`` position)."""
    li = body.find("level=", 0, end)
    if li < 0:
        return ""
    le = body.find(" ", li)
    return body[li + 6 : le] if le > 0 else body[li + 6 :]


def parse_go_log(body: str, n: int, text: str) -> list[LogEvent] | None:
    """One Go standard-logger record ``2024/06/02 18:43:45 routes.go:1007: INFO server config env=…``.

    Returns None when ``body`` is not such a record.
    """
    m = _GOLOG_RE.match(body)
    if m is None:
        return None
    level = m.group(4) or ""
    message = m.group(5)
    split = _GOLOG_SPLIT_RE.search(message)
    if split is not None:
        msg, rest = message[: split.start()], message[split.start() :]
    else:
        msg, rest = message, ""
    msg = msg.strip()
    handler = _handler(msg)
    if handler is None and level not in _WARN_LEVELS:
        return []
    return _dispatch(handler, msg, rest, level, n, go_log_time(m.group(1), m.group(2)), sanitize(text), m.group(3))


def parse_gin(body: str, n: int, text: str) -> list[LogEvent]:
    """One gin access line."""
    return _gin(body, n, text if text.isprintable() else sanitize(text))
