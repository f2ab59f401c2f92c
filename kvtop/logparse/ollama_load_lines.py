"""The handlers of Ollama's scheduler and load lines: a runner's spawn, the load request, the memory
estimate and summary, the load decision and readiness, flash attention and KV cache type, eviction,
unload, OOM and load failure (docs/ollama-internals.md §3.1, §3.2, §4.2–§4.4, §4.6, §4.8, §7).

Each is a ``Handler`` of :mod:`kvtop.logparse.ollama_lines`, which dispatches the ``msg`` text to them.
"""

from __future__ import annotations

import re
from datetime import datetime

from kvtop.logparse.cmdline import parse_cmd
from kvtop.logparse.events import (
    Allocation,
    Eviction,
    FlashAttention,
    FlashAttentionDecision,
    FlashAttentionForcedOff,
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
    Unload,
)
from kvtop.logparse.values import (
    PLAIN_UNITS,
    blob_of,
    bytes_or_none,
    quoted_value,
    size_bytes,
    size_list,
    slog_get,
    slog_pairs,
    to_count,
    to_float,
    to_int,
)

_REQUEST_RE = re.compile(
    r"[{ ](Operation|Parallel|BatchSize|FlashAttention|KvSize|KvCacheType|NumThreads|GPULayers|NumGPU"
    r"|MainGPU|UseMmap|ProjectorPath):(\S*)"
)
_OFFLOADED_RE = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
_SECONDS_RE = re.compile(r"started in (\d+(?:\.\d+)?) seconds")


def spawn(msg: str, rest: str, level: str, n: int, t: datetime | None, raw: str) -> list[LogEvent] | None:
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


def load_request(msg: str, rest: str, level: str, n: int, t: datetime | None, raw: str) -> list[LogEvent] | None:
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


def estimate(msg: str, rest: str, level: str, n: int, t: datetime | None, raw: str) -> list[LogEvent] | None:
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
            layers_split=_int_list(slog_get(rest, "layers.split")),
            gpu_overhead_bytes=size_bytes(slog_get(rest, "memory.gpu_overhead")),
            projector_weights_bytes=size_bytes(slog_get(rest, "projector.weights")),
            projector_graph_bytes=size_bytes(slog_get(rest, "projector.graph")),
        )
    ]


def _plain_or_size(text: str | None) -> int | None:
    """``15813967872`` (bytes, corpus 051's ``available=``) or ``"14.7 GiB"``."""
    if text is not None and text.isdigit():
        return to_count(text)
    return size_bytes(text)


def _int_list(text: str | None) -> tuple[int, ...]:
    """``11,11,11,11`` -> ``(11, 11, 11, 11)`` (``layers.split``, corpus 001); ``()`` when absent or not all counts."""
    if not text:
        return ()
    counts = tuple(to_count(part) for part in text.split(","))
    return () if any(c is None for c in counts) else tuple(c for c in counts if c is not None)


_ALLOC_COMPONENT = {"model weights": "weights", "kv cache": "kv", "compute graph": "compute"}
_DEVICE_SIZE_RE = re.compile(
    r' device=([^ "=]++) size="(\d++(?:\.\d++)?+) (' + "|".join(sorted(PLAIN_UNITS, key=len, reverse=True)) + r')"'
)


def device_memory(msg: str, rest: str, level: str, n: int, t: datetime | None, raw: str) -> list[LogEvent] | None:
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


def offloaded(msg: str, rest: str, level: str, n: int, t: datetime | None, raw: str) -> list[LogEvent] | None:
    """Ollama engine ``ggml.go``: ``offloaded 29/37 layers to GPU`` (corpus 032, 054, 056)."""
    m = _OFFLOADED_RE.match(msg)
    if m is None:
        return None
    done, total = to_count(m.group(1)), to_count(m.group(2))
    if done is None or total is None:
        return None
    return [OffloadedLayers(n, t, raw, done, total)]


