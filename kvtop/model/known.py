"""A value together with where it came from.

Every number kvtop shows has a source (product.md "Data sources"; the ladder in ``model.ladder``):
``allocated`` (the runner's log), ``runner`` (the runner's own ``/props`` / ``/slots``),
``reported`` (the Ollama API or NVML), ``requested`` (the runner's command line or the
Modelfile), ``service`` (the ``ollama serve`` environment), ``estimated`` (a formula) or
``default`` (Ollama's documented default, used because nothing readable says otherwise).
``value is None`` means not known.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

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

SOURCE_LEGEND = "  ".join(SOURCE_LEGEND_WORDS.values()) + "  ? not known"
"""The whole legend (``--once`` text); the dashboard lists the marks its rows use (``ui.format.legend``)."""


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
