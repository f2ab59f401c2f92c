"""GPU panel: one row per GPU, its memory split into Ollama models, other processes and free.

The bar speaks the memory map's glyphs and colours (``kvtop.ui.widgets.memory_map``), since both
show at once from 120×36. Below ``COMPACT_BELOW_COLUMNS`` each GPU is one line (bar, used/total,
utilization, temperature, power); from there on each GPU also gets a legend line (each model's measured share, other
Ollama processes, other processes, unattributed, free) and one line per foreign process, and the
panel lists each model's measured VRAM next to ``/api/ps`` ``size_vram``. RAM and swap close the
panel. Without a GPU it is one line that says why. Colours come only from the theme.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.text import Text
from textual.widgets import Static

from kvtop.model.gpu import GpuPanelData, GpuView, ModelGpu, SplitPart
from kvtop.model.gpu_snapshots import NOT_SAMPLED, SystemMemory
from kvtop.model.known import marked
from kvtop.ui.format import _cells as split_cells
from kvtop.ui.format import exact_bytes, ibytes, safe, safe_name
from kvtop.ui.widgets.memory_map import GLYPHS as MAP_GLYPHS
from kvtop.ui.widgets.memory_map import KIND_VARS as MAP_KIND_VARS
from kvtop.ui.widgets.memory_map import write_names

COMPACT_BELOW_COLUMNS = 100
"""Under this terminal width each GPU is a single line."""

MAX_OTHER_LINES = 3
"""Foreign processes listed per GPU in the wide form (the rest are counted)."""

MAX_MODEL_LINES = 4
"""Models listed with measured vs reported VRAM in the wide form."""

GLYPHS = {
    "model": MAP_GLYPHS["weights"],
    "ollama": MAP_GLYPHS["ollama"],
    "other": MAP_GLYPHS["other"],
    "unattributed": MAP_GLYPHS["unattributed"],
    "free": MAP_GLYPHS["free"],
}
"""The memory map's glyphs (``kvtop.ui.widgets.memory_map.GLYPHS``), so that both pictures read
alike when they show together: a runner ``█`` (mostly its weights), other Ollama processes ``▚``,
other processes ``▄``, unattributed ``·``, free ``░``; each differs so the bar reads without colour."""

KIND_VARS = {k: MAP_KIND_VARS[k] for k in ("ollama", "other", "unattributed", "free")}
"""The memory map's theme variable per kind: the same thing has the same colour in both."""

MODEL_VAR = MAP_KIND_VARS["weights"]
"""Every runner in the weights colour, as its largest part is in the map; next models alternate
plain and ``dim`` so that neighbours part, and each name is written over its stretch where it fits."""

Key = tuple[str, str]


def short_gpu_name(name: str | None, limit: int) -> str:
    """``NVIDIA GeForce RTX 4090`` -> ``RTX 4090`` for narrow rows; ``?`` when unknown."""
    if not name:
        return "?"
    text = safe(name)
    for prefix in ("NVIDIA ", "GeForce ", "AMD ", "Radeon "):
        if text.startswith(prefix) and len(text) > len(prefix):
            text = text[len(prefix) :]
    return safe(text, limit)


def _model_colors(views: Sequence[GpuView], colors: Mapping[str, str]) -> dict[Key, str]:
    out: dict[Key, str] = {}
    for v in views:
        for m in v.models:
            key = (m.name, m.digest)
            if key not in out:
                out[key] = f"{'dim ' if len(out) % 2 else ''}{colors.get(MODEL_VAR, '')}".strip()
    return out


def _part_style(part: SplitPart, view: GpuView, model_colors: Mapping[Key, str], colors: Mapping[str, str]) -> str:
    if part.kind == "model":
        digest = next((m.digest for m in view.models if m.name == part.label), "")
        return model_colors.get((part.label, digest), "")
    return colors.get(KIND_VARS.get(part.kind, ""), "")


