"""The alert engine's cost, proved with counters, not clocks: KV computations per
evaluation grow linearly with the models, the log is scanned once per event, a layout is hashed
once; and the indexes that make it so give the answers the pairwise searches gave.

``world(n)`` is also the benchmark's (``benchmarks/alerts_cost.py``): ``n`` copies of the demo's
qwen3:1.7b (each its own digest, weights blob and ``model_info`` mapping, contexts 4096 to
32768), every third spilled, one GPU with little free memory and one runner per model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from types import MappingProxyType
from typing import Any

import pytest

from kvtop.logparse.parser import parse_lines
from kvtop.model import kv
from kvtop.model.alerts import Alert, Fix, evaluate, evaluate_state
from kvtop.model.alerts import log_scan
from kvtop.model.alerts.context import current_types, other_kv
from kvtop.model.gpu_snapshots import (
    GpuDevice,
    GpuProcess,
    GpuSnapshot,
    ProcSnapshot,
    RunnerProcess,
    ServerProcess,
    SystemMemory,
)
from kvtop.model.views import AppState, ModelView
from kvtop.model.fold_alerts import fold_with_alerts, fold_gpu_with_alerts, fold_log_with_alerts
from tests.ui.fakes import HOST, TAKEN_AT
from tests.unit.test_alerts import Q8, ps_snapshot, row

GIB = 1 << 30


def world(
    n: int,
    *,
    gpu: bool = True,
    short_bytes: int = 300_000_000,
    free_bytes: int = 100_000_000,
    ctx_of: Callable[[int], int] = lambda i: 4096 * (1 + i % 8),
) -> AppState:
    """``n`` loaded models, every third spilled by about ``short_bytes``; with ``gpu``, one GPU
    with ``free_bytes`` free and each model's runner on it."""
    base = ps_snapshot([row(Q8, 16384, 4 * GIB, 4 * GIB)])
    (m0,) = base.models
    show0 = base.shows[m0.digest]
    models = []
    shows = {}
    for i in range(n):
        size = 4 * GIB + i * 1_000_000
        vram = size - (short_bytes + i * 1000) if i % 3 == 0 else size
        m = dataclasses.replace(
            m0,
            name=f"qwen3:m{i}",
            digest=f"{i + 1:064x}",
            size_bytes=size,
            size_vram_bytes=vram,
            context_length=ctx_of(i),
        )
        models.append(m)
        shows[m.digest] = dataclasses.replace(
            show0,
            digest=m.digest,
            name=m.name,
            model_blob=f"sha256-{i + 1:064x}",
            model_info=MappingProxyType(dict(show0.model_info)),
        )
    snap = dataclasses.replace(base, models=tuple(models), shows=MappingProxyType(shows))
    state = fold_with_alerts(AppState(HOST), snap)
    if gpu:
        runners = tuple(
            RunnerProcess(
                pid=1000 + i, kind="llama-server", era="v0.30+", blob=f"sha256-{i + 1:064x}", ppid=1, server_pid=1
            )
            for i in range(n)
        )
        procs = ProcSnapshot(
            taken_at=TAKEN_AT, servers=(ServerProcess(1, "ollama", ("ollama", "serve")),), runners=runners
        )
        total = n * 5 * GIB
        dev = GpuDevice(
            index=0,
            name="GPU",
            memory_total_bytes=total,
            memory_used_bytes=total - free_bytes,
            memory_free_bytes=free_bytes,
            processes=tuple(GpuProcess(1000 + i, m.size_vram_bytes) for i, m in enumerate(models)),
        )
        sample = GpuSnapshot(
            taken_at=TAKEN_AT,
            status="ok",
            ok=True,
            devices=(dev,),
            system=SystemMemory(
                ram_total_bytes=64 * GIB, ram_available_bytes=40 * GIB, swap_total_bytes=0, swap_used_bytes=0
            ),
        )
        state = fold_gpu_with_alerts(state, sample, procs)
    return state


