"""Runner-server lines: the Era A C++ server, the 2023 JSON runner and llama-server (Era C).

- Era A ``ollama_llama_server`` (``llm/ext_server/utils.hpp:server_log``, docs/ollama-internals.md §4.0):
  ``INFO [update_slots] input truncated | n_ctx=2048 n_erase=1090 n_keep=4 … tid="…"
  timestamp=1721345155`` (corpus 017), ``INFO [print_timings] prompt eval time = …`` (§4.10).
- 2023 and Era A JSON logs: ``{"timestamp":1696624423,"level":"INFO","function":"main",
  "message":"build info",…}`` and ``{"function":"load_model","level":"ERR",…,"msg":"unable to
  load model"}`` (corpus 009, 038).
- llama-server (Era C, run with ``--no-log-prefix``, §4.4, §4.10): ``slot print_timing: id  0
  | task 3 | prompt eval time = …``, ``slot update_slots: id  0 | task 0 | prompt processing
  progress, n_past = …, n_tokens = …, progress = 0.25``, ``srv  load_model: loading model
  '…'``. Older builds print the timing lines unprefixed after ``slot print_timing: id 0 |
  task 0 |``. With the log prefix on, lines start ``0.00.035.060 I ``.
- llama.cpp ``llama_print_timings:`` / ``llama_perf_context_print:`` timing lines.
- llama-server's refusal of an over-long prompt: ``srv    send_error: task id = 0, error: request
  (2104 tokens) exceeds the available context size (256 tokens), try increasing it``.

Timing lines come in parts (prompt eval, eval, total); :class:`TimingPart` carries one part
and the parser joins the parts of one request into a ``RequestTiming`` event.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kvtop.logparse.events import (
    ContextParams,
    LoadFailed,
    LogEvent,
    ModelLoad,
    PrefillProgress,
    PromptRejected,
    SlotActivity,
    Truncation,
    UnknownWarning,
)
from kvtop.logparse.memory_events import parse_memory_line
from kvtop.logparse.values import blob_of, slog_pairs, to_count, to_float
from kvtop.logparse.wrappers import epoch_time, sanitize

TimeFn = Callable[[], "datetime | None"]

_TIMING_RE = re.compile(
    r"(prompt eval|generation eval|eval|total|load|sample) time\s*=\s*(\d+(?:\.\d+)?) ms"
    r"(?:\s*/\s*(\d+) (?:tokens|runs))?(?:\s*\(\s*(?:[\d.]+|[-+]?(?:inf|nan)) ms per token,"
    r"\s*(\d+(?:\.\d+)?|[-+]?(?:inf|nan)) tokens per second\))?"
)
"""A timing line; ``%8.2f`` of a division by a zero duration or count prints ``inf`` / ``nan`` / ``-nan`` (C printf),
which :func:`~kvtop.logparse.values.to_float` reads as None: the counts stay, the rate is unknown."""
_SLOT_RE = re.compile(r"id\s+(\d+)\s*\|\s*task\s+(-?\d+)\s*\|\s*")
_C_LINE_RE = re.compile(r"(srv|slot|que|res|cmn|log)\s+([\w:~<>()]+?):\s")
_EXT_RE = re.compile(r"(INFO|WARN|WARNING|ERROR|ERR|DEBUG|VERB) \[\s*(\w+)\] (.*?)(?: \| (.*))?$")
_PREFIX_RE = re.compile(r"\d+\.\d+\.\d+\.\d+ ([IWEDT]) ")
_NUM_RE = {
    "n_past": re.compile(r"n_past = (\d+)"),
    "n_tokens": re.compile(r"n_tokens = (\d+)"),
    "progress": re.compile(r"progress = (\d+(?:\.\d+)?)"),
    "n_ctx": re.compile(r"n_ctx = (\d+)"),
    "n_keep": re.compile(r"n_keep = (\d+)"),
    "n_prompt_tokens": re.compile(r"n_prompt_tokens = (\d+)"),
}
_LOADING_RE = re.compile(r"loading model '([^']*)'")
_CACHED_RE = re.compile(r"cached n_tokens = (\d+)")
_NEW_PROMPT_RE = re.compile(r"n_ctx_slot = (\d+).*?(?:task\.n_tokens|n_prompt_tokens) = (\d+)")
_RELEASE_RE = re.compile(r"stop processing: n_tokens = (\d+)")
_REJECTED_RE = re.compile(
    r"(?:request|input) \((\d+) tokens\) (?:exceeds the available context size|is larger than the max context size)"
    r" \((\d+) tokens\)"
)
_TASK_ID_RE = re.compile(r"task id = (\d+)")


@dataclass(frozen=True, slots=True)
class TimingPart:
    """One line of a request's timing report (not an event: the parser joins the parts)."""

    part: str
    """``prompt``, ``eval``, ``total`` or ``header`` (a ``slot print_timing`` line without numbers)."""
    line_no: int
    time: datetime | None
    raw: str
    tokens: int | None = None
    ms: float | None = None
    tps: float | None = None
    slot: int | None = None
    task: int | None = None


