"""Messages the replay worker posts to the app (past tense: something happened); the app stages them
in its engine (``kvtop.engine``), which polls the live sources itself."""

from __future__ import annotations

from textual.message import Message

from kvtop.logparse.events import LogEvent
from kvtop.model.gpu_snapshots import GpuSnapshot, ProcSnapshot
from kvtop.model.slot_snapshots import SlotsSnapshot
from kvtop.model.snapshots import OllamaSnapshot


class LogEventsReceived(Message):
    """One batch of log lines, parsed (a recorded batch, parsed by the replay worker's ``LogFeed``)."""

    def __init__(
        self,
        events: tuple[LogEvent, ...],
        *,
        source: str | None,
        status: str | None,
        ok: bool,
        lines: int,
        dropped_lines: int,
        raw_lines: tuple[str, ...] = (),
    ) -> None:
        super().__init__()
        self.events = events
        self.source = source
        self.status = status
        self.ok = ok
        self.lines = lines
        self.dropped_lines = dropped_lines
        self.raw_lines = raw_lines


class SnapshotReceived(Message):
    """One poll of a server; the app stages it in its engine for the next apply step."""

    def __init__(self, snapshot: OllamaSnapshot) -> None:
        super().__init__()
        self.snapshot = snapshot


class GpuSampled(Message):
    """One GPU sample and, taken right after it, one process sample."""

    def __init__(self, gpu: GpuSnapshot, procs: ProcSnapshot) -> None:
        super().__init__()
        self.gpu = gpu
        self.procs = procs


class SlotsSampled(Message):
    """One round of ``/slots`` of the local llama-server runners."""

    def __init__(self, snapshot: SlotsSnapshot) -> None:
        super().__init__()
        self.snapshot = snapshot


class ApplyStepRecorded(Message):
    """``--replay``: the recording's next ``apply`` record (the live dashboard applied here)."""


class ReplayMoved(Message):
    """The worker applied a record or reached the end (the header's clock and END follow)."""


class ReplayNotice(Message):
    """Something to tell the user about the recording (a log line the parser failed on)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class ReplayBurst(Message):
    """Replay starts (``start``) or ends a jump; ``restart``: the state goes back to the initial one."""

    def __init__(self, *, start: bool, restart: bool = False) -> None:
        super().__init__()
        self.start = start
        self.restart = restart
