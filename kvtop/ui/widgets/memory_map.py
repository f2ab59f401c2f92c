"""The memory map panel: one bar per device (each GPU, then RAM) drawn across the panel's width.

The segments come from ``kvtop.model.memmap`` (bytes, each with its source); this widget only
draws them. Each model's weights, KV cache and compute use the theme's three shades (``kv-weights``,
``kv-kv``, ``kv-compute``) and differ by glyph too (``█ ▓ ▒``, as in the table's bar), and the
model's name is written over its stretch of the bar where it fits; a spilled model's CPU part on the
RAM bar carries the same name and shades. Figures carry the source marks of ``kvtop.model.known``
(``~`` estimated; allocated, runner and reported figures have none).

Wide form: per device a title line (total and free), the bar, and its legend (every part's size,
wrapped at whole entries); then a key of the glyphs drawn. The GPU panel's strip uses the same
glyphs and colours (``kvtop.ui.widgets.gpu_panel``). Compact form
(``compact=True``, a small terminal): one line per device. Clicking or hovering over a model's
stretch posts :class:`MemoryMapPanel.ModelPicked` (the app selects that model in the table).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, get_args

from rich.cells import cell_len
from rich.text import Text
from textual import events
from textual.message import Message
from textual.widget import Widget

from kvtop.model.known import ibytes, marked
from kvtop.model.memmap import MODEL_KINDS, DeviceBar, MemoryMap, ModelKey, Segment, SegmentKind
from kvtop.ui.format import _cells as split_cells
from kvtop.ui.format import safe, safe_name

GLYPHS: dict[str, str] = {
    "weights": "█",
    "kv": "▓",
    "kv_swa": "▤",
    "recurrent": "▓",
    "compute": "▒",
    "output": "▒",
    "model": "▇",
    "overhead": "▐",
    "ollama": "▚",
    "other": "▄",
    "unattributed": "·",
    "free": "░",
}
"""One glyph per kind, so the bar reads without colour (the mono theme, NO_COLOR); overhead ``▐``
and other Ollama ``▚`` differ at a glance (``▞`` beside ``▚`` did not), and so do their ASCII ``|``, ``\\``;
the SWA pool ``▤`` (ASCII ``;``) is told from the full KV cache ``▓`` (``%``) beside it."""

KIND_VARS: dict[str, str] = {
    "weights": "kv-weights",
    "kv": "kv-kv",
    "kv_swa": "kv-kv",
    "recurrent": "kv-kv",
    "compute": "kv-compute",
    "output": "kv-compute",
    "model": "kv-weights",
    "overhead": "kv-muted",
    "ollama": "kv-muted",
    "other": "kv-warn",
    "unattributed": "kv-unknown",
    "free": "kv-free",
}
"""Theme variable per kind."""

KIND_WORDS: dict[str, str] = {
    "weights": "weights",
    "kv": "KV cache",
    "kv_swa": "KV SWA pool",
    "recurrent": "recurrent state",
    "compute": "compute",
    "output": "output buffer",
    "model": "model (not split)",
    "overhead": "unexplained",
    "ollama": "other Ollama",
    "other": "other processes",
    "unattributed": "unattributed",
    "free": "free",
}

PART_LETTERS = {
    "weights": "W",
    "kv": "KV",
    "kv_swa": "SWA",
    "recurrent": "RS",
    "compute": "C",
    "output": "out",
    "model": "",
    "overhead": "+",
}
"""A model's parts in its legend entry (``+``: the unexplained remainder, measured − listed; ``model.ledger``)."""

MIN_LABEL_CELLS = 5
"""A model's name is written over its stretch of the bar from this many cells."""

MIN_CUT_LABEL_CELLS = 7
"""A name that must be cut is written from this many cells (``qwe…8_0``); in fewer it would say
nothing (``qw…_M``), and the legend names the stretch."""


def _size(seg: Segment, *, short: bool = True) -> str:
    return marked(seg.bytes, seg.source, size=True, short=short)


def _style(kind: str, colors: Mapping[str, str]) -> str:
    return colors.get(KIND_VARS.get(kind, ""), "")


