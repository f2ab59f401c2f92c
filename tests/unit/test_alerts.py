"""model.alerts: every rule fires on realistic state and stays quiet without its cause; fixes are
re-checked with the KV arithmetic; since, ordering, JSON, exit codes and thresholds.

State is built the way the app builds it: /api/ps and /api/show bodies of the bundled demo
scenario (or of a variant with other loaded rows) through the real client parsers and
``model.fold_alerts.apply``; server log lines from the corpus (tests/fixtures/logs) and real llama-server
stderr (tests/fixtures/llama_server) through ``logparse.parser.parse_lines`` and
``state.fold_log_with_alerts``; GPU and process samples through the real sources with fakes at their
boundaries (tests/fakes/scenario.py). Where the corpus has no line for a rule, the line is
written in the exact slog format docs/ollama-internals.md quotes, and the test says so.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from types import MappingProxyType, SimpleNamespace
from typing import Any

import pytest

from kvtop.demo.scenario_file import parse_scenario
from kvtop.demo.api_bodies import ps_body, show_body, tags_body
from kvtop.demo.scenario import model_blob
from kvtop.logparse.parser import parse_lines
from kvtop.model import kv
from kvtop.model.alerts import DEFAULT_THRESHOLDS, KINDS, Alert, Fix, Thresholds, alert_json, evaluate, exit_code
from kvtop.model.gpu_snapshots import GpuSnapshot, ProcSnapshot
from kvtop.model.snapshots import OllamaSnapshot
from kvtop.model.views import AppState, ModelView
from kvtop.model.fold_alerts import fold_with_alerts, fold_gpu_with_alerts, fold_log_with_alerts
from kvtop.sources.gpu import GpuSource
from kvtop.sources.ollama_decode import parse_ps, parse_show, parse_tags
from tests.fakes.nvml import FakeGpu, FakeNvml, GiB, MiB
from tests.fakes.scenario import (
    GEMMA_PID,
    Q4_PID,
    Q8_PID,
    TRAINER_PID,
    XORG_PID,
    demo_models,
    shared_nvml,
    shared_processes,
    sources,
)
from tests.fakes.scenario import TAKEN_AT as GPU_TAKEN_AT
from tests.llama_fixture import ollama_spawn_line
from tests.standin import BUNDLED
from tests.ui.fakes import HOST, TAKEN_AT, down_snapshot, snapshot_at, step_index

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
LOGS = FIXTURES / "logs"
LLAMA = FIXTURES / "llama_server"
Q8 = "qwen3:1.7b-q8_0"
Q4 = "qwen3:1.7b-q4_K_M"
GEMMA = "gemma4:latest"


# --------------------------------------------------------------------------------------------
# Building realistic state


def _utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> float:
    return datetime(year, month, day, hour, minute, second, tzinfo=timezone.utc).timestamp()


def corpus_lines(stem: str) -> list[str]:
    (path,) = LOGS.glob(f"{stem}-*.log")
    return path.read_text(encoding="utf-8", errors="replace").splitlines()


def corpus_line(stem: str, contains: str) -> str:
    return next(line for line in corpus_lines(stem) if contains in line)


TINY = "tiny:latest"
TINY_INFO = {  # tests/llama_fixture.py TinyLlama(): the model of the real llama-server runs in fixtures/llama_server
    "general.architecture": "llama",
    "llama.block_count": 4,
    "llama.embedding_length": 128,
    "llama.attention.head_count": 4,
    "llama.attention.head_count_kv": 2,
    "llama.context_length": 16384,
    "llama.feed_forward_length": 256,
}


def _scenario_data(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The bundled scenario's catalog plus the tiny llama of fixtures/llama_server, with ``rows`` loaded."""
    data: dict[str, Any] = json.loads(BUNDLED.read_text(encoding="utf-8"))
    template = data["models"][Q8]
    tiny = {**template, "model_info": TINY_INFO, "file_size": 1_048_576, "note": "tiny test model", "digest": "7" * 64}
    tiny["details"] = {**template["details"], "family": "llama", "families": ["llama"], "parameter_size": "1M"}
    data["models"][TINY] = tiny
    data["steps"] = [{"at_s": 0, "label": "test rows", "loaded": list(rows)}]
    return data


def blob(name: str) -> str:
    """The weights blob the stand-in's /api/show FROM line names for a catalog model."""
    return model_blob(parse_scenario(_scenario_data([])).models[name])


def ps_snapshot(rows: Sequence[dict[str, Any]], *, taken_at: float = TAKEN_AT) -> OllamaSnapshot:
    """What OllamaClient would produce for the bundled catalog with these /api/ps rows
    (``{"model", "context_length", "size", "size_vram", "expires_in_s"}``), as fakes.snapshot_at."""
    sc = parse_scenario(_scenario_data(rows))
    body = ps_body(sc, sc.steps[0], int(taken_at * 1e9), tz=timezone.utc)
    models = parse_ps(body)
    shows = {m.digest: parse_show(show_body(sc.models[m.name], True), digest=m.digest, name=m.name) for m in models}
    tags = {d: t for d, t in parse_tags(tags_body(sc)).items() if d in shows}
    return OllamaSnapshot(
        host_url=HOST,
        taken_at=taken_at,
        reachable=True,
        version=sc.version,
        latency_s=0.004,
        models=models,
        shows=MappingProxyType(shows),
        tags=MappingProxyType(tags),
    )


def row(model: str, ctx: int, size: int, size_vram: int | None = None) -> dict[str, Any]:
    return {
        "model": model,
        "context_length": ctx,
        "size": size,
        "size_vram": size if size_vram is None else size_vram,
        "expires_in_s": 300,
    }


def spawn_line(
    model_blob_name: str, num_ctx: int, parallel: int = 1, when: str = "2024-07-24T16:07:51.813+02:00"
) -> str:
    """Corpus 004's real ``starting llama server`` line (journald prefix dropped) for another blob,
    context and slot count (Ollama passes num_ctx × parallel as --ctx-size, docs/ollama-internals.md §3.3)."""
    line = corpus_line("004", "starting llama server")
    line = line[line.index("time=") :]
    line = re.sub(r"sha256-[0-9a-f]{64}", model_blob_name, line)
    line = line.replace("--ctx-size 2048", f"--ctx-size {num_ctx * parallel}")
    line = line.replace("--parallel 1", f"--parallel {parallel}")
    return re.sub(r"^time=\S+", f"time={when}", line)


def llama_server_run(name: str, model_blob_name: str, when: str = "2026-11-29T12:00:00.000Z") -> list[str]:
    """A captured llama-server run (tests/fixtures/llama_server) as Ollama v0.30+ logs it for
    ``model_blob_name``: its own spawn line, then the runner's stderr."""
    argv = (LLAMA / f"{name}.cmd").read_text(encoding="utf-8").split()
    old = next(a for a in argv if "blobs/sha256-" in a)
    new = f"/usr/share/ollama/.ollama/models/blobs/{model_blob_name}"
    stderr = (LLAMA / f"{name}.log").read_text(encoding="utf-8").replace(old, new)
    return [ollama_spawn_line([new if a == old else a for a in argv], when)] + stderr.splitlines()