def gpu_bar(view: GpuView, width: int, colors: Mapping[str, str], model_colors: Mapping[Key, str]) -> Text:
    """A bar of ``width`` cells: models ``█`` (the weights colour, every other one dim, the name over
    its stretch where it fits), other Ollama ``▚``, other processes ``▄``, unattributed ``·``, free
    ``░``; every non-zero part gets at least one cell."""
    d = view.device
    parts = view.split
    total = d.memory_total_bytes
    if width <= 0:
        return Text()
    if not parts or not total:
        return Text("·" * width, style=colors.get("kv-unknown", ""))
    cells = split_cells([p.bytes for p in parts], max(total, sum(p.bytes for p in parts)), width)
    bar = Text()
    spans: list[tuple[int, int, Key]] = []
    for part, n in zip(parts, cells):
        if n:
            if part.kind == "model":
                digest = next((m.digest for m in view.models if m.name == part.label), "")
                spans.append((bar.cell_len, bar.cell_len + n, (part.label, digest)))
            bar.append(GLYPHS[part.kind] * n, style=_part_style(part, view, model_colors, colors))
    if bar.cell_len < width:
        bar.append("·" * (width - bar.cell_len), style=colors.get("kv-unknown", ""))
    return write_names(bar, spans)


def _used(view: GpuView) -> int | None:
    """Memory in use: total − free, as the memory map counts it (a unified-memory GPU's free is
    the RAM available, so this is the RAM line's figure too); the driver's ``used`` only when free
    is not known, and on Apple, whose line is the GPU's own allocation (``GPU 325M/128G``). Bytes, or None."""
    d = view.device
    if d.unified_memory and d.vendor == "apple" and d.memory_used_bytes is not None:
        return d.memory_used_bytes
    if d.memory_total_bytes is not None and d.memory_free_bytes is not None:
        return max(0, d.memory_total_bytes - d.memory_free_bytes)
    return d.memory_used_bytes


def _fill_style(view: GpuView, colors: Mapping[str, str]) -> str:
    used, total = _used(view), view.device.memory_total_bytes
    if used is None or not total:
        return ""
    ratio = used / total
    return colors.get("kv-crit", "") if ratio >= 0.95 else colors.get("kv-warn", "") if ratio >= 0.85 else ""


def _temp_style(t: int | None, colors: Mapping[str, str]) -> str:
    if t is None:
        return ""
    return colors.get("kv-crit", "") if t >= 85 else colors.get("kv-warn", "") if t >= 75 else ""


def _watts(mw: int | None) -> str:
    return "?" if mw is None else f"{mw / 1000:.0f}"


_VENDOR_PREFIX = {"amd": "AMD", "intel": "Intel", "apple": "Apple"}


def _label(view: GpuView, compact: bool) -> str:
    d = view.device
    prefix = _VENDOR_PREFIX.get(d.vendor, "GPU")
    return f"{prefix}{d.index}" if compact else f"{prefix} {d.index}"


def _error_line(view: GpuView, compact: bool, name_width: int, colors: Mapping[str, str]) -> Text:
    d = view.device
    line = Text(no_wrap=True, overflow="ellipsis")
    line.append(f"{_label(view, compact)} ", style="bold")
    line.append(short_gpu_name(d.name or d.uuid, name_width).ljust(name_width) + " ")
    line.append(f"✖ {safe(d.error or 'not available', 200)}", style=f"bold {colors.get('kv-crit', '')}")
    return line


