"""model.slots and sources.slots without a runner: the /slots parser, failures as reasons (a real
HTTP server on 127.0.0.1), the estimate replayed from real llama-server stderr
(tests/fixtures/llama_server/busy-np2-prefill.log), the join with /slots, and the CONTEXT cell."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from kvtop.model.gpu_snapshots import RunnerProcess
from kvtop.model.slot_snapshots import RunnerSlots, SlotState, SlotsSnapshot
from kvtop.model.slots import slot_use
from kvtop.model.views import AppState
from kvtop.sources.slots import SlotsSource, parse_slots, slot_runners
from kvtop.ui.widgets.models_table import slots_cell
from tests.unit.test_alerts import TINY, blob, ps_snapshot, row, state_of

LLAMA = Path(__file__).resolve().parents[1] / "fixtures" / "llama_server"


def test_parse_llama_server_and_era_a_shapes() -> None:
    body = [
        {"id": 1, "n_ctx": 4096, "speculative": False, "is_processing": True},
        {"id": 0, "n_ctx": 4096, "speculative": False, "is_processing": False},
    ]
    assert parse_slots(body) == (SlotState(0, 4096, False), SlotState(1, 4096, True))
    assert parse_slots([{"id": 0, "n_ctx": 2048, "state": 1}]) == (SlotState(0, 2048, True),)
    for bad in ({"slots": []}, [1], [{"n_ctx": 1}], [{"id": True}]):
        with pytest.raises(ValueError):
            parse_slots(bad)


def test_only_slot_serving_runners_with_a_port_are_asked() -> None:
    runners = [
        RunnerProcess(1, "llama-server", "C", port=40000),
        RunnerProcess(2, "ollama runner", "B", port=40001),
        RunnerProcess(3, "llama-server", "C"),
        RunnerProcess(4, "ollama_llama_server", "A", port=40002),
    ]
    assert [r.pid for r in slot_runners(runners)] == [1, 4]


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        mode = self.server.mode  # type: ignore[attr-defined]
        if mode == "501":
            body = b'{"error":{"code":501,"message":"This server does not support slots endpoint.","type":"not_supported_error"}}'
            self.send_response(501)
        elif mode == "text":
            body = b"<html>hello</html>"
            self.send_response(200)
        elif mode == "huge":
            body = b"[" + b'{"id":0,"n_ctx":1,"is_processing":false},' * 40000 + b'{"id":1}]'
            self.send_response(200)
        else:  # trickle: headers now, the body never completes within the deadline
            self.send_response(200)
            self.send_header("Content-Length", "100")
            self.end_headers()
            self.wfile.write(b"[")
            self.wfile.flush()
            time.sleep(1.5)
            return
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture
def server() -> Iterator[ThreadingHTTPServer]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.daemon_threads = True
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.mark.parametrize(
    ("mode", "error"),
    [
        ("501", "HTTP 501: This server does not support slots endpoint."),
        ("text", "the answer is not JSON"),
        ("huge", "the answer is larger than 1024 KiB"),
        ("trickle", "no answer within 0.5 s"),
    ],
)
async def test_failures_are_reasons(server: ThreadingHTTPServer, mode: str, error: str) -> None:
    server.mode = mode  # type: ignore[attr-defined]
    runner = RunnerProcess(7, "llama-server", "C", blob="sha256-" + "a" * 64, port=server.server_address[1])
    source = SlotsSource()
    start = time.monotonic()
    try:
        snap = await source.sample([runner])
    finally:
        await source.aclose()
    assert time.monotonic() - start < 1.2  # the deadline holds even against a trickling runner
    (got,) = snap.runners
    assert (got.error, got.slots, got.pid, got.blob) == (error, (), 7, runner.blob)


def _state(lines_upto: int | None) -> AppState:
    """A TINY row at num_ctx 4096 with the fixture's run as Ollama logs it (its spawn line first),
    cut after log line ``lines_upto`` of the stderr (None: all of it)."""
    from tests.llama_fixture import ollama_spawn_line

    argv = (LLAMA / "busy-np2-prefill.cmd").read_text(encoding="utf-8").split()
    old = next(a for a in argv if "blobs/sha256-" in a)
    new = f"/usr/share/ollama/.ollama/models/blobs/{blob(TINY)}"
    stderr = (LLAMA / "busy-np2-prefill.log").read_text(encoding="utf-8").replace(old, new).splitlines()
    lines = [ollama_spawn_line([new if a == old else a for a in argv])] + stderr[:lines_upto]
    return state_of(ps_snapshot([row(TINY, 4096, 60_000_000)]), lines)


@pytest.mark.parametrize(
    ("upto", "busy", "prefill"),
    [
        (184, 0, None),  # before the request
        (187, 1, (0, 1804, 0)),  # "new prompt, …, task.n_tokens = 1804"
        (190, 1, (1024, 1804, 56)),  # "cached n_tokens = 1024": 1024 of 1804 tokens
        (192, 1, None),  # "init sampler": the prompt is in, generation runs
        (None, 0, None),  # "stop processing": released
    ],
)
def test_estimate_from_real_runner_lines(upto: int | None, busy: int, prefill: tuple[int, int, int] | None) -> None:
    state = _state(upto)
    (v,) = state.models
    assert v.load is not None and v.load.era == "C" and v.parallel.value == 2
    use = v.slots
    assert use is not None and (use.source, use.total, use.busy) == ("estimated", 2, busy)
    assert use.note.startswith("runner log slot lines of load #1")
    got = None if use.prefill is None else (use.prefill.done_tokens, use.prefill.total_tokens, use.prefill.percent)
    assert got == prefill
    assert slots_cell(v, 9) == (f"pf {prefill[2]}%" if prefill else "4096 ~▶1" if busy else "4096×2")


def test_reported_slots_win_and_an_idle_runner_hides_the_prefill() -> None:
    v = _state(190).models[0]
    busy = SlotsSnapshot(
        1.0, (RunnerSlots(99, 40000, blob(TINY), 8192, (SlotState(0, 4096, False), SlotState(1, 4096, True))),)
    )
    use = slot_use(v, busy, _state(190).log.recent, _state(190).log.loads, 1)
    assert use is not None and (use.source, use.busy, use.total, use.n_ctx_per_slot) == ("runner", 1, 2, 4096)
    assert use.prefill is not None and use.prefill.percent == 56
    assert use.note == "GET http://127.0.0.1:40000/slots (runner PID 99); prefill progress from the runner log"
    idle = SlotsSnapshot(
        1.0, (RunnerSlots(99, 40000, blob(TINY), 8192, (SlotState(0, 4096, False), SlotState(1, 4096, False))),)
    )
    use = slot_use(v, idle, _state(190).log.recent, _state(190).log.loads, 1)
    assert use is not None and use.busy == 0 and use.prefill is None
    failed = SlotsSnapshot(1.0, (RunnerSlots(99, 40000, blob(TINY), 8192, error="no answer within 0.5 s"),))
    use = slot_use(v, failed, _state(190).log.recent, _state(190).log.loads, 2)
    assert use is not None and use.source == "estimated" and use.busy == 1 and use.log_ambiguous
    assert use.note.startswith(
        "/slots on port 40000: no answer within 0.5 s; runner log slot lines of load #1;"
        " the log's slot lines name no model: with 2 llama-server runners loaded"
    )


def test_no_log_no_runner() -> None:
    (v,) = state_of(ps_snapshot([row(TINY, 4096, 60_000_000)])).models
    assert v.slots is not None and (v.slots.busy, v.slots.source) == (None, None)
    assert v.slots.note == "no /slots answer from a local runner, and no runner load in the log"
    assert slots_cell(v, 9) == "4096×1*"


def test_props_and_metrics_are_read_from_llama_server_shapes() -> None:
    """``/props`` and ``/metrics`` as upstream ``server-context.cpp`` builds them (get_res_props, metrics)."""
    from kvtop.sources.slots import parse_metrics, parse_props

    props = parse_props(
        {
            "default_generation_settings": {"n_ctx": 8192, "params": {}},
            "total_slots": 2,
            "model_path": "/m/blobs/sha256-" + "ab" * 32,
            "build_info": "b10488-abc",
            "endpoint_metrics": False,
            "chat_template": "{{x}}",
        }
    )
    assert (props.n_ctx_per_slot, props.total_slots, props.build_info, props.metrics_endpoint) == (
        8192,
        2,
        "b10488-abc",
        False,
    )
    assert parse_props({"total_slots": True, "default_generation_settings": []}).total_slots is None
    with pytest.raises(ValueError, match="expected a JSON object"):
        parse_props([1])
    text = (
        "# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.\n"
        "# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 1804\n"
        "llamacpp:tokens_predicted_total 1500\nllamacpp:requests_processing 1\nother_metric 3\nllamacpp:bad x\n"
    )
    assert parse_metrics(text) == {
        "llamacpp:prompt_tokens_total": 1804.0,
        "llamacpp:tokens_predicted_total": 1500.0,
        "llamacpp:requests_processing": 1.0,
    }


class _Runner(BaseHTTPRequestHandler):
    """A fake llama-server that counts what it is asked."""

    def do_GET(self) -> None:
        srv = self.server
        srv.asked.append(self.path)  # type: ignore[attr-defined]
        if self.path == "/props":
            body = json.dumps(
                {"default_generation_settings": {"n_ctx": 4096}, "total_slots": 2, "endpoint_metrics": srv.metrics_on}
            ).encode()  # type: ignore[attr-defined]
        elif self.path == "/metrics":
            body = b"llamacpp:tokens_predicted_total 42\n"
        else:
            body = json.dumps(
                [
                    {
                        "id": 0,
                        "n_ctx": 4096,
                        "is_processing": True,
                        "id_task": 3,
                        "n_prompt_tokens": 100,
                        "next_token": [{"n_decoded": 9}],
                    },
                    {"id": 1, "n_ctx": 4096, "is_processing": False},
                ]
            ).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return


@pytest.mark.parametrize("metrics_on", [False, True])
async def test_props_once_per_runner_metrics_only_when_on(metrics_on: bool) -> None:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Runner)
    srv.asked, srv.metrics_on = [], metrics_on  # type: ignore[attr-defined]
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    runner = RunnerProcess(7, "llama-server", "C", blob="sha256-" + "a" * 64, port=srv.server_address[1])
    source = SlotsSource()
    try:
        first = await source.sample([runner])
        second = await source.sample([runner])
    finally:
        await source.aclose()
        srv.shutdown()
        srv.server_close()
    asked = srv.asked  # type: ignore[attr-defined]
    assert asked.count("/props") == 1 and asked.count("/slots") == 2
    assert asked.count("/metrics") == (1 if metrics_on else 0)  # from the second round, once /props said so
    (a,), (b,) = first.runners, second.runners
    assert a.props == b.props and a.props is not None and (a.props.n_ctx_per_slot, a.props.total_slots) == (4096, 2)
    assert b.metrics == ({"llamacpp:tokens_predicted_total": 42.0} if metrics_on else {})
    assert [(s.id, s.is_processing, s.id_task, s.n_tokens, s.n_decoded) for s in b.slots] == [
        (0, True, 3, 100, 9),
        (1, False, None, None, None),
    ]
