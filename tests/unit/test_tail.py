"""FileTail on real files in tmp_path, the line splitter, and parse_log_spec."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kvtop.sources import tail_file_reader
from kvtop.sources.tail import LogSpec, NullTail, open_log_source, parse_log_spec
from kvtop.sources.tail_base import LogBatch
from kvtop.sources.tail_file import FileTail
from kvtop.sources.tail_base import LineSplitter
from tests.tail_collect import Collector


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "ollama.log"


def _append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


# -- start from the tail ----------------------------------------------------------------------


async def test_start_reads_only_the_tail_of_a_50mb_file(log: Path) -> None:
    n = 500_000
    body = b"".join(b"%08d %s\n" % (i, b"x" * 90) for i in range(n))  # 100 bytes per line
    log.write_bytes(body)
    assert log.stat().st_size == 50_000_000

    gaps: list[float] = []

    async def heartbeat() -> None:  # the event loop must keep turning while the tail starts
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.005)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    hb = asyncio.create_task(heartbeat())
    t0 = time.monotonic()
    col = Collector(FileTail(log, backlog_lines=2000))
    await col.until(lambda: bool(col.batches))
    elapsed = time.monotonic() - t0
    hb.cancel()
    await col.close()
    first = col.batches[0]
    assert elapsed < 2.0
    assert len(first.lines) == 2000
    assert first.lines[0].startswith("%08d " % (n - 2000))
    assert first.lines[-1].startswith("%08d " % (n - 1))
    assert first.dropped_lines == n - 2000
    assert first.ok and first.status is None and first.source == f"file:{log}"
    assert max(gaps, default=0.0) < 0.25


async def test_start_is_bounded_by_bytes_and_skips_the_cut_line(log: Path) -> None:
    n = 10_000
    log.write_bytes(b"".join(b"%08d %s\n" % (i, b"y" * 90) for i in range(n)))
    col = Collector(FileTail(log, backlog_lines=1_000_000, backlog_bytes=64 * 1024 + 50))
    await col.until(lambda: bool(col.batches))
    await col.close()
    first = col.batches[0]
    assert len(first.lines) == 655  # 65,586 bytes: 655 whole lines plus the tail of one cut line
    assert all(len(x) == 99 for x in first.lines)
    assert first.lines[-1].startswith("%08d" % (n - 1))
    assert first.dropped_lines == n - 655


async def test_start_on_a_huge_sparse_file_does_not_read_it(log: Path) -> None:
    with open(log, "wb") as f:
        f.truncate(8 * 2**30)  # 8 GiB hole (sparse where the file system allows it)
        f.seek(0, os.SEEK_END)
        f.write(b"first\nsecond\nthird\n")
    t0 = time.monotonic()
    col = Collector(FileTail(log))
    await col.until(lambda: bool(col.batches))
    await col.close()
    assert time.monotonic() - t0 < 2.0
    first = col.batches[0]
    # the window starts inside the hole: NULs + "first" is one line, cut, hence dropped
    assert first.lines == ("second", "third")
    assert first.dropped_lines > 0  # an estimate past COUNT_EXACT_MAX_BYTES


async def test_backlog_lines_zero_starts_at_the_end(log: Path) -> None:
    log.write_text("a\nb\n")
    col = Collector(FileTail(log, backlog_lines=0))
    await col.until(lambda: bool(col.batches))
    _append(log, b"c\n")
    await col.until(lambda: col.lines == ["c"])
    await col.close()
    assert col.batches[0].dropped_lines == 2


# -- following -----------------------------------------------------------------------------------


async def test_append_and_coalescing(log: Path) -> None:
    log.write_text("one\ntwo\n")
    col = Collector(FileTail(log))
    await col.until(lambda: col.lines == ["one", "two"])
    _append(log, b"three\n")
    await col.until(lambda: col.lines[-1:] == ["three"])
    before = len(col.batches)
    for i in range(100):
        _append(log, b"burst %d\n" % i)
        await asyncio.sleep(0.002)
    await col.until(lambda: col.lines[-1:] == ["burst 99"])
    await col.close()
    assert col.lines == ["one", "two", "three"] + [f"burst {i}" for i in range(100)]
    assert len(col.batches) - before < 20  # ~0.3 s of lines in batches at least 50 ms apart


async def test_partial_line_is_held_until_its_newline(log: Path) -> None:
    log.write_text("done\n")
    col = Collector(FileTail(log))
    await col.until(lambda: col.lines == ["done"])
    _append(log, b"half a li")
    await asyncio.sleep(0.35)
    assert col.lines == ["done"]
    _append(log, b"ne\n")
    await col.until(lambda: col.lines == ["done", "half a line"])
    await col.close()


async def test_crlf_and_invalid_utf8(log: Path) -> None:
    log.write_bytes(b"dos line\r\nbad \xff\xfe bytes\r\ncut \xe2\x82\nkeep \r inner\n\r\n")
    col = Collector(FileTail(log))
    await col.until(lambda: len(col.lines) == 5)
    await col.close()
    assert col.lines == ["dos line", "bad \ufffd\ufffd bytes", "cut \ufffd", "keep \r inner", ""]


async def test_utf8_character_split_across_reads(log: Path) -> None:
    log.write_bytes(b"")
    col = Collector(FileTail(log))
    await col.until(lambda: bool(col.batches))
    _append(log, "größe ".encode()[:3])  # "gr" + first byte of "ö"
    await asyncio.sleep(0.25)
    _append(log, "größe ".encode()[3:] + b"ok\n")
    await col.until(lambda: col.lines == ["größe ok"])
    await col.close()


async def test_falling_far_behind_keeps_the_newest_backlog_bytes(log: Path) -> None:
    log.write_text("start\n")
    col = Collector(FileTail(log, backlog_bytes=1000))
    await col.until(lambda: col.lines == ["start"])
    _append(log, b"".join(b"%04d %s\n" % (i, b"z" * 94) for i in range(100)))  # 10,000 bytes at once
    await col.until(lambda: col.lines[-1:] == ["0099 " + "z" * 94])
    await col.close()
    got = col.lines[1:]
    assert got == ["%04d %s" % (i, "z" * 94) for i in range(90, 100)]  # the last 1,000 bytes
    assert sum(b.dropped_lines for b in col.batches) == 90


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root reads everything")
async def test_unreadable_file_is_a_status(log: Path) -> None:
    log.write_text("secret\n")
    log.chmod(0)
    col = Collector(FileTail(log))
    await col.until(lambda: bool(col.batches))
    await col.close()
    assert col.batches[0].status == f"cannot read {log}: permission denied" and not col.batches[0].ok


def test_sources_tail_does_not_import_textual_or_rich() -> None:
    code = (
        "import sys, kvtop.sources.tail;"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('textual', 'rich')];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# -- rotation, truncation, deletion ------------------------------------------------------------


async def test_copytruncate_restarts_at_zero(log: Path) -> None:
    log.write_text("old 1\nold 2\n")
    col = Collector(FileTail(log))
    await col.until(lambda: col.lines == ["old 1", "old 2"])
    shutil.copyfile(log, log.with_suffix(".1"))
    os.truncate(log, 0)
    await asyncio.sleep(0.25)
    _append(log, b"new 1\n")
    await col.until(lambda: col.lines[-1:] == ["new 1"])
    await col.close()
    assert col.lines == ["old 1", "old 2", "new 1"]
    assert "file truncated (copytruncate) — reading it from the start" in col.statuses


async def test_truncate_hidden_by_fast_regrowth_is_noticed(log: Path) -> None:
    """Truncated and refilled past the old offset between two polls: size alone cannot tell."""
    log.write_text("aaaa\n")
    col = Collector(FileTail(log))
    await col.until(lambda: col.lines == ["aaaa"])
    with open(log, "r+b") as f:  # one step: truncate and write more than before
        f.truncate(0)
        f.write(b"bbbbbbbb 1\nbbbbbbbb 2\n")
    await col.until(lambda: col.lines[-1:] == ["bbbbbbbb 2"])
    await col.close()
    assert col.lines == ["aaaa", "bbbbbbbb 1", "bbbbbbbb 2"]


async def test_rename_rotation_finishes_old_file_and_flushes_its_partial_line(log: Path) -> None:
    log.write_text("a1\n")
    col = Collector(FileTail(log))
    await col.until(lambda: col.lines == ["a1"])
    _append(log, b"a2 without newline")
    await asyncio.sleep(0.15)
    os.rename(log, log.with_name("ollama.log.1"))
    log.write_text("b1\n")
    _append(log.with_name("ollama.log.1"), b" (continued)\na3 late\n")  # writer not reopened yet
    await col.until(lambda: col.lines[-1:] == ["b1"])
    _append(log, b"b2\n")
    await col.until(lambda: col.lines[-1:] == ["b2"])
    await col.close()
    assert col.lines == ["a1", "a2 without newline (continued)", "a3 late", "b1", "b2"]
    assert "file rotated (rename) — following the new file" in col.statuses
    assert all(b.ok for b in col.batches)


async def test_rotated_away_partial_line_is_flushed(log: Path) -> None:
    log.write_text("x1\nx2 cut")
    col = Collector(FileTail(log))
    await col.until(lambda: col.lines == ["x1"])
    os.rename(log, log.with_name("ollama.log.1"))
    log.write_text("y1\n")
    await col.until(lambda: col.lines[-1:] == ["y1"])
    await col.close()
    assert col.lines == ["x1", "x2 cut", "y1"]


async def test_delete_and_recreate(log: Path) -> None:
    log.write_text("before\n")
    col = Collector(FileTail(log))
    await col.until(lambda: col.lines == ["before"])
    log.unlink()
    await col.until(lambda: any(b.status and "deleted" in b.status for b in col.batches))
    missing = next(b for b in col.batches if b.status and "deleted" in b.status)
    assert not missing.ok
    assert missing.status == f"{log} was deleted — waiting for it to be re-created"
    log.write_text("after 1\nafter 2\n")
    await col.until(lambda: col.lines[-1:] == ["after 2"])
    await col.close()
    assert col.lines == ["before", "after 1", "after 2"]
    assert col.batches[-1].ok
    assert "file re-created — reading it from the start" in col.statuses


async def test_missing_at_start_then_created_is_read_from_its_start(log: Path) -> None:
    col = Collector(FileTail(log, backlog_lines=1))
    await col.until(lambda: bool(col.batches))
    assert col.batches[0].ok is False
    assert col.batches[0].status == f"{log} not found — waiting for it to be created"
    log.write_text("l1\nl2\nl3\n")
    await col.until(lambda: col.lines == ["l1", "l2", "l3"])  # new file: all of it, not the tail
    await col.close()
    assert col.batches[-1].ok


async def test_directory_is_a_status_not_an_exception(tmp_path: Path) -> None:
    col = Collector(FileTail(tmp_path))
    await col.until(lambda: bool(col.batches))
    await col.close()
    assert col.batches[0].ok is False and "is a directory" in (col.batches[0].status or "")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFO")
async def test_fifo_is_refused_without_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    col = Collector(FileTail(fifo))
    await col.until(lambda: bool(col.batches))
    await col.close()
    assert col.batches[0].status == f"{fifo} is not a regular file (for a pipe, use --log -)"


async def test_status_only_batches_on_change_and_notice_expires(log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tail_file_reader, "NOTICE_S", 0.2)
    log.write_text("a\n")
    col = Collector(FileTail(log))
    await col.until(lambda: col.lines == ["a"])
    os.truncate(log, 0)
    await col.until(lambda: any(s and "truncated" in s for s in col.statuses))
    await col.until(lambda: col.batches[-1].status is None)
    await asyncio.sleep(0.3)
    await col.close()
    assert [b.lines for b in col.batches[1:]] == [(), ()]  # status-only batches
    assert [b.status is None for b in col.batches] == [True, False, True]


async def test_aclose_releases_the_file(log: Path) -> None:
    log.write_text("a\n")
    fds_before = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 0
    tail = FileTail(log)
    col = Collector(tail)
    await col.until(lambda: col.lines == ["a"])
    await col.close()
    await tail.aclose()  # twice is fine
    if fds_before:
        assert len(os.listdir("/proc/self/fd")) <= fds_before


# -- LineSplitter --------------------------------------------------------------------------------


def test_line_splitter_bounds_a_line_without_newline(monkeypatch: pytest.MonkeyPatch) -> None:
    from kvtop.sources import tail_base

    monkeypatch.setattr(tail_base, "MAX_LINE_BYTES", 10)
    s = LineSplitter()
    assert s.feed(b"0123456789abcdef") == ["0123456789"]
    assert s.feed(b"\n") == ["abcdef"]
    assert s.feed(b"tail") == [] and s.flush() == ["tail"] and s.flush() == []


# -- parse_log_spec ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("auto", LogSpec("auto")),
        (" AUTO ", LogSpec("auto")),
        ("none", LogSpec("none")),
        ("-", LogSpec("stdin")),
        ("journal", LogSpec("journal", "ollama")),
        ("journal:ollama", LogSpec("journal", "ollama")),
        ("journal:ollama@gpu1.service", LogSpec("journal", "ollama@gpu1.service")),
        ("journal-user:ollama", LogSpec("journal", "ollama", user=True)),
        ("journal-user", LogSpec("journal", "ollama", user=True)),
        ("file:/var/log/ollama.log", LogSpec("file", "/var/log/ollama.log")),
        ("file:relative/x.log", LogSpec("file", "relative/x.log")),
        ("file:/a:b/with:colons.log", LogSpec("file", "/a:b/with:colons.log")),
        ("docker:ollama", LogSpec("docker", "ollama")),
        ("docker:3f4e2a1b9c0d", LogSpec("docker", "3f4e2a1b9c0d")),
    ],
)
def test_parse_log_spec(text: str, expected: LogSpec) -> None:
    assert parse_log_spec(text) == expected


def test_parse_log_spec_expands_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert parse_log_spec("file:~/.ollama/logs/server.log") == LogSpec("file", f"{tmp_path}/.ollama/logs/server.log")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty log source"),
        ("   ", "empty log source"),
        ("journal:", "needs a unit name"),
        ("journal-user:", "needs a unit name"),
        ("journal:-x", "is not a systemd unit name"),
        ("journal:two words", "is not a systemd unit name"),
        ("file:", "needs a path"),
        ("docker:", "needs a container name"),
        ("docker:--help", "is not a container name"),
        ("/var/log/ollama.log", "for a file, write file:/var/log/ollama.log"),
        ("syslog", "unknown log source 'syslog'"),
        ("stdin", "unknown log source"),
        ("http://x", "expected auto, journal"),
    ],
)
def test_parse_log_spec_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=None) as info:
        parse_log_spec(text)
    assert message in str(info.value)


def test_spec_round_trips_through_str() -> None:
    for text in ("auto", "none", "-", "journal:ollama", "journal-user:ollama", "file:/x.log", "docker:ollama"):
        assert str(parse_log_spec(text)) == text


def test_open_log_source_kinds(tmp_path: Path) -> None:
    assert isinstance(open_log_source(parse_log_spec(f"file:{tmp_path}/x.log")), FileTail)
    assert open_log_source(parse_log_spec("journal")).description == "journal:ollama (system)"
    assert open_log_source(parse_log_spec("journal-user:foo")).description == "journal:foo (user)"
    assert open_log_source(parse_log_spec("docker:ol")).description == "docker:ol"
    assert open_log_source(parse_log_spec("-")).description == "stdin"
    assert open_log_source(parse_log_spec("auto")).description == "auto"
    assert isinstance(open_log_source(parse_log_spec("none")), NullTail)


async def test_null_tail_says_off_then_waits() -> None:
    src = NullTail()
    it = src.batches().__aiter__()
    first = await it.__anext__()
    assert first.lines == () and first.ok and first.status == "log reading is off (--log none)"
    await src.aclose()
    with pytest.raises(StopAsyncIteration):
        await it.__anext__()


def test_snapshot_is_frozen() -> None:
    b = LogBatch("stdin", ("a",), None, True, 0.0)
    with pytest.raises(AttributeError):
        b.ok = False  # type: ignore[misc]
    assert not hasattr(b, "__dict__")


def test_a_one_shot_read_starts_like_the_follower(tmp_path: Path) -> None:
    """``--check``'s backlog (tail_backlog.read_file_tail) and the dashboard's FileTail share one
    reader: same bound, the cut first line left out, and a last line without newline kept."""
    from kvtop.sources.tail_backlog import read_file_tail

    log = tmp_path / "server.log"
    log.write_bytes(b"".join(b"line %d\n" % i for i in range(10)) + b"partial")
    got = read_file_tail(log, backlog_lines=3, backlog_bytes=1 << 20)
    assert got.lines == ("line 8", "line 9", "partial") and got.ok and got.status is None
    assert got.dropped_lines == 8
    missing = read_file_tail(tmp_path / "nope.log")
    assert not missing.ok and missing.status == f"{tmp_path / 'nope.log'} not found" and missing.lines == ()


# -- shedding under overload: lines that may carry an event are never shed -----------------------

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
HARD_WRAPPED = {  # pasted logs whose records are hard-wrapped: a live tail never wraps (logparse.parser)
    "022-server-config-windows-fork-new-engine-wrapped.log",
    "033-server-config-fa-true-kv-q8_0-wrapped-0.6.6.log",
    "ollama-8525-starting-llama-server-hard-wrapped-before-cmd-0.5.log",
}
NOISE = (
    '[GIN] 2026/11/29 - 12:00:00 | 200 |  1.234567ms |       127.0.0.1 | POST     "/api/chat"',
    'time=2026-11-29T12:00:00.000Z level=DEBUG source=sched.go:606 msg="context for request finished"',
    "slot update_slots: id  0 | task 42 | kv cache rm [1, end)",
    "srv  log_server_r: request: POST /completion 127.0.0.1 200",
    "prompt eval time =      12.34 ms /    10 tokens (    1.23 ms per token,   810.37 tokens per second)",
)
OOM = "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 826.00 MiB on device 0: cudaMalloc failed: out of memory"


def _events(lines: list[str]) -> list[tuple[str, str]]:
    from kvtop.logparse.parser import parse_lines
    from kvtop.model.logstate import PER_REQUEST_KINDS

    return [(e.kind, e.raw) for e in parse_lines(lines, default_year=2025) if e.kind not in PER_REQUEST_KINDS]


@pytest.mark.parametrize(
    "path", sorted(p for p in CORPUS.rglob("*.log") if p.name not in HARD_WRAPPED), ids=lambda p: p.name
)
def test_the_prefilter_keeps_every_event_of_the_corpus(path: Path) -> None:
    from kvtop.logparse import group_loads, parse_lines
    from kvtop.sources.tail_base import keep_line

    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    kept = [x for x in lines if keep_line(x)]
    assert _events(kept) == _events(lines)
    assert len(group_loads(parse_lines(kept, default_year=2025))) == len(
        group_loads(parse_lines(lines, default_year=2025))
    )


def test_the_prefilter_sheds_per_request_noise() -> None:
    from kvtop.sources.tail_base import keep_line

    assert not any(keep_line(x) for x in NOISE)
    assert keep_line(OOM)
    assert keep_line('time=2026-11-29T12:00:00.000Z level=WARN source=x.go:1 msg="anything new"')


def test_shed_block_and_shed_lines_keep_events_in_order_and_count_the_rest() -> None:
    from kvtop.sources.tail_base import shed_block, shed_lines

    lines = [NOISE[i % len(NOISE)] for i in range(1000)]
    lines[10] = OOM
    lines[500] = "llama_kv_cache: size =    2.00 MiB (  2048 cells,   1 layers,  1/1 seqs), K (f16):    1.00 MiB"
    lines[999] = OOM + " (last)"
    want = [lines[10], lines[500], lines[999]]
    assert shed_lines(lines) == (want, 997)
    assert shed_block(("\n".join(lines) + "\n").encode()) == (want, 997)
    assert shed_block(("\n".join(lines)).encode()) == (want, 997)  # a last line without its newline
    assert shed_lines([]) == ([], 0) and shed_block(b"") == ([], 0)


async def test_falling_far_behind_sheds_noise_but_keeps_event_lines(log: Path) -> None:
    log.write_text("start\n")
    col = Collector(FileTail(log, backlog_bytes=10_000))
    await col.until(lambda: col.lines == ["start"])
    body = [f"{i:06d} {NOISE[i % len(NOISE)]}" for i in range(20_000)]
    body[1234] = f"{OOM} 1234"
    body[15_000] = f"{OOM} 15000"
    _append(log, ("\n".join(body) + "\n").encode())  # about 1.9 MB at once: far more than 10 kB behind
    await col.until(lambda: col.lines[-1:] == [body[-1]])
    await col.close()
    got = col.lines[1:]
    # The poll thread may catch the 1.9 MB write half done: what it read before it fell behind is
    # delivered whole; from there on only event lines and the newest 10 kB are.
    positions = [body.index(line) for line in got]
    assert positions == sorted(positions)  # in log order, nothing invented
    assert body[1234] in got and body[15_000] in got  # the OOM lines were never shed
    assert sum(b.dropped_lines for b in col.batches) == 20_000 - len(got)  # every line accounted for
    assert 20_000 - len(got) > 15_000  # most of the noise was shed
    newest = got[-50:]
    assert newest == body[-50:]  # the newest lines, whole
    # A loaded machine may read the write in several pieces, each shed alone (its events and its own
    # newest 10 kB kept): past the last gap, only the newest 10 kB of the log remain.
    last_gap = max(i for i, p in enumerate(positions) if i + 1 < len(positions) and positions[i + 1] - p > 1)
    kept_after = [body[p] for p in positions[last_gap + 1 :]]
    tail = [line for line in kept_after if line not in (body[1234], body[15_000])]
    assert tail == body[-len(tail) :] and 50 < len(tail) < 120  # past the events, only the newest 10 kB


async def test_stream_buffer_overflow_keeps_event_lines() -> None:
    from kvtop.sources.tail_proc import StdinTail

    r, w = os.pipe()
    body = [f"{i} {NOISE[i % len(NOISE)]}" for i in range(5000)]
    body[7] = OOM
    data = ("\n".join(body) + "\n").encode()  # more than a pipe holds: written by a thread

    def write() -> None:
        with os.fdopen(w, "wb") as f:
            f.write(data)

    threading.Thread(target=write, daemon=True).start()
    col = Collector(StdinTail(r, backlog_lines=100))
    await col.until(lambda: col.last.status == "log source ended")
    await col.close()
    os.close(r)
    assert col.lines == [OOM, *body[4900:]]
    assert sum(b.dropped_lines for b in col.batches) == 4899


def test_log_line_shows_dropped_lines() -> None:
    from kvtop.model.logstate import LogState
    from kvtop.ui.dashboard_text import log_line

    assert "dropped" not in log_line(LogState(source="file:/x", lines=5), "auto").plain
    assert (
        " · 722,000 dropped" in log_line(LogState(source="file:/x", lines=278_000, dropped_lines=722_000), "auto").plain
    )
    assert "12 dropped" in log_line(LogState(source="file:/x", status="file truncated", dropped_lines=12), "auto").plain