def compact_line(
    view: GpuView, usable: int, name_width: int, colors: Mapping[str, str], model_colors: Mapping[Key, str]
) -> Text:
    """One GPU in one line: ``GPU0 RTX 4090 ███▄··░░░ 21G/24G  97%  71°C  350W``."""
    d = view.device
    if d.error:
        return _error_line(view, True, name_width, colors)
    mem = f"{ibytes(_used(view), short=True)}/{ibytes(d.memory_total_bytes, short=True)}"
    if d.unified_memory:  # of the system's RAM: what is in use (NVIDIA), what the GPU holds (Apple)
        mem = ("GPU " if d.vendor == "apple" else "RAM ") + mem
    elif d.memory_pool == "vram+gtt":  # an AMD APU: VRAM carve-out + GTT (memory_note splits them)
        mem = "V+GTT " + mem
    util = "  ?%" if d.gpu_util_percent is None else f"{d.gpu_util_percent:>3}%"
    temp = "  ?°C" if d.temperature_c is None else f"{d.temperature_c:>3}°C"
    power = f"{_watts(d.power_draw_mw):>4}W"
    head = f"{_label(view, True)} {short_gpu_name(d.name, name_width).ljust(name_width)} "
    mem_width = max(9, len(mem))
    tail_len = 1 + mem_width + 1 + len(util) + 1 + len(temp) + 1 + len(power)
    bar_width = max(6, usable - len(head) - tail_len)
    line = Text(no_wrap=True, overflow="ellipsis")
    line.append(head, style="bold")
    line.append_text(gpu_bar(view, bar_width, colors, model_colors))
    line.append(" " + mem.rjust(mem_width), style=_fill_style(view, colors))
    line.append(" " + util + " ")
    line.append(temp, style=_temp_style(d.temperature_c, colors))
    line.append(" " + power)
    return line


def wide_lines(
    view: GpuView, usable: int, name_width: int, colors: Mapping[str, str], model_colors: Mapping[Key, str]
) -> list[Text]:
    """One GPU in the wide form: the bar line, the legend, foreign processes, a note."""
    d = view.device
    if d.error:
        return [_error_line(view, False, name_width, colors)]
    head = f"{_label(view, False)}  {short_gpu_name(d.name, name_width).ljust(name_width)}  "
    # one form with the memory map's header: used/total, then what is free (issue 26)
    mem = f"  {ibytes(_used(view))}/{ibytes(d.memory_total_bytes)} used · {ibytes(d.memory_free_bytes)} free"
    if d.unified_memory and d.vendor == "apple":
        alloc = f" ({ibytes(d.memory_allocated_bytes)} alloc.)" if d.memory_allocated_bytes is not None else ""
        mem = (
            f"  shares RAM: {ibytes(d.memory_free_bytes)} of {ibytes(d.memory_total_bytes)} available"
            f" · GPU holds {ibytes(d.memory_used_bytes)}{alloc}"
        )
    elif d.unified_memory:
        mem = (
            f"  shares system RAM: {ibytes(_used(view))}/{ibytes(d.memory_total_bytes)} used · "
            f"{ibytes(d.memory_free_bytes)} available"
        )
    if d.memory_reserved_bytes:
        mem += f" ({ibytes(d.memory_reserved_bytes)} reserved)"
    util = "  util " + ("?" if d.gpu_util_percent is None else f"{d.gpu_util_percent}%")
    util += " · mem " + ("?" if d.memory_util_percent is None else f"{d.memory_util_percent}%")
    temp = "  " + ("?°C" if d.temperature_c is None else f"{d.temperature_c}°C")
    power = f"  {_watts(d.power_draw_mw)}/{_watts(d.power_limit_mw)} W"
    bar_width = max(10, min(60, usable - len(head) - len(mem) - len(util) - len(temp) - len(power)))
    line = Text(no_wrap=True, overflow="ellipsis")
    line.append(head, style="bold")
    line.append_text(gpu_bar(view, bar_width, colors, model_colors))
    line.append(mem, style=_fill_style(view, colors))
    line.append(util)
    line.append(temp, style=_temp_style(d.temperature_c, colors))
    line.append(power)
    lines = [line]

    indent = " " * (len(_label(view, False)) + 2)
    legend = Text(indent, no_wrap=True, overflow="ellipsis")
    muted = colors.get("kv-muted", "")
    if d.memory_note:
        lines.append(
            Text(
                f"{indent}{safe(d.memory_note, max(20, usable - len(indent)))}",
                style=muted,
                no_wrap=True,
                overflow="ellipsis",
            )
        )
    if d.processes is None:
        legend.append(safe(view.note or "processes not available", 160), style=muted)
        lines.append(legend)
        return lines
    for part in view.split:
        style = _part_style(part, view, model_colors, colors)
        legend.append(GLYPHS[part.kind], style=style)
        label = safe_name(part.label, 32) if part.kind == "model" else part.label
        # unattributed is a difference kvtop computes (total − free − listed): estimated, as in the map
        source = "estimated" if part.kind == "unattributed" else None
        legend.append(f" {label} {marked(part.bytes, source, size=True)}   ")
    if not view.models:
        legend.append("no Ollama model on this GPU", style=muted)
    legend.rstrip()
    lines.append(legend)
    others = sorted(view.others, key=lambda p: -(p.gpu_memory_bytes or 0))
    for p in others[:MAX_OTHER_LINES]:
        row = Text(indent, no_wrap=True, overflow="ellipsis")
        row.append(GLYPHS["other"], style=colors.get("kv-warn", ""))
        row.append(f" PID {p.pid:<7} {ibytes(p.gpu_memory_bytes):>9}  ")
        if p.kind == "unknown":
            row.append(safe(p.note or "host PID", 120), style=muted)
        else:
            row.append(safe(p.user or "?", 16) + "  ")
            row.append(safe(p.command or p.name or "?", 120))
            if p.note:
                row.append(f"  ({safe(p.note, 80)})", style=muted)
        lines.append(row)
    if len(others) > MAX_OTHER_LINES:
        lines.append(Text(f"{indent}  +{len(others) - MAX_OTHER_LINES} more other processes", style=muted))
    if view.note:
        lines.append(Text(f"{indent}{safe(view.note, 160)}", style=muted, no_wrap=True, overflow="ellipsis"))
    return lines


