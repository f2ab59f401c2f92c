"""Unit tests of the log parser, one grammar at a time, on real lines.

Lines come from the corpus (tests/fixtures/logs/<file>, named in a comment) or, for formats
the corpus does not contain, from the format strings quoted in docs/ollama-internals.md
(section named in a comment).
"""

from __future__ import annotations

import json
import re
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from kvtop.logparse import (
    Allocation,
    ContextParams,
    DeviceFree,
    Eviction,
    FitOverflow,
    FlashAttention,
    FlashAttentionDecision,
    FlashAttentionForcedOff,
    GinRequest,
    KvSummary,
    KvTypeFallback,
    LoadDecision,
    LoadFailed,
    LoadRequest,
    LogEvent,
    LogParser,
    ModelLoad,
    OffloadedLayers,
    Oom,
    PrefillProgress,
    RequestTiming,
    RunnerReady,
    RunnerStarted,
    SchedulerEstimate,
    ServerConfig,
    ServerListening,
    Truncation,
    UnknownWarning,
    Unload,
    event_to_dict,
    group_loads,
    inspect_lines,
    parse_lines,
)
from kvtop.logparse.values import MIB, go_duration_s, mib_bytes, size_bytes

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def only(kind: type[Any], *lines: str) -> Any:
    """The single event of class ``kind`` parsed from ``lines``."""
    found = [e for e in parse_lines(lines) if isinstance(e, kind)]
    assert len(found) == 1, f"expected one {kind.__name__}, got {found}"
    return found[0]


def corpus_line(stem_prefix: str, contains: str) -> str:
    """The first line of corpus file ``<stem_prefix>*.log`` that contains ``contains``."""
    (path,) = LOGS.glob(f"{stem_prefix}*.log")
    for line in path.read_text(encoding="utf-8").splitlines():
        if contains in line:
            return line
    raise AssertionError(f"{contains!r} not in {path.name}")


# --------------------------------------------------------------------------------------------
# Values


def test_sizes_are_exact_binary_multiples() -> None:
    assert mib_bytes("577.22") == 605259039  # round(577.22 × 1048576)
    assert mib_bytes("4096.00") == 4096 * MIB
    assert size_bytes("1.5 GiB") == 1610612736
    assert size_bytes("0 B") == 0
    assert size_bytes("667.5 MiB") == round(667.5 * MIB)
    assert size_bytes("337.2>") is None  # cut by systemctl (corpus 031)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("22.255653701s", 22.255653701),
        ("444.455595ms", 0.444455595),
        ("31.775µs", 31.775e-6),
        ("1h24m39s", 5079.0),
        ("2m39s", 159.0),
        ("100ns", 1e-7),
        ("bogus", None),
    ],
)
def test_go_durations(text: str, seconds: float | None) -> None:
    got = go_duration_s(text)
    assert got == pytest.approx(seconds) if seconds is not None else got is None


# --------------------------------------------------------------------------------------------
# Wrappers, timestamps, physical-line handling


def test_journald_prefix_and_time() -> None:
    # 004-rocm-0.2-starting-llama-server-cmd-ngl48.log
    line = corpus_line("004", "loaded runners")
    (event,) = [
        e for e in parse_lines([line, corpus_line("004", "starting llama server")]) if isinstance(e, RunnerStarted)
    ]
    assert event.time == datetime(2024, 7, 24, 16, 7, 51, 813000, tzinfo=timezone(timedelta(hours=2)))


def test_journald_year_comes_from_an_earlier_full_timestamp() -> None:
    # 005-rocm-0.2-runner-started-then-cuda-oom-assert.log: "CUDA error" has only the journald stamp
    lines = (LOGS / "005-rocm-0.2-runner-started-then-cuda-oom-assert.log").read_text().splitlines()
    oom = [e for e in parse_lines(lines) if isinstance(e, Oom)]
    assert oom[0].time == datetime(2024, 7, 24, 16, 7, 58)
    assert parse_lines(lines[:1])[0].time is None  # no year known yet
    assert parse_lines(lines[:1], default_year=2024)[0].time == datetime(2024, 7, 24, 16, 7, 57)


@pytest.mark.parametrize(
    ("stem", "contains"),
    [
        ("028", 'msg="starting runner" cmd="/usr/local/bin/ollama runner --ollama-engine --model'),  # "oct." (French)
        ("031", "model request too large"),  # "3月" (Chinese), line cut by systemctl
        ("012", "starting llama server"),  # "> " quote + "<ollama server>" host placeholder
        ("018", "Listening on"),  # docker compose "llm-api-ollama  | "
        ("040", "KV self size"),  # docker compose with 20 leading spaces
    ],
)
def test_localized_and_prefixed_lines_are_unwrapped(stem: str, contains: str) -> None:
    events = parse_lines([corpus_line(stem, contains)])
    assert events, f"no event from {stem}"
    assert not isinstance(events[0], UnknownWarning) or stem == "031"


