"""``kvtop inspect-log PATH|- [--json]``: what an Ollama server log says about each model load.

Reads the whole log (a file, or standard input for ``-``) as bytes, line by line: invalid
UTF-8 becomes U+FFFD, CRLF is fine, and memory stays bounded for a huge file because events
are grouped as they are parsed. Prints, per model load, the model blob, runner era, context
(total, slots, per slot), K/V cache types, flash attention as resolved, offloaded layers,
weights/KV/compute per device (binary units and exact bytes), the scheduler's estimates and
the findings (context over the training context, spill, KV type fallback, flash attention
forced off, truncations, OOM, evictions, load failures); then the server config. ``--json`` prints the document of
:func:`kvtop.logparse.inspect_events` instead (the shape of ``corpus/expected/README.md``).

Exit status: 0, or 2 with a one-line message when the file is missing or unreadable (or the
arguments are wrong). Text from the log is untrusted: control characters are replaced in the
human output.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
from collections.abc import Iterator, Mapping
from typing import IO, Any

from kvtop.logparse import LogParser
from kvtop.logparse.parser import iter_events
from kvtop.logparse.loads import inspect_events
from kvtop.ui.format import exact_bytes, ibytes, safe

EXIT_OK = 0
EXIT_UNREADABLE = 2

ERA_RELEASES = {
    "pre-A": "before v0.1.32 (2023 runners)",
    "A": "v0.1.32–v0.3.14, C++ ollama_llama_server",
    "B1": "v0.4.0–v0.11.4, Go runner with CLI flags",
    "B2": "v0.11.5–v0.24.0, Go runner with /load requests",
    "C": "v0.30.0+, upstream llama-server",
}
"""Runner eras (docs/ollama-reference.md §0)."""

CONFIG_KEYS = (
    "OLLAMA_CONTEXT_LENGTH", "OLLAMA_NUM_PARALLEL", "OLLAMA_FLASH_ATTENTION", "OLLAMA_KV_CACHE_TYPE",
    "OLLAMA_MAX_LOADED_MODELS", "OLLAMA_KEEP_ALIVE", "OLLAMA_GPU_OVERHEAD", "OLLAMA_SCHED_SPREAD",
    "OLLAMA_NEW_ENGINE", "OLLAMA_DEBUG", "OLLAMA_HOST", "OLLAMA_MODELS",
)
"""Config keys shown first (the ones that decide memory use); the rest follow in map order."""


def build_parser() -> argparse.ArgumentParser:
    """Arguments of ``kvtop inspect-log``."""
    p = argparse.ArgumentParser(
        prog="kvtop inspect-log",
        description="Read an Ollama server log and report, per model load, where its memory went.",
    )
    p.add_argument("path", metavar="PATH|-", help="server log file (server.log, journalctl or docker output); - for stdin")
    p.add_argument("--json", action="store_true", help="print the JSON document instead of the report")
    return p


def _lines(stream: IO[bytes]) -> Iterator[str]:
    for raw in stream:
        yield raw.decode("utf-8", "replace")


def main_inspect_log(argv: list[str]) -> int:
    """Run ``kvtop inspect-log`` with ``argv`` (the arguments after the subcommand); returns the exit status."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse prints its own message
        return EXIT_OK if exc.code == 0 else EXIT_UNREADABLE
    path: str = args.path
    try:
        if path == "-":
            doc, lines = _inspect(sys.stdin.buffer)
            name = "<stdin>"
        else:
            with open(path, "rb") as fh:
                doc, lines = _inspect(fh)
            name = path
    except OSError as exc:
        reason = exc.strerror or exc.__class__.__name__
        print(f"kvtop inspect-log: cannot read {safe(path)}: {safe(reason)}", file=sys.stderr)
        return EXIT_UNREADABLE
    text = json.dumps(doc, indent=2) + "\n" if args.json else render_report(doc, source=name, lines=lines)
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:  # `kvtop inspect-log x | head`: the reader left, which is fine
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - keeps the interpreter's final flush quiet
        except OSError:
            pass
    return EXIT_OK


def _inspect(stream: IO[bytes]) -> tuple[dict[str, Any], int]:
    parser = LogParser()
    doc = inspect_events(iter_events(_lines(stream), parser=parser))
    if parser.errors:
        print(f"kvtop inspect-log: {parser.errors} line(s) could not be parsed and were skipped "
              f"(last: {safe(parser.last_error or '', 200)})", file=sys.stderr)
    return doc, parser.line_no


# --------------------------------------------------------------------------------------------
# The human report


def _bytes(n: int | None) -> str:
    return "not in the log" if n is None else exact_bytes(n)


def _devices(per_device: Mapping[str, int]) -> str:
    if not per_device:
        return "none in the log"
    return "; ".join(f"{safe(d)} {ibytes(b)} ({b:,} B)" for d, b in per_device.items())


def _value(v: object, unit: str = "") -> str:
    return "?" if v is None else f"{v}{unit}"


def render_report(doc: Mapping[str, Any], *, source: str = "", lines: int | None = None) -> str:
    """The human report of an ``inspect_events`` document (plain text, control characters replaced)."""
    out = io.StringIO()
    w = out.write
    loads = doc.get("loads", [])
    events = doc.get("events", [])
    header = f"kvtop inspect-log: {safe(source)}" if source else "kvtop inspect-log"
    w(header + "\n")
    counts = f"{len(loads)} model load(s), {len(events)} event(s)"
    if lines is not None:
        counts = f"{lines:,} lines, " + counts
    w(f"  {counts}\n")
    for load in loads:
        _render_load(w, load, events)
    unattached = [e for e in events if e.get("load") is None]
    if unattached:
        w("\nserver events\n")
        for e in unattached:
            w(f"  {_event_text(e)}\n")
    _render_server(w, doc.get("server") or {})
    return out.getvalue()


def _render_load(w: Any, load: Mapping[str, Any], events: list[Mapping[str, Any]]) -> None:
    index = load.get("index")
    w(f"\nload {index + 1 if isinstance(index, int) else '?'}  (log lines {load.get('first_line')}–{load.get('last_line')})\n")
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
    rows.append(("KV total", _bytes(load.get("kv_bytes"))))
    est = load.get("estimates") or {}
    if any(est.get(key) is not None for key in ("kv", "full", "partial")):
        rows.append(("estimates", "scheduler, not allocations: " + ", ".join(
            f"{key} {ibytes(est[key])}" for key in ("kv", "full", "partial") if est.get(key) is not None)))
    for label, text in rows:
        w(f"  {label:<16} {text}\n")
    findings = load.get("findings") or []
    if findings:
        w("  findings\n")
        for f in findings:
            w(f"    ! {safe(str(f))}\n")
    mine = [e for e in events if e.get("load") == index and e.get("kind") in ("truncation", "request_timing")]
    if mine:
        w("  requests\n")
        for e in mine[:20]:
            w(f"    {_event_text(e)}\n")
        if len(mine) > 20:
            w(f"    … {len(mine) - 20} more (--json lists all)\n")


def _event_text(e: Mapping[str, Any]) -> str:
    kind = e.get("kind", "?")
    where = f"line {e.get('line')}"
    if kind == "truncation":
        detail = f"prompt {_value(e.get('prompt'))} tokens cut to {_value(e.get('new'))} (limit {_value(e.get('limit'))}, keep {_value(e.get('keep'))})"
    elif kind == "request_timing":
        detail = (f"prompt {_value(e.get('prompt_tokens'))} tokens at {_value(e.get('prompt_tps'))} t/s, "
                  f"generated {_value(e.get('eval_tokens'))} at {_value(e.get('eval_tps'))} t/s")
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
