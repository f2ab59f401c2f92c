"""The one rule for a size or a count read from outside (the API or the server log).

A size in bytes or a count (tokens, cells, layers, slots) is a whole number ``0 <= n <= 2**63 - 1``:
what Go's ``int64`` — the type Ollama and llama.cpp print these from — can hold without being
negative. Anything else (a negative number, one over ``2**63 - 1``, a bool, a fraction, NaN or
infinity) is not such a value, and the reader that met it reports "not known" (``None``) instead
of passing it on to reports, alerts and JSON.

A duration read from the log (a Go ``time.Duration``, an ``int64`` count of nanoseconds) is at
most ``GO_DURATION_MAX_S`` (about 292 years) and not negative: a longer one (a crafted
``1666666666666666638704h38m`` gin latency) cannot have been printed by Go and is "not known".

``kvtop.sources.ollama`` applies it to ``/api/ps`` (``_int_or_none``); ``kvtop.logparse.values``
(``to_count``, the size readers, ``go_duration_s``) to the log. Pure functions, no imports beyond the standard library.
"""

from __future__ import annotations

import math
from typing import Any, Final

INT64_MAX: Final = 2**63 - 1
"""The largest size or count accepted."""

INT64_MIN: Final = -(2**63)
"""The smallest signed number the log parser keeps where a negative value means something
(``layers.requested=-1``, ``--threads -1``); only sizes and counts must be non-negative."""


GO_DURATION_MAX_S: Final = INT64_MAX / 1e9
"""The longest Go ``time.Duration``, seconds (``2562047h47m16.854775807s``, about 292 years)."""


def duration_s_or_none(seconds: float | None) -> float | None:
    """``seconds`` when it is a duration Go could print (finite, ``0 <= s <= GO_DURATION_MAX_S``),
    else None."""
    if seconds is None or not math.isfinite(seconds) or not 0.0 <= seconds <= GO_DURATION_MAX_S:
        return None
    return seconds


def is_count(n: int) -> bool:
    """Whether the integer ``n`` is a valid size or count (``0 <= n <= INT64_MAX``)."""
    return 0 <= n <= INT64_MAX


def count_or_none(value: Any) -> int | None:
    """``value`` as a size or count, or None when it is not one.

    Accepts an ``int`` (not a ``bool``) or an integral finite ``float`` in ``[0, INT64_MAX]``;
    the same rule as ``kvtop.sources.ollama``'s ``/api/ps`` reader.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and 0 <= value <= INT64_MAX:
        return value
    return None


def count_from_text(text: str | None) -> int | None:
    """A decimal integer written in a log (``"4096"``, ``"+7"``) as a size or count, or None
    (not a number, negative, over ``INT64_MAX``, or more digits than Python converts)."""
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return value if 0 <= value <= INT64_MAX else None