def with_log(
    state: AppState,
    lines: Sequence[str],
    *,
    ok: bool = True,
    status: str | None = None,
    default_year: int | None = None,
) -> AppState:
    events = parse_lines(lines, default_year=default_year)
    return fold_log_with_alerts(
        state, events, source="file:/var/log/ollama/server.log", status=status, ok=ok, lines=len(lines)
    )


def state_of(snap: OllamaSnapshot, lines: Sequence[str] = (), **kw: Any) -> AppState:
    state = fold_with_alerts(AppState(HOST), snap)
    return with_log(state, lines, **kw) if lines or kw else state


def kinds(alerts: Sequence[Alert]) -> list[tuple[str, str | None]]:
    return [(a.kind, a.model) for a in alerts]


def only(alerts: Sequence[Alert], kind: str, model: str | None = None) -> Alert:
    found = [a for a in alerts if a.kind == kind and (model is None or a.model == model)]
    assert len(found) == 1, kinds(alerts)
    return found[0]


def fix(alert: Alert, action_start: str) -> Fix:
    found = [f for f in alert.fixes if f.action.startswith(action_start)]
    assert len(found) == 1, [f.action for f in alert.fixes]
    return found[0]


def view(state: AppState, name: str) -> ModelView:
    return next(v for v in state.models if v.name == name)


def layout(state: AppState, name: str) -> kv.KVLayout:
    v = view(state, name)
    assert state.last_ok is not None
    lay = kv.layout_from_model_info(state.last_ok.shows[v.digest].model_info)
    assert isinstance(lay, kv.KVLayout)
    return lay


def kv_bytes(state: AppState, name: str, num_ctx: int, parallel: int = 1, cache_type: str = "f16") -> int:
    return kv.kv_allocation(layout(state, name), num_ctx, parallel, cache_type).total_bytes


def _number(text: str, prefix: str) -> int:
    m = re.search(re.escape(prefix) + r"(\d+)", text)
    assert m, text
    return int(m.group(1))


def gpu_state(state: AppState, tmp_path: Path, nvml: FakeNvml | None = None, *, swap_used: int = 256 * MiB) -> AppState:
    """The state with one GPU and process sample of the shared server (tests/fakes/scenario.py: the
    demo's three runners, a foreign trainer on GPU 0, Xorg on GPU 1), ``swap_used`` bytes of swap."""
    nvml = nvml or shared_nvml()
    _, proc_source = sources(nvml, shared_processes(demo_models()), tmp_path)
    gpu_source = GpuSource(
        nvml=nvml.module,
        sysfs_root=tmp_path,
        platform="linux",
        clock=lambda: GPU_TAKEN_AT,
        psutil_module=SimpleNamespace(
            virtual_memory=lambda: SimpleNamespace(total=64 * GiB, available=40 * GiB, used=22 * GiB),
            swap_memory=lambda: SimpleNamespace(total=8 * GiB, used=swap_used),
        ),
    )
    gpu: GpuSnapshot = gpu_source.sample_sync()
    procs: ProcSnapshot = proc_source.sample_sync(gpu.pids)
    return fold_gpu_with_alerts(state, gpu, procs)


SPILLS = step_index("spills")


def tight_nvml(free0: int, free1: int, *, xorg: int = 300 * MiB, q8_on_gpu: bool = True) -> FakeNvml:
    """The shared server's two GPUs (tests/fakes/scenario.py) with only ``free0`` / ``free1`` left."""
    q8 = [(Q8_PID, 6 * GiB + 128 * MiB)] if q8_on_gpu else []
    return FakeNvml(
        [
            FakeGpu(
                name="NVIDIA RTX A6000",
                total=48 * GiB,
                reserved=512 * MiB,
                used=48 * GiB - 512 * MiB - free0,
                compute=[(Q4_PID, 2 * GiB), (GEMMA_PID, 3 * GiB + 512 * MiB), (TRAINER_PID, 8 * GiB)],
            ),
            FakeGpu(
                name="NVIDIA GeForce RTX 4090",
                uuid="GPU-bbbbbbbb-0000-0000-0000-000000000000",
                bus_id="00000000:02:00.0",
                total=24 * GiB,
                reserved=300 * MiB,
                used=24 * GiB - 300 * MiB - free1,
                compute=[(GEMMA_PID, 1 * GiB + 768 * MiB), *q8],
                graphics=[(XORG_PID, xorg)],
            ),
        ]
    )


# the Ollama v0.5+ slog warning of docs/ollama-internals.md §3.2 (no corpus log has one), printed before the spawn
FALLBACK = (
    "time=2024-07-24T16:07:51.800+02:00 level=WARN source=server.go:226"
    ' msg="quantized kv cache requested but flash attention disabled" type=q8_0'
)
# docs/ollama-internals.md §3.4 / §4.4: `slog.Warn("requested context size too large for model", "num_ctx", …, "n_ctx_train", …)`
CLAMP = (
    "time=2026-11-18T11:05:00.000Z level=WARN source=llama_server.go:176"
    ' msg="requested context size too large for model" num_ctx=65536 n_ctx_train=40960'
)
SPAWN_TIME = _utc(2024, 7, 24, 14, 7, 51) + 0.813  # corpus 004's spawn line, 16:07:51.813+02:00
RUN_TIME = _utc(2026, 11, 29, 12, 0)  # llama_server_run's spawn line


# --------------------------------------------------------------------------------------------
# spill


def test_demo_spill_names_the_cause_and_computes_the_fixes() -> None:
    state = state_of(snapshot_at(SPILLS))
    spill = only(evaluate(state), "spill")
    assert (spill.model, spill.severity, spill.since, spill.key) == (GEMMA, "critical", TAKEN_AT, f"spill:{GEMMA}")
    assert spill.message.startswith(
        "19% of 6.1 GiB in system RAM (1.2 GiB); KV cache ~104 MiB at num_ctx 4096 × 1 slot, f16;"
    )
    assert "the 5.0 GiB it holds in VRAM now (no GPU telemetry for its runner)" in spill.message
    gemma, q8 = view(state, GEMMA), view(state, Q8)
    assert gemma.size_bytes is not None and gemma.size_vram_bytes is not None and q8.memory.kv.value is not None
    short = gemma.size_bytes - gemma.size_vram_bytes
    # the cache is not what overflows: without any KV, weights and compute still exceed size_vram
    assert fix(spill, "lower num_ctx").fits is False
    # what fits: the smallest other model's VRAM, or a smaller context for the other model with the largest cache
    unload = fix(spill, "unload")
    assert unload.action == f"unload {Q4}" and unload.fits is True and "(if it shares the GPU)" in unload.detail
    other = fix(spill, "num_ctx")
    n = _number(other.action, "num_ctx ")
    assert other.action == f"num_ctx {n} for {Q8}" and other.fits is True
    assert kv_bytes(state, Q8, n) <= q8.memory.kv.value - short < kv_bytes(state, Q8, n + 256)
    assert [f.fits for f in spill.fixes] == [True, True, False]  # fitting fixes first


