"""The queue (``model.queue``, ``sources.connections``): the kernel's socket tables read as they are
(``tests/fixtures/proc_net/``: this machine's ``/proc/net/tcp`` and ``tcp6`` lines of a server on
port 41434 with one IPv4 and one IPv6 client), kvtop's own connections left out by socket inode,
and the estimate of requests waiting for a slot."""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

from kvtop.model.queue import fold_connections, queue_json, requeue
from kvtop.model.views import AppState
from kvtop.model.queue_snapshots import ConnSnapshot
from kvtop.model.slot_snapshots import SlotUse
from kvtop.sources.connections import ESTABLISHED, parse_proc_net_tcp, read_connections

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "proc_net"
PORT = 41434


def test_the_socket_tables_parse_to_addresses_ports_states_and_inodes() -> None:
    v4 = parse_proc_net_tcp((FIXTURES / "tcp").read_text())
    assert v4 == [
        (("127.0.0.1", PORT), ("0.0.0.0", 0), "0A", 1114164),  # listening
        (("127.0.0.1", 59246), ("127.0.0.1", PORT), ESTABLISHED, 1114166),  # the client's side
        (("127.0.0.1", PORT), ("127.0.0.1", 59246), ESTABLISHED, 1114168),  # the server's side
    ]
    v6 = parse_proc_net_tcp((FIXTURES / "tcp6").read_text())
    assert (("::1", PORT), ("::1", 48324), ESTABLISHED, 1114169) in v6
    assert len(v6) == 3


def _proc_root(tmp_path: Path, own_inodes: list[int]) -> Path:
    (tmp_path / "net").mkdir(parents=True)
    shutil.copy(FIXTURES / "tcp", tmp_path / "net" / "tcp")
    shutil.copy(FIXTURES / "tcp6", tmp_path / "net" / "tcp6")
    fd = tmp_path / "self" / "fd"
    fd.mkdir(parents=True)
    for i, inode in enumerate(own_inodes):
        os.symlink(f"socket:[{inode}]", fd / str(i + 3))
    os.symlink("/dev/null", fd / "0")
    return tmp_path


def test_connections_to_the_port_with_kvtops_own_left_out(tmp_path: Path) -> None:
    # the IPv4 client socket (inode 1114166) is this process's: its server side is kvtop's own
    snap = read_connections(PORT, proc_root=_proc_root(tmp_path, [1114166]), clock=lambda: 100.0)
    assert snap == ConnSnapshot(100.0, PORT, clients=(("::1", 48324),), own=1)
    both = read_connections(PORT, proc_root=_proc_root(tmp_path / "b", []), clock=lambda: 100.0)
    assert both.clients == (("127.0.0.1", 59246), ("::1", 48324)) and both.own == 0
    other_port = read_connections(11434, proc_root=_proc_root(tmp_path / "c", []), clock=lambda: 100.0)
    assert other_port.clients == () and other_port.error is None


def _model(name: str, busy: int | None, total: int | None) -> SimpleNamespace:
    return SimpleNamespace(name=name, slots=SlotUse(total=total, busy=busy, source="runner"))


def test_waiting_counts_connections_beyond_the_busy_slots_while_a_model_is_full() -> None:
    clients = tuple(("10.0.0.7", 50000 + i) for i in range(5))
    first = fold_connections(None, ConnSnapshot(100.0, PORT, clients[:3]), [_model("qwen3", 2, 2)])  # type: ignore[list-item]
    assert (first.in_flight, first.busy_slots, first.total_slots, first.waiting) == (3, 2, 2, 1)
    assert first.oldest_wait_s is None and first.full_models == ("qwen3",)  # one read: no age yet (--once)
    # 12 s later two more arrive: 3 wait; the oldest waiting is the newest of the first three (FIFO)
    later = fold_connections(first, ConnSnapshot(112.0, PORT, clients), [_model("qwen3", 2, 2)])  # type: ignore[list-item]
    assert later.waiting == 3 and later.oldest_wait_s == 12.0
    assert later.clients == (("10.0.0.7", 5),)
    # a free slot: nothing waits although connections are open (idle keep-alives count as in flight)
    free = fold_connections(later, ConnSnapshot(113.0, PORT, clients), [_model("qwen3", 1, 2)])  # type: ignore[list-item]
    assert free.in_flight == 5 and free.waiting == 0 and free.oldest_wait_s is None and free.full_models == ()


