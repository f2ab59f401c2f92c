"""What following a busy server log keeps in memory: the dashboard's parse + apply path fed a
time-compressed log, Python's traced memory and the size of each log store every simulated minute,
up to and past the 20,000-event cap (it must stop growing there, not add ~0.8 MiB/min).

Method
------
1. The lines: every file of the log corpus (``tests/fixtures/logs``, ``posted/`` and the recorded
   llama-server run), comment lines dropped, cycled in order (``--mix corpus``: loads of every era,
   allocations, warnings, access lines), or one recorded llama-server load followed by request
   timings and gin access lines (``--mix traffic``: a busy server serving one model). Each line's
   timestamp (slog ``time=``, Go logger and gin ``YYYY/MM/DD``, journald ``Mon DD HH:MM:SS``) is
   rewritten to the simulated clock, so every line is a new string, as read from a file.
2. ``--rate`` lines per simulated second (default 100), read as the dashboard reads them
   (``kvtop.engine.LogFeed``, the engine's one log loop): batches of ``--batch`` lines (default 20) into one
   ``LogParser`` (``feed`` each line, ``end_batch``), every batch's events and lines folded once per
   simulated second (the apply step: ``model.state.fold_log_events``), then the alerts evaluated
   once (``model.alerts.evaluate_state``). No real time passes: 30 simulated minutes take about a
   minute of CPU.
3. Every ``--every`` simulated minutes (default 1), after a garbage collection: ``tracemalloc``'s
   traced bytes (the whole process, minus a baseline taken before the first line), and the stores:
   events kept for the loads and the alerts (``LogState.load_events``) and for the events pane
   (``recent``), raw lines (``raw``), loads, the alerts' log scans memoised, and the bytes reachable
   from the kept events (each object counted once: the events, their strings, times and maps),
   per kept event.

Usage: ``python benchmarks/log_memory.py [--minutes 30] [--rate 100] [--mix corpus|traffic]``.
Prints one line per report and, last, one JSON object.
"""

from __future__ import annotations

import argparse
import gc
import json
import re
import sys
import time
import tracemalloc
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from kvtop.logparse.parser import LogParser  # noqa: E402
from kvtop.model.alerts import log_scan as alert_context  # noqa: E402
from kvtop.model.alerts import evaluate_state  # noqa: E402
from kvtop.model.state import fold_log_events  # noqa: E402
from kvtop.model.views import AppState  # noqa: E402

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "logs"
LOAD_LOG = FIXTURES / "llama-server-runs" / "gemma3-iswa-q8_0-fa-on-np2.log"
START = datetime(2026, 12, 1, 8, 0, 0, tzinfo=timezone.utc)

_ISO_RE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")
_GO_RE = re.compile(r"\d{4}/\d\d/\d\d( - | )\d\d:\d\d:\d\d")
_JOURNAL_RE = re.compile(r"\b(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ \d]\d \d\d:\d\d:\d\d")


def corpus_lines() -> list[str]:
    """Every corpus file's lines in name order (comment lines dropped)."""
    files = sorted(FIXTURES.glob("*.log")) + sorted((FIXTURES / "posted").glob("*.log")) + [LOAD_LOG]
    out: list[str] = []
    for f in files:
        out.extend(x for x in f.read_text(encoding="utf-8", errors="replace").splitlines() if not x.startswith("#"))
    return out


def traffic_lines() -> list[str]:
    """One recorded llama-server load, then request timings and gin access lines (a busy server)."""
    load = [x for x in LOAD_LOG.read_text(encoding="utf-8").splitlines() if x and not x.startswith("#")]
    timing = [
        "prompt eval time =      34.12 ms /    12 tokens (    2.84 ms per token,   351.70 tokens per second)",
        "       eval time =     512.55 ms /    64 tokens (    8.01 ms per token,   124.87 tokens per second)",
        "      total time =     546.67 ms /    76 tokens",
    ]
    gin = [
        '[GIN] 2026/12/01 - 12:00:00 | 200 |  1.234567ms |       127.0.0.1 | POST     "/api/chat"',
        '[GIN] 2026/12/01 - 12:00:00 | 200 |     52.1µs |      10.0.0.7 | GET      "/api/ps"',
    ]
    return load + (timing + gin) * 200


