"""Scenario tests: the real app (``make_app`` + ``App.run_test``, a real ``OllamaClient``) against the
stand-in server process and a real log file the test appends real corpus lines to.

* A num_ctx increase (``POST /api/generate`` with ``options.num_ctx``, as the what-if screen sends
  it) on a stand-in with a 5 GiB VRAM budget (``--vram-bytes``) spills like Ollama does; within two
  refreshes the app raises ``spill`` with the cause and fixes that ``kvtop.model.kv`` computes for
  the GPU's free memory (a GPU source whose total is the budget and whose used memory is what the
  stand-in's ``/api/ps`` puts in VRAM). ``POST /_standin/env {"OLLAMA_KV_CACHE_TYPE": "q8_0"}``
  (a restart with a q8_0 cache) then clears it.
* Truncation (corpus 015's ``truncating input prompt`` lines), KV type fallback (corpus 033's
  ``server config`` with ``OLLAMA_KV_CACHE_TYPE:q8_0`` and corpus 004's runner command line without
  a cache type) and eviction (corpus 050) appended to the log while the app runs.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from types import MappingProxyType
from typing import Any

import httpx
import pytest

from kvtop.config import Settings
from kvtop.demo.scenario_file import load_scenario
from kvtop.demo.scenario import model_blob
from kvtop.model import kv
from kvtop.model.alerts import Alert
from kvtop.model.gpu_snapshots import GpuDevice, GpuProcess, GpuSnapshot, ProcSnapshot, ProcessInfo, RunnerProcess
from kvtop.ui.app import KvtopApp, make_app
from kvtop.ui.messages import GpuSampled, SnapshotReceived
from tests.fakes.gpu_sources import FIXED_SYSTEM
from tests.integration.test_app_live import until
from tests.integration.test_check_log import restamped
from tests.standin import BUNDLED, Standin, running
from tests.unit.test_alerts import CONFIG_Q8_FA, corpus_line, spawn_line

Q8 = "qwen3:1.7b-q8_0"
GiB = 1024**3
VRAM = 5 * GiB
"""The stand-in's GPU for Ollama (--vram-bytes) and the fake GPU's total: 5 GiB."""
RUNNER_PID = 4242
SIZE_4096 = 2_754_892_672  # the bundled scenario's qwen3:1.7b-q8_0 at num_ctx 4096 (weights + 448 MiB KV + compute)


def scenario(tmp_path: Path, num_ctx: int = 4096, size: int = SIZE_4096) -> tuple[Path, str]:
    """The bundled catalog with one step: qwen3:1.7b-q8_0 at ``num_ctx``, all on the GPU; and its blob."""
    data = json.loads(BUNDLED.read_text(encoding="utf-8"))
    data["steps"] = [
        {
            "at_s": 0,
            "label": f"q8 at {num_ctx}",
            "loaded": [{"model": Q8, "context_length": num_ctx, "size": size, "size_vram": size, "expires_in_s": 300}],
        }
    ]
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path, model_blob(load_scenario(path).models[Q8])


class BudgetGpu:
    """One GPU of ``VRAM`` bytes whose used memory is what the stand-in's ``/api/ps`` holds in VRAM,
    all of it by the model's runner (PID ``RUNNER_PID``): free = total − Σ size_vram."""

    def __init__(self, url: str) -> None:
        self.client = httpx.AsyncClient(base_url=url, timeout=2.0, trust_env=False)

    async def sample(self) -> GpuSnapshot:
        models = (await self.client.get("/api/ps")).json()["models"]
        used = sum(m["size_vram"] for m in models)
        device = GpuDevice(
            0,
            name="NVIDIA test GPU",
            uuid="GPU-00000000-0000-0000-0000-000000000000",
            memory_total_bytes=VRAM,
            memory_used_bytes=used,
            memory_free_bytes=VRAM - used,
            processes=(GpuProcess(RUNNER_PID, used),),
        )
        return GpuSnapshot(
            taken_at=time.time(),
            status="GPU telemetry: NVML, 1 GPU",
            ok=True,
            backend="nvml",
            devices=(device,),
            system=FIXED_SYSTEM,
        )

    async def aclose(self) -> None:
        await self.client.aclose()


class RunnerProcs:
    """The process table: one llama-server runner for ``blob``."""

    def __init__(self, blob: str) -> None:
        self.runner = RunnerProcess(RUNNER_PID, "llama-server", "C", blob=blob, port=40123, ctx_size=4096, parallel=1)

    async def sample(self, gpu_pids: Any = ()) -> ProcSnapshot:
        info = ProcessInfo(RUNNER_PID, user="ollama", name="llama-server", cmdline=("llama-server",))
        return ProcSnapshot(
            taken_at=time.time(), runners=(self.runner,), processes=MappingProxyType({RUNNER_PID: info})
        )

    async def aclose(self) -> None:
        pass


def spill_of(app: KvtopApp) -> Alert | None:
    return next((a for a in app.state.alerts if a.kind == "spill"), None)


def alerts_of(app: KvtopApp, kind: str) -> list[Alert]:
    return [a for a in app.state.alerts if a.kind == kind]


