"""How alert messages write numbers: the model keeps bytes and seconds; alert messages are the one
place in ``kvtop.model`` that writes them (binary units, as the dashboard)."""

from __future__ import annotations

from kvtop.model.known import ibytes


def ib(n: int | None) -> str:
    """``4.0 GiB``, ``448 MiB``, ``512 B``, ``−2.0 GiB``; ``?`` for None: ``model.known.ibytes``, the
    units of every screen."""
    return ibytes(n)


def delta(n: int) -> str:
    """``+1.2 GiB`` / ``−2.0 GiB`` (a real minus sign)."""
    return ("+" if n >= 0 else "−") + ib(abs(n))


def slots(n: int) -> str:
    """``1 slot`` / ``4 slots``."""
    return f"{n} slot" if n == 1 else f"{n} slots"


def plural(n: int, word: str) -> str:
    """``1 prompt`` / ``3 prompts`` (``word`` takes an ``s``)."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def minutes(seconds: float) -> str:
    """``15 min`` from 60 s on, else ``30 s``."""
    return f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g} s"


def span_text(seconds: float) -> str:
    """A measured span in whole seconds: ``58 s``, ``1 min 20 s``, ``12 min``, ``2.5 h`` (log
    timestamps carry milliseconds; ``58.012 s`` is more than the alert means)."""
    whole = max(1, round(seconds))
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        m, s = divmod(whole, 60)
        return f"{m} min {s} s" if s else f"{m} min"
    return f"{whole / 3600:.1f} h"


def short_blob(blob: str) -> str:
    """A weights blob name cut to ``sha256-`` and 12 hex digits plus ``…``."""
    return blob[:19] + "…" if len(blob) > 19 else blob
