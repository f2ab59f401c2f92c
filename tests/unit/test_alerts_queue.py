"""``queue_wait`` (``model.alerts.queue``): requests waiting for a slot longer than the threshold
while every slot of a model is busy, with the slots fix sized by the exact KV arithmetic and checked
against the GPU's free memory, and the queue-length fix. The state is the bundled catalog's qwen3
q8_0 loaded by corpus 004's real spawn line with 2 slots at num_ctx 4096; the queue comes from a
connections read folded as the engine folds it."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

from kvtop.model.alerts import Thresholds, evaluate
from kvtop.model.fold_alerts import fold_gpu_with_alerts
from kvtop.model.gpu_snapshots import GpuDevice, GpuSnapshot, ProcSnapshot
from kvtop.model.queue import fold_connections
from kvtop.model.queue_snapshots import ConnSnapshot
from kvtop.model.slot_snapshots import SlotUse
from kvtop.model.views import AppState
from tests.fakes.nvml import GiB
from tests.unit.test_alerts import Q8, blob, kv_bytes, only, ps_snapshot, row, spawn_line, state_of

PORT = 11434


def _queued(state: AppState, waiting_since: float, now: float, clients: int) -> AppState:
    """``clients`` connections to the port, the first two since ``waiting_since - 1`` (served), the
    rest first seen at ``waiting_since``; both of the model's slots busy."""
    full = [SimpleNamespace(name=Q8, slots=SlotUse(total=2, busy=2, source="runner"))]
    ends = tuple(("10.0.0.7", 40000 + i) for i in range(clients))
    q = fold_connections(None, ConnSnapshot(waiting_since - 1, PORT, ends[:2]), full)  # type: ignore[arg-type]
    q = fold_connections(q, ConnSnapshot(waiting_since, PORT, ends), full)  # type: ignore[arg-type]
    q = fold_connections(q, ConnSnapshot(now, PORT, ends), full)  # type: ignore[arg-type]
    return dataclasses.replace(state, queue=q)


def _state(free_bytes: int = 10 * GiB) -> AppState:
    state = state_of(ps_snapshot([row(Q8, 4096, 2_900_000_000)]), [spawn_line(blob(Q8), 4096, parallel=2)])
    gpu = GpuSnapshot(
        taken_at=1030.0,
        status="GPU telemetry: NVML",
        ok=True,
        backend="nvml",
        devices=(
            GpuDevice(
                0,
                name="NVIDIA RTX A4000",
                memory_total_bytes=16 * GiB,
                memory_used_bytes=16 * GiB - free_bytes,
                memory_free_bytes=free_bytes,
            ),
        ),
    )
    return fold_gpu_with_alerts(state, gpu, ProcSnapshot(taken_at=1030.0))


def test_requests_waiting_past_the_threshold_raise_queue_wait_with_the_slots_fix() -> None:
    state = _queued(_state(), 1000.0, 1030.0, 5)
    alert = only(evaluate(state), "queue_wait", Q8)
    assert alert.severity == "warning"
    assert alert.message == (
        "3 requests waiting for a slot, the oldest 30 s: every slot of qwen3:1.7b-q8_0 is busy"
        " (2/2 slots busy) (estimated: 5 connections to port 11434)"
    )
    kv_now = kv_bytes(state, Q8, 4096, 2)
    assert state.models[0].memory.kv.value == kv_now and state.models[0].parallel.value == 2
    slots_fix, queue_fix = alert.fixes
    assert slots_fix.action == "OLLAMA_NUM_PARALLEL=5"  # 2 slots + the 3 waiting
    assert slots_fix.detail.startswith(f"KV ~{_ib(kv_now * 5 // 2)} (~+{_ib(kv_now * 3 // 2)})")
    assert slots_fix.fits is True  # 10 GiB free holds 3 more slots of this small model's KV
    assert queue_fix.action == "OLLAMA_MAX_QUEUE=3" and queue_fix.fits is None
    tight = _queued(_state(free_bytes=kv_now // 4), 1000.0, 1030.0, 5)
    assert only(evaluate(tight), "queue_wait", Q8).fixes[0].fits is False


def test_no_alert_below_the_threshold_or_while_a_slot_is_free() -> None:
    state = _queued(_state(), 1000.0, 1005.0, 5)  # waiting 5 s: under the 10 s default
    assert [a for a in evaluate(state) if a.kind == "queue_wait"] == []
    assert [a.kind for a in evaluate(state, Thresholds(queue_wait_s=2.0)) if a.kind == "queue_wait"] == ["queue_wait"]
    free_slot = [SimpleNamespace(name=Q8, slots=SlotUse(total=2, busy=1, source="runner"))]
    q = fold_connections(
        state.queue, ConnSnapshot(1060.0, PORT, tuple(("10.0.0.7", 40000 + i) for i in range(5))), free_slot
    )  # type: ignore[arg-type]
    assert [a for a in evaluate(dataclasses.replace(state, queue=q)) if a.kind == "queue_wait"] == []


def test_the_threshold_is_read_from_the_config_table() -> None:
    th, warnings = Thresholds.from_mapping({"queue_wait": "1m"})
    assert th.queue_wait_s == 60.0 and warnings == []


def _ib(n: int) -> str:
    from kvtop.model.alerts.text import ib

    return ib(n)


def test_no_quantized_cache_fix_for_a_model_that_cannot_use_flash_attention() -> None:
    """Issue 26's wording rule: a spilled model whose runner forced flash attention off (corpus 025's
    real line, 'flash_attn requires n_embd_head_k == n_embd_head_v - forcing off') is never offered
    OLLAMA_KV_CACHE_TYPE=q8_0/q4_0 (a quantized cache needs flash attention), nor flash attention;
    the same spill without that line is offered the q8_0 cache."""
    from tests.unit.test_alerts import corpus_line

    spilled = ps_snapshot([row(Q8, 32768, 6_100_000_000, 5_300_000_000)])  # KV 3.5 GiB, 763 MiB in RAM
    plain = only(evaluate(state_of(spilled, [spawn_line(blob(Q8), 32768)])), "spill", Q8)
    assert [f.action for f in plain.fixes] == [
        "num_ctx 25600",
        "OLLAMA_KV_CACHE_TYPE=q8_0",
        "OLLAMA_KV_CACHE_TYPE=q4_0",
    ]
    forced = corpus_line("025", "forcing off")
    alert = only(evaluate(state_of(spilled, [spawn_line(blob(Q8), 32768), forced])), "spill", Q8)
    assert [f.action for f in alert.fixes] == ["num_ctx 25600"]
