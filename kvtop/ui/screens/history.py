"""The history screen (``h``): GPU memory, decode tok/s and KV cache over the last 1 min / 10 min / 1 h.

Reads the app's ``History`` (``kvtop.model.history``) and turns it into three ``PlotSpec``s. The
x axis ends at the newest sample kvtop stored (``now``), and the window's end moves in steps of
one plotted slot, so an unchanged history draws the same specs and nothing is re-rendered.
"""

from __future__ import annotations

import math
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Container
from textual.events import Resize
from textual.screen import Screen
from textual.widgets import Footer, Static

from kvtop.model.history import WINDOWS_S, History, Marker, ModelSeries, Series
from kvtop.ui.format import ibytes, safe
from kvtop.ui.screens.changes import with_change_markers as marked
from kvtop.ui.widgets.plot import PlotLine, PlotMarker, PlotSpec, PlotView, span_text

GiB = 1024**3
MiB = 1024**2

PALETTE = ("kv-weights", "kv-kv", "kv-compute", "kv-ok", "kv-warn", "primary", "secondary", "accent")
"""Series colours (theme variables), one per GPU or model, in this order."""

MARKER_COLORS = {"load": "kv-ok", "unload": "kv-muted", "reload": "kv-warn"}

WIDE_MIN_COLUMNS = 140
"""From this width the tok/s and KV plots sit side by side under the GPU plot."""

NICE_SPANS_S: tuple[float, ...] = (30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0)
"""The x axis spans a short history is drawn over (the smallest that holds it)."""

LINE_MARKERS: tuple[str, ...] = ("braille", "•", "×", "◆", "◇", "□", "■", "○")
"""Without colours (NO_COLOR, the mono theme) each line series gets its own marker, in this order.
None is a source mark (``*``) or a bar's glyph, in ASCII mode either (``kvtop.core.glyphs``)."""

POINT_MARKERS: tuple[str, ...] = ("•", "×", "◆", "◇", "□", "■", "○")
"""Without colours, each point series (tok/s) gets its own marker."""


def shown_span(history: History, window_s: float) -> float:
    """The x axis span for ``window_s``: the window, or the smallest of ``NICE_SPANS_S`` that
    holds the history kvtop has when it is shorter (no minutes of empty axis)."""
    data = history.span_s()
    return min(window_s, next((s for s in NICE_SPANS_S if s >= data), NICE_SPANS_S[-1]))


def _marker(i: int, distinct: bool, points: bool = False) -> str | None:
    """The i-th series' marker when series must differ by more than colour, else None (default)."""
    if not distinct:
        return None
    markers = POINT_MARKERS if points else LINE_MARKERS
    return markers[i % len(markers)]


def _x(points: tuple[tuple[float, float], ...], end_s: float, scale: float) -> tuple[tuple[float, float], ...]:
    return tuple((t - end_s, v / scale) for t, v in points)


def _slice(series: Series, start_s: float, end_s: float, slots: int, scale: float) -> tuple[tuple[float, float], ...]:
    return _x(series.downsampled(start_s, end_s, slots), end_s, scale)


def _colors(history: History) -> dict[tuple[str, str], str]:
    """A stable colour per tracked model: by name, then digest."""
    return {key: PALETTE[i % len(PALETTE)] for i, key in enumerate(sorted(history.models))}


MARKER_STYLES = {"load": "default", "unload": "dotted", "reload": "double"}
"""Line style of each marker kind when colours cannot tell them apart."""


def _markers(history: History, start_s: float, end_s: float, distinct: bool = False) -> tuple[PlotMarker, ...]:
    marks: list[Marker] = list(history.markers_between(start_s, end_s))
    return tuple(
        PlotMarker(
            m.t_s - end_s,
            f"{m.kind} {safe(m.model, 40)}",
            MARKER_COLORS[m.kind],
            MARKER_STYLES[m.kind] if distinct else "default",
        )
        for m in marks
    )