@pytest.fixture
def log(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "server.log"
    path.write_text("", encoding="utf-8")
    yield path


def append(log: Path, lines: list[str]) -> None:
    with log.open("a", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))


def app_for(server: Standin, log: Path, blob: str | None = None) -> KvtopApp:
    gpu = BudgetGpu(server.url) if blob is not None else None
    procs = RunnerProcs(blob) if blob is not None else None
    from tests.fakes.gpu_sources import FixedGpuSource, FixedProcSource

    return make_app(
        Settings(host_url=server.url, interval_s=0.25, timeout_s=2.0, log_spec=f"file:{log}"),
        gpu_source=gpu or FixedGpuSource(),
        proc_source=procs or FixedProcSource(),
    )


async def test_num_ctx_increase_spills_and_q8_0_clears_it(tmp_path: Path, log: Path) -> None:
    path, blob = scenario(tmp_path)
    layout = kv.layout_from_model_info(load_scenario(path).models[Q8].model_info)
    assert isinstance(layout, kv.KVLayout)
    bpt_f16, bpt_q8 = kv.bytes_per_token(layout, "f16", "f16"), kv.bytes_per_token(layout, "q8_0", "q8_0")
    assert (bpt_f16, bpt_q8) == (114_688, 60_928)
    with running(["--manual", "--scenario", str(path), "--vram-bytes", str(VRAM)]) as server:
        seen: list[Any] = []
        app = app_for(server, log, blob)
        async with app.run_test(size=(160, 40), message_hook=seen.append) as pilot:
            await until(
                pilot,
                lambda: (
                    len(app.state.models) == 1
                    and app.state.gpu is not None
                    and app.state.models[0].memory.kv.value is not None
                ),
            )
            assert app.state.alerts == ()

            response = server.client.post(
                "/api/generate", json={"model": Q8, "prompt": "", "options": {"num_ctx": 32768}}
            )
            assert response.status_code == 200 and response.json()["done_reason"] == "load"
            size = SIZE_4096 + bpt_f16 * (32768 - 4096)
            assert server.ps()[0]["size"] == size == 6_043_227_008
            assert server.ps()[0]["size_vram"] == VRAM  # capped to the budget: the rest is in system RAM
            deficit = size - VRAM

            mark = len(seen)
            kv_now = kv.kv_allocation(layout, 32768, 1, "f16").total_bytes
            kv_budget = kv_now - deficit  # what keeps the model on the GPU, the other buffers unchanged
            best = kv.max_num_ctx(layout, kv_budget, 1, "f16", "f16", flash_attention=True)
            assert kv.kv_allocation(layout, best, 1, "f16").total_bytes <= kv_budget
            assert kv.kv_allocation(layout, best + 256, 1, "f16").total_bytes > kv_budget
            q8 = kv.kv_allocation(layout, 32768, 1, "q8_0", flash_attention=True).total_bytes
            q4 = kv.kv_allocation(layout, 32768, 1, "q4_0", flash_attention=True).total_bytes
            assert q4 < q8 <= kv_budget

            def fixes_ready() -> bool:
                a = spill_of(app)
                return a is not None and a.fixes[:1] != () and a.fixes[0].action == f"num_ctx {best}"

            await until(pilot, fixes_ready)
            polls = sum(isinstance(m, SnapshotReceived) for m in seen[mark:])
            gpu_samples = sum(isinstance(m, GpuSampled) for m in seen[mark:])
            assert polls <= 2 and gpu_samples <= 2, (polls, gpu_samples)  # within two refreshes

            alert = spill_of(app)
            assert alert is not None and alert.severity == "critical" and alert.model == Q8
            pct = round(deficit / size * 100)
            assert alert.message == (
                f"{pct}% of 5.6 GiB in system RAM (643 MiB); KV cache ~3.5 GiB at num_ctx 32768 × 1 slot, f16;"
                " fixes sized for 5.0 GiB of VRAM: 0 B free on GPU 0 + 5.0 GiB it holds now"
            )
            assert [(f.action, f.fits) for f in alert.fixes] == [
                (f"num_ctx {best}", True),
                ("OLLAMA_KV_CACHE_TYPE=q8_0", True),
                ("OLLAMA_KV_CACHE_TYPE=q4_0", True),
            ]
            new = kv.kv_allocation(layout, best, 1, "f16").total_bytes
            assert alert.fixes[0].detail == f"KV ~{_gib(new)} (~−{_mib(kv_now - new)})"
            assert alert.fixes[1].detail == f"KV ~{_gib(q8)} (~−{_gib(kv_now - q8)})"
            assert alert.fixes[2].detail == f"KV ~{_mib(q4)} (~−{_gib(kv_now - q4)})"

            restart = server.client.post("/_standin/env", json={"OLLAMA_KV_CACHE_TYPE": "q8_0"})
            assert restart.status_code == 200 and restart.json()["kv_cache_type"] == "q8_0"
            row = server.ps()[0]
            assert row["size"] == size - 32768 * (bpt_f16 - bpt_q8) == row["size_vram"]  # it fits now
            mark = len(seen)
            await until(pilot, lambda: spill_of(app) is None)
            assert sum(isinstance(m, SnapshotReceived) for m in seen[mark:]) <= 2
            assert app.state.models[0].processor == "100% GPU"


