"""The stand-in's server log (``kvtop.demo.logwriter``): what the parser reads from it is
what the scenario says, its lines have the shapes of real lines, and it loops with the scenario."""

from __future__ import annotations

import glob
import re
from pathlib import Path

import pytest

from kvtop.demo.gpusim import RUNNER_CUDA_CONTEXT_BYTES, machine_doc, parse_gpu
from kvtop.demo.log_lines import CLIENTS, LLAMA_SERVER, gin_line, go_duration, restamp, runner_argv
from kvtop.demo.logwriter import LogWriter, build_script, script_lines
from kvtop.demo.scenario_file import load_scenario
from kvtop.demo.player import ScenarioPlayer
from kvtop.demo.scenario import model_blob
from kvtop.logparse import group_loads, parse_lines
from kvtop.logparse.events import (
    Eviction,
    GinRequest,
    KvTypeFallback,
    PrefillProgress,
    RequestTiming,
    SlotActivity,
    Truncation,
)

SNAPSHOTS = Path(__file__).resolve().parents[2] / "snapshots"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
DEMO = load_scenario(SNAPSHOTS / "demo-scenario.json")
INCIDENT = load_scenario(SNAPSHOTS / "incident-scenario.json")
MIB = 1024 * 1024
ROUNDING = 0.005 * MIB
"""Half a hundredth of a MiB: what llama.cpp's ``%.2f MiB`` loses per buffer line."""


def _stamped(lines: list[str]) -> list[str]:
    return [restamp(line, 1_790_000_000.0) for line in lines]


def _blob(name: str) -> str:
    return model_blob(DEMO.models[name])


def test_the_demo_log_parses_to_the_scenarios_loads() -> None:
    events = parse_lines(_stamped(script_lines(DEMO)))
    loads = group_loads(events)
    q8, q4, gemma = _blob("qwen3:1.7b-q8_0"), _blob("qwen3:1.7b-q4_K_M"), _blob("gemma4:latest")
    assert [ld.model_blob for ld in loads] == [q8, q8, q4, gemma, q8]
    assert all(ld.era == "C" for ld in loads)
    # each load's buffers add up to the /api/ps row it stands for, the GPU ones to size_vram
    rows = [
        (4096, 2_754_892_672, 2_754_892_672),
        (32768, 6_106_141_568, 6_106_141_568),
        (4096, 1_894_083_456, 1_894_083_456),
        (4096, 6_591_830_464, 5_333_539_264),
        (4096, 2_754_892_672, 2_754_892_672),
    ]
    for ld, (ctx, size, vram) in zip(loads, rows):
        buffers = [(dev, n) for comp in ld.memory.values() for dev, n in comp.items()]
        assert ld.num_ctx_per_seq == ctx and ld.parallel == 1
        assert abs(sum(n for _, n in buffers) - size) <= len(buffers) * ROUNDING
        assert abs(sum(n for dev, n in buffers if dev == "CUDA0") - vram) <= len(buffers) * ROUNDING
        assert (ld.kv_type_k, ld.kv_type_v) == ("f16", "f16")
    assert [ld.kv_bytes for ld in loads[:3]] == [469_762_048, 3_758_096_384, 469_762_048]
    assert loads[3].kv_bytes == 109_051_904  # gemma4's two caches (iSWA): 32 MiB full + 72 MiB SWA
    assert [ld.flash_attention for ld in loads] == ["enabled", "enabled", "enabled", "disabled", "enabled"]
    assert (loads[3].layers_offloaded, loads[3].layers_total) == (34, 43)
    assert loads[3].memory["weights"]["CPU_Mapped"] == 1_258_291_200  # size - size_vram: 1200.00 MiB
    (fallback,) = [e for e in loads[3].events if isinstance(e, KvTypeFallback)]
    assert fallback.requested == "q8_0"
    assert "KV type fallback to f16 (requested q8_0): kv cache type not supported by model" in loads[3].findings()
    (eviction, *_) = [e for e in events if isinstance(e, Eviction)]
    assert eviction.model_blob == gemma
    (truncation,) = [e for e in events if isinstance(e, Truncation)]
    assert (truncation.limit, truncation.prompt, truncation.keep, truncation.new) == (2050, 5065, 4, 2050)


