"""The dashboard's apply step, counted (not timed): however many messages arrive, each server's
state is folded, its alerts evaluated and the screen repainted about once per interval.

Real components: the stand-in Ollama server on 127.0.0.1, a real log file appended with real
llama-server lines (a recorded gemma3 load, repeated), the real app under Pilot.
"""

from __future__ import annotations

import time
from pathlib import Path

from kvtop.config import Settings
from kvtop.sources.recorder import Recorder, recording_header
from kvtop.sources.recording import read_recording
from kvtop.ui.app import KvtopApp, make_app
from kvtop.ui.widgets.models_table import ModelsTable
from tests.fakes.gpu_sources import FixedGpuSource, FixedProcSource
from tests.integration.test_app_live import rows, until
from tests.standin import BUNDLED, running

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
LOAD_LOG = LOGS / "llama-server-runs" / "gemma3-iswa-q8_0-fa-on-np2.log"


def _record_to(app: KvtopApp, path: Path) -> Recorder:
    header = recording_header(
        hosts=app.hosts,
        log_spec=app.settings.log_spec,
        gpu=app.gpu_source is not None,
        demo=False,
        naive_tz=app.state.naive_tz,
        thresholds=app.state.thresholds,
        started_at=0.0,
    )
    rec = Recorder.create(path, header)
    app.recorder = rec
    return rec


async def test_one_apply_and_one_evaluation_per_poll_although_gpu_and_server_both_report(tmp_path: Path) -> None:
    """The GPU sample starts with the server's poll: both are applied in one step, so the apply
    steps are no more than the polls (they were polls + GPU samples), one evaluation each."""
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        server.goto(4)  # three models, one spilled: alerts with fixes to evaluate
        app = make_app(
            Settings(host_url=server.url, interval_s=0.25, timeout_s=2.0, log_spec="none"),
            gpu_source=FixedGpuSource(),
            proc_source=FixedProcSource(),
        )
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: len(rows(app)) == 3)
            rec = _record_to(app, tmp_path / "r.jsonl")
            steps0, evals0 = app.apply_steps, app.alert_evaluations
            await pilot.pause(3.0)
            app.recorder = None
            rec.close()
            steps, evals = app.apply_steps - steps0, app.alert_evaluations - evals0
    kinds = [r.kind for r in read_recording(tmp_path / "r.jsonl").records]
    polls, gpus, applies = kinds.count("ollama"), kinds.count("gpu"), kinds.count("apply")
    assert polls >= 6 and gpus >= 6  # both sources kept reporting at 0.25 s
    assert applies == steps
    assert steps <= polls + 1, (steps, polls, gpus)  # not polls + GPU samples
    assert evals <= steps


async def test_polls_of_an_unchanged_server_derive_no_row_again() -> None:
    """Three models that stay as they are: after the first rows, polls at 0.25 s (each a new
    snapshot, with the GPU and process samples) give every row again from the memo: the source
    ladder runs for no row, and the rows stay the same objects (the memory map is not redone);
    the repaints count the alerts panel's lines and fit the table's columns again only when what
    they depend on changed (the VRAM sparklines move at most once in the window: 7.5 s a cell)."""
    from kvtop.model import state as state_module

    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        server.goto(4)
        app = make_app(
            Settings(host_url=server.url, interval_s=0.25, timeout_s=2.0, log_spec="none"),
            gpu_source=FixedGpuSource(),
            proc_source=FixedProcSource(),
        )
        async with app.run_test(size=(160, 48)) as pilot:
            await until(
                pilot,
                lambda: (
                    len(rows(app)) == 3 and app.state.gpu is not None and all(v.model_blob for v in app.state.models)
                ),
            )
            await pilot.pause(0.6)  # the /api/tags answer may land a poll after the first rows
            memo = state_module.ROW_MEMO
            table = app.query_one(ModelsTable)
            assert app.dashboard.panels.shown_panels()["alerts"]
            derived0, reused0, steps0, models = memo.derived, memo.reused, app.apply_steps, app.state.models
            fits0, measures0 = table.column_fits, app.dashboard.panels.alerts_measures
            await pilot.pause(2.0)
            derived, reused, steps = memo.derived - derived0, memo.reused - reused0, app.apply_steps - steps0
            fits, measures = table.column_fits - fits0, app.dashboard.panels.alerts_measures - measures0
            same_rows = app.state.models is models
    assert steps >= 4, steps
    assert fits <= 1 and measures == 0, (fits, measures, steps)
    assert reused >= 3 * 4, reused  # three rows per poll
    assert derived == 0, derived
    assert same_rows


