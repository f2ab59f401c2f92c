"""Soak: the real dashboard, headless, polling the stand-in server every 0.25 s for a long time.

Method
------
1. Start the stand-in Ollama server: by default ``python -m kvtop.demo.server --port 0 --loop``
   (the bundled demo scenario played in a loop, so models load, spill and unload over and over);
   with ``--models N`` a generated one-step scenario with N models loaded at once, in manual mode
   (``_common.many_models_scenario``: nothing changes, the steady state of a big server).
2. ``--log-rate R``: a thread appends real runner lines (``log_follow.real_lines``: a recorded
   llama-server load, request timings, GIN access lines) to a temporary file at R lines/s and
   kvtop follows it (``--log file:…``, as a busy server's log); else ``--log`` as the CLI takes it
   (default ``none``).
3. In this process, build the real app (``kvtop.ui.app.make_app``: real ``OllamaClient``, GPU,
   process and slot sources) and run it headless with ``KvtopApp.run_test(size=--size)`` (default
   120x40; 160x48 shows the history panel) for ``--minutes`` (default 20) at ``--interval``
   (default 0.25 s). ``--prefill-history`` starts with the history at its one-hour cap (an hour of
   the first poll's models, recorded as the app records them), so a short run shows the steady
   state; ``--keys`` opens and closes the history screen (``h``) and the server view (``i``) at each
   sample, as an operator does.
4. Every ``--every`` seconds (default 60) print: elapsed minutes, RSS (MiB), open fds, threads,
   the history's stored points and bytes (all servers, all series), the log lines read and the
   log events kept, and, with ``--tracemalloc``, the Python heap that tracemalloc traces (MiB).
   ``--pty`` instead runs the ``kvtop`` console script itself in a ``--size`` pseudo-terminal
   (drained by a thread) and samples its RSS, fds and threads from outside (no history or
   tracemalloc figures).
5. At the end: the RSS slope (MiB/hour, least squares) over the whole run and over its last
   half, and the history's points at both ends of that half. With ``--tracemalloc``: a snapshot at
   half time and one at the end, and the 15 source lines whose allocations grew most between them
   (``Snapshot.compare_to(..., "lineno")``): a leak names itself there, the history filling shows
   as ``kvtop/model/history.py``.

The history is bounded by design (``kvtop.model.history``: one point per 1 s bucket, 3600 points
per series, one hour, 16 bytes a point): RSS that still grows after the first hour, or grows
while the point count is flat, is a leak. Human-readable lines, then one JSON line with every sample.

Measured (2 shared cores, Python 3.11, log ``none``, 0.25 s, the demo scenario looping, three runs at once):

- in-process, 24 min: RSS 56.6 MiB at 1 min → 58.2 MiB at 24 min; last-half slope 1.8 MiB/h while
  the history grew 3645 → 7302 points; fds 11, threads 3 throughout.
- ``--pty`` (the console script), 22 min: 55.8 → 57.9 MiB; last-half slope 3.3 MiB/h; fds 7,
  threads 5 throughout.
- ``--tracemalloc``, 24 min: traced heap 8.4 → 9.4 MiB; the top growers over the last half are
  all ``kvtop/model/history.py`` (the series' points, +0.4 MiB); nothing else grew by more than
  11 KiB. (Its RSS step at half time, +15 MiB, is tracemalloc's own snapshot.)

So at these settings the growth is the history window filling (bounded: 3600 points per series,
reached after one hour), not a leak; the 66 → 143 MiB of the issue was not reproduced.

With 100 models, a busy log, 160x48, ``--keys --prefill-history`` (history at 16 B a point, the
screens' Textual leaks worked around), 10 minutes: RSS 121.9 → 130.6 MiB at 100 lines/s while the
log's events fill towards their 20,000 cap (last half 11 MiB/h); 121.0 → 132.2 MiB in two minutes
then 141.4 MiB flat over the last five at 1,000 lines/s (the cap reached in the first minute; last
half -2.7 MiB/h). The history held 1,078,800 points in 17.2 MiB throughout.

``--replay-hours H`` is the time-compressed soak: it writes an H-hour recording at ``--interval``
(the bundled demo recording's polls and the incident recording's log batches, cycled and re-timed) and replays it headless
at 16×, so two recorded hours take 7.5 minutes; the history is dated by the recorded time, so its
one-hour window fills after 3.75 minutes and RSS must then stay flat.

Usage: ``python benchmarks/soak.py [--minutes 20] [--interval 0.25] [--every 60] [--tracemalloc | --pty] [--log SPEC]
[--models N] [--size 160x48] [--log-rate 100] [--keys] [--prefill-history]``
or ``python benchmarks/soak.py --replay-hours 2 [--interval 0.25] [--every 30]``
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import select
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kvtop.config import Settings  # noqa: E402
from kvtop.ui.app import make_app  # noqa: E402

MIB = 2**20


def slope_mib_per_h(samples: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of ``(seconds, MiB)`` points, in MiB per hour."""
    if len(samples) < 2:
        return None
    n = len(samples)
    mx = sum(t for t, _ in samples) / n
    my = sum(v for _, v in samples) / n
    den = sum((t - mx) ** 2 for t, _ in samples)
    if den == 0:
        return None
    return round(3600 * sum((t - mx) * (v - my) for t, v in samples) / den, 1)