def test_rsyslog_and_docker_timestamps() -> None:
    # §6/§8: rsyslog ISO prefix; `docker logs --timestamps` nanosecond prefix
    rsyslog = (
        "2024-06-02T18:43:45.123456+02:00 host ollama[123]: time=2024-06-02T18:43:45.633+02:00 level=INFO "
        'source=routes.go:1053 msg="Listening on [::]:11434 (version 0.1.41)"'
    )
    docker = "2024-06-02T16:43:45.633123456Z llama_kv_cache:      CUDA0 KV buffer size =  2000.00 MiB"
    listening = only(ServerListening, rsyslog)
    assert listening.version == "0.1.41"
    alloc = only(Allocation, docker)
    assert (alloc.device, alloc.bytes) == ("CUDA0", 2000 * MIB)
    assert alloc.time == datetime(2024, 6, 2, 16, 43, 45, 633123, tzinfo=timezone.utc)


def test_journald_json_message_string_and_bytes() -> None:
    text = "llama_kv_cache:      CUDA0 KV buffer size =  2000.00 MiB"
    as_bytes = list(text.encode()) + [0xFF]
    lines = [
        json.dumps({"__REALTIME_TIMESTAMP": "1717346625633000", "_PID": "1", "MESSAGE": as_bytes}),
        json.dumps(
            {
                "__REALTIME_TIMESTAMP": "1717346625633000",
                "MESSAGE": 'time=2024-06-02T18:43:45.633Z level=INFO source=routes.go:1053 msg="Listening on [::]:11434 '
                '(version 0.1.41)"',
            }
        ),
    ]
    alloc, listening = parse_lines(lines)
    assert isinstance(alloc, Allocation) and alloc.bytes == 2000 * MIB
    assert alloc.time == datetime.fromtimestamp(1717346625.633, tz=timezone.utc)
    assert isinstance(listening, ServerListening) and listening.version == "0.1.41"


def test_crlf_and_trailing_newlines() -> None:
    # 002-kv-partial-offload-cuda-host-fa1-0.3.log
    line = corpus_line("002", "CUDA0 KV buffer size")
    for ending in ("\r\n", "\n", "\r", ""):
        assert only(Allocation, line + ending).bytes == 6784 * MIB


def test_hard_wrap_inside_a_quoted_value_is_glued() -> None:
    # 022-server-config-windows-fork-new-engine-wrapped.log: wrapped inside "OLLAM" | "A_SCHED_SPREAD"
    lines = (LOGS / "022-server-config-windows-fork-new-engine-wrapped.log").read_text().splitlines()
    parser = LogParser()
    assert parser.feed(lines[0]) == []  # "PS C:\\Users\\user> ollama serve"
    assert parser.feed(lines[1]) == []  # held: the env value is still open
    events = parser.feed(lines[2])
    (config,) = [e for e in events if isinstance(e, ServerConfig)]
    assert config.env["ROCR_VISIBLE_DEVICES"] == ""
    assert config.env["OLLAMA_SCHED_SPREAD"] == "false"
    assert config.line_no == 2
    assert config.complete


def test_hard_wrap_across_a_blank_line_and_between_keys() -> None:
    # 021-server-config-blank-lines-pasted-ctx128000-0.14.2.log: "…:[ollama.com]" | "" | "OLLAMA_SCHED_SPREAD:false …"
    lines = (LOGS / "021-server-config-blank-lines-pasted-ctx128000-0.14.2.log").read_text().splitlines()
    config = only(ServerConfig, *lines)
    assert config.env["OLLAMA_REMOTES"] == "[ollama.com]"
    assert config.env["OLLAMA_SCHED_SPREAD"] == "false"
    assert config.env["no_proxy"] == ""


def test_hard_wrap_between_attributes_with_indented_continuation() -> None:
    # the offload line of corpus 001 as re-posted wrapped in ollama/ollama#9181 (docs/ollama-internals.md §4.2 format)
    lines = [
        (
            "time=2025-02-18T02:29:51.627Z level=INFO source=server.go:130 msg=offload library=cuda "
            "layers.requested=-1 layers.model=81 "
        ),
        '  layers.offload=44 layers.split=11,11,11,11 memory.available="[22.0 GiB 22.0 GiB]" ',
        '  memory.required.full="127.4 GiB" memory.required.partial="87.1 GiB" memory.required.kv="19.5 GiB"',
        'time=2025-02-18T02:29:51.628Z level=INFO source=server.go:182 msg="enabling flash attention"',
    ]
    estimate = only(SchedulerEstimate, *lines)
    assert (estimate.layers_model, estimate.layers_offload) == (81, 44)
    assert estimate.kv_bytes == size_bytes("19.5 GiB")
    assert estimate.available_bytes == (size_bytes("22.0 GiB"),) * 2


