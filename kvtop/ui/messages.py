"""Messages workers post to the app (past tense: something happened)."""

from __future__ import annotations

from textual.message import Message

from kvtop.logparse.events import LogEvent
from kvtop.model.gpu import GpuSnapshot, ProcSnapshot
from kvtop.model.slots import SlotsSnapshot
from kvtop.model.snapshots import OllamaSnapshot


class LogEventsReceived(Message):
    """The log worker parsed one batch of lines."""

    def __init__(self, events: tuple[LogEvent, ...], *, source: str | None, status: str | None, ok: bool,
                 lines: int, dropped_lines: int, raw_lines: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.events = events
        self.source = source
        self.status = status
        self.ok = ok
        self.lines = lines
        self.dropped_lines = dropped_lines
        self.raw_lines = raw_lines


class SnapshotReceived(Message):
    """A source finished one sample; the app applies it to its state."""

    def __init__(self, snapshot: OllamaSnapshot) -> None:
        super().__init__()
        self.snapshot = snapshot


class GpuSampled(Message):
    """The GPU worker took one GPU sample and, right after it, one process sample."""

    def __init__(self, gpu: GpuSnapshot, procs: ProcSnapshot) -> None:
        super().__init__()
        self.gpu = gpu
        self.procs = procs


class SlotsSampled(Message):
    """The slots worker asked the local llama-server runners for ``/slots`` (one round)."""

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