@pytest.mark.parametrize(
    ("case", "lines", "rows", "expected"),
    [
        ("partial: size_vram < size", [], [row(Q8, 32768, 6_106_141_568, 4_500_000_000)], [Q8]),
        ("100% GPU", [], [row(Q8, 32768, 6_106_141_568)], []),
        ("100% CPU, nothing says there is a GPU", [], [row(Q8, 4096, 2_754_892_672, 0)], []),
        ("the runner log: 29/37 layers, KV on the CPU (corpus 032)", "spawn+032", [row(Q8, 4096, 2_754_892_672)], [Q8]),
        (
            "the runner log: every layer on the GPU (real llama-server run, CPU backend: no GPU at all)",
            "tiny-run",
            [row(TINY, 2048, 5_000_000, 0)],
            [],
        ),
    ],
)
def test_spill_fires_on_evidence_only(case: str, lines: Any, rows: list[dict[str, Any]], expected: list[str]) -> None:
    if lines == "spawn+032":
        log = [spawn_line(blob(Q8), 4096), *corpus_lines("032")]
    elif lines == "tiny-run":
        log = llama_server_run("f16-fa-on-np1", blob(TINY))
    else:
        log = []
    state = state_of(ps_snapshot(rows), log)
    found = [a.model for a in evaluate(state) if a.kind == "spill"]
    assert found == expected, case
    if lines == "spawn+032":
        assert view(state, Q8).load is not None
        message = only(evaluate(state), "spill").message
        assert "29/37 layers on the GPU" in message and "KV cache 112 MiB on the CPU" in message


@pytest.mark.parametrize("step", [1, 2, 3, step_index("unloaded; qwen3:1.7b-q8_0 reloads")])
def test_demo_steps_without_spill_raise_nothing(step: int) -> None:
    assert evaluate(state_of(snapshot_at(step))) == ()


def test_spill_fixes_recomputed_with_the_kv_arithmetic() -> None:
    size, vram = 6_106_141_568, 4_500_000_000  # qwen3 q8_0 at 32768 (seeds table) with 1.5 GiB in RAM
    state = state_of(ps_snapshot([row(Q8, 32768, size, vram)]))
    spill = only(evaluate(state), "spill", Q8)
    kv_now = view(state, Q8).memory.kv.value
    assert kv_now == kv_bytes(state, Q8, 32768)
    budget = kv_now - (size - vram)  # budget = size_vram: the cache may take what it has minus the shortfall
    assert spill.message.startswith(
        "26% of 5.7 GiB in system RAM (1.5 GiB); KV cache ~3.5 GiB at num_ctx 32768 × 1 slot, f16"
    )
    ctx_fix = spill.fixes[0]
    n = _number(ctx_fix.action, "num_ctx ")
    assert ctx_fix.action == f"num_ctx {n}" and ctx_fix.fits is True and n % 256 == 0
    assert kv_bytes(state, Q8, n) <= budget < kv_bytes(state, Q8, n + 256)
    assert ctx_fix.detail == "KV ~2.0 GiB (~−1.5 GiB)"
    assert ctx_fix.cost == f"prompts over {n} tokens are truncated (now 32768)"
    for cache_type in ("q8_0", "q4_0"):
        f = fix(spill, f"OLLAMA_KV_CACHE_TYPE={cache_type}")
        assert f.action == f"OLLAMA_KV_CACHE_TYPE={cache_type}" and f.fits is True
        assert kv_bytes(state, Q8, 32768, cache_type=cache_type) <= budget
        assert "needs flash attention" in f.cost and "quality" in f.cost
    assert not [f for f in spill.fixes if "PARALLEL" in f.action]  # one slot already


def test_fewer_slots_and_quantized_cache_with_a_smaller_context() -> None:
    kv_two = 2 * 3_758_096_384  # 32768 per slot × 2 slots, f16
    size, vram = 6_106_141_568 + 3_758_096_384, 6_106_141_568
    state = state_of(ps_snapshot([row(Q8, 32768, size, vram)]), [spawn_line(blob(Q8), 32768, parallel=2)])
    v = view(state, Q8)
    assert v.parallel.value == 2 and v.parallel.source == "allocated" and v.memory.kv.value == kv_two
    assert v.flash_attention.value == "disabled"  # an A/B1 command line without --flash-attn
    spill = only(evaluate(state), "spill", Q8)
    assert "KV cache ~7.0 GiB at num_ctx 32768 × 2 slots, f16" in spill.message
    budget = kv_two - (size - vram)
    slots = fix(spill, "OLLAMA_NUM_PARALLEL=")
    assert slots.action == "OLLAMA_NUM_PARALLEL=1" and slots.fits is True
    assert kv_bytes(state, Q8, 32768, 1) <= budget and "1 fewer concurrent request" in slots.cost
    both = fix(spill, "OLLAMA_KV_CACHE_TYPE=q8_0 and num_ctx")
    n = _number(both.action, "num_ctx ")
    assert kv_bytes(state, Q8, n, 2, "q8_0") <= budget < kv_bytes(state, Q8, n + 256, 2, "q8_0")
    assert "which is off now (no --flash-attn on the runner command line)" in both.cost
    assert fix(spill, "OLLAMA_KV_CACHE_TYPE=q4_0").action == "OLLAMA_KV_CACHE_TYPE=q4_0"  # fits at 32768 × 2


def test_spill_budget_is_free_gpu_memory_plus_what_the_model_holds(tmp_path: Path) -> None:
    state = gpu_state(state_of(snapshot_at(SPILLS)), tmp_path, tight_nvml(300 * MiB, 200 * MiB))
    alerts = evaluate(state)
    spill = only(alerts, "spill", GEMMA)
    assert "fixes sized for 5.5 GiB of VRAM: 500 MiB free on GPU 0, 1 + 5.0 GiB it holds now" in spill.message
    gemma, q8 = view(state, GEMMA), view(state, Q8)
    assert gemma.size_bytes is not None and gemma.size_vram_bytes is not None and q8.memory.kv.value is not None
    short = gemma.size_bytes - (gemma.size_vram_bytes + 500 * MiB)
    other = fix(spill, "num_ctx")
    n = _number(other.action, "num_ctx ")
    assert kv_bytes(state, Q8, n) <= q8.memory.kv.value - short < kv_bytes(state, Q8, n + 256)
    assert "if it shares" not in other.detail  # NVML shows both runners on GPU 1
    assert [a.model or a.key for a in alerts if a.kind == "gpu_nearly_full"] == [
        "gpu_nearly_full:gpu0",
        "gpu_nearly_full:gpu1",
    ]


def test_reload_is_the_fix_when_the_gpu_has_room_now(tmp_path: Path) -> None:
    state = gpu_state(state_of(snapshot_at(SPILLS)), tmp_path)  # 48.7 GiB free on the two GPUs
    spill = only(evaluate(state), "spill", GEMMA)
    assert [f.action for f in spill.fixes] == [f"reload {GEMMA}"] and spill.fixes[0].fits is True


def test_a_model_all_in_ram_on_a_gpu_machine_is_a_spill(tmp_path: Path) -> None:
    state = state_of(ps_snapshot([row(Q8, 4096, 2_754_892_672, 0)]))
    assert not [a for a in evaluate(state) if a.kind == "spill"]
    state = gpu_state(state, tmp_path, tight_nvml(20 * GiB, 12 * GiB, q8_on_gpu=False))  # its runner, on no GPU
    spill = only(evaluate(state), "spill", Q8)
    assert spill.message.startswith("all 2.6 GiB in system RAM although the machine has a GPU")
    assert fix(spill, "reload").fits is True  # 32 GiB free on the GPUs


