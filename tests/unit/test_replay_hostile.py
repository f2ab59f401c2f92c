"""Hostile recordings: every malformed input ends the recording with
``recording ends at line N: reason`` (or a one-line error for a bad header), never a traceback;
memory stays bounded (a gzip bomb, a line of 100 MiB) and the first record is played before the
file is read to its end.

Real files in ``tmp_path``, the real reader and player; one run of ``python -m kvtop`` for the CLI;
one Pilot run of the dashboard over a streamed recording.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import tracemalloc
import zlib
from pathlib import Path

import pytest

from kvtop.config import Settings
from kvtop.model.codec import MAX_ANY_DEPTH
from kvtop.sources.recorder import Recorder
from kvtop.sources.recording import MAX_LINE_BYTES, RecordingError, open_recording, read_recording, resolve_recording
from kvtop.sources.replay import Player
from kvtop.ui.replay_worker import ReplayControl
from tests.unit.test_replay import _clock, _header, ollama_snapshot

REPO = Path(__file__).resolve().parents[2]
T0 = 1_795_963_473.0


def _head() -> bytes:
    return json.dumps(_header()).encode() + b"\n"


def _record_line(t: float = T0) -> bytes:
    """One real ``ollama`` record line, as the Recorder writes it."""
    from kvtop.model.codec import encode

    return (
        json.dumps({"t": t, "kind": "ollama", "snapshot": encode(ollama_snapshot(t))}, separators=(",", ":")).encode()
        + b"\n"
    )


def _write(path: Path, *lines: bytes) -> Path:
    path.write_bytes(b"".join(lines))
    return path


# --------------------------------------------------------------------------------------------
# Malformed values: damage, not a traceback


def test_deeply_nested_json_ends_the_recording_at_its_line(tmp_path: Path) -> None:
    deep = b'{"t": 1795963474, "kind": "ollama", "snapshot": ' + b"[" * 200_000 + b"]" * 200_000 + b"}\n"
    rec = read_recording(_write(tmp_path / "deep.jsonl", _head(), _record_line(), deep, _record_line(T0 + 2)))
    assert len(rec.records) == 1
    assert rec.damage == "recording ends at line 3: a value is nested too deeply"


def test_a_nested_value_under_the_recursion_limit_is_stopped_by_the_codec(tmp_path: Path) -> None:
    """``model_info`` values are kept as JSON (typed Any): 500 levels parse, but would crash what
    walks them later (comparison, rendering), so the codec refuses more than MAX_ANY_DEPTH."""
    from kvtop.model.codec import encode

    snap = encode(ollama_snapshot())
    digest = next(iter(snap["shows"]))
    snap["shows"][digest]["model_info"]["general.evil"] = json.loads("[" * 500 + "]" * 500)
    line = json.dumps({"t": T0 + 1, "kind": "ollama", "snapshot": snap}).encode() + b"\n"
    rec = read_recording(_write(tmp_path / "nested.jsonl", _head(), _record_line(), line))
    assert len(rec.records) == 1
    assert rec.damage is not None and rec.damage.startswith("recording ends at line 3: OllamaSnapshot.shows.")
    assert rec.damage.endswith(f"model_info.general.evil: nested deeper than {MAX_ANY_DEPTH} levels")
    # the limit leaves real values alone: the fixture's arrays and flat values round-trip
    assert read_recording(_write(tmp_path / "ok.jsonl", _head(), _record_line())).damage is None


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (10**400, "the record's time 1" + "0" * 38 + "… is not a time in years 1970-9999"),
        (1e308, "the record's time 1e+308 is not a time in years 1970-9999"),
        (-5, "the record's time -5 is not a time in years 1970-9999"),
    ],
    ids=["10**400", "1e308", "negative"],
)
def test_absurd_record_times_are_damage(tmp_path: Path, value: object, reason: str) -> None:
    line = _record_line().replace(b'{"t":1795963473.0', b'{"t":' + str(value).encode(), 1)
    rec = read_recording(_write(tmp_path / "t.jsonl", _head(), _record_line(), line))
    assert len(rec.records) == 1
    assert rec.damage == f"recording ends at line 3: {reason}"


def test_a_huge_float_in_a_snapshot_field_is_damage(tmp_path: Path) -> None:
    line = _record_line(T0 + 1).replace(b'"latency_s":0.003', b'"latency_s":' + b"9" * 400, 1)
    assert b"9" * 400 in line
    rec = read_recording(_write(tmp_path / "f.jsonl", _head(), line))
    assert rec.records == ()
    assert rec.damage == "recording ends at line 2: OllamaSnapshot.latency_s: the number is too large"


def test_control_characters_in_a_damage_reason_are_replaced(tmp_path: Path) -> None:
    line = b'{"t": 1795963474, "kind": "\x1b]52;c;cHduZWQ=\x07"}\n'
    rec = read_recording(_write(tmp_path / "esc.jsonl", _head(), line))
    assert rec.damage is not None and "\x1b" not in rec.damage and "\x07" not in rec.damage
    assert rec.damage.startswith("recording ends at line 2: ")


@pytest.mark.parametrize(
    ("tz", "reason"),
    [
        ({"offset_s": 10**30, "name": "X"}, "naive_tz offset_s 1000000000000000000000000000000 is not under a day"),
        ({"offset_s": 86_400, "name": "X"}, "naive_tz offset_s 86400 is not under a day"),
        ({"offset_s": 1.5e300}, "naive_tz offset_s 1.5e+300 is not a whole number"),
        ({"offset_s": 0, "name": ["x"]}, "naive_tz name must be a string"),
        ([1, 2], "'list' object has no attribute 'get'"),
    ],
    ids=["10**30", "a-day", "1.5e300", "name-list", "list"],
)
def test_a_bad_naive_tz_is_a_clear_header_error(tmp_path: Path, tz: object, reason: str) -> None:
    path = _write(tmp_path / "tz.jsonl", json.dumps({**_header(), "naive_tz": tz}).encode() + b"\n", _record_line())
    with pytest.raises(RecordingError, match="the recording header is invalid") as info:
        open_recording(path)
    assert reason in str(info.value)


def test_a_started_at_beyond_year_9999_is_a_header_error(tmp_path: Path) -> None:
    path = _write(tmp_path / "s.jsonl", json.dumps({**_header(), "started_at": 1e20}).encode() + b"\n")
    with pytest.raises(RecordingError, match=r"started_at 1e\+20 is not a time in years 1970-9999"):
        open_recording(path)


def test_the_cli_says_one_line_and_exits_2_for_a_huge_offset(tmp_path: Path) -> None:
    path = _write(tmp_path / "tz.jsonl", json.dumps({**_header(), "naive_tz": {"offset_s": 10**30}}).encode() + b"\n")
    nested = _write(tmp_path / "nested.jsonl", b'{"kvtop_recording": 1, "host": ' + b"[" * 100_000 + b"\n")
    for bad in (path, nested):
        proc = subprocess.run(
            [sys.executable, "-m", "kvtop", "--replay", str(bad)],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO,
            env={**os.environ, "TERM": "dumb"},
        )
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
        assert proc.stderr.startswith(f"kvtop: --replay: {bad}: ")


# --------------------------------------------------------------------------------------------
# Bounded memory and streaming


def _gzip_stream(path: Path, head: bytes, body: bytes, repeat: int) -> Path:
    """``head`` then ``body`` ``repeat`` times, gzip-compressed without holding the whole text."""
    comp = zlib.compressobj(6, zlib.DEFLATED, 31)
    with path.open("wb") as f:
        f.write(comp.compress(head))
        for _ in range(repeat):
            f.write(comp.compress(body))
        f.write(comp.flush())
    return path


def test_a_gzip_bomb_is_damage_with_bounded_memory(tmp_path: Path) -> None:
    """256 MiB of zeros in a 256 KB .gz: one "line" far over the limit. The reader stops at the limit."""
    bomb = _gzip_stream(tmp_path / "bomb.jsonl.gz", _head(), b"\0" * 2**20, 256)
    assert bomb.stat().st_size < 2**20
    tracemalloc.start()
    try:
        rec = read_recording(bomb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert rec.records == ()
    assert rec.damage == "recording ends at line 2: the line is longer than 64 MiB (not a kvtop record)"
    assert peak < MAX_LINE_BYTES + 16 * 2**20, f"peak {peak / 2**20:.0f} MiB"


def test_a_line_over_the_limit_is_damage_not_an_allocation(tmp_path: Path) -> None:
    long_line = b'{"t": 1795963474, "kind": "log", "raw_lines": ["' + b"x" * (8 * 2**20) + b'"]}\n'
    path = _write(tmp_path / "long.jsonl", _head(), _record_line(), long_line, _record_line(T0 + 2))
    tracemalloc.start()
    try:
        rec = read_recording(path, max_line_bytes=2**20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(rec.records) == 1
    assert rec.damage == "recording ends at line 3: the line is longer than 1 MiB (not a kvtop record)"
    assert peak < 4 * 2**20, f"peak {peak / 2**20:.1f} MiB"
    # with the default limit (64 MiB) the same 8 MiB line is read and decoded: a long record is not damage itself
    assert read_recording(path).damage == "recording ends at line 3: LogRecord: required field 'source' missing"


def test_a_long_recording_plays_its_first_record_before_reading_the_file(tmp_path: Path) -> None:
    """3,000 real records (about 4 MB of JSON): the player holds the first record after reading a
    sliver of the file, and playing all of it keeps memory at a few records."""
    n = 3_000
    line = _record_line()
    path = tmp_path / "long.jsonl"
    with path.open("wb") as f:
        f.write(_head())
        f.writelines(line for _ in range(n))
    size = path.stat().st_size
    opened = open_recording(path)
    player = Player(opened)
    assert player._scan is not None and 0 < player._scan.bytes_read < size // 4
    first = player.take()
    assert first.ollama == ollama_snapshot(T0)
    tracemalloc.start()
    try:
        while not player.at_end:
            player.take()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert player.position == n and player.damage is None and not player.unfinished
    assert peak < size // 2, f"peak {peak / 2**20:.1f} MiB for {n} records"


def test_streamed_jumps_match_the_in_memory_player(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl.gz"
    rec = Recorder.create(path, _header(), clock=_clock(step=10.0))
    for i in range(30):  # records 10 s apart
        rec.ollama(ollama_snapshot(T0 + i))
    rec.close()
    streamed, memory = Player(open_recording(path)), Player(read_recording(path))
    for seconds in (60.0, 60.0, -60.0, None, 60.0, -60.0, 1.0, 25.0, 600.0):
        expect = memory.target(seconds)
        back, records = streamed.jump(seconds)
        taken = list(records)
        assert streamed.position == expect, seconds
        assert back == (seconds is None or seconds < 0) and (back or len(taken) == expect - memory.position)
        memory.position = expect
        assert streamed.time_s == memory.time_s
    assert streamed.at_end and streamed.position == 30


def test_a_streamed_damaged_recording_reports_at_its_end(tmp_path: Path) -> None:
    path = _write(tmp_path / "d.jsonl", _head(), _record_line(), _record_line(T0 + 1), b'{"t": 5, "kind": "x"}\n')
    control = ReplayControl(open_recording(path))
    assert control.status_text() is None
    control.player.position = 10
    assert control.player.position == 2
    assert control.status_text() == "recording ends at line 4: unknown record kind 'x'"
    unfinished = tmp_path / "u.jsonl.gz"
    unfinished.write_bytes(gzip.compress(_head() + _record_line())[:-8])
    control = ReplayControl(open_recording(unfinished))
    control.player.position = 1
    assert control.status_text() == (
        "recording ends after 1 record without its gzip end: kvtop was still recording, was killed, or the file was cut"
    )


def test_a_file_removed_while_playing_is_damage(tmp_path: Path) -> None:
    path = _write(tmp_path / "gone.jsonl", _head(), _record_line(), _record_line(T0 + 1))
    player = Player(open_recording(path))
    player.take()
    path.unlink()  # the open file still reads; going back must reopen it
    back, records = player.jump(None)
    assert back and list(records) == [] and player.at_end
    assert player.damage is not None and player.damage.startswith("recording ends at line 2: the file cannot be read")


# --------------------------------------------------------------------------------------------
# The dashboard over a streamed recording


async def test_the_dashboard_replays_a_streamed_recording_like_an_in_memory_one() -> None:
    """The incident read as a stream and read into memory give the same states: at the end (after the
    fix: no spill alert), at the start (no spill) and in the middle, where gemma4 has spilled (the spill
    alert is there, with its fix)."""
    from kvtop.ui.app import make_app
    from tests.integration.test_app_live import until

    ends, mids = [], []
    for recording in (open_recording(resolve_recording("incident")), read_recording(resolve_recording("incident"))):
        app = make_app(Settings(host_url="http://unused:1", log_spec="none"), replay=recording)
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.press("J", "J")  # +1 min twice: past the incident's 80 s
            await until(pilot, lambda: app.replay is not None and app.replay.player.at_end)
            await pilot.pause(0.2)
            end = app.state
            await pilot.press("B")
            await until(pilot, lambda: app.replay is not None and app.replay.player.position < 10)
            await pilot.press("space")
            assert all(a.kind != "spill" for a in app.state.alerts)
            assert app.replay is not None
            start_s = app.replay.player.time_s or 0.0  # the first seconds: a few records in
            app.replay.request(jump=SPILLED_AT_S)  # into the spill: gemma4 at 19%/81% CPU/GPU (40 s to 60 s)
            await until(
                pilot,
                lambda: app.replay is not None and (app.replay.player.time_s or 0.0) >= start_s + SPILLED_AT_S - 1,
            )
            await pilot.pause(0.2)
            mids.append(app.state)
            await pilot.press("J")
            await until(pilot, lambda: app.replay is not None and app.replay.player.at_end)
            await pilot.pause(0.2)
            assert app.state == end
            ends.append(end)
    assert mids[0] == mids[1] and ends[0] == ends[1]
    spill = [a for a in mids[0].alerts if a.kind == "spill"]
    assert [a.model for a in spill] == ["gemma4:latest"] and spill[0].fixes
    # in the spill: gemma4 in system RAM, the GPU nearly full, embeddinggemma evicted to make room
    assert {a.kind for a in mids[0].alerts} == {"spill", "gpu_nearly_full", "eviction"}
    # after the fix: no spill and the GPU has room; qwen3 loaded three times (num_ctx 2048 → 32768 → 8192)
    assert {a.kind for a in ends[0].alerts} == {"eviction", "reload_churn"}
    assert {m.name: m.spilled for m in ends[0].models} == {"qwen3:1.7b-q8_0": False, "gemma4:latest": False}


SPILLED_AT_S = 48.0
"""Recorded seconds to jump from the incident's start into its spill (its steps: gemma4 spills at 40 s, the
fix at 60 s; the jump starts from a record of the first few seconds)."""


@pytest.mark.parametrize("host", ["http://x\x1b]52;c;aGk=\x07\x1b[2J/", "not a url", 42, "ftp://h/"])
def test_a_header_host_that_is_no_server_url_is_a_clear_header_error(tmp_path: Path, host: object) -> None:
    """Found by a fresh tester: an ESC in the header's host made --replay end in httpx.InvalidURL (exit 1)."""
    path = _write(tmp_path / "h.jsonl", json.dumps({**_header(), "host": host}).encode() + b"\n", _record_line())
    with pytest.raises(RecordingError, match="the recording header is invalid") as info:
        open_recording(path)
    assert "\x1b" not in str(info.value)


def test_replay_cli_exits_2_on_a_hostile_header_host(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    path = _write(
        tmp_path / "h.jsonl", json.dumps({**_header(), "host": "http://x\x1b[2J/"}).encode() + b"\n", _record_line()
    )
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    done = subprocess.run(
        [sys.executable, "-m", "kvtop", "--replay", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=repo,
        check=False,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr and "\x1b" not in done.stderr
    assert "the recording header is invalid (host " in done.stderr