def test_wide_record_wrapped_without_trailing_space() -> None:
    # an offload line re-posted wrapped in ollama/ollama#8430 (docs/ollama-internals.md §4.2 format): continuation lines indented by one space
    lines = [
        (
            "time=2025-05-23T17:16:43.377Z level=INFO source=server.go:168 msg=offload library=cuda "
            "layers.requested=49 layers.model=49"
        ),
        ' layers.offload=37 layers.split=37,0 memory.available="[11.5 GiB 4.6 GiB]" memory.gpu_overhead="0 B"',
        ' memory.required.full="14.9 GiB" memory.required.partial="11.4 GiB" memory.required.kv="2.0 GiB"',
        'time=2025-05-23T17:16:43.400Z level=INFO source=server.go:431 msg="loaded runners" count=1',
        "  Device 0: NVIDIA GeForce RTX 4090, compute capability 8.9, VMM: yes",
    ]
    estimate = only(SchedulerEstimate, *lines)
    assert (estimate.layers_model, estimate.layers_offload, estimate.partial_bytes) == (49, 37, size_bytes("11.4 GiB"))
    # a complete estimate is held only until the next line shows it is not continued
    parser = LogParser()
    assert parser.feed(corpus_line("039", "offload to metal")) == []
    assert [type(e) for e in parser.feed(corpus_line("039", "gpuPayloadsDir"))] == [SchedulerEstimate]


def test_cut_lines_are_parsed_as_far_as_they_go() -> None:
    # 031-oom-model-request-too-large-for-system-systemctl-truncated.log: '…available="337.2>'
    lines = (LOGS / "031-oom-model-request-too-large-for-system-systemctl-truncated.log").read_text().splitlines()
    parser = LogParser()
    events = [e for line in lines for e in parser.feed(line)] + parser.flush()
    assert [type(e) for e in events] == [Oom]
    assert events[0].line_no == 3


def test_cut_command_line_is_not_complete() -> None:
    # 011-cuda-starting-llama-server-ngl81-0.1.4x.log, cut before "--parallel"
    line = corpus_line("011", "starting llama server")
    cut = line[: line.index("--verbose")]
    started = only(RunnerStarted, cut)
    assert not started.complete and started.parallel is None
    assert only(RunnerStarted, line).complete


def test_no_raw_contains_control_characters() -> None:
    nasty = [
        (
            'time=2025-04-22T11:21:47.546Z level=WARN source=runner.go:131 msg="truncating input prompt" '
            "limit=2048 prompt=5065 keep=5 new=2048 \x1b[31mred\x1b[0m\x00\x07"
        ),
        (
            "[GIN] 2024/07/10 - 17:33:55 |\x1b[97;42m 200 \x1b[0m|   22.255653701s |       127.0.0.1 |\x1b[97;46m POST    "
            '\x1b[0m "/api/generate"'
        ),
        "llama_kv_cache_init:        CPU KV buffer size =  4096.00 MiB\t\x85",
    ]
    corpus = [line for path in sorted(LOGS.glob("*.log")) for line in path.read_text(encoding="utf-8").splitlines()]
    events = parse_lines(nasty + corpus)
    assert len(events) > 100
    assert {type(e) for e in parse_lines(nasty)} == {Truncation, GinRequest, Allocation}
    for e in events:
        assert not CONTROL.search(e.raw), e
        json.dumps(event_to_dict(e))


# --------------------------------------------------------------------------------------------
# Server lines


def test_server_config_old_go_logger_format() -> None:
    # 019-server-config-old-prefix-format-0.4.log
    config = only(ServerConfig, corpus_line("019", "server config"))
    assert config.env["OLLAMA_NUM_PARALLEL"] == "0"
    assert config.env["OLLAMA_HOST"] == "http://127.0.0.1:11434"
    assert config.env["OLLAMA_ORIGINS"].startswith("[http://localhost ") and config.env["OLLAMA_ORIGINS"].endswith("*]")
    assert config.time == datetime(2024, 11, 11, 21, 50, 18)


def test_server_listening_version() -> None:
    # 033-server-config-fa-true-kv-q8_0-wrapped-0.6.6.log
    assert only(ServerListening, corpus_line("033", "Listening on")).version == "0.6.6"


# --------------------------------------------------------------------------------------------
# Spawn lines per era


def test_runner_started_era_a() -> None:
    # 004-rocm-0.2-starting-llama-server-cmd-ngl48.log
    r = only(RunnerStarted, corpus_line("004", "starting llama server"))
    assert (r.era, r.engine, r.ctx_size, r.parallel, r.n_gpu_layers, r.port) == ("A", "llama", 2048, 1, 48, 36639)
    assert r.model_blob == "sha256-0bd51f8f0c975ce910ed067dcb962a9af05b77bafcdc595ef02178387f10e51d"
    assert r.flash_attn is None and r.complete


def test_runner_started_era_b1_flags() -> None:
    # 001-multigpu-4x-partial-offload-fa-kvtype-unsupported-0.5.log
    r = only(RunnerStarted, corpus_line("001", "starting llama server"))
    assert (r.era, r.ctx_size, r.parallel, r.flash_attn, r.tensor_split, r.batch_size) == (
        "B1",
        64000,
        1,
        "true",
        "11,11,11,11",
        512,
    )
    # 012-cpu-only-newengine-offload-parallel2-quoted.log
    r = only(RunnerStarted, corpus_line("012", "starting llama server"))
    assert (r.era, r.engine, r.parallel, r.no_mmap) == ("B1", "ollama", 2, True)


