"""``--record`` / ``--replay`` end to end: a real stand-in server and a real log file are recorded
by the dashboard, the recording is replayed through the same handlers, and the states match.

Also: the bundled incident recording replays with its alerts, a damaged recording replays up to the
damage and says so, the replay keys, a full disk while recording, and the CLI's errors.
"""

from __future__ import annotations

import dataclasses
import gzip
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kvtop.config import Settings
from kvtop.demo.log_lines import restamp
from kvtop.model.views import AppState
from kvtop.sources.recorder import Recorder, recording_header
from kvtop.sources.recording import read_recording, resolve_recording
from kvtop.ui.app import KvtopApp, make_app
from kvtop.ui.widgets.header import ServerHeader
from tests.fakes.gpu_sources import FixedGpuSource, FixedProcSource
from tests.integration.test_app_live import rows, until
from tests.standin import BUNDLED, REPO, running

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
TRUNCATIONS = (FIXTURES / "014-truncating-input-prompt-embeddings-0.6.log").read_text(encoding="utf-8")


class ProbeRecorder(Recorder):
    """A real recorder that also keeps every server's state as it was before each record was
    applied (the records are written first in each handler): the fold, step by step."""

    app: KvtopApp
    seen: list[dict[str, AppState]]

    def _write(self, obj: Any) -> None:
        if "kind" in obj:
            self.seen.append(dict(self.app.states))
        super()._write(obj)


def probe(app: KvtopApp, path: Path) -> ProbeRecorder:
    header = recording_header(
        hosts=app.hosts,
        log_spec=app.settings.log_spec,
        gpu=app.gpu_source is not None,
        demo=False,
        naive_tz=app.state.naive_tz,
        thresholds=app.state.thresholds,
        started_at=0.0,
    )
    rec = ProbeRecorder.create(path, header)
    rec.app, rec.seen = app, []
    app.recorder = rec
    return rec


def header_text(app: KvtopApp) -> str:
    return str(app.dashboard.query_one(ServerHeader).render())


