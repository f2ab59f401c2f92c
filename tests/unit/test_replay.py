"""Recording format, codec round trips, damaged files and playback bookkeeping (no UI, no network)."""

from __future__ import annotations

import gzip
import json
from datetime import timedelta, timezone
from pathlib import Path

import pytest

from kvtop.model.alerts import Thresholds
from kvtop.model.codec import CodecError, decode, encode
from kvtop.model.gpu_snapshots import (
    GpuDevice,
    GpuProcess,
    GpuSnapshot,
    PidNamespace,
    ProcSnapshot,
    ProcessInfo,
    RunnerProcess,
    ServerProcess,
    SystemMemory,
)
from kvtop.model.snapshots import OllamaSnapshot, ShowInfo, TagInfo
from kvtop.sources.ollama_decode import parse_ps
from kvtop.sources.recorder import Recorder, recording_header
from kvtop.sources.recording import FORMAT_VERSION, RecordingError, read_recording, resolve_recording
from kvtop.sources.replay import MAX_GAP_S, Player, speed_text
from tests.conftest import FIXTURES, load_json

GEMMA4_PS = "api/011-api-ps-docs-example-gemma4-partial-vram-context_length.json"
TRUNCATION_LOG = FIXTURES / "logs" / "014-truncating-input-prompt-embeddings-0.6.log"
CET = timezone(timedelta(hours=1), "CET")


def ollama_snapshot(taken_at: float = 1_795_963_473.73) -> OllamaSnapshot:
    """A snapshot built from the Ollama docs' /api/ps example (gemma4 19%/81% CPU/GPU)."""
    models = parse_ps(load_json(GEMMA4_PS))
    show = ShowInfo(
        digest=models[0].digest,
        name=models[0].name,
        model_info={
            "general.architecture": "gemma4",
            "gemma4.block_count": 42,
            "gemma4.attention.sliding_window_pattern": [True, True, False],
            "gemma4.attention.layer_norm_rms_epsilon": 1e-06,
        },
        parameters="temperature 1\nnum_ctx 4096",
        capabilities=("completion",),
        model_blob="sha256-" + "ab" * 32,
    )
    return OllamaSnapshot(
        host_url="http://127.0.0.1:11434",
        taken_at=taken_at,
        reachable=True,
        version="0.22.1",
        latency_s=0.003,
        models=models,
        shows={models[0].digest: show},
        tags={models[0].digest: TagInfo(models[0].name, models[0].digest, None)},
    )


def gpu_snapshot() -> tuple[GpuSnapshot, ProcSnapshot]:
    """A populated GPU + process sample (every nested dataclass kind, integer PID keys)."""
    gpu = GpuSnapshot(
        taken_at=1_795_963_474.0,
        status="GPU telemetry: NVML 1 GPU",
        ok=True,
        backend="nvml",
        driver_version="580.1",
        devices=(
            GpuDevice(
                index=0,
                name="NVIDIA GeForce RTX 3060",
                uuid="GPU-00000000-0000-0000-0000-000000000001",
                memory_total_bytes=12 * 2**30,
                memory_used_bytes=11 * 2**30,
                memory_free_bytes=2**30,
                gpu_util_percent=97,
                temperature_c=71,
                power_draw_mw=170_000,
                processes=(GpuProcess(pid=4242, used_memory_bytes=5_333_539_264),),
            ),
        ),
        system=SystemMemory(ram_total_bytes=64 * 2**30, ram_available_bytes=40 * 2**30, swap_used_bytes=0),
        notes=("one note",),
    )
    procs = ProcSnapshot(
        taken_at=1_795_963_474.1,
        servers=(ServerProcess(pid=100, user="ollama", cmdline=("ollama", "serve")),),
        runners=(
            RunnerProcess(
                pid=4242,
                kind="llama-server",
                era="C",
                blob="sha256-" + "ab" * 32,
                ctx_size=4096,
                parallel=1,
                server_pid=100,
                rss_bytes=1_258_291_200,
            ),
        ),
        discovery_pids=(4300,),
        processes={4242: ProcessInfo(pid=4242, name="llama-server", cmdline=("llama-server", "-c", "4096"))},
        namespace=PidNamespace(container="docker", private=True, mismatch=False, note="in a container"),
    )
    return gpu, procs


def _header() -> dict[str, object]:
    return recording_header(
        hosts=("http://127.0.0.1:11434",),
        log_spec="file:/var/log/ollama.log",
        gpu=True,
        demo=False,
        naive_tz=CET,
        thresholds=Thresholds(),
        started_at=1_795_963_473.0,
    )


