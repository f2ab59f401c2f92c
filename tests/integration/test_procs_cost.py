"""Observer cost of the process table, with real processes: between full reads (every
``NAMES_FULL_EVERY_S``) only new PIDs' names are read, and a candidate's command line, user and
parent are read again only when the candidates' PID set changed or until two reads agreed; the
runners found stay exactly the same. The process table is the real one, seen through a
``proc_root`` that lists only this test's processes (links to their real ``/proc`` entries), so
other programs on the machine do not change the counts."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil  # type: ignore[import-untyped]
import pytest

from kvtop.sources.procs import NAMES_FULL_EVERY_S, ProcSource
from tests.integration.test_procs_real import _stop_group, _wait, fake_ollama  # noqa: F401 - the fixture

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _link(root: Path, pid: int) -> None:
    (root / str(pid)).symlink_to(f"/proc/{pid}")


@pytest.fixture
def extra_runner(fake_ollama: tuple[subprocess.Popen[bytes], str]) -> Iterator[subprocess.Popen[bytes]]:
    """A second model runner (not started yet: ``.pid`` once the test starts it)."""
    server, blob = fake_ollama
    exe = Path(psutil.Process(server.pid).cmdline()[0])
    work = Path(psutil.Process(server.pid).cwd())
    proc = subprocess.Popen(
        [str(exe), "runner", "--model", blob, "--port", "45680"],
        cwd=work,
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait(lambda: psutil.Process(proc.pid).cmdline()[1:2] == ["runner"], "the extra runner to start")
        yield proc
    finally:
        _stop_group(proc)


async def test_names_and_command_lines_are_read_again_only_when_the_pids_change(
    fake_ollama: tuple[subprocess.Popen[bytes], str], extra_runner: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    server, _ = fake_ollama
    root = tmp_path / "proc"
    root.mkdir()
    kids = [k.pid for k in psutil.Process(server.pid).children()]
    for pid in (server.pid, *kids, os.getpid()):
        _link(root, pid)
    clock = Clock()
    source = ProcSource(proc_root=root, monotonic=clock)

    def runners(snap):  # type: ignore[no-untyped-def]
        return sorted((r.pid, r.port, r.blob) for r in snap.runners)

    first = await source.sample()
    assert first.ok, first.error
    assert [s.pid for s in first.servers] == [server.pid] and len(first.runners) == 1
    assert (source.comm_reads, source.cmdline_reads) == (4, 3)  # 4 names; the server and its 2 runners
    clock.now += 1
    second = await source.sample()
    assert (source.comm_reads, source.cmdline_reads) == (4, 6)  # the second read confirms each
    for _ in range(5):
        clock.now += 1
        snap = await source.sample()
        assert runners(snap) == runners(first) and [s.pid for s in snap.servers] == [server.pid]
        assert snap.runners[0].rss_bytes is not None  # memory is read every sample
    assert (source.comm_reads, source.cmdline_reads) == (4, 6)
    assert runners(second) == runners(first)

    _link(root, extra_runner.pid)  # a new runner: the PID set changed
    clock.now += 1
    snap = await source.sample()
    assert (source.comm_reads, source.cmdline_reads) == (5, 10)  # its name; every candidate again
    assert extra_runner.pid in {r.pid for r in snap.runners}
    clock.now += 1
    await source.sample()
    assert (source.comm_reads, source.cmdline_reads) == (5, 11)  # the new one confirmed
    clock.now += 1
    await source.sample()
    assert (source.comm_reads, source.cmdline_reads) == (5, 11)

    clock.now += NAMES_FULL_EVERY_S  # the periodic full read: every name and candidate again
    snap = await source.sample()
    assert (source.comm_reads, source.cmdline_reads) == (10, 15)
    assert len(snap.runners) == 2