async def test_replayed_states_equal_the_live_ones(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("", encoding="utf-8")
    recording = tmp_path / "session.jsonl.gz"
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        app = make_app(
            Settings(host_url=server.url, interval_s=0.25, timeout_s=2.0, log_spec=f"file:{log}"),
            gpu_source=FixedGpuSource(),
            proc_source=FixedProcSource(),
        )
        live = probe(app, recording)
        async with app.run_test(size=(160, 48)) as pilot:
            server.goto(1)
            await until(pilot, lambda: len(rows(app)) == 1)
            assert "● REC" in header_text(app)
            with log.open("a", encoding="utf-8") as f:  # real lines, stamped now (alerts count the last 15 min)
                f.writelines(restamp(line, time.time()) + "\n" for line in TRUNCATIONS.splitlines())
            await until(pilot, lambda: any(a.kind == "prompt_truncated" for a in app.state.alerts))
            server.goto(4)  # gemma4 spills
            await until(pilot, lambda: any(a.kind == "spill" for a in app.state.alerts))
            server.goto(6)
            await until(pilot, lambda: len(rows(app)) == 2)
            await pilot.pause(0.3)
            # nothing staged when the recording stops: a poll or log batch that came in the last
            # moments and waits for its apply step would be applied by the replay at the recording's
            # end (one more state than live; seen once on a loaded machine: 25 == 24)
            await pilot.press("p")
            await until(pilot, lambda: not any(app._pending.values()))
            app.recorder = None  # stop recording before the app winds down
            live.close()
            live.seen.append(dict(app.states))
    kinds = [r.kind for r in read_recording(recording).records]
    assert {"ollama", "gpu", "log"} <= set(kinds) and len(kinds) == len(live.seen) - 1

    replay = read_recording(recording)
    assert replay.damage is None
    app2 = make_app(Settings(host_url="http://unused:1", log_spec="none"), replay=replay)
    again = probe(app2, tmp_path / "again.jsonl")
    async with app2.run_test(size=(160, 48)) as pilot:
        for _ in range(4):
            await pilot.press("greater_than_sign")  # 16x
        assert app2.replay is not None and app2.replay.player.speed == 16.0
        await until(pilot, lambda: app2.replay is not None and app2.replay.player.at_end, timeout_s=20)
        await pilot.pause(0.3)
        app2.recorder = None
        again.close()
        again.seen.append(dict(app2.states))
        assert "REPLAY" in header_text(app2) and "END" in header_text(app2)
    # every state along the way is equal: AppState fields, alerts with their `since`, the log's events
    assert len(again.seen) == len(live.seen)
    for i, (a, b) in enumerate(zip(live.seen, again.seen)):
        assert a == b, f"state after record {i} differs"
    final = live.seen[-1][server.url]
    assert {a.kind for a in final.alerts} >= {"prompt_truncated"}
    assert final.log.lines == 3 and len(final.models) == 2
    # replaying re-records the same records (only the time each was applied differs)
    untimed = [dataclasses.replace(r, t=0.0) for r in read_recording(tmp_path / "again.jsonl").records]
    assert untimed == [dataclasses.replace(r, t=0.0) for r in read_recording(recording).records]


async def test_incident_recording_replays_with_its_alerts() -> None:
    recording = read_recording(resolve_recording("incident"))
    assert recording.header.sources["log"] == "file:server.log"
    app = make_app(Settings(host_url="http://unused:1", log_spec="none"), replay=recording)
    async with app.run_test(size=(160, 48)) as pilot:
        for _ in range(4):
            await pilot.press("greater_than_sign")  # ×16: the spill comes 40 s into the recording

        # the spill as the runner log and the GPU tell it, once gemma4 has served a request spilled
        def spilled_and_timed() -> bool:
            gemma = next((m for m in app.state.models if m.name == "gemma4:latest"), None)
            return (
                any(a.kind == "spill" and "34/43 layers" in a.message for a in app.state.alerts)
                and gemma is not None
                and gemma.cpu_percent == 19
                and gemma.throughput is not None
                and gemma.throughput.avg_decode_tps is not None
            )

        await until(pilot, spilled_and_timed, timeout_s=15)
        await pilot.press("space")
        during = app.state
        spill = next(a for a in during.alerts if a.kind == "spill")
        assert spill.model == "gemma4:latest"
        assert spill.message.startswith("19% of 6.1 GiB in system RAM (1.2 GiB); 34/43 layers on the GPU")
        assert any(
            f.action.startswith("num_ctx ") and f.action.endswith(" for qwen3:1.7b-q8_0") and f.fits
            for f in spill.fixes
        )
        views = {m.name: m for m in during.models}
        assert set(views) == {"qwen3:1.7b-q8_0", "gemma4:latest"}
        assert views["gemma4:latest"].processor == "19%/81% CPU/GPU"
        assert views["gemma4:latest"].flash_attention.value == "disabled"
        assert views["qwen3:1.7b-q8_0"].context.value == 32768
        assert views["qwen3:1.7b-q8_0"].memory.kv.value == 3_758_096_384  # allocated (the runner log)
        assert "spill gemma4:latest" in str(app.dashboard.query_one("#alertbar").render())

        await pilot.press("space", *["less_than_sign"] * 4)  # playing again, at ×1
        await pilot.press("J")  # a minute ahead: past the 80 s recorded, after the fix
        await until(pilot, lambda: app.replay is not None and app.replay.player.at_end)
        await pilot.pause(0.2)
        end = app.state
        alerts = {a.kind: a for a in end.alerts}
        assert "spill" not in alerts and "eviction" in alerts
        assert [e.limit for e in end.log.recent if e.kind == "truncation"] == [1026]  # num_ctx 2048, keep 4
        assert "unloaded to make room" in alerts["eviction"].message
        views = {m.name: m for m in end.models}
        assert views["gemma4:latest"].processor == "100% GPU"
        assert views["qwen3:1.7b-q8_0"].context.value == 8192
        # the spill cliff: gemma4 decoded at ~9.7 tok/s spilled, ~41 tok/s once it fits again
        slow = during.models[[m.name for m in during.models].index("gemma4:latest")].throughput
        fast = views["gemma4:latest"].throughput
        assert slow is not None and fast is not None and slow.avg_decode_tps and fast.avg_decode_tps
        assert slow.avg_decode_tps < 11 < 38 < fast.avg_decode_tps
        text = header_text(app)
        assert "REPLAY 20" in text and "END" in text and "every" not in text

        await pilot.press("B")  # back to the start: the state is rebuilt from the first record
        await until(pilot, lambda: app.replay is not None and app.replay.player.position < 10)
        await pilot.press("space")
        await pilot.pause(0.3)  # a record in flight when it paused is applied
        assert all(a.kind != "spill" for a in app.state.alerts)  # rebuilt from the start: no spill yet
        assert app.paused and "PAUSED" in header_text(app)
        position = app.replay.player.position
        await pilot.press("full_stop")
        await until(pilot, lambda: app.replay is not None and app.replay.player.position > position)  # one apply step
        await pilot.press("J", "J")
        await until(pilot, lambda: app.replay is not None and app.replay.player.at_end)
        await pilot.pause(0.2)
        assert app.state == end  # the same fold, however it was reached


async def test_a_damaged_recording_replays_up_to_the_damage_and_stays_open(tmp_path: Path) -> None:
    data = gzip.decompress(Path(resolve_recording("incident")).read_bytes())
    lines = data.split(b"\n")
    broken = tmp_path / "broken.jsonl.gz"
    with gzip.open(broken, "wb") as f:
        f.write(b"\n".join(lines[:40]) + b"\n" + lines[40][:50])  # line 41 cut short
    recording = read_recording(broken)
    assert len(recording.records) == 39
    assert recording.damage == "recording ends at line 41: the line is cut short (kvtop stopped while writing it?)"
    app = make_app(Settings(host_url="http://unused:1", log_spec="none"), replay=recording)
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.press("J")
        await until(pilot, lambda: app.replay is not None and app.replay.player.at_end)
        await pilot.pause(0.2)
        status = str(app.dashboard.query_one("#status").render())
        assert status.startswith("recording ends at line 41: the line is cut short")
        assert app.is_running and "END" in header_text(app)


async def test_a_full_disk_stops_recording_once_and_kvtop_keeps_running(tmp_path: Path) -> None:
    """/dev/full: every write fails with ENOSPC, like a disk that fills up while recording."""
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        server.goto(1)
        app = make_app(
            Settings(host_url=server.url, interval_s=0.25, timeout_s=2.0, log_spec="none"),
            gpu_source=FixedGpuSource(),
            proc_source=FixedProcSource(),
        )
        raw = open("/dev/full", "wb")  # noqa: SIM115, ASYNC230 - closed by the recorder
        app.recorder = Recorder(Path("/dev/full"), raw, raw)
        async with app.run_test(size=(120, 30)) as pilot:
            await until(pilot, lambda: len(rows(app)) == 1)
            await pilot.pause(0.6)  # more polls: the notice is not repeated
            assert app.recorder is None and "REC" not in header_text(app)
            notes = [n.message for n in app._notifications]
            assert sum("recording stopped: /dev/full" in m for m in notes) == 1
            assert any("No space left on device" in m for m in notes)
            assert app.is_running


def _kvtop(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "kvtop", *args],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=str(REPO),
        env=env,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def test_cli_errors_are_clear_and_exit_2(tmp_path: Path) -> None:
    done = _kvtop(
        "--record", str(tmp_path / "no" / "such" / "dir" / "x.jsonl"), "--host", "127.0.0.1:9", "--log", "none"
    )
    assert (
        done.returncode == 2 and "--record: cannot write" in done.stderr and "No such file or directory" in done.stderr
    )
    existing = tmp_path / "old.jsonl.gz"
    existing.write_bytes(b"keep me")
    done = _kvtop("--record", str(existing), "--host", "127.0.0.1:9", "--log", "none")
    assert done.returncode == 2 and "exists: kvtop never overwrites a recording" in done.stderr
    assert existing.read_bytes() == b"keep me"
    done = _kvtop("--record", str(tmp_path), "--host", "127.0.0.1:9", "--log", "none")
    assert done.returncode == 2 and f"--record: {tmp_path} is a directory: name a file in it" in done.stderr
    done = _kvtop("--replay", str(tmp_path / "missing.jsonl"))
    assert done.returncode == 2 and "bundled recordings: demo, incident" in done.stderr
    newer = tmp_path / "newer.jsonl"
    newer.write_text('{"kvtop_recording": 99, "kvtop_version": "9.9.9", "host": "http://h:1"}\n', encoding="utf-8")
    done = _kvtop("--replay", str(newer))
    assert done.returncode == 2 and "recording format 99" in done.stderr and "upgrade kvtop" in done.stderr
    for bad in (["--record", "a", "--replay", "b"], ["--replay", "demo", "--host", "h:1"], ["--record", "a", "--once"]):
        done = _kvtop(*bad)
        assert done.returncode == 2 and "Traceback" not in done.stderr, bad