def model_lines(usages: Sequence[ModelGpu], colors: Mapping[str, str], model_colors: Mapping[Key, str]) -> list[Text]:
    """Measured VRAM (NVML) next to ``size_vram`` (``/api/ps``) for each model with a runner."""
    lines: list[Text] = []
    shown = [u for u in usages if u.measured_bytes or u.runner_pids]
    for u in shown[:MAX_MODEL_LINES]:
        row = Text(no_wrap=True, overflow="ellipsis")
        row.append(GLYPHS["model"], style=model_colors.get((u.name, u.digest), colors.get("kv-muted", "")))
        row.append(f" {safe_name(u.name, 32)}  ", style="bold")
        row.append(f"measured {ibytes(u.measured_bytes)} vs size_vram {ibytes(u.size_vram_bytes)}")
        if u.overhead_bytes is not None:
            sign = "+" if u.overhead_bytes >= 0 else "−"
            row.append(f" ({sign}{ibytes(abs(u.overhead_bytes))} CUDA context and overhead)")
        if u.runner_pids:
            row.append("  runner PID " + ", ".join(str(p) for p in u.runner_pids))
        if u.measured_bytes is None:
            row.append(f"  {safe(u.note, 100)}", style=colors.get("kv-muted", ""))
        lines.append(row)
    if len(shown) > MAX_MODEL_LINES:
        lines.append(Text(f"  +{len(shown) - MAX_MODEL_LINES} more models", style=colors.get("kv-muted", "")))
    return lines


def ram_used(system: SystemMemory) -> int | None:
    """RAM in use as the memory map counts it: total − available (its free part is psutil's
    available), so ``RAM 4.2G/32G`` here and the map's bar say the same; psutil's ``used`` only
    when available is not known. Bytes, or None."""
    if system.ram_total_bytes is not None and system.ram_available_bytes is not None:
        return max(0, system.ram_total_bytes - system.ram_available_bytes)
    return system.ram_in_use_bytes


