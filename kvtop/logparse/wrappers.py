"""What sits around a log line: collector prefixes, quoting, timestamps, control characters.

Posted and collected logs wrap Ollama's lines (docs/ollama-internals.md §4.0, §6, §8):

- journald short: ``Jul 24 16:07:51 host ollama[114917]: `` with localized month names
  (``oct.`` corpus 028, ``3月`` corpus 031), also ``short-precise`` fractions and a host
  placeholder with a space (``<ollama server>``, corpus 012);
- journald/rsyslog ISO: ``2024-06-02T18:43:45.123+02:00 host ollama[123]: ``; ``docker logs
  --timestamps``: ``2024-06-02T18:43:45.633123456Z ``;
- journald ``short-monotonic``: ``[ 1234.567890] host ollama[123]: ``;
- a bare syslog identifier with its PID, no date and no host: ``ollama[123]: `` (journal output
  that keeps only the identifier, some container log drivers; §6);
- ``docker compose`` service columns: ``llm-api-ollama  | `` (corpus 018, 040);
- Markdown quotes ``> `` (corpus 012);
- journald ``-o json`` objects, whose ``MESSAGE`` is a string or, for non-UTF-8 text, an
  array of byte values (handled by :func:`journal_json_message`).

The timestamp of the line itself (slog ``time=``, Go ``2024/06/02 12:34:56``, GIN) is read
by the line grammars; a wrapper's timestamp is used only when the line has none.
"""

from __future__ import annotations

import functools

import json
import re
from datetime import datetime, timedelta, timezone

_WRAP_RE = re.compile(
    r"(?:"
    r"(?P<q>>[ \t]?)"
    r"|(?P<mon>[^\W\d_]{2,5}\.?|\d{1,2}[ \t]?[月월])[ \t]+(?P<day>\d{1,2})[ \t]+"
    r"(?P<hms>\d\d:\d\d:\d\d)(?P<frac>\.\d+)?[ \t]+(?:<[^>\n]*>|\S+)[ \t]+[^\s\[:]+(?:\[\d+\])?:[ \t]?"
    r"|(?P<iso>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)[ \t]+"
    r"(?:(?:<[^>\n]*>|[^\s\[:=]+)[ \t]+(?:[^\s\[:=]*ollama[^\s\[:=]*|[^\s\[:=]+(?=\[))(?:\[\d+\])?:[ \t]?)?"
    r"|\[[ \t]*\d+\.\d+\][ \t]+\S+[ \t]+[^\s\[:]+(?:\[\d+\])?:[ \t]?"
    r"|(?P<dc>[ \t]*\w[\w.@-]*[ \t]+\|[ \t]?)"
    r"|(?P<ident>[A-Za-z_][\w.@-]{0,63}\[\d{1,10}\]:[ \t]?)"
    r")"
)

MONTHS: dict[str, int] = {}
"""Month abbreviations as journald prints them under common locales (``%b``), lower case, no dot."""
for _number, _names in enumerate(
    (
        "jan janv ene gen sty oca янв led ian",
        "feb févr fév fev lut şub фев úno",
        "mar mär mrz mars mrt мар bře",
        "apr avr abr kwi nis апр dub",
        "may mai mag maj mei haz мая май kvě",
        "jun juin giu cze июн čvn",
        "jul juil lug lip tem июл čvc",
        "aug août ago sie ağu авг srp",
        "sep sept set wrz eyl сен zář",
        "oct okt ott out paź eki окт říj",
        "nov lis kas ноя",
        "dec déc dez dic gru ara дек pro",
    ),
    start=1,
):
    for _name in _names.split():
        MONTHS.setdefault(_name, _number)

_JOURNAL_RE = re.compile(r"([A-Za-z]{3}) ([0-9 |].) (..:.{5}) ([^:=]*+(?::(?! )[^:=]*+)*+): ", re.DOTALL)
"""The common journald form ``Jul 24 16:07:51 host ollama[114917]: `` on an ASCII line: the month, day and
time by position, then text without ``=`` up to the first ``": "`` (which must contain a space)."""
_MAY_BE_WRAPPED_RE = re.compile(
    r"[> \t]|[0-9](?!.{3}/)|\[[ 0-9]|(?!time=)[^> \t\[0-9][^ ]{0,46}+(?<![:=]) [0-9 |]"
    r"|[A-Za-z_][\w.@-]{0,63}\[\d{1,10}\]:",
    re.DOTALL,
)
""":func:`may_be_wrapped` of an ASCII line as one match (possessive: giving back never finds another space)."""
_CONTROL_TABLE = {i: "\ufffd" for i in (*range(0x20), *range(0x7F, 0xA0))}
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_ANSI_RE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
_STAMP_CACHE_SIZE = 4096
"""Timestamps parsed and kept (``functools.lru_cache``): consecutive lines repeat their stamp."""


