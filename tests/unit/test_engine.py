"""The headless engine (``kvtop/engine``): one factory, one log-batch loop, one apply step."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from kvtop.config import Settings
from kvtop.engine import Engine, EngineSources, LogFeed, Notice, Step, build_sources
from kvtop.logparse.parser import LogParser
from kvtop.model.gpu_snapshots import ProcSnapshot
from kvtop.model.slot_snapshots import SlotsSnapshot
from kvtop.sources.tail_base import LogBatch
from tests.fakes.gpu_sources import FixedGpuSource, FixedProcSource
from tests.ui.fakes import HOST, FakeSource, down_snapshot, snapshot_at, step_index

REPO = Path(__file__).resolve().parents[2]
LOG = REPO / "tests" / "fixtures" / "logs" / "002-kv-partial-offload-cuda-host-fa1-0.3.log"
MARKER = "KVTOP-TEST-PARSER-BOOM"


def settings(**kw: Any) -> Settings:
    return Settings(host_url=HOST, **{"interval_s": 0.1, "log_spec": "none", **kw})


def raising_on_marker(monkeypatch: pytest.MonkeyPatch) -> None:
    """``LogParser.feed`` raises on a line holding ``MARKER`` (a parser bug)."""
    real = LogParser.feed

    def feed(self: LogParser, line: str) -> Any:
        if MARKER in line:
            raise ValueError("boom")
        return real(self, line)

    monkeypatch.setattr(LogParser, "feed", feed)


class ListLog:
    """A log source yielding the given batches, then waiting (as a quiet log does)."""

    def __init__(self, *batches: Sequence[str]) -> None:
        self.batches_ = [list(b) for b in batches]
        self.closed = False

    async def batches(self) -> AsyncIterator[LogBatch]:
        for lines in self.batches_:
            yield LogBatch(source="file:test.log", lines=lines, status=None, ok=True, taken_at=0.0)
            await asyncio.sleep(0)
        await asyncio.Event().wait()

    async def aclose(self) -> None:
        self.closed = True


class FakeRecorder:
    path = "rec.jsonl.gz"

    def __init__(self, fail_on: str | None = None) -> None:
        self.calls: list[str] = []
        self.fail_on = fail_on
        self.closed = False

    def __getattr__(self, name: str) -> Any:
        def write(*_: Any, **__: Any) -> None:
            if name == self.fail_on:
                raise OSError("disk full")
            self.calls.append(name)

        return write

    def close(self) -> None:
        self.closed = True


# --------------------------------------------------------------------------------------------
# the factory


def test_the_factory_builds_each_source_once_and_takes_the_ones_given(tmp_path: Path) -> None:
    log = tmp_path / "ollama.log"
    log.write_text("", encoding="utf-8")
    s = Settings(host_url=HOST, more_hosts=("http://10.0.0.9:11434",), log_spec=f"file:{log}")
    built = build_sources(s, machine=False)
    assert list(built.servers) == [HOST, "http://10.0.0.9:11434"]
    from kvtop.sources.ollama import OllamaClient
    from kvtop.sources.tail_file import FileTail

    assert all(isinstance(c, OllamaClient) for c in built.servers.values())
    assert isinstance(built.log, FileTail)
    assert built.gpu is None and built.procs is None and built.slots is None and built.pulled is None
    fake, gpu, procs = FakeSource(snapshot_at(0)), FixedGpuSource(), FixedProcSource()
    given = build_sources(settings(), servers={HOST: fake}, gpu=gpu, procs=procs, server_info=True)
    assert given.servers == {HOST: fake} and given.gpu is gpu and given.procs is procs
    assert given.slots is None  # given readers (the demo's machine): no /slots unless asked
    assert given.health is not None and given.pulled is not None
    assert build_sources(settings(), servers={HOST: fake}, gpu=gpu, procs=procs, read_slots=True).slots is not None
    twice = EngineSources(servers={HOST: fake}, gpu=gpu, procs=gpu)  # type: ignore[arg-type]
    assert twice.closables() == [fake, gpu]


def test_the_factory_gives_each_client_its_access_options() -> None:
    from kvtop.config.server_access import parse_host_access

    s = Settings(host_url="https://a.example:11434")
    built = build_sources(s, machine=False)
    client = built.servers["https://a.example:11434"]
    assert client.access == s.access_for("https://a.example:11434")  # type: ignore[attr-defined]
    assert parse_host_access is not None


# --------------------------------------------------------------------------------------------
# the log-batch loop


def test_the_log_feed_reports_a_parser_exception_and_starts_again(monkeypatch: pytest.MonkeyPatch) -> None:
    raising_on_marker(monkeypatch)
    lines = LOG.read_text(encoding="utf-8").splitlines()
    feed = LogFeed(year=2026)
    first, error = feed.parse(lines[:5])
    assert error is None
    parser = feed.parser
    _, error = feed.parse(["time=2026-01-01 " + MARKER])
    assert error == "log parser error: ValueError: boom" and feed.errors == 1
    assert feed.parser is not parser  # restarted
    rest, error = feed.parse(lines[5:])
    assert error is None and len(first) + len(rest) > 0
    whole, _ = LogFeed(year=2026).parse(lines, final=True)
    around, error = LogFeed(year=2026).parse([*lines[:5], "x " + MARKER, *lines[5:], "y " + MARKER], final=True)
    assert error == "log parser error: ValueError: boom (and 1 more line)"
    assert len(around) >= len(whole) - 1  # the rest of the batch is parsed (a record held at the marker may go)


# --------------------------------------------------------------------------------------------
# staging and the apply step


def test_one_apply_step_folds_every_staged_message_and_evaluates_once() -> None:
    engine = Engine(settings(), EngineSources(servers={HOST: FakeSource(snapshot_at(0))}))
    steps: list[Step] = []
    engine.subscribe(steps.append)
    assert engine.apply_step() is None and engine.apply_steps == 0  # nothing staged: no step
    engine.stage_snapshot(snapshot_at(step_index("spills")))
    engine.stage_gpu(FixedGpuSource().snapshot, ProcSnapshot(taken_at=1.0))
    engine.stage_slots(SlotsSnapshot(taken_at=1.0))
    engine.log_batch(LOG.read_text(encoding="utf-8").splitlines(), source="file:x", status=None, ok=True)
    step = engine.apply_step()
    assert step is not None and steps == [step]
    assert engine.apply_steps == 1 and engine.alert_evaluations == 1
    assert step.changed == (HOST,) and step.states[HOST] is engine.states[HOST]
    state = engine.states[HOST]
    assert (
        state.models and state.gpu is not None and state.log.lines == len(LOG.read_text(encoding="utf-8").splitlines())
    )
    assert len(step.polls[HOST]) == 1 and step.log_events
    assert engine.histories[HOST].point_count() > 0
    engine.stage_slots(SlotsSnapshot(taken_at=1.0))  # the same round again: nothing changes
    again = engine.apply_step()
    assert again is not None and again.changed == () and engine.alert_evaluations == 1


def test_log_batches_merge_and_a_snapshot_for_another_host_is_routed() -> None:
    other = "http://10.0.0.9:11434"
    engine = Engine(settings(more_hosts=(other,)))
    assert engine.hosts == (HOST, other) and engine.local_host == HOST
    engine.log_batch(["a"], source="file:x", status=None, ok=True)
    engine.log_batch(["b", "c"], source="file:x", status=None, ok=True)
    assert len(engine.pending[HOST]) == 1  # one LogRun
    snap = snapshot_at(step_index("spills"))
    import dataclasses

    engine.stage_snapshot(dataclasses.replace(snap, host_url=other))
    step = engine.apply_step()
    assert step is not None and set(step.changed) == {HOST, other}
    assert engine.states[HOST].log.lines == 3 and engine.states[other].models
    assert engine.alert_evaluations == 2


def test_a_parser_exception_is_reported_once_and_the_log_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    raising_on_marker(monkeypatch)
    engine = Engine(settings())
    notices: list[Notice] = []
    engine.on_notice(notices.append)
    engine.log_batch(["x " + MARKER], source="file:x", status=None, ok=True)
    engine.log_batch(LOG.read_text(encoding="utf-8").splitlines(), source="file:x", status=None, ok=True)
    engine.apply_step()
    assert [n.text for n in notices] == ["log parser error: ValueError: boom"]
    assert notices[0].source == "log" and notices[0].error
    assert engine.states[HOST].log.recent  # the lines after it were parsed


def test_the_recorder_gets_every_staged_message_and_every_step() -> None:
    engine = Engine(settings())
    engine.recorder = FakeRecorder()  # type: ignore[assignment]
    engine.stage_snapshot(snapshot_at(0))
    engine.stage_gpu(FixedGpuSource().snapshot, ProcSnapshot(taken_at=1.0))
    engine.stage_slots(SlotsSnapshot(taken_at=1.0))
    engine.log_batch(["a"], source="file:x", status=None, ok=True)
    engine.apply_step()
    assert engine.recorder.calls == ["ollama", "gpu", "slots", "log", "apply"]  # type: ignore[union-attr]


def test_a_recorder_that_fails_stops_recording_and_says_so_once() -> None:
    engine = Engine(settings())
    recorder = FakeRecorder(fail_on="ollama")
    engine.recorder = recorder  # type: ignore[assignment]
    failed: list[Any] = []
    engine.on_record_error = lambda rec, exc: failed.append((rec, str(exc)))
    engine.stage_snapshot(snapshot_at(0))
    engine.stage_snapshot(snapshot_at(0))
    assert engine.recorder is None and recorder.closed and failed == [(recorder, "disk full")]


def test_a_replay_stages_and_applies_where_the_recording_says() -> None:
    engine = Engine(settings())
    engine.replaying = True
    engine.stage_snapshot(snapshot_at(0))
    assert engine.apply_steps == 0  # waits for the recorded apply record
    engine.apply_step()
    assert engine.apply_steps == 1
    assert engine.apply_step() is not None and engine.apply_steps == 2  # an apply record counts a step
    engine.apply_each = True  # a recording without apply records: every message at once
    engine.stage_snapshot(snapshot_at(step_index("spills")))
    assert engine.apply_steps == 3 and engine.states[HOST].models
    engine.reset((HOST,), {}, engine.states[HOST].naive_tz)
    assert not engine.states[HOST].models and engine.histories[HOST].point_count() == 0


# --------------------------------------------------------------------------------------------
# one synchronous sample, the continuous loop


async def test_a_step_samples_everything_and_applies_once() -> None:
    gpu, procs = FixedGpuSource(), FixedProcSource()
    source = FakeSource(snapshot_at(step_index("spills")))
    engine = Engine(settings(), build_sources(settings(), servers={HOST: source}, gpu=gpu, procs=procs))
    states = await engine.step()
    assert source.calls == 1 and gpu.samples == 1 and procs.asked == [()]
    assert engine.apply_steps == 1 and engine.alert_evaluations == 1
    assert states == [engine.states[HOST]] and states[0].models and states[0].gpu is not None
    await engine.step()
    assert engine.apply_steps == 2 and len(engine.states[HOST].latencies_s) == 2
    await engine.aclose()
    assert gpu.closed


class RaisingSource:
    def __init__(self) -> None:
        self.calls = 0

    async def sample(self) -> Any:
        self.calls += 1
        raise RuntimeError("bug")

    async def aclose(self) -> None:
        pass


async def test_the_loop_polls_follows_the_log_and_reports_failures_once(monkeypatch: pytest.MonkeyPatch) -> None:
    raising_on_marker(monkeypatch)
    lines = LOG.read_text(encoding="utf-8").splitlines()
    other = "http://10.0.0.9:11434"
    bad = RaisingSource()
    log = ListLog(lines[:10], ["x " + MARKER], lines[10:])
    s = settings(more_hosts=(other,), interval_s=0.05)
    engine = Engine(
        s,
        EngineSources(
            servers={HOST: FakeSource(snapshot_at(step_index("spills"))), other: bad},
            log=log,
            gpu=FixedGpuSource(),
            procs=FixedProcSource(),
        ),
    )  # type: ignore[arg-type]
    notices: list[Notice] = []
    engine.on_notice(notices.append)
    steps: list[Step] = []
    engine.subscribe(steps.append)
    task = asyncio.ensure_future(engine.run())
    deadline = asyncio.get_running_loop().time() + 10
    while (
        bad.calls < 3 or engine.states[HOST].log.lines < len(lines) + 1
    ) and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.02)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await engine.aclose()
    assert bad.calls >= 3
    texts = sorted(n.text for n in notices)
    assert texts == ["log parser error: ValueError: boom", "ollama source failed: RuntimeError: bug"]
    state = engine.states[HOST]
    assert state.models and state.gpu is not None and state.log.lines == len(lines) + 1 and state.log.recent
    assert steps and engine.apply_steps == len(steps) and log.closed
    assert engine.alert_evaluations <= 2 * engine.apply_steps


async def test_pause_stops_the_polls_and_wake_polls_now() -> None:
    source = FakeSource(snapshot_at(0))
    engine = Engine(settings(interval_s=30.0), EngineSources(servers={HOST: source}))
    task = asyncio.ensure_future(engine.run())
    await asyncio.sleep(0.1)
    assert source.calls == 1
    engine.wake()
    await asyncio.sleep(0.1)
    assert source.calls == 2 and engine.apply_steps == 2
    engine.paused = True
    engine.wake()
    await asyncio.sleep(0.1)
    assert source.calls == 2
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await engine.aclose()


async def test_a_down_server_is_data_not_a_failure() -> None:
    engine = Engine(settings(), EngineSources(servers={HOST: FakeSource(down_snapshot(5.0))}))
    notices: list[Notice] = []
    engine.on_notice(notices.append)
    [state] = await engine.step()
    assert not state.reachable and notices == []


async def test_a_loop_that_breaks_is_reported_and_the_others_go_on() -> None:
    source = FakeSource(snapshot_at(step_index("spills")))
    engine = Engine(
        settings(interval_s=0.05), EngineSources(servers={HOST: source}, gpu=FixedGpuSource(), procs=FixedProcSource())
    )
    notices: list[Notice] = []
    engine.on_notice(notices.append)

    def broken(*_: Any) -> None:
        raise KeyError("bug")

    engine.stage_gpu = broken  # type: ignore[method-assign]
    task = asyncio.ensure_future(engine.run())
    await asyncio.sleep(0.4)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await engine.aclose()
    assert [n.text for n in notices] == ["a polling loop stopped: KeyError: 'bug'"]
    assert source.calls >= 3 and engine.states[HOST].models  # the server is still polled


async def test_a_server_view_round_is_staged_for_that_server() -> None:
    engine = Engine(settings(demo=True), EngineSources(servers={HOST: FakeSource(snapshot_at(0))}))
    await engine.sample_server_info(HOST)
    assert engine.pending[HOST]
    engine.apply_step()
    health = engine.states[HOST].server.health
    assert health is not None and "stand-in" in (health.error or "")
    assert engine.states[HOST].server.pulled is None  # a fake source is no client: no pulled models read
    await engine.sample_server_info("http://elsewhere:1")  # not watched: nothing
    assert not engine.pending
    await engine.aclose()