def _clock(start: float = 1_795_963_473.0, step: float = 1.0):
    times = iter(start + i * step for i in range(10_000))
    return lambda: next(times)


def _write_session(path: Path) -> list[str]:
    """Header + ollama, gpu, log, ollama; returns the raw log lines recorded."""
    lines = TRUNCATION_LOG.read_text(encoding="utf-8").splitlines()
    gpu, procs = gpu_snapshot()
    rec = Recorder.create(path, _header(), clock=_clock())
    rec.ollama(ollama_snapshot())
    rec.gpu(gpu, procs)
    rec.log(source="file:/var/log/ollama.log", status=None, ok=True, lines=len(lines), dropped_lines=0, raw_lines=lines)
    rec.ollama(
        OllamaSnapshot(
            host_url="http://127.0.0.1:11434",
            taken_at=1_795_963_477.0,
            reachable=False,
            error="connection refused",
            error_kind="refused",
        )
    )
    rec.close()
    return lines


# --------------------------------------------------------------------------------------------
# Codec


def test_codec_round_trips_every_snapshot_kind_exactly() -> None:
    snap = ollama_snapshot()
    gpu, procs = gpu_snapshot()
    for value, kind in ((snap, OllamaSnapshot), (gpu, GpuSnapshot), (procs, ProcSnapshot)):
        back = decode(kind, json.loads(json.dumps(encode(value))))
        assert back == value
    back_snap = decode(OllamaSnapshot, json.loads(json.dumps(encode(snap))))
    assert back_snap.models[0].expires_at == snap.models[0].expires_at
    assert back_snap.models[0].expires_at.utcoffset() == timedelta(hours=-7)  # the docs example's -07:00 kept
    assert back_snap.models[0].size_vram_bytes == 5_333_539_264
    back_procs = decode(ProcSnapshot, json.loads(json.dumps(encode(procs))))
    assert list(back_procs.processes) == [4242]  # integer PID keys survive JSON's string keys


def test_codec_leaves_out_defaults_and_rejects_wrong_shapes() -> None:
    data = encode(OllamaSnapshot(host_url="http://h:1", taken_at=1.0, reachable=False))
    assert data == {"host_url": "http://h:1", "taken_at": 1.0, "reachable": False}
    with pytest.raises(CodecError, match="required field 'taken_at' missing"):
        decode(OllamaSnapshot, {"host_url": "x", "reachable": True})
    with pytest.raises(CodecError, match="expected an integer"):
        decode(TagInfo, {"name": "a", "digest": "b", "size_bytes": "12"})
    with pytest.raises(CodecError, match="is not one of"):
        decode(OllamaSnapshot, {"host_url": "x", "taken_at": 1, "reachable": False, "error_kind": "weird"})
    # a newer kvtop's extra field is ignored
    assert decode(TagInfo, {"name": "a", "digest": "b", "size_bytes": 1, "new_field": 3}) == TagInfo("a", "b", 1)


# --------------------------------------------------------------------------------------------
# Recorder and reader


