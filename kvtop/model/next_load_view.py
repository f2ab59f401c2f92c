"""The next-load forecast for the faces: built from what they read (``forecast_model``), written in
sentences (``next_load_lines``, the same on every face) and as JSON (``next_load_json``).

The rules are in ``model.next_load`` (docs/ollama-scheduler.md). Pure: no I/O, no clock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Final

from kvtop.model import plan
from kvtop.model.known import NOT_KNOWN, Known, marked, setting_text
from kvtop.model.next_load import (
    FOREVER_S,
    NextLoad,
    Resident,
    forecast,
    launch_settings,
    resident_from_ps,
    scheduler_rules,
)
from kvtop.model.preflight import ServerDefaults
from kvtop.model.snapshots import PsModel, ShowInfo

__all__ = ["forecast_model", "next_load_cell", "next_load_json", "next_load_lines", "with_busy"]


def forecast_model(
    name: str,
    spec: plan.ModelSpec | None,
    defaults: ServerDefaults,
    *,
    version: str | None,
    env: Mapping[str, str] | None,
    loaded: Sequence[PsModel],
    free_bytes: int | None,
    gpu_count: int | None,
    now_s: float,
    show: ShowInfo | None = None,
    blobs: Mapping[str, str] | None = None,
    busy: Mapping[str, Known[bool]] | None = None,
    num_ctx: Known[int] | None = None,
    engine: plan.Engine = "llama-server",
) -> NextLoad:
    """The forecast of a load of ``name`` (``spec``: its planner model; ``show``: its ``/api/show``
    for the Modelfile's num_ctx and its capabilities) on a server of ``version`` with ``env`` (None:
    not readable, Ollama's defaults), ``defaults`` (``preflight.server_defaults``), ``loaded`` (``/api/ps``),
    ``free_bytes`` free GPU memory now, ``gpu_count`` GPUs. ``blobs``: loaded name → weights blob;
    ``busy``: loaded name → requests in flight; ``num_ctx``: a request's own (``--ctx``)."""
    rules = scheduler_rules(version, env, gpu_count)
    launch = launch_settings(
        defaults,
        version,
        architecture=spec.architecture if spec is not None else None,
        context_train=spec.context_train if spec is not None else None,
        show=show,
        num_ctx=num_ctx,
    )
    residents = [
        resident_from_ps(
            row, now_s=now_s, rules=rules, blob=(blobs or {}).get(row.name), busy=(busy or {}).get(row.name)
        )
        for row in loaded
    ]
    return forecast(name, launch, residents, rules, free_bytes=free_bytes, spec=spec, engine=engine)


REASON_WORDS: Final[Mapping[str, str]] = {
    "max_loaded": "OLLAMA_MAX_LOADED_MODELS reached",
    "memory": "to make room",
    "reload": "itself, loaded at other settings",
}


def _keep_text(k: Known[float]) -> str:
    v = k.value
    if v is None:
        return "?"
    if v == FOREVER_S:
        return marked("forever", k.source)
    return marked(f"{v / 60:.0f}m" if v >= 60 else f"{v:.0f}s", k.source)


def next_load_lines(n: NextLoad, ibytes: Any) -> list[str]:
    """The forecast in sentences, the same on every face: the launch line, one line per eviction,
    the verdict line. ``ibytes`` writes a size (the face's units)."""
    lc = n.launch
    lines = [
        f"loads with num_ctx {setting_text(lc.num_ctx)} × {setting_text(lc.parallel)} slot(s)"
        f" = {lc.runner_ctx if lc.runner_ctx is not None else '?'}, KV {setting_text(lc.cache_type)},"
        f" flash attention {setting_text(lc.flash_attention)};"
        f" max loaded {setting_text(n.rules.max_loaded)}"
    ]
    if n.verdict == "loaded":
        return lines + ["already loaded at these settings: nothing loads, nothing is unloaded"]
    need = marked(n.need_bytes, "estimated", size=True)
    free = marked(n.free_bytes, "reported", size=True)
    lines.append(f"needs {need} on the GPU; free now {free}")
    for e in n.evicted:
        wait = " (in use: the load waits for its requests)" if e.waits else ""
        lines.append(f"unloads {e.name}: {REASON_WORDS[e.reason]}, frees {ibytes(e.vram_bytes)}{wait}")
    if not n.evicted:
        lines.append("unloads nothing")
    where = {
        "fits": "fits: 100% GPU",
        "marginal": "marginal: within the estimate's error of the limit",
        "spills": "spills: " + (n.fit.text() if n.fit is not None else "part on the CPU"),
        "fails": f"fails: {lc.problem}",
        "unknown": "fit not known",
    }.get(n.verdict, n.verdict)
    if n.threshold_bytes is not None and n.verdict in ("fits", "marginal"):
        pct = round(n.rules.fit_fraction * 100)
        where += f" (limit {pct}% of {ibytes(n.free_after_bytes)} free = {ibytes(n.threshold_bytes)})"
    stays = ", ".join(n.stays) if n.stays else "nothing else"
    lines.append(f"{where}; stays loaded: {stays}")
    return lines


def next_load_json(n: NextLoad) -> dict[str, Any]:
    """The forecast as JSON (``kvtop plan --json`` ``next_load``, ``plan --all --json`` per model); bytes exact."""
    lc = n.launch
    return {
        "num_ctx": lc.num_ctx.value,
        "num_ctx_source": lc.num_ctx.source,
        "parallel": lc.parallel.value,
        "parallel_source": lc.parallel.source,
        "runner_ctx": lc.runner_ctx,
        "kv_type": lc.cache_type.value,
        "kv_type_source": lc.cache_type.source,
        "flash_attention": lc.flash_attention.value,
        "flash_attention_source": lc.flash_attention.source,
        "max_loaded": n.rules.max_loaded.value,
        "max_loaded_source": n.rules.max_loaded.source,
        "fit_fraction": n.rules.fit_fraction,
        "need_bytes": n.need_bytes,
        "need_source": "estimated" if n.need_bytes is not None else None,
        "free_bytes": n.free_bytes,
        "free_after_bytes": n.free_after_bytes,
        "threshold_bytes": n.threshold_bytes,
        "evicted": [
            {"name": e.name, "reason": e.reason, "waits": e.waits, "vram_bytes": e.vram_bytes} for e in n.evicted
        ],
        "stays": list(n.stays),
        "verdict": n.verdict,
        "processor": n.fit.processor if n.fit is not None else None,
        "problem": lc.problem,
        "notes": list(n.notes),
    }


def with_busy(residents: Sequence[Resident], busy: Mapping[str, Known[bool]]) -> list[Resident]:
    """``residents`` with ``in_use`` replaced where ``busy`` (by name) says."""
    return [dataclasses.replace(r, in_use=busy[r.name]) if r.name in busy else r for r in residents]


def next_load_cell(n: NextLoad | None) -> str:
    """The ``NEXT LOAD`` cell of ``plan --all`` and the server view's pre-flight: ``loaded``; else
    ``reloads at other settings`` (the model itself, loaded at settings a default request does not
    ask for), what it unloads (``(waits)``: in use, the load waits for its requests) or ``unloads
    nothing``, then the fit after the unloads (``fits``, ``spills``…); ``?`` when not forecast."""
    if n is None:
        return NOT_KNOWN
    if n.verdict == "loaded":
        return "loaded"
    parts = []
    if any(e.reason == "reload" for e in n.evicted):  # loaded at other settings: unloaded and loaded again
        parts.append("reloads at other settings")
    gone = [e.name + (" (waits)" if e.waits else "") for e in n.evicted if e.reason != "reload"]
    if gone or not parts:
        parts.append("unloads " + ", ".join(gone) if gone else "unloads nothing")
    return ", ".join(parts) + f"; {n.verdict}"
