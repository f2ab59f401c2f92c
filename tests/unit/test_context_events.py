"""Context events of the log parser and the alerts built on them.

* llama.cpp's ``n_ctx_pre_seq (32768) > n_ctx_train (8192) -- possible training context overflow``
  (corpus 006, the real line) is a ``ContextOverTraining`` event;
* Ollama's ``requested context size too large for model`` warning is a ``ContextClamped`` event,
  not an unknown warning (no corpus log has it: the line is written in the slog format
  docs/ollama-internals.md §3.4/§4.4 quotes, as tests/unit/test_alerts.py does);
* ``context_over_training`` fires from the runner's line for a loaded model whose ``/api/show``
  gives no training context, and for a recent load that no loaded row covers; ``context_clamped``
  reads the event's numbers.
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

import pytest

from kvtop.logparse.events import ContextClamped, ContextOverTraining, ContextParams, UnknownWarning
from kvtop.logparse.parser import parse_lines
from kvtop.model.alerts import evaluate
from kvtop.model.logstate import WARNING_KINDS
from tests.unit.test_alerts import (
    CLAMP,
    Q8,
    TINY,
    _utc,
    blob,
    corpus_line,
    corpus_lines,
    only,
    ps_snapshot,
    row,
    spawn_line,
    state_of,
)

OVER_LINE = "n_ctx_pre_seq (32768) > n_ctx_train (8192)"


def test_corpus_006_over_training_line_is_an_event() -> None:
    line = corpus_line("006", OVER_LINE)
    (event,) = parse_lines([line])
    assert isinstance(event, ContextOverTraining)
    assert (event.n_ctx_per_seq, event.n_ctx_train, event.grammar) == (32768, 8192, "llama_init_from_model")
    assert event.kind in WARNING_KINDS  # highlighted in the events pane


@pytest.mark.parametrize("name", ["n_ctx_per_seq", "n_ctx_seq"])
def test_later_spellings_of_the_over_training_line(name: str) -> None:
    line = corpus_line("006", OVER_LINE).replace("n_ctx_pre_seq", name)
    (event,) = parse_lines([line])
    assert isinstance(event, ContextOverTraining) and event.n_ctx_per_seq == 32768


def test_the_under_training_twin_is_context_not_a_finding() -> None:
    # corpus 008 (ollama/ollama#9362): `n_ctx_per_seq (2048) < n_ctx_train (131072) -- the full capacity of the model
    # will not be utilized` gives the per-slot and training contexts, and is not a context_over_training event
    (event,) = parse_lines([corpus_line("008", "n_ctx_per_seq (2048) < n_ctx_train (131072)")])
    assert isinstance(event, ContextParams)
    assert (event.n_ctx_per_seq, event.n_ctx_train) == (2048, 131072)
    assert event.kind not in WARNING_KINDS


def test_corpus_006_loads_unchanged_by_the_event() -> None:
    events = list(parse_lines(corpus_lines("006")))
    assert sum(isinstance(e, ContextOverTraining) for e in events) == 1
    state = state_of(ps_snapshot([], taken_at=_utc(2025, 1, 1)), corpus_lines("006"))
    (load,) = state.log.loads
    assert (load.num_ctx_per_seq, load.kv_type_k) == (32768, "f16")


def test_clamp_warning_is_its_own_event() -> None:
    (event,) = parse_lines([CLAMP])
    assert isinstance(event, ContextClamped) and not isinstance(event, UnknownWarning)
    assert (event.requested, event.n_ctx_train) == (65536, 40960)
    assert event.time is not None and event.time.timestamp() == _utc(2026, 11, 18, 11, 5)


def test_clamp_warning_without_numbers() -> None:
    line = CLAMP.split(" num_ctx=")[0]
    (event,) = parse_lines([line])
    assert isinstance(event, ContextClamped) and (event.requested, event.n_ctx_train) == (None, None)
    state = state_of(ps_snapshot([], taken_at=_utc(2026, 11, 18, 11, 6)), [line])
    alert = only(evaluate(state), "context_clamped")
    assert alert.message.startswith("num_ctx ? was requested; Ollama clamped it to the training context ?")


def test_clamp_alert_reads_the_event() -> None:
    state = state_of(
        ps_snapshot([row(Q8, 40960, 6_106_141_568)], taken_at=_utc(2026, 11, 18, 11, 6)),
        [CLAMP, spawn_line(blob(Q8), 40960, when="2026-11-18T11:05:00.100Z")],
    )
    alert = only(evaluate(state), "context_clamped", Q8)
    assert alert.message == (
        "num_ctx 65536 was requested; Ollama clamped it to the training context 40960: longer prompts are truncated"
    )
    assert alert.since == _utc(2026, 11, 18, 11, 5)


def _spawned_006(model_blob: str) -> list[str]:
    """Corpus 006's runner lines after a real (corpus 004) spawn line for ``model_blob`` at 32768."""
    return [spawn_line(model_blob, 32768, when="2025-01-12T10:00:00.000Z")] + corpus_lines("006")


@pytest.mark.parametrize(("minutes_after", "fires"), [(1, True), (60, False)])
def test_runner_line_of_an_unloaded_model_raises_context_over_training(minutes_after: int, fires: bool) -> None:
    other = "sha256-" + "ab" * 32
    state = state_of(
        ps_snapshot([], taken_at=_utc(2025, 1, 12, 10, minutes_after % 60) + 3600 * (minutes_after // 60)),
        _spawned_006(other),
    )
    found = [a for a in evaluate(state) if a.kind == "context_over_training"]
    if not fires:
        assert found == []
        return
    (alert,) = found
    assert alert.model is None and alert.severity == "warning"
    assert alert.message == (
        "sha256-abababababab…: the runner ran num_ctx 32768 per slot, above the training context"
        " 8192 (log line 14): past 8192 tokens the model degrades"
    )
    assert alert.since == _utc(2025, 1, 12, 10)  # the spawn line's stamp (llama.cpp lines have none)
    assert [(f.action, f.fits) for f in alert.fixes] == [("num_ctx 8192", None)]


def test_loaded_model_without_a_training_context_uses_the_runner_line() -> None:
    snap = ps_snapshot([row(TINY, 32768, 60_000_000)], taken_at=_utc(2025, 1, 12, 10, 1))
    (digest,) = snap.shows
    show = snap.shows[digest]
    info = {k: v for k, v in show.model_info.items() if k != "llama.context_length"}
    snap = dataclasses.replace(snap, shows=MappingProxyType({digest: dataclasses.replace(show, model_info=info)}))
    plain = state_of(snap)
    assert plain.models[0].context_train is None
    assert [a.kind for a in evaluate(plain)] == []  # without the log nothing says 32768 is too much

    state = state_of(snap, _spawned_006(blob(TINY)))
    assert state.models[0].load is not None  # the 006 load is this row's runner
    alerts = evaluate(state)
    alert = only(alerts, "context_over_training", TINY)
    assert alert.message == (
        "num_ctx 32768 is above the training context 8192 (allocated): past 8192 tokens the model"
        " degrades, and the extra cache is allocated anyway; the runner said so (log line 14)"
    )
    assert alert.fixes[0].action == "num_ctx 8192"
    assert len([a for a in alerts if a.kind == "context_over_training"]) == 1  # not again from the event rule
