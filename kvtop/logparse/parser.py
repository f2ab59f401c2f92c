"""The stateful line parser: physical lines in, :data:`~kvtop.logparse.events.LogEvent` out.

``LogParser.feed`` takes one physical line at a time (with or without its newline, CRLF
included) and returns the events completed so far. It keeps three kinds of state:

- **Hard wraps.** Pasted logs are often hard-wrapped. A slog or Go-logger record that may
  continue (see :func:`~kvtop.logparse.hard_wraps.wrap_kind`: a quoted value still open, ``env="map[… OLLAM`` |
  ``A_SCHED_SPREAD:false …]"`` in corpus 021/022/033; a piece of a fixed-width wrap; a wide
  record such as the ``offload`` estimate wrapped between attributes, Ollama issues #8430/#9181, or a
  spawn line ``msg="starting llama server"`` wrapped before its ``cmd=…`` and between flags) is
  held, and the following physical lines that do not start a record are glued to it, until
  it is complete, a record starts, or 8 lines were glued. Blank lines inside such a record
  are skipped. A record cut short and never closed (``systemctl`` cuts, corpus 031) is parsed
  as far as it goes when the next record starts. A record cut mid-token by a fixed-width wrap
  (a terminal or a forum) is held where its first part cannot end a record: a slog record whose
  last word is no ``key=value`` and no closing quote, a llama.cpp line with a parenthesis still
  open or ending in ``,``/``=``, a ``[GIN]`` line with its path's quote open; its continuation
  is glued as it is (a leading space was the character at the wrap). A live follower calls
  :meth:`end_batch` after each batch so that a held last line does not wait for the next batch.
- **Timing reports** come in parts (prompt eval / eval / total) and are joined into one
  ``RequestTiming`` per request.
- **The year** of journald's year-less stamps is taken from the last full timestamp seen
  (or ``default_year``).

The first stage is cheap on purpose: each line is classified by its first characters and
dispatched through dicts keyed by slog ``msg`` or llama.cpp function name, so lines that no
event models cost a few string operations (see ``benchmarks/parse_throughput.py``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from datetime import datetime

from kvtop.logparse import llamacpp_lines, ollama_lines, runner_lines
from kvtop.logparse.events import LogEvent, PrefillProgress, RequestTiming
from kvtop.logparse.hard_wraps import (
    ATTR_START_RE,
    ENV_CONTINUATION_RE,
    MIN_LEARNED_WIDTH,
    NEW_RECORD_RE,
    SPAWN_ENDS,
    WIDE_RE,
    WRAP_WIDTH,
    cut_hash,
    llama_cut,
    open_quote,
    wrap_kind,
)
from kvtop.logparse.ollama_lines import parse_slog
from kvtop.logparse.runner_lines import TimingPart
from kvtop.logparse.wrappers import Stamp, journal_json_message, strip_wrappers, wrapper_time

MAX_GLUED_LINES = 32
"""A record is glued from at most this many physical lines (plus blank ones)."""

MAX_RECORD_CHARS = 256 * 1024
"""…and at most this many characters."""

MAX_CACHED_TASKS = 64
"""Prompt-cache reuse counts kept for requests whose timing report has not come yet (then forgotten at once)."""

_TIMING_FUNCS = frozenset(("llama_print_timings", "llama_perf_context_print", "print_timings"))
_C_TAGS = frozenset(("srv ", "slot", "que ", "res ", "cmn ", "log "))
_EXT_LEVELS = ("INFO [", "WARN [", "WARNING [", "ERROR [", "DEBUG [", "VERB [", "ERR [")
_LLAMA_HANDLERS = llamacpp_lines.HANDLERS
_QUIET = llamacpp_lines.QUIET


Stripped = tuple[str, Stamp | None, bool]
"""What :func:`~kvtop.logparse.wrappers.strip_wrappers` returns."""


def _no_time() -> datetime | None:
    return None


class LogParser:
    """Turn an Ollama server log, line by line, into events.

    Args:
        default_year: Year for journald's year-less stamps until a full timestamp is seen;
            None leaves such lines without a time.
    """

    __slots__ = (
        "_cached",
        "_quiet_no",
        "_quiet_text",
        "_last_len",
        "_line_no",
        "_pending",
        "_pending_blank",
        "_pending_env",
        "_pending_kind",
        "_pending_no",
        "_prev_len",
        "_timing",
        "_timing_slot",
        "_width",
        "_year",
        "errors",
        "last_error",
    )

    def __init__(self, *, default_year: int | None = None) -> None:
        self._line_no = 0
        self._pending: list[str] | None = None
        self._pending_kind = ""
        self._pending_no = 0
        self._pending_env = False
        self._pending_blank = 0
        self._year = default_year
        self._prev_len = 0
        self._last_len = 0
        self._quiet_text = ""
        self._quiet_no = 0
        """The last record that gave no event, and its line: a line after it that continues it (an orphan piece
        of a hard wrap) is joined to it and the whole read again; nothing was emitted for it, so nothing twice."""
        self._width = 0
        """The width a terminal or a forum wrapped this log at, learned from a line that continued the one
        before it although that one could end a record (an orphan piece, lost); 0 until then. A physical
        line exactly this long is held for its continuation."""
        self._timing: TimingPart | None = None
        self._timing_slot: tuple[int | None, int | None] = (None, None)
        self._cached: dict[tuple[int | None, int | None], int] = {}
        """Per ``(slot, task)``: the prompt tokens the slot reused from its cache (the task's first ``cached
        n_tokens = K`` line), until its timing report takes it (``RequestTiming.prompt_cached_tokens``)."""
        self.errors = 0
        """Lines that raised inside the parser (none expected; see :meth:`feed`)."""
        self.last_error: str | None = None
        """``line N: ExceptionType: message`` of the last such line."""

    @property
    def line_no(self) -> int:
        """Number of physical lines fed so far."""
        return self._line_no

    def feed(self, line: str) -> list[LogEvent]:
        """Parse one physical line; returns the events it completes (possibly for earlier lines).

        A line the parser cannot handle (a bug, since every grammar is meant to tolerate any
        text) yields no event instead of an exception: the log is untrusted input and one bad
        line must not stop a follower. Such lines are counted in :attr:`errors`.
        """
        try:
            n = self._line_no = self._line_no + 1
            if line[-1:] in "\r\n":  # (also true for "", which rstrip leaves alone)
                line = line.rstrip("\r\n")
            self._prev_len = self._last_len
            self._last_len = len(line)
            if self._pending is not None:
                return self._continue(line)
            width = self._width
            result: list[LogEvent] | None
            if line[:5] == "time=":  # the common case, inlined: an unwrapped slog record that is complete
                if (
                    len(line) < WRAP_WIDTH
                    and len(line) != width
                    and line[-1] not in " ="
                    and (line[-1] == '"' or "=" in line[line.rfind(" ") + 1 :])
                    and " msg=" in line
                    and not cut_hash(line)
                    and ((line.count('"') & 1 == 0 and "\\" not in line) or not open_quote(line))
                    and not (("offload" in line or "cmd=" in line or "request=" in line) and WIDE_RE.search(line))
                    and not (line[-1] == '"' and line.endswith(SPAWN_ENDS))
                ):
                    result = parse_slog(line, n, line, _no_time)
                    if not result:
                        self._quiet_text, self._quiet_no = line, n
                        return []
                    if self._timing is not None:
                        return self._after(result)
                    return result
                return self._logical(line, n, True)
            func, sep, rest = line.partition(": ")
            if sep and 0 < len(func) < 79:  # the other common case: an unwrapped llama.cpp "function: text" line
                handler = _LLAMA_HANDLERS.get(func)
                if handler is not None:
                    if len(line) == width:
                        return self._hold(line, n, "width")
                    if ((rest[-1:] in ",=.0123456789Mi" or "(" in rest) and llama_cut(rest)) or cut_hash(rest):
                        return self._hold(line, n, "cut")
                    result = handler(func, rest, n, line, _no_time)
                    if not result:
                        self._quiet_text, self._quiet_no = line, n
                        return []
                    if self._timing is None:
                        return result
                    return self._after(result)
                if func in _QUIET:
                    self._quiet_text, self._quiet_no = line, n
                    return []
            return self._wrapped(line, n, True)
        except Exception as exc:  # noqa: BLE001 - counted and kept in last_error, never silent
            self.errors += 1
            self.last_error = f"line {self._line_no}: {type(exc).__name__}: {exc}"
            self._pending = None
            return []

    def end_batch(self) -> list[LogEvent]:
        """Parse a record held for a possible hard-wrap continuation now; timing state is kept.

        A live tail never wraps lines (wrapping is an artefact of pasted logs), so a follower
        should call this after each batch of lines it reads: the last line of a batch is then
        not left waiting for the next batch.
        """
        if self._pending is None:
            return []
        return self._finish_pending()

    def flush(self) -> list[LogEvent]:
        """End of input: parse a held record and emit a half-finished timing report."""
        out: list[LogEvent] = []
        if self._pending is not None:
            out.extend(self._finish_pending())
        if self._timing is not None:
            out.append(self._emit_timing(self._timing, None))
            self._timing = None
        return out

    # ---------------------------------------------------------------------------------------
    # Hard wraps

    def _continue(self, line: str) -> list[LogEvent]:
        pending = self._pending
        assert pending is not None
        if not line.strip():
            self._pending_blank += 1
            if self._pending_blank > MAX_GLUED_LINES:
                return self._finish_pending()
            return []
        stripped = strip_wrappers(line)
        body, _, prefixed = stripped
        kind = self._pending_kind
        if (
            prefixed
            or self._starts_record(body)
            or (
                kind == "attrs"
                and not ATTR_START_RE.match(body)
                and (body[:1] in (" ", "\t") or pending[-1][-1:] in (" ", "="))  # else a fixed-width piece: glued
            )
        ):
            out = self._finish_pending()
            out.extend(self._logical(line, self._line_no, True, stripped))
            return out
        joined = "".join(pending)
        if kind == "attrs" and body[:1] not in (" ", "\t") and not ATTR_START_RE.match(body):
            pass  # the rest of a token cut at a fixed width (``… layers.split=11,11,`` | ``11,11 memory…``): as it is
        elif kind == "value":
            body = body.lstrip()
        elif kind == "attrs" or (kind == "width" and body[:1] in (" ", "\t")):
            body = body.lstrip()
            if not joined.endswith(" "):
                body = " " + body
        elif kind == "quote" and body[:1] == "-" and joined[-1:] not in (" ", "-") and ' cmd="' in joined:
            body = " " + body  # a spawn command wrapped before a flag: the space was the line break
        pending.append(body)
        joined += body
        next_kind = wrap_kind(joined, line, self._width)
        if next_kind is None or len(pending) >= MAX_GLUED_LINES or len(joined) > MAX_RECORD_CHARS:
            return self._finish_pending()
        self._pending_kind = next_kind
        return []

    def _starts_record(self, body: str) -> bool:
        if self._pending_env and ENV_CONTINUATION_RE.match(body):
            return False
        return NEW_RECORD_RE.match(body) is not None

    def _finish_pending(self) -> list[LogEvent]:
        pending = self._pending
        assert pending is not None
        self._pending = None
        return self._logical("".join(pending), self._pending_no, False)

    def _hold(self, text: str, n: int, kind: str) -> list[LogEvent]:
        self._pending = [text]
        self._pending_kind = kind
        self._pending_no = n
        self._pending_env = 'env="map[' in text
        self._pending_blank = 0
        return []

    # ---------------------------------------------------------------------------------------
    # One logical line

    def _logical(self, text: str, n: int, may_hold: bool, stripped: Stripped | None = None) -> list[LogEvent]:
        result: list[LogEvent] | TimingPart | None
        if text[:5] == "time=":  # the common case: an unwrapped slog record
            if may_hold:
                kind = wrap_kind(text, text, self._width)
                if kind is not None:
                    return self._hold(text, n, kind)
            result = ollama_lines.parse_slog(text, n, text, _no_time)
            if not result:
                self._quiet_text, self._quiet_no = text, n
                return []
            if self._timing is None:
                return result
            return self._after(result)
        idx = text.find(": ", 0, 80)
        if idx > 0:  # the other common case: an unwrapped llama.cpp "function: text" line
            func = text[:idx]
            handler = llamacpp_lines.HANDLERS.get(func)
            if handler is not None:
                if may_hold and (len(text) == self._width or llama_cut(text[idx + 2 :]) or cut_hash(text)):
                    return self._hold(text, n, "cut")
                result = handler(func, text[idx + 2 :], n, text, _no_time)
                if not result:
                    self._quiet_text, self._quiet_no = text, n
                    return []
                if self._timing is None:
                    return result
                return self._after(result)
            if func in llamacpp_lines.QUIET:
                self._quiet_text, self._quiet_no = text, n
                return []
        return self._wrapped(text, n, may_hold, stripped)

    def _wrapped(self, text: str, n: int, may_hold: bool, stripped: Stripped | None = None) -> list[LogEvent]:
        """A logical line that is neither an unwrapped slog record nor a known llama.cpp line.

        ``stripped`` is ``strip_wrappers(text)`` when the caller has it already.
        """
        result: list[LogEvent] | TimingPart | None
        body, stamp, prefixed = stripped if stripped is not None else strip_wrappers(text)
        if not body:
            return []
        if stamp is None:
            wtime = _no_time
        else:
            year = self._year

            def wtime() -> datetime | None:
                return wrapper_time(stamp, year)

        c0 = body[0]
        if (c0 == "t" and body.startswith("time=")) or (c0 == "l" and body.startswith("level=")):
            if (
                may_hold
                and (  # wrap_kind(body, text) is not None, its common case inlined
                    len(text) >= WRAP_WIDTH
                    or len(text) == self._width
                    or body[-1] in " ="
                    or not (body[-1] == '"' or "=" in body[body.rfind(" ") + 1 :])
                    or " msg=" not in body
                    or cut_hash(body)
                    or not ((body.count('"') & 1 == 0 and "\\" not in body) or not open_quote(body))
                    or (("offload" in body or "cmd=" in body or "request=" in body) and WIDE_RE.search(body))
                    or (body[-1] == '"' and body.endswith(SPAWN_ENDS))
                )
            ):
                kind = wrap_kind(body, text, self._width)
                if kind is not None:
                    return self._hold(text, n, kind)
            result = parse_slog(body, n, text, wtime)
        elif c0.isdigit():
            result = None
            if body[4:5] == "/":
                if may_hold:
                    kind = wrap_kind(body, text, self._width)
                    if kind is not None:
                        return self._hold(text, n, kind)
                result = ollama_lines.parse_go_log(body, n, text)
            if result is None:
                result = runner_lines.parse_server_line(body, n, text, wtime)
            if result is None:
                result = llamacpp_lines.free_text(body, n, text, wtime)
        elif c0 == "[":
            if body.startswith("[GIN]"):
                if may_hold and (body.count('"') == 1 or len(text) == self._width):  # the path's quote open: a wrap
                    return self._hold(text, n, "quote" if body.count('"') == 1 else "width")
                result = ollama_lines.parse_gin(body, n, text)
            else:
                result = llamacpp_lines.free_text(body, n, text, wtime)
        elif c0 == "{":
            journal = journal_json_message(body) if '"MESSAGE"' in body else None
            if journal is not None:
                return self._journal_entry(journal[0], journal[1], n, text)
            result = runner_lines.parse_runner_json(body, n, text)
        else:
            if may_hold:
                func, sep, rest = body.partition(": ")
                if sep and func in _LLAMA_HANDLERS and (len(text) == self._width or llama_cut(rest) or cut_hash(rest)):
                    return self._hold(text, n, "cut")
            result = self._other(body, n, text, wtime)
        if not result:
            if may_hold and not prefixed and self._orphan(body):
                if self._prev_len >= MIN_LEARNED_WIDTH:
                    self._width = self._prev_len
                if self._quiet_no == n - 1 and self._quiet_text:
                    # the record before gave no event: it may be this line's first part, read again whole
                    joined, self._quiet_text = self._quiet_text + text, ""
                    return self._logical(joined, n - 1, True)
                return []
            self._quiet_text, self._quiet_no = text, n
            return []
        if type(result) is TimingPart:
            return self._timing_part(result)
        assert isinstance(result, list)
        first = result[0]
        if type(first) is PrefillProgress and first.n_tokens is None and first.progress is None:
            self._note_cached(first)
        if stamp is not None:
            t = result[-1].time
            if t is not None:
                self._year = t.year
        if self._timing is None:
            return result
        return self._after(result)

    def _orphan(self, body: str) -> bool:
        """Whether ``body`` (a line that gave no event) is the rest of the line before it: it starts no
        record and is not a line of its own (progress dots, a shell prompt)."""
        if NEW_RECORD_RE.match(body) is not None or not body.strip(". \t"):
            return False
        return not body.startswith(("PS ", ">>>", "$ ", "# ", "..."))

    def _after(self, result: list[LogEvent]) -> list[LogEvent]:
        """Events of a line that ends a pending timing report: that report comes first."""
        assert self._timing is not None
        pending_timing = self._emit_timing(self._timing, None)
        self._timing = None
        return [pending_timing, *result]

    def _other(self, body: str, n: int, text: str, wtime: llamacpp_lines.TimeFn) -> list[LogEvent] | TimingPart | None:
        func, sep, rest = body.partition(": ")
        is_func = sep != "" and func != ""
        if is_func:
            handler = _LLAMA_HANDLERS.get(func)
            if handler is not None:
                return handler(func, rest, n, text, wtime)
            if func in _QUIET:
                return None
        if body[:4] in _C_TAGS:
            found = runner_lines.parse_server_line(body, n, text, wtime)
            if found is not None:
                return found
        if body.startswith(_EXT_LEVELS):
            found = runner_lines.parse_ext_server(body, n, text)
            if found is not None:
                return found
        if is_func and func in _TIMING_FUNCS:
            return runner_lines.timing_part(rest, n, text, wtime, *self._timing_slot)
        if body[:1] == " " or body[:1] == "\t":
            stripped = body.lstrip()
            if runner_lines.is_bare_timing(stripped):
                return runner_lines.timing_part(stripped, n, text, wtime, *self._timing_slot)
        elif runner_lines.is_bare_timing(body):
            return runner_lines.timing_part(body, n, text, wtime, *self._timing_slot)
        return llamacpp_lines.free_text(body, n, text, wtime)

    def _journal_entry(self, message: str, when: datetime | None, n: int, text: str) -> list[LogEvent]:
        """A ``journalctl -o json`` entry: parse its MESSAGE as a line of its own."""
        out: list[LogEvent] = []
        for part in message.splitlines() or [""]:
            events = self._logical(part, n, False)
            if when is not None:
                events = [_with_time(e, when) if e.time is None else e for e in events]
            out.extend(events)
        return out

    # ---------------------------------------------------------------------------------------
    # Timing reports

    def _timing_part(self, part: TimingPart) -> list[LogEvent]:
        if part.part == "header":
            self._timing_slot = (part.slot, part.task)
            return []
        out: list[LogEvent] = []
        pending = self._timing
        if part.part == "prompt":
            if pending is not None:
                out.append(self._emit_timing(pending, None))
            self._timing = part
            return out
        self._timing_slot = (None, None)  # a header's slot/task covers one report
        if part.part == "eval":
            self._timing = None
            if pending is not None and (part.slot is None or pending.slot is None or part.slot == pending.slot):
                out.append(self._emit_timing(pending, part))
            else:
                if pending is not None:
                    out.append(self._emit_timing(pending, None))
                out.append(self._emit_timing(None, part))
            return out
        # total
        if pending is not None:
            self._timing = None
            out.append(self._emit_timing(pending, None))
        return out

    def _note_cached(self, e: PrefillProgress) -> None:
        """A llama-server ``cached n_tokens = K, memory_seq_rm [K, end)`` line (``PrefillProgress`` with only
        ``n_past``): the first of a task is the prompt prefix reused from the slot's cache; the later ones count
        the batches done (docs/ollama-internals.md §4.10)."""
        key = (e.slot, e.task)
        if e.n_past is None or e.task is None or key in self._cached:
            return
        if len(self._cached) >= MAX_CACHED_TASKS:
            self._cached.clear()
        self._cached[key] = e.n_past

    def _emit_timing(self, prompt: TimingPart | None, ev: TimingPart | None) -> RequestTiming:
        last = ev if ev is not None else prompt
        assert last is not None
        first = prompt if prompt is not None else ev
        assert first is not None
        slot = first.slot if first.slot is not None else last.slot
        task = first.task if first.task is not None else last.task
        cached = self._cached.pop((slot, task), None) if task is not None and prompt is not None else None
        return RequestTiming(
            first.line_no,
            first.time if first.time is not None else last.time,
            last.raw,
            prompt_tokens=prompt.tokens if prompt else None,
            prompt_ms=prompt.ms if prompt else None,
            prompt_tps=prompt.tps if prompt else None,
            eval_tokens=ev.tokens if ev else None,
            eval_ms=ev.ms if ev else None,
            eval_tps=ev.tps if ev else None,
            slot=slot,
            task=task,
            prompt_cached_tokens=cached,
        )


def _with_time(event: LogEvent, when: datetime) -> LogEvent:
    return dataclasses.replace(event, time=when)


def year_at(unix_s: float | None = None) -> int:
    """The local calendar year at ``unix_s`` (default: now): the year of journald/syslog stamps
    (``Nov 29 18:33:00 host ollama[1]: …`` carry none) in a log read live, or recorded then."""
    import time as _time

    return _time.localtime(unix_s).tm_year


def parse_lines(lines: Iterable[str], *, default_year: int | None = None) -> list[LogEvent]:
    """All events of ``lines`` (physical lines, newlines optional), in log order."""
    parser = LogParser(default_year=default_year)
    feed = parser.feed
    out: list[LogEvent] = []
    for line in lines:
        events = feed(line)
        if events:
            out.extend(events)
    out.extend(parser.flush())
    return out


def iter_events(
    lines: Iterable[str], *, default_year: int | None = None, parser: LogParser | None = None
) -> Iterator[LogEvent]:
    """The events of ``lines`` as they are completed: memory stays bounded for a huge log.

    ``parser``: the one to feed (its ``errors`` and ``line_no`` stay readable afterwards);
    default a new one with ``default_year``.
    """
    parser = parser if parser is not None else LogParser(default_year=default_year)
    feed = parser.feed
    for line in lines:
        events = feed(line)
        if events:
            yield from events
    yield from parser.flush()