def sanitize(text: str) -> str:
    """``text`` with every control character (C0, DEL, C1; tabs and ESC included) replaced by U+FFFD."""
    if text.isprintable() or _CONTROL_RE.search(text) is None:
        return text
    return text.translate(_CONTROL_TABLE)


def strip_ansi(text: str) -> str:
    """``text`` without SGR colour sequences (gin colours its access line on a TTY, §4.9)."""
    return _ANSI_RE.sub("", text) if "\x1b" in text else text


def may_be_wrapped(line: str) -> bool:
    """A cheap test that rules out the wrapper regex for most unwrapped lines.

    Unwrapped lines start with ``time=``, ``level=``, ``[GIN]``, a Go date ``2024/…`` or a
    llama.cpp ``function:`` (a colon before the first space); wrappers start with ``>``, a
    digit (ISO date, ``3月``), spaces or an opening ``[`` of a monotonic stamp, a word
    followed by a space and a digit (journald month) or by spaces and ``|`` (docker compose), or
    a syslog identifier with its PID (``ollama[123]: ``).
    """
    c = line[:1]
    if c == ">" or c == " " or c == "\t":
        return True
    if c.isdigit():
        return line[4:5] != "/"
    if c == "[":
        return line[1:2] == " " or line[1:2].isdigit()
    if c == "t" and line.startswith("time="):
        return False
    sp = line.find(" ", 1, 48)
    if sp > 2 and line[sp - 1] == ":" and line[sp - 2] == "]" and "[" in line[:sp]:
        return True  # a bare syslog identifier "ollama[123]: "
    if sp < 0 or line[sp - 1] == ":" or line[sp - 1] == "=":
        return False
    nxt = line[sp + 1 : sp + 2]
    return nxt.isdigit() or nxt == " " or nxt == "|"


Stamp = tuple[str, str, str, str, str]
"""A wrapper's timestamp, parsed lazily: ``("iso", text, "", "", "")`` or ``("syslog", month, day, hh:mm:ss, .frac)``."""


def strip_wrappers(line: str) -> tuple[str, Stamp | None, bool]:
    """Remove collector prefixes and quote marks from one line.

    Returns:
        ``(body, stamp, prefixed)``: the text Ollama printed; the wrapper's timestamp (turn
        it into a datetime with :func:`wrapper_time`) or None; and whether a collector prefix
        (not just a ``> `` quote) was removed, which marks the start of a new record.
    """
    if line.isascii():  # the common forms first, each test one regex call (the loop below does the same)
        if _MAY_BE_WRAPPED_RE.match(line) is None:
            return line, None, False
        j = _JOURNAL_RE.match(line)
        if j is not None:
            mon, day, hms, host = j.groups()
            if " " in host:
                stamp: Stamp = ("syslog", mon, day, hms, "")
                line = line[j.end() :]
                if _MAY_BE_WRAPPED_RE.match(line) is None:
                    return line, stamp, True
                return _strip_more(line, stamp, True, 4, False)
        return _strip_more(line, None, False, 5, True)
    return _strip_more(line, None, False, 5, False)


def _strip_more(
    line: str, stamp: Stamp | None, prefixed: bool, rounds: int, checked: bool
) -> tuple[str, Stamp | None, bool]:
    """The loop of :func:`strip_wrappers`; ``checked``: ``line`` may be wrapped and is not the journald fast form."""
    ascii_line = line.isascii()  # O(1); its pieces are ASCII too
    for _ in range(rounds):
        if checked:
            checked = False
        elif ascii_line:  # the same tests as below, each in one regex call
            if _MAY_BE_WRAPPED_RE.match(line) is None:
                break
            j = _JOURNAL_RE.match(line)  # (its lines may be wrapped)
            if j is not None:
                mon, day, hms, host = j.groups()
                if " " in host:
                    stamp = ("syslog", mon, day, hms, "")
                    prefixed = True
                    line = line[j.end() :]
                    continue
        # fast path for the common journald form "Jul 24 16:07:51 host ollama[114917]: "
        elif line[3:4] == " " and line[6:7] == " " and line[9:10] == ":" and line[15:16] == " " and line[:3].isalpha():
            # may_be_wrapped() of such a line depends only on the character after the month
            c4 = line[4:5]
            if not (c4.isdigit() or c4 == " " or c4 == "|"):
                break
            j4 = line.find(": ", 16)
            if j4 > 0 and line.find(" ", 16, j4) > 0 and line.find("=", 16, j4) < 0:
                stamp = ("syslog", line[:3], line[4:6], line[7:15], "")
                prefixed = True
                line = line[j4 + 2 :]
                continue
        elif not may_be_wrapped(line):
            break
        m = _WRAP_RE.match(line)
        if m is None or m.end() == 0:
            break
        if m.group("q") is None:
            prefixed = True
            if m.group("iso") is not None:
                stamp = ("iso", m.group("iso"), "", "", "")
            elif m.group("mon") is not None:
                stamp = ("syslog", m.group("mon"), m.group("day"), m.group("hms"), m.group("frac") or "")
        line = line[m.end() :]
    return line, stamp, prefixed


