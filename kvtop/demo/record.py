"""Make the bundled recordings in ``snapshots/`` by recording the stand-in server.

``python -m kvtop.demo.record [--out DIR] [--only demo|incident]`` runs the real dashboard
headless (``KvtopApp.run_test``) with the real ``OllamaClient``, the demo machine's sources
(``kvtop.demo.machine``: the scenario's simulated GPU, RAM and processes, none of the recording
host's, as ``kvtop --demo`` shows) and a real ``FileTail`` on the server log the stand-in writes as
it plays (``--log-file``, ``kvtop.demo.logwriter``), which the recording names ``file:server.log``
(no path of the recording host is recorded). It records with the same ``Recorder`` and header as
``kvtop --record``, and is re-runnable: an existing output file is replaced.

- ``demo.jsonl.gz``: one pass of ``snapshots/demo-scenario.json`` (what ``kvtop --demo`` shows),
  polled every second for the scenario's 80 s.
- ``incident.jsonl.gz``: one pass of ``snapshots/incident-scenario.json`` (80 s): a prompt truncated
  at num_ctx 2048, the eviction of embeddinggemma when qwen3's num_ctx is raised to 32768, gemma4
  spilling into what VRAM is left (its tok/s falls to a quarter), then the fix (qwen3 back to 8192,
  gemma4 100% GPU, its tok/s back).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from kvtop.config import Settings

__all__ = ["REPO_SNAPSHOTS", "main", "record_demo", "record_incident", "standin"]

REPO_SNAPSHOTS = Path(__file__).resolve().parents[2] / "snapshots"


@contextmanager
def standin(scenario: Path, *, manual: bool, log: Path | None = None) -> Iterator[str]:
    """The stand-in server on a free loopback port, playing ``scenario`` once (no loop); with ``log``,
    writing its server log there (``--log-file``)."""
    from kvtop.cli.demo import demo_server

    extra = ["--scenario", str(scenario), "--no-loop"] + (["--log-file", str(log)] if log is not None else [])
    with demo_server(manual=manual, extra=extra) as url:
        yield url


async def _record(settings: Settings, out: Path, script: object, *, log_source: object = None) -> int:
    """Run the dashboard headless with a recorder on ``out`` while ``script()`` runs; records written."""
    from kvtop.cli.dashboard import _attach_recorder
    from kvtop.demo.machine import DemoMachineSource
    from kvtop.ui.app import make_app

    out.unlink(missing_ok=True)  # noqa: ASYNC240 - once, before the app starts
    # the scenario's machine, as kvtop --demo shows it: its GPU, RAM and processes, none of the recording host's
    machine = DemoMachineSource(settings.host_url)
    app = make_app(settings, gpu_source=machine, proc_source=machine.procs_source(), log_source=log_source)  # type: ignore[arg-type]
    problem = _attach_recorder(app, str(out))
    if problem:
        raise OSError(problem)
    async with app.run_test(size=(160, 48)):
        await script()  # type: ignore[operator]
        await asyncio.sleep(0.5)  # the last answers arrive and are recorded
        recorder = app.recorder
        assert recorder is not None, "recording stopped (see the notification)"
        return recorder.records


async def record_pass(name: str, out: Path) -> int:
    """``<name>.jsonl.gz``: one pass of ``snapshots/<name>-scenario.json`` with the server log it writes."""
    from kvtop.demo.scenario_file import load_scenario
    from kvtop.sources.tail_file import FileTail

    scenario = REPO_SNAPSHOTS / f"{name}-scenario.json"
    length = load_scenario(scenario).period_s
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "server.log"
        with standin(scenario, manual=False, log=log) as url:
            # the log is named "file:server.log" in the header and in every log record: a replay must
            # not show this machine's temporary path
            settings = Settings(
                host_url=url, interval_s=1.0, timeout_s=3.0, demo=name == "demo", log_spec="file:server.log"
            )
            tail = FileTail(log)
            tail.description = "file:server.log"
            return await _record(settings, out, lambda: asyncio.sleep(length), log_source=tail)


async def record_demo(out: Path) -> int:
    """``demo.jsonl.gz``: one 80 s pass of the demo scenario, as ``kvtop --demo --record`` sees it."""
    return await record_pass("demo", out)


async def record_incident(out: Path) -> int:
    """``incident.jsonl.gz``: one pass of the incident scenario: the spill cliff and its fix."""
    return await record_pass("incident", out)


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