def _short_title(bar: DeviceBar) -> str:
    if bar.key in ("RAM", "VRAM"):
        return bar.key
    name = bar.title.split(" ", 2)[2] if bar.title.count(" ") >= 2 else ""
    for prefix in ("NVIDIA ", "GeForce ", "AMD ", "Radeon "):
        if name.startswith(prefix) and len(name) > len(prefix):
            name = name[len(prefix) :]
    return f"{bar.key} {safe(name, 12)}".rstrip()


@dataclass(frozen=True, slots=True)
class Hit:
    """A model's stretch on one rendered line: cells ``x0 <= x < x1`` of line ``y``."""

    y: int
    x0: int
    x1: int
    model: ModelKey


def draw_bar(bar: DeviceBar, width: int, colors: Mapping[str, str]) -> tuple[Text, list[tuple[int, int, ModelKey]]]:
    """The bar in ``width`` cells and each model's stretch ``(x0, x1, key)`` on it.

    Cells are proportional to bytes over the device's total (or the segments' sum when larger or
    the total is not known); every non-zero segment gets at least one cell (``ui.format._cells``)."""
    segs = bar.segments
    if width <= 0:
        return Text(), []
    if not segs:
        return Text("·" * width, style=colors.get("kv-unknown", "")), []
    whole = max(bar.total_bytes or 0, sum(s.bytes for s in segs))
    cells = split_cells([s.bytes for s in segs], whole, width)
    out = Text(no_wrap=True, overflow="crop")
    spans: list[tuple[int, int, ModelKey]] = []
    x = 0
    for seg, n in zip(segs, cells):
        if n:
            if seg.model is not None and spans and spans[-1][2] == seg.model and spans[-1][1] == x:
                spans[-1] = (spans[-1][0], x + n, seg.model)
            elif seg.model is not None:
                spans.append((x, x + n, seg.model))
            out.append(GLYPHS[seg.kind] * n, style=_style(seg.kind, colors))
            x += n
    if x < width:  # a device with no total: the rest is not known
        out.append("·" * (width - x), style=colors.get("kv-unknown", ""))
    return write_names(out, spans), spans


def bar_name(name: str, limit: int) -> str:
    """``name`` in at most ``limit`` cells for a bar: whole, else without Ollama's default tag
    ``:latest`` (``gemma4``, not ``gem…est``), else cut in the middle (``ui.format.safe_name``:
    the tag tells ``q4_K_M`` from ``q8_0``)."""
    text = safe(name)
    if len(text) > limit and text.endswith(":latest") and len(text) - len(":latest") <= limit:
        return text[: -len(":latest")]
    return safe_name(name, limit)


def write_names(bar: Text, spans: Sequence[tuple[int, int, ModelKey]]) -> Text:
    """``bar`` with each model's name written over its stretch ``(x0, x1, key)`` where it fits
    (from :data:`MIN_LABEL_CELLS` cells inside, a glyph left at each end; a name that must be cut
    from :data:`MIN_CUT_LABEL_CELLS`), in reverse video of the stretch's own colours. The GPU
    panel's strip writes its runners' names the same way."""
    out = bar
    for x0, x1, key in spans:
        n = x1 - x0 - 2
        if n < MIN_LABEL_CELLS:
            continue
        label = bar_name(key[0], n)
        if "…" in label and "…" not in key[0] and n < MIN_CUT_LABEL_CELLS:
            continue
        at = x0 + 1
        seg_styles = _styles_at(out, at, at + len(label))
        pieces = Text()
        for ch, st in zip(label, seg_styles):
            pieces.append(ch, style=f"bold reverse {st}".strip())
        out = out[:at] + pieces + out[at + len(label) :]
    return out


def _styles_at(text: Text, start: int, end: int) -> list[str]:
    styles = [""] * (end - start)
    for span in text.spans:
        lo, hi = max(span.start, start), min(span.end, end)
        for i in range(lo, hi):
            styles[i - start] = str(span.style)
    return styles


Piece = tuple[str, str]
"""A run of a legend or key entry: its text and its style, symbolic (:func:`_piece_style`): a kind
(``weights``, ``free``…), ``bold``, ``muted`` or ``""``."""


def _piece_style(style: str, colors: Mapping[str, str]) -> str:
    if style in ("", "bold"):
        return style
    if style == "muted":
        return colors.get("kv-muted", "")
    return _style(style, colors)