def retimed(template: list[str], rate: int) -> Iterator[str]:
    """``template`` cycled for ever, each line stamped with the simulated time (``rate`` lines a second)."""
    n = 0
    while True:
        for line in template:
            t = START + timedelta(seconds=n / rate)
            iso, go, journal = (t.strftime("%Y-%m-%dT%H:%M:%S"), t.strftime("%Y/%m/%d"), t.strftime("%b %d %H:%M:%S"))
            hms = t.strftime("%H:%M:%S")
            if "T" in line and _ISO_RE.search(line):
                line = _ISO_RE.sub(iso, line, count=1)
            elif "/" in line and _GO_RE.search(line):
                line = _GO_RE.sub(lambda m: f"{go}{m.group(1)}{hms}", line, count=1)
            elif _JOURNAL_RE.search(line):
                line = _JOURNAL_RE.sub(journal, line, count=1)
            else:
                line = (line + "\n")[:-1]  # a new string, as read from a file
            n += 1
            yield line


def deep_bytes(roots: Any, seen: set[int]) -> int:
    """Bytes of the objects reachable from ``roots`` through tuples, lists, dicts, frozen mappings
    and slotted objects, each counted once across calls sharing ``seen`` (``sys.getsizeof``)."""
    total = 0
    stack = [roots]
    while stack:
        obj = stack.pop()
        if obj is None or isinstance(obj, (bool, type)) or id(obj) in seen:
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        if isinstance(obj, (str, int, float, bytes, datetime)):
            continue
        if isinstance(obj, (tuple, list, set, frozenset)):
            stack.extend(obj)
        elif isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif hasattr(obj, "items") and callable(obj.items):
            try:
                for k, v in obj.items():
                    stack.append(k)
                    stack.append(v)
            except Exception:  # noqa: BLE001, S110 - a mapping that cannot be walked is counted by its own size
                pass
        else:
            for cls in type(obj).__mro__:
                for name in getattr(cls, "__slots__", ()):
                    if hasattr(obj, name):
                        stack.append(getattr(obj, name))
            d = getattr(obj, "__dict__", None)
            if d is not None:
                stack.append(d)
    return total


def report(minute: float, state: AppState, baseline: int) -> dict[str, Any]:
    gc.collect()
    traced = tracemalloc.get_traced_memory()[0] - baseline
    log = state.log
    seen: set[int] = set()
    events_b = deep_bytes(log.load_events, seen)
    recent_b = deep_bytes(log.recent, seen)
    raw_b = deep_bytes(log.raw, seen)
    loads_b = deep_bytes(log.loads, seen)
    grouper_b = deep_bytes(log.grouper, seen)
    scans = list(alert_context._scans.values())  # noqa: SLF001 - the memo is what is measured
    scan_b = deep_bytes([(s.timed, s.configs, s.launches, s.over_training, s.line_nos, s.times) for s in scans], seen)
    return {
        "minute": minute,
        "lines": log.lines,
        "traced_mib": traced / 2**20,
        "load_events": len(log.load_events),
        "recent": len(log.recent),
        "raw": len(log.raw),
        "loads": len(log.loads),
        "scans": len(scans),
        "events_mib": events_b / 2**20,
        "bytes_per_event": events_b / len(log.load_events) if log.load_events else 0.0,
        "recent_extra_mib": recent_b / 2**20,
        "raw_mib": raw_b / 2**20,
        "loads_extra_mib": loads_b / 2**20,
        "grouper_extra_mib": grouper_b / 2**20,
        "scans_mib": scan_b / 2**20,
    }


