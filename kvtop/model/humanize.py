"""Ollama's own human formats, reproduced exactly so kvtop agrees with ``ollama ps``.

Pure functions; the clock is passed in. Sources: ``format/time.go:HumanTime``,
``format/bytes.go:HumanBytes`` (docs/ollama-internals.md §1.5).
"""

from __future__ import annotations

import math
from datetime import datetime

STOPPING = "Stopping..."
"""``ollama ps`` UNTIL for an ``expires_at`` in the past (``time.Since(m.ExpiresAt) > 0``)."""

FOREVER_AFTER_S = 20 * 365 * 24 * 3600
"""``HumanTime`` prints ``Forever`` for a time more than 20 years ahead (Go: ``Forever``)."""


def _plural(n: int, unit: str) -> str:
    return f"{n} {unit}" if n == 1 else f"{n} {unit}s"


def human_duration(seconds: float) -> str:
    """Go ``format.humanDuration``: seconds and minutes truncate, hours round."""
    if seconds < 1:
        return "Less than a second"
    if seconds < 2:
        return "1 second"
    if seconds < 60:
        return f"{int(seconds)} seconds"
    minutes = seconds / 60
    if int(minutes) == 1:
        return "About a minute"
    if minutes < 60:
        return f"{int(minutes)} minutes"
    hours = math.floor(seconds / 3600 + 0.5)
    if hours == 1:
        return "About an hour"
    if hours < 48:
        return f"{hours} hours"
    if hours < 24 * 14:
        return f"{hours // 24} days"
    if hours < 24 * 60:
        return f"{hours // (24 * 7)} weeks"
    if hours < 24 * 730:
        return f"{hours // (24 * 30)} months"
    return f"{hours // (24 * 365)} years"


def until_text(expires_at: datetime | None, now_s: float) -> str:
    """The UNTIL column of ``ollama ps`` (``cmd/cmd.go:ListRunningHandler``, docs/ollama-internals.md §1.5).

    A past ``expires_at`` reads ``Stopping...``, as ``ollama ps`` prints it. That is also what a
    model busy with a request longer than its keep-alive shows (§1.4): the model is not
    necessarily unloading, which is why views keep a separate ``expired`` flag.
    """
    if expires_at is None:
        return "unknown"
    if expires_at.year == 1:  # Go's zero time.Time: HumanTime prints "Never"
        return "Never"
    delta = expires_at.timestamp() - now_s
    if delta < 0:
        return STOPPING
    if delta > FOREVER_AFTER_S:
        return "Forever"
    return human_duration(delta) + " from now"


def human_bytes_decimal(n: int) -> str:
    """Go ``format.HumanBytes`` (1000-based, ``ollama ps`` SIZE): ``4.0 GB``, ``13 GB``, ``512 MB``."""
    units = [(1000**4, "TB"), (1000**3, "GB"), (1000**2, "MB"), (1000, "KB")]
    value, unit = float(n), "B"
    for size, name in units:
        if n >= size:
            value, unit = n / size, name
            break
    if value >= 10:
        return f"{int(value)} {unit}"
    if value != int(value):
        return f"{value:.1f} {unit}"
    return f"{int(value)} {unit}"


def go_round(x: float) -> float:
    """Go ``math.Round``: half away from zero, exact on the float (no ``x + 0.5`` rounding slip;
    Python's ``round`` rounds half to even)."""
    t = float(math.trunc(x))
    if abs(x - t) >= 0.5:
        t += math.copysign(1.0, x)
    return t