class KvCounter:
    """Counts calls into the KV arithmetic (``kv.kv_allocation`` and ``kv.max_num_ctx``, including
    the allocations a search makes), cache hits included: the work an evaluation asks for."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        for name in ("kv_allocation", "max_num_ctx"):
            real = getattr(kv, name)

            def counted(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
                self.calls += 1
                return _real(*args, **kwargs)

            monkeypatch.setattr(kv, name, counted)

    def during(self, fn: Callable[[], object]) -> int:
        before = self.calls
        fn()
        return self.calls - before


def _spilled(alerts: tuple[Alert, ...]) -> int:
    return sum(a.kind == "spill" for a in alerts)


@pytest.mark.parametrize("others_can_give", [True, False], ids=["others-shrink", "no-other-can-give"])
def test_kv_computations_per_evaluation_grow_linearly_with_models(
    monkeypatch: pytest.MonkeyPatch, others_can_give: bool
) -> None:
    # no-other-can-give: every model at num_ctx 256, so no smaller context exists for any of them
    # (the pairwise search asked kv.max_num_ctx of every other model for every spill)
    ctx_of: Callable[[int], int] = (lambda i: 4096 * (1 + i % 8)) if others_can_give else (lambda i: 256)
    small, large = world(10, ctx_of=ctx_of), world(100, ctx_of=ctx_of)
    counter = KvCounter(monkeypatch)
    n_small = counter.during(lambda: evaluate(small))
    n_large = counter.during(lambda: evaluate(large))
    a_small, a_large = evaluate(small), evaluate(large)
    assert (_spilled(a_small), _spilled(a_large)) == (4, 34)
    # a third spilled: the work per model stays the same (pairwise it was 25 times as much)
    per_model_small, per_model_large = n_small / 10, n_large / 100
    assert per_model_large <= 1.25 * per_model_small, (n_small, n_large)
    assert n_large <= 30 * 34 + 2 * 100  # a bounded search per spill, two figures per other model at most
    if others_can_give:
        assert all(
            any(f.action.startswith("num_ctx ") and " for " in f.action for f in a.fixes)
            for a in a_large
            if a.kind == "spill"
        )
    else:
        assert not any(" for " in f.action for a in a_large for f in a.fixes if f.action.startswith("num_ctx"))


def _pairwise_other_fixes(state: AppState, view: ModelView, short: int) -> tuple[Fix | None, str | None]:
    """The search the engine replaced, as it was: every other model, largest KV cache first, asked
    ``kv.max_num_ctx``; and the smallest other model whose VRAM is enough (one GPU: all share it)."""
    views = [v for v in state.models if not v.cloud]
    others = [o for o in views if o is not view and o.size_vram_bytes]
    assert state.last_ok is not None
    best: Fix | None = None
    for o in sorted(others, key=lambda m: -(m.memory.kv.value or 0)):
        layout = kv.layout_from_model_info(state.last_ok.shows[o.digest].model_info)
        o_ctx, o_par, o_kv = o.context.value, o.parallel.value, o.memory.kv.value
        if not isinstance(layout, kv.KVLayout) or o_ctx is None or o_par is None or o_kv is None or o.spilled:
            continue
        k, v, fa = current_types(o)
        try:
            n = kv.max_num_ctx(layout, o_kv - short, o_par, k, v, flash_attention=fa)
        except ValueError:
            continue
        if 0 < n < o_ctx:
            best = Fix(f"num_ctx {n} for {o.name}", "", True, "")
            break
    enough = sorted((o for o in others if (o.size_vram_bytes or 0) >= short), key=lambda m: m.size_vram_bytes or 0)
    return best, (f"unload {enough[0].name}" if enough else None)


@pytest.mark.parametrize("short_bytes", [300_000_000, 2 * GIB + 300_000_000, 3_700_000_000])
def test_the_indexed_search_picks_what_the_pairwise_search_picked(short_bytes: int) -> None:
    state = world(30, short_bytes=short_bytes)
    spills = [a for a in evaluate(state) if a.kind == "spill"]
    assert len(spills) == 10
    for alert in spills:
        view = next(v for v in state.models if v.name == alert.model)
        assert view.size_bytes is not None and view.size_vram_bytes is not None
        short = view.size_bytes - (view.size_vram_bytes + 100_000_000)  # the GPU's free memory is the budget
        best, unload = _pairwise_other_fixes(state, view, short)
        ours = [f.action for f in alert.fixes if " for " in f.action]
        assert ours == ([best.action] if best is not None else []), alert.fixes
        assert unload is None or unload in [f.action for f in alert.fixes]


@pytest.mark.parametrize("parallel", [1, 3])
@pytest.mark.parametrize("num_ctx", [256, 1000, 4096, 40960, 65536])
@pytest.mark.parametrize(("k", "v", "fa"), [("f16", "f16", True), ("q8_0", "q8_0", True), ("f16", "f16", False)])
def test_other_kv_says_exactly_when_max_num_ctx_finds_a_smaller_context(
    parallel: int, num_ctx: int, k: str, v: str, fa: bool
) -> None:
    state = world(1, gpu=False)
    (base,) = state.models
    assert state.last_ok is not None
    layout = kv.layout_from_model_info(state.last_ok.shows[base.digest].model_info)
    assert isinstance(layout, kv.KVLayout)
    view = dataclasses.replace(
        base,
        context=dataclasses.replace(base.context, value=num_ctx),
        parallel=dataclasses.replace(base.parallel, value=parallel),
        kv_type=dataclasses.replace(base.kv_type, value=k if k == v else f"{k}/{v}"),
        flash_attention=dataclasses.replace(base.flash_attention, value="enabled" if fa else "disabled"),
    )
    kv_now = kv.kv_allocation(layout, num_ctx, parallel, k, v, flash_attention=fa).total_bytes
    figures = other_kv(view, layout, kv_now)
    assert figures is not None
    step = kv_now // 97 + 1
    for short in range(-kv_now, 2 * kv_now + 2, step):
        n = kv.max_num_ctx(layout, kv_now - short, parallel, k, v, flash_attention=fa)
        assert figures.shrinks_for(short) is (0 < n < num_ctx), (short, n)


def test_a_layout_hashes_its_layers_once(monkeypatch: pytest.MonkeyPatch) -> None:
    state = world(1, gpu=False)
    assert state.last_ok is not None
    info = state.last_ok.shows[state.models[0].digest].model_info
    layer_hashes = 0
    real = kv.KVLayer.__hash__

    def counted(self: kv.KVLayer) -> int:
        nonlocal layer_hashes
        layer_hashes += 1
        return real(self)

    monkeypatch.setattr(kv.KVLayer, "__hash__", counted)
    layout = kv._layout_from_model_info(dict(info))  # a fresh object: its hash is computed once, here
    assert isinstance(layout, kv.KVLayout)
    built = layer_hashes
    assert built == len(layout.layers)
    for _ in range(100):
        hash(layout)
        kv.kv_allocation(layout, 4096)
    assert layer_hashes == built
    twin = kv._layout_from_model_info(dict(info))
    assert twin == layout and hash(twin) == hash(layout) and twin is not layout


# --------------------------------------------------------------------------------------------
# The log scan


@pytest.fixture
def scanned(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Events scanned per call of the scan (the memo cleared first)."""
    counts: list[int] = []
    real = log_scan._scan

    def counted(events: Any, start: int, *args: Any) -> Any:
        counts.append(len(events) - start)
        return real(events, start, *args)

    monkeypatch.setattr(log_scan, "_scan", counted)
    monkeypatch.setattr(log_scan, "_scans", {})
    yield counts