def _gib(n: int) -> str:
    return f"{n / GiB:.1f} GiB"


def _mib(n: int) -> str:
    value = n / 1024**2
    return f"{value:.0f} MiB" if value >= 100 else f"{value:.1f} MiB"


async def test_truncation_from_real_lines(tmp_path: Path, log: Path) -> None:
    path, _ = scenario(tmp_path, 512, 2_300_000_000)
    with running(["--manual", "--scenario", str(path)]) as server:
        app = app_for(server, log)
        async with app.run_test(size=(160, 40)) as pilot:
            await until(pilot, lambda: len(app.state.models) == 1 and app.state.log.source is not None)
            assert alerts_of(app, "prompt_truncated") == []
            append(log, restamped("015"))
            await until(pilot, lambda: bool(alerts_of(app, "prompt_truncated")))
            (alert,) = alerts_of(app, "prompt_truncated")
            assert alert.model == Q8 and alert.severity == "warning"
            assert alert.message.startswith(
                "4 prompts truncated in the last 15 min (latest: a 587-token prompt cut to 512, limit 512, keep 4)"
            )
            assert [f.action for f in alert.fixes] == ["num_ctx 1024"]  # the longest, 617 tokens, to a power of two


async def test_a_truncation_alert_leaves_the_banner_when_its_model_unloads(tmp_path: Path, log: Path) -> None:
    """Calm: corpus 015's truncations printed by the model's own runner (its spawn line first) raise
    ``prompt_truncated``; once the model is unloaded (``keep_alive: 0``, as ``ollama stop``), the
    alert keeps its model's name (the runner's weights blob, last seen in ``/api/ps``) and moves to
    ``past_alerts``: ``--once`` and JSON keep it, ``--check`` counts it, the banner no longer shows it."""
    from kvtop.ui.dashboard_text import alert_bar

    path, blob = scenario(tmp_path, 512, 2_300_000_000)
    with running(["--manual", "--scenario", str(path)]) as server:
        app = app_for(server, log)
        async with app.run_test(size=(160, 40)) as pilot:
            await until(pilot, lambda: len(app.state.models) == 1 and app.state.log.source is not None)
            append(log, [spawn_line(blob, 512), *restamped("015")])
            await until(pilot, lambda: bool(alerts_of(app, "prompt_truncated")))
            assert alerts_of(app, "prompt_truncated")[0].model == Q8
            assert "prompt truncated" in alert_bar(app.state, {}).plain
            httpx.post(f"{server.url}/api/generate", json={"model": Q8, "keep_alive": 0}, timeout=5).raise_for_status()
            await until(pilot, lambda: not app.state.models and bool(app.state.past_alerts))
            assert alerts_of(app, "prompt_truncated") == []
            (past,) = app.state.past_alerts
            assert past.kind == "prompt_truncated" and past.model == Q8
            assert "prompt truncated" not in alert_bar(app.state, {}).plain


async def test_kv_type_fallback_from_real_lines(tmp_path: Path, log: Path) -> None:
    path, blob = scenario(tmp_path, 2048, SIZE_4096 - 2048 * 114_688)
    with running(["--manual", "--scenario", str(path)]) as server:
        app = app_for(server, log)
        async with app.run_test(size=(160, 40)) as pilot:
            await until(pilot, lambda: len(app.state.models) == 1 and app.state.log.source is not None)
            # the server config asks for q8_0 with flash attention; the runner it starts has neither flag
            append(log, [corpus_line(CONFIG_Q8_FA, "server config"), spawn_line(blob, 2048)])
            await until(pilot, lambda: bool(alerts_of(app, "kv_type_not_applied")))
            (alert,) = alerts_of(app, "kv_type_not_applied")
            assert alert.model == Q8 and app.state.models[0].load is not None
            assert alert.message == (
                "KV cache f16 allocated, q8_0 requested (OLLAMA_KV_CACHE_TYPE=q8_0 (server"
                " config)): flash attention is off (no --flash-attn on the runner command line)"
            )
            assert app.state.models[0].kv_type.value == "f16"  # the row still shows the f16 it runs with


async def test_eviction_from_real_lines(tmp_path: Path, log: Path) -> None:
    path, blob = scenario(tmp_path)
    with running(["--manual", "--scenario", str(path)]) as server:
        app = app_for(server, log)
        async with app.run_test(size=(160, 40)) as pilot:
            await until(pilot, lambda: len(app.state.models) == 1 and app.state.log.source is not None)
            lines = [re.sub(r"sha256-[0-9a-f]{64}", blob, line) for line in restamped("050")]
            append(log, lines)
            await until(pilot, lambda: bool(alerts_of(app, "eviction")))
            (alert,) = alerts_of(app, "eviction")
            assert alert.model == Q8 and alert.severity == "warning"
            assert (
                alert.message
                == f"1 eviction in the last 15 min: {Q8} unloaded to make room (found an idle runner to unload)"
            )
