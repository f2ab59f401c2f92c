"""Plain-text and JSON renderings of the state for ``kvtop --once`` (no terminal UI).

The JSON schema is documented in docs/json.md ("--once --json") and is stable: later
versions add fields, never rename or remove them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.cells import cell_len

from kvtop import __version__
from kvtop.model.gpu import ModelGpu, gpu_json, gpu_status_line, model_gpu_json, model_gpu_usage
from kvtop.model.alerts import alert_json
from kvtop.model.ctx_advice import advice_for, advice_json, advice_line
from kvtop.model.placement_reason import placement_for, placement_json
from kvtop.model.queue import queue_json, queue_summary
from kvtop.model.server_view import server_json
from kvtop.model.known import SOURCE_LEGEND, units_note
from kvtop.model.ledger import ledger_json, ledger_text, model_ledger
from kvtop.model.views import AppState, ModelView

JSON_SCHEMA_VERSION = 1


def model_json(v: ModelView, usage: ModelGpu | None = None, state: AppState | None = None) -> dict[str, Any]:
    """One model as the ``--once --json`` schema describes it (bytes as integers, null when unknown); with
    ``state``, its ``ctx_advice`` (``model.ctx_advice``: what num_ctx the traffic needs) and ``placement``
    (``model.placement_reason``: where its load landed and why), else null."""
    m = v.memory
    return {
        "name": v.name,
        "digest": v.digest,
        "size": v.size_bytes,
        "size_vram": v.size_vram_bytes,
        "processor": v.processor,
        "context_length": v.context.value,
        "parallel": v.parallel.value,
        "kv_type": v.kv_type.value,
        "flash_attention": v.flash_attention.value,
        "memory": {"weights": m.weights.value, "kv": m.kv.value, "compute": m.compute.value, "source": m.source},
        "kv_bytes_per_token": v.kv_bytes_per_token,
        "expires_at": v.expires_at.isoformat() if v.expires_at else None,
        "until": v.until,
        "expired": v.expired,
        "cpu_percent": v.cpu_percent,
        "sources": {
            "context_length": v.context.source,
            "parallel": v.parallel.source,
            "kv_type": v.kv_type.source,
            "flash_attention": v.flash_attention.source,
            "weights": m.weights.source,
            "kv": m.kv.source,
            "compute": m.compute.source,
        },
        "kv_estimate_unavailable": v.kv_unavailable if v.kv_estimate is None else None,
        "spilled": v.spilled,
        "cloud": v.cloud,
        **model_gpu_json(usage),
        "decode_tokens_per_second": v.decode_tps.value,
        "decode_tokens_per_second_source": v.decode_tps.source,
        "differences": list(v.differences),
        "engine": v.engine.value,
        "engine_source": v.engine.source,
        "runner": _runner_json(v),
        "ctx_advice": advice_json(advice_for(state, v)) if state is not None else None,
        "placement": placement_json(placement_for(state, v)) if state is not None else None,
        "ledger": None if v.cloud else ledger_json(model_ledger(v, usage)),  # model/ledger.py
    }


def _runner_json(v: ModelView) -> dict[str, Any] | None:
    """The runner process and its endpoints as this machine reads them; None when none was found."""
    r, ep = v.local.process, v.local.endpoints
    if r is None and ep is None:
        return None
    out: dict[str, Any] = {"pid": r.pid if r else ep.pid if ep else None, "note": v.local.note}
    if r is not None:
        out.update({"kind": r.kind, "era": r.era, "port": r.port, "requested": r.flags or None})
    if ep is not None:
        props = ep.props
        out["props"] = (
            None
            if props is None
            else {
                "n_ctx_per_slot": props.n_ctx_per_slot,
                "total_slots": props.total_slots,
                "build_info": props.build_info,
            }
        )
        out["slots"] = [
            {"id": s.id, "n_ctx": s.n_ctx, "busy": s.is_processing, "n_tokens": s.n_tokens, "n_decoded": s.n_decoded}
            for s in ep.slots
        ]
        out["error"] = ep.error
    return out


def service_json(state: AppState) -> dict[str, Any] | None:
    """The environment of the ``ollama serve`` that serves this host (the service rung): the one
    whose ``OLLAMA_HOST`` says it listens on this host's port, else the parents of this host's
    runners, else — when neither can be told — every server on this machine, each with the port it
    listens on. None when no server process is visible; secrets are masked at the source."""
    from kvtop.model.ladder import RunnerIndex, listen_port

    procs = state.procs
    if procs is None or not procs.servers:
        return None
    index = RunnerIndex(procs, None, state.host_url)
    chosen = [index.server] if index.server is not None else []
    if not chosen:
        parents = {v.local.process.server_pid for v in state.models if v.local.process is not None}
        chosen = [srv for srv in procs.servers if srv.pid in parents] or list(procs.servers)
    servers = []
    for srv in chosen:
        env = srv.env
        servers.append(
            {
                "pid": srv.pid,
                "listen_port": listen_port(env) if env is not None and env.readable else None,
                "source": env.source if env else None,
                "error": env.error if env else "not read",
                "env": dict(env.values) if env is not None else {},
            }
        )
    return {"servers": servers, "identified": index.server is not None}


def state_json(state: AppState) -> dict[str, Any]:
    """The whole ``--once --json`` object."""
    snap = state.ollama
    usage = model_gpu_usage(state.gpu, state.procs, state.models)
    return {
        "schema": JSON_SCHEMA_VERSION,
        "kvtop_version": __version__,
        "host": state.host_url,
        "reachable": bool(snap and snap.reachable),
        "error": snap.error if snap else "no poll made",
        "version": snap.version if snap else None,
        "taken_at": snap.taken_at if snap else None,
        "models": [model_json(v, usage.get((v.name, v.digest)), state) for v in state.models]
        if snap and snap.reachable
        else [],
        **gpu_json(state.gpu, state.procs, state.models),
        "alerts": [alert_json(a) for a in state.alerts],
        "past_alerts": [alert_json(a) for a in state.past_alerts],
        "changes": [c.to_json() for c in state.changes],  # what changed: model/changes.py
        "queue": queue_json(state.queue),
        "service": service_json(state),
        "server": server_json(state, _log_now(state)),
    }


def _log_now(state: AppState) -> Any:
    """The sample's time as the log writes it (naive, in the log's zone), for requests per minute."""
    from datetime import datetime

    snap = state.ollama
    if snap is None:
        return None
    return datetime.fromtimestamp(snap.taken_at, tz=state.naive_tz).replace(tzinfo=None)


def _bytes(n: int | None) -> str:
    from kvtop.ui.format import ibytes  # formatting helpers only, no Textual import

    return ibytes(n)


def alert_lines(state: AppState) -> list[str]:
    """``ALERT <severity> <kind> <model>: <message>`` and its fixes, most severe first; then the
    alerts about a model no longer loaded (``state.past_alerts``), their model followed by
    ``(no longer loaded)``."""
    from kvtop.ui.format import safe

    out: list[str] = []
    past = set(state.past_alerts)
    for a in (*state.alerts, *state.past_alerts):
        model = f" {safe(a.model, 60)}{' (no longer loaded)' if a in past else ''}" if a.model else ""
        out.append(f"ALERT {a.severity} {a.kind}{model}: {safe(a.message, 1000)}")
        for fix in a.fixes:
            verdict = {True: "fits", False: "does not fit", None: "fit not known"}[fix.fits]
            out.append(f"  fix: {safe(fix.action, 200)} — {safe(fix.detail, 400)} ({verdict}; {safe(fix.cost, 400)})")
    return out


def _vram_ram(v: ModelView) -> str:
    """``5.0 GiB+1.2 GiB``: a model's VRAM, then its system RAM (``model.placement.vram_ram``,
    marked by source); ``?`` when not known, empty for a cloud model."""
    from kvtop.model.placement import vram_ram
    from kvtop.ui.format import size_text

    if v.cloud:
        return ""
    vram, ram = vram_ram(v)
    if vram.value is None or ram.value is None:
        return "?"
    return f"{size_text(vram)}+{size_text(ram)}"


def state_text(state: AppState, *, hints: Sequence[str] = ()) -> str:
    """The models table as plain aligned text, with a header line and a legend; for an
    unreachable server, why and ``hints`` (the way forward, ``model.hints``), one a line."""
    from kvtop.ui.format import context_text, safe, safe_name, setting_text, size_text

    snap = state.ollama
    lines: list[str] = []
    if snap is None or not snap.reachable:
        lines.append(f"kvtop: {state.host_url}: unreachable: {safe((snap.error if snap else None) or 'no poll made')}")
        lines.extend(f"  {hint}" for hint in hints)
        return "\n".join(lines) + "\n"
    lines.append(
        f"kvtop {__version__} — {state.host_url} — Ollama {safe(snap.version or '?')}"
        f" — {len(state.models)} model{'s' if len(state.models) != 1 else ''} loaded"
    )
    # while a model is spilled, VRAM+RAM after SIZE: its VRAM, then its system RAM (PROCESSOR gives
    # the same split CPU first, as `ollama ps` prints it)
    spill = any(v.spilled for v in state.models)
    engines = any(v.engine.known for v in state.models)  # RUNNER: llama.cpp / mlx (/api/ps 0.40+, or the runner's argv)
    # the dashboard's column order (its MEMORY column is WEIGHTS KV COMPUTE here), ollama ps's words
    header = [
        "NAME",
        "ID",
        "SIZE",
        *(["VRAM+RAM"] if spill else []),
        "WEIGHTS",
        "KV",
        "COMPUTE",
        "CONTEXT",
        "PROCESSOR",
        "FLASH ATTN",
        "KV TYPE",
        *(["RUNNER"] if engines else []),
        "UNTIL",
    ]
    rows = [header]
    for v in state.models:
        m = v.memory
        rows.append(
            [
                safe_name(v.name, 40),
                safe(v.short_id, 12),
                _bytes(v.size_bytes),
                *([_vram_ram(v)] if spill else []),
                size_text(m.weights),
                size_text(m.kv),
                size_text(m.compute),
                context_text(v),
                "cloud" if v.cloud else v.processor,
                setting_text(v.flash_attention),
                setting_text(v.kv_type),
                *([safe(setting_text(v.engine), 20)] if engines else []),
                v.until,
            ]
        )
    widths = [max(cell_len(r[i]) for r in rows) for i in range(len(header))]
    for r in rows:  # pad by terminal cells, so CJK and emoji names keep the columns aligned
        lines.append("  ".join(cell + " " * (widths[i] - cell_len(cell)) for i, cell in enumerate(r)).rstrip())
    lines.append(f"{SOURCE_LEGEND}  {units_note()}")
    queue = queue_summary(state.queue)
    if queue is not None:
        lines.append(f"QUEUE {safe(queue, 400)}")
    for v in state.models:
        for d in v.differences:
            lines.append(f"NOTE {safe_name(v.name, 40)}: {safe(d, 300)}")
    lines.extend(ctx_advice_lines(state))
    lines.extend(ledger_lines(state))
    lines.extend(alert_lines(state))
    lines.extend(gpu_text_lines(state))
    return "\n".join(lines) + "\n"


def ledger_lines(state: AppState) -> list[str]:
    """``LEDGER <model>: …``, one line per model whose runner log lists its memory (``model.ledger``): every part
    per device with its mark, then the runner's measured GPU memory, the parts on its GPUs, and the remainder."""
    from kvtop.model.ledger import state_ledgers
    from kvtop.ui.format import safe, safe_name

    out: list[str] = []
    for (name, _), ledger in state_ledgers(state).items():
        if ledger.from_log:
            out.append(f"LEDGER {safe_name(name, 40)}: {safe(ledger_text(ledger), 600)}")
    return out


