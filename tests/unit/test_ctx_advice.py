"""What num_ctx the traffic needs (``kvtop.model.ctx_served``, ``kvtop.model.ctx_advice``; issue 27 §5).

Real lines: the llama-server run ``tests/fixtures/llama_server/q8_0-fa-on-np2`` (its spawn line, load and
one request), corpus 015's ``truncating input prompt`` lines, the ``send_error`` refusal of
``reject-over-context-ctx256``. The extra requests are that run's own request lines (``new prompt`` and the two
``print_timing`` lines of task 0) with the task id and token counts changed: lines built from the real lines'
format, docs/ollama-internals.md §4.10.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

import pytest

from kvtop.logparse.parser import parse_lines
from kvtop.model import plan
from kvtop.model.ctx_advice import (
    MIN_REQUESTS,
    advice_for,
    advice_json,
    advice_line,
    advise,
    config_now,
    percentile,
    round_num_ctx,
)
from kvtop.model.ctx_served import served_requests
from tests.unit.test_alerts import (
    LLAMA,
    Q8,
    RUN_TIME,
    TINY,
    TINY_INFO,
    blob,
    corpus_line,
    llama_server_run,
    ps_snapshot,
    row,
    spawn_line,
    state_of,
    view,
)

RUN = (LLAMA / "q8_0-fa-on-np2.log").read_text(encoding="utf-8").splitlines()
PROMPT_LINE = next(x for x in RUN if "task 0 | new prompt" in x)
PREFILL_LINE = next(x for x in RUN if "task 0 | prompt eval time" in x)
EVAL_LINE = next(x for x in RUN if "task 0 |        eval time" in x)
REJECT_LINE = next(
    x for x in (LLAMA / "reject-over-context-ctx256.log").read_text(encoding="utf-8").splitlines() if "send_error" in x
)


def request_lines(task: int, prompt: int, generated: int) -> list[str]:
    """The run's task-0 request lines for task ``task`` with ``prompt`` and ``generated`` tokens (slot 1)."""
    return [
        PROMPT_LINE.replace("task 0 |", f"task {task} |").replace("task.n_tokens = 28", f"task.n_tokens = {prompt}"),
        re.sub(r"/ +28 tokens", f"/ {prompt:5d} tokens", PREFILL_LINE.replace("task 0 |", f"task {task} |")),
        re.sub(r"/ +8 tokens", f"/ {generated:5d} tokens", EVAL_LINE.replace("task 0 |", f"task {task} |")),
    ]


def reject_line(prompt: int, n_ctx: int) -> str:
    return REJECT_LINE.replace("(2104 tokens)", f"({prompt} tokens)").replace("(256 tokens)", f"({n_ctx} tokens)")


def truncation_line() -> str:
    """Corpus 015's first cut (limit 512, a 617-token prompt), journald prefix dropped."""
    line = corpus_line("015", "truncating input prompt")
    return line[line.index("time=") :]


PROMPTS = [20 * (i + 1) for i in range(118)]
"""118 timed requests of 20 … 2,360 prompt tokens, 8 generated each; with the run's own two, the cut one (617
at 20 tokens) and the refused one (9,000) that is 122 sized requests."""


def traffic_log() -> list[str]:
    lines = llama_server_run("q8_0-fa-on-np2", blob(TINY))
    lines.append(truncation_line())
    lines.extend(request_lines(100, 20, 8))  # the cut request: its timing line shows 20 tokens, it had 617
    for i, p in enumerate(PROMPTS):
        lines.extend(request_lines(101 + i, p, 8))
    lines.append(reject_line(9000, 4096))
    return lines


def test_percentiles_are_nearest_rank() -> None:
    sizes = list(range(1, 121))
    assert (percentile(sizes, 50), percentile(sizes, 95), percentile(sizes, 99)) == (60, 114, 119)
    assert percentile([7], 99) == 7
    with pytest.raises(ValueError):
        percentile([], 50)
    assert [round_num_ctx(n) for n in (1, 1024, 1025, 2368, 9000)] == [1024, 1024, 2048, 3072, 9216]