def window_end(history: History, window_s: float, slots: int) -> float | None:
    """The window's end: the newest stored time, rounded up to a whole slot (``window_s / slots``)."""
    if history.latest_s is None:
        return None
    step = window_s / max(1, slots)
    return math.ceil(history.latest_s / step) * step


def _shown_models(history: History, max_models: int | None) -> tuple[list[ModelSeries], str]:
    """The models a plot draws, most recent first: all, or the first ``max_models`` and a title
    note saying how many there are (``h`` plots them all)."""
    found = list(history.models_by_recency())
    if max_models is None or len(found) <= max_models:
        return found, ""
    return found[:max_models], f" · {max_models} most recent of {len(found)} models (h: all)"


def gpu_spec(
    history: History, window_s: float, slots: int, gap_s: float, distinct: bool = False, max_models: int | None = None
) -> PlotSpec:
    """GPU memory used per device (driver figures) with each total as a reference line; without
    GPU telemetry, each model's ``/api/ps`` ``size_vram`` instead, saying why (at most
    ``max_models`` of them, the most recent, when given). Load / unload / reload markers on both."""
    end = window_end(history, window_s, slots)
    span = span_text(window_s)
    if end is None:
        return PlotSpec(f"GPU memory · last {span}", window_s, empty="no sample yet: the first poll has not returned")
    start = end - window_s
    markers = _markers(history, start, end, distinct)
    lines: list[PlotLine] = []
    devices = [d for d in sorted(history.devices.values(), key=lambda d: d.index) if d.used_bytes.count(start, end)]
    if devices:
        for i, dev in enumerate(devices):
            color = PALETTE[i % len(PALETTE)]
            used = dev.used_bytes.latest
            total = dev.total_bytes.latest
            latest = f"{ibytes(int(used[1]))}" + (f" of {ibytes(int(total[1]))}" if total else "") if used else ""
            lines.append(
                PlotLine(
                    f"GPU {dev.index} used",
                    _slice(dev.used_bytes, start, end, slots, GiB),
                    color,
                    latest=latest,
                    marker=_marker(i, distinct),
                )
            )
            if total is not None:
                lines.append(PlotLine(f"GPU {dev.index} total", ((0.0, total[1] / GiB),), "kv-muted", "reference"))
        return PlotSpec(
            f"GPU memory, GiB ({history.gpu_source}) · last {span}", window_s, "GiB", tuple(lines), markers, gap_s=gap_s
        )
    colors = _colors(history)
    shown, cut = _shown_models(history, max_models)
    for series in shown:
        pts = _slice(series.vram_bytes, start, end, slots, GiB)
        if not pts:
            continue
        latest = series.vram_bytes.latest
        lines.append(
            PlotLine(
                series.name,
                pts,
                colors[series.key],
                latest=ibytes(int(latest[1])) if latest else "",
                marker=_marker(len(lines), distinct),
            )
        )
    why = history.gpu_note or "GPU telemetry: none yet"
    title = f"Model VRAM, GiB (/api/ps size_vram) · last {span}{cut} · {why}"
    if not lines:
        return PlotSpec(title, window_s, empty=f"no model loaded in the last {span}", markers=markers)
    return PlotSpec(title, window_s, "GiB", tuple(lines), markers, gap_s=gap_s)