def _model_legend_pieces(segs: Sequence[Segment]) -> list[Piece]:
    out: list[Piece] = [(GLYPHS[s.kind], s.kind) for s in segs]
    out.append((f" {safe_name(segs[0].label, 32)}", "bold"))
    for s in segs:
        letter = PART_LETTERS.get(s.kind, "")
        if s.signed_bytes is not None:  # the remainder as computed: negative when the log lists more than is measured
            sign = "+" if s.signed_bytes >= 0 else ""
            out.append((f" {sign}{marked(s.signed_bytes, s.source, size=True, short=True)}", ""))
            continue
        out.append((f" {letter}{' ' if letter and letter != '+' else ''}{_size(s)}", ""))
    return out


def legend_pieces(bar: DeviceBar) -> list[list[Piece]]:
    """:func:`legend_items` as plain pieces (text, symbolic style): what the legend says, without
    building styled text (:meth:`MemoryMapPanel.line_count` only measures it)."""
    return [item for item, _ in _legend_entries(bar)]


def _legend_entries(bar: DeviceBar) -> list[tuple[list[Piece], bool]]:
    """Every legend entry's pieces, and whether it is a model's."""
    items: list[tuple[list[Piece], bool]] = []
    group: list[Segment] = []
    for s in bar.segments:
        if s.kind in MODEL_KINDS and group and group[0].model == s.model:
            group.append(s)
            continue
        if group:
            items.append((_model_legend_pieces(group), True))
            group = []
        if s.kind in MODEL_KINDS:
            group = [s]
            continue
        if s.kind == "free" and bar.free_bytes is not None:
            continue  # the title line says it, exactly ("33.5 GiB free", as the GPU panel)
        items.append(([(GLYPHS[s.kind], s.kind), (f" {safe(s.label, 40)} {_size(s)}", "")], False))
    if group:
        items.append((_model_legend_pieces(group), True))
    if bar.note and not bar.segments:
        items.append(([(safe(bar.note, 160), "muted")], False))
    return items


LEGEND_MAX_LINES = 6
"""A device's legend takes at most this many lines: past them, its other entries (processes,
unattributed, free) stay and the models that do not fit are counted in one entry (``+950 more
models: the table lists each``). A 1,000-model map drew a 600-line legend before this cap."""


def _more_models(n: int) -> list[Piece]:
    return [(f"+{n} more model{'s' if n != 1 else ''}: the table lists each", "muted")]


def legend_plan(bar: DeviceBar, width: int) -> list[list[Piece]]:
    """The legend entries drawn at ``width`` cells: every entry when they wrap to at most
    :data:`LEGEND_MAX_LINES` lines, else the first models' entries that fit with the rest, then
    :func:`_more_models`, then every other entry (the same plan is drawn and counted)."""
    entries = _legend_entries(bar)
    items = [item for item, _ in entries]
    if wrapped_count([_cells(i) for i in items], width) <= LEGEND_MAX_LINES:
        return items
    models = [item for item, is_model in entries if is_model]
    others = [item for item, is_model in entries if not is_model]

    def plan(k: int) -> list[list[Piece]]:
        return [*models[:k], *([_more_models(len(models) - k)] if k < len(models) else []), *others]

    lo, hi = 0, len(models)  # the most models (lo) that keep the legend within its lines
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if wrapped_count([_cells(i) for i in plan(mid)], width) <= LEGEND_MAX_LINES:
            lo = mid
        else:
            hi = mid - 1
    return plan(lo)


def _styled(pieces: Sequence[Piece], colors: Mapping[str, str]) -> Text:
    t = Text()
    for text, style in pieces:
        t.append(text, style=_piece_style(style, colors))
    return t


def legend_items(bar: DeviceBar, colors: Mapping[str, str]) -> list[Text]:
    """Every segment of ``bar`` with its size and source mark, one entry each: a model's parts
    together (``█▓▒ qwen3:8b W 4.3G KV ~448M C ~61M +~242M``), then the other kinds; free memory
    only where the title line does not give it."""
    return [_styled(item, colors) for item in legend_pieces(bar)]


def _cells(pieces: Sequence[Piece]) -> tuple[int, int]:
    """``(cells, characters)`` of an entry made of ``pieces``."""
    return sum(cell_len(text) for text, _ in pieces), sum(len(text) for text, _ in pieces)


