"""The replay worker: feeds a recording through the live path (``kvtop --replay FILE``).

It posts exactly the messages the live workers post (``SnapshotReceived``, ``GpuSampled``,
``LogEventsReceived``, the last with events parsed from the recorded raw lines by a
``kvtop.engine.LogFeed``, the engine's one log-batch loop, as live), so the app stages them in its
engine and ``model.state``, the alert rules and the widgets do what they did live. Between two records it sleeps the recorded gap
divided by the speed. A jump posts the records up to the target between two
:class:`ReplayBurst` messages (the dashboard repaints once, at the end); a jump back first resets
the state to the initial one and reads the recording again from its first record, since the
state is a fold over the records.

The recording is read as it plays (:class:`~kvtop.sources.replay.Player` over a
:class:`~kvtop.sources.replay.RecordingFile`): the first frame comes at once however long the
file is. File reads and decoding run in a thread (``asyncio.to_thread``), so a slow disk or a
long damaged line never blocks the dashboard; a jump posts its records in batches of
:data:`BATCH` and waits for the app to apply each batch before reading the next, so memory
stays bounded by one batch however far it goes.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from typing import TYPE_CHECKING


from kvtop.engine import LogFeed
from kvtop.logparse.parser import year_at
from kvtop.sources.recording import Record, Recording, RecordingFile
from kvtop.sources.replay import Player, clock_text, speed_text
from kvtop.ui.messages import (
    ApplyStepRecorded,
    GpuSampled,
    LogEventsReceived,
    ReplayBurst,
    ReplayMoved,
    ReplayNotice,
    SlotsSampled,
    SnapshotReceived,
)

__all__ = ["BATCH", "JUMP_S", "ReplayBurst", "ReplayControl", "ReplayMoved", "ReplayNotice", "jump_request", "play"]

if TYPE_CHECKING:
    from textual.message_pump import MessagePump

JUMP_S = 60.0
"""Recorded seconds one jump key moves."""

BATCH = 256
"""Records a jump reads, posts and waits to be applied at a time."""

_START = "start"


class ReplayControl:
    """The app's handle on playback: the :class:`Player` and the commands keys queue for the worker."""

    def __init__(self, recording: Recording | RecordingFile) -> None:
        self.recording = recording
        self.player = Player(recording)
        self.wake = asyncio.Event()
        self.jump: float | str | None = None
        """Pending jump: recorded seconds (negative: back), ``"start"``, or None."""
        self.steps = 0
        """Pending single steps (``.`` while paused)."""
        self.end_reported = False

    def header_text(self) -> str:
        """``2026-11-29 17:02:13 ×4`` (``END`` appended once every record is applied)."""
        p = self.player
        text = f"{clock_text(p.time_s, self.recording.header.naive_tz)} {speed_text(p.speed)}"
        return text + (" END" if p.at_end else "")

    def status_text(self) -> str | None:
        """What the line under the table says at the end of a damaged recording."""
        if self.player.at_end and self.player.damage:
            return self.player.damage
        if self.player.at_end and self.player.unfinished:
            n = self.player.position
            return (
                f"recording ends after {n} record{'s' if n != 1 else ''} without its gzip end:"
                " kvtop was still recording, was killed, or the file was cut"
            )
        return None

    def request(self, *, jump: float | str | None = None, step: bool = False) -> None:
        """Queue a jump or one step and wake the worker."""
        if jump is not None:
            self.jump = jump
        if step:
            self.steps += 1
        self.wake.set()


async def play(app: MessagePump, control: ReplayControl) -> None:
    """The worker body: apply the records in time until the end, obeying pause, speed and jumps.

    It only posts messages to ``app`` (the dashboard app), as the live workers do: it never
    calls into it, so the app depends on this module and not the other way round."""
    player = control.player
    # journald stamps' year, as when recorded
    feed = LogFeed(year=year_at(control.recording.header.started_at or None))

    def post(record: Record) -> None:
        if record.kind == "ollama" and record.ollama is not None:
            app.post_message(SnapshotReceived(record.ollama))
        elif record.kind == "gpu" and record.gpu is not None and record.procs is not None:
            app.post_message(GpuSampled(record.gpu, record.procs))
        elif record.kind == "slots" and record.slots is not None:
            app.post_message(SlotsSampled(record.slots))
        elif record.kind == "apply":
            app.post_message(ApplyStepRecorded())
        elif record.log is not None:
            log = record.log
            events, error = feed.parse(log.raw_lines)  # a parser error: said, the parser started again
            if error is not None:
                app.post_message(ReplayNotice(error))
            app.post_message(
                LogEventsReceived(
                    tuple(events),
                    source=log.source,
                    status=log.status,
                    ok=log.ok,
                    lines=log.lines,
                    dropped_lines=log.dropped_lines,
                    raw_lines=log.raw_lines,
                )
            )

    while True:
        control.wake.clear()
        if control.jump is not None:
            jump, control.jump = control.jump, None
            seconds = None if jump == _START else float(jump)
            back = (seconds is None or seconds < 0) and player.position > 0
            app.post_message(ReplayBurst(start=True, restart=back))
            if back:
                feed.reset()
            went_back, records = await asyncio.to_thread(player.jump, seconds)
            assert went_back == back
            while True:
                batch = await asyncio.to_thread(_some, records, BATCH)
                for record in batch:
                    post(record)
                if len(batch) < BATCH:
                    break
                await _applied(app)
            app.post_message(ReplayBurst(start=False))
            continue
        if control.steps:
            control.steps -= 1
            while not player.at_end:  # one apply step (one record in a recording without them)
                record = await asyncio.to_thread(player.take)
                post(record)
                if record.kind == "apply" or not control.recording.header.apply_steps:
                    break
            app.post_message(ReplayMoved())
            continue
        if player.at_end:
            app.post_message(ReplayMoved())
            await control.wake.wait()
            continue
        if player.paused:
            await control.wake.wait()
            continue
        delay = player.gap_s()
        if delay > 0:
            try:
                await asyncio.wait_for(control.wake.wait(), timeout=delay)
                continue  # a key changed something: decide again (a new speed restarts the gap)
            except asyncio.TimeoutError:
                pass
        post(await asyncio.to_thread(player.take))
        app.post_message(ReplayMoved())


def _some(records: Iterator[Record], n: int) -> list[Record]:
    return list(itertools.islice(records, n))


async def _applied(app: MessagePump) -> None:
    """Wait until the app has handled every message posted so far (a callback queued after them)."""
    done = asyncio.Event()
    if app.call_later(done.set):
        await done.wait()


def jump_request(action: str) -> float | str:
    """The jump an action asks for: ``forward`` / ``back`` one minute, or ``start``."""
    return {"forward": JUMP_S, "back": -JUMP_S}.get(action, _START)