def start_standin() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvtop.demo.server", "--port", "0", "--loop"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 15)
    line = proc.stdout.readline() if ready else ""
    if not line.startswith("LISTENING "):
        proc.kill()
        raise SystemExit(f"the stand-in server did not start: {line!r}")
    return proc, line.split(None, 1)[1].strip()


def prefill_history(app, host: str):  # type: ignore[no-untyped-def]
    """``--prefill-history``: an hour of the models now on screen, one sample a second, recorded as
    the app records them; it replaces the app's history (which the app then keeps recording into),
    so every series starts at its one-hour cap instead of filling during the first hour."""
    import dataclasses

    from kvtop.model.history import History

    state = app.state
    h = History()
    now = state.last_ok.taken_at
    for i in range(int(h.retention_s)):
        t = now - h.retention_s + i
        snap = dataclasses.replace(state.last_ok, taken_at=t)
        h.record(dataclasses.replace(state, last_ok=snap, ollama=snap, gpu=None), t)
    app.histories[host] = h
    return h


async def open_and_close(pilot, app) -> None:  # type: ignore[no-untyped-def]
    """``--keys``: open the history screen (h) and the server view (i) and close each (Esc)."""
    from kvtop.ui.screens.dashboard import DashboardScreen
    from kvtop.ui.screens.history import HistoryScreen
    from kvtop.ui.screens.server_view import ServerScreen

    for key, screen in (("h", HistoryScreen), ("i", ServerScreen)):
        await pilot.press(key)
        for _ in range(400):
            if isinstance(app.screen, screen):
                break
            await pilot.pause(0.05)
        await pilot.press("escape")
        for _ in range(400):
            if isinstance(app.screen, DashboardScreen):
                break
            await pilot.pause(0.05)


