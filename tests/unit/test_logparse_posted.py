"""Parser gaps that real logs expose, each on real posted lines.

The logs are in ``tests/fixtures/logs/posted/``; each file's ``#`` header names the GitHub issue the lines
were copied from and what was left out. ``tests/fixtures/logs/llama-server-runs/`` holds the stderr of a real
llama-server run (the test extra's build) where no posted log had the lines complete. Where no posted log with a line could be found, the test says
so and quotes the line shape from the code that prints it (Ollama's ``llm/server.go``, its 2024
``llm/ext_server/server.cpp``) or from ``docs/ollama-internals.md``, which the project quotes as observed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvtop.logparse import (
    ContextOverTraining,
    ContextParams,
    FitOverflow,
    KvSummary,
    LogParser,
    ModelLoad,
    RunnerStarted,
    UnknownWarning,
    group_loads,
    inspect_lines,
    parse_lines,
)
from kvtop.logparse.values import MIB
from kvtop.model.eventtext import describe

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
POSTED = LOGS / "posted"


def posted(name: str) -> list[str]:
    """The log lines of ``posted/<name>*.log`` (its ``#`` header left out)."""
    (path,) = POSTED.glob(f"{name}*.log")
    lines = path.read_text(encoding="utf-8").splitlines()
    while lines and lines[0].startswith("#"):
        lines.pop(0)
    return lines


def corpus(stem_prefix: str) -> list[str]:
    (path,) = LOGS.glob(f"{stem_prefix}*.log")
    return path.read_text(encoding="utf-8").splitlines()


def one_load(lines: list[str]) -> Any:
    loads = group_loads(parse_lines(lines))
    assert len(loads) == 1, loads
    return loads[0]


# --------------------------------------------------------------------------------------------
# 1. A spawn line hard-wrapped right after its message


def test_spawn_line_wrapped_before_cmd_keeps_blob_context_slots_and_fa() -> None:
    """ollama/ollama#8525's spawn record, wrapped after ``msg="starting llama server"``."""
    lines = posted("ollama-8525")
    started = [e for e in parse_lines(lines) if isinstance(e, RunnerStarted)]
    assert len(started) == 1
    s = started[0]
    assert s.line_no == 1 and s.complete
    assert s.model_blob == "sha256-5c56bb0256a2c402e95282a29bb5cb747bb805eda0e14a84b1f6c594a297ec1a"
    assert (s.ctx_size, s.parallel, s.n_gpu_layers, s.batch_size, s.threads, s.port) == (8192, 4, 41, 512, 8, 41813)
    assert s.cmd is not None and "--ctx-size 8192" in s.cmd
    load = one_load(lines)
    assert load.model_blob == s.model_blob
    assert (load.num_ctx_total, load.parallel, load.num_ctx_per_seq) == (8192, 4, 2048)
    assert load.flash_attention == "disabled"  # a complete B1 command line without --flash-attn
    assert load.era == "B1" and load.port == 41813


def test_spawn_line_wrapped_before_cmd_streamed_line_by_line() -> None:
    """A live follower gets the spawn event once the continuation lines are read, not before."""
    lines = posted("ollama-8525")
    parser = LogParser()
    assert parser.feed(lines[0]) == []  # held: cmd=… follows
    assert parser.feed(lines[1]) == []  # the quoted command is still open
    assert parser.feed(lines[2]) == []  # complete, but a wide record may go on with more attributes
    out = parser.feed(lines[3])  # the next record releases it ("loaded runners" is no event)
    assert [type(e) for e in out] == [RunnerStarted]
    assert (out[0].line_no, out[0].parallel) == (1, 4)
    parser = LogParser()
    for line in lines[:3]:
        parser.feed(line)
    (held,) = parser.end_batch()  # a live follower's batch ends: nothing waits for the next batch
    assert isinstance(held, RunnerStarted) and held.ctx_size == 8192


@pytest.mark.parametrize("msg", ["starting runner", "starting llama-server"])
def test_other_spawn_messages_wrapped_before_cmd(msg: str) -> None:
    """The B2 and Era C spawn messages, wrapped the same way (#8525's command under their message)."""
    lines = posted("ollama-8525")
    lines[0] = lines[0].replace("starting llama server", msg)
    (s,) = [e for e in parse_lines(lines) if isinstance(e, RunnerStarted)]
    assert (s.message, s.ctx_size, s.parallel) == (msg, 8192, 4)


def test_spawn_line_wrapped_before_a_flag_without_indentation() -> None:
    """#8525's command wrapped before ``--ctx-size`` with no indentation: the line break was the space."""
    lines = posted("ollama-8525")
    lines[2] = lines[2].lstrip()
    (s,) = [e for e in parse_lines(lines) if isinstance(e, RunnerStarted)]
    assert (s.ctx_size, s.parallel, s.port) == (8192, 4, 41813)
    assert s.model_path == "/home/khammitt/.ollama/models/blobs/" + s.model_blob


def test_a_complete_spawn_message_without_cmd_is_not_held_past_the_next_record() -> None:
    # 2023's "starting llama runner" has no cmd= and is not one of the wrapped spawn messages (corpus 038 shape)
    parser = LogParser()
    out = parser.feed('time=2024-01-01T00:00:00Z level=INFO source=llama.go:300 msg="starting llama runner"')
    assert [type(e) for e in out] == [RunnerStarted]


# --------------------------------------------------------------------------------------------
# 2. llama_kv_cache_unified: kv_size = N, type_k = …, with no offload = field


def test_kv_size_line_without_offload_gives_cells_and_types() -> None:
    """ollama/ollama#10999 (Ollama 0.9.0): ``kv_size = 8192, type_k = 'f16', type_v = 'f16', n_layer = 28, …``."""
    (kv,) = [e for e in parse_lines(posted("ollama-10999")) if isinstance(e, KvSummary)]
    assert (kv.cells, kv.layers, kv.k_type, kv.v_type, kv.size_bytes) == (8192, 28, "f16", "f16", None)
    assert kv.grammar == "llama_kv_cache_unified" and kv.line_no == 7


def test_kv_size_line_without_offload_in_a_load() -> None:
    """rjmalagon/ollama-linux-amd-apu#9 (ROCm): the load's K/V types come from that line."""
    load = one_load(posted("rjmalagon-ollama-linux-amd-apu-9"))
    assert (load.kv_type_k, load.kv_type_v) == ("f16", "f16")
    assert (load.num_ctx_total, load.parallel, load.num_ctx_per_seq, load.n_ctx_train) == (8192, 2, 4096, 40960)
    assert dict(load.memory["kv"]) == {"ROCm0": 1152 * MIB}
    assert (load.layers_offloaded, load.layers_total, load.flash_attention) == (37, 37, "disabled")


# --------------------------------------------------------------------------------------------
# 3. n_ctx_per_seq (N) < n_ctx_train (M) and n_ctx_seq (N) < n_ctx_train (M)


def test_under_training_line_gives_per_seq_context_and_training_context() -> None:
    """ollama/ollama#10999: ``n_ctx_per_seq (4096) < n_ctx_train (40960)``; with the kv_size line, 2 slots."""
    events = parse_lines(posted("ollama-10999"))
    (p,) = [e for e in events if isinstance(e, ContextParams) and e.n_ctx_train is not None]
    assert (p.n_ctx_per_seq, p.n_ctx_train, p.n_ctx, p.grammar) == (4096, 40960, None, "llama_context")
    assert not [e for e in events if isinstance(e, ContextOverTraining)]  # not a finding
    load = one_load(posted("ollama-10999"))
    assert (load.num_ctx_total, load.parallel, load.num_ctx_per_seq) == (8192, 2, 4096)
    assert (load.kv_type_k, load.kv_type_v, load.n_ctx_train) == ("f16", "f16", 40960)
    assert not [f for f in load.findings() if "training" in f]


def test_under_training_line_n_ctx_seq_spelling() -> None:
    """The v0.13.4+ spelling, from a real llama-server run (tests/fixtures/llama_server/q8_0-fa-on-np2.log)."""
    path = LOGS.parent / "llama_server" / "q8_0-fa-on-np2.log"
    line = next(x for x in path.read_text(encoding="utf-8").splitlines() if "< n_ctx_train" in x)
    (p,) = parse_lines([line])
    assert isinstance(p, ContextParams)
    assert (p.n_ctx_per_seq, p.n_ctx_train) == (4096, 16384)


# --------------------------------------------------------------------------------------------
# 4. Interleaved SWA: two caches, non-SWA then SWA


def test_iswa_creation_lines_are_kv_summaries_marked_swa() -> None:
    """ollama/ollama#16480 (0.30.2, gpt-oss): ``creating non-SWA KV cache, size = 131072 cells`` / ``… SWA … 1280``."""
    marks = [
        (e.cells, e.swa) for e in parse_lines(posted("ollama-16480")) if isinstance(e, KvSummary) and e.swa is not None
    ]
    assert marks == [(131072, False), (1280, True)]


def test_iswa_load_context_is_the_non_swa_cache_and_kv_is_both() -> None:
    """ollama/ollama#16480: context 2 × 131072 from the non-SWA cache; KV = 9216 + 90 MiB (both buffers)."""
    load = one_load(posted("ollama-16480"))
    assert (load.num_ctx_total, load.parallel, load.num_ctx_per_seq) == (262144, 2, 131072)
    assert (load.kv_type_k, load.kv_type_v) == ("f16", "f16")
    assert dict(load.memory["kv"]) == {"ROCm0": (9216 + 90) * MIB}
    # the SWA cache's size line is not in the copy: the buffers (both caches) are the KV total, not 9216 MiB
    assert load.kv_bytes == (9216 + 90) * MIB
    assert load.flash_attention == "enabled"


def test_iswa_real_run_context_from_non_swa_cache_and_kv_from_both() -> None:
    """A real llama-server run on an iSWA model (tests/fixtures/logs/llama-server-runs/, both caches' size lines):
    ``size = 1.06 MiB (4096 cells, 1 layers, 2/2 seqs)`` then ``size = 1.00 MiB (768 cells, 5 layers, 2/2 seqs)``.
    The SWA cache's 768 cells used to become the context (1536 = 768 × 2)."""
    path = LOGS / "llama-server-runs" / "gemma3-iswa-q8_0-fa-on-np2.log"
    lines = [x for x in path.read_text(encoding="utf-8").splitlines() if not x.startswith("#")]
    summaries = [(e.cells, e.layers, e.seqs, e.swa) for e in parse_lines(lines) if isinstance(e, KvSummary)]
    assert summaries == [(4096, None, None, False), (4096, 1, 2, None), (768, None, None, True), (768, 5, 2, None)]
    load = one_load(lines)
    assert (load.num_ctx_total, load.parallel, load.num_ctx_per_seq) == (8192, 2, 4096)
    assert (load.kv_type_k, load.kv_type_v, load.flash_attention, load.n_ctx_train) == (
        "q8_0",
        "q8_0",
        "enabled",
        16384,
    )
    assert load.kv_bytes == round(1.06 * MIB) + round(1.00 * MIB) and load.kv_bytes_stated
    assert dict(load.memory["kv"]) == {"CPU": round(1.06 * MIB) + round(1.00 * MIB)}
    assert load.model_blob == "sha256-54e93e7aded92774254cafb64e3fb47db070ee62bee3fdb786ac7615dd7f4849"


# --------------------------------------------------------------------------------------------
# 5. A fit pass followed by llama_model_loader is one load

FIT_LINE = "common_params_fit_impl:   - ROCm0 (AMD …): 25 layers ( 5 overflowing),  11065 MiB used,   1036 MiB free"
"""The Era C fit line as docs/ollama-internals.md §4.5 quotes it (observed; the device description elided there).
No posted log with an overflowing fit line could be found, so it is inserted into #16416's real fit pass."""


def test_fit_pass_then_model_loader_is_one_load() -> None:
    """ollama/ollama#16416 (0.30): the fit pass, then ``llama_model_loader`` of the same runner."""
    lines = posted("ollama-16416")
    load = one_load(lines)
    assert load.model_blob == "sha256-6be6d66a3f546d8c19b130dc41dc24b2fc159f84ffbc76a0ee0676205083cf5a"


def test_fit_pass_with_overflowing_layers_then_model_loader_is_one_load() -> None:
    lines = posted("ollama-16416")
    at = next(i for i, x in enumerate(lines) if "projected to use" in x)
    lines.insert(at + 1, FIT_LINE)
    events = parse_lines(lines)
    (fit,) = [e for e in events if isinstance(e, FitOverflow)]
    assert (fit.device, fit.layers, fit.overflowing) == ("ROCm0", 25, 5)
    assert (
        len([e for e in events if isinstance(e, ModelLoad) and e.path is not None]) == 1
    )  # (and the dump's first line)
    load = one_load(lines)
    assert load.fit_overflowing == 5
    assert load.model_blob == "sha256-6be6d66a3f546d8c19b130dc41dc24b2fc159f84ffbc76a0ee0676205083cf5a"
    assert "spill: 5 layers overflow the GPU (llama-server fit)" in load.findings()


def test_fit_pass_after_the_spawn_line_is_the_same_load() -> None:
    """Corpus 062's Era C spawn line (ollama/ollama#18123), the fit line, then a model-loader line naming the
    spawned blob (#16416's line with 062's blob: the loader prints the path of the ``--model`` it was given)."""
    spawn = corpus("062")[0]
    loader = posted("ollama-16416")[-2].replace(
        "sha256-6be6d66a3f546d8c19b130dc41dc24b2fc159f84ffbc76a0ee0676205083cf5a",
        "sha256-4c27e0f5b5adf02ac956c7322bd2ee7636fe3f45a8512c9aba5385242cb6e09a",
    )
    load = one_load([spawn, FIT_LINE, loader])
    assert load.model_blob == "sha256-4c27e0f5b5adf02ac956c7322bd2ee7636fe3f45a8512c9aba5385242cb6e09a"
    assert (load.num_ctx_total, load.parallel, load.fit_overflowing) == (131072, 1, 5)


# --------------------------------------------------------------------------------------------
# 6. "flash attention enabled but not supported by model|gpu" resolves flash attention to disabled

# No posted log with the line could be read (ollama/ollama#11471 reports it, but its text was not available here).
# The record is slog.Warn("flash attention enabled but not supported by model") of Ollama's llm/server.go (v0.1.39+),
# in the shape of corpus 028's own records (same time, source file); it stands where 028's "enabling flash attention"
# (the branch taken when flash attention is supported) is.


def _corpus_028_with(warning: str) -> list[str]:
    lines = corpus("028")
    at = next(i for i, x in enumerate(lines) if 'msg="enabling flash attention"' in x)
    head = lines[at].split(" level=", 1)[0]
    lines[at] = f'{head} level=WARN source=server.go:211 msg="{warning}"'
    return lines


@pytest.mark.parametrize("what", ["model", "gpu"])
def test_flash_attention_not_supported_resolves_disabled(what: str) -> None:
    warning = f"flash attention enabled but not supported by {what}"
    loads = group_loads(parse_lines(_corpus_028_with(warning)))
    (load,) = loads  # 028: the discovery runner is not a load
    assert load.flash_attention == "disabled"
    assert load.model_blob == "sha256-b1da6f96a2e40e5db05b6066d799c69411225b336bfa20ef1b002c223ed4b190"
    assert [e.kind for e in load.events] == ["flash_attention_forced_off"]
    assert f"flash attention forced off: {warning}" in load.findings()


def test_flash_attention_not_supported_before_an_a_era_spawn_keeps_ollamas_reason() -> None:
    """Corpus 004 (ollama/ollama#5913, a complete spawn line without --flash-attn) after the warning."""
    warning = 'time=2024-07-24T16:07:51.812+02:00 level=WARN source=server.go:190 msg="flash attention enabled but not supported by gpu"'
    spawn = next(x for x in corpus("004") if "starting llama server" in x)
    load = one_load([warning, spawn])
    assert load.flash_attention == "disabled"
    assert load.flash_attention_reason == "flash attention enabled but not supported by gpu"


# --------------------------------------------------------------------------------------------
# 7. The 2024 server's slot lines give slots and per-slot context

# No posted log with these lines could be found. Their shape is the code that prints them: Ollama's
# llm/ext_server/server.cpp (v0.1.2x) `LOG_INFO("initializing slots", {{"n_slots", params.n_parallel}})` and
# `LOG_INFO("new slot", {{"slot_id", slot.id}, {"n_ctx_slot", slot.n_ctx}})`, written by utils.hpp:server_log as a
# JSON object with sorted keys (function, level, line, msg, then the extra keys, tid, timestamp).
# tid and timestamp are those of the same server's posted update_slots lines in
# ollama/ollama#2805; the "line" numbers are placeholders (they differ between builds and are not read).
SLOT_LINES = [
    '{"function":"initialize","level":"INFO","line":433,"msg":"initializing slots","n_slots":4,'
    '"tid":"139810345842240","timestamp":1710561460}'
] + [
    f'{{"function":"initialize","level":"INFO","line":445,"msg":"new slot","n_ctx_slot":2048,"slot_id":{i},'
    f'"tid":"139810345842240","timestamp":1710561460}}'
    for i in range(4)
]


def test_json_slot_lines_are_context_params() -> None:
    events = parse_lines(SLOT_LINES)
    assert [(e.n_seq_max, e.n_ctx_per_seq) for e in events] == [(4, None)] + [(None, 2048)] * 4
    assert all(isinstance(e, ContextParams) and e.grammar == "ext_server" for e in events)
    assert events[0].time is not None and events[0].time.year == 2024


def test_json_slot_lines_give_the_loads_slots_and_context() -> None:
    """Corpus 010 (ollama/ollama#3301, the 0.1.28 dynamic ext server) followed by the slot set-up of its server."""
    load = one_load(corpus("010") + SLOT_LINES)
    assert load.model_blob == "sha256-3a17f7cde150070bbc815645693fb93c311cc42e7deaf198364acadcf08458f8"
    assert (load.parallel, load.num_ctx_per_seq, load.num_ctx_total) == (4, 2048, 8192)


def test_text_form_slot_lines() -> None:
    """The same records in the Era A text form (``INFO [initialize] … | k=v``, corpus 017's shape)."""
    events = parse_lines(
        [
            'INFO [initialize] initializing slots | n_slots=2 tid="140182396393344" timestamp=1727366911',
            'INFO [initialize] new slot | n_ctx_slot=4096 slot_id=0 tid="140182396393344" timestamp=1727366911',
        ]
    )
    assert [(e.n_seq_max, e.n_ctx_per_seq) for e in events] == [(2, None), (None, 4096)]


# --------------------------------------------------------------------------------------------
# 8. A GGML_ASSERT line shows its text in the events pane, made safe


def test_ggml_assert_is_described_with_its_text() -> None:
    """Corpus 005 (ollama/ollama#5913): ``GGML_ASSERT: …/ggml-cuda.cu:101: !"CUDA error"``."""
    line = next(x for x in corpus("005") if "GGML_ASSERT" in x)
    (w,) = [e for e in parse_lines([line]) if isinstance(e, UnknownWarning)]
    text = describe(w)
    assert text == (
        'ERROR: GGML_ASSERT: /go/src/github.com/ollama/ollama/llm/llama.cpp/ggml/src/ggml-cuda.cu:101: !"CUDA error"'
    )


def test_ggml_assert_with_terminal_escapes_is_made_safe() -> None:
    """Corpus 005's line with an ESC colour sequence and a BEL in it: nothing reaches the terminal."""
    line = next(x for x in corpus("005") if "GGML_ASSERT" in x).replace('!"CUDA', '\x1b[31m!"CUDA\x07')
    (w,) = [e for e in parse_lines([line]) if isinstance(e, UnknownWarning)]
    text = describe(w)
    assert "\x1b" not in text and "\x07" not in text and "\x1b" not in w.message
    assert text.endswith('ggml-cuda.cu:101: \ufffd[31m!"CUDA\ufffd error"')


# --------------------------------------------------------------------------------------------
# 9. inspect-log: the context-over-training finding (corpus 006)


def test_inspect_document_has_the_over_training_finding() -> None:
    """Corpus 006 (ollama/ollama#10114): ``n_ctx_pre_seq (32768) > n_ctx_train (8192)``."""
    doc = inspect_lines(corpus("006"))
    (load,) = doc["loads"]
    assert load["findings"] == [
        "context over training: 32768 tokens per slot > the model's training context 8192 "
        "(llama.cpp: possible training context overflow)"
    ]
    assert load["n_ctx_train"] == 8192
    assert doc["events"] == []  # not an event kind of the document (the corpus oracle)
    json.dumps(doc)
