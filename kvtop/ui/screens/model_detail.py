"""Detail view of one model: every number with its source, and the KV arithmetic."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from kvtop.model.known import NOT_KNOWN_WORDS, SOURCE_WORDS, Known
from kvtop.model.views import AppState, ModelView
from kvtop.ui.format import exact_bytes, ibytes, safe, size_text
from kvtop.model.gpu import gpu_status_line, model_gpu_usage
from kvtop.model.ledger import COMPONENT_WORDS, DEVICE_WORDS, HOST, Ledger, Measure, state_ledger
from kvtop.ui.widgets.gpu_panel import gpu_detail_rows
from kvtop.ui.widgets.hanging import Hanging
from kvtop.ui.widgets.placement_section import append_placement


def _src(k: Known[Any]) -> str:
    """The source in words (``model.known.SOURCE_WORDS``): ``[estimated]``, ``[Ollama default]``."""
    return f"[{SOURCE_WORDS.get(k.source, k.source)}]" if k.source else ""


def _size(k: Known[int]) -> str:
    """A size with its mark and exact bytes (``~3.5 GiB (3,758,096,384 B)``), as every screen marks it."""
    return NOT_KNOWN_WORDS if k.value is None else size_text(k, exact=True)


def _row(out: Text, label: str, value: str, source: str = "", note: str = "") -> None:
    out.append(f"  {label:<20}", style="bold")
    out.append(value)
    if source:
        out.append(f"  {source}", style="italic")
    if note:
        out.append(f"\n  {'':<20}{safe(note, 200)}", style="dim")
    out.append("\n")


def _slot_rows(out: Text, v: ModelView) -> None:
    """Busy / total slots (``/slots`` or the runner log) and the prompt being processed."""
    use = v.slots
    if use is None:
        return
    src = f"[{use.source}]" if use.source else ""
    if use.busy is None:
        _row(out, "slots busy", "not known", "", use.note)
    else:
        total = f" of {use.total}" if use.total is not None else ""
        per = f", {use.n_ctx_per_slot:,} cells each" if use.n_ctx_per_slot else ""
        _row(out, "slots busy", f"{use.busy}{total}{per}", src, use.note)
    p = use.prefill
    if p is not None:
        tokens = ""
        if p.done_tokens is not None:
            tokens = (
                f"{p.done_tokens:,}" + (f" of {p.total_tokens:,}" if p.total_tokens is not None else "") + " tokens"
            )
        pct = f"{p.percent}%" if p.percent is not None else "in progress"
        if p.source == "runner":
            _row(
                out,
                "prefill",
                f"in progress ({p.done_tokens:,} tokens in the slot so far)"
                if p.done_tokens is not None
                else "in progress",
                "[runner]",
                f"slot {p.slot}: busy, nothing generated yet (/slots); the prompt's length is only in the runner log",
            )
        else:
            _row(
                out,
                "prefill",
                f"{pct}" + (f" ({tokens})" if tokens else ""),
                "[estimated]",
                f"slot {p.slot if p.slot is not None else '?'}, runner log line {p.line_no}",
            )


def _queue_row(out: Text, v: ModelView, state: AppState) -> None:
    """For a model whose every slot is busy (``QueueView.full_models``): a new request would wait,
    with the server's queue (``model.queue.queue_short``) when requests wait already."""
    from kvtop.model.queue import queue_short

    queue = state.queue
    if queue is None or v.name not in queue.full_models:
        return
    _row(
        out,
        "queue",
        "every slot busy: a new request would wait",
        "",
        f"on this server: {queue_short(queue)}" if queue_short(queue) else "",
    )


