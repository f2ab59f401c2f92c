"""Load-state rules: what the running loads got against what was asked.

* ``kv_type_not_applied``: the KV cache type requested (Ollama's warning, the runner's command
  line, the load request, the server config) is not the one the runner allocated.
* ``flash_attention_off``: flash attention is off although requested, or needed by a quantized
  cache.
* ``context_over_training``: num_ctx above the model's training context, from the row (a state
  rule) or from the runner's own line for a recent load no row covers.

Current loads are judged from their rows; other loads count while recent
(``Thresholds.event_window_s``) and not replaced by a newer load of the same weights.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from kvtop.logparse.events import (
    ContextOverTraining,
    FlashAttentionForcedOff,
    KvTypeFallback,
    LoadRequest,
    RunnerStarted,
)
from kvtop.logparse.load_build import Load
from kvtop.model import kv
from kvtop.model.alerts.context import Ctx, current_types
from kvtop.model.alerts.log_scan import Timed
from kvtop.model.alerts.fa import fa_forced
from kvtop.model.alerts.spill import context_fix
from kvtop.model.alerts.text import delta, ib, short_blob
from kvtop.model.alerts.types import Alert, Fix
from kvtop.model.ladder import go_bool

if TYPE_CHECKING:  # annotations only: the rules read the state, the state never imports the rules
    from kvtop.model.views import ModelView

__all__ = ["context_over_training", "load_alerts", "runner_over_training_alerts"]

_FA_ON: Final = frozenset({"on", "true", "1", "enabled", "t", "yes"})
_UNQUANTIZED: Final = frozenset({"f16", "f32", "bf16"})
_BOOL_FALSE: Final = frozenset({"0", "f", "false"})
# Ollama's warnings that the model itself cannot use the requested cache type (docs/ollama-internals.md
# §3.2: ``kv cache type not supported by model``, gpt-oss's ``model only supports non-quantized cache
# types``): flash attention does not make such a type apply, so no fix may offer it for that type.
_UNSUPPORTED_RE: Final = re.compile(r"not supported by model|only supports non-quantized", re.IGNORECASE)


# --------------------------------------------------------------------------------------------
# Context above the training context


def context_over_training(ctx: Ctx, view: ModelView) -> Alert | None:
    """``context_over_training`` of a loaded row: its num_ctx above the training context from
    ``/api/show``, else from the runner's own line of its load; the fix is the training context."""
    num_ctx, train = view.context.value, view.context_train
    where = ""
    if not train:  # /api/show did not give <arch>.context_length: the runner's line may
        line = ctx.over_training_line(view.load)
        if line is not None:
            train, where = line.n_ctx_train, f"; the runner said so (log line {line.line_no})"
    if num_ctx is None or not train or num_ctx <= train:
        return None
    text = (
        f"num_ctx {num_ctx} is above the training context {train} ({view.context.source}): past {train} tokens"
        f" the model degrades, and the extra cache is allocated anyway{where}"
    )
    fix = context_fix(ctx, view, train, f"none: the model was trained on {train} tokens")
    return Alert(
        "context_over_training", "warning", view.name, ctx.now, text, (fix,), f"context_over_training:{view.name}"
    )


def runner_over_training_alerts(ctx: Ctx, current: Mapping[int, ModelView]) -> list[Alert]:
    """``context_over_training`` from the runner's line, for loads no loaded row covers (the state
    rule handles the loaded ones): a recent load, or one with no timestamps that is still current."""
    found: dict[str | None, tuple[Timed, ContextOverTraining]] = {}
    for t in ctx.recent:
        e = t.event
        if not isinstance(e, ContextOverTraining):
            continue
        owner = ctx.owner(e.line_no)
        if owner is not None and id(owner) in current:
            continue  # a loaded model's load: the state rule has the row's numbers
        if not ctx.recent_enough(t.ts, ctx.th.event_window_s) or ctx.superseded(owner):
            continue
        model = ctx.name_for_blob(owner.model_blob) if owner is not None else None
        found[model or (owner.model_blob if owner is not None else None)] = (t, e)
    out: list[Alert] = []
    for ident, (t, e) in found.items():
        owner = ctx.owner(e.line_no)
        model = ctx.name_for_blob(owner.model_blob) if owner is not None else None
        name = model or (short_blob(ident) if ident else None)
        text = (
            f"{name + ': ' if name else ''}the runner ran num_ctx {e.n_ctx_per_seq} per slot, above the training"
            f" context {e.n_ctx_train} (log line {e.line_no}): past {e.n_ctx_train} tokens the model degrades"
        )
        fix = Fix(
            f"num_ctx {e.n_ctx_train}",
            "the training context: nothing past it is of use",
            None,
            f"none: the model was trained on {e.n_ctx_train} tokens",
        )
        out.append(
            Alert(
                "context_over_training", "warning", model, t.ts, text, (fix,), f"context_over_training:{ident or '-'}"
            )
        )
    return out