def timing_part(
    text_part: str, n: int, text: str, time: TimeFn, slot: int | None = None, task: int | None = None
) -> TimingPart | None:
    """A timing line (``prompt eval time = 519.73 ms / 13 tokens (…, 25.01 tokens per second)``), or None."""
    m = _TIMING_RE.search(text_part)
    if m is None:
        return None
    what = m.group(1)
    if what in ("load", "sample"):
        return None
    part = "prompt" if what == "prompt eval" else "total" if what == "total" else "eval"
    return TimingPart(
        part, n, time(), sanitize(text), to_count(m.group(3)), to_float(m.group(2)), to_float(m.group(4)), slot, task
    )


def is_bare_timing(body: str) -> bool:
    """Older llama-server prints ``prompt eval time = …`` lines with no prefix (§4.10)."""
    s = body.lstrip()
    return s.startswith(("prompt eval time", "eval time", "total time", "generation eval time"))


def parse_server_line(body: str, n: int, text: str, time: TimeFn) -> list[LogEvent] | TimingPart | None:
    """A llama-server ``srv``/``slot``/``que`` line; None when ``body`` is not one."""
    level = ""
    if body[:1].isdigit():
        pm = _PREFIX_RE.match(body)
        if pm is None:
            return None
        level = pm.group(1)
        body = body[pm.end() :]
    m = _C_LINE_RE.match(body)
    if m is None:
        return None
    func = m.group(2)
    rest = body[m.end() :]
    slot = task = None
    sm = _SLOT_RE.match(rest)
    if sm is not None:
        slot, task = to_count(sm.group(1)), to_count(sm.group(2))
        rest = rest[sm.end() :]
    if "cache state:" in rest or "context checkpoint" in rest or "usage of mmproj" in rest:
        found = parse_memory_line(rest, n, sanitize(text), time, slot)
        if found is not None:
            return [*found]
    if func == "print_timing":
        part = timing_part(rest, n, text, time, slot, task)
        if part is None:
            # a bare "slot print_timing: id 0 | task 0 |" heads unprefixed timing lines (older builds);
            # anything else ("graphs reused = 7") is not part of the numbers
            return TimingPart("header", n, None, "", slot=slot, task=task) if not rest.strip() else []
        return part
    if func == "launch_slot_" and rest.startswith("processing task"):
        return [SlotActivity(n, time(), sanitize(text), "start", slot, task)]
    if rest.startswith("new prompt"):
        pm = _NEW_PROMPT_RE.search(rest)
        return [
            SlotActivity(
                n,
                time(),
                sanitize(text),
                "prompt",
                slot,
                task,
                to_count(pm.group(1)) if pm else None,
                to_count(pm.group(2)) if pm else None,
            )
        ]
    if rest.startswith("cached n_tokens"):
        cm = _CACHED_RE.match(rest)
        if cm is not None:
            return [PrefillProgress(n, time(), sanitize(text), slot, task, to_count(cm.group(1)))]
    if func == "init_sampler" or rest.startswith("prompt done"):
        return [SlotActivity(n, time(), sanitize(text), "prompt_done", slot, task)]
    if func == "release" and "stop processing" in rest:
        rm = _RELEASE_RE.search(rest)
        return [
            SlotActivity(
                n, time(), sanitize(text), "release", slot, task, n_tokens=to_count(rm.group(1)) if rm else None
            )
        ]
    if "progress" in rest and "n_tokens" in rest:
        return [
            PrefillProgress(
                n,
                time(),
                sanitize(text),
                slot,
                task,
                _num(rest, "n_past"),
                _num(rest, "n_tokens"),
                to_float(_text(rest, "progress")),
            )
        ]
    if rest.startswith("input truncated"):
        return [
            Truncation(
                n,
                time(),
                sanitize(text),
                _num(rest, "n_ctx"),
                None,
                _num(rest, "n_keep"),
                _num(rest, "n_prompt_tokens"),
            )
        ]
    if " tokens) " in rest:
        rj = _REJECTED_RE.search(rest)
        if rj is not None:
            tm = _TASK_ID_RE.match(rest)
            prompt_tokens, n_ctx = to_count(rj.group(1)), to_count(rj.group(2))
            if prompt_tokens is None or n_ctx is None:
                return []
            return [
                PromptRejected(n, time(), sanitize(text), prompt_tokens, n_ctx, to_count(tm.group(1)) if tm else task)
            ]
    if func == "load_model":
        if rest.startswith("loading model"):
            lm = _LOADING_RE.search(rest)
            path = lm.group(1) if lm else None
            return [ModelLoad(n, time(), sanitize(text), blob_of(path), path, "llama-server")]
        if "fail" in rest or "error" in rest:
            return [LoadFailed(n, time(), sanitize(text), rest.strip(), blob_of(rest))]
    if level in ("W", "E"):
        return [UnknownWarning(n, time(), sanitize(text), "WARN" if level == "W" else "ERROR", rest.strip(), func)]
    return []