def _local_rows(out: Text, v: ModelView) -> None:
    """The runner process (requested), its endpoints (runner) and the server environment (service)."""
    if v.cloud:
        return
    local = v.local
    out.append("\nRunner process and server environment\n", style="bold underline")
    _row(
        out,
        "runner engine",
        safe(v.engine.value, 40) if v.engine.value else NOT_KNOWN_WORDS,
        _src(v.engine),
        v.engine.note,
    )
    r = local.process
    if r is None:
        _row(out, "runner process", "not found", "", local.note)
    else:
        _row(
            out,
            "runner process",
            f"PID {r.pid}" + (f", user {safe(r.user, 32)}" if r.user else "") + f", {r.kind}",
            "",
            f"Ollama {r.era}" + (f", port {r.port}" if r.port else ""),
        )
        flags = r.flags
        _row(
            out,
            "requested",
            safe(flags, 200) if flags else "nothing about memory on its command line",
            "[requested]" if flags else "",
            "" if flags else "v0.11.5–v0.24 runners get their settings over /load: only the server log shows them",
        )
    ep = local.endpoints
    if ep is not None:
        if ep.props is not None:
            p = ep.props
            parts = []
            if p.n_ctx_per_slot:
                parts.append(f"n_ctx {p.n_ctx_per_slot:,} per slot")
            if p.total_slots:
                parts.append(f"{p.total_slots} slot{'s' if p.total_slots != 1 else ''}")
            if p.build_info:
                parts.append(f"build {safe(p.build_info, 40)}")
            _row(out, "GET /props", ", ".join(parts) or "answered", "[runner]", f"http://127.0.0.1:{ep.port}/props")
        elif ep.props_error:
            _row(out, "GET /props", "no answer", "", ep.props_error)
        if ep.metrics:
            shown = ", ".join(
                f"{safe(k.removeprefix('llamacpp:'), 40)} {v:,.6g}" for k, v in sorted(ep.metrics.items())[:8]
            )
            _row(
                out, "GET /metrics", shown, "[runner]", f"http://127.0.0.1:{ep.port}/metrics (the runner has --metrics)"
            )
        if ep.error is None:
            for slot in ep.slots:
                fill = slot.fill
                if fill is not None and slot.n_tokens is not None and slot.n_ctx:
                    tokens = f"{slot.n_tokens:,} of {slot.n_ctx:,} tokens in its cache ({fill:.0%})"
                elif slot.id_task is None:
                    tokens = "empty (no request served yet)"
                else:
                    tokens = "context fill not listed"
                _row(
                    out,
                    f"slot {slot.id}",
                    ("busy, " if slot.is_processing else "idle, ") + tokens,
                    "[runner]",
                    f"{slot.n_decoded:,} tokens generated so far for task {slot.id_task}"
                    if slot.is_processing and slot.n_decoded is not None and slot.id_task is not None
                    else "",
                )
        else:
            _row(out, "GET /slots", "no answer", "", ep.error)
    if v.decode_tps.source == "runner" and v.decode_tps.value is not None:
        _row(out, "decode", f"{v.decode_tps.value:,.1f} tok/s", "[runner]", v.decode_tps.note)
    env = local.env
    if env is None:
        _row(out, "server environment", "not known", "", "no ollama serve process visible on this machine")
    elif not env.readable:
        _row(out, "server environment", "not readable", "", env.error or "")
    else:
        values = dict(env.values)
        n = sum(1 for k in values if k.startswith("OLLAMA_"))
        _row(
            out,
            "server environment",
            (f"{n} OLLAMA_* set" if n else "no OLLAMA_* set")
            + (f", {len(values) - n} other" if len(values) > n else ""),
            "[service]",
            (env.source or "") + (f"; {env.error}" if env.error else ""),
        )
        for key, val in values.items():
            _row(out, "", f"{safe(key, 40)}={safe(val, 120)}")