async def soak(args: argparse.Namespace, url: str, log_spec: str) -> dict:
    me = psutil.Process()
    app = make_app(Settings(host_url=url, interval_s=args.interval, timeout_s=10.0, log_spec=log_spec))
    rows: list[dict] = []
    half_snapshot: tracemalloc.Snapshot | None = None
    total_s = args.minutes * 60
    cols, rows_ = (int(x) for x in args.size.lower().split("x"))
    async with app.run_test(size=(cols, rows_)) as pilot:
        for _ in range(600):  # the first poll (100 models: a few seconds with their /api/show)
            if app.state is not None and app.state.last_ok is not None and app.state.models:
                break
            await asyncio.sleep(0.05)
        if args.prefill_history:
            prefill_history(app, url)
        t0 = time.monotonic()
        next_report = 0.0
        while True:
            elapsed = time.monotonic() - t0
            if elapsed >= next_report:
                if args.keys:
                    await open_and_close(pilot, app)
                gc.collect()
                log = app.state.log
                row = {
                    "t_s": round(elapsed, 1),
                    "rss_mib": round(me.memory_info().rss / MIB, 1),
                    "fds": me.num_fds(),
                    "threads": me.num_threads(),
                    "history_points": sum(h.point_count() for h in app.histories.values()),
                    "history_mib": round(sum(h.stored_bytes() for h in app.histories.values()) / MIB, 2),
                    "log_lines": log.lines + log.dropped_lines,
                    "log_events": len(log.load_events),
                    "models": len(app.state.models),
                }
                if args.tracemalloc:
                    row["traced_mib"] = round(tracemalloc.get_traced_memory()[0] / MIB, 1)
                rows.append(row)
                print(
                    f"{elapsed / 60:6.1f} min  RSS {row['rss_mib']:7.1f} MiB  fds {row['fds']:3d}  "
                    f"threads {row['threads']:3d}  history {row['history_points']:8d} points "
                    f"{row['history_mib']:6.2f} MiB  log {row['log_lines']:9d} lines {row['log_events']:6d} events  "
                    f"models {row['models']}" + (f"  traced {row['traced_mib']} MiB" if args.tracemalloc else ""),
                    flush=True,
                )
                next_report += args.every
                if args.tracemalloc and half_snapshot is None and elapsed >= total_s / 2:
                    half_snapshot = tracemalloc.take_snapshot()
            if elapsed >= total_s:
                break
            await asyncio.sleep(min(1.0, max(0.01, next_report - elapsed)))
        growers: list[str] = []
        if args.tracemalloc and half_snapshot is not None:
            gc.collect()
            end = tracemalloc.take_snapshot()
            flt = [tracemalloc.Filter(False, tracemalloc.__file__)]
            stats = end.filter_traces(flt).compare_to(half_snapshot.filter_traces(flt), "lineno")
            print("top growers between half time and the end (tracemalloc, by source line):")
            for s in stats[:15]:
                frame = s.traceback[0]
                growers.append(
                    f"{frame.filename}:{frame.lineno} {s.size_diff / 1024:+.1f} KiB ({s.count_diff:+d} blocks)"
                )
                print("  " + growers[-1])
    half = [(r["t_s"], r["rss_mib"]) for r in rows if r["t_s"] >= total_s / 2]
    result = {
        "minutes": args.minutes,
        "interval_s": args.interval,
        "log": log_spec,
        "models_arg": args.models,
        "size": args.size,
        "log_rate": args.log_rate,
        "keys": args.keys,
        "prefill_history": args.prefill_history,
        "rss_first_mib": rows[0]["rss_mib"],
        "rss_last_mib": rows[-1]["rss_mib"],
        "slope_mib_per_h": slope_mib_per_h([(r["t_s"], r["rss_mib"]) for r in rows]),
        "slope_last_half_mib_per_h": slope_mib_per_h(half),
        "history_points_half": next((r["history_points"] for r in rows if r["t_s"] >= total_s / 2), None),
        "history_points_end": rows[-1]["history_points"],
        "top_growers": growers,
        "samples": rows,
    }
    print(
        f"RSS {result['rss_first_mib']} -> {result['rss_last_mib']} MiB; slope {result['slope_mib_per_h']} MiB/h overall, "
        f"{result['slope_last_half_mib_per_h']} MiB/h over the last half; history points "
        f"{result['history_points_half']} -> {result['history_points_end']} over that half"
    )
    return result


