"""Render-time formatting: byte units, safe text, the stacked memory bar, source marks.

Only the UI formats numbers; the model keeps bytes. Text that came from the server or a log is
passed through ``safe`` so it can never carry terminal escapes, and is always wrapped in
``rich.text.Text`` (never parsed as Rich markup).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping

from rich.text import Text

from kvtop.model.known import SOURCE_MARK, Known
from kvtop.model.state import ModelView

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def safe(text: str, limit: int | None = None) -> str:
    """Replace control and format characters (ESC, BEL, bidi overrides…) with ``�``; cut to ``limit``."""
    out = "".join(
        "�" if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co") and ch != " " else ch for ch in text
    )
    if limit is not None and len(out) > limit:
        out = out[: max(0, limit - 1)] + "…"
    return out


def ibytes(n: int | None, *, short: bool = False) -> str:
    """Bytes in binary units: ``4.0 GiB``, ``448 MiB`` (``short``: ``4.0G``, ``448M``); None -> ``?``."""
    if n is None:
        return "?"
    value = float(n)
    unit = 0
    while abs(value) >= 1024 and unit < len(_UNITS) - 1:
        value /= 1024
        unit += 1
    if unit == 0:
        text = f"{int(value)}"
    elif abs(value) >= 100 or (short and abs(value) >= 10):
        text = f"{value:.0f}"
    else:
        text = f"{value:.1f}"
    name = _UNITS[unit]
    if short:
        return text + (name[0] if unit else "B")
    return f"{text} {name}"


def exact_bytes(n: int | None) -> str:
    """``4,294,967,296 B (4.0 GiB)``; None -> ``not known``."""
    if n is None:
        return "not known"
    return f"{n:,} B ({ibytes(n)})"


def mark(k: Known[object]) -> str:
    """The dense-table prefix for a value's source (``~`` estimated, ``*`` default, ``?`` requested)."""
    return SOURCE_MARK.get(k.source or "", "")


def known_text(k: Known[object], fmt: str = "{}") -> str:
    """A value with its source mark, or ``?`` when unknown."""
    if k.value is None:
        return "?"
    return mark(k) + fmt.format(k.value)


def context_text(view: ModelView) -> str:
    """CONTEXT column: ``4096×1`` (per slot × slots) or just ``4096`` when slots are unknown."""
    ctx = view.context
    if ctx.value is None:
        return "?"
    text = mark(ctx) + str(ctx.value)
    if view.parallel.value is not None:
        text += f"×{view.parallel.value}"
        if view.parallel.source == "default" and not mark(ctx):
            text += "*"
    return text


def memory_bar(view: ModelView, width: int, colors: Mapping[str, str]) -> Text:
    """A stacked bar of ``width`` cells: weights ``█`` | KV ``▓`` | compute ``▒``, unknown ``·``.

    Segments are proportional to ``size``; the glyphs differ so the bar reads without colour.
    """
    bar = Text()
    size = view.size_bytes
    if not size or width <= 0:
        return Text("·" * max(0, width), style=colors.get("kv-unknown", ""))
    parts = [
        (view.memory.weights.value, "█", "kv-weights"),
        (view.memory.kv.value, "▓", "kv-kv"),
        (view.memory.compute.value, "▒", "kv-compute"),
    ]
    used = 0
    acc = 0
    for value, glyph, var in parts:
        if value is None:
            continue
        acc += value
        end = min(width, round(acc / size * width))
        if end > used:
            bar.append(glyph * (end - used), style=colors.get(var, ""))
            used = end
    if used < width:
        bar.append("·" * (width - used), style=colors.get("kv-unknown", ""))
    return bar


def memory_figures(view: ModelView) -> str:
    """``W 1.7G KV ~448M C ~90M`` with source marks."""
    m = view.memory
    return (
        f"W {mark(m.weights)}{ibytes(m.weights.value, short=True)} "
        f"KV {mark(m.kv)}{ibytes(m.kv.value, short=True)} "
        f"C {mark(m.compute)}{ibytes(m.compute.value, short=True)}"
    )


def short_until(view: ModelView) -> str:
    """Compact UNTIL for narrow tables: ``4 min``, ``2 h``, ``Forever``, ``expired``."""
    text = view.until
    for long, short in ((" from now", ""), (" minutes", " min"), (" seconds", " s"), (" hours", " h"),
                        ("About a minute", "1 min"), ("About an hour", "1 h"), ("Less than a second", "<1 s")):
        text = text.replace(long, short)
    return text
