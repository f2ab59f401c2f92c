"""The next-load forecast's rules, each from Ollama's scheduler (docs/ollama-scheduler.md, read at
v0.33.0-rc2: ``server/sched.go`` ``processPending``, ``findRunnerToUnload``, ``ByDurationAndName``,
``load``; ``envconfig/config.go``)."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone

from kvtop.model.known import Known
from kvtop.model.next_load import (
    FOREVER_S,
    Launch,
    Resident,
    eviction_order,
    forecast,
    launch_settings,
    pick_victim,
    resident_from_ps,
    scheduler_rules,
)
from kvtop.model.next_load_view import next_load_cell, next_load_json, next_load_lines
from kvtop.model.preflight import server_defaults
from kvtop.model.snapshots import PsModel, ShowInfo

GiB = 1024**3
NOW = 1_800_000_000.0


def res(name: str, vram_gib: float, *, keep: float = 300.0, path: str | None = None, busy: bool = False) -> Resident:
    return Resident(
        name, path or f"sha256-{name}", int(vram_gib * GiB), Known(keep, "estimated"), Known(busy, "runner"), 4096
    )


LAUNCH = Launch(Known(4096, "default"), Known(1, "default"), Known("f16", "default"), Known(True, "default"))


def test_max_loaded_default_is_three_per_gpu_and_env_wins() -> None:
    # sched.go: defaultModelsPerGPU = 3; maxRunners = 3 × max(len(gpus), 1) when OLLAMA_MAX_LOADED_MODELS is 0
    assert scheduler_rules("0.33.0", None, 2).max_loaded == Known(6, "default", "3 per GPU × 2 (defaultModelsPerGPU)")
    assert scheduler_rules("0.33.0", None, 0).max_loaded.value == 3
    assert scheduler_rules("0.33.0", {"OLLAMA_MAX_LOADED_MODELS": "1"}, 2).max_loaded == Known(
        1, "service", "OLLAMA_MAX_LOADED_MODELS"
    )
    assert scheduler_rules("0.1.40", None, 1).max_loaded.value == 1  # v0.1.33–v0.1.48 default 1
    assert scheduler_rules("0.33.0", None, None).max_loaded.source == "estimated"


def test_fit_fraction_is_80_percent_from_v0_30() -> None:
    # load(): predictedForLoad > freeMemory*80/100 → evict (v0.30.0, commit 9db4bdbad); before: full fit
    assert scheduler_rules("0.30.0", None, 1).fit_fraction == 0.8
    assert scheduler_rules("0.24.0", None, 1).fit_fraction == 1.0


def test_order_shortest_keep_alive_first_forever_last_then_path() -> None:
    # ByDurationAndName: uint64(sessionDuration) ascending (MaxInt64 "forever" last), then modelPath
    rules = scheduler_rules("0.33.0", None, 1)
    a = res("a", 1, keep=FOREVER_S, path="sha256-00")
    b = res("b", 1, keep=300, path="sha256-ff")
    c = res("c", 1, keep=300, path="sha256-11")
    d = res("d", 1, keep=60, path="sha256-99")
    assert [r.name for r in eviction_order([a, b, c, d], rules)] == ["d", "c", "b", "a"]
    # before v0.6.6 (ByDuration only) equal durations keep their order: no name tiebreak
    old = scheduler_rules("0.6.5", None, 1)
    assert [r.name for r in eviction_order([b, c], old)] == ["b", "c"]


def test_idle_first_else_the_first_in_order() -> None:
    # findRunnerToUnload: first idle (refCount == 0); none idle → runnerList[0] (the load waits)
    rules = scheduler_rules("0.33.0", None, 1)
    first = res("first", 1, keep=60, busy=True)
    second = res("second", 1, keep=300)
    assert pick_victim([first, second], rules) is second
    both = [first, res("second", 1, keep=300, busy=True)]
    assert pick_victim(both, rules) is first


def test_at_the_limit_one_model_goes_even_when_memory_is_plenty() -> None:
    # processPending: loadedCount >= maxRunners → findRunnerToUnload, before any fit check
    rules = scheduler_rules("0.33.0", {"OLLAMA_MAX_LOADED_MODELS": "2"}, 1)
    loaded = [res("x", 1, keep=300, path="sha256-bb"), res("y", 1, keep=300, path="sha256-aa")]
    n = forecast("new", LAUNCH, loaded, rules, free_bytes=70 * GiB, need_bytes=2 * GiB)
    assert [(e.name, e.reason) for e in n.evicted] == [("y", "max_loaded")]
    assert n.stays == ("x",)
    assert n.verdict == "fits"


def test_unloads_one_at_a_time_until_it_fits_80_percent() -> None:
    # load(requireFull): predicted > free*0.8 → evict one, loop (each unload gives back size_vram)
    rules = scheduler_rules("0.33.0", None, 1)
    loaded = [res("big", 8, keep=300, path="sha256-cc"), res("small", 4, keep=300, path="sha256-aa")]
    # free 4 GiB: need 6 GiB > 3.2 → unload "small" (path aa first): free 8 → 6.4 ≥ 6: fits
    n = forecast("new", LAUNCH, loaded, rules, free_bytes=4 * GiB, need_bytes=6 * GiB)
    assert [e.name for e in n.evicted] == ["small"]
    assert n.free_after_bytes == 8 * GiB and n.threshold_bytes == int(8 * GiB * 0.8)
    assert n.stays == ("big",) and n.verdict == "fits"
    # need 9 GiB: 6.4 < 9 → unload "big" too; nothing left: loads without the threshold
    n = forecast("new", LAUNCH, loaded, rules, free_bytes=4 * GiB, need_bytes=9 * GiB)
    assert [e.name for e in n.evicted] == ["small", "big"]
    assert n.threshold_bytes is None and n.verdict == "fits"  # 9 ≤ 16 free
    # before v0.30 (full fit) 6 GiB fits in 6.5 GiB free beside both
    n = forecast(
        "new", LAUNCH, loaded, scheduler_rules("0.24.0", None, 1), free_bytes=int(6.5 * GiB), need_bytes=6 * GiB
    )
    assert n.evicted == ()


def test_first_model_loads_whatever_its_size_and_spills() -> None:
    # loadedCount == 0: load(requireFull=false)
    rules = scheduler_rules("0.33.0", None, 1)
    n = forecast("huge", LAUNCH, [], rules, free_bytes=10 * GiB, need_bytes=30 * GiB)
    assert n.evicted == () and n.verdict == "spills"


def test_in_use_model_is_skipped_and_the_load_waits_when_all_are_busy() -> None:
    rules = scheduler_rules("0.33.0", None, 1)
    loaded = [res("busy", 4, keep=60, busy=True), res("idle", 4, keep=300)]
    n = forecast("new", LAUNCH, loaded, rules, free_bytes=1 * GiB, need_bytes=3 * GiB)
    assert [(e.name, e.waits) for e in n.evicted] == [("idle", False)]
    loaded = [res("busy", 4, keep=60, busy=True), res("busy2", 4, keep=300, busy=True)]
    n = forecast("new", LAUNCH, loaded, rules, free_bytes=1 * GiB, need_bytes=3 * GiB)
    assert n.waits_for == ("busy",)


def test_already_loaded_and_reload() -> None:
    rules = scheduler_rules("0.33.0", None, 1)
    loaded = [res("m:latest", 4), res("other", 4)]
    n = forecast("m", LAUNCH, loaded, rules, free_bytes=1 * GiB, need_bytes=3 * GiB)
    assert n.verdict == "loaded" and n.evicted == ()
    # an automatic num_ctx reuses a runner loaded automatically at any num_ctx (needsReload)
    auto = dataclasses.replace(LAUNCH, auto_ctx=True)
    other = [dataclasses.replace(res("m:latest", 4), context_length=8192)]
    assert forecast("m", auto, other, rules, free_bytes=1 * GiB, need_bytes=3 * GiB).verdict == "loaded"
    n = forecast(
        "m",
        LAUNCH,
        [dataclasses.replace(res("m:latest", 4), context_length=8192), res("other", 4)],
        rules,
        free_bytes=1 * GiB,
        need_bytes=3 * GiB,
    )
    assert [(e.name, e.reason) for e in n.evicted] == [("m:latest", "reload")]
    assert n.free_after_bytes == 5 * GiB and n.verdict == "fits"
    # the server view's and plan --all's cell: the model itself is reloaded, not "unloaded"
    assert next_load_cell(n) == "reloads at other settings; fits"
    busy = [res("busy", 4, keep=60, busy=True), res("busy2", 4, keep=300, busy=True)]
    waits = forecast("new", LAUNCH, busy, rules, free_bytes=1 * GiB, need_bytes=3 * GiB)
    assert next_load_cell(waits) == f"unloads busy (waits); {waits.verdict}" and waits.verdict == "fits"
    alone = forecast("new", LAUNCH, [res("idle", 4)], rules, free_bytes=20 * GiB, need_bytes=3 * GiB)
    assert next_load_cell(alone) == "unloads nothing; fits" and next_load_cell(None) == "?"


def test_keep_alive_from_expires_at() -> None:
    rules = scheduler_rules("0.33.0", {"OLLAMA_KEEP_ALIVE": "10m"}, 1)
    assert rules.keep_alive_s == Known(600.0, "service", "OLLAMA_KEEP_ALIVE")

    def ps(left_s: float) -> PsModel:
        at = datetime.fromtimestamp(NOW + left_s, tz=timezone.utc)
        return PsModel("m", "m", "d", 5 * GiB, 5 * GiB, 4096, at, None)

    assert resident_from_ps(ps(120), now_s=NOW, rules=rules).keep_alive_s.value == 600.0
    assert resident_from_ps(ps(3600), now_s=NOW, rules=rules).keep_alive_s.value == 3600.0
    forever = resident_from_ps(ps(290 * 365 * 86400), now_s=NOW, rules=rules)
    assert forever.keep_alive_s.value == FOREVER_S and forever.path == "name:m" and not forever.blob_known
    assert scheduler_rules("0.33.0", {"OLLAMA_KEEP_ALIVE": "-1"}, 1).keep_alive_s.value == FOREVER_S


def test_launch_settings_slots_clamps_and_kv() -> None:
    d = server_defaults("0.33.0", {"OLLAMA_NUM_PARALLEL": "4", "OLLAMA_CONTEXT_LENGTH": "65536"}, 24 * GiB)
    lc = launch_settings(d, "0.33.0", architecture="llama", context_train=40960)
    assert (lc.num_ctx.value, lc.num_ctx.source, lc.parallel.value, lc.runner_ctx) == (40960, "estimated", 4, 163840)
    embed = ShowInfo("d", "e", capabilities=("embedding",))
    assert launch_settings(d, "0.33.0", architecture="bert", context_train=None, show=embed).parallel.value == 1
    assert launch_settings(d, "0.33.0", architecture="qwen3next", context_train=None).parallel.value == 1
    own = ShowInfo("d", "m", parameters="num_ctx 8192\ntemperature 0.6", capabilities=("completion",))
    lc = launch_settings(d, "0.33.0", architecture="llama", context_train=None, show=own)
    assert lc.num_ctx == Known(8192, "requested", "the Modelfile's PARAMETER num_ctx")
    tier = server_defaults("0.33.0", None, 24 * GiB)  # ≥ 23 GiB → 32768 (routes.go:Serve)
    assert launch_settings(tier, "0.33.0", architecture="llama", context_train=None).num_ctx.value == 32768
    q = server_defaults("0.33.0", {"OLLAMA_KV_CACHE_TYPE": "q8_0", "OLLAMA_FLASH_ATTENTION": "0"}, 24 * GiB)
    assert launch_settings(q, "0.33.0", architecture="llama", context_train=None).problem
    assert launch_settings(q, "0.20.0", architecture="llama", context_train=None).cache_type.value == "f16"


def test_lines_and_json_carry_the_marks() -> None:
    rules = scheduler_rules("0.33.0", None, 1)
    loaded = [res("big", 8, keep=300, path="sha256-cc"), res("small", 4, keep=300, path="sha256-aa")]
    n = forecast("new", LAUNCH, loaded, rules, free_bytes=4 * GiB, need_bytes=6 * GiB)
    lines = next_load_lines(n, lambda b: f"{b / GiB:.1f} GiB")
    assert lines[0].startswith("loads with num_ctx 4096* × 1* slot(s) = 4096, KV f16*")
    assert "unloads small: to make room, frees 4.0 GiB" in lines
    assert lines[-1].startswith("fits: 100% GPU (limit 80% of 8.0 GiB free = 6.4 GiB); stays loaded: big")
    doc = next_load_json(n)
    assert doc["evicted"] == [{"name": "small", "reason": "memory", "waits": False, "vram_bytes": 4 * GiB}]
    assert doc["need_source"] == "estimated" and doc["num_ctx_source"] == "default"
