"""The one log-batch parser loop: physical lines → events, a parser bug caught and reported.

Every face follows the server log through :class:`LogFeed`: the dashboard, ``--stream``, the
exporter and replay (which parses the recorded raw lines the same way). A line that makes the
parser raise (a bug: every grammar is meant to tolerate any line) costs the events of that batch
after it, is reported once as a source error (``log parser error: Type: message``), and the
parser starts again: following goes on.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvtop.logparse.events import LogEvent
from kvtop.logparse.parser import LogParser, year_at

__all__ = ["LogFeed"]


class LogFeed:
    """A ``LogParser`` fed batch by batch, restarted after an exception.

    Args:
        year: The year of journald stamps that carry none (``year_at()`` of now by default; a
            replay passes the recording's).
    """

    def __init__(self, year: int | None = None) -> None:
        self.year = year_at() if year is None else year
        self.parser = LogParser(default_year=self.year)
        self.errors = 0
        """Parser exceptions caught so far."""

    def reset(self) -> None:
        """Start a new parser (a replay jumping back)."""
        self.parser = LogParser(default_year=self.year)

    def parse(self, lines: Sequence[str], *, final: bool = False) -> tuple[list[LogEvent], str | None]:
        """The events of one batch (``LogParser.feed`` each line, then ``end_batch``; ``final``:
        ``flush``, for a backlog read once, whose last record will not continue).

        Returns:
            The events and None, or the events parsed before the parser raised and its error
            (``log parser error: ValueError: …``); the parser is then restarted.
        """
        parser = self.parser
        events: list[LogEvent] = []
        try:
            for line in lines:
                events.extend(parser.feed(line))
            events.extend(parser.flush() if final else parser.end_batch())  # a held line (it might have continued) is released
        except Exception as exc:  # noqa: BLE001 - a parser bug must not stop the log
            self.errors += 1
            self.reset()
            return events, f"log parser error: {type(exc).__name__}: {exc}"
        return events, None