def test_unreachable_server_hides_stale_model_alerts() -> None:
    ok = state_of(snapshot_at(SPILLS))
    down = fold_with_alerts(fold_with_alerts(ok, down_snapshot(TAKEN_AT + 5)), down_snapshot(TAKEN_AT + 10))
    alerts = evaluate(down)
    assert kinds(alerts) == [("server_unreachable", None)]
    assert alerts[0].message == (
        "Ollama at http://127.0.0.1:11434 does not answer: connection refused"
        " (http://127.0.0.1:11434); last good poll 10 s earlier (2 failed polls in a row)"
    )
    assert exit_code(alerts, down.reachable) == 2


# --------------------------------------------------------------------------------------------
# KV cache type and flash attention


CONFIG_Q8_FA = "033"  # server config: OLLAMA_FLASH_ATTENTION:true OLLAMA_KV_CACHE_TYPE:q8_0


@pytest.mark.parametrize(
    ("case", "log", "rows", "now", "expected"),
    [
        (
            "server config q8_0, llama-server run without a cache type: f16",
            ["config", "run:default-fa-auto-np1"],
            [row(TINY, 2048, 5_000_000, 0)],
            RUN_TIME + 60,
            (
                "KV cache f16 allocated, q8_0 requested (OLLAMA_KV_CACHE_TYPE=q8_0 (server config)):"
                " the log gives no reason"
            ),
        ),
        (
            "Ollama's fallback warning, then an A/B1 runner without a cache type",
            ["fallback", "spawn"],
            [row(Q8, 2048, 2_754_892_672)],
            SPAWN_TIME + 60,
            (
                "KV cache f16 allocated, q8_0 requested (Ollama's warning):"
                " quantized kv cache requested but flash attention disabled"
            ),
        ),
        (
            "server config q8_0 and flash attention, an A/B1 runner without either",
            ["config", "spawn"],
            [row(Q8, 2048, 2_754_892_672)],
            SPAWN_TIME + 60,
            (
                "KV cache f16 allocated, q8_0 requested (OLLAMA_KV_CACHE_TYPE=q8_0 (server config)):"
                " flash attention is off (no --flash-attn on the runner command line)"
            ),
        ),
        (
            "q8_0 asked and allocated (real llama-server run)",
            ["config", "run:q8_0-fa-on-np2"],
            [row(TINY, 4096, 5_000_000, 0)],
            RUN_TIME + 60,
            None,
        ),
        (
            "nothing asked (real llama-server run, f16)",
            ["run:f16-fa-on-np1"],
            [row(TINY, 2048, 5_000_000, 0)],
            RUN_TIME + 60,
            None,
        ),
    ],
)
def test_kv_type_not_applied(
    case: str, log: list[str], rows: list[dict[str, Any]], now: float, expected: str | None
) -> None:
    lines: list[str] = []
    for part in log:
        if part == "config":
            lines.append(corpus_line(CONFIG_Q8_FA, "server config"))
        elif part == "fallback":
            lines.append(FALLBACK)
        elif part == "spawn":
            lines.append(spawn_line(blob(Q8), 2048))
        else:
            lines.extend(llama_server_run(part.removeprefix("run:"), blob(TINY)))
    state = state_of(ps_snapshot(rows, taken_at=now), lines)
    assert state.models[0].load is not None, case
    found = [a for a in evaluate(state) if a.kind == "kv_type_not_applied"]
    if expected is None:
        assert found == [], case
        return
    (alert,) = found
    assert alert.message == expected and alert.severity == "warning" and alert.model == rows[0]["model"]
    saving = fix(alert, "OLLAMA_KV_CACHE_TYPE=q8_0 once it applies")
    name = rows[0]["model"]
    assert saving.detail == ("KV ~1.1 MiB (~−960 KiB)" if name == TINY else "KV ~119 MiB (~−105 MiB)"), saving.detail
    if name == TINY:  # allocated by the runner: the saving is measured from that figure, the new one scaled alike
        import dataclasses

        from kvtop.model.known import Known

        view = state.models[0]
        doubled = dataclasses.replace(
            view,
            memory=dataclasses.replace(
                view.memory, kv=Known(2 * view.memory.kv.value, "allocated", "test: twice the formula")
            ),
        )
        (again,) = [
            a for a in evaluate(dataclasses.replace(state, models=(doubled,))) if a.kind == "kv_type_not_applied"
        ]
        assert fix(again, "OLLAMA_KV_CACHE_TYPE=q8_0 once it applies").detail == "KV ~2.1 MiB (~−1.9 MiB)"


def test_flash_attention_off_although_requested_or_needed() -> None:
    config = corpus_line(CONFIG_Q8_FA, "server config")
    state = state_of(
        ps_snapshot([row(Q8, 2048, 2_754_892_672)], taken_at=SPAWN_TIME + 60), [config, spawn_line(blob(Q8), 2048)]
    )
    alert = only(evaluate(state), "flash_attention_off", Q8)
    assert alert.message == (
        "flash attention is off although OLLAMA_FLASH_ATTENTION=true (server config) and"
        " the q8_0 cache needs it: no --flash-attn on the runner command line"
    )
    assert alert.fixes == ()  # asked for and still off: nothing in the environment turns it on

    state = state_of(
        ps_snapshot([row(Q8, 2048, 2_754_892_672)], taken_at=SPAWN_TIME + 60), [FALLBACK, spawn_line(blob(Q8), 2048)]
    )
    alert = only(evaluate(state), "flash_attention_off", Q8)
    assert alert.message.endswith("although the q8_0 cache needs it: no --flash-attn on the runner command line")
    assert [f.action for f in alert.fixes] == ["OLLAMA_FLASH_ATTENTION=1"]


@pytest.mark.parametrize(
    ("case", "now", "expected"),
    [
        ("the minute after", _utc(2026, 3, 24, 21, 18), ["quantized_v_refused", "flash_attention_off"]),
        ("an hour later", _utc(2026, 3, 24, 22, 17, 30), []),
    ],
)
def test_grok_forced_off_and_quantized_v_refused_corpus_023(case: str, now: float, expected: list[str]) -> None:
    state = state_of(ps_snapshot([], taken_at=now), corpus_lines("023"), default_year=2026)
    alerts = evaluate(state)
    assert [a.kind for a in alerts] == expected, case
    if expected:
        refused, fa = alerts
        assert refused.severity == "critical" and refused.since == _utc(2026, 3, 24, 21, 17, 29)
        assert "V cache quantization requires flash_attn" in refused.message
        # Grok cannot use flash attention: the one fix is an f16 cache, never OLLAMA_FLASH_ATTENTION=1
        assert [(f.action, f.fits) for f in refused.fixes] == [("OLLAMA_KV_CACHE_TYPE=f16", None)]
        assert fa.message.endswith("forced off: flash_attn is not compatible with Grok - forcing off")


