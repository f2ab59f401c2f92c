"""Log forms real logs show: a bare syslog identifier, repeated OOMs, loads that fail early, ``inf`` rates,
hard wraps, truncation's other forms.

Lines come from the corpus (tests/fixtures/logs/<file>, named in a comment). Where the corpus has no
real line of a form, the test says so and names the upstream source the form is built from
(docs/ollama-internals.md section and file).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from kvtop.logparse import (
    ContextOverflow,
    FitPlan,
    GinRequest,
    KvSummary,
    ModelLoad,
    Oom,
    RequestTiming,
    RunnerStarted,
    inspect_lines,
    parse_lines,
)
from kvtop.logparse.values import MIB
from kvtop.logparse.wrappers import strip_wrappers

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
_JOURNAL_DATE_HOST = re.compile(r"^\S+\s+\d+ \d\d:\d\d:\d\d (?:<[^>]*>|\S+) (?=ollama\[)")


def corpus_lines(stem_prefix: str) -> list[str]:
    (path,) = LOGS.glob(f"{stem_prefix}*.log")
    return path.read_text(encoding="utf-8").splitlines()


def identifier_only(lines: list[str]) -> list[str]:
    """The journald lines without their date and host: ``ollama[PID]: …`` as ``journalctl -o with-unit``-less
    collectors and some container log drivers write them. The corpus has no log in this form; each line is a real
    corpus line with only the ``Mon DD HH:MM:SS host `` part removed (docs/ollama-internals.md §6)."""
    out = [_JOURNAL_DATE_HOST.sub("", line) for line in lines]
    assert any(line.startswith("ollama[") for line in out)
    return out


# --------------------------------------------------------------------------------------------
# 1. A bare syslog identifier


def test_identifier_prefix_is_a_wrapper() -> None:
    # 004-rocm-0.2-starting-llama-server-cmd-ngl48.log, line 2 without "Jul 24 16:07:51 host "
    (line,) = identifier_only([corpus_lines("004")[1]])
    assert line.startswith("ollama[114917]: time=")
    body, stamp, prefixed = strip_wrappers(line)
    assert body.startswith('time=2024-07-24T16:07:51.813+02:00 level=INFO source=sched.go:437 msg="loaded runners"')
    assert stamp is None and prefixed


def test_identifier_prefixed_log_reads_as_the_journald_one() -> None:
    # 004 and 023 (journald, two eras), every line without its date and host
    for stem in ("004", "023"):
        lines = corpus_lines(stem)
        plain, bare = inspect_lines(lines), inspect_lines(identifier_only(lines))
        assert bare["loads"] == plain["loads"] and bare["loads"], stem
        assert bare["events"] == plain["events"], stem
    (spawn,) = [e for e in parse_lines(identifier_only(corpus_lines("004"))) if isinstance(e, RunnerStarted)]
    assert spawn.model_blob == "sha256-0bd51f8f0c975ce910ed067dcb962a9af05b77bafcdc595ef02178387f10e51d"
    assert (spawn.ctx_size, spawn.parallel, spawn.n_gpu_layers) == (2048, 1, 48)


def test_identifier_needs_its_pid() -> None:
    # a llama.cpp "function: text" line is not a wrapper (009: "llama_new_context_with_model: KV self size …")
    line = corpus_lines("009")[0]
    assert strip_wrappers(line) == (line, None, False)


# --------------------------------------------------------------------------------------------
# 2. Every allocator failure is an OOM of its own


def test_each_try_of_a_fit_alloc_loop_is_one_oom() -> None:
    # 009-rocm-oom-compute-buffer-fallback-0.1.33pre.log: one failed try is three lines (cudaMalloc failed, failed
    # to allocate ROCm0 buffer, failed to allocate compute buffers). The corpus has no log of a loop that fails
    # more than once; Ollama's fit/alloc loop (llm/server.go (*ollamaServer).Load, v0.12.0; docs/ollama-internals.md
    # §4.3) tries again with fewer layers after each failed allocation, printing the same three lines per try:
    # here the real try three times.
    lines = corpus_lines("009")
    tried = lines[2:5]
    assert "cudaMalloc failed: out of memory" in tried[0]
    log = lines[:2] + tried * 3 + lines[5:]
    doc = inspect_lines(log)
    assert [e["kind"] for e in doc["events"]] == ["oom", "oom", "oom", "load_failed"]
    assert all("cudaMalloc failed" in e["reason"] for e in doc["events"][:3])
    assert [e["kind"] for e in inspect_lines(lines)["events"]] == ["oom", "load_failed"]  # one try: one OOM
    ooms = [e for e in parse_lines(log) if isinstance(e, Oom)]
    assert [e.allocation for e in ooms] == [True, False, False] * 3


def test_a_loop_of_allocator_failures_counts_in_the_alert() -> None:
    from kvtop.model.alerts.logevents import _Incidents
    from kvtop.model.alerts.log_scan import Timed

    lines = corpus_lines("009")
    ooms = [e for e in parse_lines(lines[2:5] * 3) if isinstance(e, Oom)]
    inc = _Incidents("oom", None, items=[Timed(e, 1000.0 + i) for i, e in enumerate(ooms)])
    assert inc.count() == 3
    assert inc.latest_first().event is ooms[6]  # the cudaMalloc line of the last try


# --------------------------------------------------------------------------------------------
# 3. A load starts at the first llama.cpp model line

LLAMA_SERVER = Path(__file__).resolve().parents[1] / "fixtures" / "llama_server"


def model_read(stem: str, first: str) -> list[str]:
    """The real lines of a recorded llama-server run from the first line starting with ``first`` to
    ``load_tensors: loading model tensors`` (the last line before the first buffer line)."""
    lines = (LLAMA_SERVER / f"{stem}.log").read_text(encoding="utf-8").splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith(first))
    end = next(i for i, x in enumerate(lines) if x.startswith("load_tensors: loading model tensors"))
    return lines[start : end + 1]


def test_model_read_lines_start_a_load() -> None:
    # excerpts of fixtures/llama_server/f16-fa-on-np1.log that begin after the "loaded meta data … from PATH" line
    for first in ("llama_model_loader: Dumping metadata", "print_info: file format", "load_tensors: loading model"):
        excerpt = model_read("f16-fa-on-np1", first)
        (load,) = inspect_lines(excerpt)["loads"]
        assert load["model_blob"] is None and load["memory"] == {"weights": {}, "kv": {}, "compute": {}}, first
    assert [
        e.grammar
        for e in parse_lines(model_read("f16-fa-on-np1", "print_info: file format"))
        if isinstance(e, ModelLoad)
    ] == ["print_info", "print_info", "load_tensors"]  # format, arch, tensors


def test_a_load_that_fails_before_any_buffer_line_is_a_load_with_its_failure() -> None:
    # The corpus has no log of a load that fails before its first buffer line. The model read is real
    # (fixtures/llama_server/f16-fa-on-np1.log, "Dumping metadata" to "loading model tensors"), the failure is
    # corpus 009's real try and its end (cudaMalloc failed … error starting llama server): the weights' buffer
    # is the first allocation a load makes (llama.cpp load_tensors, docs/ollama-internals.md §4.5).
    failure = corpus_lines("009")[2:]
    doc = inspect_lines(model_read("f16-fa-on-np1", "llama_model_loader: Dumping metadata") + failure)
    (load,) = doc["loads"]
    assert load["model_blob"] == "sha256-e9e56e8bb5f0fcd4860675e6837a8f6a94e659f5fa7dce6a1076279336320f2b"
    assert [e["kind"] for e in doc["events"]] == ["oom", "load_failed"]
    assert [e["load"] for e in doc["events"]] == [0, 0]
    # without the model read there is no load to give the failure to
    assert inspect_lines(failure)["loads"] == []


def test_a_second_model_read_after_allocations_is_a_second_load() -> None:
    # fixtures/llama_server/f16-fa-on-np1.log read twice (a runner restarted): two loads, not one
    lines = (LLAMA_SERVER / "f16-fa-on-np1.log").read_text(encoding="utf-8").splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith("llama_model_loader: Dumping metadata"))
    end = next(i for i, x in enumerate(lines) if "KV buffer size" in x)
    part = lines[start : end + 1]
    assert len(inspect_lines(part + part)["loads"]) == 2


# --------------------------------------------------------------------------------------------
# 4. Rates printed as inf


def test_inf_rate_keeps_the_counts_and_is_unknown() -> None:
    # The corpus has no timing line with an infinite rate. The lines follow llama.cpp's
    # llama_perf_context_print format ("%s:        eval time = %10.2f ms / %5d runs   (%8.2f ms per token, %8.2f
    # tokens per second)", src/llama-context.cpp; docs/ollama-internals.md §4.10), with the printf text of a
    # division by a 0.00 ms duration ("inf") and of 0/0 ("-nan").
    timing = only_timing(
        "llama_perf_context_print: prompt eval time =      12.00 ms /     4 tokens (    3.00 ms per token,   333.33 tokens per second)",
        "llama_perf_context_print:        eval time =       0.00 ms /     1 runs   (    0.00 ms per token,      inf tokens per second)",
        "llama_perf_context_print:       total time =      12.00 ms /     5 tokens",
    )
    assert (timing.prompt_tokens, timing.prompt_tps, timing.eval_tokens, timing.eval_ms, timing.eval_tps) == (
        4,
        333.33,
        1,
        0.0,
        None,
    )
    nan = only_timing(
        "slot print_timing: id  0 | task 3 | prompt eval time =       0.00 ms /     0 tokens "
        "(    -nan ms per token,     -nan tokens per second)"
    )
    assert (nan.prompt_tokens, nan.prompt_ms, nan.prompt_tps, nan.task) == (0, 0.0, None, 3)
    doc = inspect_lines(
        [
            "llama_perf_context_print:        eval time =       0.00 ms /     1 runs   "
            "(    0.00 ms per token,      inf tokens per second)"
        ]
    )
    (event,) = doc["events"]
    assert (event["eval_tokens"], event["eval_tps"]) == (1, None)
    json.dumps(doc, allow_nan=False)  # raises on an infinite or NaN number anywhere in the document


def only_timing(*lines: str) -> RequestTiming:
    (timing,) = [e for e in parse_lines(lines) if isinstance(e, RequestTiming)]
    return timing


# --------------------------------------------------------------------------------------------
# 5. Hard wraps at a fixed width, mid-token
#
# The corpus's own wrapped lines (022, 033: a wrap inside the quoted server config) are tested in
# test_logparse.py. The wraps below are made by the test: a real corpus line cut at a fixed width, as
# a terminal or a forum does (the posted logs the corpus index lists as hard-wrapped, 020/034/059, are
# not in tests/fixtures).


def cut(line: str, width: int) -> list[str]:
    """``line`` as a terminal prints it at ``width`` columns: pieces of ``width`` characters, no character lost."""
    return [line[i : i + width] for i in range(0, len(line), width)]


def test_slog_record_cut_inside_a_key_is_joined() -> None:
    # 051-mllama-…: the scheduler's decision; a wrap inside "gpu=" leaves a last word that is no key=value
    line = corpus_lines("051")[1]
    at = line.index(" gpu=") + 3
    pieces = [line[:at], line[at:]]
    assert pieces[0].endswith(" gp")
    (load,) = inspect_lines(pieces)["loads"]
    assert load["model_blob"] == "sha256-11f274007f093fefeec994a5dbbb33d0733a4feb87f7ab66dcd7c1069fef0068"
    assert load["parallel"] == 1


def test_llama_line_cut_inside_its_parentheses_is_joined() -> None:
    # 043-llamacpp-hybrid-…: "llama_kv_cache: size = 16384.00 MiB (262144 cells, 16 layers, 4/1 seqs)" cut at "16 la"
    line = corpus_lines("043")[0]
    at = line.index("16 layers") + 5
    (kv,) = [e for e in parse_lines([line[:at], line[at:]]) if isinstance(e, KvSummary)]
    assert (kv.size_bytes, kv.cells, kv.layers, kv.seqs, kv.streams) == (16384 * MIB, 262144, 16, 4, 1)


def test_gin_line_cut_inside_its_path_is_joined() -> None:
    # fixtures/gin/access-corpus.log line 2 (journald): cut inside "/api/chat"
    line = (LOGS.parent / "gin" / "access-corpus.log").read_text(encoding="utf-8").splitlines()[1]
    at = line.index("/api/ch") + 7
    (gin,) = parse_lines([line[:at], line[at:]])
    assert isinstance(gin, GinRequest)
    assert (gin.status, gin.method, gin.path, gin.latency_s) == (200, "POST", "/api/chat", 5079.0)


def ends_a_record(piece: str) -> bool:
    """Whether a slog piece could be a whole record: no quote open, its last word a key=value or a closing quote."""
    return piece.count('"') % 2 == 0 and (piece.endswith('"') or "=" in piece.rsplit(" ", 1)[-1])


def test_a_wrap_width_is_learned_and_a_continuation_may_start_with_a_space() -> None:
    # A log wrapped at one width: 050's first line (real) teaches the width (its first piece could end a record, so
    # its second piece is an orphan, lost), then 051's decision line (real), wrapped at the same width where the next
    # character is a space, so its continuation starts with a space; its first piece could end a record too, only the
    # learned width joins it.
    teach = corpus_lines("050")[0]
    line = corpus_lines("051")[1]
    width = next(
        w
        for w in range(80, min(len(teach), len(line)))
        if line[w] == " " and ends_a_record(line[:w]) and ends_a_record(teach[:w]) and teach[w] != " "
    )
    pieces = cut(line, width)
    assert pieces[1].startswith(" ")
    (load,) = inspect_lines(cut(teach, width) + pieces)["loads"]
    assert load["model_blob"] == "sha256-11f274007f093fefeec994a5dbbb33d0733a4feb87f7ab66dcd7c1069fef0068"
    assert load["parallel"] == 1
    # the same pieces without a width to learn from: the first piece ends the record (nothing is guessed)
    (alone,) = inspect_lines(pieces)["loads"]
    assert alone["parallel"] is None


def test_a_complete_record_is_not_held() -> None:
    # 051: every line is complete; each gives its events as it is fed, not one line later
    from kvtop.logparse import LogParser

    parser = LogParser()
    events = parser.feed(corpus_lines("051")[1])
    assert events and events[0].kind == "load_decision"


# --------------------------------------------------------------------------------------------
# 7. Truncation's other forms (alerts: tests/unit/test_alerts.py)


def test_chat_history_cut_and_http_400_are_context_overflow_events() -> None:
    # The corpus has neither form: the DEBUG line follows server/prompt.go chatPrompt (v0.5.0 - v0.33, "truncating
    # input messages which exceed context length", "truncated", N) on corpus 015's first line; the refusal is corpus
    # 015's second line ([GIN] … POST "/api/chat") with status 400 (docs/ollama-internals.md §4.7).
    first, gin = corpus_lines("015")[:2]
    debug = first.replace(
        'level=WARN source=runner.go:128 msg="truncating input prompt" limit=512 prompt=617 keep=4 new=512',
        'level=DEBUG source=prompt.go:77 msg="truncating input messages which exceed context length" truncated=3',
    )
    assert debug != first
    (cut,) = parse_lines([debug])
    assert isinstance(cut, ContextOverflow) and (cut.form, cut.messages_kept, cut.path) == ("messages", 3, None)
    access, refused = parse_lines([gin.replace("| 200 |", "| 400 |")])
    assert isinstance(access, GinRequest) and access.status == 400  # the access line still counts as traffic
    assert isinstance(refused, ContextOverflow) and (refused.form, refused.path) == ("http_400", "/api/chat")
    assert [e.kind for e in parse_lines([gin])] == ["gin_request"]
    v1 = gin.replace("| 200 |", "| 400 |").replace('"/api/chat"', '"/v1/chat/completions?x=1"')
    assert parse_lines([v1])[1].path == "/v1/chat/completions"
    doc = inspect_lines([debug, gin.replace("| 200 |", "| 400 |")])
    assert [(e["kind"], e["form"]) for e in doc["events"]] == [
        ("context_overflow", "messages"),
        ("context_overflow", "http_400"),
    ]


# --------------------------------------------------------------------------------------------
# 6. Prompt-cache reuse: the cached tokens are a figure, the prefill rate counts only the evaluated tokens


def test_request_timing_carries_the_prompt_tokens_reused_from_the_cache() -> None:
    # fixtures/llama_server/busy-np2-prefill.log: one cached line per batch (0, 512, 1024, 1536); the first is the
    # reuse (none: a new prompt), the prefill rate is the one printed for the 1804 evaluated tokens.
    lines = (LLAMA_SERVER / "busy-np2-prefill.log").read_text(encoding="utf-8").splitlines()
    (timing,) = [e for e in parse_lines(lines) if isinstance(e, RequestTiming)]
    assert (timing.task, timing.prompt_tokens, timing.prompt_cached_tokens, timing.prompt_tps) == (1, 1804, 0, 12925.88)


def test_a_reused_prefix_is_kept_and_the_printed_rate_stays() -> None:
    # fixtures/llama_server/default-fa-auto-np1.log task 9 (lines 208-216). The recorded runs never reuse a prefix
    # (each request is new); the cached line here says 12 of the 16 prompt tokens came from the slot's cache, as
    # llama.cpp prints it ("cached n_tokens = %d, memory_seq_rm [%d, end)", tools/server/server-context.cpp, §4.10),
    # and the timing line counts the 4 evaluated tokens: the rate is theirs, (16 - 12) / 1.83 ms.
    lines = (LLAMA_SERVER / "default-fa-auto-np1.log").read_text(encoding="utf-8").splitlines()[207:216]
    lines[2] = lines[2].replace(
        "cached n_tokens = 0, memory_seq_rm [0, end)", "cached n_tokens = 12, memory_seq_rm [12, end)"
    )
    lines[4] = lines[4].replace(
        "7.31 ms /    16 tokens (    0.46 ms per token,  2189.38 tokens per second)",
        "1.83 ms /     4 tokens (    0.46 ms per token,  2185.79 tokens per second)",
    )
    (timing,) = [e for e in parse_lines(lines) if isinstance(e, RequestTiming)]
    assert (timing.task, timing.prompt_tokens, timing.prompt_cached_tokens, timing.prompt_tps) == (9, 4, 12, 2185.79)
    (event,) = inspect_lines(lines)["events"]
    assert (event["prompt_tokens"], event["prompt_cached_tokens"]) == (4, 12)
    # a report of another task does not take this task's count
    other = [x.replace("task 9", "task 10") for x in lines[4:7]]
    (alone,) = [e for e in parse_lines(lines[:3] + other) if isinstance(e, RequestTiming)]
    assert alone.prompt_cached_tokens is None


def test_the_model_state_keeps_the_newest_cached_count() -> None:
    # the spawn-free llama-server run f16-fa-on-np1 (its load starts at the model loader) with its two requests
    from kvtop.model.logstate import LogState, fold_events, throughput

    lines = (LLAMA_SERVER / "f16-fa-on-np1.log").read_text(encoding="utf-8").splitlines()
    events = parse_lines(lines)
    log = fold_events(LogState(), events, source="s", status=None, ok=True, lines=len(lines))
    (load,) = log.loads
    t = throughput(log, load, now_s=0.0)
    assert (t.requests, t.last_prefill_tps, t.last_prompt_cached_tokens) == (2, 26936.03, 0)


# --------------------------------------------------------------------------------------------
# 8. llama.cpp's fit pass as facts of the load

POSTED = LOGS / "posted"


def test_fit_pass_summary_is_a_fact_of_the_load() -> None:
    # fixtures/logs/posted/ollama-16416-…: "projected to use 71326 MiB of device memory vs. 120459 MiB of free device
    # memory", "will leave 49133 >= 1024 MiB of free device memory, no changes needed" (one ROCm device)
    (path,) = POSTED.glob("ollama-16416-*.log")
    (load,) = inspect_lines(path.read_text(encoding="utf-8").splitlines())["loads"]
    assert load["fit"] == {
        "memory": "device",
        "target_bytes": 1024 * MIB,
        "projected_bytes": 71326 * MIB,
        "free_bytes": 120459 * MIB,
        "left_bytes": 49133 * MIB,
        "shortfall_bytes": None,
        "overflowing_layers": None,
        "devices": {},
    }


def test_fit_pass_of_a_cpu_only_runner_is_host_memory() -> None:
    # fixtures/llama_server/f16-fa-on-np1.log: "projected to use 9 MiB of host memory vs. 24105 MiB of total host
    # memory", "will leave 24096 >= 1024 MiB of system memory, no changes needed"
    lines = (LLAMA_SERVER / "f16-fa-on-np1.log").read_text(encoding="utf-8").splitlines()
    (load,) = inspect_lines(lines)["loads"]
    fit = load["fit"]
    assert (fit["memory"], fit["projected_bytes"], fit["free_bytes"], fit["left_bytes"], fit["target_bytes"]) == (
        "host",
        9 * MIB,
        24105 * MIB,
        24096 * MIB,
        1024 * MIB,
    )


def test_fit_overflow_and_device_margins() -> None:
    # The overflow line as docs/ollama-internals.md §4.5 quotes it (tests/unit/test_logparse_posted.py FIT_LINE; no
    # posted log has one) after #16416's real fit pass; the cut and per-device lines have no real example either:
    # they follow llama.cpp's format strings in common_params_fit_impl ("cannot fulfill margin of %d MiB, need to
    # reduce device memory by %d MiB", "  - %s: %6d total, %6d used, %6d %s" with surplus/deficit; §4.4).
    (path,) = POSTED.glob("ollama-16416-*.log")
    lines = path.read_text(encoding="utf-8").splitlines()
    at = next(i for i, x in enumerate(lines) if "will leave" in x)
    lines[at + 1 : at + 1] = [
        "common_params_fit_impl: cannot fulfill margin of 1024 MiB, need to reduce device memory by 6210 MiB",
        "common_params_fit_impl:   - ROCm0 (8060S Graphics): 120459 total, 121669 used,   1210 deficit",
        "common_params_fit_impl:   - ROCm0 (AMD …): 25 layers ( 5 overflowing),  11065 MiB used,   1036 MiB free",
    ]
    (load,) = inspect_lines(lines)["loads"]
    fit = load["fit"]
    assert (fit["shortfall_bytes"], fit["target_bytes"], fit["overflowing_layers"]) == (6210 * MIB, 1024 * MIB, 5)
    assert fit["devices"] == {
        "ROCm0": {"margin_bytes": 1036 * MIB, "layers": 25, "overflowing": 5, "used_bytes": 11065 * MIB}
    }  # the overflow line comes last: its margin wins
    assert "spill: 5 layers overflow the GPU (llama-server fit)" in load["findings"]
    deficit = [e for e in parse_lines(lines) if isinstance(e, FitPlan) and e.device is not None]
    assert [(e.device, e.margin_bytes) for e in deficit] == [("ROCm0", -1210 * MIB)]


def test_wrap_rules_on_real_lines_cut_at_a_fixed_width() -> None:
    # Each real corpus line below, cut where a terminal of that width cuts it, gives what the whole line gives.
    cases = [
        ("004", 80, "starting llama server"),  # "… level=IN" | "FO source=…": no msg= yet
        ("014", 120, "truncating input prompt"),  # "… keep=" | "5 new=2048": a value after its "="
        ("035", 200, "finished setting up runner"),  # "…sha256-667b…2842" | "84a6f4416b06a29": a blob cut short
        ("047", 80, "server config"),  # "… routes.go:1125: INFO serv" | "er config env=…": the Go logger's config line
        ("026", 80, "forcing off"),  # an 80-character llama.cpp line that gave no event, and its " - forcing off"
    ]
    for stem, width, contains in cases:
        (line,) = [x for x in corpus_lines(stem) if contains in x][:1]
        whole = parse_lines([line])
        assert whole, stem
        pieces = cut(line, width)
        assert len(pieces) > 1, stem
        assert [(type(e), e.line_no) for e in parse_lines(pieces)] == [(type(e), 1) for e in whole], stem
        assert [e for e in parse_lines(pieces)][0].raw == whole[0].raw, stem


def test_a_line_after_a_record_that_gave_events_is_not_glued_to_it() -> None:
    # 051's decision line gives an event at once; the line after it (its real successor) is a record of its own
    lines = corpus_lines("051")[1:3]
    assert [e.kind for e in parse_lines(lines)] == [e.kind for e in parse_lines(lines[:1]) + parse_lines(lines[1:])]


def test_events_pane_describes_the_new_events() -> None:
    # the events of the tests above, as the events pane words them (kvtop/model/eventtext.py)
    from kvtop.model.eventtext import describe

    first, gin = corpus_lines("015")[:2]
    refused = parse_lines([gin.replace("| 200 |", "| 400 |")])[1]
    assert (
        describe(refused)
        == "HTTP 400 on /api/chat (Ollama's answer to a prompt over the context; the line does not say why)"
    )
    (path,) = POSTED.glob("ollama-16416-*.log")
    plans = [e for e in parse_lines(path.read_text(encoding="utf-8").splitlines()) if isinstance(e, FitPlan)]
    assert [describe(e) for e in plans] == [
        "llama.cpp fit (device memory): projected 69.7 GiB (74,790,731,776 B) of 118 GiB (126,310,416,384 B) free",
        "llama.cpp fit (device memory): leaves 48.0 GiB (51,519,684,608 B) free, margin 1.0 GiB (1,073,741,824 B)",
    ]


def test_wide_and_size_lines_cut_at_a_fixed_width() -> None:
    # 001's offload estimate at 80 columns ("… layers.split=11,11," | "11,11 memory.available=…": a wide record's
    # piece that is no key=value goes on as it is) and 002's "KV self size" line at 100 ("…, V (f16): 3584.00 Mi" |
    # "B": a size line that stops before its unit)
    for stem, width, contains in (("001", 80, "msg=offload"), ("002", 100, "KV self size")):
        (line,) = [x for x in corpus_lines(stem) if contains in x][:1]
        whole = parse_lines([line])
        pieces = cut(line, width)
        assert len(pieces) > 2 or stem == "002", stem
        assert [(type(e), e.raw) for e in parse_lines(pieces)] == [(type(e), e.raw) for e in whole], stem


def test_context_overflow_is_highlighted_in_the_events_pane() -> None:
    from kvtop.model.logstate import WARNING_KINDS

    first, gin = corpus_lines("015")[:2]
    assert parse_lines([gin.replace("| 200 |", "| 400 |")])[1].kind in WARNING_KINDS
