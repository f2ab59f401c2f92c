"""Compact copies of events, so that a long-lived store can keep thousands of them (``model.logstate``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvtop.logparse.events import LogEvent


class EventCompactor:
    """Makes events small enough to keep thousands of them (``model.logstate`` keeps 20,000).

    :meth:`compact` returns each event as a new one of the same class with the same fields, except
    that ``raw`` is ``""`` (nothing that keeps events reads the line: the events pane describes the
    fields, and its raw view shows the log's newest lines as read), its short text fields (``str``
    fields of at most :attr:`max_chars` characters: devices, buffer kinds, grammars, blobs, paths,
    reasons) are the one copy of that text this compactor has seen, a ``server config`` map is the
    previous one when equal (else a dict of shared keys and values), and its ``time`` is the
    previous event's ``datetime`` object when the two are equal. Values never change, only which
    object holds them.

    The string table is bounded: past :attr:`max_strings` distinct strings it is emptied and starts
    again (a log of unique text costs at most that many strings, never more). Safe to share
    between threads: a race can only miss a share, never change a value.

    Args:
        max_strings: Distinct strings remembered at most.
        max_chars: Longer strings are kept as they are (not remembered).
    """

    __slots__ = ("_last_map", "_last_time", "_strings", "max_chars", "max_strings")

    def __init__(self, max_strings: int = 1024, max_chars: int = 128) -> None:
        self.max_strings = max_strings
        self.max_chars = max_chars
        self._strings: dict[str, str] = {}
        self._last_time: datetime | None = None
        self._last_map: Mapping[str, str] | None = None

    @property
    def strings_held(self) -> int:
        """Distinct strings remembered now (at most :attr:`max_strings`)."""
        return len(self._strings)

    def share(self, text: str | None) -> str | None:
        """The copy of ``text`` seen first (``text`` itself when new, too long, or not a ``str``)."""
        if type(text) is not str or len(text) > self.max_chars:
            return text
        strings = self._strings
        found = strings.get(text)
        if found is not None:
            return found
        if len(strings) >= self.max_strings:
            strings.clear()
        strings[text] = text
        return text

    def share_map(self, mapping: Mapping[str, str]) -> Mapping[str, str]:
        """The previous map when equal to ``mapping``, else a dict of its shared keys and values."""
        if not isinstance(mapping, Mapping):
            return mapping
        last = self._last_map
        if last is not None and (mapping is last or mapping == last):
            return last
        share = self.share
        out: dict[str, str] = {share(k): share(v) for k, v in mapping.items()}  # type: ignore[misc]
        self._last_map = out
        return out

    def same_time(self, when: datetime | None) -> datetime | None:
        """The previous event's time object when it equals ``when`` (same zone object and fold), else ``when``."""
        last = self._last_time
        if when is None or when is last or type(when) is not datetime:
            return when
        if last is not None and when.tzinfo is last.tzinfo and when.fold == last.fold and when == last:
            return last
        self._last_time = when
        return when

    def compact(self, events: Iterable[LogEvent]) -> list[LogEvent]:
        """The events as compact copies (``raw == ""``, every other field equal), in the same order."""
        get, share = self._strings.get, self.share
        return [e._lean(self, get, share) for e in events]  # type: ignore[union-attr]