def wrapper_time(stamp: Stamp | None, year: int | None) -> datetime | None:
    """The time of a wrapper prefix found by :func:`strip_wrappers`.

    A journald short stamp has no year: ``year`` supplies it (None gives None). Its time is
    local and naive, like the text.
    """
    if stamp is None:
        return None
    if stamp[0] == "iso":
        return parse_iso(stamp[1])
    if year is None:
        return None
    return _syslog_time(stamp, year)


@functools.lru_cache(maxsize=_STAMP_CACHE_SIZE)
def _syslog_time(stamp: Stamp, year: int) -> datetime | None:
    _, mon, day, hms, frac = stamp
    mon = mon.rstrip(".").lower()
    month = MONTHS.get(mon)
    if month is None and mon[:1].isdigit():
        month = int("".join(ch for ch in mon if ch.isdigit()))
    if month is None:
        month = MONTHS.get(mon[:3])
    if month is None or not 1 <= month <= 12:
        return None
    micro = int((frac[1:] + "000000")[:6]) if frac else 0
    try:
        return datetime(year, month, int(day), int(hms[0:2]), int(hms[3:5]), int(hms[6:8]), micro)
    except ValueError:
        return None


@functools.lru_cache(maxsize=_STAMP_CACHE_SIZE)
def parse_iso(text: str) -> datetime | None:
    """An RFC 3339 / ISO 8601 time as slog, rsyslog and docker print it; naive when it has no zone.

    Accepts ``Z``, ``+02:00``, ``+0200``, any number of fraction digits (docker prints 9) and
    a comma before the fraction. Results are cached: consecutive lines repeat their stamp.
    """
    s = text.replace(",", ".").replace(" ", "T", 1)
    tz = ""
    if s.endswith(("Z", "z")):
        s, tz = s[:-1], "+00:00"
    elif len(s) > 19 and s[-5] in "+-" and s[-4:].isdigit():
        s, tz = s[:-5], s[-5:-2] + ":" + s[-2:]
    elif len(s) > 19 and s[-6] in "+-" and s[-3] == ":":
        s, tz = s[:-6], s[-6:]
    dot = s.find(".")
    if dot >= 0:
        frac = s[dot + 1 :]
        if not frac.isdigit():
            return None
        s = s[:dot] + "." + (frac + "000000")[:6]
    try:
        return datetime.fromisoformat(s + tz)
    except ValueError:
        return None


@functools.lru_cache(maxsize=_STAMP_CACHE_SIZE)
def go_log_time(date: str, hms: str) -> datetime | None:
    """Go's standard logger stamp ``2024/06/02`` ``12:34:56`` (local time, no zone); cached like :func:`parse_iso`."""
    try:
        return datetime(int(date[0:4]), int(date[5:7]), int(date[8:10]), int(hms[0:2]), int(hms[3:5]), int(hms[6:8]))
    except ValueError:
        return None


def epoch_time(seconds: float) -> datetime | None:
    """A Unix time (the C++ runner's ``timestamp=``) as an aware UTC datetime."""
    try:
        return datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(seconds=seconds)
    except (OverflowError, ValueError):
        return None


def journal_json_message(text: str) -> tuple[str, datetime | None] | None:
    """The ``MESSAGE`` of one ``journalctl -o json`` line, and its ``__REALTIME_TIMESTAMP``.

    ``MESSAGE`` is a JSON string, or an array of byte values when the text is not valid
    UTF-8 (decoded here with replacement characters). Returns None when the line is not a
    journal entry.
    """
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    if not isinstance(obj, dict) or "MESSAGE" not in obj:
        return None
    message = obj["MESSAGE"]
    if isinstance(message, list):
        try:
            message = bytes(int(b) & 0xFF for b in message).decode("utf-8", "replace")
        except (TypeError, ValueError):
            return None
    elif not isinstance(message, str):
        return None
    when = None
    stamp = obj.get("__REALTIME_TIMESTAMP")
    if isinstance(stamp, (str, int)) and str(stamp).isdigit():
        when = epoch_time(int(stamp) / 1e6)
    return message, when