def test_runner_started_era_b2_windows_path() -> None:
    # 053-newengine-windows-low-ram-gpu-memory-503-busy-2026.log (slog-escaped backslashes)
    r = only(RunnerStarted, corpus_line("053", "starting runner"))
    assert (r.era, r.engine, r.port) == ("B2", "ollama", 62046)
    assert r.model_path is not None and r.model_path.startswith("C:\\Users\\user\\")
    assert r.model_blob == "sha256-b709d81508a078a686961de6ca07a953b895d9b286c46e17f00fb267f4f2d297"


def test_runner_started_era_c_and_mmproj() -> None:
    # 062-era-c-starting-llama-server-vulkan-gemma4-ctx131072-fa-auto-2026.log
    r = only(RunnerStarted, corpus_line("062", "starting llama-server"))
    assert (r.era, r.ctx_size, r.parallel, r.flash_attn, r.batch_size, r.ubatch_size) == (
        "C",
        131072,
        1,
        "auto",
        512,
        512,
    )
    # 061-starting-llama-server-mmproj-vision-ctx16384-0.5.13rc.log: the model is --model, not --mmproj
    r = only(RunnerStarted, corpus_line("061", "starting llama server"))
    assert r.model_blob == "sha256-1aefcd9a8a15091b670951963b5f8a7e6653bb1350345e9621e179685ac9bc5f"
    assert r.mmproj_blob == "sha256-4d464be24899cf8dc1862945432e0cef4366c4181fa38b14754cc9279b727608"


def test_discovery_runner_has_no_model() -> None:
    # 028-newengine-starting-runner-enabling-fa-qwen3vl-0.12.7.log: first "starting runner" has no --model
    r = only(RunnerStarted, corpus_line("028", "--port 44625"))
    assert r.model_blob is None


def test_ancient_runner_start_and_blob_with_colon() -> None:
    # 038-ancient-0.1.0-ggml-runner-json-log-n_ctx2048.log and 037 (sha256: separator)
    assert only(RunnerStarted, corpus_line("038", "starting llama runner")).era == "pre-A"
    load = only(ModelLoad, corpus_line("037", "loading model from"))
    assert load.model_blob == "sha256-e84705205f71dd55be7b24a778f248f0eda9999a125d313358c087e092d83148"


# --------------------------------------------------------------------------------------------
# Loads, allocations, KV, context


def test_load_request_b2() -> None:
    # 058-newengine-hybrid-qwen3-coder-next-kv-q4_0-split.log
    r = only(LoadRequest, corpus_line("058", "load request"))
    assert (r.operation, r.kv_size, r.parallel, r.flash_attention, r.kv_cache_type, r.gpu_layers, r.batch_size) == (
        "commit",
        32768,
        1,
        "Enabled",
        "q4_0",
        20,
        1024,
    )
    # 056: empty KvCacheType means the default
    assert only(LoadRequest, corpus_line("056", "load request")).kv_cache_type == ""
    # FlashAttention:Enabled is passed resolved (an event); Auto is left to llama.cpp (§3.1)
    assert only(FlashAttention, corpus_line("058", "load request")).state == "enabled"
    auto = corpus_line("058", "load request").replace("FlashAttention:Enabled", "FlashAttention:Auto")
    assert not [e for e in parse_lines([auto]) if isinstance(e, FlashAttention)]
    (load,) = group_loads(parse_lines([auto]))
    assert load.flash_attention is None and load.flash_attention_requested == "Auto"
    (load,) = group_loads(parse_lines([auto, "llama_context: Flash Attention was auto, set to disabled"]))
    assert load.flash_attention == "disabled"


def test_load_decisions() -> None:
    # 030-sched-debug-load-idle-timer-windows-no-tz-0.3.log (no time zone), 028, 051
    first = only(LoadDecision, corpus_line("030", "loading first model"))
    assert first.model_blob == "sha256-ff1d1fc78170d787ee1201778e2dd65ea211654ca5fb7d69b5a2e7b123a50373"
    assert first.time == datetime(2024, 8, 4, 6, 18, 50, 451000)
    layers = only(LoadDecision, corpus_line("028", '"model layers"'))
    assert (layers.layers_total, layers.layers_requested) == (49, -1)
    assert only(LoadDecision, corpus_line("051", "new model will fit")).parallel == 1


@pytest.mark.parametrize(
    ("stem", "contains", "component", "device", "nbytes"),
    [
        ("006", "CUDA0 model buffer size", "weights", "CUDA0", mib_bytes("577.22")),
        ("006", "CPU_Mapped model buffer size", "weights", "CPU_Mapped", mib_bytes("520.30")),
        ("002", "CUDA_Host KV buffer size", "kv", "CUDA_Host", 384 * MIB),
        ("045", "CUDA1 compute buffer size", "compute", "CUDA1", 2218 * MIB),
        ("002", "CUDA_Host  output buffer size", "output", "CUDA_Host", mib_bytes("0.15")),
        ("040", "input buffer size", "input", "CUDA_Host", mib_bytes("6.52")),
        ("063", "Vulkan0 compute buffer size", "compute", "Vulkan0", mib_bytes("55.02")),  # sched_reserve (C)
        ("056", 'msg="kv cache" device=CPU', "kv", "CPU", size_bytes("1.5 GiB")),  # device.go (B2)
        ("054", "buffer=CUDA1", "weights", "CUDA1", size_bytes("11.0 GiB")),  # PR-build key
        ("054", "compute graph", "compute", "CUDA0", 0),
    ],
)
def test_allocations(stem: str, contains: str, component: str, device: str, nbytes: int) -> None:
    a = only(Allocation, corpus_line(stem, contains))
    assert (a.component, a.device, a.bytes) == (component, device, nbytes)