def synth_recording(path: Path, hours: float, interval_s: float) -> int:
    """Write a recording of ``hours`` at ``interval_s``: the bundled demo recording's ``/api/ps``
    samples and the incident recording's log batches (real corpus lines), cycled and re-timed
    (models load, spill and unload over and over, and the log keeps growing). Returns the number
    of records written."""
    import dataclasses as dc

    from kvtop.model.alerts import Thresholds
    from kvtop.sources.recorder import Recorder, recording_header
    from kvtop.sources.recording import read_recording, resolve_recording

    demo = read_recording(resolve_recording("demo"))
    polls = [r.ollama for r in demo.records if r.kind == "ollama" and r.ollama is not None]
    incident = read_recording(resolve_recording("incident"))  # real corpus log lines
    logs = [r.log for r in incident.records if r.kind == "log" and r.log is not None]
    start = time.time() - hours * 3600
    n = int(hours * 3600 / interval_s)
    now = [start]
    header = recording_header(
        hosts=(demo.header.host_url,),
        log_spec="file:/soak.log",
        gpu=False,
        demo=False,
        naive_tz=demo.header.naive_tz,
        thresholds=Thresholds(),
        started_at=start,
    )
    rec = Recorder.create(path, header, clock=lambda: now[0])
    written = 0
    for i in range(n):
        now[0] = start + i * interval_s
        snap = polls[i % len(polls)]
        rec.ollama(dc.replace(snap, taken_at=start + i * interval_s))
        written += 1
        if logs and i % 240 == 0:  # a log batch a minute
            b = logs[(i // 240) % len(logs)]
            rec.log(
                source=b.source,
                status=b.status,
                ok=b.ok,
                lines=b.lines,
                dropped_lines=b.dropped_lines,
                raw_lines=b.raw_lines,
            )
            written += 1
        rec.apply()  # one apply step per poll, as the live dashboard records it
        written += 1
    rec.close()
    return written


async def soak_replay(args: argparse.Namespace) -> dict:
    """``--replay-hours H``: an H-hour recording at ``--interval`` replayed at 16×, so the history
    window (one hour of recorded time) fills and then must stay flat: a time-compressed soak."""
    import tempfile

    from kvtop.sources.recording import open_recording

    me = psutil.Process()
    tmp = Path(tempfile.mkdtemp(prefix="kvtop-soak-"))
    path = tmp / "soak.jsonl.gz"
    records = synth_recording(path, args.replay_hours, args.interval)
    print(
        f"recording: {args.replay_hours:g} h at {args.interval:g} s = {records:,} records, "
        f"{path.stat().st_size / MIB:.1f} MiB; replaying at 16x",
        flush=True,
    )
    recording = open_recording(path)
    app = make_app(
        Settings(
            host_url=recording.header.host_url, interval_s=args.interval, timeout_s=3.0, log_spec="none", readonly=True
        ),
        replay=recording,
    )
    rows: list[dict] = []
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(6):
            await pilot.press("greater_than_sign")  # ×2 each: 16×
        t0 = time.monotonic()
        next_report = 0.0
        while True:
            elapsed = time.monotonic() - t0
            done = app.replay is not None and app.replay.player.at_end
            if elapsed >= next_report or done:
                gc.collect()
                snap = app.state.ollama
                row = {
                    "t_s": round(elapsed, 1),
                    "recorded_h": round((snap.taken_at - recording.header.started_at) / 3600, 2)
                    if snap is not None
                    else 0.0,
                    "rss_mib": round(me.memory_info().rss / MIB, 1),
                    "fds": me.num_fds(),
                    "threads": me.num_threads(),
                    "history_points": sum(h.point_count() for h in app.histories.values()),
                }
                rows.append(row)
                print(
                    f"{elapsed / 60:6.1f} min  recorded {row['recorded_h']:5.2f} h  RSS {row['rss_mib']:7.1f} MiB  "
                    f"fds {row['fds']:3d}  threads {row['threads']:3d}  history points {row['history_points']:7d}",
                    flush=True,
                )
                next_report += args.every
            if done or row["recorded_h"] >= args.replay_hours - 0.01 or elapsed > args.replay_hours * 3600 / 8:
                break
            await asyncio.sleep(1.0)
    after_window = [(r["recorded_h"] * 3600, r["rss_mib"]) for r in rows if r["recorded_h"] >= 1.2]
    result = {
        "mode": "replay",
        "hours": args.replay_hours,
        "interval_s": args.interval,
        "records": records,
        "rss_first_mib": rows[0]["rss_mib"],
        "rss_last_mib": rows[-1]["rss_mib"],
        "slope_after_first_hour_mib_per_recorded_h": slope_mib_per_h(after_window),
        "samples": rows,
    }
    print(
        f"RSS {result['rss_first_mib']} -> {result['rss_last_mib']} MiB; after the first recorded hour "
        f"(history window full) the RSS slope is {slope_mib_per_h(after_window)} MiB per recorded hour"
    )
    return result


def soak_pty(args: argparse.Namespace, url: str, log_spec: str) -> dict:
    """``--pty``: the real ``kvtop`` console script in a ``--size`` pseudo-terminal, measured from outside."""
    from _common import PtyApp, kvtop_command

    cols, rows_ = (int(x) for x in args.size.lower().split("x"))
    app = PtyApp(
        [*kvtop_command(), "--host", url, "--interval", str(args.interval), "--log", log_spec], cols=cols, rows=rows_
    )
    app.start()
    app.start_drain()
    proc = psutil.Process(app.pid)
    rows: list[dict] = []
    total_s = args.minutes * 60
    t0 = time.monotonic()
    try:
        while True:
            elapsed = time.monotonic() - t0
            row = {
                "t_s": round(elapsed, 1),
                "rss_mib": round(proc.memory_info().rss / MIB, 1),
                "fds": proc.num_fds(),
                "threads": proc.num_threads(),
            }
            rows.append(row)
            print(
                f"{elapsed / 60:6.1f} min  RSS {row['rss_mib']:7.1f} MiB  fds {row['fds']:3d}  "
                f"threads {row['threads']:3d}",
                flush=True,
            )
            if elapsed >= total_s:
                break
            time.sleep(min(args.every, max(0.0, total_s - elapsed)))
    finally:
        assert app.proc is not None
        app.proc.terminate()
        try:
            app.proc.wait(10)
        except subprocess.TimeoutExpired:
            app.proc.kill()
    half = [(r["t_s"], r["rss_mib"]) for r in rows if r["t_s"] >= total_s / 2]
    result = {
        "mode": "pty",
        "minutes": args.minutes,
        "interval_s": args.interval,
        "log": log_spec,
        "models_arg": args.models,
        "size": args.size,
        "log_rate": args.log_rate,
        "rss_first_mib": rows[0]["rss_mib"],
        "rss_last_mib": rows[-1]["rss_mib"],
        "slope_mib_per_h": slope_mib_per_h([(r["t_s"], r["rss_mib"]) for r in rows]),
        "slope_last_half_mib_per_h": slope_mib_per_h(half),
        "samples": rows,
    }
    print(
        f"RSS {result['rss_first_mib']} -> {result['rss_last_mib']} MiB; slope {result['slope_mib_per_h']} MiB/h "
        f"overall, {result['slope_last_half_mib_per_h']} MiB/h over the last half"
    )
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=20.0)
    p.add_argument("--interval", type=float, default=0.25)
    p.add_argument("--every", type=float, default=60.0, help="seconds between samples")
    p.add_argument("--tracemalloc", action="store_true", help="trace Python allocations (slower) and name the growers")
    p.add_argument("--log", default="none", help="log source, as kvtop --log (default none)")
    p.add_argument(
        "--models",
        type=int,
        default=0,
        help="N models loaded at once, unchanging (default 0: the demo scenario in a loop)",
    )
    p.add_argument(
        "--size", default="120x40", help="terminal size COLSxROWS (default 120x40; 160x48 shows the history panel)"
    )
    p.add_argument(
        "--log-rate",
        type=float,
        default=0.0,
        help="follow a log file that real runner lines are appended to at this many lines/s (overrides --log)",
    )
    p.add_argument(
        "--keys", action="store_true", help="at each sample open and close the history screen and the server view"
    )
    p.add_argument(
        "--prefill-history",
        action="store_true",
        help="start with the history at its one-hour cap (an hour of the first poll's models)",
    )
    p.add_argument(
        "--replay-hours",
        type=float,
        default=None,
        help="time-compressed soak: replay an H-hour recording at 16x (no stand-in)",
    )
    p.add_argument(
        "--pty",
        action="store_true",
        help="run the kvtop console script in a pseudo-terminal instead (RSS, fds, threads only)",
    )
    args = p.parse_args()
    if args.tracemalloc:
        tracemalloc.start(1)
    if args.replay_hours:
        result = asyncio.run(soak_replay(args))
        print(json.dumps(result))
        return 0
    import contextlib
    import tempfile

    from _common import StandIn, many_models_scenario
    from log_follow import Writer, real_lines

    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kvtop-soak-")))
        if args.models:  # N models loaded at once, nothing changes (manual mode)
            scenario = many_models_scenario(args.models, tmp / "scenario.json")
            url = stack.enter_context(StandIn(step=0, scenario=str(scenario))).url
        else:  # the bundled demo scenario in a loop: models load, spill and unload over and over
            proc, url = start_standin()
            stack.callback(_stop, proc)
        log_spec = args.log
        if args.log_rate:
            log = tmp / "server.log"
            log.write_text("", encoding="utf-8")
            log_spec = f"file:{log}"
            writer = Writer(log, args.log_rate, real_lines())
            writer.start()
            stack.callback(writer.stop.set)
        result = soak_pty(args, url, log_spec) if args.pty else asyncio.run(soak(args, url, log_spec))
    print(json.dumps(result))
    return 0


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()


if __name__ == "__main__":
    sys.exit(main())
