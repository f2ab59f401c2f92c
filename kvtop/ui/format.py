"""Render-time formatting: byte units, safe text, the stacked memory bar, source marks.

The model keeps bytes. The units and marks are defined once in ``kvtop.model.known`` (``ibytes``,
``exact_bytes``, ``size_text``, ``SOURCE_MARK``) and re-exported here for the screens, ``--once``,
``plan`` and ``inspect-log``. Text that came from the server or a log is passed through ``safe``
so it can never carry terminal escapes, and is always wrapped in ``rich.text.Text`` (never parsed
as Rich markup).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from typing import Any

from rich.text import Text

from kvtop.model.known import (  # re-exported: the one vocabulary of units and marks
    NOT_KNOWN,
    NOT_KNOWN_WORDS,
    SOURCE_LEGEND_WORDS,
    Known,
    context_pair,
    exact_bytes,
    ibytes,
    marked,
    setting_text,
    si_on,
    size_text,
    source_mark,
)
from kvtop.model.views import ModelView
from kvtop.textsafe import safe  # re-exported: the one sanitizer, also used outside the UI
from kvtop.redact import scrub_text

__all__ = [
    "NOT_KNOWN",
    "context_text",
    "ctx_number",
    "exact_bytes",
    "ibytes",
    "known_text",
    "legend",
    "mark",
    "marked",
    "memory_bar",
    "memory_figures",
    "safe",
    "safe_name",
    "setting_text",
    "short_until",
    "size_text",
]


def safe_name(name: str, limit: int) -> str:
    """A model name cut in the middle so its tag stays visible: ``hf.co/unsl…:Q4_K_M``. A secret a
    server echoes in it (``user:pass@``, ``?token=``: ``kvtop.redact.scrub_text``) is masked first."""
    text = safe(scrub_text(name))
    if len(text) <= limit:
        return text
    if limit < 4:
        return text[:limit]
    colon = text.rfind(":")
    tail_len = len(text) - colon if colon > 0 else 0
    tail_len = min(tail_len, (limit - 1) // 2) if tail_len else (limit - 1) // 3
    head_len = limit - 1 - tail_len
    return text[:head_len] + "…" + (text[-tail_len:] if tail_len else "")


def mark(k: Known[Any]) -> str:
    """The prefix for a value's source (``~`` estimated, ``*`` default, ``^`` requested, ``=``
    server env; ``model.known.source_mark``)."""
    return source_mark(k.source)


def known_text(k: Known[Any], fmt: str = "{}") -> str:
    """A setting with its source mark after it (``f16*``, ``q8_0=``), or ``?`` when unknown
    (``model.known.setting_text``)."""
    return setting_text(k, fmt)


def ctx_number(n: int) -> str:
    """A context length for a narrow column: exact digits up to 99999, then ``K`` (×1024) when
    exact (``131072`` -> ``128K``), else the digits."""
    if n >= 100_000 and n % 1024 == 0:
        return f"{n // 1024}K"
    return str(n)


def context_text(view: ModelView) -> str:
    """CONTEXT column: ``4096×1`` (per slot × slots) or just ``4096`` when slots are unknown;
    ``128K×1`` from 100000 on (K = 1024, only when exact); each number carries its own mark after
    it (``4096*×1*``, ``32768×1*``: ``model.known.context_pair``)."""
    return context_pair(view.context, view.parallel, number=ctx_number)


def legend(views: Sequence[ModelView], *, short: bool = False) -> str:
    """The source marks the rows use, explained (``~ estimated  * Ollama default  ? not known`` at
    least); ``short`` fits 80 columns (``~ estimated ^ requested * default ? not known``)."""
    used = {"estimated", "default"}
    for v in views:
        for k in (v.context, v.parallel, v.kv_type, v.flash_attention, v.memory.kv, v.memory.weights):
            if k.source:
                used.add(k.source)
    words = dict(SOURCE_LEGEND_WORDS)
    if short:
        words["default"] = "* default"
    marks = [words[s] for s in ("estimated", "requested", "service", "default") if s in used]
    units = ["G = GB (--si)"] if si_on() else []  # binary, the default, is said in help and --help
    return ("  " if not short else " ").join([*marks, NOT_KNOWN_WORDS, *units])


def _cells(values: list[int], total: int, width: int) -> list[int]:
    """Split ``width`` cells in proportion to ``values`` (largest remainder); any non-zero value gets ≥ 1."""
    if total <= 0:
        return [0] * len(values)
    exact = [v / total * width for v in values]
    cells = [int(x) for x in exact]
    order = sorted(range(len(values)), key=lambda i: exact[i] - cells[i], reverse=True)
    for i in order[: max(0, width - sum(cells))]:
        cells[i] += 1
    # each non-zero value left with no cell takes one from the widest (the first of the widest),
    # found through a heap of (-cells, index): O(n log n), where a search per value was O(n²)
    # (a 1,000-model memory map has thousands of segments in a hundred cells)
    heap: list[tuple[int, int]] | None = None
    for i, v in enumerate(values):
        if v > 0 and cells[i] == 0:
            if heap is None:
                heap = [(-c, j) for j, c in enumerate(cells)]
                heapq.heapify(heap)
            while -heap[0][0] != cells[heap[0][1]]:
                heapq.heappop(heap)  # stale: that value's cells changed since it was pushed
            donor = heap[0][1]
            if cells[donor] > 1:
                cells[donor] -= 1
                heapq.heapreplace(heap, (-cells[donor], donor))
                cells[i] = 1
                heapq.heappush(heap, (-1, i))
    return cells


def memory_bar(view: ModelView, width: int, colors: Mapping[str, str]) -> Text:
    """A stacked bar of ``width`` cells: weights ``█`` | KV ``▓`` | compute ``▒``, not known ``·``.

    Segments are proportional to ``size``; a part that is not known is drawn as ``·`` in its
    place (never guessed), and every non-zero known part gets at least one cell. The glyphs
    differ so the bar reads without colour.
    """
    size = view.size_bytes
    unknown_style = colors.get("kv-unknown", "")
    if not size or size <= 0 or width <= 0:
        return Text("·" * max(0, width), style=unknown_style)
    m = view.memory
    parts = [(m.weights.value, "█", "kv-weights"), (m.kv.value, "▓", "kv-kv"), (m.compute.value, "▒", "kv-compute")]
    known = sum(v for v, _, _ in parts if v is not None)
    unknown = max(0, size - known)
    segments: list[tuple[int, str, str]] = []
    placed_unknown = False
    for value, glyph, var in parts:
        if value is None:
            if not placed_unknown:
                segments.append((unknown, "·", unknown_style))
                placed_unknown = True
        else:
            segments.append((value, glyph, colors.get(var, "")))
    if not placed_unknown and unknown:
        segments.append((unknown, "·", unknown_style))
    cells = _cells([v for v, _, _ in segments], max(size, known), width)
    bar = Text()
    for (_, glyph, style), n in zip(segments, cells):
        if n:
            bar.append(glyph * n, style=style)
    return bar


def memory_figures(view: ModelView) -> str:
    """``W 1.7G KV ~448M C ~90M`` with source marks (``?`` when not known)."""
    m = view.memory
    return f"W {size_text(m.weights, short=True)} KV {size_text(m.kv, short=True)} C {size_text(m.compute, short=True)}"


def short_until(view: ModelView) -> str:
    """Compact UNTIL for narrow tables: ``4 min``, ``2 h``, ``Forever``, ``Stopping`` (``ollama ps``'s
    ``Stopping...`` without its dots, so it fits the 9-cell column)."""
    text = view.until
    if text == "Stopping...":
        return "Stopping"
    for long, short in (
        (" from now", ""),
        (" minutes", " min"),
        (" seconds", " s"),
        (" hours", " h"),
        (" days", " d"),
        (" weeks", " wk"),
        (" months", " mo"),
        (" years", " y"),
        ("About a minute", "1 min"),
        ("About an hour", "1 h"),
        ("Less than a second", "<1 s"),
    ):
        text = text.replace(long, short)
    return text
