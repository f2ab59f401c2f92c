"""The one log-batch parser loop: physical lines → events, a parser bug caught and reported.

Every face follows the server log through :class:`LogFeed`: the dashboard, ``--stream``, the
exporter and replay (which parses the recorded raw lines the same way). A line that makes the
parser raise (a bug: every grammar is meant to tolerate any line) is left out and reported once
as a source error (``log parser error: Type: message``); the parser starts again and parses the
rest of the batch: following goes on.
"""

from __future__ import annotations

from collections.abc import Sequence

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the parser is imported when a log is first followed (a dashboard without one starts lighter)
    from kvtop.logparse.events import LogEvent
    from kvtop.logparse.parser import LogParser

__all__ = ["LogFeed"]


class LogFeed:
    """A ``LogParser`` fed batch by batch, restarted after an exception.

    Args:
        year: The year of journald stamps that carry none (``year_at()`` of now by default; a
            replay passes the recording's).
    """

    def __init__(self, year: int | None = None) -> None:
        from kvtop.logparse.parser import year_at

        self.year = year_at() if year is None else year
        self.parser = self._new_parser()
        self.errors = 0
        """Parser exceptions caught so far."""

    def _new_parser(self) -> LogParser:
        from kvtop.logparse.parser import LogParser

        return LogParser(default_year=self.year)

    def reset(self) -> None:
        """Start a new parser (a replay jumping back)."""
        self.parser = self._new_parser()

    def parse(self, lines: Sequence[str], *, final: bool = False) -> tuple[list[LogEvent], str | None]:
        """The events of one batch (``LogParser.feed`` each line, then ``end_batch``; ``final``:
        ``flush``, for a backlog read once, whose last record will not continue).

        A line that makes the parser raise is skipped: the parser starts again (a record it held
        for a possible continuation is lost with it) and the rest of the batch is parsed.

        Returns:
            The events and None, or the events and the error said once for the batch
            (``log parser error: ValueError: …``, with how many more lines raised).
        """
        events: list[LogEvent] = []
        first: str | None = None
        raised = 0
        rest = lines
        while True:
            parser = self.parser
            done = 0
            try:
                for line in rest:
                    done += 1
                    events.extend(parser.feed(line))
                events.extend(parser.flush() if final else parser.end_batch())  # a held line is released
            except Exception as exc:  # noqa: BLE001 - a parser bug must not stop the log
                self.errors += 1
                raised += 1
                if first is None:
                    first = f"log parser error: {type(exc).__name__}: {exc}"
                self.reset()
                if done >= len(rest):
                    break  # the last line (or releasing a held one) raised: nothing left to parse
                rest = rest[done:]  # the line that raised is left out, the rest parsed by a new parser
                continue
            break
        if first is not None and raised > 1:
            first += f" (and {raised - 1} more line{'s' if raised > 2 else ''})"
        return events, first