def run(minutes: float, rate: int, batch: int, every: float, mix: str) -> list[dict[str, Any]]:
    lines = retimed(corpus_lines() if mix == "corpus" else traffic_lines(), rate)
    parser = LogParser(default_year=2026)
    state = AppState(host_url="http://127.0.0.1:11434")
    alert_context._scans.clear()  # noqa: SLF001
    gc.collect()
    tracemalloc.start()
    baseline = tracemalloc.get_traced_memory()[0]
    rows: list[dict[str, Any]] = []
    seconds = int(minutes * 60)
    next_report = every * 60
    for sec in range(1, seconds + 1):
        events: list[Any] = []
        raw: list[str] = []
        left = rate
        while left > 0:
            chunk = [next(lines) for _ in range(min(batch, left))]
            left -= len(chunk)
            for line in chunk:
                events.extend(parser.feed(line))
            events.extend(parser.end_batch())
            raw.extend(chunk)
        state = fold_log_events(
            state, events, source="file:bench.log", status=None, ok=True, lines=len(raw), dropped_lines=0, raw_lines=raw
        )
        state = evaluate_state(state)
        if sec >= next_report:
            row = report(sec / 60, state, baseline)
            rows.append(row)
            print(
                f"{row['minute']:5.1f} min  {row['lines']:>7,} lines  traced {row['traced_mib']:6.2f} MiB  "
                f"events {row['load_events']:>6,} ({row['events_mib']:5.2f} MiB, {row['bytes_per_event']:4.0f} B each)  "
                f"recent {row['recent']:>5,}  raw {row['raw']:>4} ({row['raw_mib']:4.2f} MiB)  "
                f"loads {row['loads']:>3} (+{row['loads_extra_mib']:4.2f} MiB, grouper +{row['grouper_extra_mib']:4.2f})  scans {row['scans']} ({row['scans_mib']:4.2f} MiB)",
                flush=True,
            )
            next_report += every * 60
    tracemalloc.stop()
    return rows


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Figures of a run: traced MiB at 5/10/20/30 minutes, the peak, the growth per minute from
    the first report to the last one before the first trim (the store's cap), and the bytes per
    kept event there (reachable from the events alone, and all traced bytes over the events)."""
    at = {int(r["minute"]): round(r["traced_mib"], 2) for r in rows if float(r["minute"]).is_integer()}
    k = 1
    while k < len(rows) and rows[k]["traced_mib"] >= rows[k - 1]["traced_mib"]:
        k += 1
    top = rows[k - 1]
    growth = (top["traced_mib"] - rows[0]["traced_mib"]) / (top["minute"] - rows[0]["minute"]) if k > 1 else None
    return {
        "traced_mib_at": at,
        "peak_traced_mib": round(max(r["traced_mib"] for r in rows), 2),
        "mib_per_min": None if growth is None else round(growth, 2),
        "growth_until_minute": top["minute"],
        "bytes_per_event": round(top["bytes_per_event"]),
        "traced_bytes_per_event": round(top["traced_mib"] * 2**20 / top["load_events"]) if top["load_events"] else None,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30.0, help="simulated minutes (default 30)")
    ap.add_argument("--rate", type=int, default=100, help="log lines per simulated second (default 100)")
    ap.add_argument("--batch", type=int, default=20, help="lines per read batch (default 20)")
    ap.add_argument("--every", type=float, default=1.0, help="simulated minutes between reports (default 1)")
    ap.add_argument("--mix", choices=("corpus", "traffic"), default="corpus")
    args = ap.parse_args()
    t0 = time.process_time()
    rows = run(args.minutes, args.rate, args.batch, args.every, args.mix)
    cpu_s = time.process_time() - t0
    fig = summarize(rows)
    print(
        f"traced MiB at 5/10/20/30 min: {[fig['traced_mib_at'].get(m) for m in (5, 10, 20, 30)]}; "
        f"peak {fig['peak_traced_mib']} MiB; growth {fig['mib_per_min']} MiB/min until the first trim "
        f"(minute {fig['growth_until_minute']:g}); bytes per kept event there: {fig['bytes_per_event']} "
        f"(events alone), {fig['traced_bytes_per_event']} (all traced); CPU {cpu_s:.1f} s"
    )
    print(
        json.dumps(
            {"mix": args.mix, "rate": args.rate, "minutes": args.minutes, "cpu_s": round(cpu_s, 1), **fig, "rows": rows}
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
