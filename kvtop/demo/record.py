"""Make the bundled recordings in ``snapshots/`` by recording the stand-in server.

``python -m kvtop.demo.record [--out DIR] [--only demo|incident]`` runs the real dashboard
headless (``KvtopApp.run_test``) with the real ``OllamaClient``, the demo machine's sources
(``kvtop.demo.machine``: the scenario's RAM, no GPU or process of the recording host, as
``kvtop --demo`` shows) and, for the incident, a real ``FileTail`` on a temporary log file that
the recording names ``file:server.log`` (no path of the recording host is recorded), and records it with the same ``Recorder`` and header as ``kvtop --record``. It is re-runnable: an
existing output file is replaced.

- ``demo.jsonl.gz``: one pass of ``snapshots/demo-scenario.json`` (what ``kvtop --demo`` shows),
  polled every second for the scenario's 80 s.
- ``incident.jsonl.gz``: ``snapshots/incident-scenario.json`` stepped by hand while real server-log
  lines from the corpus are appended to the log at the matching moments (see
  :data:`INCIDENT_LOG`): two prompts truncated at num_ctx 2048, the eviction of embeddinggemma
  when qwen3's num_ctx is raised to 32768, then gemma4 spilling. About 40 s.

The log lines are copied verbatim from the corpus files named beside them, except that their
timestamps are replaced by the time they are appended (:func:`restamp`): the alert rules only count
log events from the last 15 minutes of the recording's own clock.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from kvtop.config import Settings

REPO_SNAPSHOTS = Path(__file__).resolve().parents[2] / "snapshots"

INCIDENT_LOG: dict[str, tuple[str, ...]] = {
    # corpus/logs/014-truncating-input-prompt-embeddings-0.6.log (ollama/ollama#10368)
    "truncation": (
        'time=2025-04-22T11:21:46.411Z level=INFO source=server.go:619 msg="llama runner started in 0.25 seconds"',
        '[GIN] 2025/04/22 - 11:21:46 | 200 |  444.455595ms |     192.0.2.101 | POST     "/api/embeddings"',
        'time=2025-04-22T11:21:47.546Z level=WARN source=runner.go:131 msg="truncating input prompt" limit=2048 prompt=5065 keep=5 new=2048',
    ),
    # corpus/logs/017-old-cpp-runner-input-truncated-update_slots.log (graphrag-local-ollama#24)
    "truncation2": (
        'INFO [update_slots] input truncated | n_ctx=2048 n_erase=1090 n_keep=4 n_left=2044 n_shift=1022 tid="130623106379776" timestamp=1721345155',
    ),
    # corpus/logs/050-eviction-debug-idle-runner-unload-vulkan-llama-server-era.log (ollama/ollama#18123)
    "eviction": (
        'time=2026-08-29T08:45:22.735Z level=DEBUG source=sched.go:1686 msg="found an idle runner to unload" runner.name=registry.ollama.ai/library/embeddinggemma:latest runner.inference="[{ID:0 Library:Vulkan}]" runner.size="641.8 MiB" runner.vram="641.8 MiB" runner.parallel=1 runner.pid=79 runner.model=/home/ollama/.ollama/models/blobs/sha256-0800cbac9c2064dde519420e75e512a83cb360de3ad5df176185dc69652fc515 runner.num_ctx=2048',
        'time=2026-08-29T08:45:22.735Z level=DEBUG source=sched.go:339 msg="resetting model to expire immediately to make room" runner.name=registry.ollama.ai/library/embeddinggemma:latest runner.inference="[{ID:0 Library:Vulkan}]" runner.size="641.8 MiB" runner.vram="641.8 MiB" runner.parallel=1 runner.pid=79 runner.model=/home/ollama/.ollama/models/blobs/sha256-0800cbac9c2064dde519420e75e512a83cb360de3ad5df176185dc69652fc515 runner.num_ctx=2048 refCount=0',
        'time=2026-08-29T08:45:22.735Z level=DEBUG source=sched.go:350 msg="waiting for pending requests to complete and unload to occur" runner.name=registry.ollama.ai/library/embeddinggemma:latest runner.inference="[{ID:0 Library:Vulkan}]" runner.size="641.8 MiB" runner.vram="641.8 MiB" runner.parallel=1 runner.pid=79 runner.model=/home/ollama/.ollama/models/blobs/sha256-0800cbac9c2064dde519420e75e512a83cb360de3ad5df176185dc69652fc515 runner.num_ctx=2048',
    ),
}
"""Real log lines (corpus files in the comments), appended to the incident's log while recording."""

INCIDENT_TIMELINE: tuple[tuple[float, str, int | None], ...] = (
    (0.0, "", 0),              # step 0: qwen3 and embeddinggemma at num_ctx 2048
    (6.0, "truncation", None),
    (12.0, "truncation2", None),
    (18.0, "eviction", None),  # the scheduler makes room for the larger context ...
    (19.0, "", 1),             # ... and qwen3 reloads at 32768
    (28.0, "", 2),             # gemma4 loads and spills
    (42.0, "", None),          # end
)
"""(seconds after the start, log lines to append, stand-in step to go to)."""