def tps_spec(
    history: History, window_s: float, slots: int, log_note: str, distinct: bool = False, max_models: int | None = None
) -> PlotSpec:
    """Decode tokens/s per model: one dot per timed request (runner log), with requests/min (at
    most ``max_models`` models, the most recent, when given)."""
    end = window_end(history, window_s, slots)
    span = span_text(window_s)
    shown, cut = _shown_models(history, max_models)
    title = f"Decode tok/s per model (runner log) · last {span}{cut}"
    if end is None:
        return PlotSpec(title, window_s, empty="no sample yet")
    start = end - window_s
    colors = _colors(history)
    lines: list[PlotLine] = []
    for series in shown:
        pts = _x(series.decode_tps.window(start, end), end, 1.0)
        if not pts:
            continue
        rpm = series.requests_per_min.latest
        latest = f"{pts[-1][1]:,.1f}" + (f" · {int(rpm[1])} req/min" if rpm is not None else "")
        lines.append(
            PlotLine(
                series.name,
                pts,
                colors[series.key],
                "points",
                latest,
                marker=_marker(len(lines), distinct, points=True),
            )
        )
    if not lines:
        return PlotSpec(title, window_s, empty=f"no timed request in the last {span}: {log_note}")
    return PlotSpec(title, window_s, "tok/s", tuple(lines), _markers(history, start, end, distinct))


def kv_spec(history: History, window_s: float, slots: int, gap_s: float, distinct: bool = False) -> PlotSpec:
    """KV cache per model: allocated (runner log) or estimated (``~``, kvtop's KV arithmetic)."""
    end = window_end(history, window_s, slots)
    span = span_text(window_s)
    if end is None:
        return PlotSpec(f"KV cache per model · last {span}", window_s, empty="no sample yet")
    start = end - window_s
    colors = _colors(history)
    found: list[tuple[ModelSeries, tuple[tuple[float, float], ...]]] = []
    for series in history.models_by_recency():
        pts = series.kv_bytes.downsampled(start, end, slots)  # each slice's highest: the same top
        if pts:
            found.append((series, pts))
    top = max((v for _, pts in found for _, v in pts), default=0.0)
    scale, unit = (GiB, "GiB") if top >= GiB else (MiB, "MiB")
    lines: list[PlotLine] = []
    sources: set[str] = set()
    for series, pts in found:
        mark = "~" if series.kv_source == "estimated" else ""
        sources.add(series.kv_source or "unknown")
        latest = series.kv_bytes.latest
        lines.append(
            PlotLine(
                series.name,
                _x(pts, end, scale),
                colors[series.key],
                latest=mark + ibytes(int(latest[1])) if latest else "",
                marker=_marker(len(lines), distinct),
            )
        )
    title = f"KV cache per model, {unit} ({', '.join(sorted(sources)) or 'no source'}) · last {span}"
    if not lines:
        return PlotSpec(
            f"KV cache per model · last {span}",
            window_s,
            empty=f"no KV figure in the last {span} (needs /api/show or the server log)",
        )
    return PlotSpec(title, window_s, unit, tuple(lines), _markers(history, start, end, distinct), gap_s=gap_s)