def test_quantized_v_refused_by_llama_server_is_one_incident() -> None:
    state = state_of(ps_snapshot([], taken_at=RUN_TIME + 60), llama_server_run("fail-q8_0-fa-off", blob(TINY)))
    alerts = evaluate(state)
    assert [a.kind for a in alerts] == ["quantized_v_refused", "flash_attention_off"]  # no separate load_failed
    refused = alerts[0]
    assert refused.since == RUN_TIME  # the runner's lines take the time of Ollama's spawn line
    assert refused.message.startswith(f"{blob(TINY)[:19]}…: the load failed: a quantized V cache needs flash attention")
    assert fix(refused, "OLLAMA_FLASH_ATTENTION=1").fits is None
    assert "it is off on purpose now (off)" in fix(alerts[1], "OLLAMA_FLASH_ATTENTION=1").detail


def test_explicitly_disabled_flash_attention_with_f16_is_fine() -> None:
    state = state_of(
        ps_snapshot([row(TINY, 1024, 5_000_000, 0)], taken_at=RUN_TIME + 60),
        llama_server_run("f16-fa-off-np1-ctx1000", blob(TINY)),
    )
    assert view(state, TINY).flash_attention.value == "disabled"
    assert evaluate(state) == ()


# --------------------------------------------------------------------------------------------
# Context: truncation, clamping, training context


@pytest.mark.parametrize(
    ("case", "rows", "now", "expected"),
    [
        ("one model at 512, a minute after", [row(Q8, 512, 2_300_000_000)], _utc(2025, 6, 11, 8, 21), (Q8, 3)),
        (
            "two models: the log does not say whose prompt",
            [row(Q8, 512, 2_300_000_000), row(Q4, 4096, 1_894_083_456)],
            _utc(2025, 6, 11, 8, 21),
            (None, 3),
        ),
        ("an hour later", [row(Q8, 512, 2_300_000_000)], _utc(2025, 6, 11, 9, 21), None),
        ("the model runs at 4096 now: the prompts fit", [row(Q8, 4096, 2_754_892_672)], _utc(2025, 6, 11, 8, 21), None),
    ],
)
def test_prompt_truncated_corpus_015(
    case: str, rows: list[dict[str, Any]], now: float, expected: tuple[str | None, int] | None
) -> None:
    state = state_of(ps_snapshot(rows, taken_at=now), corpus_lines("015"))
    found = [a for a in evaluate(state) if a.kind == "prompt_truncated"]
    if expected is None:
        assert found == [], case
        return
    (alert,) = found
    model, count = expected
    assert alert.model == model and alert.severity == "warning"
    assert alert.message.startswith(
        f"{count} prompts truncated in the last 15 min (latest: a 587-token prompt cut to 512, limit 512, keep 4)"
    )
    assert alert.since == _utc(2025, 6, 11, 8, 7, 59) + 0.286  # the first one in the window
    (f,) = alert.fixes
    assert f.action == "num_ctx 1024"  # the longest prompt, 617 tokens, rounded up to a power of two
    if model == Q8:
        assert f.detail == f"KV ~112 MiB (~+{(kv_bytes(state, Q8, 1024) - kv_bytes(state, Q8, 512)) // MiB}.0 MiB)"
        assert f.fits is None  # a larger cache needs free memory, and there is no GPU sample


def test_era_a_truncation_without_a_prompt_length_corpus_017() -> None:
    state = state_of(ps_snapshot([], taken_at=_utc(2024, 7, 18, 23, 30)), corpus_lines("017"))
    alert = only(evaluate(state), "prompt_truncated")
    assert "(latest: limit 2048, keep 4)" in alert.message
    assert alert.fixes[0].action == "num_ctx 4096" and alert.fixes[0].fits is None


@pytest.mark.parametrize(("now", "fires"), [(TAKEN_AT, True), (TAKEN_AT + 3600, False)])
def test_context_clamped_is_info(now: float, fires: bool) -> None:
    state = state_of(
        ps_snapshot([row(Q8, 40960, 6_106_141_568)], taken_at=now),
        [CLAMP, spawn_line(blob(Q8), 40960, when="2026-11-18T11:05:00.100Z")],
    )
    alerts = evaluate(state)
    if not fires:
        assert alerts == ()
        return
    assert kinds(alerts) == [("context_clamped", Q8)]
    assert alerts[0].severity == "info" and alerts[0].message.startswith(
        "num_ctx 65536 was requested; Ollama clamped it to the training context 40960"
    )
    assert exit_code(alerts, True) == 0  # info does not count


@pytest.mark.parametrize(("num_ctx", "fires"), [(65536, True), (40960, False), (32768, False)])
def test_context_over_training(num_ctx: int, fires: bool) -> None:
    state = state_of(ps_snapshot([row(Q8, num_ctx, 6_106_141_568 + (num_ctx - 32768) * 114_688)]))
    found = [a for a in evaluate(state) if a.kind == "context_over_training"]
    assert bool(found) is fires
    if fires:
        (f,) = found[0].fixes
        saving = kv_bytes(state, Q8, num_ctx) - kv_bytes(state, Q8, 40960)
        assert (f.action, f.fits) == ("num_ctx 40960", True)
        assert f.detail == f"KV ~4.4 GiB (~−{saving / GiB:.1f} GiB)"


# --------------------------------------------------------------------------------------------
# Reload churn


@pytest.mark.parametrize(
    ("case", "contexts", "minutes_apart", "mapping", "expected"),
    [
        ("clients fight over num_ctx", (4096, 32768, 4096), 1, {}, "num_ctx 4096 → 32768 → 4096"),
        ("two loads", (4096, 32768), 1, {}, None),
        ("two loads, churn_reloads = 2", (4096, 32768), 1, {"churn_reloads": 2}, "num_ctx 4096 → 32768"),
        ("three loads over 20 minutes", (4096, 32768, 4096), 9, {}, None),
        ("the same settings each time", (4096, 4096, 4096), 2, {}, "the same settings each time"),
        (
            "nine loads: the middle of the chain is counted, not listed",
            (4096, 8192, 12288, 16384, 20480, 24576, 28672, 32768, 4096),
            1,
            {},
            "num_ctx 4096 → 8192 → … (3 more) → 24576 → 28672 → 32768 → 4096",
        ),
    ],
)
def test_reload_churn(
    case: str, contexts: tuple[int, ...], minutes_apart: int, mapping: dict[str, Any], expected: str | None
) -> None:
    start = _utc(2026, 11, 18, 10, 40)
    lines = [
        spawn_line(
            blob(Q8),
            c,
            when=datetime.fromtimestamp(start + i * 60 * minutes_apart, timezone.utc).strftime(
                "%Y-%m-%dT%H:%M:%S.000Z"
            ),
        )
        for i, c in enumerate(contexts)
    ]
    now = start + 60 * minutes_apart * (len(contexts) - 1) + 30
    state = state_of(ps_snapshot([row(Q8, contexts[-1], 2_754_892_672)], taken_at=now), lines)
    thresholds, warnings = Thresholds.from_mapping(mapping)
    assert warnings == []
    found = [a for a in evaluate(state, thresholds) if a.kind == "reload_churn"]
    if expected is None:
        assert found == [], case
        return
    (alert,) = found
    assert alert.model == Q8 and expected in alert.message and alert.since == start
    assert alert.fixes and alert.fixes[0].fits is None


# --------------------------------------------------------------------------------------------
# Incidents: OOM, failed loads, crashes, evictions