def test_the_demo_log_times_its_requests_and_shows_prefill_and_busy_slots() -> None:
    events = parse_lines(_stamped(script_lines(DEMO)))
    timings = [e for e in events if isinstance(e, RequestTiming)]
    assert len(timings) == len(build_script(DEMO).requests) >= 9
    by_speed = sorted({round(e.eval_tps or 0) for e in timings})
    assert by_speed[0] >= 9 and by_speed[-1] <= 124  # gemma4 spilled ~9.7, qwen3 q4_K_M ~118.6 tok/s
    assert len({e.eval_tps for e in timings}) > 5  # TOK/S moves from one request to the next
    assert any(isinstance(e, PrefillProgress) and e.n_past == 1536 for e in events)
    assert {e.action for e in events if isinstance(e, SlotActivity)} >= {"start", "prompt", "prompt_done", "release"}


def test_gin_line_prints_the_corpus_access_lines_byte_for_byte() -> None:
    corpus = (FIXTURES / "gin" / "access-corpus.log").read_text(encoding="utf-8").splitlines()
    events = [e for e in parse_lines(corpus) if isinstance(e, GinRequest)]
    assert len(events) == len(corpus) == 8
    for line, e in zip(corpus, events):
        assert e.latency_s is not None
        ours = gin_line(e.status, e.latency_s, e.client, e.method, e.path)
        # the same text after the stamp: status, Go duration, client, method and quoted path, with gin's padding
        # (corpus 053's 192.0.2.16 replaced a longer address and kept its padding: its client is compared stripped)
        theirs = line.split(" | ", 1)[1].split("|")
        mine = ours.split(" | ", 1)[1].split("|")
        assert mine[2].strip() == theirs[2].strip() and mine[:2] + mine[3:] == theirs[:2] + theirs[3:], line
        if e.client != "192.0.2.16":
            assert ours.split(" | ", 1)[1] == line.split(" | ", 1)[1], line
    assert [go_duration(s) for s in (0, 5e-7, 3.1775e-5, 60.4, 3600 + 61.9)] == [
        "0s",
        "500ns",
        "31.775µs",
        "1m0s",
        "1h1m1s",
    ]
    assert gin_line(404, 0.0015, "::1", "GET", '/api/x?q="1"\n').endswith(
        '|         1.5ms |             ::1 | GET      "/api/x?q=\\"1\\"\\n"'
    )


def test_every_scripted_request_ends_with_its_access_line() -> None:
    for scenario in (DEMO, INCIDENT):
        script = build_script(scenario)
        events = parse_lines(_stamped(script_lines(scenario)))
        gin = [e for e in events if isinstance(e, GinRequest)]
        assert len(gin) == len(script.requests)
        for task, (r, e) in enumerate(zip(script.requests, gin)):
            assert (e.status, e.method, (e.client, e.path)) == (200, "POST", CLIENTS[task % len(CLIENTS)])
            assert e.latency_s == pytest.approx(r.end_s - r.start_s, abs=1e-9)  # the request's scripted duration
            assert r.lines[-1][0] == r.end_s and "[GIN]" in r.lines[-1][1]  # printed once the response is done
        assert {e.path for e in gin} == {"/api/chat", "/api/generate"} and len({e.client for e in gin}) == 2
        # one slot: a request starts once the one before it is answered (the spilled gemma4's take 7 s)
        assert all(a.end_s < b.start_s for a, b in zip(script.requests, script.requests[1:]))
    spilled = [
        e.latency_s
        for e in parse_lines(_stamped(script_lines(INCIDENT)))
        if isinstance(e, GinRequest) and e.latency_s is not None
    ]
    assert max(spilled) > 5 > min(spilled)  # the spilled gemma4's requests take seconds longer


def test_the_incident_log_has_the_spill_cliff_and_the_recovery() -> None:
    events = parse_lines(_stamped(script_lines(INCIDENT)))
    loads = group_loads(events)
    gemma = model_blob(INCIDENT.models["gemma4:latest"])
    spilled, fixed = [ld for ld in loads if ld.model_blob == gemma]
    assert spilled.flash_attention == "disabled" and fixed.flash_attention == "enabled"
    assert (fixed.layers_offloaded, fixed.layers_total) == (43, 43)

    def tps(load_index: int) -> list[float]:
        starts = [ld.first_line for ld in loads]
        return [
            e.eval_tps
            for e in events
            if isinstance(e, RequestTiming)
            and e.eval_tps
            and max(i for i, s in enumerate(starts) if s <= e.line_no) == load_index
        ]

    before, during, after = tps(loads.index(spilled) - 1), tps(loads.index(spilled)), tps(loads.index(fixed))
    assert min(before) > 80 and max(during) < 11 and min(after) > 38
    (evicted, *_) = [e for e in events if isinstance(e, Eviction)]
    assert evicted.model_blob == model_blob(INCIDENT.models["embeddinggemma:latest"])


