"""``kvtop inspect-log PATH|- [--json]``: what an Ollama server log says about each model load.

Reads the whole log (a file, or standard input for ``-``) as bytes, line by line: invalid
UTF-8 becomes U+FFFD, CRLF is fine, a physical line is read up to :data:`MAX_LINE_BYTES` (the
rest of a longer one is skipped). The log is streamed: lines go through the parser and the
loads are grouped as they come (:class:`kvtop.logparse.loads.LoadStream`); each complete load
and each reported event is written to an anonymous temporary file (JSON lines) and the report
is written from those at the end, so memory is bounded by one load, not by the lines, loads
or events, and time is linear. The human report lists a load's first 20 requests and the
first :data:`MAX_SERVER_EVENTS` server events and counts the rest (``--json`` lists all); a
load's finding lines stop after ``MAX_FINDING_EVENTS`` incidents of their kind (counted).
Prints, per model load, the model blob, runner era, context
(total, slots, per slot), K/V cache types, flash attention as resolved, offloaded layers,
weights/KV/compute per device (binary units and exact bytes), the scheduler's estimates, where the
load landed and why (``model.placement_reason``: free memory and layers per GPU, what overflowed, the
reason and the fix; also the ``placement`` member of each load in ``--json``) and
the findings (context over the training context, spill, KV type fallback, flash attention
forced off, truncations, OOM, evictions, load failures); then the server config. ``--json`` prints the document of
:func:`kvtop.logparse.inspect_events` instead (the shape of ``corpus/expected/README.md``), each load with its
``placement`` (:func:`inspect_document` is the same document read at once).

Exit status: 0; 1 when no line of the file is one kvtop reads as an Ollama server log line
(the report is replaced by a message saying so and where the server log usually is; ``--json``
still prints the empty document); 2 with a one-line message when the file is missing or
unreadable (or the arguments are wrong). Text from the log is untrusted: control characters are
replaced in the human output.
"""

from __future__ import annotations

import argparse
import bisect
import dataclasses
import io
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import IO, Any

from kvtop.logparse import LogParser
from kvtop.logparse.cmdline import era_of_version
from kvtop.logparse.events import LogEvent, ServerConfig, ServerListening
from kvtop.logparse.inspect_doc import event_json, inspect_events, load_json
from kvtop.logparse.load_build import Load
from kvtop.logparse.load_stream import MAX_LOAD_REQUESTS, REQUEST_KINDS, LoadStream
from kvtop.logparse.parser import iter_events
from kvtop.model.placement_reason import placement_json, placement_report, placement_settings
from kvtop.model.placement_text import placement_rows
from kvtop.textsafe import emit, safe, safe_block, safe_json
from kvtop.ui.format import exact_bytes, ibytes

EXIT_OK = 0
EXIT_NOT_A_LOG = 1
EXIT_UNREADABLE = 2

WHERE_THE_LOG_IS = (
    "journalctl -u ollama (systemd), ~/.ollama/logs/server.log (macOS app), "
    "docker logs CONTAINER, or the output of `ollama serve`"
)
"""Where an Ollama server log is usually found (said when a file holds no Ollama line)."""

MAX_LINE_BYTES = 1024 * 1024
"""The longest physical line read (1 MiB; the parser glues records of at most 256 KiB)."""

MAX_SERVER_EVENTS = 200

ALWAYS_SHOWN_KINDS = frozenset({"oom", "load_failed", "eviction"})
"""Server events listed even past ``MAX_SERVER_EVENTS``: the ones a reader came for (a burst of
routine truncations never hides an OOM); the rest past the cap are counted by kind."""
"""Server events (not tied to a load) the human report lists; the rest are counted."""

ERA_RELEASES = {
    "pre-A": "before v0.1.32 (2023 runners)",
    "A": "v0.1.32–v0.3.14, C++ ollama_llama_server",
    "B1": "v0.4.0–v0.11.4, Go runner with CLI flags",
    "B2": "v0.11.5–v0.24.0, Go runner with /load requests",
    "C": "v0.30.0+, upstream llama-server",
}
"""Runner eras (docs/ollama-internals.md §0)."""