def wrapped_count(sizes: Sequence[tuple[int, int]], width: int, sep: int = 2, first_sep: int | None = None) -> int:
    """The lines :func:`wrap_items` makes of entries of these ``(cells, characters)`` sizes, counted
    without building them (the same rule: a line is broken only between entries)."""
    lines, cells, chars = 1, 0, 0
    for i, (w, n) in enumerate(sizes):
        gap = first_sep if (i == 1 and first_sep is not None) else sep
        if chars and cells + gap + w > width:
            lines += 1
            cells, chars = w, n
        elif chars:
            cells, chars = cells + gap + w, chars + gap + n
        else:
            cells, chars = cells + w, chars + n
    return lines


def wrap_items(items: Sequence[Text], width: int, sep: int = 2, first_sep: int | None = None) -> list[Text]:
    """``items`` on lines of at most ``width`` cells, ``sep`` spaces apart (``first_sep`` after the
    first item), a line broken only between items; an item wider than ``width`` alone on its line
    is cut with an ellipsis when drawn. At least one (empty) line."""
    lines: list[Text] = []
    line = Text(no_wrap=True, overflow="ellipsis")
    for i, item in enumerate(items):
        gap = first_sep if (i == 1 and first_sep is not None) else sep
        if len(line) and line.cell_len + gap + item.cell_len > width:
            lines.append(line)
            line = Text(no_wrap=True, overflow="ellipsis")
        elif len(line):
            line.append(" " * gap)
        line.append_text(item)
    lines.append(line)
    return lines


def legend_lines(bar: DeviceBar, width: int, colors: Mapping[str, str]) -> list[Text]:
    """:func:`legend_items` wrapped at whole entries within ``width`` cells, so that no entry (free
    memory last) is cut off the screen; at most :data:`LEGEND_MAX_LINES` (:func:`legend_plan`)."""
    return wrap_items([_styled(item, colors) for item in legend_plan(bar, width)], width)


def compact_tail(bar: DeviceBar, room: int) -> str:
    """After a one-line bar: ``used/total`` as the GPU strip writes it (``15.6G/16G``), then
    ``364M free`` where ``room`` cells leave the bar at least 20; `` reported`` without a total."""
    if bar.total_bytes is None:
        return " reported"
    used = bar.used_bytes
    if used is None:
        return f" ?/{ibytes(bar.total_bytes, short=True)}"
    tail = f" {ibytes(used, short=True)}/{ibytes(bar.total_bytes, short=True)}"
    free = f", {ibytes(bar.free_bytes, short=True)} free" if bar.free_bytes is not None else ""
    return tail + free if room - len(tail + free) >= 20 else tail


def _title_line(bar: DeviceBar, colors: Mapping[str, str]) -> Text:
    line = Text(no_wrap=True, overflow="ellipsis")
    line.append(safe(bar.title, 60), style="bold")
    if bar.error:
        line.append(f"  ✖ {safe(bar.error, 200)}", style=f"bold {colors.get('kv-crit', '')}")
        return line
    used = bar.used_bytes
    if bar.total_bytes is not None:  # used/total, the GPU strip's form; free follows in words
        line.append(
            f"  {ibytes(used) + '/' if used is not None else ''}{ibytes(bar.total_bytes)}"
            + (" used" if used is not None else " total")
        )
    if bar.free_bytes is not None:
        ratio = bar.free_bytes / bar.total_bytes if bar.total_bytes else 1.0
        style = colors.get("kv-crit", "") if ratio <= 0.05 else colors.get("kv-warn", "") if ratio <= 0.15 else ""
        line.append(" · ")
        line.append(f"{ibytes(bar.free_bytes)} free", style=style)
    elif bar.key == "VRAM":
        line.append("  total and free not known: " + safe(bar.note or "", 120), style=colors.get("kv-muted", ""))
    return line


KEY_ORDER: tuple[str, ...] = get_args(SegmentKind)
"""The key's glyph entries, in this order: the segment kinds as ``model.memmap.SegmentKind`` lists them."""

MARKS_KEY = "~ estimated, no mark: allocated or reported"
"""The key's first entry: the source marks (the map's figures carry ``~`` or nothing)."""


