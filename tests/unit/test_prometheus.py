"""kvtop.export without sockets (metrics, log counters, exporter loop, command line): the
collector over real pipeline states, the log counters, the run loop's poll pacing, and the argument parsing.

States come from ``OllamaClient`` reading the stand-in's own answers (``kvtop.demo.server``
``ps_body`` / ``show_body`` / ``tags_body``) through ``httpx.MockTransport``, then
``model.fold_alerts.apply``: the same path the exporter takes. The text a scrape would return is
parsed back with prometheus-client's own parser, and values are checked against the scenario's
numbers and kvtop's KV arithmetic.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import sys
import time
import unicodedata
from collections.abc import Sequence
from datetime import timezone
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kvtop.demo.scenario import CatalogModel, Scenario
from kvtop.demo.api_bodies import ps_body, show_body, tags_body
from kvtop.demo.scenario import model_blob
from kvtop.demo.server import load_default_scenario
from kvtop.sources.hosts import host_is_this_machine
from kvtop.export.command import parse_listen
from kvtop.export.exporter import Exporter, HostPoller
from kvtop.export.log_counters import LogCounters, count_log
from kvtop.export.metrics import LABEL_MAX_CHARS, METRICS, HostView, KvtopCollector, label_value, make_registry
from kvtop.logparse.parser import LogParser
from kvtop.model import kv
from kvtop.model.gpu_snapshots import GpuDevice, GpuSnapshot, SystemMemory
from kvtop.model.logstate import LogState, fold_events
from kvtop.model.state import initial_state
from kvtop.model.views import AppState
from kvtop.model.fold_alerts import fold_with_alerts, fold_gpu_with_alerts, fold_log_with_alerts
from kvtop.sources.ollama import OllamaClient
from tests.fakes.gpu_sources import FixedGpuSource, FixedProcSource, no_gpu_snapshot
from tests.llama_fixture import ollama_spawn_line

HOST = "http://127.0.0.1:11434"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "llama_server"


# --------------------------------------------------------------------------------------------
# helpers


class StandinTransport:
    """The stand-in's answers for one scenario step, served through ``httpx.MockTransport``."""

    def __init__(self, scenario: Scenario, step: int) -> None:
        self.scenario = scenario
        self.step = step
        self.ps_calls = 0
        self.since_ns = time.time_ns()

    def handler(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/api/ps":
            self.ps_calls += 1
            return httpx.Response(
                200, json=ps_body(self.scenario, self.scenario.steps[self.step], self.since_ns, timezone.utc)
            )
        if path == "/api/version":
            return httpx.Response(200, json={"version": self.scenario.version})
        if path == "/api/tags":
            return httpx.Response(200, json=tags_body(self.scenario))
        if path == "/api/show":
            name = json.loads(request.content)["model"]
            return httpx.Response(200, json=show_body(self.scenario.models[name], True))
        return httpx.Response(404, json={"error": "not found"})

    def client(self) -> OllamaClient:
        return OllamaClient(HOST, transport=httpx.MockTransport(self.handler))


async def state_at(step: int) -> AppState:
    scenario = load_default_scenario()
    client = StandinTransport(scenario, step).client()
    try:
        snap = await client.sample(wait_details=True)
    finally:
        await client.aclose()
    first, _ = initial_state(HOST, {}, timezone.utc)
    return fold_with_alerts(first, snap)


def scrape(views: Sequence[HostView], gpu: GpuSnapshot | None = None) -> dict[str, Any]:
    """The families one scrape serves, parsed back by prometheus-client's text parser."""
    text = generate_latest(make_registry(KvtopCollector(lambda: list(views), lambda: gpu))).decode("utf-8")
    return {f.name: f for f in text_string_to_metric_families(text)}


def samples(fams: dict[str, Any], name: str, /, **labels: str) -> list[Any]:
    """Samples named ``name`` (a counter's family is named without ``_total``, its samples with it)."""
    fam = fams.get(name) or fams.get(name.removesuffix("_total"))
    if fam is None:
        return []
    return [s for s in fam.samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]


def value(fams: dict[str, Any], family: str, /, **labels: str) -> float:
    found = samples(fams, family, **labels)
    assert len(found) == 1, (family, labels, found)
    return float(found[0].value)


def expected_kv(model: CatalogModel, num_ctx: int) -> int:
    """KV bytes at ``num_ctx``, one slot, f16, flash attention as not known (kvtop assumes on)."""
    layout = kv.layout_from_model_info(model.model_info)
    assert isinstance(layout, kv.KVLayout)
    return kv.kv_allocation(layout, num_ctx, 1, "f16", "f16", flash_attention=True).total_bytes


# --------------------------------------------------------------------------------------------
# the collector over the scenario's states


async def test_every_model_of_the_spill_step_is_exported_with_the_scenarios_numbers() -> None:
    scenario = load_default_scenario()
    step = scenario.steps[4]
    state = await state_at(4)
    fams = scrape([HostView(url=HOST, local=False, log=False, state=state, polls=1)])

    assert value(fams, "kvtop_server_up", host=HOST) == 1
    assert value(fams, "kvtop_server_info", host=HOST, version="0.22.1") == 1
    assert len(samples(fams, "kvtop_model_size_bytes")) == len(step.loaded) == 3
    for row in step.loaded:
        model = scenario.models[row.model]
        ids = {"host": HOST, "model": row.model, "digest": model.digest}
        assert value(fams, "kvtop_model_size_bytes", **ids) == row.size
        assert value(fams, "kvtop_model_vram_bytes", **ids) == row.size_vram
        assert value(fams, "kvtop_model_spilled", **ids) == (1 if row.size_vram < row.size else 0)
        assert value(fams, "kvtop_model_cpu_ratio", **ids) == pytest.approx((row.size - row.size_vram) / row.size)
        assert value(fams, "kvtop_model_context_tokens", **ids, source="reported") == row.context_length
        assert value(fams, "kvtop_model_slots", **ids, source="default") == 1
        kv_bytes = expected_kv(model, row.context_length)
        assert value(fams, "kvtop_model_memory_bytes", **ids, part="kv", source="estimated") == kv_bytes
        if model.file_size is not None:
            assert value(fams, "kvtop_model_memory_bytes", **ids, part="weights", source="reported") == model.file_size
            assert value(fams, "kvtop_model_memory_bytes", **ids, part="compute", source="estimated") == (
                row.size - model.file_size - kv_bytes
            )
        else:  # gemma4: no file size in /api/tags: weights and compute are not known, so not exported
            assert samples(fams, "kvtop_model_memory_bytes", **ids, part="weights") == []
            assert samples(fams, "kvtop_model_memory_bytes", **ids, part="compute") == []
        info = samples(fams, "kvtop_model_info", **ids)
        assert len(info) == 1 and info[0].value == 1
        assert info[0].labels["blob"] == model_blob(model)
        assert info[0].labels["kv_type"] == "f16" and info[0].labels["kv_type_source"] == "default"
        assert info[0].labels["flash_attention"] == ""  # only a log tells
        assert (info[0].labels["engine"], info[0].labels["engine_source"]) == ("", "")  # no runner argv, ps silent
        assert info[0].labels["processor"] == kv.processor_string(row.size, row.size_vram)

    gemma = {"host": HOST, "model": "gemma4:latest", "digest": scenario.models["gemma4:latest"].digest}
    assert value(fams, "kvtop_model_size_bytes", **gemma) == 6591830464
    assert value(fams, "kvtop_model_vram_bytes", **gemma) == 5333539264
    assert value(fams, "kvtop_model_spilled", **gemma) == 1
    assert value(fams, "kvtop_model_cpu_ratio", **gemma) == pytest.approx(1258291200 / 6591830464)
    assert value(fams, "kvtop_alerts", host=HOST, kind="spill", severity="critical", model="gemma4:latest") == 1
    q4 = {"host": HOST, "model": "qwen3:1.7b-q4_K_M", "digest": scenario.models["qwen3:1.7b-q4_K_M"].digest}
    assert value(fams, "kvtop_model_memory_bytes", **q4, part="kv", source="estimated") == 469762048  # 448 MiB


async def test_model_info_names_the_runner_engine_as_once_does() -> None:
    """``engine`` / ``engine_source``: ModelView.engine, the RUNNER column of ``--once`` and ``engine`` of its JSON."""
    import dataclasses

    from kvtop.model.known import Known

    state = await state_at(4)
    engines = [Known("mlx", "reported"), Known("llama.cpp", "runner"), Known("ollama", "runner")]
    models = tuple(dataclasses.replace(v, engine=e) for v, e in zip(state.models, engines))
    fams = scrape(
        [HostView(url=HOST, local=False, log=False, state=dataclasses.replace(state, models=models), polls=1)]
    )
    for v, e in zip(models, engines):
        (info,) = samples(fams, "kvtop_model_info", host=HOST, model=v.name, digest=v.digest)
        assert (info.labels["engine"], info.labels["engine_source"]) == (e.value, e.source)


async def test_metric_names_follow_prometheus_conventions() -> None:
    fams = scrape([HostView(url=HOST, local=False, log=True, state=await state_at(4), polls=3)], no_gpu_snapshot())
    units = ("_bytes", "_seconds", "_ratio", "_celsius", "_watts", "_tokens", "_per_second", "_info", "_total")
    for spec in METRICS:
        assert spec.name.startswith("kvtop_")
        assert spec.name.endswith("_total") == (spec.kind == "counter"), spec.name
    for name in fams:
        spec = next(m for m in METRICS if m.name == name or m.name == name + "_total")
        assert spec.name.endswith(units) or spec.name in {
            "kvtop_server_up",
            "kvtop_model_slots",
            "kvtop_model_slots_busy",
            "kvtop_model_spilled",
            "kvtop_alerts",
            "kvtop_log_up",
            "kvtop_gpu_telemetry_up",
        }, spec.name
    assert fams["kvtop_server_polls"].type == "counter"
    assert value(fams, "kvtop_server_polls_total", host=HOST) == 3


async def test_an_unreachable_host_exports_up_0_and_no_stale_models() -> None:
    live = await state_at(4)
    down = fold_with_alerts(live, dataclass_replace_snapshot(live))
    assert down.models  # the dashboard keeps the last rows (dimmed) ...
    fams = scrape([HostView(url=HOST, local=False, log=False, state=down, polls=2, poll_failures=1)])
    assert value(fams, "kvtop_server_up", host=HOST) == 0
    assert samples(fams, "kvtop_model_size_bytes") == []  # ... the exporter does not present them as current
    assert value(fams, "kvtop_server_poll_failures_total", host=HOST) == 1
    assert value(fams, "kvtop_alerts", host=HOST, kind="server_unreachable", severity="critical", model="") == 1
    assert live.last_ok is not None
    assert value(fams, "kvtop_server_last_success_timestamp_seconds", host=HOST) == live.last_ok.taken_at


def dataclass_replace_snapshot(state: AppState) -> Any:
    from kvtop.model.snapshots import OllamaSnapshot

    assert state.ollama is not None
    return OllamaSnapshot(
        host_url=HOST,
        taken_at=state.ollama.taken_at + 5,
        reachable=False,
        error="connection refused",
        error_kind="refused",
    )


def test_gpu_telemetry_is_exported_in_base_units() -> None:
    gpu = GpuSnapshot(
        taken_at=1.0,
        status="GPU telemetry: NVML",
        ok=True,
        backend="nvml",
        devices=(
            GpuDevice(
                index=0,
                name="NVIDIA H200",
                uuid="GPU-1234",
                memory_total_bytes=150_000_000_000,
                memory_used_bytes=6_000_000_000,
                memory_free_bytes=144_000_000_000,
                gpu_util_percent=37,
                temperature_c=41,
                power_draw_mw=123_456,
            ),
            GpuDevice(index=1, error="GPU is lost"),
        ),
        system=SystemMemory(ram_total_bytes=64 * 2**30, ram_available_bytes=48 * 2**30, swap_used_bytes=2**20),
    )
    fams = scrape([], gpu)
    ids = {"gpu": "0", "name": "NVIDIA H200", "uuid": "GPU-1234"}
    assert value(fams, "kvtop_gpu_telemetry_up") == 1
    assert value(fams, "kvtop_gpu_memory_total_bytes", **ids) == 150_000_000_000
    assert value(fams, "kvtop_gpu_unified_memory", **ids) == 0  # its own memory
    assert value(fams, "kvtop_gpu_memory_used_bytes", **ids) == 6_000_000_000
    assert value(fams, "kvtop_gpu_memory_free_bytes", **ids) == 144_000_000_000
    assert value(fams, "kvtop_gpu_utilization_ratio", **ids) == pytest.approx(0.37)
    assert value(fams, "kvtop_gpu_temperature_celsius", **ids) == 41
    assert value(fams, "kvtop_gpu_power_watts", **ids) == pytest.approx(123.456)
    assert samples(fams, "kvtop_gpu_memory_total_bytes", gpu="1") == []  # a lost GPU has no figures
    assert value(fams, "kvtop_system_swap_used_bytes") == 2**20
    assert value(fams, "kvtop_system_ram_total_bytes") == 64 * 2**30


async def test_label_values_from_the_server_are_escaped_not_injected() -> None:
    state = await state_at(4)
    weird = 'evil"} 1\nkvtop_server_up{host="x'
    state = dataclasses.replace(state, models=(dataclasses.replace(state.models[0], name=weird),))
    fams = scrape([HostView(url=HOST, local=False, log=False, state=state)])
    assert [s.labels["model"] for s in samples(fams, "kvtop_model_size_bytes")] == [weird.replace("\n", "\ufffd")]
    assert len(samples(fams, "kvtop_server_up")) == 1


async def test_label_values_lose_control_characters_and_keep_printable_text() -> None:
    """A hostile server's ``general.architecture`` (/api/show) must not carry a raw ESC into /metrics."""
    state = await state_at(4)
    arch = "llama\x1b]52;c;SGVsbG8=\x07\x1b[2J\u202e"
    name = "qwen3-日本語-🦙:1.7b"
    state = dataclasses.replace(state, models=(dataclasses.replace(state.models[0], architecture=arch, name=name),))
    text = generate_latest(
        make_registry(KvtopCollector(lambda: [HostView(url=HOST, local=False, log=False, state=state)], lambda: None))
    ).decode("utf-8")
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert 'architecture="llama\ufffd]52;c;SGVsbG8=\ufffd\ufffd[2J\ufffd"' in text
    assert f'model="{name}"' in text  # other scripts and emoji are kept
    assert not any(unicodedata.category(c) == "Cc" and c != "\n" for c in text)
    assert label_value("x" * 1000) == "x" * (LABEL_MAX_CHARS - 1) + "…"


# --------------------------------------------------------------------------------------------
# log counters


def _runner_lines(name: str, blob: str) -> list[str]:
    """A captured llama-server run (tests/fixtures/llama_server) as Ollama would log it for ``blob``."""
    argv = (FIXTURES / f"{name}.cmd").read_text(encoding="utf-8").split()
    old = next(a for a in argv if "blobs/sha256-" in a)
    new = f"/usr/share/ollama/.ollama/models/blobs/{blob}"
    stderr = (FIXTURES / f"{name}.log").read_text(encoding="utf-8").replace(old, new)
    return [ollama_spawn_line([new if a == old else a for a in argv]), *stderr.splitlines()]


TRUNCATION = (
    'time=2026-11-29T12:00:05.000Z level=WARN source=runner.go:131 msg="truncating input prompt" '
    "limit=2048 prompt=5065 keep=5 new=2048"
)
BLOB_A = "sha256-" + "a" * 64
BLOB_B = "sha256-" + "b" * 64


def _feed(parser: LogParser, log: LogState, counters: LogCounters, lines: list[str]) -> tuple[LogState, LogCounters]:
    events = [e for line in lines for e in parser.feed(line)] + parser.end_batch()
    log = fold_events(log, events, source="file:test", status=None, ok=True, lines=len(lines))
    return log, count_log(counters, events, log.loads)


def test_reloads_and_truncations_count_per_blob_and_never_go_down() -> None:
    parser, log, c = LogParser(), LogState(), LogCounters()
    log, c = _feed(parser, log, c, _runner_lines("f16-fa-on-np1", BLOB_A))
    assert dict(c.reloads) == {BLOB_A: 0} and dict(c.truncations) == {BLOB_A: 0}  # 0 before the first: increase()
    log, c = _feed(parser, log, c, [TRUNCATION])
    assert dict(c.truncations) == {BLOB_A: 1}  # printed while BLOB_A's runner was the newest load
    log, c = _feed(parser, log, c, _runner_lines("q4_0-fa-auto-np1", BLOB_B))
    log, c = _feed(parser, log, c, _runner_lines("f16-fa-on-np1", BLOB_A))
    assert dict(c.reloads) == {BLOB_A: 1, BLOB_B: 0}
    log, c = _feed(parser, log, c, [TRUNCATION, TRUNCATION])
    assert dict(c.truncations) == {BLOB_A: 3, BLOB_B: 0}
    same = count_log(c, [], log.loads)
    assert same is c  # nothing new: the very same counters (a scrape sees no change)
    # the log state's window drops the oldest loads: the counts stay
    trimmed = count_log(c, [], log.loads[-1:])
    assert dict(trimmed.reloads) == {BLOB_A: 1, BLOB_B: 0} and dict(trimmed.truncations) == {BLOB_A: 3, BLOB_B: 0}
    assert trimmed.counted_loads == frozenset({log.loads[-1].first_line})


def test_a_truncation_before_any_load_has_an_empty_blob() -> None:
    parser, log, c = LogParser(), LogState(), LogCounters()
    log, c = _feed(parser, log, c, [TRUNCATION])
    assert dict(c.truncations) == {"": 1} and dict(c.reloads) == {}


async def test_log_counters_reach_the_scrape() -> None:
    """The poller's log path: events → fold_log_with_alerts → counters → the families."""
    scenario = load_default_scenario()
    blob = model_blob(scenario.models["qwen3:1.7b-q8_0"])
    parser = LogParser()
    lines = _runner_lines("f16-fa-on-np1", blob) + [TRUNCATION]
    events = [e for line in lines for e in parser.feed(line)] + parser.end_batch()
    state = fold_log_with_alerts(await state_at(1), events, source="file:x", status=None, ok=True, lines=len(lines))
    view = HostView(
        url=HOST, local=False, log=True, state=state, counters=count_log(LogCounters(), events, state.log.loads)
    )
    fams = scrape([view])
    assert value(fams, "kvtop_prompt_truncations_total", host=HOST, blob=blob) == 1
    assert value(fams, "kvtop_model_reloads_total", host=HOST, blob=blob) == 0
    assert value(fams, "kvtop_log_up", host=HOST, source="file:x") == 1
    assert value(fams, "kvtop_log_lines_total", host=HOST) == len(lines)
    # without a log the log families are absent, not zero
    bare = scrape([HostView(url=HOST, local=False, log=False, state=state)])
    assert "kvtop_prompt_truncations" not in bare and "kvtop_log_up" not in bare


# --------------------------------------------------------------------------------------------
# the run loop


class CountingSource:
    """An Ollama source that counts samples and answers from the stand-in's step 4."""

    def __init__(self, client: OllamaClient, delay_s: float = 0.0) -> None:
        self.client = client
        self.samples = 0
        self.delay_s = delay_s
        self.closed = False

    async def sample(self) -> Any:
        self.samples += 1
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        return await self.client.sample()

    async def aclose(self) -> None:
        self.closed = True
        await self.client.aclose()


async def test_scrapes_never_poll_and_a_slow_host_does_not_slow_another() -> None:
    scenario = load_default_scenario()
    fast = CountingSource(StandinTransport(scenario, 4).client())
    slow = CountingSource(StandinTransport(scenario, 2).client(), delay_s=5.0)
    gpu, procs = FixedGpuSource(), FixedProcSource()
    exporter = Exporter(
        [HostPoller("http://slow:1", slow, local=False, alerts={}), HostPoller(HOST, fast, local=True, alerts={})],
        interval_s=0.25,
        gpu_source=gpu,
        proc_source=procs,
    )
    registry = make_registry(exporter.collector)
    stop = asyncio.Event()
    task = asyncio.create_task(exporter.run(stop))
    t0 = time.monotonic()
    scrapes = 0
    while time.monotonic() - t0 < 1.1:
        text = await asyncio.to_thread(generate_latest, registry)
        scrapes += 1
        await asyncio.sleep(0.01)
    stop.set()
    await asyncio.wait_for(task, 5)
    assert scrapes > 20
    assert 4 <= fast.samples <= 6  # ~1.1 s / 0.25 s, however many scrapes
    assert slow.samples == 1  # still in its first sample: the fast host went on without it
    fams = {f.name: f for f in text_string_to_metric_families(text.decode())}
    assert value(fams, "kvtop_server_up", host=HOST) == 1 and value(fams, "kvtop_server_up", host="http://slow:1") == 0
    assert len(samples(fams, "kvtop_model_size_bytes", host=HOST)) == 3
    assert value(fams, "kvtop_gpu_telemetry_up") == 0 and gpu.samples >= 4
    assert fast.closed and slow.closed and gpu.closed


def test_gpu_samples_join_only_hosts_on_this_machine() -> None:
    first, _ = initial_state(HOST, {}, timezone.utc)
    local = HostPoller(
        HOST, CountingSource(StandinTransport(load_default_scenario(), 0).client()), local=True, alerts={}
    )
    remote = HostPoller(
        "http://10.0.0.9:11434",
        CountingSource(StandinTransport(load_default_scenario(), 0).client()),
        local=False,
        alerts={},
    )
    exporter = Exporter([local, remote], interval_s=1.0)
    gpu = no_gpu_snapshot(5.0)
    from kvtop.model.gpu_snapshots import ProcSnapshot

    procs = ProcSnapshot(taken_at=5.0)
    exporter.engine.stage_gpu(gpu, procs)  # what the engine's GPU poller stages
    exporter.engine.apply_step()
    assert local.view.state == fold_gpu_with_alerts(first, gpu, procs)
    assert remote.view.state.gpu is None and exporter.gpu is gpu


# --------------------------------------------------------------------------------------------
# arguments and locality


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:9877", ("127.0.0.1", 9877)),
        ("[::1]:9877", ("::1", 9877)),
        (":9100", ("0.0.0.0", 9100)),
        ("localhost:0", ("localhost", 0)),
        (" 0.0.0.0:65535 ", ("0.0.0.0", 65535)),
    ],
)
def test_listen_addresses(text: str, expected: tuple[str, int]) -> None:
    assert parse_listen(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("9877", "expected HOST:PORT"),
        ("::1:9877", "IPv6 address goes in brackets"),
        ("[::1]9877", r"expected \[IPV6\]:PORT"),
        ("[nope]:9877", "not an IPv6 address"),
        ("127.0.0.1:65536", "0–65535"),
        ("127.0.0.1:http", "0–65535"),
        ("127.0.0.1:", "0–65535"),
    ],
)
def test_bad_listen_addresses_say_what_is_expected(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_listen(text)


@pytest.mark.parametrize(
    ("url", "local"),
    [
        ("http://127.0.0.1:11434", True),
        ("http://127.3.4.5:11434", True),
        ("http://[::1]:11434", True),
        ("http://localhost:11434", True),
        ("http://LOCALHOST:11434", True),
        ("http://10.1.2.3:11434", True),  # one of this machine's interface addresses
        ("http://10.1.2.4:11434", False),
        ("http://[fe80::1]:11434", True),
        ("http://box:11434", True),  # this machine's own name
        ("http://box.example.org:11434", True),
        ("http://gpu-box:11434", False),
        ("https://ollama.example.org/ollama", False),
    ],
)
def test_which_hosts_are_on_this_machine(url: str, local: bool) -> None:
    assert host_is_this_machine(url, addresses={"10.1.2.3", "fe80::1"}, hostname="box") is local


def test_the_exporter_never_imports_textual() -> None:
    code = (
        "import sys, kvtop.export.command;"
        "bad = [m for m in sys.modules if m == 'textual' or m.startswith('textual.')];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run(check=False, args=[sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
