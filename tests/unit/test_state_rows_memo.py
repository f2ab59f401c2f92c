"""model.state: a row whose inputs did not change is not derived again (``RowMemo``), counted.

Each poll of ``/api/ps`` is a new snapshot (new time, newly parsed rows and ``/api/show``
answers); the rows derived from it must equal a derivation from scratch, while the source
ladder runs only for the rows whose inputs changed (the observer's cost).
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

import pytest

from kvtop.model import state as state_module
from kvtop.model.gpu_snapshots import ProcSnapshot, RunnerProcess, ServerProcess, ServiceEnv
from kvtop.model.slot_snapshots import RunnerSlots, SlotState, SlotsSnapshot
from kvtop.model.snapshots import OllamaSnapshot
from kvtop.model.model_row import RowMemo
from kvtop.model.state import fold, fold_procs, fold_slots
from kvtop.model.views import AppState
from tests.ui.fakes import TAKEN_AT, snapshot_at, step_index

STEP = step_index("spill")  # three models, one spilled


@pytest.fixture()
def memo(monkeypatch: pytest.MonkeyPatch) -> RowMemo:
    """A memo of this test's own (the process' one is shared by every test)."""
    fresh = RowMemo()
    monkeypatch.setattr(state_module, "ROW_MEMO", fresh)
    return fresh


def _poll(dt_s: float) -> OllamaSnapshot:
    """The same step polled ``dt_s`` later: rows and ``/api/show`` answers parsed anew (equal, not the same objects)."""
    return dataclasses.replace(snapshot_at(STEP), taken_at=TAKEN_AT + dt_s)


def _from_scratch(monkeypatch: pytest.MonkeyPatch, snap: OllamaSnapshot) -> AppState:
    """``snap`` folded with an empty memo: every row through the ladder."""
    with monkeypatch.context() as m:
        m.setattr(state_module, "ROW_MEMO", RowMemo())
        return fold(AppState(snap.host_url), snap)


def test_an_unchanged_poll_derives_no_row_and_keeps_the_rows(memo: RowMemo, monkeypatch: pytest.MonkeyPatch) -> None:
    first = fold(AppState("h"), _poll(1))
    assert len(first.models) == 3 and memo.derived == 3 and memo.reused == 0
    again = _poll(2)  # every UNTIL reads as it did a second before
    assert again.models[0] is not first.last_ok.models[0] and again.models == first.last_ok.models
    second = fold(first, again)
    assert memo.derived == 3 and memo.reused == 3
    assert [v.until for v in second.models] == ["Forever", "4 minutes from now", "4 minutes from now"]
    assert second.models is first.models  # the same rows: the caches keyed on them (the memory map) hold
    assert second.models == _from_scratch(monkeypatch, again).models


def test_one_changed_row_is_the_only_one_derived(memo: RowMemo, monkeypatch: pytest.MonkeyPatch) -> None:
    first = fold(AppState("h"), _poll(1))
    snap = _poll(2)
    moved = dataclasses.replace(snap.models[1], size_vram_bytes=(snap.models[1].size_vram_bytes or 0) - 2**20)
    snap = dataclasses.replace(snap, models=(snap.models[0], moved, snap.models[2]))
    second = fold(first, snap)
    assert memo.derived == 4 and memo.reused == 2
    assert second.models[0] is first.models[0] and second.models[2] is first.models[2]
    assert second.models[1].size_vram_bytes == moved.size_vram_bytes
    assert second.models == _from_scratch(monkeypatch, snap).models


def test_time_moves_until_and_expired_without_a_derivation(memo: RowMemo, monkeypatch: pytest.MonkeyPatch) -> None:
    first = fold(AppState("h"), snapshot_at(STEP))
    row = first.models[0]
    assert row.expires_at is not None and not row.expired
    later = _poll(row.expires_at.timestamp() + 5 - TAKEN_AT)  # past its keep-alive
    second = fold(first, later)
    assert memo.derived == 3 and memo.reused == 3  # no row through the ladder again
    assert second.models[0].expired and second.models[0].until == "Stopping..."
    assert not first.models[0].expired  # the earlier state's row is untouched
    assert second.models == _from_scratch(monkeypatch, later).models


def test_the_memo_is_bounded() -> None:
    memo = RowMemo(kept=2)
    snap = snapshot_at(STEP)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(state_module, "ROW_MEMO", memo)
        state = fold(AppState("h"), snap)
        fold(state, _poll(1))
    assert len(memo) == 2
    # least recently derived first out: each of the three rows pushed out the one it needs next
    assert memo.derived == 6 and memo.reused == 0


def _runners_world(busy_pid: int | None = None) -> tuple[OllamaSnapshot, ProcSnapshot, SlotsSnapshot]:
    """Three models, each with its llama-server runner (command line) and its ``/slots`` answer;
    the runner ``busy_pid`` has its first slot processing a request."""
    snap = snapshot_at(STEP)
    blobs = {m.digest: snap.shows[m.digest].model_blob for m in snap.models}
    env = ServiceEnv(values=MappingProxyType({"OLLAMA_NUM_PARALLEL": "2"}), source="/proc/1/environ")
    runners = tuple(
        RunnerProcess(
            pid=100 + i,
            kind="llama-server",
            era="v0.30+",
            blob=blobs[m.digest],
            port=40000 + i,
            ctx_size=2 * (m.context_length or 4096),
            parallel=2,
            cache_type_k="f16",
            cache_type_v="f16",
            flash_attn="on",
            ppid=1,
            server_pid=1,
        )
        for i, m in enumerate(snap.models)
    )
    procs = ProcSnapshot(
        taken_at=TAKEN_AT, servers=(ServerProcess(1, "ollama", ("ollama", "serve"), env),), runners=runners
    )
    slots = SlotsSnapshot(
        TAKEN_AT,
        tuple(
            RunnerSlots(
                r.pid,
                r.port or 0,
                r.blob,
                r.ctx_size,
                (
                    SlotState(0, (r.ctx_size or 0) // 2, r.pid == busy_pid, 7 if r.pid == busy_pid else None),
                    SlotState(1, (r.ctx_size or 0) // 2, False),
                ),
            )
            for r in runners
        ),
    )
    return snap, procs, slots


def test_rows_with_runners_and_slots_stay_and_follow_a_busy_slot(
    memo: RowMemo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rows' slots (``with_slot_use``) are kept with the memo's rows: an unchanged poll with
    the same ``/slots`` answers makes no new row; a runner whose answer changed (a busy slot)
    has its row derived again, and only that one, as a derivation from scratch gives it."""
    snap, procs, slots = _runners_world()
    first = fold(
        fold_slots(fold_procs(AppState(snap.host_url), procs), slots), dataclasses.replace(snap, taken_at=TAKEN_AT + 1)
    )
    assert [v.parallel.source for v in first.models] == ["runner"] * 3
    assert [v.slots.busy if v.slots else None for v in first.models] == [0, 0, 0]
    derived = memo.derived
    second = fold(first, _poll(2))
    assert memo.derived == derived
    assert second.models is first.models

    _, _, busy = _runners_world(busy_pid=101)  # a new round: the second model's runner took a request
    third = fold(fold_slots(second, busy), _poll(3))
    assert memo.derived == derived + 1
    assert third.models[0] == first.models[0] and third.models[2] == first.models[2]
    assert [v.slots.busy if v.slots else None for v in third.models] == [0, 1, 0]
    with monkeypatch.context() as m:
        m.setattr(state_module, "ROW_MEMO", RowMemo())
        scratch = fold(fold_slots(fold_procs(AppState(snap.host_url), procs), busy), _poll(3))
    assert third.models == scratch.models