def system_text(system: SystemMemory | None, colors: Mapping[str, str], *, short: bool) -> Text:
    """``RAM 12.3 GiB/62.7 GiB used · 50.4 GiB free · swap 0 B/8.0 GiB`` (``RAM 12G/63G`` short); swap
    in use is a warning (the second cliff)."""
    out = Text(no_wrap=True, overflow="ellipsis")
    if system is None:
        return out
    used = ram_used(system)
    out.append(f"RAM {ibytes(used, short=short)}/{ibytes(system.ram_total_bytes, short=short)}")
    if not short and system.ram_available_bytes is not None:  # the map's form: its free part is this
        out.append(f" used · {ibytes(system.ram_available_bytes)} free")
    if system.swap_total_bytes:
        style = colors.get("kv-warn", "") if system.swap_used_bytes else ""
        out.append(" · ")
        out.append(
            f"swap {ibytes(system.swap_used_bytes, short=short)}/{ibytes(system.swap_total_bytes, short=short)}",
            style=style,
        )
    elif system.swap_total_bytes == 0 and not short:
        out.append(" · no swap")
    return out


def panel_text(
    views: Sequence[GpuView],
    status: str,
    width: int,
    colors: Mapping[str, str],
    *,
    system: SystemMemory | None = None,
    notes: Sequence[str] = (),
    usages: Sequence[ModelGpu] = (),
    compact: bool | None = None,
    ok: bool | None = None,
) -> Text:
    """The whole panel as text (the widget renders this; tests call it directly).

    Args:
        views: ``model.gpu.gpu_views(...)``.
        status: ``model.gpu.gpu_status_line(...)``.
        width: Terminal columns (the panel has one column of padding each side).
        ok: Whether telemetry works; default: there is a device without an error.
        compact: Force the one-line-per-GPU form; default: below ``COMPACT_BELOW_COLUMNS``.
    """
    usable = max(20, width - 2)
    compact = width < COMPACT_BELOW_COLUMNS if compact is None else compact
    ok = any(v.device.error is None for v in views) if ok is None else ok
    muted = colors.get("kv-muted", "")
    lines: list[Text] = []
    if not ok:
        line = Text(no_wrap=True, overflow="ellipsis")
        line.append(safe(status, 300), style=colors.get("kv-warn", "") if views else muted)
        sys_line = system_text(system, colors, short=True)
        if sys_line.plain and line.cell_len + 3 + sys_line.cell_len <= usable:
            line.append(" · ")
            line.append_text(sys_line)
            sys_line = Text()
        lines.append(line)
        if sys_line.plain:
            lines.append(sys_line)
        lines.extend(_error_line(v, compact, 14, colors) for v in views)
    else:
        model_colors = _model_colors(views, colors)
        name_width = min(12 if compact else 22, max(len(short_gpu_name(v.device.name, 22)) for v in views))
        for v in views:
            if compact:
                lines.append(compact_line(v, usable, name_width, colors, model_colors))
            else:
                lines.extend(wide_lines(v, usable, name_width, colors, model_colors))
        if not compact:
            lines.extend(model_lines(usages, colors, model_colors))
        tail = system_text(system, colors, short=compact)
        if tail.plain:
            lines.append(tail)
    for note in notes:
        lines.append(Text(safe(note, 300), style=muted, no_wrap=True, overflow="ellipsis"))
    out = Text("\n").join(lines)
    out.no_wrap, out.overflow = True, "ellipsis"  # join() drops the lines' own settings
    return out