def test_sizes_from_real_llama_server_lines() -> None:
    events = parse_lines(llama_server_run("q8_0-fa-on-np2", blob(TINY)))
    from kvtop.logparse.load_grouping import group_loads

    loads = group_loads(events)
    served = served_requests(events, loads, model_blob=blob(TINY))
    # the run's two requests: 28 + 8 and 16 + 8 tokens (new prompt task.n_tokens + eval tokens)
    assert [(r.prompt_tokens, r.generated_tokens, r.tokens, r.lower_bound) for r in served.requests] == [
        (28, 8, 36, False),
        (16, 8, 24, False),
    ]
    assert served.cuts == ()
    other = served_requests(events, loads, model_blob="sha256-" + "0" * 64)
    assert other.requests == ()  # another model's lines are not this one's


def test_cuts_without_timing_lines_count_as_their_prompt() -> None:
    """Corpus 015: four cut prompts of an Era B runner, which logs no timing lines."""
    from kvtop.logparse.load_grouping import group_loads

    lines = (
        [spawn_line(blob(TINY), 512)]
        + [x[x.index("time=") :] for x in (corpus_line("015", "prompt=617"),)]
        + [line[line.index("time=") :] for line in _corpus_015_cuts()[1:]]
    )
    events = parse_lines(lines)
    served = served_requests(events, group_loads(events), model_blob=blob(TINY))
    assert [(c.form, c.prompt_tokens, c.limit) for c in served.cuts] == [
        ("truncated", 617, 512),
        ("truncated", 617, 512),
        ("truncated", 529, 512),
        ("truncated", 587, 512),
    ]
    assert [(r.tokens, r.cut, r.lower_bound) for r in served.requests] == [
        (617, True, True),
        (617, True, True),
        (529, True, True),
        (587, True, True),
    ]
    assert any("only the cut prompts are sized" in n for n in served.notes)
    a = advise(TINY, served, plan.PlanConfig(512), spec=None, budget_bytes=None)
    assert a.recommendation is None
    assert a.reason == f"4 sized requests in the log: too few to recommend (at least {MIN_REQUESTS})"
    assert advice_line(a) == (
        "4 requests, tokens p50 587 · p95 617 · p99 617 · max 617; 4 cut or refused: "
        "4 sized requests in the log: too few to recommend (at least 20)"
    )


def _corpus_015_cuts() -> list[str]:
    from tests.unit.test_alerts import corpus_lines

    return [x for x in corpus_lines("015") if "truncating input prompt" in x]


def test_recommendation_from_the_state() -> None:
    state = state_of(ps_snapshot([row(TINY, 4096, 5_000_000, 0)], taken_at=RUN_TIME + 60), traffic_log())
    v = view(state, TINY)
    assert (v.context.value, v.parallel.value, v.kv_type.value) == (4096, 2, "q8_0")
    a = advice_for(state, v)
    assert a is not None
    d = a.distribution
    assert d is not None
    # the run's own two (36, 24), 118 timed (28 … 2,368), the cut one at 617 + 8 = 625, the refused one at
    # 9,000: 122 sizes; nearest rank: p50 the 61st, p95 the 116th, p99 the 121st
    assert (d.requests, d.p50, d.p95, d.p99, d.max, d.cut, d.lower_bounds) == (122, 1168, 2268, 2368, 9000, 2, 0)
    r = a.recommendation
    assert r is not None
    assert (r.config.num_ctx, r.config.cache_type, r.config.parallel, r.config.flash_attention) == (
        3072,
        "q8_0",
        2,
        True,
    )
    assert r.holds_tokens == 2368 and not r.capped
    # exact KV: 4 layers × 2 KV heads × (32 + 32) × 34/32 B (q8_0) × 3,072 cells × 2 slots
    assert r.kv_bytes == 4 * 2 * 64 * 34 // 32 * 3072 * 2 == 3_342_336
    assert r.kv_bytes_now == 4 * 2 * 64 * 34 // 32 * 4096 * 2 == 4_456_448  # the run's "4.25 MiB"
    assert r.vram_delta_bytes is not None and r.vram_delta_bytes < 0  # frees memory
    assert r.verdict is None  # no GPU sample: no fit verdict
    assert r.cuts_avoided == 1  # the 617-token cut; not the 9,000-token refusal
    assert r.modelfile == "PARAMETER num_ctx 3072" and r.env == "OLLAMA_CONTEXT_LENGTH=3072"
    doc = advice_json(a)
    assert doc is not None
    assert doc["request_tokens"] == {"p50": 1168, "p95": 2268, "p99": 2368, "max": 9000}
    assert doc["cuts"] == {
        "total": 2,
        "by_form": {"truncated": 1, "rejected": 1},
        "sized": 2,
        "longest_prompt_tokens": 9000,
        "limits": [512, 4096],
    }
    rec = doc["recommendation"]
    assert (rec["num_ctx"], rec["rounding"], rec["kv_type"], rec["parallel"], rec["applied"]) == (
        3072,
        "multiple of 1024",
        "q8_0",
        2,
        False,
    )
    assert rec["kv_bytes"] == 3_342_336 and rec["fit"] is None
    line = advice_line(a)
    assert line.startswith(
        "122 requests, tokens p50 1,168 · p95 2,268 · p99 2,368 · max 9,000; 2 cut or refused → "
        "num_ctx 3072 (multiple of 1024) × q8_0 × 2 slots: KV ~3.2 MiB, frees ~"
    )
    assert line.endswith(
        "of VRAM vs now (num_ctx 4096), fit not known; would have held 1 of 2 cut; "
        "Modelfile PARAMETER num_ctx 3072 or OLLAMA_CONTEXT_LENGTH=3072 (not applied)"
    )