def test_old_llama_cpp_weights_line_without_model_word() -> None:
    # §4.5 (llm_load_tensors ≤ 2024-04): "llm_load_tensors:        CPU buffer size = 38110.61 MiB"
    a = only(Allocation, "llm_load_tensors:        CPU buffer size = 38110.61 MiB")
    assert (a.component, a.device, a.bytes) == ("weights", "CPU", mib_bytes("38110.61"))


def test_kv_summaries() -> None:
    # 002: KV self size with types
    s = only(KvSummary, corpus_line("002", "KV self size"))
    assert (s.size_bytes, s.k_type, s.v_type, s.k_bytes) == (7168 * MIB, "f16", "f16", 3584 * MIB)
    # 006: kv_size line (cells and types, no size)
    s = only(KvSummary, corpus_line("006", "kv_size = 32768"))
    assert (s.size_bytes, s.cells, s.layers, s.k_type) == (None, 32768, 24, "f16")
    # 043: size with cells/layers/seqs (unified: 4/1) and the recurrent state
    s = only(KvSummary, corpus_line("043", "llama_kv_cache: size"))
    assert (s.size_bytes, s.cells, s.layers, s.seqs, s.streams, s.recurrent) == (16384 * MIB, 262144, 16, 4, 1, False)
    r = only(KvSummary, corpus_line("043", "llama_memory_recurrent"))
    assert r.recurrent and r.size_bytes == mib_bytes("598.50")
    # 037: 2023 "kv self size = 650.00 MB" (MB is MiB)
    assert only(KvSummary, corpus_line("037", "kv self size")).size_bytes == 650 * MIB


def test_kv_summary_with_types_b2_format() -> None:
    # §4.5 v0.11.5+ format
    s = only(
        KvSummary,
        "llama_kv_cache: size = 1024.00 MiB (  8192 cells,  32 layers,  4/4 seqs), "
        "K (q8_0):  512.00 MiB, V (q8_0):  512.00 MiB",
    )
    assert (s.cells, s.seqs, s.streams, s.k_type, s.v_type) == (8192, 4, 4, "q8_0", "q8_0")


def test_context_params() -> None:
    # 008: n_ctx / n_ctx_per_seq; 065: n_ctx_seq (v0.13.4+ name); 063: padded names (C)
    assert only(ContextParams, corpus_line("008", "n_ctx_per_seq = 2048")).n_ctx_per_seq == 2048
    assert only(ContextParams, corpus_line("065", "n_ctx_seq")).n_ctx_per_seq == 32768
    assert only(ContextParams, corpus_line("065", "n_seq_max")).n_seq_max == 1
    assert only(ContextParams, corpus_line("063", "kv_unified")).kv_unified == "false"
    assert only(ContextParams, corpus_line("037", "n_ctx      = 2048")).n_ctx == 2048  # 2023 hparams
    # 008 (ollama/ollama#9362): the "<" warning says the per-slot context and the training context
    under = only(ContextParams, corpus_line("008", "n_ctx_train (131072)"))
    assert (under.n_ctx_per_seq, under.n_ctx_train, under.n_ctx) == (2048, 131072, None)


def test_offloaded_layers_and_fit_overflow() -> None:
    # 006 (llama.cpp load_tensors), 032 (Ollama engine ggml.go)
    assert (only(OffloadedLayers, corpus_line("006", "offloaded")).n, 25) == (25, 25)
    o = only(OffloadedLayers, corpus_line("032", "offloaded 29/37"))
    assert (o.n, o.total) == (29, 37)
    # §4.5 Era C fit line
    f = only(
        FitOverflow,
        "common_params_fit_impl:   - ROCm0 (AMD Radeon RX 7900 XTX): 25 layers ( 5 overflowing),  "
        "11065 MiB used,   1036 MiB free",
    )
    assert (f.device, f.layers, f.overflowing) == ("ROCm0", 25, 5)


def test_device_free() -> None:
    # §4.5: llama_model_load_from_file_impl
    d = only(
        DeviceFree,
        "llama_model_load_from_file_impl: using device CUDA0 (NVIDIA GeForce RTX 4090) (0000:01:00.0) - 15221 MiB free",
    )
    assert (d.device, d.description, d.free_bytes) == ("CUDA0", "NVIDIA GeForce RTX 4090", 15221 * MIB)