@pytest.mark.parametrize(
    ("stem", "now", "expected"),
    [
        ("031", _utc(2026, 3, 25, 1, 30), [("oom", "critical", "model request too large for system")]),
        ("031", _utc(2026, 3, 25, 2, 30), []),
        (
            "005",
            _utc(2024, 7, 24, 16, 10),
            [("oom", "critical", "CUDA error: out of memory"), ("runner_crash", "critical", "GGML_ASSERT")],
        ),
        (
            "009",
            _utc(2024, 4, 19, 3, 0),
            [
                (
                    "load_failed",
                    "critical",
                    ("sha256-e9e56e8bb5f0…: 1 failed load in the last 15 min: unable to load model"),
                )
            ],
        ),
        (
            "050",
            _utc(2026, 8, 29, 8, 50),
            [("eviction", "warning", ("sha256-0800cbac9c20… unloaded to make room (found an idle runner to unload)"))],
        ),
        ("050", _utc(2026, 8, 29, 9, 50), []),
    ],
)
def test_incidents_from_the_corpus(stem: str, now: float, expected: list[tuple[str, str, str]]) -> None:
    state = state_of(ps_snapshot([], taken_at=now), corpus_lines(stem))
    alerts = evaluate(state)  # corpus 005's journald stamps have no zone: read as UTC
    assert [(a.kind, a.severity) for a in alerts] == [(k, s) for k, s, _ in expected]
    for alert, (_, _, text) in zip(alerts, expected):
        assert text in alert.message


def test_eviction_names_a_loaded_model() -> None:
    lines = [re.sub(r"sha256-[0-9a-f]{64}", blob(Q8), line) for line in corpus_lines("050")]
    state = state_of(ps_snapshot([row(Q8, 4096, 2_754_892_672)], taken_at=_utc(2026, 8, 29, 8, 50)), lines)
    alert = only(evaluate(state), "eviction")
    assert alert.model == Q8 and alert.key == f"eviction:{Q8}"
    assert (
        alert.message == f"1 eviction in the last 15 min: {Q8} unloaded to make room (found an idle runner to unload)"
    )


def test_eviction_names_a_model_that_has_since_unloaded() -> None:
    """The evicted model is gone from /api/ps by the time the line is read: the name /api/ps
    showed earlier for its blob is kept (AppState.blob_names), so the alert keeps its key."""
    lines = [re.sub(r"sha256-[0-9a-f]{64}", blob(Q8), line) for line in corpus_lines("050")]
    t = _utc(2026, 8, 29, 8, 50)
    state = fold_with_alerts(AppState(HOST), ps_snapshot([row(Q8, 4096, 2_754_892_672)], taken_at=t - 5))
    assert state.blob_names == {blob(Q8): Q8}
    state = state_of_next(state, ps_snapshot([], taken_at=t), lines)
    alert = only(evaluate(state), "eviction")
    assert alert.model == Q8 and alert.key == f"eviction:{Q8}"
    fresh = state_of(ps_snapshot([], taken_at=t), lines)  # never saw it loaded: only the blob is known
    assert only(evaluate(fresh), "eviction").model is None


def state_of_next(state: AppState, snap: OllamaSnapshot, lines: Sequence[str]) -> AppState:
    return with_log(fold_with_alerts(state, snap), lines)


def test_a_failure_replaced_by_a_newer_load_is_not_an_alert() -> None:
    failed = llama_server_run("fail-q8_0-head-dim-48", blob(TINY))
    state = state_of(ps_snapshot([], taken_at=RUN_TIME + 60), failed)
    assert kinds(evaluate(state)) == [("load_failed", None)]
    fine = llama_server_run("f16-fa-on-np1", blob(TINY), when="2026-11-29T12:00:30.000Z")
    state = state_of(ps_snapshot([row(TINY, 2048, 5_000_000, 0)], taken_at=RUN_TIME + 60), failed + fine)
    assert evaluate(state) == ()


# --------------------------------------------------------------------------------------------
# GPUs, swap, log source


def test_foreign_vram_on_a_gpu_ollama_uses(tmp_path: Path) -> None:
    state = gpu_state(state_of(snapshot_at(SPILLS)), tmp_path)
    alert = only(evaluate(state), "foreign_vram")
    assert alert.key == "foreign_vram:gpu0" and alert.model is None and alert.since == TAKEN_AT
    assert alert.message == (
        "GPU 0 (NVIDIA RTX A6000): 8.0 GiB held by processes outside Ollama: python (PID 7777, alice) 8.0 GiB"
    )
    assert alert.fixes == (Fix("stop PID 7777", "frees 8.0 GiB", None, "alice's python stops"),)
    # Xorg's 300 MiB on GPU 1 is under the 1 GiB threshold; with 256 MiB it is not
    thresholds, _ = Thresholds.from_mapping({"foreign_vram": "256MiB"})
    assert [a.key for a in evaluate(state, thresholds) if a.kind == "foreign_vram"] == [
        "foreign_vram:gpu0",
        "foreign_vram:gpu1",
    ]


def test_only_gpus_ollama_uses_are_checked(tmp_path: Path) -> None:
    # no model loaded, but Ollama's runners (unloading, unmatched) still hold memory on both GPUs
    state = gpu_state(state_of(snapshot_at(0)), tmp_path, tight_nvml(100 * MiB, 100 * MiB, xorg=4 * GiB))
    assert [a.key for a in evaluate(state)] == [
        "foreign_vram:gpu0",
        "foreign_vram:gpu1",
        "gpu_nearly_full:gpu0",
        "gpu_nearly_full:gpu1",
    ]
    # a GPU without any Ollama process is not checked, however full and shared
    nvml = FakeNvml([FakeGpu(total=24 * GiB, used=24 * GiB - 512 * MiB - 100 * MiB, compute=[(TRAINER_PID, 20 * GiB)])])
    state = gpu_state(state_of(snapshot_at(SPILLS)), tmp_path, nvml)
    assert [a.kind for a in evaluate(state)] == ["spill"]


@pytest.mark.parametrize(
    ("step", "swap_used", "fires"),
    [(SPILLS, 2 * GiB, True), (SPILLS, 256 * MiB, False), (SPILLS, 257 * MiB, True), (1, 2 * GiB, False)],
)
def test_swap_in_use_while_a_model_is_spilled(tmp_path: Path, step: int, swap_used: int, fires: bool) -> None:
    state = gpu_state(state_of(snapshot_at(step)), tmp_path, swap_used=swap_used)
    found = [a for a in evaluate(state) if a.kind == "swap_in_use"]
    assert bool(found) is fires
    if fires:
        assert found[0].message.startswith(
            f"{'2.0 GiB' if swap_used == 2 * GiB else '257 MiB'} swap in use of 8.0 GiB"
            f" while {GEMMA} runs partly in system RAM; 40.0 GiB RAM available"
        )


@pytest.mark.parametrize(("ok", "fires"), [(False, True), (True, False)])
def test_log_source_lost(ok: bool, fires: bool) -> None:
    status = None if ok else "journalctl: permission denied (add yourself to the systemd-journal group)"
    state = state_of(snapshot_at(1), [], ok=ok, status=status)
    alerts = evaluate(state)
    assert [a.kind for a in alerts] == (["log_source_lost"] if fires else [])
    if fires:
        assert alerts[0].severity == "warning" and "permission denied" in alerts[0].message
        assert exit_code(alerts, state.reachable) == 1