CONFIG_KEYS = (
    "OLLAMA_CONTEXT_LENGTH",
    "OLLAMA_NUM_PARALLEL",
    "OLLAMA_FLASH_ATTENTION",
    "OLLAMA_KV_CACHE_TYPE",
    "OLLAMA_MAX_LOADED_MODELS",
    "OLLAMA_KEEP_ALIVE",
    "OLLAMA_GPU_OVERHEAD",
    "OLLAMA_SCHED_SPREAD",
    "OLLAMA_NEW_ENGINE",
    "OLLAMA_DEBUG",
    "OLLAMA_HOST",
    "OLLAMA_MODELS",
)
"""Config keys shown first (the ones that decide memory use); the rest follow in map order."""


def build_parser() -> argparse.ArgumentParser:
    """Arguments of ``kvtop inspect-log``."""
    p = argparse.ArgumentParser(
        prog="kvtop inspect-log",
        description="Read an Ollama server log and report, per model load, where its memory went.",
    )
    p.add_argument(
        "path", metavar="PATH|-", help="server log file (server.log, journalctl or docker output); - for stdin"
    )
    p.add_argument("--json", action="store_true", help="print the JSON document instead of the report")
    p.add_argument(
        "--changes", action="store_true", help="list the restarts, version and server config changes instead"
    )
    return p


def _lines(stream: IO[bytes], max_bytes: int = MAX_LINE_BYTES) -> Iterator[str]:
    """Each physical line as text (its first ``max_bytes`` when longer; the rest is skipped)."""
    readline = stream.readline
    skipping = False
    while raw := readline(max_bytes):
        if skipping:  # the rest of an over-long line
            skipping = not raw.endswith(b"\n")
            continue
        skipping = len(raw) >= max_bytes and not raw.endswith(b"\n")
        yield raw.decode("utf-8", "replace")


def main_inspect_log(argv: list[str]) -> int:
    """Run ``kvtop inspect-log`` with ``argv`` (the arguments after the subcommand); returns the exit status."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse prints its own message
        return EXIT_OK if exc.code == 0 else EXIT_UNREADABLE
    if args.changes:  # what changed between the log's server starts: kvtop/inspect_changes.py
        from kvtop.inspect_changes import main_log_changes

        return main_log_changes(args.path, as_json=args.json)
    path: str = args.path
    try:
        if path == "-":
            result = _inspect(sys.stdin.buffer)
            name = "<stdin>"
        else:
            with open(path, "rb") as fh:
                result = _inspect(fh)
            name = path
    except OSError as exc:
        reason = exc.strerror or exc.__class__.__name__
        emit(f"kvtop inspect-log: cannot read {safe(path)}: {safe(reason)}")
        return EXIT_UNREADABLE

    def write_json(text: str) -> None:  # pieces of safe_json's text
        sys.stdout.write(text)

    def write_text(text: str) -> None:
        sys.stdout.write(safe_block(text))

    not_a_log = result.parsed_events == 0
    try:
        with result:
            if args.json:
                result.write_json(write_json)
                sys.stdout.write("\n")
            elif not not_a_log:
                result.write_report(write_text, source=name)
        sys.stdout.flush()
    except BrokenPipeError:  # `kvtop inspect-log x | head`: the reader left, which is fine
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - keeps the interpreter's final flush quiet
        except OSError:
            pass
    if not_a_log:
        emit(
            f"kvtop inspect-log: {safe(name)}: no Ollama server log line in its {result.lines:,} line(s) "
            f"(nothing about model loads, memory, requests or the server config). Is it the server log? "
            f"It is usually at: {WHERE_THE_LOG_IS}."
        )
        return EXIT_NOT_A_LOG
    return EXIT_OK


class _Spool:
    """JSON values in an anonymous temporary file (JSON lines): written once, then read back in order."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile("w+", encoding="utf-8")  # noqa: SIM115 - closed by close()
        self.count = 0

    def add(self, value: Any) -> None:
        self._file.write(json.dumps(value, ensure_ascii=False))
        self._file.write("\n")
        self.count += 1

    def __iter__(self) -> Iterator[Any]:
        self._file.flush()
        self._file.seek(0)
        for line in self._file:
            yield json.loads(line)

    def close(self) -> None:
        self._file.close()


