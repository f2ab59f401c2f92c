"""The ``kvtop inspect-log --json`` document: one load, one event and the whole document as JSON
(the corpus oracles' shape, ``tests/fixtures/logs/expected/README``), and the KV coverage check of
a load's per-device KV lines against its total.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kvtop.logparse.events import (
    ContextOverflow,
    Eviction,
    FlashAttentionForcedOff,
    KvTypeFallback,
    LoadFailed,
    LogEvent,
    Oom,
    RequestTiming,
    PromptRejected,
    Truncation,
    Unload,
)
from kvtop.logparse.load_build import COMPONENTS, Load, is_cpu_device
from kvtop.logparse.load_grouping import _group

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
    elsewhere = sorted(
        {d for part, per in memory.items() if part != "kv" for d in per if d not in kv and not is_cpu_device(d)}
    )
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
        "fit": load.fit.to_json() if load.fit is not None else None,
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
    elif isinstance(event, ContextOverflow):
        out.update(form=event.form, path=event.path, messages_kept=event.messages_kept)
    elif isinstance(event, KvTypeFallback):
        out.update(requested=event.requested, reason=event.reason)
    elif isinstance(event, RequestTiming):
        out.update(
            prompt_tokens=event.prompt_tokens,
            prompt_cached_tokens=event.prompt_cached_tokens,
            prompt_tps=event.prompt_tps,
            eval_tokens=event.eval_tokens,
            eval_tps=event.eval_tps,
            slot=event.slot,
            task=event.task,
        )
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
