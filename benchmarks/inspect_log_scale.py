"""``kvtop inspect-log`` at scale: seconds, MiB/s and peak RSS against the log's size.

Method
------
1. Take every real corpus log under ``tests/fixtures/logs`` (top level, ``posted/`` and
   ``llama-server-runs/``: all eras and wrappers) as lines, and write them, repeated, to a temporary
   file of each size (default 8, 64 and 256 MiB; ``--big`` adds 1 GiB). The corpus is dense:
   nearly every line is a load, allocation or context line, so a file has a model load every
   ~30 lines, far more than a production log (which is mostly request lines).
2. Run ``kvtop inspect-log FILE`` (the console script of this environment, a process of its own,
   stdout to /dev/null) once per size, ``--json`` too with ``--json``; poll its RSS with psutil
   every 20 ms for the peak; wall-clock seconds with ``time.perf_counter``.
3. The floor, measured in the same run: the parser alone (``LogParser.feed`` over the same
   lines, read and decoded as inspect-log reads them) on the first 64 MiB, in MiB/s. The ratio
   ``inspect-log seconds / (size / parser MiB/s)`` says how much grouping, spooling and the
   report add on top of parsing (1.0 = nothing; interpreter start not subtracted).
4. Targets: linear time (MiB/s flat across sizes), RSS < 200 MiB at every size.

Usage: ``python benchmarks/inspect_log_scale.py [--sizes 8,64,256] [--big] [--json] [--keep DIR]``.
Human-readable lines first; the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from benchmarks._common import kvtop_command  # noqa: E402
from kvtop.inspect_log import _lines  # noqa: E402 - the reader inspect-log uses
from kvtop.logparse import LogParser  # noqa: E402

CORPUS = REPO_ROOT / "tests" / "fixtures" / "logs"
RSS_TARGET_BYTES = 200 * 2**20
MIB = 2**20


def corpus_bytes() -> bytes:
    """Every corpus log (not the oracles), each ending with a newline, in path order."""
    parts = []
    for path in sorted(CORPUS.rglob("*.log")):
        if "expected" in path.parts:
            continue
        parts.append(path.read_bytes().rstrip(b"\n") + b"\n")
    return b"".join(parts)


def build(path: Path, size_bytes: int, corpus: bytes) -> int:
    """Write ``corpus`` repeated to ``path`` until it holds at least ``size_bytes``; its line count."""
    lines = corpus.count(b"\n")
    written = count = 0
    with path.open("wb") as f:
        while written < size_bytes:
            f.write(corpus)
            written += len(corpus)
            count += lines
    return count


def parser_floor(path: Path, limit_bytes: int) -> tuple[float, int]:
    """MiB/s of reading + decoding + ``LogParser.feed`` over the first ``limit_bytes`` of ``path``."""
    parser = LogParser()
    feed = parser.feed
    done = 0
    start = time.perf_counter()
    with path.open("rb") as f:
        for line in _lines(f):
            feed(line)
            done += len(line)
            if done >= limit_bytes:
                break
        parser.flush()
    seconds = time.perf_counter() - start
    return done / MIB / seconds, parser.line_no


def run(cmd: list[str]) -> tuple[float, int, int]:
    """Wall seconds, peak RSS bytes (polled every 20 ms) and exit status of ``cmd``."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    try:
        ps = psutil.Process(proc.pid)
        while proc.poll() is None:
            try:
                peak = max(peak, ps.memory_info().rss)
            except psutil.Error:
                break
            time.sleep(0.02)
    except psutil.Error:
        pass
    proc.wait()
    seconds = time.perf_counter() - start
    if proc.returncode:
        sys.stderr.write(proc.stderr.read().decode("utf-8", "replace") if proc.stderr else "")
    if proc.stderr:
        proc.stderr.close()
    return seconds, peak, proc.returncode


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--sizes", default="8,64,256", help="sizes in MiB, comma-separated (default 8,64,256)")
    ap.add_argument("--big", action="store_true", help="add 1024 MiB")
    ap.add_argument("--json", action="store_true", help="also time --json")
    ap.add_argument("--keep", metavar="DIR", help="write the logs to DIR and keep them (default: a temporary dir)")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()] + ([1024] if args.big else [])

    corpus = corpus_bytes()
    corpus_lines = corpus.count(b"\n")
    print(f"corpus: {len(corpus) / 1024:.0f} KiB, {corpus_lines:,} lines from {CORPUS}")
    base = [*kvtop_command(), "inspect-log"]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(args.keep) if args.keep else Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        floor_mib_s: float | None = None
        for size in sizes:
            path = where / f"inspect-{size}mib.log"
            lines = build(path, size * MIB, corpus)
            actual = path.stat().st_size
            if floor_mib_s is None:
                floor_mib_s, floor_lines = parser_floor(path, 64 * MIB)
                print(f"parser floor: {floor_mib_s:.1f} MiB/s (LogParser.feed over {floor_lines:,} lines)")
            for mode in (["--json"], []) if args.json else ([],):
                seconds, peak, rc = run([*base, str(path), *mode])
                rate = actual / MIB / seconds
                ratio = seconds / (actual / MIB / floor_mib_s)
                label = "json" if mode else "text"
                verdict = "MEETS" if peak < RSS_TARGET_BYTES and rc == 0 else "MISSES"
                print(
                    f"{size:>5} MiB {label}: {lines:>11,} lines  {seconds:7.2f} s  {rate:6.1f} MiB/s  "
                    f"peak RSS {peak / MIB:6.1f} MiB  ratio to parser {ratio:4.2f}  rc {rc}  -> {verdict} RSS < 200 MiB"
                )
                results.append(
                    {
                        "size_mib": size,
                        "bytes": actual,
                        "lines": lines,
                        "mode": label,
                        "seconds": round(seconds, 3),
                        "mib_per_s": round(rate, 2),
                        "peak_rss_mib": round(peak / MIB, 1),
                        "ratio_to_parser": round(ratio, 3),
                        "rc": rc,
                    }
                )
            if not args.keep:
                path.unlink()
    print(
        json.dumps(
            {
                "benchmark": "inspect_log_scale",
                "parser_mib_per_s": round(floor_mib_s or 0, 2),
                "rss_target_mib": RSS_TARGET_BYTES // MIB,
                "runs": results,
                "meets_rss": all(r["peak_rss_mib"] < RSS_TARGET_BYTES / MIB for r in results),
                "python": sys.version.split()[0],
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
