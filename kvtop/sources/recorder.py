"""Writing a recording (``kvtop --record FILE``): its header, and the :class:`Recorder` that appends
one scrubbed record per applied message and flushes after each (the format:
:mod:`kvtop.sources.replay`). I/O only; never imports Textual.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import time
import typing
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta, tzinfo
from pathlib import Path
from typing import IO, Any

from kvtop import __version__
from kvtop.model.codec import encode
from kvtop.model.gpu_snapshots import GpuSnapshot, ProcSnapshot
from kvtop.model.slot_snapshots import SlotsSnapshot
from kvtop.model.snapshots import OllamaSnapshot
from kvtop.redact import json_text_ok, scrub_json_text, scrub_obj
from kvtop.sources.recording import FORMAT_VERSION

# --------------------------------------------------------------------------------------------
# Writing


def recording_header(
    *, hosts: Sequence[str], log_spec: str, gpu: bool, demo: bool, naive_tz: tzinfo, thresholds: Any, started_at: float
) -> dict[str, Any]:
    """The header object of a new recording.

    Args:
        hosts: The servers watched, the first one shown first (``KvtopApp.hosts``).
        log_spec: The ``--log`` spec read.
        gpu: Whether GPU and process samples are taken.
        demo: Whether the server is ``--demo``'s stand-in.
        naive_tz: Zone assumed for log stamps without one (``AppState.naive_tz``).
        thresholds: The alert thresholds (``model.alerts.Thresholds``).
        started_at: Unix seconds.
    """
    offset = naive_tz.utcoffset(datetime.now(naive_tz)) or timedelta(0)
    return {
        "kvtop_recording": FORMAT_VERSION,
        "kvtop_version": __version__,
        "started_at": started_at,
        "host": hosts[0],
        "sources": {"ollama": hosts[0], "hosts": list(hosts), "log": log_spec, "gpu": gpu},
        "demo": demo,
        "naive_tz": {"offset_s": int(offset.total_seconds()), "name": naive_tz.tzname(None) or ""},
        "alerts": dataclasses.asdict(thresholds),
        "apply_steps": True,
    }


class Recorder:
    """Appends records to a recording and flushes after each one.

    Create it with :meth:`create` (which writes the header); then call :meth:`ollama`,
    :meth:`gpu` and :meth:`log` for each message the dashboard applies, in that order.
    Every write is one line of a few kilobytes, so the dashboard never waits on it noticeably.

    Raises (every method):
        OSError: The file cannot be created or written (disk full, permission, removed disk).
    """

    def __init__(
        self, path: Path, stream: IO[bytes], raw: IO[bytes], *, clock: Callable[[], float] = time.time
    ) -> None:
        self.path = path
        self._stream = stream
        self._raw = raw
        self._clock = clock
        self.records = 0
        """Records written so far (the header not counted)."""

    @classmethod
    def create(
        cls, path: str | os.PathLike[str], header: Mapping[str, Any], *, clock: Callable[[], float] = time.time
    ) -> Recorder:
        """Create ``path`` (gzip when it ends in ``.gz``) and write ``header`` as its first line.

        Raises:
            FileExistsError: ``path`` exists: a recording is never overwritten.
            OSError: The file cannot be created or written.
        """
        p = Path(path).expanduser()
        raw = open(p, "xb")  # noqa: SIM115 - kept open for the session; closed in close()
        try:
            stream: IO[bytes] = (
                typing.cast(IO[bytes], gzip.GzipFile(fileobj=raw, mode="wb", filename=""))
                if p.name.endswith(".gz")
                else raw
            )
            rec = cls(p, stream, raw, clock=clock)
            rec._write(header)
        except BaseException:
            raw.close()
            raise
        return rec

    def ollama(self, snapshot: OllamaSnapshot) -> None:
        """Record one ``SnapshotReceived``."""
        self._write({"t": self._clock(), "kind": "ollama", "snapshot": encode(snapshot)})
        self.records += 1

    def gpu(self, gpu: GpuSnapshot, procs: ProcSnapshot) -> None:
        """Record one ``GpuSampled``."""
        self._write({"t": self._clock(), "kind": "gpu", "gpu": encode(gpu), "procs": encode(procs)})
        self.records += 1

    def slots(self, snapshot: SlotsSnapshot) -> None:
        """Record one ``SlotsSampled`` (the local runners' ``/props`` + ``/slots``: the runner rung)."""
        self._write({"t": self._clock(), "kind": "slots", "slots": encode(snapshot)})
        self.records += 1

    def log(
        self,
        *,
        source: str | None,
        status: str | None,
        ok: bool,
        lines: int,
        dropped_lines: int,
        raw_lines: Sequence[str],
    ) -> None:
        """Record one ``LogEventsReceived`` (its raw lines; the events are parsed again on replay)."""
        self._write(
            {
                "t": self._clock(),
                "kind": "log",
                "source": source,
                "status": status,
                "ok": ok,
                "lines": lines,
                "dropped_lines": dropped_lines,
                "raw_lines": list(raw_lines),
            }
        )
        self.records += 1

    def apply(self) -> None:
        """Record one apply step (every message recorded since the previous one was applied)."""
        self._write({"t": self._clock(), "kind": "apply"})
        self.records += 1

    def _write(self, obj: Mapping[str, Any]) -> None:
        # a secret echoed by a server (a model name with user:pass@, ?token=) is not recorded
        if json_text_ok():
            line = scrub_json_text(json.dumps(obj, ensure_ascii=False, separators=(",", ":")))
        else:  # a known secret like "2048" could be a number of the line: scrub its strings only
            line = json.dumps(scrub_obj(obj), ensure_ascii=False, separators=(",", ":"))
        data = (line + "\n").encode("utf-8", "replace")
        self._stream.write(data)
        self._stream.flush()  # GzipFile.flush: Z_SYNC_FLUSH, then the file's own flush
        if self._stream is not self._raw:
            self._raw.flush()

    def close(self) -> None:
        """Finish the file (the gzip trailer); errors are ignored: every record is already flushed."""
        for closable in (self._stream, self._raw):
            try:
                closable.close()
            except OSError:
                pass