class Inspection:
    """A log read through the parser and grouped (:func:`_inspect`): what the report needs, with
    the loads and events spooled to temporary files. Use it as a context manager (closes them).

    Attributes:
        lines: Physical lines read.
        server: The document's ``server`` object.
    """

    def __init__(self, stream: LoadStream, loads: _Spool, events: _Spool, lines: int, parsed_events: int = 0) -> None:
        self._stream, self._loads, self._events = stream, loads, events
        self.lines = lines
        self.parsed_events = parsed_events
        """Events the parser read from the lines (0: no line is an Ollama server log line kvtop knows)."""
        self.server: dict[str, Any] = {}
        if stream.version is not None or stream.config is not None:
            self.server = {
                "version": stream.version,
                "config": dict(stream.config) if stream.config is not None else None,
            }

    def __enter__(self) -> Inspection:
        return self

    def __exit__(self, *exc: object) -> None:
        self._loads.close()
        self._events.close()

    def loads(self) -> Iterator[tuple[dict[str, Any], list[dict[str, Any]], int]]:
        """Each load's JSON object, its first requests (event objects) and their total, in log order."""
        era = self._stream.era()
        for obj, requests, total in self._loads:
            if obj["era"] is None:
                obj["era"] = era
            yield obj, requests, total

    def events(self) -> Iterator[dict[str, Any]]:
        """The document's events, in log order."""
        resolve = self._stream.resolve
        for obj in self._events:
            obj["load"] = resolve(obj["load"])
            yield obj

    def write_json(self, write: Callable[[str], None]) -> None:
        """Write the ``--json`` document (without its final newline): the text of
        ``safe_json(document)``, in pieces."""
        write('{\n  "server": ' + _indented(safe_json(self.server), "  ", first=False) + ",\n")
        write('  "loads": ')
        _json_array(write, (obj for obj, _, _ in self.loads()))
        write(',\n  "events": ')
        _json_array(write, self.events())
        write("\n}")

    def write_report(self, write: Callable[[str], None], *, source: str = "") -> None:
        """Write the human report (as :func:`render_report`), one load at a time."""
        _write_report(
            write,
            source=source,
            lines=self.lines,
            load_count=self._loads.count,
            event_count=self._events.count,
            loads=self.loads(),
            server_events=(e for e in self.events() if e.get("load") is None),
            server=self.server,
        )


def _indented(text: str, prefix: str, *, first: bool) -> str:
    lines = text.split("\n")
    return "\n".join((prefix + line) if (i or first) else line for i, line in enumerate(lines))


def _json_array(write: Callable[[str], None], items: Iterable[Any]) -> None:
    """An array at nesting level 1 of the document, laid out as ``json.dumps(..., indent=2)`` does."""
    empty = True
    for item in items:
        write(("[\n" if empty else ",\n") + _indented(safe_json(item), "    ", first=True))
        empty = False
    write("[]" if empty else "\n  ]")


def _inspect(stream: IO[bytes]) -> Inspection:
    """Read ``stream`` to its end through the parser and a :class:`LoadStream`; spool loads and events.

    Raises:
        OSError: ``stream`` cannot be read, or no temporary file can be written.
    """
    parser = LogParser()
    loads, events = _Spool(), _Spool()
    try:
        seen = ServerSeen()

        def on_load(load: Load, requests: list[LogEvent], total: int) -> None:
            obj = load_json(load)
            obj["placement"] = seen.placement(load, prune=True)
            loads.add([obj, [event_json(e, load.index) for e in requests], total])

        def on_incident(event: LogEvent, load: int | None) -> None:
            events.add(event_json(event, load))

        grouper = LoadStream(on_load, on_incident)
        feed = grouper.feed
        parsed = 0
        for event in iter_events(_lines(stream), parser=parser):
            parsed += 1
            seen.see(event)
            feed(event)
        grouper.finish()
    except BaseException:
        loads.close()
        events.close()
        raise
    if parser.errors:
        emit(
            f"kvtop inspect-log: {parser.errors} line(s) could not be parsed and were skipped "
            f"(last: {safe(parser.last_error or '', 200)})"
        )
    return Inspection(grouper, loads, events, parser.line_no, parsed)