# --------------------------------------------------------------------------------------------
# since, ordering, JSON, exit codes


def test_since_is_carried_over_by_key() -> None:
    first = evaluate(state_of(snapshot_at(SPILLS)))
    later = state_of(snapshot_at(SPILLS, taken_at=TAKEN_AT + 30))
    assert only(evaluate(later), "spill").since == TAKEN_AT + 30  # no previous: this snapshot's time
    assert only(evaluate(later, previous=first), "spill").since == TAKEN_AT
    gone = evaluate(state_of(snapshot_at(1, taken_at=TAKEN_AT + 60)), previous=first)
    assert gone == ()
    back = evaluate(state_of(snapshot_at(SPILLS, taken_at=TAKEN_AT + 90)), previous=gone)
    assert only(back, "spill").since == TAKEN_AT + 90  # it went away in between: a new incident


def test_event_alerts_start_at_the_first_event_and_keep_it() -> None:
    lines = corpus_lines("015")
    a1 = evaluate(state_of(ps_snapshot([], taken_at=_utc(2025, 6, 11, 8, 21)), lines))
    a2 = evaluate(state_of(ps_snapshot([], taken_at=_utc(2025, 6, 11, 8, 25)), lines), previous=a1)
    # at 08:25 the 08:07 truncation left the window, but the alert has been up since then
    assert "2 prompts truncated" in only(a2, "prompt_truncated").message
    assert (
        only(a2, "prompt_truncated").since == only(a1, "prompt_truncated").since == _utc(2025, 6, 11, 8, 7, 59) + 0.286
    )


def test_most_severe_first() -> None:
    snap = ps_snapshot([row(Q8, 65536, 6_106_141_568 + 32768 * 114_688, 6_000_000_000), row(Q4, 4096, 1_894_083_456)])
    state = state_of(snap, [CLAMP], ok=False, status="file:/var/log/ollama/server.log: rotated away")
    alerts = evaluate(state)
    assert [(a.severity, a.kind) for a in alerts] == [
        ("critical", "spill"),
        ("warning", "log_source_lost"),
        ("warning", "context_over_training"),
        ("info", "context_clamped"),
    ]
    ranks = {"critical": 0, "warning": 1, "info": 2}
    assert [ranks[a.severity] for a in alerts] == sorted(ranks[a.severity] for a in alerts)
    assert evaluate(state) == alerts  # deterministic
    assert len({a.key for a in alerts}) == len(alerts)
    assert all(a.kind in KINDS and KINDS[a.kind][0] == a.severity for a in alerts)


def test_alert_json_shape() -> None:
    alerts = evaluate(state_of(snapshot_at(SPILLS)))
    doc = alert_json(alerts[0])
    assert list(doc) == ["kind", "severity", "model", "since", "message", "fixes"]
    assert doc["since"] == "2026-11-18T11:06:40+00:00" == datetime.fromtimestamp(TAKEN_AT, timezone.utc).isoformat()
    assert doc["fixes"] and all(list(f) == ["action", "detail", "fits", "cost"] for f in doc["fixes"])
    assert doc["fixes"][0] == {
        "action": f"num_ctx 21760 for {Q8}",
        "detail": "frees 1.2 GiB of VRAM (if it shares the GPU)",
        "fits": True,
        "cost": f"{Q8}: prompts over 21760 tokens are truncated (now 32768); it reloads",
    }
    assert json.loads(json.dumps(doc)) == doc
    assert alert_json(dataclasses.replace(alerts[0], since=None, fixes=()))["since"] is None


@pytest.mark.parametrize(
    ("severities", "reachable", "code"),
    [
        ((), True, 0),
        (("info",), True, 0),
        (("warning",), True, 1),
        (("info", "warning"), True, 1),
        (("critical",), True, 2),
        (("warning", "critical"), True, 2),
        ((), False, 2),
        ((), None, 2),
        (("warning",), False, 2),
    ],
)
def test_exit_code(severities: tuple[str, ...], reachable: bool | None, code: int) -> None:
    alerts = [Alert("x", s, None, None, "m", (), f"x{i}") for i, s in enumerate(severities)]  # type: ignore[arg-type]
    assert exit_code(alerts, reachable) == code


def test_evaluate_reads_no_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    def no_clock() -> float:
        raise AssertionError("evaluate read the clock")

    monkeypatch.setattr(time, "time", no_clock)
    monkeypatch.setattr(time, "monotonic", no_clock)
    assert kinds(evaluate(state_of(snapshot_at(SPILLS)))) == [("spill", GEMMA)]


# --------------------------------------------------------------------------------------------
# Thresholds


@pytest.mark.parametrize(
    ("mapping", "expected"),
    [
        (None, {}),
        ({}, {}),
        ({"gpu_headroom_bytes": "1GiB"}, {"gpu_headroom_bytes": GiB}),
        ({"gpu_headroom": 268435456}, {"gpu_headroom_bytes": 256 * MiB}),
        ({"foreign_vram_bytes": "2GB", "swap_used": "0"}, {"foreign_vram_bytes": 2_000_000_000, "swap_used_bytes": 0}),
        (
            {"churn_window_s": "10m", "event-window": 300, "churn_reloads": 5},
            {"churn_window_s": 600.0, "event_window_s": 300.0, "churn_reloads": 5},
        ),
        (
            {"fix_reserve_bytes": "512 MiB", "event_window_s": "1h"},
            {"fix_reserve_bytes": 512 * MiB, "event_window_s": 3600.0},
        ),
    ],
)
def test_thresholds_from_mapping(mapping: dict[str, Any] | None, expected: dict[str, Any]) -> None:
    thresholds, warnings = Thresholds.from_mapping(mapping)
    assert warnings == []
    assert thresholds == dataclasses.replace(DEFAULT_THRESHOLDS, **expected)


@pytest.mark.parametrize(
    ("mapping", "warning"),
    [
        ({"gpu_headroom_bytes": "lots"}, "[alerts] gpu_headroom_bytes = 'lots': not a byte count"),
        ({"gpu_headroom_bytes": "1G"}, "ambiguous unit"),
        ({"gpu_headroom_bytes": -5}, "must not be negative — the default 512 MiB is used"),
        ({"foreign_vram_bytes": True}, "not a byte count"),
        ({"churn_reloads": 1}, "[alerts] churn_reloads = 1: must be at least 2 — the default 3 is used"),
        ({"churn_reloads": "many"}, "not a whole number"),
        ({"event_window_s": 0}, "must be a positive number of seconds — the default 900 is used"),
        ({"event_window_s": "soon"}, "not a duration"),
        ({"churn_window_s": [600]}, "not a duration"),
        ({"gpu_headrom": "1GiB"}, "[alerts] unknown key 'gpu_headrom' ignored (known: churn_reloads,"),
    ],
)
def test_thresholds_bad_values_warn_and_keep_the_default(mapping: dict[str, Any], warning: str) -> None:
    thresholds, warnings = Thresholds.from_mapping(mapping)
    assert thresholds == DEFAULT_THRESHOLDS
    assert len(warnings) == 1 and warning in warnings[0], warnings