async def test_a_burst_of_ten_thousand_log_lines_is_applied_a_bounded_number_of_times(tmp_path: Path) -> None:
    """10,000+ real runner lines (a real load, repeated) appended at once: the log worker's
    batches are merged, and the apply steps stay within the intervals that passed; every line is
    counted and every load is grouped."""
    load = [x for x in LOAD_LOG.read_text(encoding="utf-8").splitlines() if not x.startswith("#")]
    repeats = 10_000 // len(load) + 1
    log = tmp_path / "server.log"
    log.write_text("", encoding="utf-8")
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        server.goto(1)
        interval_s = 0.5
        app = make_app(Settings(host_url=server.url, interval_s=interval_s, timeout_s=2.0, log_spec=f"file:{log}"))
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: len(rows(app)) == 1)
            await pilot.pause(0.3)
            steps0 = app.apply_steps
            t0 = time.monotonic()
            with log.open("a", encoding="utf-8") as f:
                for _ in range(repeats):
                    f.write("\n".join(load) + "\n")
            total = repeats * len(load)
            await until(pilot, lambda: app.state.log.lines + app.state.log.dropped_lines == total, timeout_s=60)
            elapsed_s = time.monotonic() - t0
            steps = app.apply_steps - steps0
            assert total >= 10_000
            assert app.state.log.dropped_lines == 0
            assert len(app.state.log.loads) >= 16  # grouped, kept to the newest loads when trimmed
            # one step per interval (polls), plus at most one for the log between two polls
            assert steps <= 2 * (elapsed_s / interval_s) + 3, (steps, elapsed_s)
            assert app.alert_evaluations <= app.apply_steps


async def test_a_recording_that_promises_apply_records_but_has_none_still_replays(tmp_path: Path) -> None:
    """A header with ``apply_steps`` and no ``apply`` record (cut, or written by another tool):
    the records are applied anyway, at most ``REPLAY_PENDING_MAX`` at a time and at the end;
    nothing piles up."""
    from kvtop.model.alerts import Thresholds
    from kvtop.sources.recording import resolve_recording
    from kvtop.engine import REPLAY_PENDING_MAX

    demo = read_recording(resolve_recording("demo"))
    polls = [r.ollama for r in demo.records if r.kind == "ollama" and r.ollama is not None]
    header = recording_header(
        hosts=(demo.header.host_url,),
        log_spec="none",
        gpu=False,
        demo=False,
        naive_tz=demo.header.naive_tz,
        thresholds=Thresholds(),
        started_at=polls[0].taken_at,
    )
    assert header["apply_steps"] is True
    path = tmp_path / "no-apply.jsonl"
    clock = iter(p.taken_at for p in polls)
    rec = Recorder.create(path, header, clock=lambda: next(clock))
    for snap in polls:
        rec.ollama(snap)
    rec.close()
    assert len(polls) > REPLAY_PENDING_MAX
    app = make_app(Settings(host_url="http://unused:1", log_spec="none"), replay=read_recording(path))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("J", "J", "J", "J", "J")
        await until(pilot, lambda: app.replay is not None and app.replay.player.at_end, timeout_s=20)
        await until(pilot, lambda: not app._pending)
        assert app.state.ollama == polls[-1]
        assert app.apply_steps >= len(polls) // (REPLAY_PENDING_MAX + 1)
