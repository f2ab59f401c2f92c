"""Idle CPU and RSS benchmark: kvtop beside the floor (``floor.py``), measured in the same window.

Method
------
For each case (``--cases``, default ``3@80x24,3@160x48,100@80x24``: models @ terminal size):

1. Start the stand-in Ollama server (``python -m kvtop.demo.server --port 0 --manual``). Three
   models: the bundled scenario at step 4 (three loaded, one spilled). N models: a generated
   one-step scenario (``_common.many_models_scenario``: copies of the three, every third one
   spilled). Manual mode: nothing changes during the measurement, so this is the steady state of
   polling and redrawing an unchanged table.
2. Launch ``kvtop --host URL --interval I`` (the console script of this interpreter's
   environment) and the floor (``python benchmarks/floor.py --host URL --interval I``), each
   as a real process on the slave side of its own pseudo-terminal of the case's size (own
   session, pty as controlling terminal, ``TERM=xterm-256color``): kvtop first, read until its
   first frame shows a model name, then the floor likewise; then both settle ``--settle`` s
   (default 2). From then on a daemon thread drains each pty (and counts the bytes written).
3. Over one window of ``--seconds`` (default 60), read ``psutil.Process.cpu_times()`` (user +
   system + reaped children + live descendants) of kvtop, the floor and the stand-in at its
   start and end, and the RSS of kvtop and the floor at its end. Both apps are measured in the
   same window, so whatever else the machine does weighs on both alike.
4. Send ``q`` to both; 5 s each to exit before SIGKILL.

Figures, each printed as a ratio (absolute numbers drift on a shared machine; ratios from one
run do not):

- kvtop / floor CPU per case (target for 3 models at 80x24 and 160x48: <= 1.3x);
- kvtop at N models / kvtop at 3 models at the same size (target for 100 models: <= 3x);
- kvtop / floor RSS, and bytes written to the terminal per second.

Human-readable lines, then one JSON line. Exit code 0 when every measurement completed (met
targets or not), 1 when an app never showed data or died during a window.

Usage: ``python benchmarks/cpu_idle.py [--seconds 60] [--interval 1] [--settle 2] [--cases 3@80x24,100@80x24]``
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import CpuMeter, PtyApp, StandIn, delta, kvtop_command, many_models_scenario, ratio, ratio_text
from floor import floor_command

TARGET_IDLE_VS_FLOOR = 1.3
"""Target: kvtop's idle CPU at 3 models, as a multiple of the floor's."""

TARGET_MODELS_VS_OWN_IDLE = 3.0
"""Target: kvtop's CPU at 100 models, as a multiple of its own at 3 models."""

BUNDLED_NEEDLE = "qwen3:1.7b-q8_0"
MANY_NEEDLE = "bench-0"


@dataclass
class Case:
    models: int
    cols: int
    rows: int

    @property
    def name(self) -> str:
        return f"{self.models} models @ {self.cols}x{self.rows}"


def parse_cases(text: str) -> list[Case]:
    """``"3@80x24,100@160x48"`` → cases (models @ columns x rows)."""
    out = []
    for part in text.split(","):
        models, _, size = part.strip().partition("@")
        cols, _, rows = (size or "80x24").partition("x")
        out.append(Case(int(models), int(cols), int(rows)))
    return out


def screen_tail(app: PtyApp, rows: int) -> str:
    return "\n".join("  | " + line for line in app.text()[-4000:].splitlines()[-rows:])