_ISO = re.compile(r"time=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z")
_GIN = re.compile(r"\[GIN\] \d{4}/\d\d/\d\d - \d\d:\d\d:\d\d")
_UNIX = re.compile(r"timestamp=\d+")


def restamp(line: str, now: float) -> str:
    """``line`` with its timestamps set to ``now``: ``time=…Z`` (UTC, milliseconds), the GIN
    stamp (local time, as Ollama prints it) and the C++ runner's ``timestamp=`` (Unix seconds)."""
    utc = datetime.fromtimestamp(now, timezone.utc)
    iso = utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"
    local = datetime.fromtimestamp(now).astimezone()
    line = _ISO.sub(f"time={iso}", line)
    line = _GIN.sub(local.strftime("[GIN] %Y/%m/%d - %H:%M:%S"), line)
    return _UNIX.sub(f"timestamp={int(now)}", line)


@contextmanager
def standin(scenario: Path, *, manual: bool) -> Iterator[str]:
    """The stand-in server on a free loopback port, playing ``scenario`` (once, no loop)."""
    from kvtop.cli import demo_server

    with demo_server(manual=manual, extra=["--scenario", str(scenario), "--no-loop"]) as url:
        yield url


async def _record(settings: Settings, out: Path, script: object, *, log_source: object = None) -> int:
    """Run the dashboard headless with a recorder on ``out`` while ``script()`` runs; records written."""
    from kvtop.cli import _attach_recorder
    from kvtop.demo.machine import DemoMachineSource, NoProcSource
    from kvtop.ui.app import make_app

    if out.exists():
        out.unlink()
    # the scenario's machine, as kvtop --demo shows it: its RAM, no GPU or process of the recording host
    app = make_app(settings, gpu_source=DemoMachineSource(settings.host_url), proc_source=NoProcSource(),
                   log_source=log_source)  # type: ignore[arg-type]
    problem = _attach_recorder(app, str(out))
    if problem:
        raise OSError(problem)
    async with app.run_test(size=(160, 48)):
        await script()  # type: ignore[operator]
        await asyncio.sleep(0.5)  # the last answers arrive and are recorded
        recorder = app.recorder
        assert recorder is not None, "recording stopped (see the notification)"
        return recorder.records


async def record_demo(out: Path) -> int:
    """``demo.jsonl.gz``: one 80 s pass of the demo scenario, as ``kvtop --demo --record`` sees it."""
    from kvtop.demo.scenario import load_scenario

    scenario = REPO_SNAPSHOTS / "demo-scenario.json"
    length = load_scenario(scenario).period_s
    with standin(scenario, manual=False) as url:
        settings = Settings(host_url=url, interval_s=1.0, timeout_s=3.0, demo=True, log_spec="none")
        return await _record(settings, out, lambda: asyncio.sleep(length))


async def record_incident(out: Path) -> int:
    """``incident.jsonl.gz``: the incident scenario stepped by hand with its real log lines."""
    import httpx

    scenario = REPO_SNAPSHOTS / "incident-scenario.json"
    from kvtop.sources.tail_file import FileTail

    with tempfile.TemporaryDirectory() as tmp, standin(scenario, manual=True) as url:
        log = Path(tmp) / "server.log"
        log.write_text("", encoding="utf-8")
        # the log is named "file:server.log" in the header and in every log record: a replay must
        # not show this machine's temporary path
        settings = Settings(host_url=url, interval_s=1.0, timeout_s=3.0, log_spec="file:server.log")
        tail = FileTail(log)
        tail.description = "file:server.log"

        async def script() -> None:
            start = time.monotonic()
            async with httpx.AsyncClient(base_url=url, trust_env=False) as client:
                for at_s, lines, step in INCIDENT_TIMELINE:
                    await asyncio.sleep(max(0.0, start + at_s - time.monotonic()))
                    if lines:
                        with log.open("a", encoding="utf-8") as f:
                            for line in INCIDENT_LOG[lines]:
                                f.write(restamp(line, time.time()) + "\n")
                    if step is not None:
                        response = await client.post("/_standin/advance", json={"to": step})
                        response.raise_for_status()

        return await _record(settings, out, script, log_source=tail)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code (1 when a recording could not be made)."""
    parser = argparse.ArgumentParser(prog="python -m kvtop.demo.record", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO_SNAPSHOTS, help="folder to write into (default: snapshots/)")
    parser.add_argument("--only", choices=("demo", "incident"), help="make only this recording")
    args = parser.parse_args(argv)
    jobs = {"demo": record_demo, "incident": record_incident}
    for name, job in jobs.items():
        if args.only and args.only != name:
            continue
        out = args.out / f"{name}.jsonl.gz"
        try:
            n = asyncio.run(job(out))
        except (OSError, RuntimeError) as exc:
            print(f"{name}: {exc}", file=sys.stderr)
            return 1
        print(f"{out}: {n} records, {os.path.getsize(out):,} bytes")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