def _shape(line: str) -> str:
    """A line with its varying parts replaced: timestamps, blobs and paths, numbers, model names, devices."""
    line = re.sub(r"^.*?(?=time=|level=)", "", line) if "level=" in line else line
    line = re.sub(r"time=\S+ ", "", line)
    line = re.sub(r"\S*sha256-[0-9a-f]{64}", "BLOB", line)
    line = re.sub(r'cmd="[^"]*"', 'cmd="…"', line)
    line = re.sub(r"source=\S+", "source=S", line)
    line = re.sub(r"runner.name=\S+", "runner.name=M", line)
    line = re.sub(r"Library:\w+", "Library:L", line)
    line = re.sub(r"\b(CUDA|ROCm|Vulkan|Metal)\d\b|\bCPU_Mapped\b|\bCPU\b", "DEV", line)
    line = re.sub(r"\d+(\.\d+)?", "N", line)
    line = re.sub(r"\b(MiB|GiB)\b", "U", line)
    return " ".join(line.split())


NOT_IN_FIXTURES = {
    'level=INFO source=S msg="loading model via llama-server" BLOB': "docs/ollama-internals.md §4.4 (corpus 062's next line, cut in the excerpt)",
    'level=INFO source=S msg="llama-server started in N seconds"': "docs/ollama-internals.md §4.4",
    'level=WARN source=S msg="truncating input prompt" limit=N prompt=N keep=N new=N': "docs/ollama-internals.md §4.7 (v0.30+: the server prints it; corpus 014's line with llama_server.go's source)",
    'level=WARN source=S msg="kv cache type not supported by model" type=qN_N': 'docs/ollama-internals.md §3.2 (slog.Warn with the type; corpus has only the spurious type="")',
    "llama_kv_cache_iswa: creating SWA KV cache, size = N cells": "corpus 042's llama_kv_cache_unified_iswa line under llama.cpp's newer class name (§4.5)",
    "llama_kv_cache_iswa: creating non-SWA KV cache, size = N cells": "corpus 042's llama_kv_cache_unified_iswa line under llama.cpp's newer class name (§4.5)",
    "sched_reserve: Flash Attention was auto, set to disabled": "docs/ollama-internals.md §4.6 (sched_reserve wording)",
    '[GIN] N/N/N - N:N:N | N | Ns | N.N | POST "/api/generate"': "docs/ollama-internals.md §4.9's observed line (the corpus's timed POSTs are /api/chat and /v1/chat/completions)",
}
"""Shapes not in tests/fixtures, each with where it is documented."""


def test_every_demo_line_has_the_shape_of_a_real_line() -> None:
    real: set[str] = set()
    for path in (
        glob.glob(str(FIXTURES / "llama_server" / "*.log"))
        + glob.glob(str(FIXTURES / "logs" / "*.log"))
        + glob.glob(str(FIXTURES / "gin" / "*.log"))
    ):
        with open(path, encoding="utf-8", errors="replace") as f:
            real.update(_shape(line.rstrip("\n")) for line in f)
    used: set[str] = set()
    for scenario in (DEMO, INCIDENT):
        for line in script_lines(scenario):
            shape = _shape(line)
            if shape in NOT_IN_FIXTURES:
                used.add(shape)
            else:
                assert shape in real, f"no real line has this shape: {shape}\n{line}"
    assert used == set(NOT_IN_FIXTURES)  # no stale exception


class _Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def mono(self) -> float:
        return self.t

    def wall_ns(self) -> int:
        return int(self.t * 1e9)


def test_the_log_loops_with_the_scenario(tmp_path: Path) -> None:
    clock = _Clock()
    player = ScenarioPlayer(DEMO, speed=1.0, loop=True, clock=clock.mono, wall_ns=clock.wall_ns)
    writer = LogWriter(tmp_path / "server.log", player, wall_ns=clock.wall_ns)
    writer.path.touch()
    step_s = 0.25
    for _ in range(int(DEMO.period_s * 1.5 / step_s)):  # one and a half passes
        clock.t += step_s
        writer.tick()
    lines = (tmp_path / "server.log").read_text(encoding="utf-8").splitlines()

    def unstamped(text: str) -> str:
        return re.sub(r"time=\S+ |\[GIN\] \S+ - \S+ ", "", text)

    first_pass = script_lines(DEMO)
    assert [unstamped(line) for line in lines[: len(first_pass)]] == [unstamped(line) for line in first_pass]
    spawns = [line for line in lines if 'msg="starting llama-server"' in line]
    assert len(spawns) == 5 + 3  # the second pass loads qwen3 at 4096 and 32768 and q4_K_M again by 120 s
    # stamped when written: the first spawn 6 s after the start, on the fake clock
    assert spawns[0].startswith(restamp("time=2026-01-01T00:00:00.000Z", 1006.0).split(".")[0])