def gpu_detail_rows(usage: ModelGpu | None, status: str, ok: bool = False) -> list[tuple[str, str, str, str]]:
    """The detail view's GPU section as ``(label, value, source, note)`` rows.

    Args:
        usage: This model's entry of ``model.gpu.model_gpu_usage`` (None before a process sample).
        status: ``model.gpu.gpu_status_line(state.gpu)``.
        ok: ``state.gpu.ok``.
    """
    rows: list[tuple[str, str, str, str]] = [("telemetry", "available" if ok else "not available", "", status)]
    if usage is None:
        return rows
    rows.append(("runner PID", ", ".join(str(p) for p in usage.runner_pids) or "not found", "", usage.note))
    known = usage.measured_bytes is not None
    rows.append(
        (
            "measured VRAM",
            exact_bytes(usage.measured_bytes),
            "[reported]" if known else "",
            "NVML per-process used GPU memory of the runner, all GPUs" if known else "",
        )
    )
    for index, b in usage.by_gpu:
        rows.append((f"  on GPU {index}", exact_bytes(b), "[reported]" if b is not None else "", ""))
    rows.append(("size_vram", exact_bytes(usage.size_vram_bytes), "[reported]", "/api/ps: what Ollama counts"))
    if usage.overhead_bytes is not None:
        sign = "+" if usage.overhead_bytes >= 0 else "−"
        rows.append(
            (
                "difference",
                f"{sign}{abs(usage.overhead_bytes):,} B ({sign}{ibytes(abs(usage.overhead_bytes))})",
                "",
                "measured − size_vram: CUDA context and buffers Ollama does not count",
            )
        )
    return rows


NOT_RECORDED = "GPU telemetry: none recorded before this point of the replay"
"""What the panel says in ``--replay`` before the recording's first GPU sample (after a jump back)."""


class GpuPanel(Static):
    """The GPU panel; ``show()`` gives it data, and it redraws only when the data changed.

    Add the class ``-hidden`` to hide it (the ``g`` binding).
    """

    DEFAULT_CSS = """
    GpuPanel { height: auto; padding: 0 1; }
    GpuPanel.-hidden { display: none; }
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._data: tuple[Any, ...] | None = None
        self._shown: Text | None = None

    def on_mount(self) -> None:
        self.app.theme_changed_signal.subscribe(self, self._theme_changed)

    def _theme_changed(self, _theme: object) -> None:
        self._shown = None
        self.refresh(layout=True)

    def show(
        self,
        views: Sequence[GpuView],
        status: str,
        width: int,
        *,
        system: SystemMemory | None = None,
        notes: Sequence[str] = (),
        usages: Sequence[ModelGpu] = (),
        compact: bool | None = None,
        ok: bool | None = None,
    ) -> None:
        """Set what the panel shows (``width``: the terminal's columns)."""
        if status == NOT_SAMPLED and getattr(self.app, "replay", None) is not None:
            status = NOT_RECORDED  # a replay waits for no sample: the recording has none before this point
        data = (tuple(views), status, width, system, tuple(notes), tuple(usages), compact, ok)
        if data == self._data:
            return
        self._data = data
        # the data changes every sample (RAM in use moves by bytes); the screen only when the
        # text does, and the layout only when the panel's height does
        text = self.render()
        if self._shown is not None and text == self._shown:
            return
        relayout = self._shown is None or len(text.plain.splitlines()) != len(self._shown.plain.splitlines())
        self._shown = text
        self.refresh(layout=relayout)

    def show_data(self, data: GpuPanelData, width: int, *, compact: bool | None = None) -> None:
        """``show()`` with everything ``model.gpu.gpu_panel_data`` joined."""
        self.show(
            data.views,
            data.status,
            width,
            system=data.system,
            notes=data.notes,
            usages=data.usages,
            compact=compact,
            ok=data.ok,
        )

    def render(self) -> Text:
        """The panel from the last ``show()``."""
        colors = self.app.theme_variables
        if self._data is None:
            return Text(NOT_SAMPLED, style=colors.get("kv-muted", ""), no_wrap=True, overflow="ellipsis")
        views, status, width, system, notes, usages, compact, ok = self._data
        return panel_text(
            views, status, width, colors, system=system, notes=notes, usages=usages, compact=compact, ok=ok
        )
