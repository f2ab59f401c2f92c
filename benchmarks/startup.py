"""Startup benchmark: time from process start to the first rendered frame that shows data, kvtop beside the floor.

Method
------
1. Start the stand-in Ollama server (``python -m kvtop.demo.server --port 0 --manual``) and
   jump it to scenario step 4 (``POST /_standin/advance {"to": 4}``: three models loaded), or,
   with ``--models N``, serve a generated one-step scenario of N models
   (``_common.many_models_scenario``; every third one spilled).
2. First, kvtop's bytecode is compiled (``python -m compileall -q kvtop``) and
   ``PYTHONDONTWRITEBYTECODE`` is removed from the children's environment: an installed kvtop
   has its ``.pyc`` files (pip compiles them at install), so a tree whose modules are compiled
   from source at every start (an editable install under ``PYTHONDONTWRITEBYTECODE=1``, as on
   the CI machines) would measure the compiler, not kvtop. Then ``--runs`` times (default 5),
   after ``--warmup`` untimed runs (default 1): launch ``kvtop --host URL`` (the console script of
   this interpreter's environment) and then the floor (``benchmarks/floor.py``, a minimal
   Textual app polling ``/api/ps`` into a DataTable), interleaved (kvtop, floor, kvtop, ...) so
   that a machine getting busier weighs on both alike. Each runs as a real subprocess on the
   slave side of a pseudo-terminal of 80x24 (``os.openpty`` + ``TIOCSWINSZ``; own session with
   the pty as controlling terminal; ``TERM=xterm-256color``). The clock starts just before the
   fork. The master side is read without blocking (``select`` + ``O_NONBLOCK``); after each
   read the output, with escape sequences stripped, is searched for a model name
   (``qwen3:1.7b-q8_0``; ``bench-0`` with ``--models``). Per kvtop run three times are taken:

   - first byte: the first output of any kind on the pty;
   - first frame: the dashboard chrome is drawn (``sort:`` of the status line), no data yet;
   - first data frame: the model name is on screen: **the figure this benchmark is about**.

   Then ``q`` is sent and the process is given 5 s to exit (SIGKILL after that). The RSS and
   the CPU time (user + system) of each process are read just before ``q``: the CPU spent to
   the first data frame is less sensitive than the wall time to whatever else runs.
3. Separately, ``--runs`` times: the wall time of ``python -c 'import kvtop.ui.app'`` in a
   fresh interpreter, next to ``python -c pass`` (the interpreter's own start) for reference.
   ``--importtime`` adds the slowest imports reported by ``python -X importtime``.

Targets: first data frame <= 1.6x the floor's (medians of the same run); with
``--models 1000``, kvtop's first data frame < 5 s. The script prints human-readable lines and,
last, one JSON line. Exit code 0 when every timed run showed data, 1 otherwise.

Usage: ``python benchmarks/startup.py [--runs 5] [--warmup 1] [--timeout 20] [--models N] [--importtime]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import REPO_ROOT, PtyApp, StandIn, kvtop_command, many_models_scenario, ratio, ratio_text, summary
from floor import floor_command

TARGET_VS_FLOOR = 1.6
"""Target: kvtop's first data frame, as a multiple of the floor's."""
TARGET_MANY_MODELS_S = 5.0
"""Target: kvtop's first data frame with ``--models 1000``, in seconds."""
NEEDLE = "qwen3:1.7b-q8_0"
MANY_NEEDLE = "bench-0"
CHROME_NEEDLE = "sort:"


def one_launch(
    argv: list[str], needle: str, timeout: float, cols: int, rows: int, chrome: str | None = CHROME_NEEDLE
) -> dict[str, object]:
    """Launch ``argv`` once in a pty; return its timings (seconds from the fork), RSS and exit info."""
    app = PtyApp(argv, cols=cols, rows=rows)
    try:
        t0 = app.start()
        seen = app.watch(["", *([chrome] if chrome else []), needle], timeout)
        t_byte, t_chrome, t_data = seen[""], seen.get(chrome or ""), seen[needle]
        try:
            proc = psutil.Process(app.pid)
            rss = proc.memory_info().rss
            times = proc.cpu_times()
            cpu = times.user + times.system
        except psutil.Error:
            rss, cpu = 0, None
        code, clean = app.quit()
        result: dict[str, object] = {
            "first_byte_s": None if t_byte is None else t_byte - t0,
            "first_frame_s": None if t_chrome is None or not chrome else t_chrome - t0,
            "first_data_frame_s": None if t_data is None else t_data - t0,
            "rss_bytes": rss,
            "cpu_s": cpu,
            "exit_code": code,
            "quit_clean": clean,
        }
        if t_data is None:
            result["screen_tail"] = app.text()[-6000:]
        return result
    finally:
        app.close()


def time_command(argv: list[str], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, stdin=subprocess.DEVNULL, cwd=REPO_ROOT)
        out.append(time.perf_counter() - t0)
    return out