class ServerSeen:
    """The ``server config`` and version lines of a log by line number, so that a load's placement reads the
    settings in effect when it started (the last config line before its first line) and, when its own lines do
    not say, the runner era of the version then. Entries older than needed are dropped as loads come in order."""

    def __init__(self) -> None:
        self._configs: list[tuple[int, Mapping[str, str]]] = []
        self._versions: list[tuple[int, str]] = []

    def see(self, event: LogEvent) -> None:
        """Keep ``event`` when it is a ``server config`` or a version line."""
        if isinstance(event, ServerConfig):
            self._configs.append((event.line_no, event.env))
        elif isinstance(event, ServerListening) and event.version:
            self._versions.append((event.line_no, event.version))

    @staticmethod
    def _before(items: list[tuple[int, Any]], line: int, prune: bool) -> Any:
        at = bisect.bisect_left(items, line, key=lambda item: item[0]) - 1
        if at < 0:
            return None
        if prune and at > 0:
            del items[:at]
            at = 0
        return items[at][1]

    def placement(self, load: Load, *, prune: bool = False) -> dict[str, Any] | None:
        """Where ``load`` landed and why (``model.placement_reason``), the JSON member ``placement``."""
        config = self._before(self._configs, load.first_line, prune)
        if load.era is None:
            era = era_of_version(self._before(self._versions, load.first_line, prune))
            if era is not None:
                load = dataclasses.replace(load, era=era)
        return placement_json(placement_report(load, settings=placement_settings(None, config)))


def inspect_document(lines: Iterable[str]) -> dict[str, Any]:
    """The ``inspect-log --json`` document of ``lines`` read at once (``kvtop.logparse.inspect_lines``) with each
    load's ``placement``, as the streamed command writes it."""
    events = list(iter_events(lines))
    doc = inspect_events(events)
    seen = ServerSeen()
    placements: dict[int, dict[str, Any] | None] = {}

    def on_load(load: Load, requests: list[LogEvent], total: int) -> None:
        placements[load.index] = seen.placement(load)

    stream = LoadStream(on_load, lambda event, load: None)
    for event in events:
        seen.see(event)
        stream.feed(event)
    stream.finish()
    for obj in doc["loads"]:
        obj["placement"] = placements.get(obj["index"])
    return doc


# --------------------------------------------------------------------------------------------
# The human report


def _bytes(n: int | None) -> str:
    return "not in the log" if n is None else exact_bytes(n)


def _devices(per_device: Mapping[str, int]) -> str:
    if not per_device:
        return "none in the log"
    return "; ".join(f"{safe(d)} {exact_bytes(b)}" for d, b in per_device.items())


def _kv_total(load: Mapping[str, Any]) -> str:
    """The KV total, and what the excerpt's per-device KV lines say about it (the load's
    ``kv_coverage``, :func:`kvtop.logparse.loads.kv_coverage`): a total that holds devices whose
    KV lines are not in the excerpt says how much, and a total that is only the CPU's while the
    load used a GPU says the GPU's KV line is missing."""
    text = _bytes(load.get("kv_bytes"))
    cover = load.get("kv_coverage")
    if cover is None:
        return text
    listed = ", ".join(safe(d) for d in cover["listed_devices"])
    elsewhere = cover["other_devices"]
    also = f" (this load also used {', '.join(safe(d) for d in elsewhere)})" if elsewhere else ""
    if cover["unlisted_bytes"]:
        return (
            f"{text}: includes {ibytes(cover['unlisted_bytes'])} on devices whose KV lines are not in this "
            f"excerpt; the KV lines here ({listed}) add up to {ibytes(cover['listed_bytes'])}{also}"
        )
    offloaded = load.get("layers_offloaded")
    layers = f" {offloaded}/{_value(load.get('layers_total'))} layers are on the GPU" if offloaded else " it used a GPU"
    return (
        f"{text}: counts {listed} only; no GPU KV line is in the log, although"
        f"{layers}{also} (missing from the excerpt?)"
    )


