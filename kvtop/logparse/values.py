"""Value grammars shared by the line grammars: sizes, blobs, slog ``key=value`` pairs, durations.

All pure string functions. Sizes follow the README of the corpus oracles: a printed value
times its binary unit, rounded half up to a whole byte, computed in integers so that
``"577.22 MiB"`` is exactly ``round(577.22 × 1048576)``.

Sizes and counts obey the rule of ``kvtop.core.bounds`` (the ``/api/ps`` reader's too): a whole
number ``0 <= n <= 2**63 - 1``. A size or count outside it reads as None (not known); a size list
with one such item reads as empty.
"""

from __future__ import annotations

import math
import re

from kvtop.core.bounds import INT64_MAX, INT64_MIN, count_from_text, duration_s_or_none

KIB = 1024
MIB = 1024 * 1024
GIB = 1024 * 1024 * 1024

UNIT_BYTES: dict[str, int] = {
    "B": 1,
    "KiB": KIB,
    "KB": KIB,
    "kB": KIB,
    "K": KIB,
    "MiB": MIB,
    "MB": MIB,
    "M": MIB,
    "GiB": GIB,
    "GB": GIB,
    "G": GIB,
    "TiB": GIB * 1024,
    "TB": GIB * 1024,
    "T": GIB * 1024,
    "PiB": GIB * 1024 * 1024,
}
"""Every unit is binary: Go ``format.HumanBytes2`` prints KiB/MiB/GiB, and llama.cpp's "MB"
is MiB (it divides by 1024 × 1024; corpus 037)."""

_BLOB_RE = re.compile(r"sha256[-:]([0-9a-fA-F]{64})(?![0-9a-fA-F])")
_SIZE_RE = re.compile(r"\s*(-?\d+(?:\.\d+)?)\s*([KMGTP]?i?B|[KMGT])\b")
_DURATION_PART_RE = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|μs|ms|s|m|h)")
# slog text handler: key=value, key="quoted value", "quoted key"=value (§4.0).
_PAIR_RE = re.compile(r'(?:^|(?<=\s))("[^"\\]*(?:\\.[^"\\]*)*"|[^\s="]+)=("[^"\\]*(?:\\.[^"\\]*)*"?|\S*)')
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\"}
_ESCAPE_RE = re.compile(r"\\(.)")
_QUOTED_RE = re.compile(r'"([^"\\]*(?:\\.[^"\\]*)*)"')
_UNIT_RE = re.compile(r"[KMGTP]?i?B|[KMGT]")
PLAIN_UNITS = {unit: n for unit, n in UNIT_BYTES.items() if _UNIT_RE.fullmatch(unit)}
"""The units :data:`_SIZE_RE` reads (``kB`` is not one of them), for the fast paths of the size readers."""


def scaled_bytes(number: str, unit: int) -> int | None:
    """``number`` (a decimal string such as ``"577.22"``) times ``unit``, rounded half up; None
    when that is not a size (negative, over ``2**63 - 1``, not finite).

    Computed in floating point, which is exact here: the printed values have at most a few
    decimals, so the true product's fraction is a multiple of 1/5 or 1/25 of a byte and can
    never sit at the .5 boundary where a float error could flip the rounding.
    """
    return bytes_or_none(float(number) * unit)


_TWO_63 = float(2**63)


def bytes_or_none(value: float) -> int | None:
    """A byte count computed in floating point, rounded half up; None outside ``[0, 2**63 - 1]``
    (a negative size, an overflow, NaN)."""
    if not 0 <= value < _TWO_63:  # a float below 2**63 is at most 2**63 - 1024; False for NaN too
        return None
    return int(value + 0.5)


def mib_bytes(number: str) -> int | None:
    """``"577.22"`` MiB as bytes (llama.cpp prints two decimals); None when not a size."""
    return scaled_bytes(number, MIB)


def size_bytes(text: str | None) -> int | None:
    """A printed size (``"1.5 GiB"``, ``"0 B"``, ``"667.5 MiB"``) in bytes; None if unreadable or cut."""
    if not text:
        return None
    sp = text.find(" ")
    if sp > 0:  # fast path: exactly "<number> <unit>", which the regex below reads the same way
        unit = PLAIN_UNITS.get(text[sp + 1 :])
        if unit is not None:
            number = text[:sp]
            digits = number[1:] if number[:1] == "-" else number
            head, dot, tail = digits.partition(".")
            if head.isdecimal() and (not dot or tail.isdecimal()):
                return bytes_or_none(float(number) * unit)
    m = _SIZE_RE.match(text)
    if m is None:
        return None
    unit = UNIT_BYTES.get(m.group(2))
    if unit is None:
        return None
    return scaled_bytes(m.group(1), unit)


def size_list(text: str | None) -> tuple[int, ...]:
    """A Go slice of sizes, ``"[22.0 GiB 22.0 GiB]"``, as bytes (unreadable items are skipped);
    empty when an item is not a size (negative, over ``2**63 - 1``): the items are per device, and
    one left out would shift the others onto the wrong devices."""
    if not text:
        return ()
    text = text.strip("[]")
    parts = text.split(" ")
    if len(parts) % 2 == 0:  # fast path: "<number> <unit> <number> <unit>…", read as the regex below reads it
        out = []
        get = PLAIN_UNITS.get
        for i in range(0, len(parts), 2):
            unit = get(parts[i + 1])
            number = parts[i]
            digits = number[1:] if number[:1] == "-" else number
            head, dot, tail = digits.partition(".")
            if unit is None or not head.isdecimal() or (dot and not tail.isdecimal()):
                break
            size = bytes_or_none(float(number) * unit)
            if size is None:
                return ()
            out.append(size)
        else:
            return tuple(out)
    out = []
    for m in _SIZE_RE.finditer(text):
        unit = UNIT_BYTES.get(m.group(2))
        if unit is not None:
            size = scaled_bytes(m.group(1), unit)
            if size is None:
                return ()
            out.append(size)
    return tuple(out)


