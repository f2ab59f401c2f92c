"""Collects a log source's batches in a task (shared by the tail tests)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from kvtop.sources.tail import LogSource
from kvtop.sources.tail_base import LogBatch


class Collector:
    """Runs ``src.batches()`` in a task and keeps every batch."""

    def __init__(self, src: LogSource) -> None:
        self.src = src
        self.batches: list[LogBatch] = []
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        async for b in self.src.batches():
            self.batches.append(b)

    @property
    def lines(self) -> list[str]:
        return [x for b in self.batches for x in b.lines]

    @property
    def statuses(self) -> list[str | None]:
        return [b.status for b in self.batches]

    @property
    def last(self) -> LogBatch:
        """The newest batch (a blank one before the first arrives)."""
        return self.batches[-1] if self.batches else LogBatch("", (), None, True, 0.0)

    async def until(self, pred: Callable[[], bool], timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while not pred():
            if self.task.done():
                self.task.result()
            assert time.monotonic() < deadline, f"timed out; batches={self.batches[-3:]}"
            await asyncio.sleep(0.01)

    async def close(self) -> None:
        """Close the source (ending any child process), then stop the task."""
        await self.src.aclose()
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