@pytest.mark.parametrize("name", ["session.jsonl", "session.jsonl.gz"])
def test_recording_reads_back_what_was_written(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    lines = _write_session(path)
    raw = path.read_bytes()
    assert (raw[:2] == b"\x1f\x8b") == name.endswith(".gz")
    first = (gzip.decompress(raw) if name.endswith(".gz") else raw).split(b"\n", 1)[0]
    head = json.loads(first)
    assert head["kvtop_recording"] == FORMAT_VERSION and head["kvtop_version"] == "0.1.0"
    assert head["sources"] == {
        "ollama": "http://127.0.0.1:11434",
        "hosts": ["http://127.0.0.1:11434"],
        "log": "file:/var/log/ollama.log",
        "gpu": True,
    }
    rec = read_recording(path)
    assert rec.damage is None
    assert rec.header.naive_tz.utcoffset(None) == timedelta(hours=1)
    assert Thresholds(**rec.header.alerts) == Thresholds()
    assert [r.kind for r in rec.records] == ["ollama", "gpu", "log", "ollama"]
    assert [r.t for r in rec.records] == [1_795_963_473.0, 1_795_963_474.0, 1_795_963_475.0, 1_795_963_476.0]
    assert rec.records[0].ollama == ollama_snapshot()
    assert (rec.records[1].gpu, rec.records[1].procs) == gpu_snapshot()
    log = rec.records[2].log
    assert log is not None and log.raw_lines == tuple(lines) and log.lines == 3
    assert rec.records[3].ollama is not None and rec.records[3].ollama.error == "connection refused"


def test_gzip_recording_is_readable_while_still_being_written(tmp_path: Path) -> None:
    """Every record is flushed (Z_SYNC_FLUSH): a reader sees it before the file is closed."""
    path = tmp_path / "live.jsonl.gz"
    rec = Recorder.create(path, _header(), clock=_clock())
    rec.ollama(ollama_snapshot())
    rec.ollama(ollama_snapshot(1_795_963_474.73))
    partial = read_recording(path)  # no gzip trailer yet
    assert len(partial.records) == 2 and partial.damage is None and partial.unfinished
    rec.close()
    done = read_recording(path)
    assert len(done.records) == 2 and not done.unfinished


@pytest.mark.parametrize("name", ["cut.jsonl", "cut.jsonl.gz"])
def test_a_cut_tail_replays_up_to_the_damage(tmp_path: Path, name: str) -> None:
    whole = tmp_path / f"whole-{name}"
    _write_session(whole)
    text = gzip.decompress(whole.read_bytes()) if name.endswith(".gz") else whole.read_bytes()
    last = text.rstrip(b"\n").rsplit(b"\n", 1)[1]
    cut = text[: len(text) - len(last) // 2 - 1]  # the last record half written, as after a crash
    path = tmp_path / name
    if name.endswith(".gz"):
        comp = gzip.compress(cut)
        path.write_bytes(comp[:-8])  # and no trailer
    else:
        path.write_bytes(cut)
    rec = read_recording(path)
    assert [r.kind for r in rec.records] == ["ollama", "gpu", "log"]
    assert rec.damage == "recording ends at line 5: the line is cut short (kvtop stopped while writing it?)"


def test_corrupt_lines_stop_the_replay_where_they_are(tmp_path: Path) -> None:
    good = tmp_path / "good.jsonl"
    _write_session(good)
    lines = good.read_text(encoding="utf-8").splitlines()
    bad_json = tmp_path / "bad-json.jsonl"
    bad_json.write_text(
        "\n".join(lines[:3] + ['{"t": 1, "kind": "ollama", "snap'] + lines[4:]) + "\n", encoding="utf-8"
    )
    rec = read_recording(bad_json)
    assert len(rec.records) == 2
    assert rec.damage is not None and rec.damage.startswith("recording ends at line 4: not valid JSON")
    bad_record = tmp_path / "bad-record.jsonl"
    bad_record.write_text(
        "\n".join(lines[:2] + ['{"t": 5, "kind": "ollama", "snapshot": {"host_url": 3}}']) + "\n", encoding="utf-8"
    )
    rec = read_recording(bad_record)
    assert len(rec.records) == 1
    assert rec.damage == "recording ends at line 3: OllamaSnapshot.host_url: expected a string, got int"
    gz = tmp_path / "flipped.jsonl.gz"
    _write_session(gz)
    data = bytearray(gz.read_bytes())
    data[len(data) // 2] ^= 0xFF  # a flipped byte in the middle of the deflate stream
    gz.write_bytes(bytes(data))
    rec = read_recording(gz)
    assert len(rec.records) < 4 and rec.damage is not None and rec.damage.startswith("recording ends at line ")


def test_files_that_are_not_replayable_say_why(tmp_path: Path) -> None:
    newer = tmp_path / "newer.jsonl"
    newer.write_text(
        json.dumps({**_header(), "kvtop_recording": FORMAT_VERSION + 1, "kvtop_version": "9.0"}) + "\n",
        encoding="utf-8",
    )
    with pytest.raises(RecordingError, match=r"format 2 \(written by kvtop 9.0\) is newer than this kvtop"):
        read_recording(newer)
    other = tmp_path / "other.json"
    other.write_text('{"models": []}\n', encoding="utf-8")
    with pytest.raises(RecordingError, match="not a kvtop recording"):
        read_recording(other)
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    with pytest.raises(RecordingError, match="empty file"):
        read_recording(empty)
    with pytest.raises(RecordingError, match="No such file"):
        read_recording(tmp_path / "missing.jsonl")
    with pytest.raises(RecordingError, match="no such file .*bundled recordings: demo, incident"):
        resolve_recording(str(tmp_path / "missing.jsonl"))


def test_recorder_never_overwrites(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text("precious\n", encoding="utf-8")
    with pytest.raises(FileExistsError):
        Recorder.create(path, _header())
    assert path.read_text(encoding="utf-8") == "precious\n"


def test_bundled_names_resolve_to_the_shipped_recordings() -> None:
    for name in ("demo", "incident"):
        rec = read_recording(resolve_recording(name))
        assert rec.damage is None and len(rec.records) > 20
        assert Path(rec.path).stat().st_size < 1_000_000


# --------------------------------------------------------------------------------------------
# Playback bookkeeping


def test_a_log_feed_batch_matches_the_parser_fed_line_by_line() -> None:
    from kvtop.engine import LogFeed

    lines = TRUNCATION_LOG.read_text(encoding="utf-8").splitlines()
    events, error = LogFeed().parse(lines)  # what the replay worker parses each recorded batch with
    assert error is None
    assert [e.kind for e in events] == ["runner_ready", "gin_request", "truncation"]


def test_player_speeds_gaps_and_jumps(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    rec = Recorder.create(path, _header(), clock=_clock(step=10.0))
    for i in range(20):  # records 10 s apart
        rec.ollama(ollama_snapshot(1_795_963_480.0 + i))
    rec.close()
    player = Player(read_recording(path))
    assert player.gap_s() == 0.0 and player.time_s is None
    player.take()
    assert player.gap_s() == MAX_GAP_S  # a 10 s gap at 1x waits at most MAX_GAP_S
    assert [player.faster() for _ in range(6)] == [2.0, 4.0, 8.0, 16.0, 16.0, 16.0]
    assert player.gap_s() == 10.0 / 16
    assert [player.slower() for _ in range(8)] == [8.0, 4.0, 2.0, 1.0, 0.5, 0.25, 0.25, 0.25]
    assert speed_text(0.25) == "×¼" and speed_text(16.0) == "×16"
    assert player.target(60.0) == 7  # from the first record: the six 10 s later ones up to +60 s
    player.position = 7
    assert player.target(-60.0) == 1 and player.target(None) == 0
    player.position = 20
    assert player.at_end and player.target(60.0) == 20


def test_an_unfinished_gzip_recording_says_so_at_its_end(tmp_path: Path) -> None:
    """A .gz cut at a line boundary (or a kvtop that was killed) has intact records but no gzip
    end: the line under the table says so once everything is replayed."""
    from kvtop.ui.replay_worker import ReplayControl

    path = tmp_path / "killed.jsonl.gz"
    rec = Recorder.create(path, _header(), clock=_clock())
    rec.ollama(ollama_snapshot())
    control = ReplayControl(read_recording(path))
    assert control.status_text() is None  # not at the end yet
    control.player.position = len(control.recording.records)
    assert control.status_text() == (
        "recording ends after 1 record without its gzip end: kvtop was still recording, was killed, or the file was cut"
    )
    rec.close()
    closed = ReplayControl(read_recording(path))
    closed.player.position = 1
    assert closed.status_text() is None


def test_the_runner_and_service_rungs_are_recorded_and_read_back(tmp_path: Path) -> None:
    """A ``/props`` + ``/slots`` round and a server environment replay exactly (the source ladder's runner and service rungs)."""
    from types import MappingProxyType

    from kvtop.model.gpu_snapshots import RunnerProcess, ServerProcess, ServiceEnv
    from kvtop.model.slot_snapshots import RunnerProps, RunnerSlots, SlotState, SlotsSnapshot

    env = ServiceEnv(
        values=MappingProxyType({"OLLAMA_KV_CACHE_TYPE": "q8_0", "OLLAMA_API_KEY": "••••"}), source="/proc/10/environ"
    )
    procs = ProcSnapshot(
        taken_at=1.0,
        servers=(ServerProcess(10, "ollama", ("ollama", "serve"), env),),
        runners=(
            RunnerProcess(
                11,
                "llama-server",
                "v0.30+",
                blob="sha256-" + "ab" * 32,
                port=40123,
                ctx_size=16384,
                parallel=2,
                cache_type_k="q8_0",
                cache_type_v="q8_0",
                flash_attn="on",
                n_gpu_layers=99,
                server_pid=10,
            ),
        ),
    )
    slots = SlotsSnapshot(
        2.0,
        (
            RunnerSlots(
                11,
                40123,
                "sha256-" + "ab" * 32,
                16384,
                (SlotState(0, 8192, True, 7, 1200, 300), SlotState(1, 8192, False)),
                props=RunnerProps(8192, 2, "/m/blobs/sha256-" + "ab" * 32, "b10488", False),
            ),
        ),
    )
    gpu, _ = gpu_snapshot()
    path = tmp_path / "rungs.jsonl"
    rec = Recorder.create(path, _header(), clock=_clock())
    rec.gpu(gpu, procs)
    rec.slots(slots)
    rec.close()
    back = read_recording(path)
    assert [r.kind for r in back.records] == ["gpu", "slots"]
    assert back.records[0].procs == procs and back.records[0].procs.servers[0].env == env  # type: ignore[union-attr]
    assert back.records[1].slots == slots