def test_scheduler_estimates() -> None:
    # 001 (msg=offload), 012 (partial "0 B" is exact), 039 (msg="offload to metal")
    e = only(SchedulerEstimate, corpus_line("001", "msg=offload"))
    assert (e.library, e.layers_model, e.layers_offload, e.kv_bytes) == ("cuda", 81, 44, size_bytes("19.5 GiB"))
    assert e.available_bytes == (size_bytes("22.0 GiB"),) * 4
    assert only(SchedulerEstimate, corpus_line("012", "msg=offload")).partial_bytes == 0
    assert only(SchedulerEstimate, corpus_line("039", "offload to metal")).library == "metal"


# --------------------------------------------------------------------------------------------
# Flash attention and KV types


def test_flash_attention_resolutions() -> None:
    # 002: flash_attn = 1; 063: resolve_fused_ops; 065: "auto" resolves nothing
    assert only(FlashAttention, corpus_line("002", "flash_attn = 1")).state == "enabled"
    assert only(FlashAttention, corpus_line("063", "resolve_fused_ops: Flash Attention enabled")).state == "enabled"
    assert not [e for e in parse_lines([corpus_line("065", "flash_attn")]) if isinstance(e, FlashAttention)]
    assert not parse_lines([corpus_line("063", "fused Gated Delta Net (chunked) enabled")])
    # §4.6: the auto resolution wording
    assert only(FlashAttention, "llama_context: Flash Attention was auto, set to disabled").state == "disabled"


def test_flash_attention_forced_off_and_decision() -> None:
    # 023 (Grok), 025 (head dims), 001 (Ollama's decision)
    off = only(FlashAttentionForcedOff, corpus_line("023", "forcing off"))
    assert "Grok" in off.reason and off.source == "llama.cpp"
    assert only(FlashAttention, corpus_line("025", "forcing off")).state == "disabled"
    assert only(FlashAttentionDecision, corpus_line("001", "enabling flash attention")).state == "enabled"
    ollama_off = only(
        FlashAttentionForcedOff,
        "time=2024-06-01T10:00:00Z level=WARN source=server.go:190 "
        'msg="flash attention enabled but not supported by gpu"',
    )
    assert ollama_off.source == "ollama"


def test_kv_type_fallback_and_the_spurious_warning() -> None:
    # §3.2 wording; 001 holds Ollama's spurious type="" warning, which is no fallback
    f = only(
        KvTypeFallback,
        "time=2025-01-01T00:00:00Z level=WARN source=server.go:200 "
        'msg="quantized kv cache requested but flash attention disabled" type=q8_0',
    )
    assert f.requested == "q8_0"
    spurious = parse_lines([corpus_line("001", "kv cache type not supported")])
    assert [type(e) for e in spurious] == [UnknownWarning]
    g = only(
        KvTypeFallback,
        "time=2025-08-20T00:00:00Z level=WARN source=server.go:210 "
        'msg="model only supports non-quantized cache types " mode=gptoss',
    )
    assert g.requested is None


# --------------------------------------------------------------------------------------------
# Requests


def test_truncations() -> None:
    # 014 (B), 017 (A "input truncated"), §4.7 llama-server (C)
    t = only(Truncation, corpus_line("014", "truncating input prompt"))
    assert (t.limit, t.prompt, t.keep, t.new) == (2048, 5065, 5, 2048)
    t = only(Truncation, corpus_line("017", "input truncated"))
    assert (t.limit, t.prompt, t.keep, t.new) == (2048, None, 4, None)
    assert t.time == datetime.fromtimestamp(1721345155, tz=timezone.utc)
    t = only(
        Truncation,
        "slot update_slots: id  0 | task 0 | input truncated, n_ctx = 4096, n_keep = 0, "
        "n_left = 4096, n_prompt_tokens = 2048",
    )
    assert (t.limit, t.keep, t.new) == (4096, 0, 2048)


def test_request_timing_era_c_one_event_per_request() -> None:
    # §4.10 llama-server slot print_timing lines
    lines = [
        (
            "slot print_timing: id  0 | task 3 | prompt eval time =     519.73 ms /    13 tokens "
            "(   39.98 ms per token,    25.01 tokens per second)"
        ),
        (
            "slot print_timing: id  0 | task 3 |        eval time =    1234.56 ms /    50 tokens "
            "(   24.69 ms per token,    40.50 tokens per second)"
        ),
        "slot print_timing: id  0 | task 3 |       total time =    1754.29 ms /    63 tokens",
    ]
    t = only(RequestTiming, *lines)
    assert (t.prompt_tokens, t.prompt_tps, t.eval_tokens, t.eval_tps, t.slot, t.task) == (13, 25.01, 50, 40.5, 0, 3)