def ctx_advice_lines(state: AppState) -> list[str]:
    """``NUM_CTX <model>: …``: what num_ctx the traffic needs (``model.ctx_advice.advice_line``), one line per
    loaded model whose log shows requests or cut prompts."""
    from kvtop.ui.format import safe, safe_name

    out: list[str] = []
    for v in state.models:
        a = advice_for(state, v)
        if a is not None and (a.distribution is not None or a.cuts):
            out.append(f"NUM_CTX {safe_name(v.name, 40)}: {safe(advice_line(a), 1000)}")
    return out


def gpu_text_lines(state: AppState) -> list[str]:
    """The GPU status, one line per GPU and one per process on it (``--once`` plain text)."""
    from kvtop.model.gpu import gpu_views
    from kvtop.ui.format import ibytes, safe

    lines = [safe(gpu_status_line(state.gpu))]
    for v in gpu_views(state.gpu, state.procs, state.models):
        d = v.device
        name = f"GPU {d.index} {safe(d.name or d.uuid or '?', 40)}"
        if d.error:
            lines.append(f"{name}: {safe(d.error, 200)}")
            continue
        used = (
            d.memory_total_bytes - d.memory_free_bytes
            if d.memory_total_bytes is not None and d.memory_free_bytes is not None
            else d.memory_used_bytes
        )
        shared = " (shares system RAM)" if d.unified_memory else " (VRAM+GTT)" if d.memory_pool == "vram+gtt" else ""
        lines.append(
            # the GPU panel's and the memory map's form (kvtop.ui.widgets.gpu_panel)
            f"{name}{shared}: {ibytes(used)}/{ibytes(d.memory_total_bytes)} used · {ibytes(d.memory_free_bytes)} free"
            f", util {d.gpu_util_percent if d.gpu_util_percent is not None else '?'}%"
            f", {d.temperature_c if d.temperature_c is not None else '?'}°C"
            f", {d.power_draw_mw // 1000 if d.power_draw_mw is not None else '?'} W"
        )
        for p in v.processes:
            what = p.model or p.command or p.name or "?"
            lines.append(
                f"  PID {p.pid:<8} {ibytes(p.gpu_memory_bytes):>10}  {p.kind:<7} {safe(p.user or '?', 16):<8} "
                f"{safe(what, 80)}" + (f"  ({safe(p.note, 80)})" if p.note else "")
            )
        if d.memory_note:
            lines.append(f"  {safe(d.memory_note, 200)}")
        if v.note:
            lines.append(f"  {safe(v.note, 160)}")
    return lines