def _log_batches(size: int, *, one_stream: bool = True) -> list[list[Any]]:
    """Every corpus log three times over, cut into batches of ``size`` events as the app's log
    worker posts them; parsed as one stream (line numbers keep counting), or each log on its own
    (line numbers start again: a parser reset)."""
    from tests.unit.test_alerts import LOGS

    logs = [
        p.read_text(encoding="utf-8", errors="replace").splitlines()
        for _ in range(3)
        for p in sorted(LOGS.glob("*.log"))
    ]
    if one_stream:
        events = parse_lines([line for log in logs for line in log])
    else:
        events = [e for log in logs for e in parse_lines(log)]
    return [events[i : i + size] for i in range(0, len(events), size)]


def _fold(state: AppState, batch: list[Any]) -> AppState:
    """One batch applied and the alerts evaluated (as the app's apply step)."""
    return evaluate_state(fold_log_with_alerts(state, batch, source="file:/x", status=None, ok=True, lines=len(batch)))


def test_each_log_event_is_scanned_once(scanned: list[int]) -> None:
    state = fold_with_alerts(AppState(HOST), ps_snapshot([row(Q8, 512, 2 * GIB)], taken_at=1_749_630_000.0))
    batches = _log_batches(37)
    for batch in batches:
        state = _fold(state, batch)
    total = len(state.log.load_events)
    assert total == sum(len(b) for b in batches) > 500 and len(batches) > 10
    assert sum(scanned) == total  # each batch's events once, not the whole log per evaluation
    before = len(scanned)
    evaluate(state)
    evaluate(state)
    assert len(scanned) == before  # the same log: no scan at all


@pytest.mark.parametrize("one_stream", [True, False], ids=["ordered-lines", "parser-reset"])
def test_an_extended_scan_equals_a_full_one(
    monkeypatch: pytest.MonkeyPatch, scanned: list[int], one_stream: bool
) -> None:
    state = fold_with_alerts(AppState(HOST), ps_snapshot([row(Q8, 512, 2 * GIB)], taken_at=1_749_630_000.0))
    alerted = 0
    for batch in _log_batches(41, one_stream=one_stream):
        state = _fold(state, batch)
        events = log_scan.log_events(state)
        memo = log_scan.scan_log(events, state.naive_tz)  # extended from the previous state's scan
        with_memo = evaluate(state, state.thresholds, (), naive_tz=state.naive_tz)
        monkeypatch.setattr(log_scan, "_scans", {})
        fresh = log_scan.scan_log(events, state.naive_tz)  # one pass over the whole tuple
        assert fresh is not memo and memo.ordered is one_stream
        assert (fresh.timed, fresh.configs, fresh.launches, fresh.over_training, fresh.ordered) == (
            memo.timed,
            memo.configs,
            memo.launches,
            memo.over_training,
            memo.ordered,
        )
        assert (list(fresh.line_nos), str(list(fresh.times))) == (list(memo.line_nos), str(list(memo.times)))
        assert evaluate(state, state.thresholds, (), naive_tz=state.naive_tz) == with_memo
        alerted += bool(with_memo)
    assert alerted


# --------------------------------------------------------------------------------------------
# evaluate_state


def test_evaluate_state_returns_the_same_state_when_nothing_changed() -> None:
    state = world(10)
    assert state.alerts and evaluate_state(state) is state
    later = dataclasses.replace(
        state,
        ollama=dataclasses.replace(state.ollama, taken_at=TAKEN_AT + 60),
        last_ok=dataclasses.replace(state.ollama, taken_at=TAKEN_AT + 60),
    )
    again = evaluate_state(later)
    assert [a.since for a in again.alerts] == [a.since for a in state.alerts]  # carried over by key
    fresh = evaluate(later)
    assert {a.since for a in fresh if a.kind == "spill"} == {TAKEN_AT + 60}