def test_request_timing_older_layouts() -> None:
    # §4.10: older llama-server (unprefixed lines after a header), Era A [print_timings], llama_print_timings
    older = only(
        RequestTiming,
        "slot print_timing: id  1 | task 7 | ",
        "prompt eval time =     100.00 ms /    10 tokens (   10.00 ms per token,   100.00 tokens per second)",
        "       eval time =     200.00 ms /    20 tokens (   10.00 ms per token,   100.00 tokens per second)",
        "      total time =     300.00 ms /    30 tokens",
    )
    assert (older.slot, older.task, older.prompt_tokens, older.eval_tokens) == (1, 7, 10, 20)
    era_a = only(
        RequestTiming,
        "INFO [print_timings] prompt eval time     =     519.73 ms /    13 tokens (   39.98 ms per token,    "
        '25.01 tokens per second) | tid="140" timestamp=1721345155 slot_id=0 task_id=5',
        "INFO [print_timings] generation eval time =    1234.56 ms /    50 runs   (   24.69 ms per token,    "
        '40.50 tokens per second) | tid="140" timestamp=1721345156 slot_id=0 task_id=5',
    )
    assert (era_a.prompt_tokens, era_a.eval_tokens, era_a.eval_tps, era_a.task) == (13, 50, 40.5, 5)
    embedding = only(
        RequestTiming,
        "llama_print_timings: prompt eval time =  20.00 ms /  8 tokens "
        "(    2.50 ms per token,   400.00 tokens per second)",
        "llama_print_timings:       total time =      25.00 ms /     8 tokens",
    )
    assert (embedding.prompt_tokens, embedding.eval_tokens) == (8, None)


def test_prefill_progress() -> None:
    # §4.10 llama-server progress line
    p = only(
        PrefillProgress,
        "slot update_slots: id  0 | task 0 | prompt processing progress, n_past = 2048, "
        "n_tokens = 2048, progress = 0.250000",
    )
    assert (p.slot, p.task, p.n_past, p.n_tokens, p.progress) == (0, 0, 2048, 2048, 0.25)


def test_gin_requests() -> None:
    # 015 (latency in hours), 053 (503)
    g = only(GinRequest, corpus_line("015", "1h24m39s"))
    assert (g.status, g.latency_s, g.method, g.path, g.client) == (200, 5079.0, "POST", "/api/chat", "192.0.2.105")
    assert only(GinRequest, corpus_line("053", "[GIN]")).status == 503


# --------------------------------------------------------------------------------------------
# Scheduler and failures


def test_eviction_unload_and_ready() -> None:
    # 050 (DEBUG eviction sequence with the runner group), 049 and 010 (unloads), 035 (finished setting up)
    ev = only(Eviction, corpus_line("050", "found an idle runner"))
    assert ev.pid == 79 and ev.model_blob == "sha256-0800cbac9c2064dde519420e75e512a83cb360de3ad5df176185dc69652fc515"
    assert only(Unload, corpus_line("049", "didn't recover")).model_blob is not None
    assert only(Unload, corpus_line("010", "changing loaded model")).reason == "changing loaded model"
    ready = only(RunnerReady, corpus_line("035", "finished setting up runner"))
    assert ready.model_blob == "sha256-667b0c1932bc6ffc593ed1d03f895bf2dc8dc6df21db3042284a6f4416b06a29"
    assert only(RunnerReady, corpus_line("035", "llama runner started")).seconds == 2.75


@pytest.mark.parametrize(
    ("stem", "contains", "kind"),
    [
        ("005", "CUDA error: out of memory", Oom),
        ("009", "cudaMalloc failed", Oom),
        ("009", "failed to allocate ROCm0 buffer", Oom),
        ("009", "failed to allocate compute buffers", Oom),
        ("031", "model request too large for system", Oom),
        ("009", "failed to create context with model", LoadFailed),
        ("009", '"msg":"unable to load model"', LoadFailed),  # JSON runner line
        ("009", "error starting llama server", LoadFailed),
        ("023", "V cache quantization requires flash_attn", LoadFailed),
        ("023", "panic: unable to create llama context", LoadFailed),
    ],
)
def test_oom_and_load_failures(stem: str, contains: str, kind: type[Any]) -> None:
    only(kind, corpus_line(stem, contains))


def test_load_failed_names_the_blob() -> None:
    # 009: the blob only appears in the failure line
    f = only(LoadFailed, corpus_line("009", "failed to create context with model"))
    assert f.model_blob == "sha256-e9e56e8bb5f0fcd4860675e6837a8f6a94e659f5fa7dce6a1076279336320f2b"


def test_unknown_warnings_and_silent_lines() -> None:
    # 053: WARN with no model; 036: INFO lines and Metal init lines give nothing
    w = only(UnknownWarning, corpus_line("053", "unable to refresh free memory"))
    assert (w.level, w.message, w.source) == (
        "WARN",
        "unable to refresh free memory, using old values",
        "runner.go:356",
    )
    quiet = parse_lines((LOGS / "036-metal-partial-offload-10of29-memory-pressure-0.12.log").read_text().splitlines())
    assert [type(e) for e in quiet] == [GinRequest]
    assert only(UnknownWarning, corpus_line("005", "GGML_ASSERT")).level == "ERROR"


# --------------------------------------------------------------------------------------------
# Grouping


def _loads(lines: list[str]) -> list[Any]:
    return group_loads(parse_lines(lines))