def slowest_imports(module: str, top: int = 12) -> list[tuple[float, str]]:
    """(cumulative seconds, module) of the slowest imports under ``python -X importtime``."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO_ROOT,
    )
    rows = []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:"):
            continue
        parts = line.split(":", 1)[1].split("|")
        if len(parts) != 3 or not parts[1].strip().isdigit():
            continue  # the header line
        rows.append((int(parts[1]) / 1e6, parts[2].rstrip()))
    rows.sort(reverse=True)
    return rows[:top]


def fmt(values: dict[str, float]) -> str:
    return " / ".join(f"{values[k] * 1000:7.1f}" for k in ("min", "median", "max")) + " ms"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="timed launches of each app (default 5)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed launches of each first (default 1)")
    ap.add_argument("--timeout", type=float, default=20.0, help="give up on one launch after S s (default 20)")
    ap.add_argument("--cols", type=int, default=80)
    ap.add_argument("--rows", type=int, default=24)
    ap.add_argument(
        "--models",
        type=int,
        default=0,
        help="serve N generated models instead of the bundled scenario's step 4 (e.g. 1000)",
    )
    ap.add_argument("--no-floor", action="store_true", help="launch kvtop only (no ratio)")
    ap.add_argument("--importtime", action="store_true", help="also list the slowest imports (-X importtime)")
    args = ap.parse_args()

    needle = MANY_NEEDLE if args.models else NEEDLE
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # the children start as an installed kvtop does
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(REPO_ROOT / "kvtop")],
        check=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        cwd=REPO_ROOT,
    )
    print(
        f"startup benchmark: {args.runs} launches each of {' '.join(kvtop_command())} and of the floor "
        f"(benchmarks/floor.py), interleaved, in a {args.cols}x{args.rows} pty, TERM=xterm-256color, "
        f"python {sys.version.split()[0]}"
    )
    apps = ["kvtop"] if args.no_floor else ["kvtop", "floor"]
    launches: dict[str, list[dict[str, object]]] = {a: [] for a in apps}
    with tempfile.TemporaryDirectory() as tmp:
        if args.models:
            path = many_models_scenario(args.models, Path(tmp) / "models.json")
            standin = StandIn(step=0, scenario=str(path))
        else:
            standin = StandIn(step=4)
        with standin:
            print(f"stand-in server {standin.url}: {standin.state().get('label')}")

            def launch(app: str) -> dict[str, object]:
                if app == "kvtop":
                    return one_launch(
                        [*kvtop_command(), "--host", standin.url], needle, args.timeout, args.cols, args.rows
                    )
                return one_launch(floor_command(standin.url), needle, args.timeout, args.cols, args.rows, chrome=None)

            for i in range(args.warmup):
                for app in apps:
                    d = launch(app)["first_data_frame_s"]
                    print(
                        f"  warm-up {i + 1} {app}: first data frame "
                        f"{'never' if d is None else f'{d * 1000:.1f} ms'} (not counted)"
                    )
            for i in range(args.runs):
                for app in apps:
                    r = launch(app)
                    launches[app].append(r)

                    def ms(key: str, r: dict[str, object] = r) -> str:
                        v = r[key]
                        return "   never" if v is None else f"{v * 1000:7.1f} ms"  # type: ignore[operator]

                    chrome = f", first frame {ms('first_frame_s')}" if app == "kvtop" else ""
                    print(
                        f"  run {i + 1} {app:5}: first byte {ms('first_byte_s')}{chrome}, "
                        f"first data frame {ms('first_data_frame_s')}; RSS {int(r['rss_bytes']) / 2**20:.1f} MiB; quit "  # type: ignore[call-overload]
                        f"{'clean, exit ' + str(r['exit_code']) if r['quit_clean'] else 'did NOT exit in 5 s (killed)'}"
                    )
                    if r["first_data_frame_s"] is None:
                        print("    screen at the end (escapes stripped):")
                        for line in str(r.get("screen_tail", "")).splitlines()[-40:]:
                            print("    | " + line)

    def values(app: str, key: str) -> list[float]:
        return [float(r[key]) for r in launches.get(app, []) if r[key] is not None]  # type: ignore[arg-type]

    data, chrome, first_byte = (
        values("kvtop", "first_data_frame_s"),
        values("kvtop", "first_frame_s"),
        values("kvtop", "first_byte_s"),
    )
    floor_data = values("floor", "first_data_frame_s")
    rss, floor_rss = values("kvtop", "rss_bytes"), values("floor", "rss_bytes")
    cpu, floor_cpu = values("kvtop", "cpu_s"), values("floor", "cpu_s")

    print(f"timing python -c 'import kvtop.ui.app' {args.runs}x (and python -c pass for reference)")
    t_pass = time_command([sys.executable, "-c", "pass"], args.runs)
    t_import = time_command([sys.executable, "-c", "import kvtop.ui.app"], args.runs)

    med = statistics.median(data) if data else None
    floor_med = statistics.median(floor_data) if floor_data else None
    failed = sum(1 for rs in launches.values() for r in rs if r["first_data_frame_s"] is None)
    out: dict[str, object] = {
        "benchmark": "startup",
        "runs": args.runs,
        "terminal": f"{args.cols}x{args.rows}",
        "models": args.models or 3,
        "needle": needle,
        "first_data_frame_s": summary(data) if data else None,
        "first_frame_s": summary(chrome) if chrome else None,
        "first_byte_s": summary(first_byte) if first_byte else None,
        "floor_first_data_frame_s": summary(floor_data) if floor_data else None,
        "first_data_frame_vs_floor": ratio(med, floor_med),
        "rss_bytes_median": int(statistics.median(rss)) if rss else None,
        "floor_rss_bytes_median": int(statistics.median(floor_rss)) if floor_rss else None,
        "rss_vs_floor": ratio(
            statistics.median(rss) if rss else None, statistics.median(floor_rss) if floor_rss else None
        ),
        "cpu_s_to_first_data_frame": summary(cpu) if cpu else None,
        "floor_cpu_s_to_first_data_frame": summary(floor_cpu) if floor_cpu else None,
        "cpu_to_first_data_frame_vs_floor": ratio(
            statistics.median(cpu) if cpu else None, statistics.median(floor_cpu) if floor_cpu else None
        ),
        "failed_runs": failed,
        "unclean_quits": sum(1 for rs in launches.values() for r in rs if not r["quit_clean"]),
        "import_kvtop_ui_app_s": summary(t_import),
        "python_pass_s": summary(t_pass),
        "all_first_data_frame_s": [round(v, 4) for v in data],
        "all_floor_first_data_frame_s": [round(v, 4) for v in floor_data],
    }

    print()
    print("results (min / median / max):")
    if first_byte:
        print(f"  kvtop: first byte on the pty         {fmt(summary(first_byte))}")
    if chrome:
        print(f"  kvtop: first frame (chrome, no data) {fmt(summary(chrome))}")
    if data:
        print(f"  kvtop: first frame showing data      {fmt(summary(data))}")
    if floor_data:
        print(f"  floor: first frame showing data      {fmt(summary(floor_data))}")
    print(f"  python -c 'import kvtop.ui.app'      {fmt(summary(t_import))}")
    print(f"  python -c pass                       {fmt(summary(t_pass))}")
    if rss:
        print(
            f"  RSS at the first data frame: kvtop {statistics.median(rss) / 2**20:.1f} MiB, floor "
            f"{(statistics.median(floor_rss) / 2**20) if floor_rss else float('nan'):.1f} MiB -> "
            f"{ratio_text(statistics.median(rss), statistics.median(floor_rss) if floor_rss else None)}"
        )
    if cpu:
        print(
            f"  CPU (user + system) to the first data frame: kvtop {statistics.median(cpu) * 1000:.0f} ms, floor "
            f"{(statistics.median(floor_cpu) * 1000) if floor_cpu else float('nan'):.0f} ms (medians) -> "
            f"{ratio_text(statistics.median(cpu), statistics.median(floor_cpu) if floor_cpu else None)} "
            "(less sensitive than wall time to a busy machine)"
        )
    if med is not None:
        target = None if args.models else TARGET_VS_FLOOR  # the ratio target is the 3-model case's
        print(f"  first data frame (medians): kvtop = {ratio_text(med, floor_med, target)}")
        meets = floor_med is not None and med <= TARGET_VS_FLOOR * floor_med and failed == 0
        if args.models:
            many = med < TARGET_MANY_MODELS_S and failed == 0
            out["meets_many_models_target"] = many
            print(
                f"  {args.models} models: kvtop's first data frame {med:.2f} s (median), worst {max(data):.2f} s: "
                f"{'MEETS' if many else 'MISSES'} (target < {TARGET_MANY_MODELS_S:g} s)"
            )
        out["meets_target"] = meets if not args.models else out["meets_many_models_target"]
    else:
        out["meets_target"] = False
        print("  target: MISSES (kvtop never showed data)")
    if failed:
        print(f"  {failed} launches never showed {needle!r}")
    if out["unclean_quits"]:
        print(f"  {out['unclean_quits']} launches did not quit on 'q' within 5 s")

    if args.importtime:
        print("slowest imports under python -X importtime -c 'import kvtop.ui.app' (cumulative):")
        rows = slowest_imports("kvtop.ui.app")
        for secs, name in rows:
            print(f"  {secs * 1000:7.1f} ms  {name}")
        out["slowest_imports"] = [{"module": n.strip(), "cumulative_s": round(s, 4)} for s, n in rows]

    print(json.dumps(out))
    return 0 if launches["kvtop"] and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
