"""Long fuzzing run: the property tests of tests/unit/test_fuzz.py (and the other hypothesis tests)
with many more cases than the test suite runs.

Usage: ``python benchmarks/fuzz.py [--examples 1000000] [-k EXPR]``. Runs pytest on the fuzz tests
with ``KVTOP_FUZZ_EXAMPLES`` set, then prints, per target, the number of cases hypothesis ran and
the failures (expected: 0), and the wall time. 10⁶ cases per target take hours on 2 cores; pass a
smaller ``--examples`` for a quick look.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TESTS = ["tests/unit/test_fuzz.py"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=1_000_000)
    parser.add_argument("-k", default=None, help="pytest -k expression (one target)")
    args = parser.parse_args()
    env = {**os.environ, "KVTOP_FUZZ_EXAMPLES": str(args.examples)}
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-W",
        "ignore::FutureWarning",
        "--timeout=0",
        "--hypothesis-show-statistics",
        *TESTS,
    ]
    if args.k:
        cmd += ["-k", args.k]
    t0 = time.monotonic()
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    took = time.monotonic() - t0
    out = done.stdout + done.stderr
    targets = re.findall(
        r"(tests/\S+::\S+):\s*\n\s*- during (?:reuse|generate) phase.*?\n(?:.*\n)*?\s*- Stopped because", out
    )
    passed = re.findall(
        r"- during generate phase \([\d.]+ seconds\):\s*\n\s*- Typical runtimes: .*\n\s*- (\d+) passing", out
    )
    failed = re.findall(r"^FAILED (\S+)", out, flags=re.M)
    print(f"examples per target asked: {args.examples:,}")
    for name, count in zip(targets or [f"target {i + 1}" for i in range(len(passed))], passed):
        print(f"  {name}: {int(count):,} cases run")
    print(f"failures: {len(failed)}" + ("".join(f"\n  {f}" for f in failed)))
    print(f"wall time: {took:,.0f} s; pytest exit {done.returncode}")
    if done.returncode != 0:
        print(out[-4000:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
