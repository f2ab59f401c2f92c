"""What sanitizing every JSON string costs: ``textsafe.safe_json`` — one pass over the
finished object, every string and key scrubbed of secrets (``kvtop.redact.scrub_text``) and of
control characters — beside its floor, a plain ``json.dumps`` of the same object, in the same run;
and ``redact.scrub_json_text`` over the serialized record (what a recording pays per record)
beside ``json.dumps`` too.

The objects are real: ``kvtop --once --json`` run against the stand-in server at 3 models (the
bundled scenario, step 4) and at ``--models`` models (``_common.many_models_scenario``).

Usage: ``python benchmarks/json_output_cost.py [--models 1000] [--repeat 20]``. Prints the median
CPU milliseconds (``time.process_time``) of each, and the ratios; last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import StandIn, many_models_scenario  # noqa: E402
from kvtop.redact import scrub_json_text  # noqa: E402
from kvtop.textsafe import safe_json  # noqa: E402


def _median_ms(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return statistics.median(times) * 1e3


def _once_json(url: str) -> Any:
    done = subprocess.run(
        [sys.executable, "-m", "kvtop", "--once", "--json", "--host", url, "--timeout", "30"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"kvtop --once --json failed ({done.returncode}): {done.stderr[-500:]}")
    return json.loads(done.stdout)


def _measure(doc: Any, repeat: int) -> dict[str, float]:
    floor = _median_ms(lambda: json.dumps(doc, indent=None, ensure_ascii=False), repeat)
    safe = _median_ms(lambda: safe_json(doc, indent=None), repeat)
    scrub = _median_ms(lambda: scrub_json_text(json.dumps(doc, separators=(",", ":"), ensure_ascii=False)), repeat)
    return {
        "json_dumps_ms": round(floor, 3),
        "safe_json_ms": round(safe, 3),
        "recording_ms": round(scrub, 3),
        "safe_json_ratio": round(safe / floor, 2) if floor else None,
        "recording_ratio": round(scrub / floor, 2) if floor else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        cases = [("3", None), (str(args.models), many_models_scenario(args.models, Path(tmp) / "many.json"))]
        for label, scenario in cases:
            with StandIn(step=4 if scenario is None else 0, scenario=str(scenario) if scenario else None) as server:
                doc = _once_json(server.url)
            figures = _measure(doc, args.repeat)
            figures["strings"] = len(json.dumps(doc))
            out[label] = figures
            print(
                f"{label:>5} models: json.dumps {figures['json_dumps_ms']:8.2f} ms   safe_json "
                f"{figures['safe_json_ms']:8.2f} ms ({figures['safe_json_ratio']}x)   recording scrub+dumps "
                f"{figures['recording_ms']:8.2f} ms ({figures['recording_ratio']}x)   {figures['strings']:,} bytes"
            )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