def decision(msg: str, rest: str, level: str, n: int, t: datetime | None, raw: str) -> list[LogEvent] | None:
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
            gpu=slog_get(rest, "gpu"),
            available_bytes=_plain_or_size(slog_get(rest, "available")),
            required_bytes=size_bytes(slog_get(rest, "required")),
        )
    ]


def ready(msg: str, rest: str, level: str, n: int, t: datetime | None, raw: str) -> list[LogEvent] | None:
    """``llama runner started in 2.75 seconds`` / ``llama-server started in …`` / ``finished setting up runner`` model=…."""
    m = _SECONDS_RE.search(msg)
    blob = None
    if m is None:
        blob = blob_of(slog_get(rest, "model") or slog_get(rest, "runner.model"))
    return [RunnerReady(n, t, raw, to_float(m.group(1)) if m else None, blob)]


def fa_decision(msg: str, rest: str, level: str, n: int, t: datetime | None, raw: str) -> list[LogEvent] | None:
    """§4.2, §4.6: ``enabling flash attention`` (v0.5.0+), ``model wants flash attention`` (v0.11.8–v0.12.3)."""
    return [FlashAttentionDecision(n, t, raw, "enabled", msg)]


def fa_forced_off(msg: str, rest: str, level: str, n: int, t: datetime | None, raw: str) -> list[LogEvent] | None:
    """§3.1, §4.6: ``flash attention enabled but not supported by gpu|model``; ``disabling flash attention for gemma4 …``."""
    return [FlashAttentionForcedOff(n, t, raw, msg, "ollama")]


def kv_fallback(msg: str, rest: str, level: str, n: int, t: datetime | None, raw: str) -> list[LogEvent] | None:
    """§3.2 warnings. ``kv cache type not supported by model type=""`` is Ollama's spurious one (fixed v0.11.11)."""
    requested = slog_get(rest, "type")
    if msg == "kv cache type not supported by model" and not requested:
        return None
    return [KvTypeFallback(n, t, raw, requested if requested else None, msg.strip())]


def _runner_ref(rest: str) -> tuple[str | None, int | None]:
    blob = blob_of(slog_get(rest, "runner.model") or slog_get(rest, "model") or slog_get(rest, "modelPath"))
    return blob, to_count(slog_get(rest, "runner.pid") or slog_get(rest, "pid"))


def eviction(msg: str, rest: str, level: str, n: int, t: datetime | None, raw: str) -> list[LogEvent] | None:
    """§4.3, §4.8: the scheduler evicts a model to make room."""
    blob, pid = _runner_ref(rest)
    return [Eviction(n, t, raw, msg, blob, pid)]


def unload(msg: str, rest: str, level: str, n: int, t: datetime | None, raw: str) -> list[LogEvent] | None:
    """§4.8: a runner goes away (``changing loaded model`` v0.1.28, ``gpu VRAM usage didn't recover``, DEBUG expiry)."""
    blob, pid = _runner_ref(rest)
    return [Unload(n, t, raw, msg, blob, pid)]


def oom(msg: str, rest: str, level: str, n: int, t: datetime | None, raw: str) -> list[LogEvent] | None:
    """Memory refusals: ``model request too large for system`` (corpus 031), ``runtime OOM detected`` (C)."""
    return [Oom(n, t, raw, _with_error(msg, rest))]


def load_failed(msg: str, rest: str, level: str, n: int, t: datetime | None, raw: str) -> list[LogEvent] | None:
    """Load failures: ``error starting llama server`` (corpus 009), ``error loading llama server``, ``Load failed`` (C)…"""
    reason = _with_error(msg, rest)
    return [LoadFailed(n, t, raw, reason, blob_of(rest))]


def retry_evict(msg: str, rest: str, level: str, n: int, t: datetime | None, raw: str) -> list[LogEvent] | None:
    """C ``llama-server load failed; evicting all other models and retrying once``: a failed load, then an eviction."""
    return [LoadFailed(n, t, raw, msg, None), Eviction(n, t, raw, msg)]


def _with_error(msg: str, rest: str) -> str:
    err = slog_get(rest, "error") if "error=" in rest else None
    return f"{msg}: {err}" if err else msg
