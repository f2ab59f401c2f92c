"""The short texts of the dashboard's calm faces: an alert's age on the state's clock
(``ui.alert_age``) and the header's queue (``model.queue.queue_short``)."""

from __future__ import annotations

from kvtop.model.alerts import Alert
from kvtop.model.gpu_snapshots import GpuSnapshot
from kvtop.model.queue import fold_connections, queue_short
from kvtop.model.queue_snapshots import ConnSnapshot
from kvtop.model.snapshots import OllamaSnapshot
from kvtop.model.views import AppState
from kvtop.ui.alert_age import AGE_WIDEST, age_text, alert_age, state_clock


def test_age_text_truncates_to_its_unit() -> None:
    got = [age_text(s) for s in (-3.0, 0.0, 12.9, 59.99, 60.0, 179.0, 3599.0, 3600.0, 2 * 86400 - 1, 2 * 86400, 10**7)]
    # never seconds: a text that changed every poll repainted three widgets every second
    assert got == ["<1 min", "<1 min", "<1 min", "<1 min", "1 min", "2 min", "59 min", "1 h", "47 h", "2 d", "115 d"]
    assert age_text(3599.0) == AGE_WIDEST


def test_the_age_is_on_the_states_newest_sample_never_the_wall_clock() -> None:
    state = AppState("http://127.0.0.1:11434")
    assert state_clock(state) is None
    state = AppState(
        "http://127.0.0.1:11434",
        ollama=OllamaSnapshot("http://127.0.0.1:11434", 1000.0, True),
        gpu=GpuSnapshot(1003.5, "GPU telemetry: NVML", ok=True),
    )
    assert state_clock(state) == 1003.5  # the GPU sample came after the poll
    alert = Alert("spill", "critical", "qwen3:8b", 800.0, "spilled", (), "spill:qwen3:8b")
    assert alert_age(alert, state_clock(state)) == "3 min"
    assert alert_age(alert, None) is None
    assert alert_age(Alert("spill", "critical", "qwen3:8b", None, "spilled"), 1000.0) is None


def test_the_headers_queue_says_only_how_many_wait() -> None:
    class Full:
        name = "qwen3"
        from kvtop.model.slot_snapshots import SlotUse

        slots = SlotUse(total=1, busy=1, source="runner")

    clients = tuple(("10.0.0.7", 50000 + i) for i in range(3))
    alone = fold_connections(None, ConnSnapshot(100.0, 11434, clients[:1]), [Full()])  # type: ignore[list-item]
    assert alone.waiting == 0 and queue_short(alone) is None  # one in flight, one slot busy: nobody waits
    first = fold_connections(None, ConnSnapshot(100.0, 11434, clients[:2]), [Full()])  # type: ignore[list-item]
    assert queue_short(first) == "queue 1~ waiting"  # a first read cannot age a connection
    later = fold_connections(first, ConnSnapshot(145.0, 11434, clients), [Full()])  # type: ignore[list-item]
    assert queue_short(later) == "queue 2~ waiting (oldest 45 s)"  # the two newest wait: one since 100.0
    failed = fold_connections(later, ConnSnapshot(146.0, 11434, error="connections not readable: EACCES"), [])
    assert queue_short(failed) is None and queue_short(None) is None
