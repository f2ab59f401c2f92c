"""Hard wraps: whether a logical line may continue on the next physical line, and how.

A pasted log is often hard-wrapped, by a terminal or a forum at a fixed width or by a post between
attributes. :func:`wrap_kind` says how a record may continue (see its kinds); :func:`cut_short` says
where a record was cut mid-token, at a point where no record can end (docs/ollama-internals.md §8).
The stateful part (holding a record, gluing its pieces, learning a log's wrap width, reading a quiet
record again with its orphan piece) is :class:`kvtop.logparse.parser.LogParser`'s.
"""

from __future__ import annotations

import re

WRAP_WIDTH = 500
"""A slog record at least this long on one physical line is held for a possible continuation."""

MIN_LEARNED_WIDTH = 60
"""A fixed wrap width is learned from a physical line at least this long (see ``LogParser._width``)."""

NEW_RECORD_RE = re.compile(
    r"time=|level=|\d{4}[/-]\d\d[/-]\d\d|\[GIN|(?:INFO|WARN|WARNING|ERROR|DEBUG|VERB) \[|\{\"|[a-z_][a-z0-9_.]*: "
    r"|(?:srv|slot|que|res|cmn|log|main)\s|panic:|goroutine |CUDA error|GGML_|\[New |\s*(?:prompt eval|eval|total"
    r"|generation eval) time|\d+\.\d+\.\d+\.\d+ [IWED] "
)
WIDE_RE = re.compile(r'msg=(?:offload |"offload to )|msg="starting [^"]*" cmd=|msg=load request=')
SPAWN_ENDS = ('msg="starting llama server"', 'msg="starting runner"', 'msg="starting llama-server"')
"""A spawn record that ends right after its message: a post wrapped it before ``cmd=…``, which follows on
the next (indented) lines; it is held like the other wide records."""
ATTR_START_RE = re.compile(r'\s*(?:"[^"]*"|[\w.]+)=')
ENV_CONTINUATION_RE = re.compile(r"[A-Z][A-Z0-9_]*:|[a-z]+_proxy:")


def wrap_kind(record: str, last_piece: str, width: int = 0) -> str | None:
    """How a slog/Go-logger record may continue on the next physical line, or None if it is complete.

    - ``"quote"``: a quoted value is still open (corpus 021, 022, 033): any line that does not
      start a record continues it, glued without a separator;
    - ``"width"``: the physical piece is at least :data:`WRAP_WIDTH` long (pasted logs are
      often wrapped at a fixed width, e.g. 1000), or exactly ``width`` long (the wrap width learned
      from this log, 0 for none): the same, glued without a separator;
    - ``"value"``: the record ends in ``=``: the next line that does not start a record is the value,
      glued without its indentation;
    - ``"attrs"``: the record ends in a space, or it is one of the wide records a
      terminal or a post wraps between attributes (``offload`` estimates, spawn lines, load
      requests; Ollama issues #8430, #9181): only an (indented) ``key=value…`` line continues it,
      glued with one space;
    - ``"cut"``: the record was cut mid-token, where it cannot end (:func:`cut_short`): any line
      that does not start a record continues it, glued as it is.
    """
    if '"' in record and open_quote(record):
        return "quote"
    if len(last_piece) >= WRAP_WIDTH or len(last_piece) == width:
        return "width"
    end = record[-1:]
    if end == " ":
        return "attrs"
    if end == "=":
        return "value"
    if cut_short(record):
        return "cut"
    if "offload" in record or "cmd=" in record or "request=" in record:
        return "attrs" if WIDE_RE.search(record) else None
    if end == '"' and record.endswith(SPAWN_ENDS):
        return "attrs"
    return None


_CONFIG_START = 'server config env="'
_CUT_HASH_RE = re.compile(r"sha256(?:[-:][0-9a-f]{0,63})?$")
"""A line that ends inside a model blob's name (``sha256-`` and fewer than its 64 hex digits): cut by a wrap."""


def cut_hash(text: str) -> bool:
    """Whether ``text`` ends inside a ``sha256-<64 hex>`` blob name (:data:`_CUT_HASH_RE`)."""
    tail = text[-71:]
    return "sha256" in tail and _CUT_HASH_RE.search(tail) is not None


def cut_short(record: str) -> bool:
    """Whether ``record`` (a logical line, wrappers included) stops where no record can end.

    A slog text record is ``key=value`` pairs, a value with a space quoted, and Ollama's always has a
    ``msg=`` (after ``time=``, ``level=``, ``source=``): one without ``msg=`` was cut before it; its last
    word has an ``=`` or ends in a closing quote, so a last word without either is a key cut by a wrap
    (``… layers.requested=-1 layers.mo`` | ``del=33 …``). A llama.cpp ``function: text`` line closes its
    parentheses and never ends in ``,`` or ``=`` (``size = 16384.00 MiB (262144 cells, 16 la`` | ``yers, …)``).
    """
    if cut_hash(record):
        return True
    if "level=" in record:
        if " msg=" not in record:
            return True  # Ollama's records always carry time=, level=, source= and msg=, in that order
        if record[-1:] == '"':
            return False
        return "=" not in record[record.rfind(" ") + 1 :]
    info = record.find(": INFO ")
    if info > 0 and len(record) - info < 26 and _CONFIG_START.startswith(record[info + 7 :]):
        return True  # the Go logger's "routes.go:N: INFO server config env=…" cut before its map
    idx = record.find(": ", 0, 120)
    return idx > 0 and llama_cut(record[idx + 2 :])


def llama_cut(rest: str) -> bool:
    """Whether the text of a llama.cpp line (after ``function: ``) was cut: an open ``(``, a last ``,`` or ``=``, or
    a size line that stops in a number or before its unit (``KV self size = 7168.00 MiB, …, V (f16): 358`` |
    ``4.00 MiB``: llama.cpp prints every size with its unit, ``MiB``)."""
    end = rest[-1:]
    if end == "," or end == "=":
        return True
    if "(" in rest and rest.count("(") > rest.count(")"):
        return True
    if end.isdigit() or end == "." or rest.endswith((" M", " Mi")):
        return "size" in rest or " MiB" in rest
    return False


def open_quote(text: str) -> bool:
    """Whether ``text`` ends inside a double-quoted value (an odd number of unescaped quotes)."""
    if text.count('"') % 2 == 0 and "\\" not in text:
        return False
    return (text.count('"') - text.count('\\"')) % 2 == 1
