"""Idle CPU benchmark: CPU seconds per minute that kvtop uses watching a server at a 1 s interval.

Method
------
1. Start the stand-in Ollama server (``python -m kvtop.demo.server --port 0 --manual``) and
   jump it to scenario step 4 (three models loaded; manual mode, so nothing changes during
   the measurement: kvtop's steady state of polling and redrawing an unchanged table).
2. Launch ``kvtop --host URL --interval 1`` (the console script of this interpreter's
   environment) as a real process on the slave side of an 80x24 pseudo-terminal (own session,
   pty as controlling terminal, ``TERM=xterm-256color``). Read the pty until the first frame
   shows a model name (``qwen3:1.7b-q8_0``), then let it settle for ``--settle`` s (default 2).
   From then on a daemon thread keeps draining the pty, so kvtop never blocks on a full pty
   buffer (and the bytes it writes per second are counted).
3. Sample ``psutil.Process(kvtop).cpu_times()`` (user + system, plus ``children_user`` and
   ``children_system`` of reaped children, plus the user + system of any live descendants) at
   the start and at the end of a ``--seconds`` window (default 60). The same is done for the
   stand-in server's process, reported separately: it is not kvtop's cost. The wall time of
   the window is measured with ``time.perf_counter``; figures are scaled to one minute.
4. Send ``q``; kvtop gets 5 s to exit before SIGKILL.

Target: kvtop < 1 % of one core, i.e. < 0.6 CPU-s per minute. The script prints
human-readable lines and, last, one JSON line. Exit code 0 when the measurement completed
(whether or not the target is met), 1 when kvtop never showed data or died during the window.

Usage: ``python benchmarks/cpu_idle.py [--seconds 60] [--interval 1] [--settle 2]``
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import PtyApp, StandIn, kvtop_command

TARGET_PCT_OF_CORE = 1.0
TARGET_CPU_S_PER_MIN = 0.6
NEEDLE = "qwen3:1.7b-q8_0"


class CpuMeter:
    """CPU seconds (user + system) of a process and its descendants, live and reaped."""

    def __init__(self, pid: int) -> None:
        self.proc = psutil.Process(pid)

    def read(self) -> dict[str, float]:
        t = self.proc.cpu_times()
        own_user, own_sys = t.user, t.system
        reaped = t.children_user + t.children_system
        live = 0.0
        for child in self.proc.children(recursive=True):
            try:
                ct = child.cpu_times()
                live += ct.user + ct.system
            except psutil.NoSuchProcess:
                pass
        return {"user": own_user, "system": own_sys, "children": reaped + live,
                "total": own_user + own_sys + reaped + live}


def delta(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    return {k: b[k] - a[k] for k in a}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="measurement window (default 60)")
    ap.add_argument("--interval", type=float, default=1.0, help="kvtop --interval (default 1)")
    ap.add_argument("--settle", type=float, default=2.0, help="wait after the first data frame (default 2)")
    ap.add_argument("--timeout", type=float, default=30.0, help="give up waiting for data after S s (default 30)")
    ap.add_argument("--cols", type=int, default=80)
    ap.add_argument("--rows", type=int, default=24)
    args = ap.parse_args()

    cores = psutil.cpu_count(logical=True) or 1
    print(f"kvtop idle CPU benchmark: {' '.join(kvtop_command())} --interval {args.interval:g} in a "
          f"{args.cols}x{args.rows} pty, {args.seconds:g} s window, {cores} logical CPUs, "
          f"python {sys.version.split()[0]}")
    out: dict[str, object] = {"benchmark": "cpu_idle", "window_s": args.seconds, "interval_s": args.interval,
                              "terminal": f"{args.cols}x{args.rows}",
                              "target_cpu_s_per_min": TARGET_CPU_S_PER_MIN,
                              "target_pct_of_one_core": TARGET_PCT_OF_CORE}
    with StandIn(step=4) as standin:
        print(f"stand-in server {standin.url} at step 4: {standin.state().get('label')}")
        assert standin.proc is not None
        argv = [*kvtop_command(), "--host", standin.url, "--interval", f"{args.interval:g}"]
        with PtyApp(argv, cols=args.cols, rows=args.rows) as app:
            t0 = app.start()
            t_data = app.read_until(NEEDLE, args.timeout)
            if t_data is None:
                print(f"kvtop never showed {NEEDLE!r} within {args.timeout:g} s; screen (escapes stripped):")
                for line in app.text()[-2000:].splitlines()[-24:]:
                    print("  | " + line)
                out["error"] = "no data frame"
                print(json.dumps(out))
                return 1
            print(f"first data frame after {(t_data - t0) * 1000:.0f} ms; settling {args.settle:g} s")
            app.start_drain()
            time.sleep(args.settle)

            kv = CpuMeter(app.pid)
            srv = CpuMeter(standin.proc.pid)
            bytes0 = app.bytes_read
            kv0, srv0 = kv.read(), srv.read()
            w0 = time.perf_counter()
            next_report = w0 + 15
            end = w0 + args.seconds
            died = False
            while True:
                now = time.perf_counter()
                if now >= end:
                    break
                if app.proc is not None and app.proc.poll() is not None:
                    died = True
                    break
                time.sleep(min(0.5, end - now))
                if time.perf_counter() >= next_report and time.perf_counter() < end:
                    so_far = kv.read()["total"] - kv0["total"]
                    el = time.perf_counter() - w0
                    print(f"  {el:5.1f} s: kvtop {so_far:.3f} CPU-s so far ({so_far / el * 100:.2f} % of one core)")
                    next_report += 15
            if died:
                print(f"kvtop exited during the window (code {app.proc.returncode if app.proc else '?'}); "
                      "last screen (escapes stripped):")
                for line in app.text()[-2000:].splitlines()[-24:]:
                    print("  | " + line)
                out["error"] = "kvtop exited during the window"
                print(json.dumps(out))
                return 1
            kv1, srv1 = kv.read(), srv.read()
            wall = time.perf_counter() - w0
            bytes_written = app.bytes_read - bytes0
            try:
                rss = psutil.Process(app.pid).memory_info().rss
            except psutil.NoSuchProcess:
                rss = 0
            code, clean = app.quit()

    dk, ds = delta(kv0, kv1), delta(srv0, srv1)
    per_min = dk["total"] / wall * 60
    pct = dk["total"] / wall * 100
    srv_per_min = ds["total"] / wall * 60
    srv_pct = ds["total"] / wall * 100
    meets = per_min < TARGET_CPU_S_PER_MIN

    print()
    print(f"measured over {wall:.1f} s of wall time:")
    print(f"  kvtop:            {dk['total']:.3f} CPU-s (user {dk['user']:.3f}, system {dk['system']:.3f}, "
          f"children {dk['children']:.3f})")
    print(f"  kvtop:            {per_min:.3f} CPU-s per minute = {pct:.2f} % of one core")
    print(f"  kvtop:            wrote {bytes_written / wall:.0f} bytes/s to the terminal; RSS {rss / 2**20:.1f} MiB")
    print(f"  stand-in server:  {srv_per_min:.3f} CPU-s per minute = {srv_pct:.2f} % of one core "
          "(not kvtop's cost)")
    print(f"  target: kvtop < {TARGET_PCT_OF_CORE:g} % of one core ({TARGET_CPU_S_PER_MIN} CPU-s/min): "
          f"{'MEETS' if meets else 'MISSES'} ({per_min / TARGET_CPU_S_PER_MIN:.1f}x the budget)")
    print(f"  quit on 'q': {'clean, exit ' + str(code) if clean else 'did NOT exit within 5 s (killed)'}")

    out.update({
        "measured_wall_s": round(wall, 3),
        "kvtop_cpu_s": round(dk["total"], 4),
        "kvtop_user_s": round(dk["user"], 4),
        "kvtop_system_s": round(dk["system"], 4),
        "kvtop_children_s": round(dk["children"], 4),
        "kvtop_cpu_s_per_min": round(per_min, 4),
        "kvtop_pct_of_one_core": round(pct, 3),
        "kvtop_bytes_per_s": round(bytes_written / wall, 1),
        "kvtop_rss_bytes": rss,
        "standin_cpu_s_per_min": round(srv_per_min, 4),
        "standin_pct_of_one_core": round(srv_pct, 3),
        "meets_target": meets,
        "quit_clean": clean,
        "first_data_frame_s": round(t_data - t0, 4),
    })
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