def _tiny_served() -> tuple[plan.ModelSpec, Sequence[object]]:
    state = state_of(ps_snapshot([row(TINY, 4096, 5_000_000, 0)], taken_at=RUN_TIME + 60), traffic_log())
    return plan.model_spec(TINY, TINY_INFO, file_size=1_048_576), [state, view(state, TINY)]


def test_a_budget_too_small_for_the_cache_type_picks_a_compact_one() -> None:
    spec, (state, v) = _tiny_served()
    a0 = advice_for(state, v)  # type: ignore[arg-type]
    assert a0 is not None
    served = a0.served
    now = config_now(v)  # type: ignore[arg-type]
    assert now == plan.PlanConfig(4096, "q8_0", 2, True)

    def need(cache_type: str, parallel: int) -> int:
        p = plan.predict(spec, plan.PlanConfig(3072, cache_type, parallel, True))
        assert p.gpu_bytes is not None
        return p.gpu_bytes

    assert need("q4_0", 2) < need("q8_0", 2)
    fits_q8 = advise(TINY, served, now, spec=spec, budget_bytes=need("q8_0", 2) + 64 * 1024 * 1024)
    assert fits_q8.recommendation is not None
    assert (fits_q8.recommendation.config.cache_type, fits_q8.recommendation.verdict) == ("q8_0", "fits")
    # the stated compute error is at least 32 MiB: "fits" needs the need plus that error within the budget
    p4 = plan.predict(spec, plan.PlanConfig(3072, "q4_0", 2, True))
    p8 = plan.predict(spec, plan.PlanConfig(3072, "q8_0", 2, True))
    budget = (p4.gpu_bytes or 0) + p4.compute_error_bytes
    assert (p8.gpu_bytes or 0) + p8.compute_error_bytes > budget
    q4 = advise(TINY, served, now, spec=spec, budget_bytes=budget)
    assert q4.recommendation is not None
    assert (q4.recommendation.config.cache_type, q4.recommendation.config.parallel, q4.recommendation.verdict) == (
        "q4_0",
        2,
        "fits",
    )
    assert q4.recommendation.changes == ("KV cache type q4_0 (server-wide: OLLAMA_KV_CACHE_TYPE=q4_0)",)
    none = advise(TINY, served, now, spec=spec, budget_bytes=1024)
    assert none.recommendation is not None  # the tiny model's need is within the 32 MiB stated error of 1 KiB
    assert (none.recommendation.config.cache_type, none.recommendation.verdict) == ("q8_0", "marginal")
    assert any("it may spill" in n for n in none.notes)
    no_fa = advise(
        TINY, served, dataclasses.replace(now, cache_type="f16", flash_attention=False), spec=spec, budget_bytes=budget
    )
    assert no_fa.recommendation is not None
    assert no_fa.recommendation.config.cache_type == "f16"  # a quantized cache needs flash attention: not offered


