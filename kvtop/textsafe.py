"""Text that came from a server, a log, a file or the environment, made safe to print.

Such text is data: it must never reach a terminal as an escape sequence (an OSC 52 clipboard
write, a CSI clear-screen, a bidi override that reorders what the reader sees). Every line
kvtop prints outside the Textual UI — ``--once``, ``--check``, ``--print-config``,
``inspect-log``, ``plan`` and every ``kvtop: …`` message on stderr — goes through
:func:`safe_block` (or :func:`emit`, which calls it) just before it is written, so a field
that a renderer forgot to pass through :func:`safe` is still caught at the boundary.

Secrets are masked at the same boundary (``kvtop.redact``). Pure string functions; no Textual or
Rich import (``kvtop.ui.format`` re-exports :func:`safe`).
"""

from __future__ import annotations

import functools
import json
import re
import sys
import unicodedata
from typing import Any, TextIO

from kvtop.redact import json_text_ok, on_register, scrub_json_text, scrub_text

REPLACEMENT = "\ufffd"
"""What a control or format character becomes (U+FFFD, ``�``)."""

_UNSAFE = ("Cc", "Cf", "Cs", "Co")
"""Unicode categories replaced: controls (C0, DEL, C1), format (bidi overrides, zero-width),
surrogates and private use."""


def safe(text: str, limit: int | None = None) -> str:
    """One field of text, safe for a terminal: every control and format character (ESC, BEL,
    newline and tab included, bidi overrides…) becomes ``�``; cut to ``limit`` characters
    (the last one then ``…``).

    Args:
        text: Untrusted text (a model name, a server error, a log excerpt).
        limit: The most characters returned, or None for no limit.

    Returns:
        ``text`` unchanged when it is printable ASCII (the fast path), else the replaced text.
    """
    if text.isascii() and text.isprintable():
        out = text  # fast path: printable ASCII has no Cc/Cf/Cs/Co character (most text, every poll)
    else:
        out = "".join(REPLACEMENT if unicodedata.category(ch) in _UNSAFE and ch != " " else ch for ch in text)
    if limit is not None and len(out) > limit:
        out = out[: max(0, limit - 1)] + "…"
    return out


_BLOCK_SUSPECT = re.compile(r"[^\x20-\x7e\n\t]")
"""Characters :func:`safe_block` has to look at (everything but printable ASCII, newline, tab)."""
_JSON_SUSPECT = re.compile(r"[^\x00-\x7e]")
"""Characters ``json.dumps`` leaves raw: DEL and everything beyond ASCII (it escapes C0 itself)."""


def _block_char(m: re.Match[str]) -> str:
    ch = m.group()
    return REPLACEMENT if unicodedata.category(ch) in _UNSAFE else ch


def _json_char(m: re.Match[str]) -> str:
    ch = m.group()
    return REPLACEMENT if unicodedata.category(ch) in _UNSAFE else ch


_JSON_CONTROL_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)\\(?:[nrtbf]|u00[01][0-9a-fA-F]|u007[fF])")
"""A control character as ``json.dumps`` escapes it (``\\n``, ``\\u001b``), not an escaped
backslash followed by a letter (``\\\\n``): an even run of backslashes may precede it."""


def safe_block(text: str) -> str:
    """A whole report (several lines), safe for a terminal: like :func:`safe`, except that
    newline and tab are kept (they lay the report out). A carriage return is replaced too: it
    would let one line overwrite another on screen. Secrets are masked first
    (``kvtop.redact.scrub_text``: the process's own, URL userinfo, ``?token=`` …).

    Args:
        text: The text about to be written to stdout or stderr.

    Returns:
        ``text`` with every other control and format character replaced by ``�``.
    """
    return _BLOCK_SUSPECT.sub(_block_char, scrub_text(text))


def clean_json(obj: Any) -> Any:
    """``obj`` with every string in it — values and object keys, at any depth — made safe to
    print: secrets masked (``kvtop.redact.scrub_text``) and every control and format character
    replaced by ``�`` (:func:`safe`, newline and tab included). So a JSON consumer that turns
    escapes back into characters (``jq -r``) can never write an ESC, a C1 control or a bidi
    override to a terminal. Numbers, booleans and None are kept; tuples become lists.

    Raises:
        RecursionError: Only for an object nested deeper than Python's recursion limit (kvtop's
            own documents are a few levels deep).
    """
    if isinstance(obj, str):
        return _clean_str(obj)
    if isinstance(obj, dict):
        return {(_clean_str(k) if isinstance(k, str) else k): clean_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean_json(v) for v in obj]
    return obj


@functools.lru_cache(maxsize=16384)
def _clean_str(text: str) -> str:
    """One JSON string made safe; cached: a sample's names, sources and notes repeat every poll
    (``--stream``, 1,000 models: ``benchmarks/json_output_cost.py``)."""
    return safe(scrub_text(text))


on_register(_clean_str.cache_clear)  # a secret registered later must not find a cached copy


def safe_json(obj: Any, *, indent: int | None = 2) -> str:
    """``json.dumps(clean_json(obj), indent=indent, ensure_ascii=False)``, computed on the text:
    every string and key of the document as :func:`clean_json` makes it (no control or format
    character survives, even escaped: it becomes ``�``; secrets masked), so neither a terminal nor
    ``jq -r`` can act on one. Other non-ASCII text (names, ``×``, ``—``) stays readable.

    Raises:
        TypeError / ValueError: As ``json.dumps`` does (an object it cannot encode, a cycle).
    """
    # one pass over the text instead of a call per string (3.2x json.dumps's time at 1,000 models,
    # 1.4x this way: benchmarks/json_output_cost.py); the same result as dumping clean_json(obj)
    if not json_text_ok():  # a known secret like "2048" or "true": only strings may be touched
        return json.dumps(clean_json(obj), indent=indent, ensure_ascii=False)
    text = scrub_json_text(json.dumps(obj, indent=indent, ensure_ascii=False))
    if "\\" in text:
        text = _JSON_CONTROL_ESCAPE.sub(lambda m: m.group(1) + REPLACEMENT, text)
    if not text.isascii():
        text = _JSON_SUSPECT.sub(_json_char, text)
    elif "\x7f" in text:
        text = text.replace("\x7f", REPLACEMENT)
    return text


def emit(message: str, file: TextIO | None = None) -> None:
    """Print one message (a ``kvtop: …`` line) made safe with :func:`safe_block`; default stderr."""
    print(safe_block(message), file=sys.stderr if file is None else file)