def key_kinds(mm: MemoryMap) -> tuple[str, ...]:
    """The kinds drawn in ``mm``'s bars, in :data:`KEY_ORDER`: the key explains only what shows."""
    drawn = {s.kind for b in mm.bars if not b.error for s in b.segments}
    return tuple(k for k in KEY_ORDER if k in drawn)


def key_lines(kinds: Sequence[str], width: int, colors: Mapping[str, str]) -> list[Text]:
    """What the marks and glyphs mean: :data:`MARKS_KEY`, then ``█ weights``, ``▓ KV cache``… for
    each of ``kinds``, wrapped at whole entries so that every entry shows within ``width`` cells
    (an entry wider than ``width`` alone is cut with an ellipsis)."""
    items = [Text(MARKS_KEY, style=colors.get("kv-muted", ""))]
    for kind in kinds:
        item = Text()
        item.append(GLYPHS[kind], style=_style(kind, colors))
        item.append(f" {KIND_WORDS[kind]}")
        items.append(item)
    return wrap_items(items, width, sep=1, first_sep=2)


def key_line_count(kinds: Sequence[str], width: int) -> int:
    """The lines :func:`key_lines` takes at ``width`` cells, counted without drawing them."""
    sizes = [(cell_len(MARKS_KEY), len(MARKS_KEY))]
    sizes += [(1 + 1 + cell_len(KIND_WORDS[k]), 2 + len(KIND_WORDS[k])) for k in kinds]
    return wrapped_count(sizes, width, sep=1, first_sep=2)


def legend_line_count(bar: DeviceBar, width: int) -> int:
    """The lines :func:`legend_lines` takes at ``width`` cells, counted without drawing them."""
    return wrapped_count([_cells(item) for item in legend_plan(bar, width)], width)


def map_line_count(mm: MemoryMap, width: int, *, compact: bool) -> int:
    """The lines :func:`map_text` draws for ``mm`` at ``width`` cells, counted without drawing."""
    if compact:
        n = len(mm.bars)
    else:
        n = sum(1 if b.error else 2 + legend_line_count(b, width) for b in mm.bars)
        n += key_line_count(key_kinds(mm), width) if mm.bars else 0
    return n + (1 if not mm.telemetry and mm.status else 0) + (0 if mm.bars else 1)


def map_text(mm: MemoryMap, width: int, colors: Mapping[str, str], *, compact: bool) -> tuple[Text, list[Hit]]:
    """The whole map as text and the models' stretches (``Hit``), for ``width`` cells.

    Args:
        mm: ``kvtop.model.memmap.memory_map(...)``.
        width: Cells available (the panel's content width).
        compact: One line per device (a small terminal).
    """
    lines: list[Text] = []
    hits: list[Hit] = []
    muted = colors.get("kv-muted", "")
    if not mm.telemetry and mm.status:
        lines.append(Text(safe(mm.status, 300), style=muted, no_wrap=True, overflow="ellipsis"))
    if not mm.bars:
        lines.append(Text("no device to draw: no GPU sample, no model in VRAM, RAM not read", style=muted))
    for bar in mm.bars:
        if compact:
            head = f"{_short_title(bar):<16} "
            if bar.error:
                line = Text(head, style="bold", no_wrap=True, overflow="ellipsis")
                line.append(f"✖ {safe(bar.error, 200)}", style=f"bold {colors.get('kv-crit', '')}")
                lines.append(line)
                continue
            tail = compact_tail(bar, width - len(head))
            bar_width = max(8, width - len(head) - len(tail))
            drawn, spans = draw_bar(bar, bar_width, colors)
            line = Text(head, style="bold", no_wrap=True, overflow="ellipsis")
            line.append_text(drawn)
            line.append(tail)
            hits.extend(Hit(len(lines), len(head) + a, len(head) + b, k) for a, b, k in spans)
            lines.append(line)
            continue
        lines.append(_title_line(bar, colors))
        if bar.error:
            continue
        drawn, spans = draw_bar(bar, width, colors)
        hits.extend(Hit(len(lines), a, b, k) for a, b, k in spans)
        lines.append(drawn)
        lines.extend(legend_lines(bar, width, colors))
    if not compact and mm.bars:
        lines.extend(key_lines(key_kinds(mm), width, colors))
    for line in lines:
        line.truncate(width, overflow="ellipsis")
    out = Text("\n").join(lines)
    out.no_wrap, out.overflow = True, "ellipsis"
    return out, hits