def test_default_thresholds() -> None:
    t = DEFAULT_THRESHOLDS
    assert (
        t.gpu_headroom_bytes,
        t.foreign_vram_bytes,
        t.churn_reloads,
        t.churn_window_s,
        t.event_window_s,
        t.swap_used_bytes,
        t.fix_reserve_bytes,
    ) == (512 * MiB, GiB, 3, 600.0, 900.0, 256 * MiB, 0)


@pytest.mark.parametrize(("num_ctx", "model"), [(2048, Q8), (4096, None)])
def test_era_a_truncation_is_the_single_model_s_only_when_its_context_matches_017(
    num_ctx: int, model: str | None
) -> None:
    """Corpus 017's line names no model and says n_ctx=2048: a model running at 4096 did not cut it."""
    when = _utc(2024, 7, 18, 23, 30)
    state = state_of(ps_snapshot([row(Q8, num_ctx, 2_754_892_672)], taken_at=when), corpus_lines("017"))
    alert = only(evaluate(state), "prompt_truncated")
    assert alert.model == model
    assert "(latest: limit 2048, keep 4)" in alert.message


@pytest.mark.parametrize(
    ("offsets_s", "said"),
    [((0.0, 29.5, 58.012), "loaded 3 times in 58 s:"), ((0.0, 40.0, 80.4), "loaded 3 times in 1 min 20 s:")],
)
def test_reload_churn_says_its_span_in_whole_seconds(offsets_s: tuple[float, ...], said: str) -> None:
    """The demo read "loaded 3 times in 58.012 s" and "in 1.33338 min" (log times carry milliseconds)."""
    start = _utc(2026, 11, 18, 10, 40)
    lines = [
        spawn_line(
            blob(Q8),
            c,
            when=datetime.fromtimestamp(start + dt, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
        )
        for dt, c in zip(offsets_s, (4096, 32768, 4096))
    ]
    state = state_of(ps_snapshot([row(Q8, 4096, 2_754_892_672)], taken_at=start + offsets_s[-1] + 5), lines)
    (alert,) = [a for a in evaluate(state) if a.kind == "reload_churn"]
    assert said in alert.message


# --------------------------------------------------------------------------------------------
# Context overflow in its other forms: the DEBUG chat-history cut, HTTP 400 refusals (docs/ollama-internals.md §4.7)
#
# The corpus has neither form. The DEBUG line is corpus 015's first line with the message and attribute of
# server/prompt.go chatPrompt (v0.5.0 - v0.33: slog.Debug("truncating input messages which exceed context length",
# "truncated", N)); the refusals are corpus 015's own [GIN] lines with the status Ollama answers an over-long
# prompt with (400: llm/llama_server.go, server/routes.go at v0.30.0, "the input length exceeds the context length").

HISTORY_CUT = (
    "Jun 11 08:07:59 host ollama[159]: time=2025-06-11T08:07:59.286Z level=DEBUG source=prompt.go:77 "
    'msg="truncating input messages which exceed context length" truncated=3'
)


def refused(line: str) -> str:
    assert "| 200 |" in line
    return line.replace("| 200 |", "| 400 |", 1)


def test_chat_history_cut_is_a_context_overflow_with_its_form() -> None:
    state = state_of(ps_snapshot([row(Q8, 512, 2_300_000_000)], taken_at=_utc(2025, 6, 11, 8, 21)), [HISTORY_CUT])
    alert = only(evaluate(state), "prompt_truncated")
    assert alert.model == Q8 and alert.severity == "warning"
    assert alert.message.startswith("1 prompt over the context in the last 15 min (seen: chat history cut (DEBUG) ×1)")
    (f,) = alert.fixes
    assert f.action == "num_ctx 1024"  # no prompt length in the line: twice the running context
    assert f.detail.startswith("KV ~112 MiB")


def test_http_400_on_a_prompt_route_is_a_context_overflow_with_its_form() -> None:
    gin = [refused(x) for x in corpus_lines("015") if "[GIN]" in x][1:]  # 08:10:38 and 08:18:51
    state = state_of(ps_snapshot([row(Q8, 512, 2_300_000_000)], taken_at=_utc(2025, 6, 11, 8, 21)), gin)
    alert = only(evaluate(state), "prompt_truncated")
    assert alert.model == Q8
    assert alert.message.startswith(
        "2 requests refused with HTTP 400 in the last 15 min (HTTP 400 refusal on /api/chat"
        " ×2): Ollama's answer to a prompt over the context"
    )


def test_truncation_lines_and_refusals_make_one_alert_naming_both_forms() -> None:
    lines = corpus_lines("015")
    lines[3] = refused(lines[3])  # 08:10:38
    state = state_of(ps_snapshot([row(Q8, 512, 2_300_000_000)], taken_at=_utc(2025, 6, 11, 8, 21)), lines)
    alert = only(evaluate(state), "prompt_truncated")
    assert alert.message.startswith(
        "4 prompts over the context in the last 15 min (latest: a 587-token prompt cut to 512, limit 512, keep 4;"
        " seen: truncation line ×3, HTTP 400 refusal on /api/chat ×1)"
    )
    assert alert.fixes[0].action == "num_ctx 1024"  # the longest prompt, 617 tokens


@pytest.mark.parametrize(
    "status_path", [("| 200 |", '"/api/chat"'), ("| 400 |", '"/api/tags"'), ("| 404 |", '"/api/chat"')]
)
def test_other_statuses_and_routes_are_no_overflow(status_path: tuple[str, str]) -> None:
    status, path = status_path
    line = [x for x in corpus_lines("015") if "[GIN]" in x][1].replace("| 200 |", status).replace('"/api/chat"', path)
    state = state_of(ps_snapshot([row(Q8, 512, 2_300_000_000)], taken_at=_utc(2025, 6, 11, 8, 21)), [line])
    assert [a for a in evaluate(state) if a.kind == "prompt_truncated"] == []


# Ollama's "the model cannot use this cache type" warning (docs/ollama-internals.md §3.2: printed with the
# requested type, v0.5.0–v0.13.3). The corpus has the line only with the spurious type="" (corpus 001): this is
# that real line with the type the doc says it carries.
UNSUPPORTED = corpus_line("001", "kv cache type not supported").replace('type=""', "type=q8_0")
UNSUPPORTED = re.sub(r"^.*?time=\S+", "time=2024-07-24T16:07:51.800+02:00", UNSUPPORTED)


def test_a_cache_type_the_model_does_not_support_offers_no_flash_attention() -> None:
    """Issue 26: never offer OLLAMA_FLASH_ATTENTION=1 for a cache type the model does not support."""
    state = state_of(
        ps_snapshot([row(Q8, 2048, 2_754_892_672)], taken_at=SPAWN_TIME + 60), [UNSUPPORTED, spawn_line(blob(Q8), 2048)]
    )
    alerts = evaluate(state)
    alert = only(alerts, "kv_type_not_applied", Q8)
    assert alert.message == (
        "KV cache f16 allocated, q8_0 requested (Ollama's warning): kv cache type not supported by model"
        " — this model cannot use a q8_0 cache; flash attention would not change that, it keeps f16"
    )
    assert alert.fixes == ()
    for a in alerts:
        assert all("OLLAMA_FLASH_ATTENTION" not in f.action for f in a.fixes), (a.kind, a.fixes)
        assert "q8_0 cache needs it" not in a.message, a.message
