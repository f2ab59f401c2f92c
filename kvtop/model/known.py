"""A value together with where it came from, and the one way kvtop writes it.

Every number kvtop shows has a source (product.md "Data sources"; the ladder in ``model.ladder``):
``allocated`` (the runner's log), ``runner`` (the runner's own ``/props`` / ``/slots``),
``reported`` (the Ollama API or NVML), ``requested`` (the runner's command line or the
Modelfile), ``service`` (the ``ollama serve`` environment), ``estimated`` (a formula: kvtop's KV
arithmetic, the compute model, a difference of two figures) or ``default`` (Ollama's documented
default, used because nothing readable says otherwise). ``value is None`` means not known.

The vocabulary is defined here once and used by every screen, ``--once``, ``--check``, ``plan``,
``inspect-log`` and the README:

* marks (:data:`SOURCE_MARK`, :data:`NOT_KNOWN`, :data:`CLAMPED_MARK`): a size carries its mark
  before it (``~3.5 GiB`` is estimated), a setting after it (``4096*`` an Ollama default, ``f16*``,
  ``q8_0=``), ``?`` alone is not known; a figure the runner or the API states has no mark. Every
  face writes a value and its mark through :func:`marked` (or :func:`size_text`,
  :func:`setting_text`, :func:`context_pair`, which call it), never by hand;
* sizes in binary units (:func:`ibytes`): ``3.5 GiB``, ``448 MiB``, ``85.2 MiB`` (one decimal below
  100, none from 100); dense tables drop the space and ``iB`` (``3.5G``, ``448M``: the same binary
  units); an exact figure adds its bytes (:func:`exact_bytes`: ``3.5 GiB (3,758,096,384 B)``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

T = TypeVar("T")
Source = Literal["allocated", "runner", "reported", "estimated", "requested", "service", "default"]

SOURCE_MARK: dict[str, str] = {
    "allocated": "",
    "runner": "",
    "reported": "",
    "estimated": "~",
    "requested": "^",
    "service": "=",
    "default": "*",
}
"""Marks used in dense tables: ``~`` estimated, ``^`` requested (the runner's command line),
``=`` service (the server's environment), ``*`` Ollama default (``?`` alone means not known).
The runner's own word (log, endpoints) and the API's need no mark."""

SOURCE_LEGEND_WORDS: dict[str, str] = {
    "estimated": "~ estimated",
    "requested": "^ requested",
    "service": "= server env",
    "default": "* Ollama default",
}
"""How each marked source is explained, the same on every screen and output."""

NOT_KNOWN = "?"
"""Written in place of a figure that is not known (never a guess)."""

NOT_KNOWN_WORDS = "? not known"

SOURCE_LEGEND = "  ".join(SOURCE_LEGEND_WORDS.values()) + "  " + NOT_KNOWN_WORDS
"""The whole legend (``--once`` text); the dashboard lists the marks its rows use (``ui.format.legend``)."""

UNITS_NOTE = "sizes binary: G/GiB = 2^30 B (ollama ps: GB = 10^9 B)"
"""The unit, said where sizes are printed as text (``--once``'s legend line, ``kvtop --help``):
``ollama ps`` prints ``6.1 GB`` for the 5.7 GiB kvtop shows."""

UNITS_NOTE_SI = "sizes decimal (--si): G/GB = 10^9 B, as ollama ps"
""":data:`UNITS_NOTE` under ``--si``."""

SOURCE_WORDS: dict[str, str] = {
    "allocated": "allocated",
    "runner": "runner",
    "reported": "reported",
    "estimated": "estimated",
    "requested": "requested",
    "service": "server env",
    "default": "Ollama default",
}
"""Every source in words (the detail view's ``[estimated]``, ``[reported]`` ...)."""

CLAMPED_MARK = "↓"
"""``kvtop plan``: a num_ctx lowered to the model's training context, as Ollama does (written
after the number: ``40960↓``). Not ``*``, which means an Ollama default everywhere."""

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
_SI_UNITS = ("B", "kB", "MB", "GB", "TB", "PB")

_SI: ContextVar[bool] = ContextVar("kvtop_si_units", default=False)
"""Whether sizes are written in decimal units (``kvtop --si``): a display choice made once per
run, before anything is rendered (:func:`use_si_units`); the sizes themselves stay bytes."""


def use_si_units(si: bool) -> None:
    """Write every size of this run (this context and the tasks started from it) in decimal
    units, as ``ollama ps`` does (``6.1 GB``), when ``si``; else binary (the default, ``5.7 GiB``).
    Called once by ``kvtop --si`` / ``kvtop plan --si`` before any output."""
    _SI.set(si)


@contextmanager
def si_units(si: bool = True) -> Iterator[None]:
    """:func:`use_si_units` for the length of a ``with`` block (tests, one rendering)."""
    token = _SI.set(si)
    try:
        yield
    finally:
        _SI.reset(token)


def si_on() -> bool:
    """Whether sizes are written in decimal units in this run (``--si``, :func:`use_si_units`)."""
    return _SI.get()


def units_note() -> str:
    """The unit, in words, for the legend lines (``--once``): :data:`UNITS_NOTE`, or its decimal
    twin under ``--si``."""
    return UNITS_NOTE_SI if _SI.get() else UNITS_NOTE


def ibytes(n: int | None, *, short: bool = False) -> str:
    """A size in binary units, the one way kvtop writes sizes: ``4.0 GiB``, ``448 MiB``,
    ``85.2 MiB``, ``512 B`` (one decimal below 100, none from 100); ``short`` for dense tables:
    ``4.0G``, ``448M``, ``12G`` (the same binary units, one decimal below 10 only). None ->
    ``?``; a negative size has a real minus sign (``−2.0 GiB``). Under ``--si``
    (:func:`use_si_units`) the units are decimal: ``4.3 GB``, ``470 MB``; ``short`` ``4.3G``."""
    if n is None:
        return NOT_KNOWN
    if abs(n) >= 2**63:  # no real size; never let a float overflow take the screen down
        return "huge"
    si = _SI.get()
    base, names = (1000, _SI_UNITS) if si else (1024, _UNITS)
    sign = "−" if n < 0 else ""
    value = float(abs(n))
    unit = 0
    while value >= base and unit < len(names) - 1:
        value /= base
        unit += 1
    if unit == 0:
        text = f"{int(value)}"
    elif value >= 100 or (short and value >= 10):
        text = f"{value:.0f}"
    else:
        text = f"{value:.1f}"
    name = names[unit]
    if short:
        return sign + text + (name[0].upper() if unit else "B")
    return f"{sign}{text} {name}"


def exact_bytes(n: int | None) -> str:
    """A size and its exact bytes: ``4.0 GiB (4,294,967,296 B)``; None -> ``not known``."""
    if n is None:
        return "not known"
    if abs(n) < 1024:  # the unit is bytes already: ``512 B``, not ``512 B (512 B)``
        return ibytes(n)
    return f"{ibytes(n)} ({n:,} B)"


def source_mark(source: str | None) -> str:
    """The mark written before a figure from ``source`` (``~`` estimated, ``*`` Ollama default,
    ``^`` requested, ``=`` server env; none for the runner's and the API's word)."""
    return SOURCE_MARK.get(source or "", "")


def marked(
    value: object, source: str | None, *, size: bool = False, short: bool = False, exact: bool = False, fmt: str = "{}"
) -> str:
    """The one rendering of a value and its source mark, for every face (no Rich, no Textual).

    ``size=True``: ``value`` is an ``int`` of bytes, written in binary units with the mark before
    it (``~3.5 GiB``; ``short``: ``~3.5G``; ``exact``: ``~3.5 GiB (3,758,096,384 B)``). Otherwise
    ``value`` is a setting, written with ``fmt`` (``bool`` as ``on``/``off``) and the mark after it
    (``4096*``, ``q8_0=``, ``on^``, ``32768``). ``None`` -> :data:`NOT_KNOWN` alone (``?``), never a
    mark with it. ``source`` is one of :data:`Source` or None (no mark)."""
    if value is None:
        return NOT_KNOWN
    sign = source_mark(source)
    if size:
        if not isinstance(value, int):
            raise TypeError(f"a size is an int of bytes, not {type(value).__name__}")
        return sign + (exact_bytes(value) if exact else ibytes(value, short=short))
    text = ("on" if value else "off") if isinstance(value, bool) else fmt.format(value)
    return text + sign


def size_text(k: Known[int], *, short: bool = False, exact: bool = False) -> str:
    """A size with its source mark before it: ``~3.5 GiB``, ``~3.5G`` (``short``), ``~3.5 GiB
    (3,758,096,384 B)`` (``exact``), ``2.0 GiB`` (reported); :data:`NOT_KNOWN` when unknown."""
    return marked(k.value, k.source, size=True, short=short, exact=exact)


def setting_text(k: Known[Any], fmt: str = "{}") -> str:
    """A setting with its source mark after it: ``4096*`` (Ollama default), ``q8_0=`` (server
    env), ``8192^`` (requested), ``on`` (the runner's word); :data:`NOT_KNOWN` when unknown."""
    return marked(k.value, k.source, fmt=fmt)


def context_pair(ctx: Known[int], parallel: Known[int], *, number: Callable[[int], str] = str, sep: str = "×") -> str:
    """A context per slot and the slot count, each with its own mark after it: ``4096*×1*``,
    ``32768×1*`` (num_ctx read, one slot by default), ``8192×4``; ``4096*`` when the slot count is
    not known, :data:`NOT_KNOWN` when the context is not. ``number`` writes the context
    (``ui.format.ctx_number``: ``128K``); ``sep`` sits between the two (``" × "`` in sentences)."""
    if ctx.value is None:
        return NOT_KNOWN
    text = marked(number(ctx.value), ctx.source)
    if parallel.value is None:
        return text
    return text + sep + setting_text(parallel)


@dataclass(frozen=True, slots=True)
class Known(Generic[T]):
    """A value, its source and a one-line note (how it was obtained, or why it is unknown)."""

    value: T | None = None
    source: Source | None = None
    note: str = ""

    @property
    def known(self) -> bool:
        """True when there is a value."""
        return self.value is not None


UNKNOWN: Known[object] = Known()