def test_probe_pass_is_replaced_and_iswa_caches_add_up() -> None:
    # §1.2: llama-server prints a fit/probe pass first; §4.5: iSWA prints two KV caches per device
    lines = [
        "load_tensors:        CUDA0 model buffer size =  1000.00 MiB",
        "llama_kv_cache:      CUDA0 KV buffer size =   100.00 MiB",
        "sched_reserve:      CUDA0 compute buffer size =    10.00 MiB",
        "load_tensors:        CUDA0 model buffer size =  1200.00 MiB",
        "load_tensors:   CPU_Mapped model buffer size =   300.00 MiB",
        "llama_kv_cache:      CUDA0 KV buffer size =   256.00 MiB",
        "llama_kv_cache: size =  256.00 MiB (  4096 cells,   8 layers,  1/1 seqs), K (f16):  128.00 MiB, V (f16):  128.00 MiB",
        "llama_kv_cache:      CUDA0 KV buffer size =    64.00 MiB",
        "llama_kv_cache: size =   64.00 MiB (  1024 cells,  24 layers,  1/1 seqs), K (f16):   32.00 MiB, V (f16):   32.00 MiB",
        "sched_reserve:      CUDA0 compute buffer size =    20.00 MiB",
    ]
    (load,) = _loads(lines)
    assert dict(load.memory["weights"]) == {"CUDA0": 1200 * MIB, "CPU_Mapped": 300 * MIB}
    assert dict(load.memory["kv"]) == {"CUDA0": 320 * MIB}
    assert dict(load.memory["compute"]) == {"CUDA0": 20 * MIB}
    assert load.kv_bytes == 320 * MIB and load.kv_bytes_stated
    assert load.era == "C"


def test_a_new_spawn_starts_a_new_load_and_discovery_does_not() -> None:
    # 028 (discovery + model runner) followed by 004's spawn
    lines = (LOGS / "028-newengine-starting-runner-enabling-fa-qwen3vl-0.12.7.log").read_text().splitlines()
    lines.append(corpus_line("004", "starting llama server"))
    first, second = _loads(lines)
    assert first.flash_attention == "enabled" and first.era == "B2"
    assert second.flash_attention == "disabled" and second.era == "A"


def test_incidents_are_counted_once() -> None:
    # 009: three OOM lines and three failure lines are one OOM and one load failure
    doc = inspect_lines((LOGS / "009-rocm-oom-compute-buffer-fallback-0.1.33pre.log").read_text().splitlines())
    assert [e["kind"] for e in doc["events"]] == ["oom", "load_failed"]
    assert doc["loads"][0]["findings"][0].startswith("out of memory")


def test_feed_returns_events_as_lines_complete() -> None:
    parser = LogParser()
    # 014: a complete slog record yields its event at once
    out: list[LogEvent] = parser.feed(corpus_line("014", "truncating input prompt") + "\n")
    assert [type(e) for e in out] == [Truncation]
    assert parser.flush() == []
    assert parser.line_no == 1


def test_logparse_is_pure() -> None:
    """kvtop.logparse imports no UI, network or I/O-heavy library (CONTRIBUTING.md "Layers": pure)."""
    import subprocess

    code = (
        "import sys, kvtop.logparse; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('textual', 'rich', 'httpx', 'psutil', 'pynvml')]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_end_batch_releases_a_held_record_but_keeps_timing_state() -> None:
    # 062: the Era C spawn line is long enough to be held for a possible wrap
    parser = LogParser()
    assert parser.feed(corpus_line("062", "starting llama-server")) == []
    assert [type(e) for e in parser.end_batch()] == [RunnerStarted]
    assert (
        parser.feed(
            "slot print_timing: id  0 | task 3 | prompt eval time =     519.73 ms /    13 tokens "
            "(   39.98 ms per token,    25.01 tokens per second)"
        )
        == []
    )
    assert parser.end_batch() == []
    (timing,) = parser.feed(
        "slot print_timing: id  0 | task 3 |        eval time =    1234.56 ms /    50 tokens "
        "(   24.69 ms per token,    40.50 tokens per second)"
    )
    assert isinstance(timing, RequestTiming) and timing.prompt_tokens == 13 and timing.eval_tokens == 50


def test_cut_and_mangled_lines_never_raise() -> None:
    """Every corpus line cut at 25 places, and seeded random edits: no exception, no parser error."""
    import random

    corpus = [line for path in sorted(LOGS.glob("*.log")) for line in path.read_text(encoding="utf-8").splitlines()]
    rng = random.Random(7)
    alphabet = ' "=:[]{}\\|>\t\x1b\x00MiBGiB0123456789.-_/'
    batches: list[list[str]] = []
    for line in corpus:
        step = max(1, len(line) // 25)
        batches.extend([line[:cut], line] for cut in range(0, len(line) + 1, step))
    for _ in range(1500):
        chars = list(rng.choice(corpus))
        for _ in range(rng.randint(1, 5)):
            pos = rng.randrange(len(chars) + 1)
            if chars and rng.random() < 0.4:
                del chars[min(pos, len(chars) - 1)]
            else:
                chars.insert(pos, rng.choice(alphabet))
        batches.append([rng.choice(corpus), "".join(chars), " " + "".join(chars), rng.choice(corpus)])
    for batch in batches:
        parser = LogParser()
        events = [e for line in batch for e in parser.feed(line)] + parser.flush()
        assert parser.errors == 0, (parser.last_error, batch)
        group_loads(events)