def _slot_init(msg: str, pairs: dict[str, Any], n: int, text: str, when: TimeFn) -> list[LogEvent]:
    """The 2024 server's slot set-up (``llm/ext_server/server.cpp`` ``initialize()``/``init()``).

    ``LOG_INFO("initializing slots", {{"n_slots", params.n_parallel}})`` and, per slot,
    ``LOG_INFO("new slot", {{"slot_id"|"id_slot", i}, {"n_ctx_slot", n_ctx / n_parallel}})``, printed
    as JSON (``{"function":"initialize","level":"INFO","line":…,"msg":"initializing slots","n_slots":4,…}``)
    or as ``INFO [initialize] new slot | n_ctx_slot=2048 slot_id=0 …``: the load's slots and per-slot
    context, as :class:`ContextParams` (``n_seq_max`` / ``n_ctx_per_seq``).
    """
    if msg == "initializing slots":
        slots = to_count(pairs.get("n_slots"))
        if slots is None or slots <= 0:
            return []
        return [ContextParams(n, when(), sanitize(text), n_seq_max=slots, grammar="ext_server")]
    per_slot = to_count(pairs.get("n_ctx_slot"))
    if per_slot is None or per_slot <= 0:
        return []
    return [ContextParams(n, when(), sanitize(text), n_ctx_per_seq=per_slot, grammar="ext_server")]


def _text(rest: str, key: str) -> str | None:
    m = _NUM_RE[key].search(rest)
    return m.group(1) if m else None


def _num(rest: str, key: str) -> int | None:
    return to_count(_text(rest, key))


def parse_ext_server(body: str, n: int, text: str) -> list[LogEvent] | TimingPart | None:
    """Era A C++ server ``LEVEL [function] message | k=v …``; None when ``body`` is not one."""
    m = _EXT_RE.match(body)
    if m is None:
        return None
    level, func, msg, attrs = m.group(1), m.group(2), m.group(3), m.group(4) or ""
    pairs = slog_pairs(attrs) if attrs else {}
    return _runner_record(level, func, msg.strip(), pairs, n, text, to_float(pairs.get("timestamp")))


def parse_runner_json(body: str, n: int, text: str) -> list[LogEvent] | TimingPart | None:
    """A JSON runner log line (``{"function":…,"level":…,"msg"|"message":…}``); None if it is not one."""
    try:
        obj = json.loads(body)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    msg = obj.get("msg", obj.get("message"))
    if not isinstance(msg, str):
        return None
    pairs = {k: str(v) for k, v in obj.items() if not isinstance(v, (dict, list))}
    stamp = obj.get("timestamp")
    return _runner_record(
        str(obj.get("level", "")),
        str(obj.get("function", "")),
        msg,
        pairs,
        n,
        text,
        to_float(str(stamp)) if isinstance(stamp, (int, float)) and not isinstance(stamp, bool) else None,
    )  # to_float: NaN, infinity and 1e400 are no time


def _runner_record(
    level: str, func: str, msg: str, pairs: dict[str, Any], n: int, text: str, stamp: float | None
) -> list[LogEvent] | TimingPart:
    def when() -> datetime | None:
        return epoch_time(stamp) if stamp is not None else None

    if func == "print_timings" or "eval time" in msg or msg.startswith("total time"):
        part = timing_part(msg, n, text, when, to_count(pairs.get("slot_id")), to_count(pairs.get("task_id")))
        if part is not None:
            return part
    if msg.startswith("input truncated"):
        return [
            Truncation(
                n, when(), sanitize(text), to_count(pairs.get("n_ctx")), None, to_count(pairs.get("n_keep")), None
            )
        ]
    if msg == "initializing slots" or msg == "new slot":
        return _slot_init(msg, pairs, n, text, when)
    if msg == "unable to load model" or msg.startswith("failed to load model") or msg == "error loading model":
        return [LoadFailed(n, when(), sanitize(text), msg, blob_of(str(pairs.get("model", ""))))]
    if level in ("WARN", "WARNING", "ERROR", "ERR"):
        lv = "ERROR" if level in ("ERROR", "ERR") else "WARN"
        return [UnknownWarning(n, when(), sanitize(text), lv, msg, func or None)]
    return []