# --------------------------------------------------------------------------------------------
# Per-load settings: KV cache type and flash attention


def _requested_kv(ctx: Ctx, load: Load) -> tuple[str | None, str]:
    """The KV cache type asked for this load, and where that is written."""
    for e in load.events:
        if isinstance(e, KvTypeFallback) and e.requested:
            return e.requested, "Ollama's warning"
    for e in ctx.launch_events(load):
        if isinstance(e, RunnerStarted):
            value = e.cache_type_k or e.kv_cache_type
            if value:
                return (
                    value,
                    f"runner command line --cache-type-k {value}"
                    if e.cache_type_k
                    else f"runner command line --kv-cache-type {value}",
                )
        elif e.kv_cache_type:
            return e.kv_cache_type, f"load request KvCacheType:{e.kv_cache_type}"
    env = ctx.config_before(load.first_line)
    value = env.get("OLLAMA_KV_CACHE_TYPE", "").strip().strip("\"'") if env is not None else ""
    if value:
        return value, f"OLLAMA_KV_CACHE_TYPE={value} (server config)"
    return None, ""


def _allocated_kv(ctx: Ctx, load: Load) -> str | None:
    if load.kv_type_k:
        return kv.normalize_cache_type(load.kv_type_k) or load.kv_type_k
    if any(isinstance(e, KvTypeFallback) for e in load.events):
        return "f16"
    for e in ctx.launch_events(load):
        if isinstance(e, LoadRequest) and e.kv_cache_type == "":
            return "f16"  # B2: an empty KvCacheType is the f16 default (docs/ollama-internals.md §3.2)
        if (
            isinstance(e, RunnerStarted)
            and e.complete
            and e.cmd is not None
            and e.era in ("A", "B1", "C")
            and not (e.cache_type_k or e.kv_cache_type)
        ):
            return "f16"  # a complete command line without a cache type flag: the runner's default
    return None


def _fa_requested(ctx: Ctx, load: Load) -> str | None:
    """Why flash attention was expected on for this load, or None."""
    if any(isinstance(e, FlashAttentionForcedOff) for e in load.events):
        return "it was enabled and then forced off"
    if load.flash_attention_requested and load.flash_attention_requested.strip().lower() in _FA_ON:
        return f"requested ({load.flash_attention_requested})"
    env = ctx.config_before(load.first_line)
    value = env.get("OLLAMA_FLASH_ATTENTION", "").strip().strip("\"'") if env is not None else ""
    # "false" is also what the server config prints when the variable is unset (docs/ollama-internals.md §3.1)
    if value and value.lower() not in _BOOL_FALSE:
        return f"OLLAMA_FLASH_ATTENTION={value} (server config)"
    service = ctx.service_env()
    if service is not None and go_bool(service.get("OLLAMA_FLASH_ATTENTION")):
        return f"OLLAMA_FLASH_ATTENTION={service.get('OLLAMA_FLASH_ATTENTION')} ({service.source})"
    return None


def _fa_fix(ctx: Ctx, load: Load, needs: str | None) -> Fix | None:
    """What turns flash attention on for ``load`` (None when nothing in the environment can)."""
    if fa_forced(load):
        if needs is None:
            return None
        return Fix(
            "OLLAMA_KV_CACHE_TYPE=f16",
            "the model or GPU cannot use flash attention, and a quantized cache needs it",
            None,
            "f16 cache: about twice the KV memory of q8_0; server-wide, restart Ollama",
        )
    if _fa_requested(ctx, load) is not None:
        return None  # already asked for and still off: the runner decided (GPU or model support)
    raw = (load.flash_attention_requested or "").strip()
    if raw.lower() in ("off", "false", "0", "disabled"):
        detail = f"it is off on purpose now ({raw})"
    elif needs:
        detail = "unset means auto, which a quantized cache does not count as enabled (v0.13.4+)"
    else:
        detail = "unset means auto: the runner decides"
    return Fix("OLLAMA_FLASH_ATTENTION=1", detail, None, "server-wide, restart Ollama")