def _ledger_rows(out: Text, ledger: Ledger) -> None:
    """The memory ledger (``model.ledger``): every listed part per device with its source, then what NVML measures
    of the runner and the unexplained remainder (measured − listed), shown even when negative, zero or unknown."""
    origin = "the runner log, per device" if ledger.from_log else "/api/ps and kvtop's formulas (no runner log load)"
    out.append("\nMemory ledger", style="bold underline")
    out.append(f"  {origin}\n", style="dim")
    for device in ledger.devices():
        where = DEVICE_WORDS.get(device, device)
        out.append(f"  {safe(where, 40)}\n", style="bold")
        for r in ledger.on(device):
            _row(
                out,
                f"  {COMPONENT_WORDS[r.component]}",
                _size(Known(r.bytes, r.source)),
                _src(Known(r.bytes, r.source)),
                r.note,
            )
        m = ledger.measure(device)
        if m is not None and device != HOST:
            _measure_rows(out, m, "  ")
    if not ledger.rows:
        _row(out, "  (nothing listed)", "", "", "neither the runner log nor /api/ps breaks this model's memory down")
    for component in ledger.absent:
        _row(out, f"  {COMPONENT_WORDS[component]}", "not in the log", "", "the runner has one; no line gave its size")
    for m in ledger.measures:
        if m.scope in ("GPUs", HOST):
            out.append(f"  {'all GPUs of the runner' if m.scope == 'GPUs' else 'host RAM'}\n", style="bold")
            _measure_rows(out, m, "  ")


def _measure_rows(out: Text, m: Measure, indent: str) -> None:
    if m.listed_bytes or m.remainder_bytes is not None:
        _row(
            out,
            f"{indent}listed",
            exact_bytes(m.listed_bytes),
            "",
            "the rows above" if m.scope not in ("GPUs", HOST) else "",
        )
    _row(out, f"{indent}measured", _size(m.measured), _src(m.measured), m.measured.note)
    rem = m.remainder
    if rem.value is None:
        _row(out, f"{indent}unexplained", NOT_KNOWN_WORDS, "", "measured − listed: nothing measured")
    else:
        _row(
            out,
            f"{indent}unexplained",
            _size(rem),
            _src(rem),
            "measured − listed" + (" (the log lists more than is measured)" if rem.value < 0 else ""),
        )


