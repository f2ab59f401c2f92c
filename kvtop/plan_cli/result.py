"""The plan of ``kvtop plan MODEL``: one row per ``--ctx`` x ``--kv`` combination
(:func:`make_plan`, ``kvtop.model.plan``'s predictions), and the table and ``--json`` written from it.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


from kvtop.model import kv
from kvtop.model import plan
from kvtop.model.ctx_advice import ROUNDING, ROUNDING_WHY, CtxAdvice, advice_json, advice_line, advise
from kvtop.model.ctx_served import ServedRequests
from kvtop.model.next_load import NextLoad
from kvtop.model.next_load_view import next_load_json, next_load_lines
from kvtop.model.known import CLAMPED_MARK, exact_bytes, ibytes, marked, units_note
from kvtop.plan_cli.inputs import EXIT_OK, PlanInput


@dataclass(frozen=True, slots=True)
class Row:
    """One table row: a prediction and its limits."""

    prediction: plan.Prediction
    max_num_ctx: int | None
    max_parallel: int | None


@dataclass(frozen=True, slots=True)
class PlanResult:
    """Everything ``kvtop plan`` prints."""

    inp: PlanInput
    engine: plan.Engine
    free_bytes: int | None
    free_source: str
    budget_bytes: int | None
    reserve_bytes: int
    rows: tuple[Row, ...]
    calibration: plan.Calibration | None
    calibration_note: str
    comparison: plan.Comparison | None
    settings: tuple[plan.ServerSettings, ...]
    notes: tuple[str, ...]
    ctx_advice: CtxAdvice | None = None
    """What num_ctx the traffic of ``--log`` needs (``model.ctx_advice``); None without ``--log``."""
    next_load: NextLoad | None = None
    """What loading it now would do (``model.next_load``: settings, evictions, fit)."""


def make_plan(
    inp: PlanInput,
    ctxs: Sequence[int] | None,
    kv_types: Sequence[str] | None,
    parallel: int,
    flash_attention: bool,
    *,
    free_bytes: int | None,
    free_source: str,
    reserve_bytes: int = 0,
    calibration: plan.Calibration | None = None,
    calibration_note: str = "",
    served: ServedRequests | None = None,
    log_config: plan.PlanConfig | None = None,
    next_load: NextLoad | None = None,
) -> PlanResult:
    """Predict every ``ctx`` x ``kv`` configuration (pure given its inputs); with ``served`` (the requests of
    ``--log``), the num_ctx that traffic needs (``model.ctx_advice.advise``), from the configuration the log's
    load ran with (``log_config``), else the loaded context at the first ``--kv`` and ``parallel``.
    ``log_config`` also sets the configuration a calibration derived from ``/api/ps`` assumes (as the
    dashboard's row does), instead of Ollama's defaults."""
    notes = list(inp.notes) + list(inp.spec.notes)
    engine = plan.engine_for_version(inp.version)
    loaded = inp.loaded
    if not ctxs:
        launch_ctx = next_load.launch.num_ctx if next_load is not None else None
        if loaded is not None and loaded.context_length:
            ctxs = [loaded.context_length]
        elif (
            launch_ctx is not None
            and launch_ctx.value
            and (launch_ctx.source in ("service", "requested", "default") or "clamped" in launch_ctx.note)
        ):
            ctxs = [launch_ctx.value]
            notes.append(
                f"num_ctx {launch_ctx.value}: what a load without options gets ({launch_ctx.note}); pass --ctx"
            )
        else:
            ctxs = [plan.DEFAULT_NUM_CTX]
            notes.append(
                f"num_ctx {plan.DEFAULT_NUM_CTX}: Ollama's default below 23 GiB of VRAM "
                "(v0.15.5+ raises it with more VRAM); pass --ctx"
            )
    kv_types = list(kv_types or ["f16"])
    held = loaded.size_vram_bytes if loaded is not None else None
    budget = plan.gpu_budget(free_bytes, held, reserve_bytes)
    if (
        calibration is None
        and loaded is not None
        and loaded.size_bytes
        and loaded.context_length
        and inp.spec.weights_bytes is not None
    ):
        assumed = log_config if log_config is not None and log_config.num_ctx == loaded.context_length else None
        base = plan.predict(inp.spec, assumed or plan.PlanConfig(loaded.context_length), engine=engine)
        if base.kv_bytes is not None:
            derived = loaded.size_bytes - inp.spec.weights_bytes - base.kv_bytes - (base.recurrent_bytes or 0)
            if derived >= 0:
                calibration = plan.Calibration(
                    base.config,
                    derived,
                    "derived",
                    "/api/ps size − weights − KV, at the settings of the log's load"
                    if assumed is not None
                    else "/api/ps size − weights − KV, assuming Ollama's defaults (f16, 1 slot, flash attention on); "
                    "--log gives the runner's real settings",
                    weights_bytes=inp.spec.weights_bytes,
                    kv_bytes=base.kv_bytes,
                    total_bytes=loaded.size_bytes,
                )
                calibration_note = f"loaded at num_ctx {loaded.context_length} (/api/ps)"
            else:
                notes.append(
                    "/api/ps size is below weights + KV at Ollama's defaults: the server runs another "
                    "KV type or slot count; --log gives the real figures"
                )
    rows: list[Row] = []
    seen: list[tuple[str, int, bool]] = []
    for ctx in ctxs:
        for kv_type in kv_types:
            config = plan.PlanConfig(ctx, kv_type, parallel, flash_attention)
            p = plan.predict(inp.spec, config, budget_bytes=budget, calibration=calibration, engine=engine)
            rows.append(
                Row(
                    p,
                    plan.max_num_ctx_on_gpu(inp.spec, config, budget, calibration=calibration, engine=engine),
                    plan.max_parallel_on_gpu(inp.spec, p.config, budget, calibration=calibration, engine=engine),
                )
            )
            key = (kv_type, parallel, flash_attention)
            if key not in seen:
                seen.append(key)
    comparison = plan.compare(inp.spec, calibration, engine=engine) if calibration is not None else None
    settings = tuple(plan.server_settings(*key) for key in seen)
    advice: CtxAdvice | None = None
    if served is not None:
        now = (
            log_config
            or (calibration.config if calibration is not None else None)
            or (
                plan.PlanConfig(loaded.context_length, kv_types[0], parallel, flash_attention)
                if loaded is not None and loaded.context_length
                else None
            )
        )
        advice = advise(
            inp.spec.name,
            served,
            now,
            spec=inp.spec,
            budget_bytes=budget,
            calibration=calibration,
            engine=engine,
            notes=() if budget is not None else ("free GPU memory not given: no fit verdict",),
        )
    return PlanResult(
        inp,
        engine,
        free_bytes,
        free_source,
        budget,
        reserve_bytes,
        tuple(rows),
        calibration,
        calibration_note,
        comparison,
        settings,
        tuple(dict.fromkeys(notes)),
        advice,
        next_load,
    )


# --------------------------------------------------------------------------------------------
# Output


def _est(n: int | None) -> str:
    """An estimated size: ``~5.7 GiB`` (the marks and units of every screen, ``model.known``)."""
    return marked(n, "estimated", size=True)


def _signed(n: int) -> str:
    return ("+" if n >= 0 else "−") + f"{abs(n):,}"


def _layout_text(spec: plan.ModelSpec) -> str:
    layout = spec.layout
    parts = [spec.architecture]
    if isinstance(layout, kv.KVLayout):
        parts.append(f"{layout.block_count} layers")
        if layout.layers:
            first = layout.layers[0]
            parts.append(f"{first.n_head_kv} KV heads × {first.key_length}")
        parts.extend(layout.notes)
    if spec.context_train:
        parts.append(f"trained {spec.context_train:,} tokens")
    return ", ".join(parts)


def render_text(r: PlanResult) -> str:
    """The human report: header, the table, the comparison, notes, how to apply."""
    out = io.StringIO()
    w = out.write
    spec = r.inp.spec
    w(f"kvtop plan {spec.name} — {_layout_text(spec)}\n")
    w(f"  source    {r.inp.source}" + (f" (Ollama {r.inp.version})" if r.inp.version else "") + "\n")
    if spec.weights_bytes is not None:
        w(f"  weights   {exact_bytes(spec.weights_bytes)}: {spec.weights_note}\n")
    else:
        w(f"  weights   not known: {spec.weights_note}\n")
    if r.budget_bytes is None:
        w("  GPU       free memory not given: no fit verdict (--gpu-free BYTES|auto)\n")
    else:
        held = r.inp.loaded.size_vram_bytes if r.inp.loaded is not None else None
        text = f"{ibytes(r.budget_bytes)} available = {ibytes(r.free_bytes)} free ({r.free_source})"
        if held:
            text += f" + {ibytes(held)} this model holds now"
        if r.reserve_bytes:
            text += f" − {ibytes(r.reserve_bytes)} reserve"
        w(f"  GPU       {text}\n")
    w(
        f"  runner    {r.engine}"
        + (" (Ollama v0.30+)" if r.engine == "llama-server" else " (Ollama before v0.30)")
        + f"; {units_note()}; exact bytes with --json; ~ estimated\n"
    )
    if r.inp.loaded is not None:
        lo = r.inp.loaded
        w(
            f"  loaded    num_ctx {lo.context_length or '?'}, size {ibytes(lo.size_bytes)}, "
            f"in VRAM {ibytes(lo.size_vram_bytes)} (/api/ps)\n"
        )
    reason = spec.kv_reason
    if reason:
        w(f"\n  KV cache: {reason}\n  kvtop cannot predict this model's KV cache or total.\n")
    header = [
        "num_ctx",
        "slots",
        "KV",
        "FA",
        "weights",
        "KV cache",
        "compute",
        "total",
        "100% GPU needs",
        "fit now",
        "max num_ctx",
        "max slots",
    ]
    table: list[list[str]] = [header]
    for row in r.rows:
        p = row.prediction
        fit = p.fit.text() if p.fit is not None else ("?" if p.total_bytes is not None else "")
        ctx = f"{p.config.num_ctx}" + (CLAMPED_MARK if p.config.num_ctx != p.requested_num_ctx else "")
        table.append(
            [
                ctx,
                str(p.config.parallel),
                p.config.cache_type,
                "on" if p.config.flash_attention else "off",
                (_est if p.weights_estimated else ibytes)(p.weights_bytes),
                _est(p.kv_bytes) if p.kv is not None else "n/a",
                f"{_est(p.compute_bytes)} ±{ibytes(p.compute_error_bytes)}",
                _est(p.total_bytes),
                _est(p.gpu_bytes),
                fit,
                plan.num_ctx_limit_text(r.inp.spec, p.config, row.max_num_ctx),
                "?" if row.max_parallel is None else str(row.max_parallel),
            ]
        )
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    left = {2, 3, 9}
    w("\n")
    for line in table:
        cells = [c.ljust(widths[i]) if i in left else c.rjust(widths[i]) for i, c in enumerate(line)]
        w("  " + "  ".join(cells).rstrip() + "\n")
    w("\n")
    nl = r.next_load
    if nl is not None and nl.evicted and nl.verdict != "loaded":  # the table's fit is beside what is loaded now
        w("  fit now   in the GPU memory free now, beside the models loaded now; a load first unloads (below)\n")
    problems = {p.kv_problem for p in (row.prediction for row in r.rows) if p.kv_problem and p.kv_problem != reason}
    for problem in sorted(problems):
        w(f"  ! {problem}\n")
    first = r.rows[0].prediction if r.rows else None
    if first is not None:
        w(f"  compute   {first.compute_note}\n")
        if first.kv is not None:
            w(f"  KV        {first.kv.formula}\n")
        for note in first.notes:
            w(f"  note      {note}\n")
    if any(row.prediction.config.num_ctx != row.prediction.requested_num_ctx for row in r.rows):
        w(f"  {CLAMPED_MARK}         num_ctx lowered to the training context, as Ollama does\n")
    for note in r.notes:
        w(f"  note      {note}\n")
    if r.comparison is not None:
        c = r.comparison
        what = "allocated by the runner" if c.calibration.source == "allocated" else "derived from /api/ps"
        w(f"\nPrediction vs the loaded model ({r.calibration_note}; {c.calibration.config.label()}; {what}):\n")
        w(f"  {'':<10} {'predicted B':>16} {'actual B':>16} {'error B':>14} {'error':>8}  stated error\n")
        for cr in c.rows:
            pred = "?" if cr.predicted is None else f"{cr.predicted:,}"
            act = "?" if cr.actual is None else f"{cr.actual:,}"
            err = "" if cr.error_bytes is None else _signed(cr.error_bytes)
            pct = "" if cr.error_percent is None else f"{cr.error_percent:+.2f}%"
            verdict = "" if cr.within is None else ("within" if cr.within else "OUTSIDE")
            w(f"  {cr.component:<10} {pred:>16} {act:>16} {err:>14} {pct:>8}  ±{cr.stated_error_bytes:,} {verdict}\n")
        w("  Later rows anchor the compute estimate to the real figure (calibrated).\n")
    elif r.calibration_note:
        w(f"\n  log       {r.calibration_note}\n")
    if r.ctx_advice is not None:
        _render_ctx_advice(w, r.ctx_advice)
    if r.next_load is not None:
        w("\nIf a request loads it now (Ollama's scheduler, docs/ollama-scheduler.md):\n")
        for line in next_load_lines(r.next_load, ibytes):
            w(f"  {line}\n")
        for note in r.next_load.notes:
            w(f"  note      {note}\n")
    w("\nApply: num_ctx is per request (options.num_ctx; OLLAMA_CONTEXT_LENGTH sets the server's default).\n")
    if r.settings:
        example = next((x for x in r.settings if dict(x.env)["OLLAMA_KV_CACHE_TYPE"] != "f16"), r.settings[0])
        env = dict(example.env)
        w(
            "KV cache type, slots and flash attention are server-wide (a restart unloads every model); "
            f"for {env['OLLAMA_KV_CACHE_TYPE']}, {env['OLLAMA_NUM_PARALLEL']} slot(s):\n"
        )
        w(f"  systemd   {example.systemd[0]}, add:\n")
        for entry in example.systemd[1:-1]:
            w(f"              {entry}\n")
        w(f"            then: {example.systemd[-1]}\n")
        w("  macOS     " + "; ".join(example.launchctl[:-1]) + "; then quit and reopen Ollama\n")
        w(f"  docker    {example.docker}\n")
        others = [dict(x.env)["OLLAMA_KV_CACHE_TYPE"] for x in r.settings if x is not example]
        if others:
            w(f"  (for {', '.join(others)}: the same with that OLLAMA_KV_CACHE_TYPE)\n")
        for note in example.notes[2:]:
            w(f"  ! {note}\n")
    return out.getvalue()


def _render_ctx_advice(w: Any, a: CtxAdvice) -> None:
    """The section "What num_ctx the traffic needs (--log)": the line every face prints, then the copyable text."""
    w("\nWhat num_ctx the traffic needs (--log):\n")
    w(f"  {advice_line(a)}\n")
    for note in a.notes:
        w(f"  note      {note}\n")
    rec = a.recommendation
    if rec is not None:
        w(f"  rounding  {ROUNDING}: {ROUNDING_WHY}\n")
        w(f"  Modelfile {rec.modelfile}    (this model: FROM {a.model}, then ollama create)\n")
        w(f"  server    {rec.env}    (every model's default; read at server start)\n")
        w("  kvtop applies nothing: copy the line you want\n")


def result_json(r: PlanResult) -> dict[str, Any]:
    """The ``--json`` document (exact bytes; every compute figure flagged as estimated)."""
    spec = r.inp.spec
    loaded = r.inp.loaded
    return {
        "model": spec.name,
        "source": r.inp.source,
        "version": r.inp.version,
        "engine": r.engine,
        "architecture": spec.architecture,
        "block_count": spec.block_count,
        "context_train": spec.context_train,
        "kv_unavailable": spec.kv_reason,
        "layout_notes": list(spec.layout.notes) if isinstance(spec.layout, kv.KVLayout) else [],
        "weights_bytes": spec.weights_bytes,
        "weights_source": spec.weights_note,
        "layers_exact": spec.layers.exact if spec.layers is not None else None,
        "loaded": None
        if loaded is None
        else {
            "size_bytes": loaded.size_bytes,
            "size_vram_bytes": loaded.size_vram_bytes,
            "context_length": loaded.context_length,
        },
        "gpu": {
            "free_bytes": r.free_bytes,
            "free_source": r.free_source or None,
            "held_bytes": loaded.size_vram_bytes if loaded is not None else None,
            "reserve_bytes": r.reserve_bytes,
            "budget_bytes": r.budget_bytes,
        },
        "rows": [
            plan.prediction_json(
                row.prediction,
                max_num_ctx=row.max_num_ctx,
                max_parallel=row.max_parallel,
                max_num_ctx_bound=plan.num_ctx_bound(r.inp.spec, row.prediction.config, row.max_num_ctx),
            )
            for row in r.rows
        ],
        "comparison": plan.comparison_json(r.comparison) if r.comparison is not None else None,
        "calibration_note": r.calibration_note or None,
        "server_settings": [
            {
                "env": dict(s.env),
                "systemd": list(s.systemd),
                "launchctl": list(s.launchctl),
                "docker": s.docker,
                "notes": list(s.notes),
            }
            for s in r.settings
        ],
        "notes": list(r.notes),
        "ctx_advice": advice_json(r.ctx_advice),
        "next_load": next_load_json(r.next_load) if r.next_load is not None else None,
    }


def _print(text: str) -> int:
    """Write ``text`` to stdout; a reader that went away (``| head``) is not an error. EXIT_OK."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_OK