def load_alerts(ctx: Ctx, current: Mapping[int, ModelView]) -> list[Alert]:
    """``kv_type_not_applied`` and ``flash_attention_off``: KV type and flash attention of the
    current loads (state) and of recent other loads."""
    live = ctx.views if ctx.live else ()
    candidates: list[tuple[Load, ModelView | None]] = [(v.load, v) for v in live if v.load is not None]
    seen_blobs = {v.model_blob for v in live if v.load is not None}
    for load in ctx.loads:
        if (
            id(load) in current
            or ctx.superseded(load)
            or (load.model_blob is not None and load.model_blob in seen_blobs)
        ):
            continue
        if ctx.recent_enough(ctx.load_time(load), ctx.th.event_window_s):
            candidates.append((load, None))
    out: list[Alert] = []
    for load, view in candidates:
        model = view.name if view is not None else ctx.name_for_blob(load.model_blob)
        # the alert names its model (every view prints it before the message); a load no row names says which
        who = (
            ""
            if model
            else (short_blob(load.model_blob) if load.model_blob else f"a load (log line {load.first_line})") + ": "
        )
        key = model or load.model_blob or f"line{load.first_line}"
        since = ctx.now if view is not None else ctx.load_time(load)
        requested, where = _requested_kv(ctx, load)
        req_norm = kv.normalize_cache_type(requested) if requested is not None else None
        fallback = next((e for e in load.events if isinstance(e, KvTypeFallback)), None)
        # the model itself cannot use the type: flash attention would not make it apply (§3.2)
        unsupported = fallback is not None and _UNSUPPORTED_RE.search(fallback.reason) is not None
        needs = req_norm if req_norm is not None and req_norm not in _UNQUANTIZED and not unsupported else None
        allocated = _allocated_kv(ctx, load)
        if requested is not None and allocated is not None and req_norm != allocated:
            if fallback is not None and unsupported:
                reason = (
                    f"{fallback.reason} — this model cannot use a {req_norm or requested} cache;"
                    f" flash attention would not change that, it keeps {allocated}"
                )
            elif fallback is not None:
                reason = fallback.reason
            elif req_norm is None:
                reason = f"{requested!r} is not a cache type llama.cpp accepts"
            elif load.flash_attention == "disabled" and needs:
                reason = f"flash attention is off ({load.flash_attention_reason or 'resolved off'})"
            else:
                reason = "the log gives no reason"
            text = f"{who}KV cache {allocated} allocated, {requested} requested ({where}): {reason}"
            fixes: list[Fix] = []
            fa_fix = _fa_fix(ctx, load, needs) if needs and load.flash_attention == "disabled" else None
            if fa_fix is not None:
                fixes.append(fa_fix)
            if view is not None and req_norm is not None and not unsupported:
                fixes.extend(_type_saving(ctx, view, req_norm))
            out.append(
                Alert("kv_type_not_applied", "warning", model, since, text, tuple(fixes), f"kv_type_not_applied:{key}")
            )
        if load.flash_attention == "disabled":
            why = _fa_requested(ctx, load)
            if why is not None or needs:
                parts = [why] if why else []
                if needs:
                    parts.append(f"the {needs} cache needs it")
                text = (
                    f"{who}flash attention is off although {' and '.join(parts)}:"
                    f" {load.flash_attention_reason or 'resolved off'}"
                )
                fa_fix = _fa_fix(ctx, load, needs)
                out.append(
                    Alert(
                        "flash_attention_off",
                        "warning",
                        model,
                        since,
                        text,
                        (fa_fix,) if fa_fix is not None else (),
                        f"flash_attention_off:{key}",
                    )
                )
    return out


def _type_saving(ctx: Ctx, view: ModelView, cache_type: str) -> list[Fix]:
    """What ``cache_type`` would change in the model's KV cache: the new size is the formula's
    (``~`` estimated), scaled by what the runner really allocated against the formula at the
    current types when the log gives the allocation (so the saving is measured from the KV
    figure the table shows, not from a second estimate of it)."""
    lay = ctx.layout(view)
    c, p = view.context.value, view.parallel.value
    if lay is None or c is None or p is None:
        return []
    k, v, fa = current_types(view)
    try:
        formula_now = kv.kv_allocation(lay, c, p, k, v, flash_attention=fa).total_bytes
        new = kv.kv_allocation(lay, c, p, cache_type, flash_attention=True).total_bytes
    except ValueError as exc:
        return [Fix(f"OLLAMA_KV_CACHE_TYPE={cache_type}", f"llama.cpp refuses it for this model: {exc}", False, "")]
    now, allocated = formula_now, view.memory.kv.value
    if allocated is not None and formula_now > 0:
        now, new = allocated, round(new * allocated / formula_now)
    return [
        Fix(
            f"OLLAMA_KV_CACHE_TYPE={cache_type} once it applies",
            f"KV ~{ib(new)} (~{delta(new - now)})",
            None,
            "what the requested type would change",
        )
    ]
