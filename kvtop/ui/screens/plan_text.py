"""What the what-if screen (``plan.PlanScreen``) says below its fields, section by section: the
memory bar, the figures with their marks and the verdict, prediction against reality, the limits,
what a load now does to the other models, and the load action with the server-wide settings. Pure: a prediction of ``kvtop.model.plan`` in,
lines appended to a ``rich.text.Text`` out (names through ``format.safe``: data, never markup)."""

from __future__ import annotations

from collections.abc import Mapping

from rich.text import Text

from kvtop.model import plan
from kvtop.model.ctx_advice import CtxAdvice, advice_line
from kvtop.model.known import NOT_KNOWN_WORDS
from kvtop.model.next_load import NextLoad
from kvtop.model.next_load_view import next_load_lines
from kvtop.ui.format import ibytes, safe

__all__ = [
    "render_apply",
    "render_bar",
    "render_calibration",
    "render_ctx_advice",
    "render_figures",
    "render_limits",
    "render_next_load",
]


def _fmt_error(n: int) -> str:
    return f"±{ibytes(n)}"


def render_bar(
    out: Text,
    p: plan.Prediction,
    colors: Mapping[str, str],
    *,
    held_bytes: int | None,
    gpu_free_bytes: int | None,
    width: int,
) -> None:
    """The memory bar (weights, KV, compute against the GPU budget, ``width`` cells) and its
    budget line; ``held_bytes``: what the model holds in VRAM now (``size_vram``), None when not loaded."""
    budget = p.fit.budget_bytes if p.fit is not None else None
    need = p.gpu_bytes
    if budget is None:
        held = held_bytes
        out.append("GPU free memory not known", style=colors.get("kv-warn", ""))
        out.append(
            " (no GPU telemetry): no fit verdict" + (f"; this model holds {ibytes(held)} now" if held else "") + "\n\n"
        )
        if need is None:
            return
        scale = need
    else:
        held = held_bytes or 0
        out.append(
            f"GPU budget {ibytes(budget)} = {ibytes(gpu_free_bytes)} free"
            + (f" + {ibytes(held)} held by this model" if held else "")
            + "\n"
        )
        if need is None:
            out.append("\n")
            return
        scale = max(budget, need)
    weights_gpu = need - (p.kv_bytes or 0) - (p.recurrent_bytes or 0) - p.compute_bytes
    parts = [
        (weights_gpu, "█", "kv-weights"),
        ((p.kv_bytes or 0) + (p.recurrent_bytes or 0), "▓", "kv-kv"),
        (p.compute_bytes, "▒", "kv-compute"),
    ]
    cells: list[tuple[str, str]] = []
    acc = 0
    for value, glyph, var_name in parts:
        start = acc * width // scale if scale else 0
        acc += max(0, value)
        end = acc * width // scale if scale else 0
        cells += [(glyph, colors.get(var_name, ""))] * (end - start)
    if budget is not None:
        edge = budget * width // scale if scale else 0
        cells = [(g, colors.get("kv-crit", "") if i >= edge else s) for i, (g, s) in enumerate(cells)]
        cells += [("░", colors.get("kv-free", ""))] * max(0, edge - len(cells))
    bar = Text("[")
    for glyph, style in cells:
        bar.append(glyph, style=style)
    bar.append("]  █ weights ▓ KV ▒ compute" + (" ░ free" if budget is not None else "") + "\n")
    out.append_text(bar)


