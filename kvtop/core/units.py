"""Units typed by a person: a byte count with its unit.

Shared by the planner (``kvtop plan --vram 24GiB``), the what-if screen and the ``[alerts]``
thresholds of the configuration file (``kvtop.model.alerts.types.Thresholds``). Standard library only.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["parse_bytes"]

_SIZE: Final = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?i?b?)\s*$", re.IGNORECASE)
_DECIMAL: Final[dict[str, int]] = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15}
_BINARY: Final[dict[str, int]] = {"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50}


def parse_bytes(text: str) -> int:
    """Parse a byte count: ``25769803776``, ``24GiB``, ``24GB``, ``1.5 TiB``.

    ``KB/MB/GB/TB`` are decimal (as ``ollama ps`` prints sizes, Ref §1.5), ``KiB/MiB/GiB/TiB``
    binary (as llama.cpp and nvidia-smi do). A bare ``K/M/G/T`` is refused as ambiguous.

    Args:
        text: The value as typed.

    Returns:
        Whole bytes (fractions round down).

    Raises:
        ValueError: Not a non-negative number with one of those suffixes.
    """
    m = _SIZE.match(text)
    if not m:
        raise ValueError(f"not a byte count: {text!r} (e.g. 25769803776, 24GiB, 24GB)")
    number, unit = m.group(1), m.group(2).lower()
    if unit in _DECIMAL:
        factor = _DECIMAL[unit]
    elif unit in _BINARY:
        factor = _BINARY[unit]
    elif unit[:1] in ("k", "m", "g", "t", "p"):
        letter = unit[0].upper()
        raise ValueError(f"ambiguous unit in {text!r}: write {letter}iB (binary) or {letter}B (decimal)")
    else:
        raise ValueError(f"not a byte count: {text!r} (e.g. 25769803776, 24GiB, 24GB)")
    if "." in number:
        whole, frac = number.split(".")
        scale = int("1" + "0" * len(frac))
        return int(whole) * factor + int(frac) * factor // scale
    return int(number) * factor