class HistoryScreen(Screen[None]):
    """Three plots of the app's history; ``z`` / ← → change the window, Esc or q closes."""

    DEFAULT_CSS = """
    HistoryScreen { layout: vertical; }
    HistoryScreen #history-title { height: 1; padding: 0 1; background: $panel; }
    HistoryScreen #history-lower { layout: vertical; height: 2fr; }
    HistoryScreen.-wide #history-lower { layout: horizontal; height: 1fr; }
    HistoryScreen PlotView { padding: 0 1; }
    """
    BINDINGS = [
        Binding("escape,q", "close", "Back"),
        Binding("z", "next_window", "Window"),
        Binding("right", "next_window", "Longer", show=False),
        Binding("left", "previous_window", "Shorter", show=False),
    ]

    def __init__(self, history: History, window_s: float | None = None) -> None:
        """``window_s``: one of ``WINDOWS_S``; by default 1 min while the history is shorter than
        a minute (kvtop just started), else 10 min."""
        super().__init__()
        self.history = history
        if window_s not in WINDOWS_S:
            window_s = WINDOWS_S[0] if history.span_s() <= WINDOWS_S[0] else WINDOWS_S[1]
        self.window_s = window_s
        self._shown: tuple[object, ...] | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="history-title")
        yield PlotView(id="plot-gpu")
        with Container(id="history-lower"):
            yield PlotView(id="plot-tps")
            yield PlotView(id="plot-kv")
        yield Footer()

    def on_mount(self) -> None:
        self.watch(self.app, "state", lambda _state: self.update_plots(), init=False)
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self.update_plots())  # mono: markers
        self.update_plots()

    def on_unmount(self) -> None:
        self.app.theme_changed_signal.unsubscribe(self)  # else kept (with its plots) until the next theme change

    def on_resize(self, event: Resize) -> None:
        self.update_plots()

    def distinct(self) -> bool:
        """Whether series must differ by marker and line style, not by colour alone: NO_COLOR
        (Textual then draws no colour) or the mono theme (shades of grey)."""
        return bool(getattr(self.app, "no_color", False)) or self.app.theme == "kvtop-mono"

    def update_plots(self) -> None:
        """Rebuild the specs when the history, the window, the width or the colour mode changed."""
        width = self.app.size.width
        wide = width >= WIDE_MIN_COLUMNS
        self.set_class(wide, "-wide")
        distinct = self.distinct()
        state = getattr(self.app, "state", None)
        changes = state.changes if state is not None else ()  # a marker at each change (screens/changes.py)
        key = (self.history.version, self.window_s, width, self.app.size.height, distinct, changes[-1:])
        if key == self._shown:
            return
        self._shown = key
        span = shown_span(self.history, self.window_s)  # a short history fills the axis
        # one slot per braille dot column: the GPU plot spans the width, the lower two half of it
        # when side by side (a coarser slot than the dots moves the line's ends by a dot each poll)
        slots = max(10, 2 * (width // 2 if wide else width))
        gpu_slots = max(10, 2 * width)
        interval = float(getattr(self.app, "interval_s", 1.0))
        gap = max(3 * interval + 1, 2.5 * span / slots, 3 * self.history.bucket_s)
        shown = "" if span >= self.window_s else f", {span_text(span)} shown (all there is)"
        self.query_one("#history-title", Static).update(
            Text.assemble(
                ("History", "bold"),
                f" · {span_text(self.window_s)} window{shown} (z ← →) · ",
                f"{self.history.point_count():,} points · x: time before the newest sample",
                no_wrap=True,
                overflow="ellipsis",
            )
        )
        gpu_plot = gpu_spec(self.history, span, gpu_slots, gap, distinct)
        self.query_one("#plot-gpu", PlotView).show(marked(gpu_plot, changes, window_end(self.history, span, gpu_slots)))
        note = _log_note(
            state.log.source if state is not None else None,
            demo=self._demo(),
            replay=getattr(self.app, "replay", None) is not None,
        )
        end = window_end(self.history, span, slots)
        self.query_one("#plot-tps", PlotView).show(
            marked(tps_spec(self.history, span, slots, note, distinct), changes, end)
        )
        self.query_one("#plot-kv", PlotView).show(
            marked(kv_spec(self.history, span, slots, gap, distinct), changes, end)
        )

    def _demo(self) -> bool:
        settings = getattr(self.app, "settings", None)
        return bool(getattr(settings, "demo", False))

    def _step(self, direction: int) -> None:
        i = WINDOWS_S.index(self.window_s)
        self.window_s = WINDOWS_S[(i + direction) % len(WINDOWS_S)]
        self.update_plots()

    def action_next_window(self) -> None:
        self._step(+1)

    def action_previous_window(self) -> None:
        self._step(-1)

    def action_close(self) -> None:
        self.dismiss()


def _log_note(source: str | None, *, demo: bool = False, replay: bool = False) -> str:
    """Why there is no timed request, in the mode kvtop runs in (no --log hint where --log does not apply)."""
    if replay and source is None:
        return "the recording holds no server log lines up to here (timings come from the runners' log)"
    if demo and source is None:
        return "the demo's stand-in server writes no runner log (timings come from llama-server runners' log lines)"
    if source is None:
        return "timings come from the server log (--log), which is off"
    return f"timings come from {safe(source, 40)} (llama-server runners, Ollama v0.30+, print them)"