def render_figures(out: Text, p: plan.Prediction, colors: Mapping[str, str], spec: plan.ModelSpec | None) -> None:
    """Weights, KV cache, compute, total, the fit verdict and the notes, one row each, with their marks."""

    def row(label: str, value: str, note: str = "", style: str = "") -> None:
        out.append(f"  {label:<12}", style="bold")
        out.append(value, style=style)
        if note:
            out.append(f"\n  {'':<12}{safe(note, 240)}", style="dim")
        out.append("\n")

    est = "~" if p.weights_estimated else ""  # the marks of every screen (model.known)
    row("weights", est + ibytes(p.weights_bytes) if p.weights_bytes is not None else NOT_KNOWN_WORDS, p.weights_note)
    if p.kv is not None:
        row("KV cache", "~" + ibytes(p.kv_bytes), "estimated: " + p.kv.formula)
    else:
        row("KV cache", "unavailable", p.kv_problem or "", colors.get("kv-warn", ""))
    if p.recurrent_bytes:
        row("state", "~" + ibytes(p.recurrent_bytes), "recurrent state per sequence × slots")
    row("compute", f"~{ibytes(p.compute_bytes)} {_fmt_error(p.compute_error_bytes)}", p.compute_note)
    if p.total_bytes is not None:
        row("total", f"~{ibytes(p.total_bytes)} {_fmt_error(p.total_error_bytes)}", "weights + KV + compute")
        row(
            "on GPU",
            "~" + ibytes(p.gpu_bytes),
            "for 100% GPU: all but the input layer (llama.cpp keeps token_embd on the CPU)",
        )
    else:
        missing = [
            what
            for what, known in (("the weights", p.weights_bytes is not None), ("the KV cache", p.kv is not None))
            if not known
        ]
        row("total", NOT_KNOWN_WORDS, f"needs {' and '.join(missing) or 'the weights and the KV cache'}")
    f = p.fit
    if f is not None:
        if f.verdict == "fits":
            text, style = f"FITS: 100% GPU, {ibytes(f.headroom_bytes)} to spare", colors.get("kv-ok", "")
        elif f.verdict == "marginal":
            text = (
                f"MARGINAL: {ibytes(abs(f.headroom_bytes))} {'to spare' if f.headroom_bytes >= 0 else 'short'}, "
                "within the estimate's error"
            )
            style = colors.get("kv-warn", "")
        else:
            text = f"SPILLS: {ibytes(-f.headroom_bytes)} short; {f.text().removeprefix('spills: ')}, ≈ {f.processor}"
            style = colors.get("kv-crit", "")
        out.append("  verdict     ", style="bold")
        out.append(text + "\n", style=f"bold {style}".strip())
        if f.verdict != "fits" and not f.layers_exact:
            out.append("              layer sizes assumed equal (no tensor list)\n", style="dim")
    for note in p.notes:
        out.append(f"  ! {safe(note, 200)}\n", style=colors.get("kv-warn", ""))
    reason = spec.kv_reason if spec is not None else None
    if reason:
        out.append(
            f"  kvtop cannot do the KV math for this model: {safe(reason, 200)}\n", style=colors.get("kv-warn", "")
        )


def render_calibration(out: Text, spec: plan.ModelSpec, cal: plan.Calibration | None, engine: plan.Engine) -> None:
    """Prediction against what the loaded model holds (``cal``), per component, when it is loaded."""
    if cal is None:
        return
    try:
        c = plan.compare(spec, cal, engine=engine)
    except ValueError:
        return
    what = "the runner's allocation" if cal.source == "allocated" else "/api/ps size (compute derived)"
    out.append(f"\nPrediction vs reality at {cal.config.label()} ({what}):\n", style="bold")
    for r in c.rows:
        if r.predicted is None or r.actual is None or r.error_bytes is None:
            continue
        pct = f" ({r.error_percent:+.1f}%)" if r.error_percent is not None else ""
        mark = "within" if r.within else "OUTSIDE"
        out.append(
            f"  {r.component:<10} predicted {ibytes(r.predicted):<10} actual {ibytes(r.actual):<10} "
            f"error {r.error_bytes:+,} B{pct}, {mark} ±{ibytes(r.stated_error_bytes)}\n"
        )


