"""A runner's ``GET /slots`` count replaces Ollama's default slot count (``parallel``).

Without a server log, ``/api/ps`` says nothing about slots: kvtop assumes Ollama's default of 1
(``4096×1*``). When the model's llama-server answers ``/slots`` with two slots, the row takes 2
as ``parallel`` (source ``runner``, the ladder's second rung), CONTEXT shows ``4096×2`` and the KV estimate covers both
slots. A count the log allocated (``-np``) is never replaced, and a row goes back to the default
when the runner stops answering.
"""

from __future__ import annotations

from kvtop.model import kv
from kvtop.model.alerts import evaluate
from kvtop.model.slot_snapshots import RunnerSlots, SlotState, SlotsSnapshot
from kvtop.model.fold_alerts import fold_with_alerts, fold_slots_with_alerts
from kvtop.ui.format import context_text
from kvtop.ui.widgets.models_table import slots_cell
from tests.unit.test_alerts import TINY, blob, layout, llama_server_run, ps_snapshot, row, state_of

SIZE = 60_000_000


def two_slots(*, busy: bool = False, blob_name: str | None = None) -> SlotsSnapshot:
    """``/slots`` of a ``-c 8192 -np 2`` llama-server (fixtures/llama_server/busy-np2-prefill)."""
    slots = (SlotState(0, 4096, False), SlotState(1, 4096, busy))
    return SlotsSnapshot(1.0, (RunnerSlots(4242, 40123, blob_name or blob(TINY), 8192, slots),))


def test_reported_slot_count_replaces_the_default() -> None:
    state = state_of(ps_snapshot([row(TINY, 4096, SIZE)]))
    (before,) = state.models
    assert (before.parallel.value, before.parallel.source) == (1, "default")
    assert context_text(before) == "4096×1*"
    lay = layout(state, TINY)
    assert before.memory.kv.value == kv.kv_allocation(lay, 4096, 1, "f16").total_bytes

    state = fold_slots_with_alerts(state, two_slots())
    (v,) = state.models
    assert (v.parallel.value, v.parallel.source) == (2, "runner")
    assert v.parallel.note == "2 slots listed by GET http://127.0.0.1:40123/slots"
    assert context_text(v) == "4096×2" and slots_cell(v, 9) == "4096×2"
    assert v.total_ctx_cells == 8192
    expected = kv.kv_allocation(lay, 4096, 2, "f16").total_bytes
    assert expected == 2 * 4096 * 4 * 2 * 2 * 32 * 2  # slots × cells × layers × K+V × KV heads × head dim × f16
    assert (v.memory.kv.value, v.memory.kv.source) == (expected, "estimated")
    assert v.kv_estimate is not None and v.kv_estimate.total_bytes == expected
    assert v.slots is not None and (v.slots.source, v.slots.total, v.slots.busy) == ("runner", 2, 0)

    # the next /api/ps poll keeps the reported count (the /slots round is still the latest)
    again = fold_with_alerts(state, ps_snapshot([row(TINY, 4096, SIZE)], taken_at=state.ollama.taken_at + 1))  # type: ignore[union-attr]
    assert again.models[0].parallel == v.parallel
    # a busy slot shows after the count
    busy = fold_slots_with_alerts(again, two_slots(busy=True))
    assert slots_cell(busy.models[0], 9) == "4096×2 ▶1"


def test_back_to_the_default_when_the_runner_stops_answering() -> None:
    state = fold_slots_with_alerts(state_of(ps_snapshot([row(TINY, 4096, SIZE)])), two_slots())
    failed = SlotsSnapshot(2.0, (RunnerSlots(4242, 40123, blob(TINY), 8192, error="connection refused"),))
    (v,) = fold_slots_with_alerts(state, failed).models
    assert (v.parallel.value, v.parallel.source) == (1, "default")
    assert context_text(v) == "4096×1*"


def test_another_models_runner_changes_nothing() -> None:
    state = fold_slots_with_alerts(
        state_of(ps_snapshot([row(TINY, 4096, SIZE)])), two_slots(blob_name="sha256-" + "cd" * 32)
    )
    assert state.models[0].parallel.source == "default"


def test_a_count_the_log_allocated_is_kept() -> None:
    # the real -c 8192 -np 2 run as Ollama logs it: the log says 2 slots (allocated)
    state = state_of(ps_snapshot([row(TINY, 4096, SIZE)]), llama_server_run("busy-np2-prefill", blob(TINY)))
    assert (state.models[0].parallel.value, state.models[0].parallel.source) == (2, "allocated")
    three = SlotsSnapshot(
        1.0, (RunnerSlots(4242, 40123, blob(TINY), 12288, tuple(SlotState(i, 4096, False) for i in range(3))),)
    )
    (v,) = fold_slots_with_alerts(state, three).models
    assert (v.parallel.value, v.parallel.source) == (2, "allocated")


def test_alerts_use_the_reported_count() -> None:
    # a spilled row: the spill message states the KV cache at the reported slot count
    spilled = row(TINY, 4096, SIZE, SIZE - 10_000_000)
    state = fold_slots_with_alerts(state_of(ps_snapshot([spilled])), two_slots())
    (alert,) = [a for a in state.alerts if a.kind == "spill"]
    assert "at num_ctx 4096 × 2 slots" in alert.message
    assert alert == next(a for a in evaluate(state) if a.kind == "spill")
