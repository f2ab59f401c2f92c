"""Startup benchmark: time from process start to the first rendered frame that shows data.

Method
------
1. Start the stand-in Ollama server (``python -m kvtop.demo.server --port 0 --manual``) and
   jump it to scenario step 4 (``POST /_standin/advance {"to": 4}``: three models loaded).
2. ``--runs`` times (default 5), after ``--warmup`` untimed runs (default 1, so the figures
   do not include writing ``.pyc`` files): launch ``kvtop --host URL`` (the console script of
   this interpreter's environment) as a real subprocess on the slave side of a pseudo-terminal
   of 80x24 (``os.openpty`` + ``TIOCSWINSZ``; own session with the pty as controlling
   terminal; ``TERM=xterm-256color``). The clock starts just before the fork. The master side
   is read without blocking (``select`` + ``O_NONBLOCK``); after each read the output, with
   escape sequences stripped, is searched for a model name the table shows at 80 columns
   (``qwen3:1.7b-q8_0``). Three times are taken per run:

   - first byte: the first output of any kind on the pty;
   - first frame: the dashboard chrome is drawn (``sort:`` of the status line), no data yet;
   - first data frame: the model name is on screen: **the figure this benchmark is about**.

   Then ``q`` is sent and the process is given 5 s to exit (SIGKILL after that).
3. Separately, ``--runs`` times: the wall time of ``python -c 'import kvtop.ui.app'`` in a
   fresh interpreter, next to ``python -c pass`` (the interpreter's own start) for reference.
   ``--importtime`` adds the slowest imports reported by ``python -X importtime``.

Target: first data frame < 1 s (median). The script prints human-readable lines and, last,
one JSON line. Exit code 0 when every timed run showed data, 1 otherwise.

Usage: ``python benchmarks/startup.py [--runs 5] [--warmup 1] [--timeout 20] [--importtime]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import REPO_ROOT, PtyApp, StandIn, kvtop_command, summary

TARGET_FIRST_FRAME_S = 1.0
NEEDLE = "qwen3:1.7b-q8_0"
CHROME_NEEDLE = "sort:"


def one_launch(url: str, timeout: float, cols: int, rows: int) -> dict[str, object]:
    """Launch kvtop once in a pty; return its timings (seconds from the fork) and exit info."""
    app = PtyApp([*kvtop_command(), "--host", url], cols=cols, rows=rows)
    try:
        t0 = app.start()
        seen = app.watch(["", CHROME_NEEDLE, NEEDLE], timeout)
        t_byte, t_chrome, t_data = seen[""], seen[CHROME_NEEDLE], seen[NEEDLE]
        code, clean = app.quit()
        result: dict[str, object] = {
            "first_byte_s": None if t_byte is None else t_byte - t0,
            "first_frame_s": None if t_chrome is None else t_chrome - t0,
            "first_data_frame_s": None if t_data is None else t_data - t0,
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
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"],
                          capture_output=True, text=True, check=True, cwd=REPO_ROOT)
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
    ap.add_argument("--runs", type=int, default=5, help="timed launches (default 5)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed launches first (default 1)")
    ap.add_argument("--timeout", type=float, default=20.0, help="give up on one launch after S s (default 20)")
    ap.add_argument("--cols", type=int, default=80)
    ap.add_argument("--rows", type=int, default=24)
    ap.add_argument("--importtime", action="store_true", help="also list the slowest imports (-X importtime)")
    args = ap.parse_args()

    print(f"kvtop startup benchmark: {args.runs} launches of {' '.join(kvtop_command())} "
          f"in a {args.cols}x{args.rows} pty, TERM=xterm-256color, python {sys.version.split()[0]}")
    launches: list[dict[str, object]] = []
    warmups: list[dict[str, object]] = []
    with StandIn(step=4) as standin:
        print(f"stand-in server {standin.url} at step 4: {standin.state().get('label')}")
        for i in range(args.warmup):
            r = one_launch(standin.url, args.timeout, args.cols, args.rows)
            warmups.append(r)
            d = r["first_data_frame_s"]
            print(f"  warm-up {i + 1}: first data frame "
                  f"{'never' if d is None else f'{d * 1000:.1f} ms'} (not counted)")
        for i in range(args.runs):
            r = one_launch(standin.url, args.timeout, args.cols, args.rows)
            launches.append(r)

            def ms(key: str, r: dict[str, object] = r) -> str:
                v = r[key]
                return "   never" if v is None else f"{v * 1000:7.1f} ms"  # type: ignore[operator]

            print(f"  run {i + 1}: first byte {ms('first_byte_s')}, first frame {ms('first_frame_s')}, "
                  f"first data frame {ms('first_data_frame_s')}; quit "
                  f"{'clean, exit ' + str(r['exit_code']) if r['quit_clean'] else 'did NOT exit in 5 s (killed)'}")
            if r["first_data_frame_s"] is None:
                print("    screen at the end (escapes stripped):")
                for line in str(r.get("screen_tail", "")).splitlines()[-40:]:
                    print("    | " + line)

    data = [float(r["first_data_frame_s"]) for r in launches if r["first_data_frame_s"] is not None]  # type: ignore[arg-type]
    chrome = [float(r["first_frame_s"]) for r in launches if r["first_frame_s"] is not None]  # type: ignore[arg-type]
    first_byte = [float(r["first_byte_s"]) for r in launches if r["first_byte_s"] is not None]  # type: ignore[arg-type]

    print(f"timing python -c 'import kvtop.ui.app' {args.runs}x (and python -c pass for reference)")
    t_pass = time_command([sys.executable, "-c", "pass"], args.runs)
    t_import = time_command([sys.executable, "-c", "import kvtop.ui.app"], args.runs)

    out: dict[str, object] = {
        "benchmark": "startup",
        "runs": args.runs,
        "terminal": f"{args.cols}x{args.rows}",
        "needle": NEEDLE,
        "target_first_data_frame_s": TARGET_FIRST_FRAME_S,
        "first_data_frame_s": summary(data) if data else None,
        "first_frame_s": summary(chrome) if chrome else None,
        "first_byte_s": summary(first_byte) if first_byte else None,
        "failed_runs": len(launches) - len(data),
        "unclean_quits": sum(1 for r in launches if not r["quit_clean"]),
        "import_kvtop_ui_app_s": summary(t_import),
        "python_pass_s": summary(t_pass),
        "all_first_data_frame_s": [round(v, 4) for v in data],
    }

    print()
    print("results (min / median / max):")
    if first_byte:
        print(f"  first byte on the pty         {fmt(summary(first_byte))}")
    if chrome:
        print(f"  first frame (chrome, no data) {fmt(summary(chrome))}")
    if data:
        print(f"  first frame showing data      {fmt(summary(data))}   "
              f"<- target < {TARGET_FIRST_FRAME_S * 1000:.0f} ms")
    print(f"  python -c 'import kvtop.ui.app' {fmt(summary(t_import))}")
    print(f"  python -c pass                {fmt(summary(t_pass))}")
    if data:
        med = statistics.median(data)
        verdict = "MEETS" if med < TARGET_FIRST_FRAME_S and len(data) == len(launches) else "MISSES"
        out["meets_target"] = verdict == "MEETS"
        print(f"  target: first frame with data < {TARGET_FIRST_FRAME_S:g} s (median): {verdict} "
              f"(median {med * 1000:.0f} ms, worst {max(data) * 1000:.0f} ms)")
    else:
        out["meets_target"] = False
        print("  target: first frame with data < 1 s: MISSES (kvtop never showed data)")
    if out["failed_runs"]:
        print(f"  {out['failed_runs']} of {len(launches)} launches never showed {NEEDLE!r}")
    if out["unclean_quits"]:
        print(f"  {out['unclean_quits']} of {len(launches)} launches did not quit on 'q' within 5 s")

    if args.importtime:
        print("slowest imports under python -X importtime -c 'import kvtop.ui.app' (cumulative):")
        rows = slowest_imports("kvtop.ui.app")
        for secs, name in rows:
            print(f"  {secs * 1000:7.1f} ms  {name}")
        out["slowest_imports"] = [{"module": n.strip(), "cumulative_s": round(s, 4)} for s, n in rows]

    print(json.dumps(out))
    return 0 if launches and not out["failed_runs"] else 1


if __name__ == "__main__":
    sys.exit(main())
