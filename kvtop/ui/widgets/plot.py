"""A plotext plot inside Textual: sized to the widget, coloured from the theme, cached.

``PlotSpec`` says what to draw (already in display units); ``render_plot`` turns it into a Rich
``Text`` with plotext; ``PlotView`` shows one and redraws at the plot's resolution: the figure is
rebuilt only when a braille dot of it, its size or the theme's colours change (``area_key``), so
a poll that adds a sample to a flat line costs no render (benchmarks/cpu_idle.py at 160x48).

Why not ``textual-plotext``: its 1.0.1 requires ``plotext<6`` (kvtop uses plotext 6), writes its
themes into plotext's global theme table and rebuilds the figure on every render.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import plotext
from rich.style import Style
from rich.text import Span, Text
from textual.app import RenderResult
from textual.widget import Widget

from kvtop.ui.format import safe

LineKind = Literal["line", "points", "reference"]


@dataclass(frozen=True, slots=True)
class PlotLine:
    """One series to draw.

    Attributes:
        label: Legend text (already safe; shown with ``latest``).
        points: ``(x, y)``: x in seconds relative to the window's end (``-span..0``), y in the
            plot's display unit.
        color: A theme variable name (``kv-weights``) or a Textual colour variable (``primary``).
        kind: ``line`` (connected, broken over gaps), ``points`` (one dot per sample: discrete
            requests) or ``reference`` (a horizontal line at the first point's y, e.g. a total).
        latest: The newest value as text for the legend (``12.1 GiB``), or "".
        marker: The plotext marker drawing it (``braille``, or one character such as ``×``);
            None: braille for a line, ``•`` for points. Set per series when colours cannot tell
            series apart (NO_COLOR, a mono theme); the legend shows the same mark.
    """

    label: str
    points: tuple[tuple[float, float], ...]
    color: str
    kind: LineKind = "line"
    latest: str = ""
    marker: str | None = None


@dataclass(frozen=True, slots=True)
class PlotMarker:
    """A vertical marker at ``x`` (seconds relative to the window's end) with a legend text;
    ``style`` is plotext's line style (``default``, ``dotted``, ``double``, ``heavy``)."""

    x: float
    text: str
    color: str
    style: str = "default"


@dataclass(frozen=True, slots=True)
class PlotSpec:
    """Everything one plot shows; equal specs render equal text (so they are compared, not redrawn).

    Attributes:
        title: First line of the widget.
        span_s: Window length, seconds (the x axis runs ``-span_s..0``).
        unit: Unit of y (for tick labels: ``GiB``, ``tok/s``).
        lines / markers: What to draw.
        empty: When set, this sentence is shown instead of a plot (no data, no telemetry).
        gap_s: Consecutive points further apart than this are not connected.
    """

    title: str
    span_s: float
    unit: str = ""
    lines: tuple[PlotLine, ...] = ()
    markers: tuple[PlotMarker, ...] = ()
    empty: str | None = None
    gap_s: float = 5.0


def nice_ticks(top: float, count: int) -> tuple[float, ...]:
    """About ``count`` round tick values from 0 to at least ``top`` (steps of 1, 1.5, 2, 2.5, 3, 4, 5,
    6 or 8 × 10^n)."""
    if top <= 0 or count < 2:
        return (0.0, 1.0)
    raw = top / (count - 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10) if m * mag >= raw)
    n = int(math.ceil(top / step - 1e-9))
    return tuple(round(i * step, 10) for i in range(n + 1))


def tick_text(v: float) -> str:
    """Short tick label: ``0``, ``2.5``, ``12``, ``1.5k``."""
    if abs(v) >= 10_000:
        return f"{v / 1000:.0f}k"
    if abs(v) >= 1000:
        return f"{v / 1000:.1f}k".replace(".0k", "k")
    if v == int(v):
        return f"{int(v)}"
    return f"{v:.1f}" if abs(v) >= 1 else f"{v:.2f}".rstrip("0")


def span_text(seconds: float) -> str:
    """``1 min``, ``10 min``, ``1 h``, ``90 s``."""
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{int(seconds // 3600)} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{int(seconds // 60)} min"
    return f"{seconds:g} s"


def ago_text(seconds: float) -> str:
    """``-45s``, ``-5m``, ``-2m10s``, ``-1h`` (x tick and marker labels)."""
    s = int(round(abs(seconds)))
    if s == 0:
        return "now"
    if s < 60:
        return f"-{s}s"
    if s < 3600:
        m, r = divmod(s, 60)
        return f"-{m}m" + (f"{r:02d}s" if r else "")
    h, r = divmod(s, 3600)
    return f"-{h}h" + (f"{r // 60:02d}m" if r // 60 else "")


def _rgb(colors: Mapping[str, str], name: str) -> tuple[int, int, int] | None:
    from textual.color import Color, ColorParseError

    value = colors.get(name)
    if not value:
        return None
    try:
        c = Color.parse(value)
    except ColorParseError:
        return None
    return (c.r, c.g, c.b)


def _pixel(colors: Mapping[str, str], name: str) -> object:
    rgb = _rgb(colors, name)
    return plotext.pixel(foreground=rgb) if rgb is not None else plotext.pixel()


def _x_ticks(span_s: float, width: int) -> tuple[list[float], list[str]]:
    count = 5 if width >= 60 else 3
    xs = [-span_s + i * span_s / (count - 1) for i in range(count)]
    return xs, [ago_text(x) for x in xs]


def _plot_area(spec: PlotSpec, width: int, height: int, colors: Mapping[str, str]) -> Text:
    """The plotext figure (axes, ticks, lines) as ``height`` lines of ``width`` cells."""
    plotext.terminal.limit(False, False)  # the widget's size, not the terminal's
    fig = plotext.figure
    fig.clear()
    fig.theme("colorless")
    fig.plot_size(width, height)
    fig.axes(active=False, axis="x", side="upper")
    fig.axes(active=False, axis="y", side="right")
    ticks = _y_ticks(spec, height)
    for line in spec.lines:
        if not line.points:
            continue
        pix = _pixel(colors, line.color)
        if line.kind == "reference":
            fig.line(line.points[0][1], pixel=pix, style="dotted")
            continue
        xs = [x for x, _ in line.points]
        yv = [y for _, y in line.points]
        symbol = line.marker or ("braille" if line.kind == "line" else "•")
        sig = fig.signal(xs, yv, marker=plotext.marker(symbol, pixel=pix))
        if line.kind == "line":
            sig.lines()
            for i in range(1, len(xs)):
                if xs[i] - xs[i - 1] > spec.gap_s:
                    sig.line(i, False)
        fig.draw(sig)
    for m in spec.markers:
        fig.line(m.x, orientation="vertical", pixel=_pixel(colors, m.color), style=m.style)
    fig.ruler(axis="x").lim(-spec.span_s, 0)
    tx, tl = _x_ticks(spec.span_s, width)
    fig.ruler(axis="x").ticks(tx, tl)
    fig.ruler(axis="y").lim(0, ticks[-1])
    fig.ruler(axis="y").ticks(list(ticks), [tick_text(t) for t in ticks])
    fig.legend(active=False)
    text = Text.from_ansi(fig.build().string(), no_wrap=True)
    # plotext paints a background under some pixels; the widget's own background is the theme's
    text.spans[:] = [
        Span(s.start, s.end, Style(color=s.style.color, bold=s.style.bold)) if isinstance(s.style, Style) else s
        for s in text.spans
    ]
    rows = list(text.split("\n", allow_blank=True))[:height]
    return Text("\n").join(row[:width] for row in rows)


def _y_ticks(spec: PlotSpec, height: int) -> tuple[float, ...]:
    """The y axis' ticks: 0 to a round value above the highest point of every line."""
    top = max((y for line in spec.lines for _, y in line.points), default=0.0)
    return nice_ticks(top * 1.05 if top > 0 else 1.0, max(2, min(5, height // 2)))


def area_key(spec: PlotSpec, width: int, height: int) -> tuple[object, ...]:
    """What the plot area of ``width`` × ``height`` cells draws, at its resolution: each line's
    points as braille dots (2 columns × 4 rows a cell; repeats merged, a level run of a line kept as
    its first and last dot, a gap kept as a break, a dot within one of an edge on the edge), the reference lines' and markers' dot row or column, the
    y ticks and the x span. Two specs with the same key draw the same figure, so the figure is
    rebuilt only when this key changes (a flat line moving left by less than a dot draws nothing new)."""
    ticks = _y_ticks(spec, height)
    span = spec.span_s if spec.span_s > 0 else 1.0
    x_dots = 2 * max(1, width) / span
    y_dots = 4 * max(1, height) / ticks[-1]
    last_col = 2 * max(1, width) - 1

    def column(x: float) -> int:
        # the window's end rounds up to a slot, so the newest point sits 0 to 1 dot before the
        # edge from poll to poll: within a dot of either edge counts as the edge
        c = int((x + span) * x_dots)
        return 0 if c <= 1 else last_col if c >= last_col - 1 else c

    lines: list[tuple[object, ...]] = []
    for line in spec.lines:
        if not line.points:
            continue
        if line.kind == "reference":
            lines.append(("reference", line.color, int(line.points[0][1] * y_dots)))
            continue
        dots: list[tuple[int, int] | None] = []
        last: tuple[int, int] | None = None
        prev_x: float | None = None
        for x, y in line.points:
            if line.kind == "line" and prev_x is not None and x - prev_x > spec.gap_s:
                dots.append(None)  # not connected across a gap
                last = None
            prev_x = x
            dot = (column(x), int(y * y_dots))
            if dot == last:
                continue
            if (
                line.kind == "line"
                and last is not None
                and len(dots) >= 2
                and dots[-2] is not None
                and dots[-2][1] == last[1] == dot[1]
            ):
                dots[-1] = dot  # a level run is drawn from its first dot to its last, whatever is between
            else:
                dots.append(dot)
            last = dot
        lines.append((line.kind, line.color, line.marker, tuple(dots)))
    markers = tuple((column(m.x), m.color, m.style) for m in spec.markers)
    return (width, height, spec.span_s, ticks, tuple(lines), markers)


def _frame(spec: PlotSpec, width: int, height: int, colors: Mapping[str, str]) -> tuple[Text, list[Text], int]:
    """The title, the legend rows and the plot area's height in rows (0: no plot, the legend rows
    are then the sentence said instead)."""
    muted = colors.get("kv-muted", "")
    title = Text(safe(spec.title), style="bold", no_wrap=True, overflow="ellipsis")
    title.truncate(width, overflow="ellipsis")
    if spec.empty is not None or height < 6 or width < 20:
        message = spec.empty if spec.empty is not None else "too small to plot: make the terminal larger"
        return title, [Text(safe(message), style=muted)], 0
    legend = Text(no_wrap=True, overflow="ellipsis")
    for line in spec.lines:
        if legend:
            legend.append("  ")
        glyph = legend_glyph(line)
        legend.append(glyph + " ", style=colors.get(line.color, ""))
        legend.append(safe(line.label, 40))
        if line.latest:
            legend.append(f" {line.latest}", style=muted)
    for m in sorted(spec.markers, key=lambda m: -m.x):
        if legend:
            legend.append("  ")
        legend.append(MARKER_GLYPHS.get(m.style, "│") + " ", style=colors.get(m.color, ""))
        legend.append(safe(m.text, 60))
        legend.append(f" {ago_text(m.x)}", style=muted)
    legend_rows = 1 if legend.cell_len <= width or height < 10 else 2
    parts = list(legend.wrap(_console(), width)[:legend_rows]) if legend else []
    return title, parts, height - 1 - len(parts)


def _text_key(parts: list[Text]) -> tuple[object, ...]:
    return tuple((t.plain, tuple(t.spans)) for t in parts)


def picture_key(spec: PlotSpec, width: int, height: int, colors: Mapping[str, str]) -> tuple[object, ...]:
    """Everything ``render_plot`` shows at ``width`` × ``height``: the title and legend as text,
    the plot area by :func:`area_key`. Equal keys render the same picture."""
    width, height = max(1, width), max(1, height)
    title, parts, area_h = _frame(spec, width, height, colors)
    return (_text_key([title, *parts]), area_key(spec, width, area_h) if area_h else None)


def render_plot(spec: PlotSpec, width: int, height: int, colors: Mapping[str, str]) -> Text:
    """The plot as text: a title line, the plotext figure, then a legend (one item per series
    with its latest value, then the markers, newest first) cut to ``width`` × ``height``."""
    width, height = max(1, width), max(1, height)
    title, parts, area_h = _frame(spec, width, height, colors)
    if not area_h:
        return Text("\n").join([title, *parts])
    return Text("\n").join([title, _plot_area(spec, width, area_h, colors), *parts])


MARKER_GLYPHS = {"default": "│", "dotted": "┆", "double": "║", "heavy": "┃"}
"""The legend's mark for a vertical marker of each plotext line style."""


def legend_glyph(line: PlotLine) -> str:
    """The mark before a series' name in the legend: what the plot draws it with."""
    if line.kind == "reference":
        return "┄"
    if line.marker and line.marker != "braille":
        return line.marker if len(line.marker) == 1 else "•"
    return "•" if line.kind == "points" else "━"


@functools.cache
def _console():  # type: ignore[no-untyped-def]
    from rich.console import Console

    return Console(width=10_000, color_system=None, legacy_windows=False)


@dataclass(frozen=True, slots=True)
class _Frame:
    """A spec at one size and theme: what ``PlotView`` shows, and the keys it compares.

    Attributes:
        memo: ``(spec, width, height, colours)`` it was computed for.
        title / parts / area_h: The title, the legend rows (or the sentence), the plot area's rows.
        key: Equal keys show the same picture (title and legend text, the area's dots, colours).
        area: Equal ones draw the same plotext figure; None when there is no plot area.
    """

    memo: tuple[object, ...]
    title: Text
    parts: list[Text]
    area_h: int
    key: tuple[object, ...]
    area: tuple[object, ...] | None
    colors: dict[str, str]


class PlotView(Widget):
    """Shows one ``PlotSpec``; repaints only when what it shows at its size changes
    (:func:`picture_key`), and rebuilds the plotext figure only when the plot area's dots, the size
    or the theme's colours change (:func:`area_key`): a new sample that moves no dot costs no render."""

    DEFAULT_CSS = """
    PlotView { width: 1fr; height: 1fr; min-height: 6; }
    PlotView.-empty { height: 3; min-height: 3; }
    """

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._spec: PlotSpec | None = None
        self._picture: _Frame | None = None
        self._cache_key: tuple[object, ...] | None = None
        self._cache: Text = Text()
        self._area_key: tuple[object, ...] | None = None
        self._area: Text = Text()
        self.renders = 0
        """How many times the plotext figure was actually rebuilt (tests count them over idle polls)."""

    @property
    def spec(self) -> PlotSpec | None:
        return self._spec

    def show(self, spec: PlotSpec) -> None:
        """Draw ``spec``; a spec that shows the same picture at this size changes nothing on screen."""
        if spec == self._spec:
            return
        self._spec = spec
        self.set_class(spec.empty is not None, "-empty")  # a sentence needs no plot's height
        if self._frame().key != self._cache_key:
            self.refresh()

    def _frame(self) -> _Frame:
        """What the current spec shows at the current size and colours (computed once for both)."""
        assert self._spec is not None
        colors = dict(self.app.theme_variables)
        width, height = max(1, self.size.width), max(1, self.size.height)
        memo = (self._spec, width, height, tuple(sorted(colors.items())))
        if self._picture is None or self._picture.memo != memo:
            title, parts, area_h = _frame(self._spec, width, height, colors)
            area = (area_key(self._spec, width, area_h), memo[3]) if area_h else None
            self._picture = _Frame(
                memo, title, parts, area_h, (_text_key([title, *parts]), area, memo[3]), area, colors
            )
        return self._picture

    def on_mount(self) -> None:
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self.refresh())

    def on_unmount(self) -> None:
        # the app's signal keeps its subscribers (weak keys, but the callback holds the widget)
        # until the next theme change: a closed history screen would stay in memory until then
        self.app.theme_changed_signal.unsubscribe(self)

    def render(self) -> RenderResult:
        if self._spec is None:
            return Text()
        frame = self._frame()
        if frame.key == self._cache_key:
            return self._cache
        if frame.area is not None:
            if frame.area != self._area_key:
                self._area = _plot_area(self._spec, max(1, self.size.width), frame.area_h, frame.colors)
                self._area_key = frame.area
                self.renders += 1
            self._cache = Text("\n").join([frame.title, self._area, *frame.parts])
        else:
            self._cache = Text("\n").join([frame.title, *frame.parts])
        self._cache_key = frame.key
        return self._cache