def detail_text(v: ModelView, state: AppState) -> Text:
    """The whole detail view as text (also used by tests)."""
    out = Text()
    if state.stale_s is not None:
        out.append(f"Server unreachable: these figures are {state.stale_s:.0f} s old.\n", style="bold reverse")
    out.append(safe(v.name, 80), style="bold")
    out.append(f"   ID {safe(v.short_id, 12)}\n\n")
    _row(out, "digest", safe(v.digest, 80))
    _row(out, "architecture", safe(v.architecture or "?", 40))
    _row(out, "parameters", safe(v.parameter_size or "?", 20))
    _row(out, "weights quant", safe(v.quantization_level or "?", 20))
    _row(
        out,
        "training context",
        f"{v.context_train:,}" if v.context_train else "?",
        "[reported]" if v.context_train else "",
    )
    out.append("\nMemory\n", style="bold underline")
    _row(out, "size", exact_bytes(v.size_bytes), "[reported]", "/api/ps size: weights + KV + compute")
    _row(out, "in VRAM", exact_bytes(v.size_vram_bytes), "[reported]", "/api/ps size_vram")
    if v.size_bytes is not None and v.size_vram_bytes is not None:
        _row(
            out,
            "in system RAM",
            exact_bytes(max(0, v.size_bytes - v.size_vram_bytes)),
            "[reported]",
            "size − size_vram"
            + (
                " — runs entirely on the CPU"
                if v.size_vram_bytes == 0 and v.size_bytes
                else " — SPILLED: every request runs partly on the CPU"
                if v.spilled
                else ""
            ),
        )
    if v.cloud:
        _row(out, "processor", "cloud", "", "runs on the remote service: no local memory, no local KV cache")
    else:
        _row(out, "processor", v.processor, "[reported]", "as `ollama ps` computes it")
    m = v.memory
    _row(out, "weights", _size(m.weights), _src(m.weights), m.weights.note)
    _row(out, "KV cache", _size(m.kv), _src(m.kv), "" if m.kv.value is not None else m.kv.note)
    _row(out, "compute + other", _size(m.compute), _src(m.compute), m.compute.note)
    if not v.cloud:
        _ledger_rows(out, state_ledger(state, v))
    out.append("\nKV cache\n", style="bold underline")
    _row(
        out,
        "num_ctx per slot",
        f"{v.context.value:,}" if v.context.value else "not known",
        _src(v.context),
        v.context.note,
    )
    if v.context.value and v.context_train and v.context.value > v.context_train:
        _row(
            out,
            "",
            f"above the training context ({v.context_train:,}): Ollama ≥ 0.15.5 clamps it; older versions"
            " run past what the model was trained for",
        )
    _row(out, "slots (parallel)", str(v.parallel.value) if v.parallel.value else "?", _src(v.parallel), v.parallel.note)
    _slot_rows(out, v)
    _queue_row(out, v, state)
    if v.total_ctx_cells is not None:
        _row(out, "cells (ctx × slots)", f"{v.total_ctx_cells:,}")
    _row(out, "KV type", v.kv_type.value or "?", _src(v.kv_type), v.kv_type.note)
    _row(
        out, "flash attention", v.flash_attention.value or "not known", _src(v.flash_attention), v.flash_attention.note
    )
    for line in v.differences:
        out.append("  ≠ ", style="bold")
        out.append(safe(line, 300) + "\n")
    if v.kv_bytes_per_token is not None:
        per = v.kv_bytes_per_token
        _row(
            out,
            "KV per token",
            f"~{ibytes(per)} ({per:,} B)" if per >= 1024 else f"~{per:,} B",
            "[estimated]",
            f"at {v.kv_type.value or 'f16'}, all KV layers",
        )
    if v.kv_estimate is not None:
        e = v.kv_estimate
        out.append("\n  arithmetic:  ", style="bold")  # two spaces: a long formula wraps under itself
        out.append(safe(e.formula, 400))
        out.append("\n")
        _row(out, "K / V", f"~{exact_bytes(e.k_bytes)} / ~{exact_bytes(e.v_bytes)}", "[estimated]")
        if e.swa_cells is not None:
            _row(
                out, "sliding window", f"{e.swa_layers} SWA layers × {e.swa_cells:,} cells, {e.full_layers} full layers"
            )
        if e.recurrent_bytes:
            _row(
                out,
                "recurrent state",
                f"~{exact_bytes(e.recurrent_bytes)}",
                "[estimated]",
                "per-sequence state, not per token",
            )
    elif v.kv_unavailable:
        _row(out, "estimate", "unavailable", "", v.kv_unavailable)
    mine = [a for a in state.alerts if a.model == v.name]
    if mine:
        from kvtop.ui.alert_age import alert_age, state_clock

        now = state_clock(state)  # each alert's age on the state's clock, as on the dashboard
        out.append("\nAlerts\n", style="bold underline")
        for a in mine:
            age = alert_age(a, now)
            out.append(f"  {a.severity.upper()} {a.kind.replace('_', ' ')}{f' · {age}' if age else ''}: ", style="bold")
            out.append(safe(a.message, 300) + "\n")
            for fix in a.fixes:
                fits = {True: "fits", False: "does not fit", None: "fit not known"}[fix.fits]
                out.append(f"    {safe(fix.action, 60)} ({fits}): {safe(fix.detail, 160)}")
                out.append(f" — {safe(fix.cost, 160)}\n" if fix.cost else "\n", style="dim")

    out.append("\nRunner log\n", style="bold underline")
    load = v.load
    if load is None:
        _row(out, "load", "not matched", "", v.load_note)
    else:
        _row(out, "load", safe(v.load_note, 80), "", f"blob {safe(load.model_blob or '?', 80)}")
        _row(
            out,
            "runner",
            f"era {load.era or '?'}"
            + (f", {load.engine} engine" if load.engine else "")
            + (f", port {load.port}" if load.port else "")
            + (f", PID {load.pid}" if load.pid else ""),
        )
        if load.num_ctx_total is not None:
            _row(
                out,
                "KV cells",
                f"{load.num_ctx_total:,} total"
                + (f" = {load.num_ctx_per_seq:,} × {load.parallel}" if load.num_ctx_per_seq and load.parallel else ""),
                "[allocated]",
            )
        if load.layers_offloaded is not None and load.layers_total is not None:
            _row(out, "layers on GPU", f"{load.layers_offloaded}/{load.layers_total}", "[allocated]")
        for component in ("weights", "kv", "compute", "output", "recurrent"):
            per_device = v.devices.get(component) or {}
            if per_device:
                text = ", ".join(f"{safe(d, 20)} {ibytes(b)}" for d, b in sorted(per_device.items()))
                _row(out, f"{component} by device", text, "[allocated]")
        if load.estimate is not None:
            required = load.estimates
            _row(
                out,
                "scheduler estimate",
                ", ".join(f"{k} ~{ibytes(b)}" for k, b in required.items() if b is not None),
                "[estimated]",
                "Ollama's own memory.required.* figures",
            )
    t = v.throughput
    if t is not None and t.requests:
        _row(
            out,
            "requests (timed)",
            f"{t.requests}" + (f", {t.requests_per_min}/min" if t.requests_per_min is not None else ""),
        )
        if t.last_prefill_tps is not None:
            _row(out, "prefill", f"{t.last_prefill_tps:,.1f} tok/s", "[allocated]", "newest request")
        if t.last_decode_tps is not None:
            avg = f", average {t.avg_decode_tps:,.1f}" if t.avg_decode_tps is not None else ""
            _row(
                out,
                "decode",
                f"{t.last_decode_tps:,.1f} tok/s{avg}",
                "[allocated]",
                "newest request; average of the last 10",
            )
    elif v.timings_note and load is not None:
        _row(out, "tok/s", "not available", "", v.timings_note)
    if v.slots is not None and v.slots.log_ambiguous and t is not None and t.requests:
        _row(
            out,
            "",
            "timings may be another model's",
            "",
            f"the runner log's timing lines name no model: with {v.slots.log_runners} llama-server runners loaded"
            " each is given to the newest load begun before it",
        )
    for finding in v.findings:
        out.append("  ⚠ ", style="bold")
        out.append(safe(finding, 200) + "\n")
    append_placement(out, v, state)

    _local_rows(out, v)

    out.append("\nKeep-alive\n", style="bold underline")
    _row(out, "expires", v.expires_at.isoformat() if v.expires_at else "?", "[reported]")
    _row(
        out,
        "until",
        v.until,
        "",
        "expires_at is in the past: a request longer than keep_alive is running, or the model is unloading"
        if v.expired
        else "",
    )
    out.append("\nGPU\n", style="bold underline")
    usage = model_gpu_usage(state.gpu, state.procs, state.models).get((v.name, v.digest)) if state.procs else None
    for label, value, source, note in gpu_detail_rows(
        usage, gpu_status_line(state.gpu), state.gpu is not None and state.gpu.ok
    ):
        _row(out, label, value, source, note)
    if v.show_error:
        _row(out, "/api/show", "failed", "", v.show_error)
    return out


class ModelDetailScreen(Screen[None]):
    """Full-screen detail for the model named at construction; follows the app's state. Long
    lines wrap under their own column (``Hanging``), one cell clear of the scrollbar."""

    DEFAULT_CSS = """
    ModelDetailScreen #detail-body { padding: 0 1; }
    """
    BINDINGS = [Binding("escape", "app.pop_screen", "Back"), Binding("q", "app.quit", "Quit")]

    def __init__(self, name: str, digest: str) -> None:
        super().__init__()
        self.model_name = name
        self.model_digest = digest

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(id="detail-body")
        yield Footer()

    def on_mount(self) -> None:
        self.watch(self.app, "state", self._refresh_body, init=True)

    def _refresh_body(self, state: AppState | None) -> None:
        body = self.query_one("#detail-body", Static)
        if state is None:
            return
        for v in state.models:
            if v.name == self.model_name and v.digest == self.model_digest:
                body.update(Hanging(detail_text(v, state)))
                return
        body.update(Text(f"{safe(self.model_name, 80)} is no longer loaded (Esc to go back).", style="bold"))
