"""llama.cpp / ggml lines: ``function: text``, printed raw into Ollama's log.

The llama engine prints them in Eras A, B1 and B2; llama-server prints them in Era C
(docs/ollama-internals.md §4.0, §4.5, §4.6). The function prefix changed over the releases; each handler
lists the names it serves:

======================  =================================================================
Function prefix         Releases (docs/ollama-internals.md §4.5)
======================  =================================================================
llama_new_context_…     v0.1.32 – v0.5.x (``KV self size``, ``flash_attn = %d`` from v0.1.39)
llama_init_from_model   v0.6.x
llama_context           v0.7.0 – HEAD (``n_ctx_seq`` replaces ``n_ctx_per_seq`` in v0.13.4)
llama_kv_cache_init     v0.1.32 – v0.6.x (``KV buffer size``, ``kv_size = …, type_k = '…'``)
llama_kv_cache_unified  v0.7.0 – v0.12.3 (``size = … (… cells, … layers, …/… seqs)`` from v0.11.5)
llama_kv_cache          v0.12.4 – HEAD
sched_reserve           b10488 (Era C) compute buffers, ``Flash Attention was auto, set to …``
resolve_fused_ops       Era C ``Flash Attention enabled`` (Ollama issue #18123, corpus 063)
llm_load_tensors        ≤ 2025-01 weights; then ``load_tensors``
llama_model_load_…      2023 pre-GGUF (``n_ctx = 2048``, corpus 037/038)
======================  =================================================================
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime

from kvtop.logparse.events import (
    Allocation,
    ContextOverTraining,
    ContextParams,
    FlashAttention,
    FlashAttentionForcedOff,
    KvSummary,
    LoadFailed,
    LogEvent,
    ModelLoad,
    OffloadedLayers,
    Oom,
    UnknownWarning,
)
from kvtop.logparse.fit_events import DeviceFree, FitOverflow, FitPlan
from kvtop.logparse.memory_events import parse_draft_line
from kvtop.logparse.llamacpp_trouble import ALLOCATOR_FAILURES, TROUBLE_RE, may_be_trouble
from kvtop.logparse.values import MIB, blob_of, bytes_or_none, mib_bytes, scaled_bytes, to_count
from kvtop.logparse.wrappers import sanitize
from kvtop.core.bounds import INT64_MAX

TimeFn = Callable[[], "datetime | None"]
Handler = Callable[[str, str, int, str, TimeFn], "list[LogEvent] | None"]
"""``(func, rest, line_no, text, time) -> events``; None when the line is not one this grammar models."""

_BUFFER_RE = re.compile(r"\s*(\S+)\s+(KV|RS|model|compute|output|input)?\s*buffer size\s*=\s*(\d+(?:\.\d+)?) (MiB|MB)")
_BUFFER_COMPONENT = {
    "KV": "kv",
    "RS": "recurrent",
    "model": "weights",
    "compute": "compute",
    "output": "output",
    "input": "input",
    None: "weights",
}
_KV_SIZE_RE = re.compile(
    r"size\s*=\s*(\d+(?:\.\d+)?) MiB \(\s*(\d+) cells,\s*(\d+) layers,\s*(\d+)(?:/\s*(\d+))? seqs(?:\s+\d+ rs_seq)?\)"
    r"(?:,\s*([KR]) \((\w+)\):\s*(\d+(?:\.\d+)?) MiB,\s*([VS]) \((\w+)\):\s*(\d+(?:\.\d+)?) MiB)?"
)
"""``llama_kv_cache: size = … (C cells, L layers, S/T seqs), K (t): …, V (t): …`` and the recurrent state's
``llama_memory_recurrent: size = 0.15 MiB (2 cells, 4 layers, 2 seqs 0 rs_seq), R (f32): …, S (f32): …, P (f32): …``
of llama-server (Era C; fixture llama-server-runs/mamba-recurrent-np2.log; the ``P`` part is not read)."""
_KV_SELF_RE = re.compile(
    r"[Kk][Vv] self size\s*=\s*(\d+(?:\.\d+)?) (MiB|MB)(?:,\s*K \((\w+)\):\s*(\d+(?:\.\d+)?) MiB,\s*V \((\w+)\):\s*(\d+(?:\.\d+)?) MiB)?"
)
_KV_INIT_RE = re.compile(r"kv_size = (\d+), (?:offload = \d+, )?type_k = '(\w+)', type_v = '(\w+)', n_layer = (\d+)")
"""``llama_kv_cache_init: kv_size = 32768, offload = 1, type_k = 'f16', …`` (corpus 006) and the
``llama_kv_cache_unified: kv_size = 8192, type_k = 'f16', type_v = 'f16', n_layer = 28, can_shift = 1,
padding = 256`` of v0.7–v0.9, which has no ``offload =`` (ollama/ollama#10999)."""
_ISWA_RE = re.compile(r"creating\s+(non-SWA|SWA|DSA) KV cache, size = (\d+) cells")
"""``llama_kv_cache_iswa: creating non-SWA KV cache, size = N cells`` / ``creating     SWA …`` (five spaces), and
``llama_kv_cache_dsa_iswa: creating DSA KV cache`` / ``creating SWA KV cache`` (llama.cpp ``src/llama-kv-cache-*iswa.cpp``)."""
_PARAM_RE = re.compile(r"(\w+)\s*=\s*(\S+)")
_OVER_TRAIN_RE = re.compile(r"n_ctx_(?:pre_seq|per_seq|seq) \((\d+)\) ([<>]) n_ctx_train \((\d+)\)")
_FA_RESOLVED_RE = re.compile(r"Flash Attention (?:was auto, set to )?(enabled|disabled)")
_OFFLOADED_RE = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
_DEVICE_FREE_RE = re.compile(r"using device (\S+)\s+\((.*?)\)(?:\s*\([^)]*\))*\s+-\s+(\d+)\s+MiB free")
_FIT_RE = re.compile(
    r"-\s+(\S+)\s+\((.*)\):\s+(\d+)\s+layers\s+\(\s*(\d+)\s+overflowing\)(?:,\s*(\d+) MiB used,\s*(\d+) MiB free)?"
)
_FIT_PROJECTED_RE = re.compile(r"projected to use (\d+) MiB of (device|host) memory vs\. (\d+) MiB of")
_FIT_LEAVE_RE = re.compile(r"will leave (?:at least )?(-?\d+) >= (\d+) MiB of (free device|free|system) memory")
_FIT_SHORT_RE = re.compile(
    r"cannot (?:fulfill margin|meet free memory target) of (\d+) MiB(?: on all devices)?, need to"
    r" (?:reduce device memory by (\d+) MiB|use (\d+) MiB less)"
)
_FIT_DEVICE_RE = re.compile(r"-\s+(\S+)(?:\s+\((.*)\))?:\s+(\d+) total,\s+(\d+) used,\s+(\d+) (surplus|deficit)")
_LOADED_FROM_RE = re.compile(r"loaded meta data with .* from (.+?)(?: \(version [^)]*\))?\s*$")
_CTX_PARAMS = {
    "n_ctx": "n_ctx",
    "n_ctx_per_seq": "n_ctx_per_seq",
    "n_ctx_seq": "n_ctx_per_seq",
    "n_seq_max": "n_seq_max",
    "n_batch": "n_batch",
    "n_ubatch": "n_ubatch",
    "flash_attn": "flash_attn",
    "kv_unified": "kv_unified",
    "causal_attn": "causal_attn",
}
_FA_STATE = {
    "1": "enabled",
    "0": "disabled",
    "enabled": "enabled",
    "disabled": "disabled",
    "true": "enabled",
    "false": "disabled",
    "on": "enabled",
    "off": "disabled",
}


def _meta(n: int, text: str, time: TimeFn) -> tuple[int, datetime | None, str]:
    return n, time(), sanitize(text)


def _buffer(func: str, rest: str, n: int, text: str, time: TimeFn, default: str) -> list[LogEvent] | None:
    m = _BUFFER_RE.match(rest)
    if m is None:
        return None
    device, kind, number, _ = m.groups()
    component = _BUFFER_COMPONENT[kind] if kind is not None else default
    if func == "llama_memory_recurrent" and component == "kv":
        component = "recurrent"
    t = time()
    raw = text if text.isprintable() else sanitize(text)
    size = bytes_or_none(float(number) * MIB)  # mib_bytes(number): the number is unsigned
    if size is None:
        return None
    return [Allocation(n, t, raw, component, device, size, func)]


def _kv_cache(func: str, rest: str, n: int, text: str, time: TimeFn) -> list[LogEvent] | None:
    """KV caches: ``KV buffer size``, ``size = … (… cells …)``, ``KV self size``, ``kv_size = …``."""
    if "buffer size" in rest:
        return _buffer(func, rest, n, text, time, "kv")
    recurrent = func == "llama_memory_recurrent"
    if "cells" in rest:
        if rest.startswith("creating"):  # llama_kv_cache_iswa: creating [non-]SWA KV cache, size = N cells
            im = _ISWA_RE.match(rest)
            if im is None:
                return None
            return [
                KvSummary(*_meta(n, text, time), cells=to_count(im.group(2)), grammar=func, swa=im.group(1) == "SWA")
            ]
        m = _KV_SIZE_RE.search(rest)
        if m is None:
            return None
        k_type = v_type = None
        k_bytes = v_bytes = None
        if m.group(6) is not None:
            k_type, v_type = m.group(7), m.group(10)
            k_bytes, v_bytes = mib_bytes(m.group(8)), mib_bytes(m.group(11))
            recurrent = recurrent or m.group(6) == "R"
        return [
            KvSummary(
                *_meta(n, text, time),
                mib_bytes(m.group(1)),
                to_count(m.group(2)),
                to_count(m.group(3)),
                to_count(m.group(4)),
                to_count(m.group(5)) if m.group(5) else None,
                k_type,
                v_type,
                k_bytes,
                v_bytes,
                recurrent,
                func,
            )
        ]
    if "self size" in rest:
        return _kv_self(func, rest, n, text, time)
    if rest.startswith("kv_size"):
        m = _KV_INIT_RE.match(rest)
        if m is None:
            return None
        return [
            KvSummary(
                *_meta(n, text, time),
                None,
                to_count(m.group(1)),
                to_count(m.group(4)),
                None,
                None,
                m.group(2),
                m.group(3),
                None,
                None,
                False,
                func,
            )
        ]
    if "fail" in rest or "error" in rest:
        return _trouble(rest, n, text, time)
    return None


def _kv_self(func: str, rest: str, n: int, text: str, time: TimeFn) -> list[LogEvent] | None:
    """``KV self size  = 7168.00 MiB, K (f16): 3584.00 MiB, V (f16): 3584.00 MiB``; 2023 ``kv self size = 650.00 MB``."""
    m = _KV_SELF_RE.search(rest)
    if m is None:
        return None
    size = scaled_bytes(m.group(1), MIB)
    if m.group(3) is None:
        return [KvSummary(*_meta(n, text, time), size, grammar=func)]
    return [
        KvSummary(
            *_meta(n, text, time),
            size,
            None,
            None,
            None,
            None,
            m.group(3),
            m.group(5),
            mib_bytes(m.group(4)),
            mib_bytes(m.group(6)),
            False,
            func,
        )
    ]


def _context(func: str, rest: str, n: int, text: str, time: TimeFn) -> list[LogEvent] | None:
    """Context creation: parameters, ``KV self size``, compute/output buffers, flash-attention lines."""
    c0 = rest[:1]
    if c0 == "n" or c0 == "f" or c0 == "k" or c0 == "c":
        m = _PARAM_RE.match(rest)
        if m is None and c0 == "n" and " n_ctx_train (" in rest:
            over = _OVER_TRAIN_RE.match(rest)
            if over is not None:
                per_seq, train = to_count(over.group(1)), to_count(over.group(3))
                if per_seq is None or train is None:
                    return None
                if over.group(2) == ">":
                    return [ContextOverTraining(*_meta(n, text, time), per_seq, train, func)]
                # "< n_ctx_train": the full capacity will not be used; not a finding, but it says both numbers
                return [ContextParams(*_meta(n, text, time), n_ctx_per_seq=per_seq, grammar=func, n_ctx_train=train)]
        if m is not None:
            name, value = m.groups()
            field = _CTX_PARAMS.get(name)
            if field is None:
                return None
            t = time()
            raw = text if text.isprintable() else sanitize(text)
            if field == "flash_attn":
                out: list[LogEvent] = [ContextParams(n, t, raw, flash_attn=value, grammar=func)]
                state = _FA_STATE.get(value.lower())
                if state is not None:
                    out.append(FlashAttention(n, t, raw, state, f"{func}: flash_attn = {value}"))
                return out
            if field == "kv_unified" or field == "causal_attn" or not value.isdigit():
                return _context_param((n, t, raw), field, value, func)
            v = to_count(value)
            if v is None:
                return None
            # ContextParams(line_no, time, raw, n_ctx, n_ctx_per_seq, n_seq_max, n_batch, n_ubatch, ..., grammar)
            if field == "n_ctx":
                return [ContextParams(n, t, raw, v, None, None, None, None, None, None, None, func)]
            if field == "n_batch":
                return [ContextParams(n, t, raw, None, None, None, v, None, None, None, None, func)]
            if field == "n_ubatch":
                return [ContextParams(n, t, raw, None, None, None, None, v, None, None, None, func)]
            return _context_param((n, t, raw), field, value, func)
    if "buffer size" in rest:
        return _buffer(func, rest, n, text, time, "compute")
    if "self size" in rest:
        return _kv_self(func, rest, n, text, time)
    if "Flash Attention" in rest:
        m = _FA_RESOLVED_RE.search(rest)
        if m is not None:
            return [FlashAttention(*_meta(n, text, time), m.group(1), rest.strip())]
        return None
    if "forcing off" in rest:
        meta = _meta(n, text, time)
        reason = rest.strip()
        return [FlashAttentionForcedOff(*meta, reason), FlashAttention(*meta, "disabled", reason)]
    if "fail" in rest or "error" in rest or "requires" in rest:
        return _trouble(rest, n, text, time)
    return None


def _context_param(meta: tuple[int, datetime | None, str], field: str, value: str, func: str) -> list[LogEvent] | None:
    if field == "kv_unified":
        return [ContextParams(*meta, kv_unified=value, grammar=func)]
    if field == "causal_attn":
        return [ContextParams(*meta, causal_attn=value, grammar=func)]
    if not value.isdigit():
        return None
    v = to_count(value)
    if v is None:
        return None
    if field == "n_ctx":
        return [ContextParams(*meta, n_ctx=v, grammar=func)]
    if field == "n_ctx_per_seq":
        return [ContextParams(*meta, n_ctx_per_seq=v, grammar=func)]
    if field == "n_seq_max":
        return [ContextParams(*meta, n_seq_max=v, grammar=func)]
    if field == "n_batch":
        return [ContextParams(*meta, n_batch=v, grammar=func)]
    return [ContextParams(*meta, n_ubatch=v, grammar=func)]


def _tensors(func: str, rest: str, n: int, text: str, time: TimeFn) -> list[LogEvent] | None:
    """Weights: ``load_tensors:        CUDA0 model buffer size =   577.22 MiB``; ``offloaded 25/25 layers to GPU``;
    ``load_tensors: loading model tensors, this can take a while... (mmap = true)`` starts reading the model
    (a :class:`ModelLoad` without a path)."""
    if "buffer size" in rest:
        return _buffer(func, rest, n, text, time, "weights")
    if rest.startswith("loading model tensors"):
        return [ModelLoad(*_meta(n, text, time), None, None, func)]
    if rest.startswith("offloaded"):
        m = _OFFLOADED_RE.match(rest)
        if m is None:
            return None
        done, total = to_count(m.group(1)), to_count(m.group(2))
        if done is None or total is None:
            return None
        return [OffloadedLayers(*_meta(n, text, time), done, total)]
    if "fail" in rest or "error" in rest:
        return _trouble(rest, n, text, time)
    return None


def _fused_ops(func: str, rest: str, n: int, text: str, time: TimeFn) -> list[LogEvent] | None:
    """Era C: ``resolve_fused_ops: Flash Attention enabled`` (only the Flash Attention line)."""
    if not rest.startswith("Flash Attention"):
        return None
    m = _FA_RESOLVED_RE.match(rest)
    if m is None:
        return None
    return [FlashAttention(*_meta(n, text, time), m.group(1), f"{func}: {rest.strip()}")]


def _model_loader(func: str, rest: str, n: int, text: str, time: TimeFn) -> list[LogEvent] | None:
    """``llama_model_loader: loaded meta data with 26 key-value pairs and 995 tensors from PATH (version GGUF V3 (latest))``;
    the first line of its metadata dump (``Dumping metadata keys/values…``, ``- kv   0: …``) without a path."""
    if not rest.startswith("loaded meta data"):
        if rest.startswith(("Dumping", "- kv   0:")):
            return [ModelLoad(*_meta(n, text, time), None, None, func)]
        if rest.startswith(("-", "file")):
            return None
        if "fail" in rest or "error" in rest:
            return _trouble(rest, n, text, time)
        return None
    m = _LOADED_FROM_RE.match(rest)
    path = m.group(1) if m else None
    return [ModelLoad(*_meta(n, text, time), blob_of(path), path, func)]


def _print_info(func: str, rest: str, n: int, text: str, time: TimeFn) -> list[LogEvent] | None:
    """The model's description, printed once per model read: its first lines (``print_info: file format = GGUF V3
    (latest)``, ``print_info: arch = llama``; ``llm_load_print_meta: format = …`` before 2025) are a
    :class:`ModelLoad` without a path; the other lines are no event."""
    if rest.startswith(("file format", "arch ", "format ")):
        return [ModelLoad(*_meta(n, text, time), None, None, func)]
    return None


def _ancient_loader(func: str, rest: str, n: int, text: str, time: TimeFn) -> list[LogEvent] | None:
    """2023: ``llama.cpp: loading model from /…/blobs/sha256:e847…`` (corpus 037, 038)."""
    if not rest.startswith("loading model from "):
        return None
    path = rest[len("loading model from ") :].strip()
    return [ModelLoad(*_meta(n, text, time), blob_of(path), path, func)]


def _ancient_hparams(func: str, rest: str, n: int, text: str, time: TimeFn) -> list[LogEvent] | None:
    """2023: ``llama_model_load_internal: n_ctx      = 2048`` (the context size; corpus 037, 038)."""
    if not rest.startswith("n_ctx"):
        return None
    m = _PARAM_RE.match(rest)
    if m is None or m.group(1) != "n_ctx" or not m.group(2).isdigit():
        return None
    n_ctx = to_count(m.group(2))
    if n_ctx is None:
        return None
    return [ContextParams(*_meta(n, text, time), n_ctx=n_ctx, grammar=func)]


def _device(func: str, rest: str, n: int, text: str, time: TimeFn) -> list[LogEvent] | None:
    """``llama_model_load_from_file_impl: using device CUDA0 (NVIDIA …) (0000:01:00.0) - 15221 MiB free``."""
    if rest.startswith("using device"):
        m = _DEVICE_FREE_RE.match(rest)
        if m is None:
            return None
        free_mib = to_count(m.group(3))
        if free_mib is None or free_mib > INT64_MAX // MIB:  # the size must stay below 2**63 too
            return None
        return [DeviceFree(*_meta(n, text, time), m.group(1), m.group(2), free_mib * MIB)]
    if "fail" in rest or "error" in rest:
        return _trouble(rest, n, text, time)
    return None


def _fit(func: str, rest: str, n: int, text: str, time: TimeFn) -> list[LogEvent] | None:
    """Era C fit pass: ``common_params_fit_impl:   - ROCm0 (AMD …): 25 layers ( 5 overflowing), 11065 MiB used,
    1036 MiB free`` (:class:`FitOverflow`) and the summary lines of :class:`FitPlan`."""
    if "overflowing" in rest:
        m = _FIT_RE.search(rest)
        if m is None:
            return None
        layers, overflowing = to_count(m.group(3)), to_count(m.group(4))
        if layers is None or overflowing is None:
            return None
        used, free = m.group(5), m.group(6)
        return [
            FitOverflow(
                *_meta(n, text, time),
                m.group(1),
                layers,
                overflowing,
                mib_bytes(used) if used else None,
                mib_bytes(free) if free else None,
            )
        ]
    if rest.startswith("projected to use"):
        pm = _FIT_PROJECTED_RE.match(rest)
        if pm is None:
            return None
        return [
            FitPlan(
                *_meta(n, text, time),
                pm.group(2),
                projected_bytes=mib_bytes(pm.group(1)),
                free_bytes=mib_bytes(pm.group(3)),
            )
        ]
    if rest.startswith("will leave"):
        lm = _FIT_LEAVE_RE.match(rest)
        if lm is None:
            return None
        left = int(lm.group(1))
        return [
            FitPlan(
                *_meta(n, text, time),
                "host" if lm.group(3) == "system" else "device",
                left_bytes=_signed_mib(left),
                target_bytes=mib_bytes(lm.group(2)),
            )
        ]
    if rest.startswith("cannot"):
        sm = _FIT_SHORT_RE.match(rest)
        if sm is None:
            return None
        return [
            FitPlan(
                *_meta(n, text, time),
                target_bytes=mib_bytes(sm.group(1)),
                shortfall_bytes=mib_bytes(sm.group(2) or sm.group(3)),
            )
        ]
    if "surplus" in rest or "deficit" in rest:
        dm = _FIT_DEVICE_RE.search(rest)
        if dm is None:
            return None
        margin = _signed_mib(int(dm.group(5)) * (-1 if dm.group(6) == "deficit" else 1))
        return [FitPlan(*_meta(n, text, time), device=dm.group(1), margin_bytes=margin)]
    return None


def _signed_mib(mib: int) -> int | None:
    """``mib`` MiB in bytes, negative allowed; None beyond a 64-bit byte count."""
    if abs(mib) > INT64_MAX // MIB:
        return None
    return mib * MIB


def _errors_only(func: str, rest: str, n: int, text: str, time: TimeFn) -> list[LogEvent] | None:
    """Functions whose only interesting lines are failures (allocators, context/model creation)."""
    return _trouble(rest, n, text, time)


def _panic(func: str, rest: str, n: int, text: str, time: TimeFn) -> list[LogEvent] | None:
    """Go ``panic: unable to create llama context`` (B llama engine, corpus 023) and other panics."""
    found = _trouble(rest, n, text, time)
    if found:
        return found
    return [UnknownWarning(*_meta(n, text, time), "PANIC", rest.strip(), None)]


def _trouble(rest: str, n: int, text: str, time: TimeFn) -> list[LogEvent] | None:
    """An out-of-memory or load-failure line in free text; None if it is neither."""
    if not may_be_trouble(rest):
        return None
    m = TROUBLE_RE.search(rest)
    if m is None:
        return None
    meta = _meta(n, text, time)
    reason = rest.strip()
    oom = m.group("oom")
    if oom is not None:
        return [Oom(*meta, reason, oom in ALLOCATOR_FAILURES)]
    return [LoadFailed(*meta, reason, blob_of(rest))]


def free_text(body: str, n: int, text: str, time: TimeFn) -> list[LogEvent]:
    """A line with no known prefix: ``CUDA error: out of memory``, ``GGML_ASSERT: …`` (corpus 005)."""
    found = _trouble(body, n, text, time)
    if found:
        return found
    if body.startswith("GGML_ASSERT"):
        return [UnknownWarning(*_meta(n, text, time), "ERROR", sanitize(body.strip()), None)]
    return []


def _draft(func: str, rest: str, n: int, text: str, time: TimeFn) -> list[LogEvent] | None:
    """``common_speculative_init_result: loading draft model '<path>'`` (``memory_events.DraftModelLoad``)."""
    found = parse_draft_line(rest, n, sanitize(text), time)
    return [*found] if found is not None else None


HANDLERS: dict[str, Handler] = {}
"""Handlers by llama.cpp function prefix."""
for _names, _handler in (
    (
        (
            "llama_kv_cache_init llama_kv_cache_unified llama_kv_cache llama_kv_cache_iswa llama_kv_cache_unified_iswa "
            "llama_kv_cache_dsa_iswa llama_kv_cache_hybrid llama_memory_recurrent llama_memory_hybrid llama_memory_hybrid_iswa"
        ),
        _kv_cache,
    ),
    ("llama_new_context_with_model llama_init_from_model llama_context sched_reserve graph_reserve", _context),
    ("llm_load_tensors load_tensors", _tensors),
    ("resolve_fused_ops", _fused_ops),
    ("llama_model_loader", _model_loader),
    ("print_info llm_load_print_meta", _print_info),
    ("llama.cpp", _ancient_loader),
    ("llama_model_load_internal", _ancient_hparams),
    ("llama_model_load_from_file_impl llama_model_load_from_file llama_load_model_from_file", _device),
    ("common_params_fit_impl llama_params_fit_impl common_fit_params llama_params_fit", _fit),
    (
        (
            "ggml_backend_cuda_buffer_type_alloc_buffer ggml_backend_metal_buffer_type_alloc_buffer "
            "ggml_backend_cpu_buffer_type_alloc_buffer ggml_backend_alloc_ctx_tensors_from_buft ggml_gallocr_reserve_n "
            "ggml_gallocr_needs_realloc llama_init_from_gpt_params common_init_from_params common_init_result llama_model_load "
            "alloc_compute_meta ggml_vk_create_buffer ggml_metal_buffer_type_alloc_buffer"
        ),
        _errors_only,
    ),
    ("panic", _panic),
    ("common_speculative_init_result", _draft),
):
    for _name in _names.split():
        HANDLERS[_name] = _handler

QUIET = frozenset(
    [
        "llm_load_vocab",
        "load",
        "ggml_metal_init",
        "ggml_metal_device_init",
        "ggml_metal_library_init",
        "ggml_cuda_init",
        "ggml_vulkan",
        "ggml_backend_metal_log_allocated_size",
        "ggml_metal_log_allocated_size",
        "clip_model_loader",
        "clip_ctx",
        "llama_model_load_from_file_impl",
        "set_abort_callback",
        "create_memory",
        "init_tokenizer",
        "validate_override",
    ]
)
"""Chatty prefixes whose lines are never events (skipped without the free-text scan)."""


def parse_llamacpp(body: str, n: int, text: str, time: TimeFn) -> list[LogEvent] | None:
    """One ``function: text`` line; None when ``body`` has no function prefix this module knows."""
    idx = body.find(": ")
    if idx <= 0:
        return None
    func = body[:idx]
    handler = HANDLERS.get(func)
    if handler is None:
        return None
    return handler(func, body[idx + 2 :], n, text, time) or []