def render_limits(out: Text, p: plan.Prediction, lim: Mapping[str, int | None], spec: plan.ModelSpec) -> None:
    """The largest num_ctx per cache type and the largest slot count that stay on the GPU (``lim``),
    each with the limit that binds (memory, the training context or llama.cpp's cell limit)."""
    if not lim or all(value is None for value in lim.values()):
        return
    out.append("\nLargest num_ctx that stays 100% on the GPU", style="bold")
    out.append(f" ({p.config.parallel} slot(s), FA {'on' if p.config.flash_attention else 'off'}): ")
    out.append(
        "  ".join(f"{ct} {plan.num_ctx_limit_text(spec, p.config, lim.get(ct))}" for ct in plan.PLAN_CACHE_TYPES)
    )
    out.append("\n")
    slots = lim.get("slots")
    out.append("Largest slot count at this num_ctx: ", style="bold")
    out.append(f"{'?' if slots is None else slots}\n")


def render_ctx_advice(out: Text, advice: CtxAdvice | None) -> None:
    """What num_ctx the traffic needs (``model.ctx_advice.advice_line``, the line ``--once`` prints), and
    ``a`` as the way to try its num_ctx; nothing for a model whose log shows no request and no cut prompt."""
    if advice is None or (advice.distribution is None and not advice.cuts):
        return
    out.append("\nThe traffic needs", style="bold")
    out.append(f" (from the log): {safe(advice_line(advice), 1000)}\n")
    r = advice.recommendation
    if r is not None:
        out.append(
            f"  type {r.config.num_ctx} + Enter on num_ctx to see it here; nothing is applied by itself\n", style="dim"
        )


def render_apply(
    out: Text,
    p: plan.Prediction,
    colors: Mapping[str, str],
    *,
    readonly: bool,
    typed: str,
    status: str,
    server: plan.PlanConfig | None,
) -> None:
    """The load action (or why there is none), its last outcome, and the server-wide settings'
    lines when the configuration differs from the server's (``server``; None: not loaded)."""
    out.append("\nApply\n", style="bold")
    if readonly:
        out.append("  read-only (--readonly): kvtop sends nothing that changes the server\n", style="dim")
    elif typed:
        out.append(f"  finish typing first: Enter applies {typed}, Esc cancels\n", style="dim")
    else:
        out.append(
            f"  a  load now with num_ctx {p.config.num_ctx:,} (POST /api/generate, empty prompt;"
            " asks first, y confirms)\n"
        )
    if status:
        out.append(
            f"     {safe(status, 200)}\n",
            style=colors.get("kv-warn", "") if "fail" in status or "cannot" in status or "HTTP" in status else "",
        )
    cfg = p.config
    if server is None or (cfg.cache_type, cfg.parallel, cfg.flash_attention) != (
        server.cache_type,
        server.parallel,
        server.flash_attention,
    ):
        s = plan.server_settings(cfg.cache_type, cfg.parallel, cfg.flash_attention)
        out.append("  KV cache type, slots and flash attention are server-wide (restart; every model unloads):\n")
        out.append("    systemd  sudo systemctl edit ollama.service, add (one per line, as a drop-in):\n")
        for line in s.systemd[1:-1]:
            out.append(f"               {line}\n")
        out.append("             then " + s.systemd[-1] + "\n")
        out.append("    macOS    " + "; ".join(s.launchctl[:-1]) + "; then reopen Ollama\n")
        out.append(f"    docker   {s.docker}\n")
        for note in s.notes[2:]:
            out.append(f"    ! {note}\n", style=colors.get("kv-crit", ""))


def render_next_load(out: Text, n: NextLoad | None, colors: Mapping[str, str]) -> None:
    """What ``a`` (a load at this num_ctx) does on the server: the settings, the models Ollama's
    scheduler unloads and why, the fit (``model.next_load_view.next_load_lines``, as ``kvtop plan`` writes it)."""
    if n is None:
        return
    out.append("\nIf loaded now", style="bold")
    out.append(" (Ollama's scheduler; docs/ollama-scheduler.md)\n", style="dim")
    for line in next_load_lines(n, ibytes):
        warn = line.startswith(("unloads ", "spills", "fails", "marginal"))
        out.append(f"  {safe(line, 300)}\n", style=colors.get("kv-warn", "") if warn else "")
    for note in n.notes:
        out.append(f"  {safe(note, 300)}\n", style="dim")
