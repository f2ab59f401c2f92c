"""The models table: one row per loaded model, columns chosen by terminal width."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Callable

from rich.cells import cell_len
from rich.text import Text
from textual.binding import Binding
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey

from kvtop.model.placement import vram_ram
from kvtop.model.views import ModelView
from kvtop.ui.ascii_mode import ascii_on
from kvtop.ui.format import (
    context_text,
    ctx_number,
    ibytes,
    setting_text,
    memory_bar,
    memory_figures,
    safe,
    safe_name,
    short_until,
    size_text,
    source_mark,
)

WIDE_MIN_COLUMNS = 160
"""From this width on the table shows ID, FLASH ATTN, KV TYPE, TOK/S and byte figures."""

MEDIUM_MIN_COLUMNS = 100
"""From this width on the table shows UNTIL."""

SPARK_MIN_COLUMNS = 120
"""From this width on the table shows VRAM 1m (each model's size_vram over the last minute)."""

SPARK_CELLS = 7
"""Characters of the VRAM 1m sparkline (one per ~8.6 s of the last minute)."""

Sparks = dict[tuple[str, str], str]
"""``(name, digest)`` -> sparkline text (``History.sparklines``)."""


@dataclass(frozen=True, slots=True)
class Column:
    key: str
    label: str
    width: int
    cell: Callable[[ModelView, dict[str, str]], Text | str]


def _spark(sparks: Sparks) -> Callable[[ModelView, dict[str, str]], Text]:
    def cell(v: ModelView, colors: dict[str, str]) -> Text:
        line = sparks.get((v.name, v.digest))
        if not line or not line.strip():
            return Text("…", style=colors.get("kv-muted", ""))  # not sampled yet
        return Text(line, style=colors.get("kv-weights", ""), no_wrap=True)

    return cell


def slots_cell(v: ModelView, width: int) -> str:
    """CONTEXT cell text: the context (``4096×2``); while a prompt is being processed ``pf 43%``;
    while slots are busy the busy count after ``▶`` (``4096×2 ▶1``, ``~`` when estimated from the
    log), shortened to fit ``width`` cells (``4096 ▶1``, then ``▶1/2``)."""
    use = v.slots
    ctx = context_text(v)
    if use is None:
        return ctx
    if use.prefill is not None and use.prefill.percent is not None:
        return f"pf {use.prefill.percent}%"
    if not use.busy:
        return ctx
    busy = f"{source_mark(use.source)}▶{use.busy}"  # a count: its mark before it, as a size's
    candidates = [f"{ctx} {busy}"]
    if v.context.value is not None:
        candidates.append(f"{ctx_number(v.context.value)} {busy}")
    candidates.append(f"{busy}/{use.total}" if use.total is not None else busy)
    return next((c for c in candidates if len(c) <= width), candidates[-1])


def _context(width: int) -> Callable[[ModelView, dict[str, str]], Text]:
    def cell(v: ModelView, colors: dict[str, str]) -> Text:
        text = slots_cell(v, width)
        busy = v.slots is not None and bool(v.slots.busy)
        return Text(text, style=colors.get("kv-ok", "") if busy else "", no_wrap=True)

    return cell


def _name(width: int) -> Callable[[ModelView, dict[str, str]], Text]:
    def cell(v: ModelView, colors: dict[str, str]) -> Text:
        style = f"bold {colors.get('kv-crit', '')}" if v.spilled else ""
        return Text(safe_name(v.name, width), style=style, no_wrap=True)

    return cell


def _processor(v: ModelView, colors: dict[str, str]) -> Text:
    if v.cloud:
        return Text("cloud", style=colors.get("kv-muted", ""))
    if v.spilled:
        return Text(v.processor, style=f"bold {colors.get('kv-crit', '')}")
    if v.processor == "100% GPU":
        return Text(v.processor, style=colors.get("kv-ok", ""))
    return Text(v.processor, style=colors.get("kv-warn", ""))


def _until(short: bool) -> Callable[[ModelView, dict[str, str]], Text]:
    def cell(v: ModelView, colors: dict[str, str]) -> Text:
        text = short_until(v) if short else v.until
        return Text(text, style=colors.get("kv-warn", "") if v.expired else "")

    return cell


def _known(attr: str) -> Callable[[ModelView, dict[str, str]], Text]:
    def cell(v: ModelView, colors: dict[str, str]) -> Text:
        k = getattr(v, attr)
        if k.value is None:
            return Text("?", style=colors.get("kv-muted", ""))
        return Text(setting_text(k), style=colors.get("kv-muted", "") if k.source == "default" else "")

    return cell


def _tps(v: ModelView, colors: dict[str, str]) -> Text:
    """Decode tok/s of the newest request (from the runner log), or why there is none."""
    if v.decode_tps.value is not None:
        return Text(f"{v.decode_tps.value:,.1f}", justify="right")
    if v.load is not None and v.timings_note and v.local.endpoints is None:
        return Text("no timings", style=colors.get("kv-muted", ""))
    watched = v.load is not None or v.local.endpoints is not None  # a request will be measured
    return Text("–" if watched else "?", style=colors.get("kv-muted", ""), justify="right")


def _memory(bar_width: int, figures: bool) -> Callable[[ModelView, dict[str, str]], Text]:
    def cell(v: ModelView, colors: dict[str, str]) -> Text:
        if v.cloud:
            return Text("cloud", style=colors.get("kv-muted", ""))
        out = memory_bar(v, bar_width, colors)
        if figures:
            out.append(" " + memory_figures(v))
        else:
            out.append(" KV " + size_text(v.memory.kv, short=True))
        return out

    return cell


def _size(v: ModelView, colors: dict[str, str]) -> Text:
    """SIZE: ``/api/ps`` size; for a spilled model its VRAM and RAM instead (they add up to it):
    ``5.0G+1.2G`` (``model.placement.vram_ram``: allocated from the log, else reported; both plain
    in the legend), the RAM part in the critical colour. The column's header then reads
    ``VRAM+RAM`` (:func:`_size_column`): PROCESSOR next to it gives the split the other way round,
    CPU first, as ``ollama ps`` prints it."""
    if not v.spilled:
        return Text(ibytes(v.size_bytes), justify="right")
    vram, ram = vram_ram(v)
    text = Text(no_wrap=True, justify="right")
    text.append(size_text(vram, short=True))
    text.append("+", style=colors.get("kv-muted", ""))
    text.append(size_text(ram, short=True), style=f"bold {colors.get('kv-crit', '')}".strip())
    return text


SPILL_SIZE_LABEL = "VRAM+RAM"
"""SIZE's header while a model is spilled: says which figure is which in ``5.0G+1.2G`` (a row that
is not spilled has all of its size in VRAM)."""


def _size_column(spill: bool) -> Column:
    """SIZE, one cell wider and headed ``VRAM+RAM`` while a model is spilled (``9.9G+9.9G``: short
    sizes have no decimal from 10)."""
    return Column("size", SPILL_SIZE_LABEL if spill else "SIZE", 9 if spill else 8, _size)


WIDE_NAME = 24
"""From 160 columns, NAME's cells before the memory bar grows (a longer name still widens it)."""

WIDE_BAR_GROW = 24
"""From 160 columns, the cells the memory bar grows by past its 6 (at most)."""

NAME_MAX = 80
"""The widest NAME column (``safe_name`` cuts longer names in the middle, keeping the tag)."""


def columns_for(width: int, sparks: Sparks | None = None, views: Sequence[ModelView] = ()) -> tuple[Column, ...]:
    """The column set for a terminal ``width`` (80 columns shows the essentials); ``sparks``
    fills the VRAM 1m column (from ``SPARK_MIN_COLUMNS``).

    Columns share the width by need: when a name in ``views`` is longer than the NAME column,
    the other columns give up the cells their header and cells do not use (widest slack first),
    so a name is cut only when the terminal has no room left for it."""
    spill = any(v.spilled for v in views)
    return _fit_names(_column_set(width, sparks, spill), width, views)


def _fit_names(cols: tuple[Column, ...], width: int, views: Sequence[ModelView]) -> tuple[Column, ...]:
    """``cols`` with NAME widened to the longest name in ``views``, as far as ``width`` allows."""
    if not views or cols[0].key != "name":
        return cols
    want = min(NAME_MAX, max(cell_len(safe(v.name)) for v in views))
    name = cols[0]
    room = width - sum(c.width + 2 for c in cols) - 3  # + 2 for the vertical scrollbar + 1 spare
    grow = min(want - name.width, max(0, room))
    if want <= name.width:
        return cols
    widths = [c.width for c in cols]
    short = want - name.width - grow
    if short > 0:  # take what the other columns do not use, widest slack first
        slack = sorted(((c.width - _need(c, views), i) for i, c in enumerate(cols) if i), reverse=True)
        for spare, i in slack:
            if short <= 0 or spare <= 0:
                break
            take = min(spare, short)
            widths[i] -= take
            short -= take
            grow += take
    name_w = name.width + grow
    out = [Column("name", name.label, name_w, _name(name_w))]
    out += [Column(c.key, c.label, w, c.cell) for c, w in zip(cols[1:], widths[1:])]
    return tuple(out)


def _need(col: Column, views: Sequence[ModelView]) -> int:
    """Cells a column's header and cells use (never more than its width)."""
    widest = cell_len(col.label)
    for v in views:
        cell = col.cell(v, {})
        widest = max(widest, cell.cell_len if isinstance(cell, Text) else cell_len(cell))
    return min(col.width, widest)


def _column_set(width: int, sparks: Sparks | None, spill: bool = False) -> tuple[Column, ...]:
    """The columns for ``width`` at their usual widths (NAME takes what the others leave);
    ``spill``: a model is spilled, SIZE shows its VRAM+RAM (one cell wider, taken from NAME)."""
    spark = Column("spark", "VRAM 1m", SPARK_CELLS, _spark(sparks or {}))
    # NAME gets what the fixed columns leave: their widths + 2 cells of padding per column
    # + 2 for the vertical scrollbar + 1 spare
    size = _size_column(spill)
    if width >= WIDE_MIN_COLUMNS:
        # past 160 columns the width goes to NAME up to WIDE_NAME, then to the memory bar up to
        # WIDE_BAR_GROW more cells; what is left widens NAME only for a longer name (_fit_names)
        # (issue 26: at 220 NAME took 45 cells for 15-cell names, the bar 6)
        extra = width - 143 - (1 if spill else 0)
        name_w = max(14, min(WIDE_NAME, extra))
        grow = min(WIDE_BAR_GROW, max(0, extra - name_w))
        return (
            Column("name", "NAME", name_w, _name(name_w)),
            Column("id", "ID", 12, lambda v, c: Text(safe(v.short_id, 12))),
            size,
            Column("memory", "MEMORY weights|KV|compute", 30 + grow, _memory(6 + grow, True)),
            Column("context", "CONTEXT", 10, _context(10)),
            Column("processor", "PROCESSOR", 15, _processor),
            Column("fa", "FLASH ATTN", 10, _known("flash_attention")),
            Column("kvtype", "KV TYPE", 7, _known("kv_type")),
            Column("tps", "TOK/S", 10, _tps),
            Column("until", "UNTIL", 9, _until(True)),
            spark,  # last: the columns before it keep their places
        )
    medium = width >= MEDIUM_MIN_COLUMNS
    bar_w = 12 if medium else 9 if width >= 78 else 4
    with_spark = width >= SPARK_MIN_COLUMNS
    name_w = max(
        8,
        min(
            40,
            width - 54 - bar_w - (11 if medium else 0) - (SPARK_CELLS + 2 if with_spark else 0) - (1 if spill else 0),
        ),
    )
    cols: tuple[Column, ...] = (
        Column("name", "NAME", name_w, _name(name_w)),
        size,
        Column("memory", "MEMORY w|KV|c", bar_w + 9, _memory(bar_w, False)),
        Column("context", "CONTEXT", 9, _context(9)),
        Column("processor", "PROCESSOR", 15, _processor),
    )
    if medium:
        cols += (Column("until", "UNTIL", 9, _until(True)),)
    if with_spark:
        cols += (spark,)
    return cols


SORT_COLUMN = {"size": "size", "name": "name", "cpu": "processor", "context": "context", "kv": "memory"}
"""The column each sort key (``model.state.SORT_KEYS``) orders by; ``server`` (the server's own
order) marks none."""


def sort_arrow(sort_key: str, reverse: bool = False, *, ascii_mode: bool = False) -> str:
    """The sort's direction mark, the same in the column header and the status line: ``▼``
    largest first (or Z to A), ``▲`` A to Z (or smallest first); ``v``/``A`` in ASCII mode;
    ``""`` for ``server`` (the server's own order, which has no direction)."""
    if sort_key not in SORT_COLUMN:
        return ""
    down = (sort_key != "name") != reverse
    return ("v" if down else "A") if ascii_mode else "▼" if down else "▲"


def sorted_label(col: Column, sort_key: str, reverse: bool = False, *, ascii_mode: bool = False) -> str:
    """``col``'s header with the sort mark when the table is sorted by it: ``▼`` largest first
    (sizes, CPU share, context, KV), ``▲`` A to Z (names); flipped when reversed. The KV sort
    marks KV inside the MEMORY header (``MEMORY w|KV▼|c``); a header with no room for the space
    takes the mark without it (``CONTEXT▼``). ``ascii_mode``: ``v`` and ``A`` (in ASCII ``▲`` is
    the alerts' warning ``!``, ``kvtop.core.glyphs``)."""
    if SORT_COLUMN.get(sort_key) != col.key:
        return col.label
    arrow = sort_arrow(sort_key, reverse, ascii_mode=ascii_mode)
    if sort_key == "kv" and "|KV|" in col.label:
        return col.label.replace("|KV|", f"|KV{arrow}|", 1)
    if cell_len(col.label) + 2 > col.width:  # CONTEXT▼ in 8 cells, VRAM+RAM▼ in 9: the header cuts what overflows
        return f"{col.label}{arrow}"
    return f"{col.label} {arrow}"


class ModelsTable(DataTable[Text | str]):
    """Shows ``ModelView`` rows; keeps the cursor on the same model across refreshes."""

    DEFAULT_CSS = """
    ModelsTable { height: 1fr; }
    """
    BINDINGS = [  # like top/htop: Home and End go to the first and last model
        Binding("home", "scroll_top", "First", show=False),
        Binding("end", "scroll_bottom", "Last", show=False),
    ]

    def __init__(self, **kwargs: object) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kwargs)  # type: ignore[arg-type]
        self._signature: tuple[tuple[str, int], ...] = ()
        """Each column's key and width, as added (a new header alone does not add them again)."""
        self._labels: tuple[str, ...] = ()
        self._views: tuple[ModelView, ...] = ()
        self._shown: tuple[object, ...] | None = None
        self._row_keys: tuple[str, ...] = ()
        """Each row's key, in the order shown (``(digest, name)``, ``#2``… for a repeated one)."""
        self._row_cells: dict[str, tuple[Text | str, ...]] = {}
        """The cells last shown, per row key (``show`` updates only the ones that changed)."""
        self._cell_cache: dict[str, tuple[ModelView, str | None, tuple[Text | str, ...]]] = {}
        """Per row key: the view and sparkline its cells were rendered from, and the cells."""
        self._cell_context: tuple[object, ...] | None = None
        self._columns_key: tuple[object, ...] | None = None
        self._columns: tuple[Column, ...] = ()
        self.column_fits = 0
        """Times the columns were fitted to the rows (``columns_for``): only when the rows, the
        width, the sparklines or the sort changed, not per repaint (observer-cost tests count them)."""
        self.rows_rendered = 0
        """Rows whose cells were rendered: only rows whose view or sparkline changed, or all of
        them when the columns or the colours did (observer-cost tests count them)."""

    @property
    def selected_view(self) -> ModelView | None:
        """The model under the cursor, if any."""
        if not self._views or self.cursor_row < 0 or self.cursor_row >= len(self._views):
            return None
        return self._views[self.cursor_row]

    def select_model(self, name: str, digest: str) -> bool:
        """Move the cursor to the model ``(name, digest)``; False when it is not in the table."""
        for i, v in enumerate(self._views):
            if v.name == name and v.digest == digest:
                if self.cursor_row != i:
                    self.move_cursor(row=i)
                return True
        return False

    def show(
        self,
        views: tuple[ModelView, ...],
        width: int,
        sparks: Sparks | None = None,
        sort: tuple[str, bool] = ("server", False),
    ) -> None:
        """Replace the rows (and the columns when the width class or the sort changed); ``sparks``:
        each model's VRAM sparkline (``History.sparklines``), keyed by ``(name, digest)``; ``sort``:
        the sort key and whether it is reversed, marked in its column's header (``sorted_label``).

        Observer cost (at 1,000 models): a row's cells are rendered again only when its view or its
        sparkline changed (or the columns or colours did); only the cells whose content changed
        are updated; rows that moved are reordered in place (``DataTable.sort``), and rows that
        came or went are added or removed alone, so a poll or a key at 1,000 models costs what
        changed, not 12,000 cells."""
        columns_key = (views, width, sparks, sort)
        if columns_key != self._columns_key:  # fitting NAME renders every cell: only when its inputs changed
            self._columns_key = columns_key
            self._columns = tuple(
                Column(
                    c.key,
                    sorted_label(c, *sort, ascii_mode=ascii_on(getattr(self.app, "settings", None))),
                    c.width,
                    c.cell,
                )
                for c in columns_for(width, sparks, views)
            )
            self.column_fits += 1
        cols = self._columns
        signature = tuple((c.key, c.width) for c in cols)
        labels = tuple(c.label for c in cols)
        colors = dict(self.app.theme_variables)
        with_spark = any(c.key == "spark" for c in cols)
        context = (signature, tuple(sorted(colors.items())))
        shown = (views, context, labels, sparks if with_spark else None)
        if shown == self._shown:
            return  # nothing changed: keep the rendered rows (no repaint)
        self._shown = shown
        if signature == self._signature and labels != self._labels:
            self._relabel(cols)  # the sort mark moved: the headers change, not the columns
        if context != self._cell_context:
            self._cell_context = context
            self._cell_cache = {}
        selected = self.selected_view
        keys = _row_keys(views)
        rows = self._cells_for(keys, views, cols, colors, sparks if with_spark else None)
        live = set(keys)
        gone = sum(1 for k in self._row_keys if k not in live)
        rebuilt = not (signature == self._signature and self._row_keys and gone <= REMOVE_MAX_ROWS)
        if not rebuilt:
            rebuilt = not self._update_rows(keys, rows, cols)
        if rebuilt:
            if signature != self._signature:
                self.clear(columns=True)
                for col in cols:
                    self.add_column(col.label, width=col.width, key=col.key)
                self._signature, self._labels = signature, labels
            else:
                self.clear()
            for key, cells in zip(keys, rows):
                self.add_row(*cells, key=key)
            self._row_cells = dict(zip(keys, rows))
        moved = rebuilt or keys != self._row_keys
        self._row_keys = keys
        self._views = views
        if moved and selected is not None:
            for i, v in enumerate(views):
                if v.name == selected.name and v.digest == selected.digest:
                    if self.cursor_row != i:
                        self.move_cursor(row=i)
                    break

    def _relabel(self, cols: tuple[Column, ...]) -> None:
        """Give the columns these headers in place (the same keys and widths)."""
        for col in cols:
            self.columns[ColumnKey(col.key)].label = Text.from_markup(col.label)  # as add_column makes it
        self._labels = tuple(c.label for c in cols)
        self._update_count += 1  # the header's render cache is keyed by it (as DataTable.sort does)
        self.refresh()

    def _cells_for(
        self,
        keys: tuple[str, ...],
        views: tuple[ModelView, ...],
        cols: tuple[Column, ...],
        colors: dict[str, str],
        sparks: Sparks | None,
    ) -> list[tuple[Text | str, ...]]:
        """Each row's cells: from the cache when its view (the same object, or an equal one) and
        its sparkline are those it was rendered from, else rendered now."""
        cache = self._cell_cache
        rows: list[tuple[Text | str, ...]] = []
        for key, v in zip(keys, views):
            spark = sparks.get((v.name, v.digest)) if sparks is not None else None
            hit = cache.get(key)
            if hit is not None and hit[1] == spark and (hit[0] is v or hit[0] == v):
                rows.append(hit[2])
                continue
            cells = tuple(col.cell(v, colors) for col in cols)
            self.rows_rendered += 1
            cache[key] = (v, spark, cells)
            rows.append(cells)
        if len(cache) > len(keys):
            live = set(keys)
            for key in [k for k in cache if k not in live]:
                del cache[key]
        return rows

    def _update_rows(self, keys: tuple[str, ...], rows: list[tuple[Text | str, ...]], cols: tuple[Column, ...]) -> bool:
        """The same columns: remove the rows that went, add the new ones, update the cells that
        changed, and reorder in place when the order changed. False when the rows must be added
        again instead (two rows share a first cell object: the reorder cannot tell them apart)."""
        old = self._row_cells
        cache = self._cell_cache
        new: dict[str, tuple[Text | str, ...]] = {}
        live = set(keys)
        for key in [k for k in old if k not in live]:
            self.remove_row(key)
        for key, cells in zip(keys, rows):
            before = old.get(key)
            if before is None:
                self.add_row(*cells, key=key)
            elif before is not cells:
                # only the cells whose content changed are updated (a sparkline moving one cell
                # repaints that cell, not the table; benchmarks/cpu_idle.py); the cells kept are
                # the ones the table holds, remembered as this row's (the next poll compares nothing)
                stored = tuple(b if a != b else a for a, b in zip(before, cells))
                for col, a, b in zip(cols, before, stored):
                    if a is not b:
                        self.update_cell(key, col.key, b)
                view, spark, _ = cache[key]
                cache[key] = (view, spark, stored)
                cells = stored
            new[key] = cells
        self._row_cells = new
        order = tuple(k for k in self._row_keys if k in new) + tuple(k for k in keys if k not in old)
        if keys == order:
            return True
        position = {id(new[k][0]): i for i, k in enumerate(keys)}
        if len(position) != len(keys):
            return False
        # the rows in the order of ``keys`` without adding them again: DataTable.sort by each row's
        # first cell, the one object per row this table put there
        self.sort(key=lambda values: position[id(values[0])])
        return True


REMOVE_MAX_ROWS = 32
"""More rows than this gone at once: the table is filled again (each ``remove_row`` renumbers
every row after it)."""


def _row_keys(views: Sequence[ModelView]) -> tuple[str, ...]:
    """A stable key per row: ``digest:name``; a repeated one gets ``#2``, ``#3``… in order."""
    seen: dict[str, int] = {}
    out: list[str] = []
    for v in views:
        key = f"{v.digest}:{v.name}"
        n = seen.get(key, 0) + 1
        seen[key] = n
        out.append(key if n == 1 else f"{key}#{n}")
    return tuple(out)