def test_the_writer_refuses_a_scenario_it_cannot_size(tmp_path: Path) -> None:
    text = (SNAPSHOTS / "demo-scenario.json").read_text(encoding="utf-8")
    broken = load_scenario(text.replace('"weights_bytes": 2200000000', '"weights_bytes": 9200000000'))
    with pytest.raises(ValueError, match="qwen3:1.7b-q8_0: size 2,754,892,672 B is below weights"):
        LogWriter(tmp_path / "x.log", ScenarioPlayer(broken))


def test_the_simulated_machine_accounts_for_every_byte() -> None:
    gpu = DEMO.machine.gpu if DEMO.machine is not None else None
    assert gpu is not None
    runners = [
        {
            "pid": 4100,
            "model": "qwen3:1.7b-q8_0",
            "size": 6_106_141_568,
            "size_vram": 6_106_141_568,
            "argv": runner_argv(DEMO, "qwen3:1.7b-q8_0", 32768),
        },
        {
            "pid": 4132,
            "model": "gemma4:latest",
            "size": 6_591_830_464,
            "size_vram": 5_333_539_264,
            "argv": runner_argv(DEMO, "gemma4:latest", 4096),
        },
    ]
    idle, busy = machine_doc(1 << 35, 3 << 30, gpu, runners, False), machine_doc(1 << 35, 3 << 30, gpu, runners, True)
    g = idle["gpu"]
    # each runner: its size_vram (the GPU buffers its log prints) + its CUDA context; dana's job; the driver's own
    assert {p["pid"]: p["gpu_bytes"] for p in g["processes"]} == {
        4100: 6_106_141_568 + RUNNER_CUDA_CONTEXT_BYTES,
        4132: 5_333_539_264 + RUNNER_CUDA_CONTEXT_BYTES,
        23011: 2_621_440_000,
    }
    assert RUNNER_CUDA_CONTEXT_BYTES == 240 * MIB
    assert g["memory_used"] == 83_886_080 + 6_106_141_568 + 5_333_539_264 + 2 * 240 * MIB + 2_621_440_000
    assert g["memory_free"] == 17_175_674_880 - g["memory_used"]
    assert idle["ram_used"] == (3 << 30) + 1_258_291_200
    assert (g["gpu_util"], g["power_draw_mw"]) == (1, 34_000) and (
        busy["gpu"]["gpu_util"],
        busy["gpu"]["power_draw_mw"],
    ) == (97, 148_000)
    kinds = {p["pid"]: (p["kind"], p["user"]) for p in idle["processes"]}
    assert kinds == {
        1187: ("server", "ollama"),
        4100: ("runner", "ollama"),
        4132: ("runner", "ollama"),
        23011: ("other", "dana"),
    }
    assert next(p for p in idle["processes"] if p["pid"] == 4100)["cmdline"][0] == LLAMA_SERVER
    assert machine_doc(1 << 35, 3 << 30, None, runners, True)["gpu"] is None
    with pytest.raises(ValueError, match=r"\$\.machine\.gpu\.memory_total: expected a non-negative integer"):
        parse_gpu({**gpu, "memory_total": "16G"}, "$.machine.gpu")


@pytest.mark.parametrize("name", ["demo-scenario.json", "incident-scenario.json"])
def test_every_model_runs_the_blob_its_modelfile_names(name: str) -> None:
    """The runner's --model, the log's paths and /api/show's FROM line name one blob, so kvtop pairs
    the runner with its row (the incident's embeddinggemma brings a real Modelfile: its blob is that one)."""
    from kvtop.demo.api_bodies import _modelfile

    sc = load_scenario(SNAPSHOTS / name)
    for model in sc.models.values():
        blob = model_blob(model)
        assert f"/blobs/{blob}\n" in _modelfile(model) + "\n"
        assert any(blob in arg for arg in runner_argv(sc, model.name, 2048))
    if name.startswith("incident"):
        assert model_blob(sc.models["embeddinggemma:latest"]) == (
            "sha256-0800cbac9c2064dde519420e75e512a83cb360de3ad5df176185dc69652fc515"
        )