def measure_case(case: Case, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """Run kvtop and the floor side by side for one case; their figures (see the module doc)."""
    if case.models == 3:
        standin_args: dict[str, Any] = {"step": 4}
        needle = BUNDLED_NEEDLE
    else:
        path = many_models_scenario(case.models, tmp / f"models-{case.models}.json")
        standin_args = {"step": 0, "scenario": str(path)}
        needle = MANY_NEEDLE
    out: dict[str, Any] = {"case": case.name, "models": case.models, "terminal": f"{case.cols}x{case.rows}"}
    with StandIn(**standin_args) as standin:
        assert standin.proc is not None
        apps = {
            "kvtop": PtyApp(
                [*kvtop_command(), "--host", standin.url, "--interval", f"{args.interval:g}"],
                cols=case.cols,
                rows=case.rows,
            ),
            "floor": PtyApp(floor_command(standin.url, args.interval), cols=case.cols, rows=case.rows),
        }
        try:
            for name, app in apps.items():  # one after the other: each first frame is timed alone
                t0 = app.start()
                t_data = app.read_until(needle, args.timeout)
                if t_data is None:
                    print(f"  {name} never showed {needle!r} within {args.timeout:g} s; screen:")
                    print(screen_tail(app, case.rows))
                    out["error"] = f"{name}: no data frame"
                    return out
                out[f"{name}_first_data_frame_s"] = round(t_data - t0, 3)
                app.start_drain()
            time.sleep(args.settle)
            meters = {name: CpuMeter(app.pid) for name, app in apps.items()}
            meters["standin"] = CpuMeter(standin.proc.pid)
            bytes0 = {name: app.bytes_read for name, app in apps.items()}
            start = {name: m.read() for name, m in meters.items()}
            w0 = time.perf_counter()
            end = w0 + args.seconds
            next_report = w0 + 15
            while (now := time.perf_counter()) < end:
                dead = [name for name, app in apps.items() if app.proc is not None and app.proc.poll() is not None]
                if dead:
                    print(f"  {dead[0]} exited during the window; last screen:")
                    print(screen_tail(apps[dead[0]], case.rows))
                    out["error"] = f"{dead[0]} exited during the window"
                    return out
                time.sleep(min(0.5, end - now))
                if time.perf_counter() >= next_report and time.perf_counter() < end:
                    el = time.perf_counter() - w0
                    so_far = {n: (meters[n].read()["total"] - start[n]["total"]) / el * 100 for n in apps}
                    print(f"    {el:5.1f} s: kvtop {so_far['kvtop']:.2f} %, floor {so_far['floor']:.2f} % of one core")
                    next_report += 15
            stop = {name: m.read() for name, m in meters.items()}
            wall = time.perf_counter() - w0
            for name, app in apps.items():
                d = delta(start[name], stop[name])
                out[f"{name}_pct_of_one_core"] = round(d["total"] / wall * 100, 3)
                out[f"{name}_cpu_s"] = round(d["total"], 4)
                out[f"{name}_bytes_per_s"] = round((app.bytes_read - bytes0[name]) / wall, 1)
                out[f"{name}_rss_bytes"] = meters[name].rss()
            d = delta(start["standin"], stop["standin"])
            out["standin_pct_of_one_core"] = round(d["total"] / wall * 100, 3)
            out["window_s"] = round(wall, 2)
            for name, app in apps.items():
                code, clean = app.quit()
                out[f"{name}_quit_clean"] = clean
        finally:
            for app in apps.values():
                app.close()
    out["cpu_vs_floor"] = ratio(out["kvtop_pct_of_one_core"], out["floor_pct_of_one_core"])
    out["rss_vs_floor"] = ratio(out["kvtop_rss_bytes"], out["floor_rss_bytes"])
    return out


def report_case(r: dict[str, Any]) -> None:
    if "error" in r:
        print(f"  {r['case']}: {r['error']}")
        return
    target = TARGET_IDLE_VS_FLOOR if r["models"] == 3 else None
    print(f"  {r['case']} ({r['window_s']:.0f} s window):")
    print(
        f"    CPU   kvtop {r['kvtop_pct_of_one_core']:6.2f} %   floor {r['floor_pct_of_one_core']:6.2f} % of one core"
        f"   -> {ratio_text(r['kvtop_pct_of_one_core'], r['floor_pct_of_one_core'], target)}"
    )
    print(
        f"    RSS   kvtop {r['kvtop_rss_bytes'] / 2**20:6.1f} MiB floor {r['floor_rss_bytes'] / 2**20:6.1f} MiB"
        f"         -> {ratio_text(r['kvtop_rss_bytes'], r['floor_rss_bytes'])}"
    )
    print(
        f"    tty   kvtop {r['kvtop_bytes_per_s']:6.0f} B/s floor {r['floor_bytes_per_s']:6.0f} B/s"
        f"         -> {ratio_text(r['kvtop_bytes_per_s'], r['floor_bytes_per_s'])}"
    )
    print(
        f"    first data frame: kvtop {r['kvtop_first_data_frame_s']:.2f} s, floor {r['floor_first_data_frame_s']:.2f} s;"
        f" stand-in server {r['standin_pct_of_one_core']:.2f} % (not either app's cost)"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="measurement window per case (default 60)")
    ap.add_argument("--interval", type=float, default=1.0, help="polling interval of both apps (default 1)")
    ap.add_argument("--settle", type=float, default=2.0, help="seconds after the first data frame (default 2)")
    ap.add_argument("--timeout", type=float, default=30.0, help="give up waiting for data after S s (default 30)")
    ap.add_argument(
        "--cases",
        default="3@80x24,3@160x48,100@80x24",
        help="MODELS@COLSxROWS,... (default 3@80x24,3@160x48,100@80x24; 3 = the bundled scenario)",
    )
    args = ap.parse_args()
    cases = parse_cases(args.cases)

    cores = psutil.cpu_count(logical=True) or 1
    print(
        f"idle CPU: {' '.join(kvtop_command())} vs the floor (benchmarks/floor.py), both --interval "
        f"{args.interval:g}, measured side by side; {args.seconds:g} s per case, {cores} logical CPUs, "
        f"python {sys.version.split()[0]}"
    )
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            print(f"case {case.name} ...")
            r = measure_case(case, args, Path(tmp))
            results.append(r)
            report_case(r)

    print()
    print("ratios (one run):")
    verdicts: dict[str, Any] = {}
    for r in results:
        if "error" in r:
            continue
        if r["models"] == 3:
            verdicts[f"idle {r['terminal']} vs floor"] = {
                "ratio": r["cpu_vs_floor"],
                "target": TARGET_IDLE_VS_FLOOR,
                "meets": r["cpu_vs_floor"] is not None and r["cpu_vs_floor"] <= TARGET_IDLE_VS_FLOOR,
            }
            print(
                f"  idle, 3 models, {r['terminal']}: kvtop = "
                f"{ratio_text(r['kvtop_pct_of_one_core'], r['floor_pct_of_one_core'], TARGET_IDLE_VS_FLOOR)}"
            )
        else:
            own = next(
                (o for o in results if o["models"] == 3 and o["terminal"] == r["terminal"] and "error" not in o), None
            )
            if own is not None:
                x = ratio(r["kvtop_pct_of_one_core"], own["kvtop_pct_of_one_core"])
                meets = x is not None and x <= TARGET_MODELS_VS_OWN_IDLE
                verdicts[f"{r['models']} models vs own 3-model idle {r['terminal']}"] = {
                    "ratio": x,
                    "target": TARGET_MODELS_VS_OWN_IDLE if r["models"] == 100 else None,
                    "meets": meets,
                }
                tail = (
                    f": {'MEETS' if meets else 'MISSES'} (target <= {TARGET_MODELS_VS_OWN_IDLE:g}x)"
                    if r["models"] == 100
                    else ""
                )
                print(
                    f"  {r['models']} models, {r['terminal']}: kvtop = {x}x its own 3-model idle{tail}; "
                    f"{ratio_text(r['kvtop_pct_of_one_core'], r['floor_pct_of_one_core'])} "
                    f"(the floor itself: {ratio(r['floor_pct_of_one_core'], own['floor_pct_of_one_core'])}x its 3-model idle)"
                )
        print(f"  RSS, {r['case']}: kvtop = {ratio_text(r['kvtop_rss_bytes'], r['floor_rss_bytes'])}")
    print(
        json.dumps(
            {
                "benchmark": "cpu_idle",
                "window_s": args.seconds,
                "interval_s": args.interval,
                "cases": results,
                "verdicts": verdicts,
            }
        )
    )
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
