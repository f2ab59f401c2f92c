"""FileTail against a REAL writer process while the file is rotated under it.

The writer (a separate Python process) appends numbered lines through ``O_APPEND`` and, like
``logging.handlers.WatchedFileHandler``, stats the path before every line and reopens it when
the inode changed or the file is gone. Meanwhile the test rotates the file several times by
rename + recreate (logrotate ``create``) and once by copytruncate.

Guarantees checked:

- rename + recreate: every line exactly once, in order (FileTail drains the old inode until it
  has been quiet, then reads the new file from byte 0).
- copytruncate: the tail never repeats a line and keeps the order. It can lose exactly the
  lines that reached the file after its last read and before the truncate; those are a
  contiguous run ending just before the first line written after the truncate. The test
  waits until the tail has delivered the last line in the copy before truncating, so every
  lost line was written after the copy: the window logrotate documents for copytruncate.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvtop.sources.tail_base import LogBatch
from kvtop.sources.tail_file import FileTail

WRITER = r"""
import os, sys, time
path, n = sys.argv[1], int(sys.argv[2])
def reopen():
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    st = os.fstat(fd)
    return fd, (st.st_ino, st.st_dev)
fd, ident = reopen()
pad = "x" * 40
for i in range(n):
    try:
        st = os.stat(path)
        now = (st.st_ino, st.st_dev)
    except FileNotFoundError:
        now = None
    if now != ident:
        os.close(fd)
        fd, ident = reopen()
    os.write(fd, f"line {i:06d} {pad}\n".encode())
    if i % 10 == 9:
        time.sleep(0.0008)
os.close(fd)
"""

N_LINES = 20_000


def _num(line: str) -> int:
    assert line.startswith("line "), line
    return int(line[5:11])


class _Collector:
    """Consumes a source's batches in a task; the test reads what has arrived so far."""

    def __init__(self, tail: FileTail) -> None:
        self.tail = tail
        self.batches: list[LogBatch] = []
        self.numbers: list[int] = []
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        async for batch in self.tail.batches():
            self.batches.append(batch)
            self.numbers.extend(_num(x) for x in batch.lines)

    async def wait_until(self, pred: object, timeout: float) -> None:
        assert callable(pred)
        deadline = time.monotonic() + timeout
        while not pred():
            if self.task.done():
                self.task.result()
            assert time.monotonic() < deadline, f"timed out; last delivered {self.numbers[-1:]}"
            await asyncio.sleep(0.01)

    async def close(self) -> None:
        self.task.cancel()
        try:
            await self.task
        except asyncio.CancelledError:
            pass
        await self.tail.aclose()


def _numbers_in(path: Path) -> list[int]:
    return [_num(x) for x in path.read_text().splitlines()]


async def _wait_file_grows(path: Path, min_lines: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if path.stat().st_size >= min_lines * 52:
                return
        except FileNotFoundError:
            pass
        assert time.monotonic() < deadline, "writer made no progress"
        await asyncio.sleep(0.005)


async def test_rename_rotations_deliver_every_line_once_in_order(tmp_path: Path) -> None:
    log = tmp_path / "ollama.log"
    log.write_bytes(b"")
    tail = FileTail(log)
    col = _Collector(tail)
    await col.wait_until(lambda: col.batches, 5)  # started (empty file) before the writer
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(log), str(N_LINES)])
    try:
        for k in range(1, 6):
            await _wait_file_grows(log, 1500)
            os.rename(log, tmp_path / f"ollama.log.{k}")
            # logrotate "create": a new empty file at once (the writer may also create it first)
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.close(fd)
        assert writer.wait(timeout=30) == 0
        await col.wait_until(lambda: col.numbers and col.numbers[-1] == N_LINES - 1, 15)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
        await col.close()
    on_disk = sorted(n for p in tmp_path.glob("ollama.log*") for n in _numbers_in(p))
    assert on_disk == list(range(N_LINES)), "the writer itself lost lines (test harness bug)"
    assert col.numbers == list(range(N_LINES))
    statuses = {b.status for b in col.batches if b.status}
    assert "file rotated (rename) — following the new file" in statuses
    assert all(b.ok for b in col.batches)


async def test_rename_and_copytruncate_under_a_live_writer(tmp_path: Path) -> None:
    log = tmp_path / "ollama.log"
    log.write_bytes(b"")
    tail = FileTail(log)
    col = _Collector(tail)
    await col.wait_until(lambda: col.batches, 5)
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(log), str(N_LINES)])
    copy = tmp_path / "ollama.log.ct"
    try:
        # two rename rotations
        for k in (1, 2):
            await _wait_file_grows(log, 1500)
            os.rename(log, tmp_path / f"ollama.log.{k}")
            os.close(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644))
        # copytruncate: copy, wait until the tail has delivered everything in the copy, truncate
        await _wait_file_grows(log, 1500)
        shutil.copyfile(log, copy)
        copy_last = _numbers_in(copy)[-1]
        await col.wait_until(lambda: col.numbers and col.numbers[-1] >= copy_last, 10)
        os.truncate(log, 0)
        # the first line written after the truncate is the first line of the live file
        await _wait_file_grows(log, 50)
        first_after = _numbers_in(log)[0]
        # one more rename rotation after the copytruncate
        await _wait_file_grows(log, 1500)
        os.rename(log, tmp_path / "ollama.log.3")
        os.close(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644))
        assert writer.wait(timeout=30) == 0
        await col.wait_until(lambda: col.numbers and col.numbers[-1] == N_LINES - 1, 15)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
        await col.close()

    got = col.numbers
    assert got == sorted(set(got)), "a line was repeated or delivered out of order"
    missing = sorted(set(range(N_LINES)) - set(got))
    # Only the copytruncate window may be lost: a contiguous run after the last line of the
    # copy, ending right before the first line written after the truncate.
    if missing:
        assert missing == list(range(missing[0], first_after)), (missing[:5], missing[-5:], first_after)
        assert missing[0] > copy_last
    assert any(b.status and "truncated" in b.status for b in col.batches)
    assert any(b.status and "rotated" in b.status for b in col.batches)


@pytest.mark.parametrize("rotations", [3])
async def test_quick_successive_renames_skip_no_generation(tmp_path: Path, rotations: int) -> None:
    """Renames faster than the quiet period: every intermediate file is still read, in order."""
    log = tmp_path / "ollama.log"
    log.write_text("g0 a\n")
    tail = FileTail(log)
    col_lines: list[str] = []

    async def run() -> None:
        async for b in tail.batches():
            col_lines.extend(b.lines)

    task = asyncio.create_task(run())
    try:
        await asyncio.sleep(0.15)
        for g in range(1, rotations + 1):
            os.rename(log, tmp_path / f"ollama.log.{g}")
            log.write_text(f"g{g} a\n")
            await asyncio.sleep(0.12)  # > one idle poll, < ROTATE_QUIET_S
            with open(log, "a") as f:
                f.write(f"g{g} b\n")
        deadline = time.monotonic() + 5
        while col_lines[-1:] != [f"g{rotations} b"] and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await tail.aclose()
    expected = ["g0 a"] + [x for g in range(1, rotations + 1) for x in (f"g{g} a", f"g{g} b")]
    assert col_lines == expected