def _value(v: object, unit: str = "") -> str:
    return "?" if v is None else f"{v}{unit}"


def render_report(doc: Mapping[str, Any], *, source: str = "", lines: int | None = None) -> str:
    """The human report of an ``inspect_events`` document (plain text, control characters replaced)."""
    out = io.StringIO()
    loads = doc.get("loads", [])
    events = doc.get("events", [])
    requests: dict[Any, list[Mapping[str, Any]]] = {}
    for e in events:  # one pass: each load's requests
        if e.get("load") is not None and e.get("kind") in REQUEST_KINDS:
            requests.setdefault(e.get("load"), []).append(e)
    per_load = ((load, requests.get(load.get("index"), [])) for load in loads)
    _write_report(
        out.write,
        source=source,
        lines=lines,
        load_count=len(loads),
        event_count=len(events),
        loads=((load, mine[:MAX_LOAD_REQUESTS], len(mine)) for load, mine in per_load),
        server_events=(e for e in events if e.get("load") is None),
        server=doc.get("server") or {},
    )
    return out.getvalue()


def _write_report(
    w: Callable[[str], object],
    *,
    source: str,
    lines: int | None,
    load_count: int,
    event_count: int,
    loads: Iterable[tuple[Mapping[str, Any], Sequence[Mapping[str, Any]], int]],
    server_events: Iterable[Mapping[str, Any]],
    server: Mapping[str, Any],
) -> None:
    header = f"kvtop inspect-log: {safe(source)}" if source else "kvtop inspect-log"
    w(header + "\n")
    counts = f"{load_count} model load(s), {event_count} event(s)"
    if lines is not None:
        counts = f"{lines:,} lines, " + counts
    w(f"  {counts}\n")
    for load, requests, total in loads:
        _render_load(w, load, requests, total)
    cut: dict[str, int] = {}
    for shown, e in enumerate(server_events):
        if shown == 0:
            w("\nserver events\n")
        kind = str(e.get("kind") or "?")
        if shown < MAX_SERVER_EVENTS or kind in ALWAYS_SHOWN_KINDS:
            w(f"  {_event_text(e)}\n")
        else:
            cut[kind] = cut.get(kind, 0) + 1
    if cut:
        kinds = ", ".join(f"{safe(k, 40)} {n:,}" for k, n in sorted(cut.items(), key=lambda kv: -kv[1]))
        w(f"  … {sum(cut.values()):,} more: {kinds} (--json lists all)\n")
    _render_server(w, server)


