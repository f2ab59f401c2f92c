"""kvtop's glyphs and their ASCII stand-ins: the one table every face uses where the terminal
cannot show UTF-8 (``LANG=C``, a serial console, tmux attached from a C locale).

Without UTF-8 a terminal shows each non-ASCII character as ``_`` or ``?`` (tmux) or a lookalike:
the bars turned to ``____`` and the unknown part ``·`` to ``~``, which is kvtop's own "estimated"
mark. ASCII mode writes every character through :func:`to_ascii` instead: one ASCII string per
character, as many cells wide as the character (the dashboard's layout is computed in cells and
stays as it is), and never one of the source marks (``~ ^ = * ?``, ``kvtop.model.known``) unless the
character is that mark. Standard library only (a leaf: the faces import it, it imports nothing of
kvtop).

Detection (:func:`wants_ascii`): the POSIX locale variables in their order of precedence
(``LC_ALL``, then ``LC_CTYPE``, then ``LANG``; the first one set decides; none set is the C
locale), and the output stream's encoding when it is not a UTF one.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Mapping
from functools import lru_cache

SOURCE_MARKS = "~^=*?"
"""kvtop's source marks (``model.known``: estimated, requested, server env, Ollama default, not
known). No stand-in below is one of them, so a mark always means what the legend says."""

ASCII_GLYPHS: dict[str, str] = {
    # bars: model memory (weights, KV, compute, not known), the memory map and the GPU strip
    "█": "#",
    "▓": "%",
    "▤": ";",  # the memory map's KV SWA pool, told from the KV cache's ▓ (%)
    "▒": "+",
    "·": ".",
    "▇": "&",
    "▞": "/",
    "▚": "\\",
    "▄": "o",
    "░": "-",
    # sparklines ``▁`` to ``█`` (levels 1 to 8, ``▄`` and ``█`` as in the bars)
    "▁": "_",
    "▂": ",",
    "▃": "-",
    "▅": "O",
    "▆": "8",
    # other block elements (Textual's tall and outer borders, scrollbars, quadrants)
    "▀": '"',
    "▔": "-",
    "▉": "|",
    "▊": "|",
    "▋": "|",
    "▌": "|",
    "▍": "|",
    "▎": "|",
    "▏": "|",
    "▐": "|",
    "▕": "|",
    "▖": ".",
    "▗": ".",
    "▘": "'",
    "▝": "'",
    "▙": "#",
    "▛": "#",
    "▜": "#",
    "▟": "#",
    # arrows, pointers, sort order (``▲`` is the alerts' warning; the table's A-to-Z sort writes ``A``)
    "→": ">",
    "←": "<",
    "↑": "'",
    "↓": "v",
    "↔": "-",
    "⇣": "v",
    "▶": ">",
    "▸": ">",
    "▲": "!",
    "▼": "v",
    "⏎": "<",
    # signs and symbols
    "×": "x",
    "−": "-",
    "–": "-",
    "—": "-",
    "…": ".",
    "±": "+",
    "≤": "<",
    "≥": ">",
    "≠": "#",
    "÷": "/",
    "°": "o",
    "µ": "u",
    "μ": "u",
    "²": "2",
    "³": "3",
    "⁰": "0",
    "Σ": "E",
    "§": "S",
    "•": ".",
    "●": "o",
    "◆": "@",
    "▪": "%",
    "✖": "x",
    "✗": "x",
    "✓": "v",
    "✔": "v",
    "ℹ": "i",
    "⚠": "!",
    "‘": "'",
    "’": "'",
    "“": '"',
    "”": '"',
    "\u00a0": " ",
    # the history plots' load / unload / reload markers (``│ ┆ ║``), told apart without colour too
    # (by rule all three would be ``|``); the map's overhead ``▐`` is ``|`` above, its other Ollama ``▚`` ``\``
    "┆": ":",
    "║": "H",
    # the history plots' series markers without colours (``kvtop.ui.screens.history``): each its
    # own stand-in, none a source mark (the plots' ``*`` read as "Ollama default")
    "◇": "$",
    "□": "[",
    "■": "]",
    "○": "(",
}
"""Each glyph kvtop draws and the ASCII it becomes in ASCII mode (one cell each). Box-drawing lines
(U+2500–U+257F) and Braille cells (the plots, U+2800–U+28FF) are mapped by rule in
:func:`ascii_char`; anything else not ASCII becomes ``_`` per cell (``é`` -> ``e`` where Unicode
decomposes it)."""

ASCII_TWO_CELLS: dict[str, str] = {"🔎": ">>"}
"""Two-cell glyphs (emoji) drawn by Textual and their two-cell stand-ins: the command palette's
search icon drew ``__``."""

ASCII_WIDE: dict[str, str] = {"±": "+/-", "≤": "<=", "≥": ">=", "≠": "!=", "→": "->", "←": "<-", "—": "--"}
"""Stand-ins for plain-text output (``--once``, ``--check``, ``plan``; :func:`to_ascii` with
``keep_cells=False``), clearer than the one-cell ones; none of these characters sits in a column
those outputs align (names cut with ``…`` and ``×`` keep one cell)."""


def _east_asian_cells(ch: str) -> int:
    """Cells a character takes: 0 for a combining mark, 2 for a wide or full-width one, else 1."""
    if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def _box(ch: str) -> str:
    name = unicodedata.name(ch, "")
    if "HORIZONTAL" in name and "DASH" in name and "VERTICAL" not in name:
        return "`"  # a plot's limit line (the device's total), not its axis or a data line's ``-``
    if "HORIZONTAL" in name and "VERTICAL" not in name and "AND" not in name:
        return "-"
    if "VERTICAL" in name and "HORIZONTAL" not in name and "AND" not in name:
        return "|"
    if "DIAGONAL" in name:
        return "/" if "UPPER RIGHT TO LOWER LEFT" in name else "\\" if "UPPER LEFT" in name else "X"
    return "+"


def _braille(ch: str) -> str:
    """A Braille cell (a plot's 2×4 dots) as the ASCII of where its dots are: ``'`` top, ``.``
    bottom, ``:`` both or the middle, a space for none."""
    bits = ord(ch) - 0x2800
    top = bool(bits & 0x09)
    bottom = bool(bits & 0xC0)
    middle = bool(bits & 0x36)
    if not bits:
        return " "
    if middle or (top and bottom):
        return ":"
    return "'" if top else "."


@lru_cache(maxsize=4096)
def ascii_char(ch: str, cells: int = 1) -> str:
    """The ASCII stand-in of one character, ``cells`` cells wide (``_`` per cell when nothing better
    fits; ``""`` for a zero-width one). ASCII characters are returned as they are."""
    if ch.isascii():
        return ch
    if cells <= 0:
        return ""
    known = ASCII_GLYPHS.get(ch) or ASCII_TWO_CELLS.get(ch)
    if known is not None and len(known) == cells:
        return known
    code = ord(ch)
    if 0x2500 <= code <= 0x257F and cells == 1:
        return _box(ch)
    if 0x2800 <= code <= 0x28FF and cells == 1:
        return _braille(ch)
    base = unicodedata.normalize("NFKD", ch).encode("ascii", "ignore").decode("ascii")
    if len(base) == cells and base.isprintable() and not any(c in SOURCE_MARKS for c in base):
        return base
    return "_" * cells


def to_ascii(text: str, *, keep_cells: bool = True, cell_width: Callable[[str], int] = _east_asian_cells) -> str:
    """``text`` in ASCII: each character by :func:`ascii_char`. ``keep_cells`` (the dashboard)
    keeps each character's width in cells, measured by ``cell_width`` (the UI passes Rich's); else
    (plain-text output) the clearer :data:`ASCII_WIDE` forms are used where there are some
    (``...``, ``+/-``, ``<=``). Pure ASCII text is returned as it is."""
    if text.isascii():
        return text
    out: list[str] = []
    for ch in text:
        if ch.isascii():
            out.append(ch)
        elif not keep_cells and ch in ASCII_WIDE:
            out.append(ASCII_WIDE[ch])
        else:
            out.append(ascii_char(ch, cell_width(ch)))
    return "".join(out)


def is_utf8_locale(value: str) -> bool:
    """Whether a locale name (``en_US.UTF-8``, ``C.utf8``) names the UTF-8 character set."""
    charset = value.partition(".")[2].partition("@")[0].lower().replace("-", "").replace("_", "")
    return charset == "utf8"


COERCED_CTYPES = frozenset({"C.UTF-8", "C.utf8", "UTF-8"})
"""The ``LC_CTYPE`` values Python itself sets when it starts in the C locale (PEP 538 locale
coercion), so that ``LANG=C kvtop`` finds ``LC_CTYPE=C.UTF-8`` in its own environment."""


def started_in_c_locale(utf8_mode: int, environ: Mapping[str, str], xoptions: Mapping[str, object]) -> bool:
    """Whether Python started in the C (or POSIX) locale: its UTF-8 mode came on by itself
    (``sys.flags.utf8_mode`` without ``PYTHONUTF8`` or ``-X utf8``, PEP 540); pass
    ``sys.flags.utf8_mode``, ``os.environ`` and ``sys._xoptions``."""
    return bool(utf8_mode) and "PYTHONUTF8" not in environ and "utf8" not in xoptions


def wants_ascii(environ: Mapping[str, str], encoding: str | None = None, *, c_locale_start: bool = False) -> bool:
    """True when the output cannot be trusted with UTF-8: the locale that sets the character type
    (``LC_ALL``, else ``LC_CTYPE``, else ``LANG``; none set means ``C``) is not UTF-8, or
    ``encoding`` (the stream's, e.g. ``sys.stdout.encoding``) is given and is not a UTF one.

    ``c_locale_start`` (:func:`started_in_c_locale`): an ``LC_CTYPE`` of :data:`COERCED_CTYPES` is
    then Python's own coercion, not the user's, and is passed over (``LANG=C`` stays ASCII).
    Python writing UTF-8 under a C locale does not count: the terminal is what decodes."""
    if encoding and not encoding.lower().replace("-", "").replace("_", "").startswith("utf"):
        return True
    for key in ("LC_ALL", "LC_CTYPE", "LANG"):
        value = environ.get(key)
        if key == "LC_CTYPE" and c_locale_start and value in COERCED_CTYPES:
            continue
        if value:
            return not is_utf8_locale(value)
    return True


def output_wants_ascii(
    environ: Mapping[str, str], encoding: str | None, utf8_mode: int, xoptions: Mapping[str, object]
) -> bool:
    """:func:`wants_ascii` for this process: ``os.environ``, ``sys.stdout.encoding``,
    ``sys.flags.utf8_mode``, ``sys._xoptions`` (what ``--ascii``'s automatic choice reads)."""
    return wants_ascii(environ, encoding, c_locale_start=started_in_c_locale(utf8_mode, environ, xoptions))