class MemoryMapPanel(Widget):
    """The memory map; ``show()`` gives it a map and it redraws only when the map (or its width,
    its form or the theme) changed. Hidden (``display: none``), it is given nothing and costs nothing."""

    DEFAULT_CSS = """
    MemoryMapPanel { height: auto; padding: 0 1; text-wrap: nowrap; text-overflow: ellipsis; }
    """

    class ModelPicked(Message):
        """A model's stretch of a bar was clicked or hovered."""

        def __init__(self, model: ModelKey) -> None:
            super().__init__()
            self.model = model

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._map: MemoryMap | None = None
        self._compact = False
        self._cache: tuple[tuple[object, ...], Text, list[Hit]] | None = None
        self._hover: ModelKey | None = None
        self._height: int | None = None
        self._count: tuple[tuple[object, ...], int] | None = None
        self.renders = 0
        """Times the text was built (the observer-cost tests count them)."""
        self.counts = 0
        """Times the lines were counted (``map_line_count``): once per map, form and width, not
        per repaint (the observer-cost tests count them)."""

    def on_mount(self) -> None:
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self.refresh(layout=True))

    @property
    def memory_map(self) -> MemoryMap | None:
        """The map last shown."""
        return self._map

    def show(self, mm: MemoryMap, *, compact: bool) -> None:
        """Set the map; nothing is redrawn when it is equal to the one shown."""
        if mm == self._map and compact == self._compact:
            return
        self._map, self._compact = mm, compact
        self._fit_height()
        self.refresh()

    def _fit_height(self) -> None:
        """Give the panel its lines as its height. A style: a changed style always lays the panel
        out again, where ``refresh(layout=True)`` can be lost while Textual holds a layout request
        from a class change on the screen (the map then kept a 2-line height under a 7-line map)."""
        lines = self._line_count()
        if lines != self._height:
            self._height = lines
            self.styles.height = lines

    def on_resize(self, event: events.Resize) -> None:
        self._fit_height()  # the legends and the key wrap: the lines follow the width

    def line_count(self) -> int:
        """The lines the map takes with the map and form last shown (at the panel's width)."""
        return self._line_count()

    def _line_count(self) -> int:
        mm = self._map
        if mm is None:
            return 1
        key = (mm, self._compact, self._width())
        if self._count is None or self._count[0] != key:
            self.counts += 1
            self._count = (key, map_line_count(mm, key[2], compact=self._compact))
        return self._count[1]

    def _width(self) -> int:
        return max(10, self.content_size.width or self.app.size.width - 2)

    def _text(self) -> tuple[Text, list[Hit]]:
        colors = self.app.theme_variables
        width = self._width()
        key = (self._map, self._compact, width, self.app.theme)
        if self._cache is not None and self._cache[0] == key:
            return self._cache[1], self._cache[2]
        if self._map is None:
            text, hits = Text("memory map: waiting for the first sample", style=colors.get("kv-muted", "")), []
        else:
            text, hits = map_text(self._map, width, colors, compact=self._compact)
        self.renders += 1
        self._cache = (key, text, hits)
        return text, hits

    def render(self) -> Text:
        """The map from the last ``show()``."""
        return self._text()[0]

    def model_at(self, x: int, y: int) -> ModelKey | None:
        """The model whose stretch covers content cell ``(x, y)``, if any."""
        for hit in self._text()[1]:
            if hit.y == y and hit.x0 <= x < hit.x1:
                return hit.model
        return None

    def _pick(self, event: events.MouseEvent, *, hover: bool) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        model = self.model_at(offset.x, offset.y)
        if model is None or (hover and model == self._hover):
            return
        self._hover = model
        self.post_message(self.ModelPicked(model))

    def on_click(self, event: events.Click) -> None:
        self._pick(event, hover=False)

    def on_mouse_move(self, event: events.MouseMove) -> None:
        self._pick(event, hover=True)

    def on_leave(self, event: events.Leave) -> None:
        self._hover = None