def _render_load(w: Any, load: Mapping[str, Any], requests: Sequence[Mapping[str, Any]], requests_total: int) -> None:
    """One load's section; ``requests``: its first truncations / request timings, of ``requests_total``."""
    index = load.get("index")
    w(
        f"\nload {index + 1 if isinstance(index, int) else '?'}  (log lines {load.get('first_line')}–{load.get('last_line')})\n"
    )
    rows: list[tuple[str, str]] = []
    blob = load.get("model_blob") or load.get("model_name")
    model = safe(blob) if blob else "not named in the log"
    if load.get("mmproj_blob") and load.get("mmproj_blob") != blob:
        model += f"  (projector {safe(load['mmproj_blob'])})"
    rows.append(("model", model))
    era = load.get("era")
    runner = f"era {era} ({ERA_RELEASES.get(era, '?')})" if era else "era not known"
    if load.get("engine"):
        runner += f", {safe(load['engine'])} engine"
    if load.get("port"):
        runner += f", port {load['port']}"
    rows.append(("runner", runner))
    total, par, per = load.get("num_ctx_total"), load.get("parallel"), load.get("num_ctx_per_seq")
    context = f"num_ctx total {_value(total)} = {_value(par)} slot(s) × {_value(per)} per slot"
    if isinstance(load.get("n_ctx_train"), int):
        context += f" (model trained on {load['n_ctx_train']})"
    rows.append(("context", context))
    k, v = load.get("kv_type_k"), load.get("kv_type_v")
    rows.append(("KV cache type", f"K {safe(k) if k else '? (f16 unless printed)'}, V {safe(v) if v else '?'}"))
    fa = load.get("flash_attention")
    requested = load.get("flash_attention_requested")
    if fa:
        rows.append(("flash attention", fa))
    elif requested:
        rows.append(("flash attention", f"{safe(str(requested))} requested, not resolved in the log"))
    else:
        rows.append(("flash attention", "not in the log"))
    off, tot = load.get("layers_offloaded"), load.get("layers_total")
    rows.append(("layers on GPU", f"{_value(off)}/{_value(tot)}"))
    memory = load.get("memory") or {}
    rows.append(("weights", _devices(memory.get("weights") or {})))
    rows.append(("KV cache", _devices(memory.get("kv") or {})))
    rows.append(("compute", _devices(memory.get("compute") or {})))
    rows.append(("KV total", _kv_total(load)))
    est = load.get("estimates") or {}
    if any(est.get(key) is not None for key in ("kv", "full", "partial")):
        rows.append(
            (
                "estimates",
                "scheduler, not allocations: "
                + ", ".join(
                    f"{key} ~{ibytes(est[key])}" for key in ("kv", "full", "partial") if est.get(key) is not None
                ),
            )
        )
    for label, text in rows:
        w(f"  {label:<16} {text}\n")
    placement = load.get("placement")
    if placement:
        w("  placement\n")
        for label, text in placement_rows(placement):
            w(f"    {safe(label, 16):<14} {safe(text, 600)}\n")
    findings = load.get("findings") or []
    if findings:
        w("  findings\n")
        for f in findings:
            w(f"    ! {safe(str(f))}\n")
    if requests:
        w("  requests\n")
        for e in requests[:MAX_LOAD_REQUESTS]:
            w(f"    {_event_text(e)}\n")
        if requests_total > MAX_LOAD_REQUESTS:
            w(f"    … {requests_total - MAX_LOAD_REQUESTS} more (--json lists all)\n")


def _event_text(e: Mapping[str, Any]) -> str:
    kind = e.get("kind", "?")
    where = f"line {e.get('line')}"
    if kind == "truncation":
        detail = f"prompt {_value(e.get('prompt'))} tokens cut to {_value(e.get('new'))} (limit {_value(e.get('limit'))}, keep {_value(e.get('keep'))})"
    elif kind == "request_timing":
        detail = (
            f"prompt {_value(e.get('prompt_tokens'))} tokens at {_value(e.get('prompt_tps'))} t/s, "
            f"generated {_value(e.get('eval_tokens'))} at {_value(e.get('eval_tps'))} t/s"
        )
    elif kind == "kv_type_fallback":
        detail = f"requested {safe(str(e.get('requested') or '?'))}: {safe(str(e.get('reason') or ''))}"
    else:
        detail = safe(str(e.get("reason") or ""), 160)
    return f"{where:<11} {kind:<27} {detail}"


def _render_server(w: Any, server: Mapping[str, Any]) -> None:
    w("\nserver\n")
    version = server.get("version")
    w(f"  {'version':<16} {safe(version) if version else 'not in the log'}\n")
    config = server.get("config")
    if not config:
        w(f"  {'config':<16} no 'server config' line in the log\n")
        return
    keys = [key for key in CONFIG_KEYS if key in config] + [key for key in config if key not in CONFIG_KEYS]
    w("  config\n")
    for key in keys:
        value = config[key]
        w(f"    {safe(key)}={safe(value) if value != '' else '(empty)'}\n")


if __name__ == "__main__":
    raise SystemExit(main_inspect_log(sys.argv[1:]))
