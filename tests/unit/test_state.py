"""model.state: deriving ModelView rows (sources, KV figures, UNTIL) from snapshots."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

import pytest

from kvtop.model.humanize import human_duration, until_text
from kvtop.model.snapshots import OllamaSnapshot, PsModel, ShowInfo, TagInfo
from kvtop.model.snapshots import parse_version
from kvtop.model.views import AppState
from kvtop.model.view_order import filter_views, sort_views
from kvtop.model.fold_alerts import fold_with_alerts
from kvtop.sources.ollama_decode import parse_go_time, parse_ps
from tests.conftest import load_json
from tests.ui.fakes import TAKEN_AT, down_snapshot, snapshot_at, step_index

QWEN3_1_7B = {  # seeds/kv-cache-experiments-ja.txt: 28 layers, 8 KV heads, head dim 128
    "general.architecture": "qwen3",
    "qwen3.block_count": 28,
    "qwen3.attention.head_count": 16,
    "qwen3.attention.head_count_kv": 8,
    "qwen3.attention.key_length": 128,
    "qwen3.attention.value_length": 128,
    "qwen3.embedding_length": 2048,
    "qwen3.context_length": 40960,
}


def _snap(
    model: PsModel,
    *,
    version: str | None = "0.22.1",
    info: dict | None = None,
    params: str = "",
    file_size: int | None = None,
    remote: bool = False,
) -> OllamaSnapshot:
    show = ShowInfo(
        digest=model.digest, name=model.name, model_info=MappingProxyType(info or {}), parameters=params, remote=remote
    )
    tags = {model.digest: TagInfo(model.name, model.digest, file_size)} if file_size else {}
    return OllamaSnapshot(
        host_url="h",
        taken_at=TAKEN_AT,
        reachable=True,
        version=version,
        models=(model,),
        shows=MappingProxyType({model.digest: show}),
        tags=MappingProxyType(tags),
    )


def _model(**kw: object) -> PsModel:
    base = PsModel(
        name="qwen3:1.7b",
        model="qwen3:1.7b",
        digest="a" * 64,
        size_bytes=2_754_892_672,
        size_vram_bytes=2_754_892_672,
        context_length=4096,
        expires_at=parse_go_time("2026-11-18T10:00:00Z"),
        expires_at_raw=None,
    )
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("num_ctx", "kv_bytes"),
    [(2048, 224 * 2**20), (4096, 448 * 2**20), (8192, 896 * 2**20), (40960, int(4.375 * 2**30))],  # seeds table
)
def test_kv_estimate_matches_seed_measurements(num_ctx: int, kv_bytes: int) -> None:
    state = fold_with_alerts(AppState("h"), _snap(_model(context_length=num_ctx), info=QWEN3_1_7B))
    v = state.models[0]
    assert v.memory.kv.value == kv_bytes and v.memory.kv.source == "estimated"
    assert v.kv_bytes_per_token == 114_688
    assert v.parallel.value == 1 and v.parallel.source == "default"
    assert v.context.source == "reported"


def test_compute_is_size_minus_weights_minus_kv() -> None:
    v = fold_with_alerts(AppState("h"), _snap(_model(), info=QWEN3_1_7B, file_size=2_200_000_000)).models[0]
    assert v.memory.weights.value == 2_200_000_000 and v.memory.weights.source == "reported"
    assert v.memory.compute.value == 2_754_892_672 - 2_200_000_000 - 448 * 2**20
    assert v.memory.source == "estimated"


def test_inconsistent_sizes_leave_compute_unknown_with_reason() -> None:
    v = fold_with_alerts(AppState("h"), _snap(_model(), info=QWEN3_1_7B, file_size=9_000_000_000)).models[0]
    assert v.memory.compute.value is None
    assert "below weights + KV estimate" in v.memory.compute.note


def test_pre_0_10_server_has_no_context_length_and_unknown_slots() -> None:
    v = fold_with_alerts(AppState("h"), _snap(_model(context_length=None), version="0.3.14", info=QWEN3_1_7B)).models[0]
    assert v.context.value is None and v.parallel.value is None
    assert v.memory.kv.value is None and v.kv_unavailable == "num_ctx or slot count unknown"
    assert v.kv_bytes_per_token == 114_688  # per token is still known


def test_modelfile_num_ctx_is_requested_when_ps_has_none() -> None:
    params = 'temperature 0.6\nnum_ctx                        16384\nstop "<|im_end|>"'  # corpus api/010
    v = fold_with_alerts(
        AppState("h"), _snap(_model(context_length=None), version="0.9.0", info=QWEN3_1_7B, params=params)
    ).models[0]
    assert v.context.value == 16384 and v.context.source == "requested"


def test_cloud_model_has_no_local_memory() -> None:
    info = load_json("api/007-api-show-deepseek-v4-flash-cloud-compact.json")["model_info"]
    v = fold_with_alerts(
        AppState("h"),
        _snap(_model(name="deepseek-v4-flash:cloud", size_bytes=0, size_vram_bytes=0), info=info, remote=True),
    ).models[0]
    assert v.cloud and v.kv_unavailable == "cloud model: runs remotely, no local memory"
    assert v.processor == "100% CPU"  # exactly what `ollama ps` prints for size_vram == 0


def test_unavailable_architecture_says_so() -> None:
    v = fold_with_alerts(
        AppState("h"), _snap(_model(), info={"general.architecture": "bert", "bert.block_count": 12})
    ).models[0]
    assert v.memory.kv.value is None and v.kv_unavailable and "bert" in v.kv_unavailable


def test_corpus_ps_gemma4_spill_row() -> None:
    body = load_json("api/011-api-ps-docs-example-gemma4-partial-vram-context_length.json")
    snap = OllamaSnapshot(host_url="h", taken_at=TAKEN_AT, reachable=True, version="0.12.0", models=parse_ps(body))
    v = fold_with_alerts(AppState("h"), snap).models[0]
    assert v.processor == "19%/81% CPU/GPU" and v.cpu_percent == 19 and v.spilled
    assert v.kv_unavailable == "waiting for /api/show"


def test_failed_poll_keeps_models_and_counts_failures() -> None:
    ok = fold_with_alerts(AppState("h"), snapshot_at(step_index("spills")))
    down = fold_with_alerts(fold_with_alerts(ok, down_snapshot(TAKEN_AT + 5)), down_snapshot(TAKEN_AT + 10))
    assert down.reachable is False and down.failures == 2 and down.models == ok.models
    assert down.stale_s == 10
    back = fold_with_alerts(down, snapshot_at(0, taken_at=TAKEN_AT + 20))
    assert back.failures == 0 and back.models == () and back.stale_s is None


def test_unchanged_poll_gives_an_equal_state() -> None:
    s1 = fold_with_alerts(AppState("h"), snapshot_at(1))
    assert fold_with_alerts(s1, snapshot_at(1)) == s1


def test_sort_and_filter() -> None:
    views = fold_with_alerts(AppState("h"), snapshot_at(step_index("spills"))).models
    assert [v.name for v in sort_views(views, "size")] == ["gemma4:latest", "qwen3:1.7b-q8_0", "qwen3:1.7b-q4_K_M"]
    assert [v.name for v in sort_views(views, "name")] == ["gemma4:latest", "qwen3:1.7b-q4_K_M", "qwen3:1.7b-q8_0"]
    assert [v.name for v in sort_views(views, "kv")][0] == "qwen3:1.7b-q8_0"
    assert [v.name for v in filter_views(views, "GEMMA")] == ["gemma4:latest"]
    assert [v.name for v in filter_views(views, "cpu/gpu")] == ["gemma4:latest"]
    with pytest.raises(ValueError):
        sort_views(views, "nope")


@pytest.mark.parametrize(
    ("text", "parsed"),
    [("0.22.1", (0, 22, 1)), ("v0.33.0-rc2", (0, 33, 0)), ("0.0.0", (0, 0, 0)), ("dev", None), (None, None)],
)
def test_parse_version(text: str | None, parsed: tuple[int, int, int] | None) -> None:
    assert parse_version(text) == parsed


@pytest.mark.parametrize(
    ("seconds", "text"),  # Go format.humanDuration (docs/ollama-internals.md §1.5)
    [
        (0.5, "Less than a second"),
        (1.5, "1 second"),
        (59, "59 seconds"),
        (60, "About a minute"),
        (119, "About a minute"),
        (299, "4 minutes"),
        (3599, "59 minutes"),
        (3600, "About an hour"),
        (5400, "2 hours"),
        (47 * 3600, "47 hours"),
        (3 * 86400, "3 days"),
        (20 * 86400, "2 weeks"),
        (90 * 86400, "3 months"),
    ],
)
def test_human_duration(seconds: float, text: str) -> None:
    assert human_duration(seconds) == text


def test_until_text_forms() -> None:
    t = parse_go_time("2026-01-01T00:05:00Z")
    base = parse_go_time("2026-01-01T00:00:00Z").timestamp()  # type: ignore[union-attr]
    assert until_text(t, base) == "5 minutes from now"
    assert until_text(t, base + 301) == "Stopping..."  # ollama ps wording (docs/ollama-internals.md §1.5)
    assert until_text(parse_go_time("2318-04-11T23:47:16.854775807Z"), base) == "Forever"
    assert until_text(None, base) == "unknown"


def test_absurd_model_info_never_crashes_the_view() -> None:
    from kvtop.report import state_json, state_text

    info = dict(QWEN3_1_7B, **{"qwen3.attention.key_length": 10**400, "qwen3.attention.value_length": 1e308})
    state = fold_with_alerts(AppState("h"), _snap(_model(), info=info))
    v = state.models[0]
    assert v.memory.kv.value is None and v.kv_unavailable
    assert "qwen3:1.7b" in state_text(state) and state_json(state)["models"][0]["memory"]["kv"] is None


def test_zero_expires_at_reads_never_like_ollama() -> None:
    assert until_text(parse_go_time("0001-01-01T00:00:00Z"), TAKEN_AT) == "Never"


def test_source_strings_lose_control_characters() -> None:
    row = parse_ps(
        {"models": [{"name": "a\x1b[2Jb", "digest": "\x1b]2;x\x07" + "ab" * 32, "size": 1, "size_vram": 1}]}
    )[0]
    assert "\x1b" not in row.name and "\x07" not in row.digest


def test_header_latency_is_the_median_of_the_last_polls_so_one_slow_answer_does_not_jump() -> None:
    from kvtop.model.state import LATENCY_WINDOW, fold
    from kvtop.model.views import AppState
    from tests.ui.fakes import snapshot_at, step_index

    state = AppState(host_url="http://127.0.0.1:11434")
    assert state.latency_s is None
    step = step_index("spill")
    for i, ms in enumerate([3, 4, 250, 3, 5]):
        state = fold(state, snapshot_at(step, taken_at=1_795_000_000.0 + i, latency_s=ms / 1000))
    assert (
        state.latency_s == 0.003
    )  # the first poll's; the median (4 ms) moved less than 2 ms; never the 250 ms outlier
    state = fold(state, snapshot_at(step, taken_at=1_795_000_010.0, latency_s=0.005))
    state = fold(state, snapshot_at(step, taken_at=1_795_000_011.0, latency_s=0.005))
    assert sorted(state.latencies_s)[len(state.latencies_s) // 2] == 0.005
    assert state.latency_s == 0.003  # two milliseconds of jitter: the figure on screen stays
    for i in range(LATENCY_WINDOW):
        state = fold(state, snapshot_at(step, taken_at=1_795_000_100.0 + i, latency_s=0.020))
    assert state.latency_s == 0.020 and len(state.latencies_s) == LATENCY_WINDOW


def test_ram_noise_keeps_the_previous_figures_and_a_real_move_shows() -> None:
    from kvtop.model.gpu_snapshots import GpuSnapshot, ProcSnapshot, SystemMemory
    from kvtop.model.state import fold_gpu
    from kvtop.model.views import AppState

    def gpu(used: int, swap: int = 0) -> GpuSnapshot:
        return GpuSnapshot(
            taken_at=1.0,
            status="GPU telemetry: none",
            system=SystemMemory(
                ram_total_bytes=24 * 2**30, ram_used_bytes=used, swap_total_bytes=8 * 2**30, swap_used_bytes=swap
            ),
        )

    procs = ProcSnapshot(taken_at=1.0)
    state = fold_gpu(AppState(host_url="h"), gpu(1500 * 2**20), procs)
    assert state.gpu is not None and state.gpu.system is not None
    first = state.gpu.system
    state = fold_gpu(state, gpu(1600 * 2**20), procs)  # +100 MiB of 24 GiB: under 1 %
    assert state.gpu.system is first
    state = fold_gpu(state, gpu(1500 * 2**20, swap=200 * 2**20), procs)  # swap +200 MiB of 8 GiB: over 1 %
    assert state.gpu.system.swap_used_bytes == 200 * 2**20
    state = fold_gpu(state, gpu(2000 * 2**20, swap=200 * 2**20), procs)  # +500 MiB: shown
    assert state.gpu.system.ram_used_bytes == 2000 * 2**20