def test_the_queue_follows_the_slots_between_two_reads_of_the_connections() -> None:
    """The connections are read every few seconds, the slots every poll: ``requeue`` derives the queue
    again from the last read when a model's slots change (the slot's request ended: nothing waits)."""
    clients = tuple(("10.0.0.7", 50000 + i) for i in range(3))
    full = [_model("qwen3", 1, 1)]
    first = fold_connections(None, ConnSnapshot(100.0, PORT, clients), full)  # type: ignore[arg-type]
    queue = fold_connections(first, ConnSnapshot(105.0, PORT, clients), full)  # type: ignore[arg-type]
    state = AppState(host_url="http://127.0.0.1:11434", queue=queue, models=tuple(full))  # type: ignore[arg-type]
    assert requeue(state) is state  # slots as they were: the same state
    with_free = requeue(dataclasses.replace(state, models=(_model("qwen3", 0, 1),)))
    assert with_free.queue is not None
    assert (with_free.queue.waiting, with_free.queue.busy_slots, with_free.queue.full_models) == (0, 0, ())
    assert with_free.queue.in_flight == 3 and with_free.queue.taken_at == 105.0  # still the last read's
    busy_again = requeue(dataclasses.replace(with_free, models=tuple(full)))
    assert (
        busy_again.queue is not None and busy_again.queue.waiting == 2 and busy_again.queue.oldest_wait_s == 5.0
    )  # aged from the first read


def test_slots_not_known_leave_waiting_unknown_and_a_failed_read_says_why() -> None:
    unknown = fold_connections(None, ConnSnapshot(1.0, PORT, (("10.0.0.7", 1),)), [_model("m", None, None)])  # type: ignore[list-item]
    assert unknown.in_flight == 1 and unknown.waiting is None
    # no connection open: nothing waits, slots known or not (--once printed 'in flight 0~ · waiting ?')
    idle = fold_connections(None, ConnSnapshot(1.0, PORT, ()), [_model("m", None, None)])  # type: ignore[list-item]
    assert idle.in_flight == 0 and idle.waiting == 0
    failed = fold_connections(unknown, ConnSnapshot(2.0, PORT, error="connections not readable: AccessDenied"), [])
    assert failed.in_flight is None and failed.error == "connections not readable: AccessDenied"
    assert queue_json(failed)["error"] == "connections not readable: AccessDenied"
    assert queue_json(unknown) == {
        "port": PORT,
        "in_flight": 1,
        "busy_slots": None,
        "total_slots": None,
        "waiting": None,
        "oldest_wait_s": None,
        "full_models": [],
        "clients": [{"address": "10.0.0.7", "connections": 1}],
        "own_connections_left_out": 0,
        "source": "estimated",
        "error": None,
    }


def test_the_exporter_gives_the_queue_as_gauges_and_leaves_out_a_failed_read() -> None:
    import dataclasses

    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from kvtop.export.metrics import HostView, KvtopCollector, make_registry
    from kvtop.model.state import initial_state

    host = "http://127.0.0.1:41434"
    state, _ = initial_state(host, {}, __import__("datetime").timezone.utc)
    clients = tuple(("10.0.0.7", 50000 + i) for i in range(3))
    # two at t=100 (one served, one waiting), a third at t=130: two wait, the older since t=100
    first = fold_connections(None, ConnSnapshot(100.0, PORT, clients[:2]), [_model("qwen3", 1, 1)])  # type: ignore[list-item]
    queue = fold_connections(first, ConnSnapshot(130.0, PORT, clients), [_model("qwen3", 1, 1)])  # type: ignore[list-item]

    def scrape(q: object) -> dict[str, float]:
        view = HostView(url=host, local=True, log=False, state=dataclasses.replace(state, queue=q))
        text = generate_latest(make_registry(KvtopCollector(lambda: [view], lambda: None))).decode("utf-8")
        return {
            s.name: s.value
            for fam in text_string_to_metric_families(text)
            for s in fam.samples
            if s.name.startswith("kvtop_request")
        }

    assert scrape(queue) == {
        "kvtop_requests_in_flight": 3.0,
        "kvtop_requests_waiting": 2.0,
        "kvtop_request_oldest_wait_seconds": 30.0,
    }
    failed = fold_connections(queue, ConnSnapshot(131.0, PORT, error="connections not readable: AccessDenied"), [])
    assert scrape(failed) == {}


def test_one_line_for_every_face_with_the_estimated_mark() -> None:
    from kvtop.model.queue import queue_summary

    clients = tuple(("10.0.0.7", 50000 + i) for i in range(3)) + (("10.0.0.9", 1),)
    first = fold_connections(None, ConnSnapshot(100.0, PORT, clients[:2]), [_model("qwen3", 1, 1)])  # type: ignore[list-item]
    queue = fold_connections(first, ConnSnapshot(130.0, PORT, clients), [_model("qwen3", 1, 1)])  # type: ignore[list-item]
    assert queue_summary(queue) == (
        "in flight 4~ · waiting 3~ (oldest 30 s) · slots busy 1/1 · full: qwen3 · clients 10.0.0.7 ×3, 10.0.0.9 ×1"
    )
    assert queue_summary(None) is None
    failed = ConnSnapshot(1.0, PORT, error="connections not readable: AccessDenied")
    assert queue_summary(fold_connections(None, failed, [])) == "connections not readable: AccessDenied"
