"""The dashboard's runs: live (``_run``, with ``--record FILE`` and ``--log -``) and ``--replay``."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
import time
from typing import Any

from kvtop.cli.demo import _machine_sources
from kvtop.cli.exits import EXIT_OK, EXIT_UNREACHABLE
from kvtop.cli.outputs import _sample_once
from kvtop.config import Settings
from kvtop.textsafe import emit


def _replay(settings: Settings, name: str) -> int:
    """``--replay FILE|NAME``: the dashboard over a recording; exit 2 when it cannot be read."""
    from kvtop.sources.recording import RecordingError, open_recording, resolve_recording
    from kvtop.ui.app import make_app

    try:
        recording = open_recording(resolve_recording(name))  # streamed: records are read as they play
    except RecordingError as exc:
        emit(f"kvtop: --replay: {exc}")
        return EXIT_UNREACHABLE
    header = recording.header
    log_spec = header.sources.get("log")
    settings = dataclasses.replace(
        settings,
        host_url=header.host_url,
        demo=False,
        readonly=True,
        log_spec=log_spec if isinstance(log_spec, str) else "none",
    )
    app = make_app(settings, replay=recording)
    app.run()
    return app.return_code or EXIT_OK


def _attach_recorder(app: Any, path: str) -> str | None:
    """``--record FILE``: create FILE with its header and hand it to ``app``; the error text, or None."""
    from kvtop.sources.recorder import Recorder, recording_header

    header = recording_header(
        hosts=app.hosts,
        log_spec=app.settings.log_spec,
        gpu=app.gpu_source is not None,
        demo=app.settings.demo,
        naive_tz=app.state.naive_tz,
        thresholds=app.state.thresholds,
        started_at=time.time(),
    )
    try:
        app.recorder = Recorder.create(path, header)
    except FileExistsError:
        if os.path.isdir(path):
            return f"--record: {path} is a directory: name a file in it, e.g. {os.path.join(path, 'kvtop.jsonl.gz')}"
        return f"--record: {path} exists: kvtop never overwrites a recording; pick another name"
    except OSError as exc:
        return f"--record: cannot write {path}: {exc.strerror or exc}"
    return None


def _run(settings: Settings, *, once: bool, record: str | None = None) -> int:
    if once:
        return asyncio.run(_sample_once(settings))
    from kvtop.ui.app import make_app

    log_source = None
    if settings.log_spec == "-":
        try:
            log_source = _stdin_log_with_keys_from_tty()
        except OSError as exc:
            emit(f"kvtop: --log -: {exc}")
            return EXIT_UNREACHABLE
    demo = _machine_sources(settings)
    app = make_app(
        settings, log_source=log_source, gpu_source=demo[0] if demo else None, proc_source=demo[1] if demo else None
    )
    if record:
        problem = _attach_recorder(app, record)
        if problem:
            emit(f"kvtop: {problem}")
            return EXIT_UNREACHABLE
    app.run()
    return app.return_code or EXIT_OK


def _stdin_log_with_keys_from_tty() -> Any:
    """``ollama serve 2>&1 | kvtop --log -``: the pipe is the log, the keys come from the terminal.

    Textual reads keys from file descriptor 0, so the pipe is moved to a new descriptor for the
    log reader and the controlling terminal (``/dev/tty``) takes its place.

    Raises:
        OSError: stdin is a terminal (nothing is piped in), or there is no terminal for the keys.
    """
    from kvtop.sources.tail_proc import StdinTail

    if os.isatty(0):
        raise OSError(
            "nothing is piped into kvtop (stdin is the terminal); "
            "use e.g. `ollama serve 2>&1 | kvtop --log -`, or --log file:PATH"
        )
    log_fd = os.dup(0)
    tty_fd = os.open("/dev/tty", os.O_RDWR)
    os.dup2(tty_fd, 0)
    os.close(tty_fd)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the process's stdin, kept for its lifetime
    return StdinTail(log_fd)