def test_a_budget_too_small_for_the_slots_picks_the_most_slots_that_fit() -> None:
    """qwen3:1.7b (the bundled catalog's /api/show: the seeds' Qwen3-1.7B layout) at q4_0 × 4 slots: the traffic's 3072 at 4 slots does
    not fit a budget sized for 2 (need + stated error), so the advice keeps q4_0 and gives 2 slots."""
    snap = ps_snapshot([row(Q8, 4096, 2_754_892_672)])
    (show,) = snap.shows.values()
    spec = plan.model_spec(Q8, show.model_info, file_size=2_200_000_000)
    _, (state, v) = _tiny_served()
    a0 = advice_for(state, v)  # type: ignore[arg-type]
    assert a0 is not None
    two = plan.predict(spec, plan.PlanConfig(3072, "q4_0", 2, True))
    three = plan.predict(spec, plan.PlanConfig(3072, "q4_0", 3, True))
    budget = (two.gpu_bytes or 0) + two.compute_error_bytes
    assert (three.gpu_bytes or 0) + three.compute_error_bytes > budget
    a = advise(Q8, a0.served, plan.PlanConfig(4096, "q4_0", 4, True), spec=spec, budget_bytes=budget)
    r = a.recommendation
    assert r is not None
    assert (r.config.num_ctx, r.config.cache_type, r.config.parallel, r.verdict) == (3072, "q4_0", 2, "fits")
    assert r.changes == ("2 slots (server-wide: OLLAMA_NUM_PARALLEL=2)",)
    assert r.kv_bytes == two.kv_bytes


def test_the_training_context_caps_the_recommendation() -> None:
    spec, (state, v) = _tiny_served()
    a = advice_for(state, v)  # type: ignore[arg-type]
    assert a is not None
    capped = advise(TINY, a.served, config_now(v), spec=spec, budget_bytes=None, context_train=2048)  # type: ignore[arg-type]
    assert capped.recommendation is not None
    assert (capped.recommendation.config.num_ctx, capped.recommendation.capped) == (2048, True)
    assert any("longer than the training context (2,048)" in n for n in capped.notes)


def test_once_text_and_json_render_the_same_advice() -> None:
    from kvtop.report import state_json, state_text

    state = state_of(ps_snapshot([row(TINY, 4096, 5_000_000, 0)], taken_at=RUN_TIME + 60), traffic_log())
    a = advice_for(state, view(state, TINY))
    assert a is not None
    (model,) = state_json(state)["models"]
    assert model["ctx_advice"] == advice_json(a)
    assert model["ctx_advice"]["recommendation"]["num_ctx"] == 3072
    lines = [x for x in state_text(state).splitlines() if x.startswith("NUM_CTX ")]
    assert lines == [f"NUM_CTX {TINY}: {advice_line(a)}"]
    quiet = state_of(ps_snapshot([row(TINY, 4096, 5_000_000, 0)], taken_at=RUN_TIME + 60))
    assert not [x for x in state_text(quiet).splitlines() if x.startswith("NUM_CTX ")]  # no traffic: no line
    (bare,) = state_json(quiet)["models"]
    assert bare["ctx_advice"]["requests"] == 0 and bare["ctx_advice"]["recommendation"] is None


def test_a_busy_slot_of_the_runner_is_the_request_in_flight() -> None:
    """``/slots``: a busy slot holding 3,500 tokens (more than the recommended 3072) is said; an idle one is not."""
    from kvtop.model.fold_alerts import fold_slots_with_alerts
    from kvtop.model.slot_snapshots import RunnerSlots, SlotState, SlotsSnapshot

    state = state_of(ps_snapshot([row(TINY, 4096, 5_000_000, 0)], taken_at=RUN_TIME + 60), traffic_log())
    slots = (
        SlotState(0, 4096, True, id_task=300, n_tokens=3500, n_decoded=120),
        SlotState(1, 4096, False, id_task=299, n_tokens=3900, n_decoded=8),
    )
    state = fold_slots_with_alerts(
        state, SlotsSnapshot(RUN_TIME + 61, (RunnerSlots(4242, 40123, blob(TINY), 8192, slots),))
    )
    a = advice_for(state, view(state, TINY))
    assert a is not None and a.in_flight_tokens == 3500
    assert "a request in flight now already holds 3,500 tokens of its slot (/slots), more than num_ctx 3072" in a.notes
    assert advice_json(a)["in_flight_tokens"] == 3500  # type: ignore[index]