def blob_of(text: str | None) -> str | None:
    """The ``sha256-<64 hex>`` blob named in a path (``sha256:`` paths are normalised), else None."""
    if not text or "sha256" not in text:
        return None
    m = _BLOB_RE.search(text)
    return f"sha256-{m.group(1).lower()}" if m else None


def go_duration_s(text: str) -> float | None:
    """A Go ``time.Duration`` string (``1h24m39s``, ``444.455595ms``, ``31.775µs``) in seconds.

    None when it is not one, or longer than any Go duration (``bounds.GO_DURATION_MAX_S``,
    about 292 years: ``1666666666666666638704h38m`` is text no Go program printed)."""
    text = text.strip()
    if not text:
        return None
    one = _DURATION_PART_RE.fullmatch(text)
    if one is not None:  # fast path: one part (the loop below gives 0.0 + the same value)
        number, unit = one.groups()
        if unit == "ms":
            return duration_s_or_none(float(number) / 1e3)
        if unit == "s":
            return duration_s_or_none(float(number))
    total = 0.0
    pos = 0
    for m in _DURATION_PART_RE.finditer(text):
        if m.start() != pos:
            return None
        pos = m.end()
        value = float(m.group(1))
        unit = m.group(2)
        if unit == "h":
            total += value * 3600
        elif unit == "m":
            total += value * 60
        elif unit == "s":
            total += value
        elif unit == "ms":
            total += value / 1e3
        elif unit == "ns":
            total += value / 1e9
        else:
            total += value / 1e6
    if pos != len(text):
        return None
    return duration_s_or_none(total)


def unescape(text: str) -> str:
    """Go escapes resolved (``\\n``, ``\\t``, ``\\r``, ``\\"``, ``\\\\``; others keep their backslash)."""
    if "\\" not in text:
        return text
    return _ESCAPE_RE.sub(_unescape_one, text)


def _unescape_one(e: re.Match[str]) -> str:
    return _ESCAPES.get(e.group(1), "\\" + e.group(1))


def quoted_end(text: str, start: int) -> int:
    """The end (just past the closing quote) of the Go-quoted string that opens at ``text[start]`` (a ``"``).

    -1 when the string is not closed. The same as matching :data:`_QUOTED_RE` at ``start``,
    without that regex's slow failure on a long string cut by the end of the line.
    """
    q = text.find('"', start + 1)
    if q < 0:  # no closing quote at all
        return -1
    if text.find("\\", start + 1, q) < 0:  # no escape before the first quote: it closes the string
        return q + 1
    m = _QUOTED_RE.match(text, start)
    return m.end() if m is not None else -1


def quoted_value(text: str, start: int) -> tuple[str, bool]:
    """The Go-quoted string that opens at ``text[start]`` (a ``"``), unescaped, and whether it is closed.

    A string cut by the end of the text (no closing quote) runs to the end.
    """
    e = quoted_end(text, start)
    if e < 0:
        return unescape(text[start + 1 :]), False
    return unescape(text[start + 1 : e - 1]), True


def unquote(value: str) -> str:
    """A slog value without its quotes and Go escapes (``"C:\\\\Users"`` -> ``C:\\Users``); a cut quote is tolerated."""
    if value.startswith('"'):
        m = _QUOTED_RE.match(value)
        value = m.group(1) if m is not None else value[1:]
        if "\\" in value:
            value = _ESCAPE_RE.sub(_unescape_one, value)
    return value


def slog_pairs(text: str) -> dict[str, str]:
    """The ``key=value`` pairs of a slog text line, values unquoted (§4.0).

    Keys may be quoted (``"model layers"=49``); a value cut by the end of the line is kept
    as far as it goes.
    """
    out = dict(_PAIR_RE.findall(text))
    for key, value in out.items():
        if value[:1] == '"':
            out[key] = unquote(value)
    if '"' in text:
        for key in [k for k in out if k[:1] == '"']:
            out[unquote(key)] = out.pop(key)
    return out


def slog_get(text: str, key: str) -> str | None:
    """The unquoted value of one slog ``key=`` in ``text`` (None when absent); cheaper than :func:`slog_pairs` for a few keys."""
    k = key + "="
    i = text.find(k)
    while i > 0 and text[i - 1] != " ":
        i = text.find(k, i + 1)
    if i < 0:
        return None
    j = i + len(k)
    if text[j : j + 1] == '"':
        m = _QUOTED_RE.match(text, j)
        value = m.group(1) if m is not None else text[j + 1 :]
        if "\\" in value:
            value = _ESCAPE_RE.sub(_unescape_one, value)
        return value
    e = text.find(" ", j)
    return text[j:e] if e >= 0 else text[j:]


def to_int(text: str | None) -> int | None:
    """``int(text)`` or None (also for a value cut by the end of the line, and for one outside
    Go's ``int64``). For a value that may be negative (``layers.requested=-1``); a size or a
    count is read with :func:`to_count`."""
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return value if INT64_MIN <= value <= INT64_MAX else None


to_count = count_from_text
"""A size or count (tokens, cells, layers, slots, a PID or port): ``int(text)`` when
``0 <= n <= 2**63 - 1``, else None (``kvtop.core.bounds.count_from_text``)."""


def to_float(text: str | None) -> float | None:
    """``float(text)`` or None (also for NaN and infinity, which no log figure can be)."""
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None
