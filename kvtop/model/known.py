"""A value together with where it came from.

Every number kvtop shows has a source (product.md "Data sources"): ``allocated`` (the runner's
log), ``reported`` (the API or NVML), ``estimated`` (a formula), ``requested`` (what a
Modelfile, flag or environment asked for) or ``default`` (Ollama's documented default, used
because nothing better is known yet). ``value is None`` means not known.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

T = TypeVar("T")
Source = Literal["allocated", "reported", "estimated", "requested", "default"]

SOURCE_MARK: dict[str, str] = {
    "allocated": "",
    "reported": "",
    "estimated": "~",
    "requested": "^",
    "default": "*",
}
"""Prefix marks used in dense tables: ``~`` estimated, ``*`` Ollama default, ``^`` requested only
(``?`` alone means not known)."""


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
