"""``kvtop inspect-log PATH|- --changes [--json]``: a pasted log's restarts (each ``server config``
line after the first), version changes (``Listening on … (version X)``) and the ``server config``
variables that changed between restarts (``model.change_facts.LogChangeScan``), oldest first, with
their log times. ``--json``: ``{"starts", "changes"}`` (``changes[]`` as ``Change.to_json``,
docs/json.md ``changes``). Exit 0; 2 when the file cannot be read; 1 when no line is a server log line (as ``inspect-log``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from datetime import datetime, tzinfo
from typing import Any

from kvtop.logparse.parser import iter_events
from kvtop.model.change_facts import LogChangeScan
from kvtop.textsafe import emit, safe, safe_block, safe_json

__all__ = ["ChangeSection", "main_log_changes"]

MAX_SHOWN = 60
"""Changes the report lists (``--json`` has all)."""


class ChangeSection:
    """The changes of one log read in order.

    Args:
        tz: The zone of stamps without one (the machine's, as the dashboard reads them).
    """

    def __init__(self, tz: tzinfo | None = None) -> None:
        self.tz = tz or datetime.now().astimezone().tzinfo
        assert self.tz is not None
        self.scan = LogChangeScan(self.tz)

    def feed_lines(self, lines: Iterable[str]) -> int:
        """Parse ``lines`` and scan their events; returns how many events the parser read."""
        n = 0
        for event in iter_events(iter(lines)):
            n += 1
            self.scan.feed(event)
        return n

    def json_doc(self) -> dict[str, Any]:
        """``{"starts": N, "changes": [...]}`` (``Change.to_json`` objects, docs/json.md ``changes``)."""
        return {"starts": self.scan.starts, "changes": [c.to_json() for c in self.scan.changes]}

    def report(self) -> str:
        """The human section: ``server changes`` and one line per change (log time, text), or a
        line saying there was one start, or nothing for a log without any start line."""
        starts, changes = self.scan.starts, self.scan.changes
        if not starts and not changes:
            return ""
        out = ["", "server changes"]
        if not changes:
            out.append(
                "  one server start in the log: nothing to compare it with"
                if starts <= 1
                else f"  none: {starts} starts, the same version and server config"
            )
        else:
            restarts = sum(1 for c in changes if c.kind == "start")
            out.append(f"  {starts} start(s), {restarts} restart(s) in the log; what changed at each:")
            ordered = sorted(changes, key=lambda c: (int(c.at), not c.restart, c.kind != "version"))
            for c in ordered[:MAX_SHOWN]:  # each second's restart lines first
                when = datetime.fromtimestamp(c.at, self.tz).strftime("%Y-%m-%d %H:%M:%S")
                out.append(f"  {when}  {safe(c.text(), 300)}")
            if len(changes) > MAX_SHOWN:
                out.append(f"  … {len(changes) - MAX_SHOWN:,} more (--json lists all)")
        return "\n".join(out) + "\n"


MAX_LINE_BYTES = 1024 * 1024
"""A physical line longer than this is cut (as ``inspect_log`` reads)."""


def _lines(stream: Any) -> Iterator[str]:
    skipping = False
    while raw := stream.readline(MAX_LINE_BYTES):
        if skipping:
            skipping = not raw.endswith(b"\n")
            continue
        skipping = len(raw) >= MAX_LINE_BYTES and not raw.endswith(b"\n")
        yield raw.decode("utf-8", "replace")


def main_log_changes(path: str, *, as_json: bool) -> int:
    """``inspect-log --changes``: print the changes of the log at ``path`` (``-``: stdin)."""
    section = ChangeSection()
    try:
        if path == "-":
            events = section.feed_lines(_lines(sys.stdin.buffer))
        else:
            with open(path, "rb") as fh:
                events = section.feed_lines(_lines(fh))
    except OSError as exc:
        emit(f"kvtop inspect-log: cannot read {safe(path)}: {safe(exc.strerror or exc.__class__.__name__)}")
        return 2
    if as_json:
        sys.stdout.write(safe_json(section.json_doc()) + "\n")
        return 0
    if not events:
        emit(f"kvtop inspect-log: {safe(path)}: no Ollama server log line in it")
        return 1
    text = section.report() or "\nserver changes\n  no 'server config' or 'Listening on' line in the log\n"
    sys.stdout.write(safe_block(f"kvtop inspect-log: {safe(path)}{text}"))
    return 0
