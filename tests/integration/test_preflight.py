"""Pre-flight of every pulled model against the stand-in server (a real process serving /api/tags
and /api/show), verdicts checked against the KV arithmetic; ``kvtop plan --all``."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

from kvtop.model import kv, plan
from kvtop.model.preflight import (
    VRAM_TIERS,
    preflight,
    preflight_row,
    server_defaults,
    vram_tier_num_ctx,
)
from kvtop.sources.pulled import PulledSource
from tests.standin import BUNDLED, running

GiB = 1024**3


def _pulled(url: str, **kw):
    async def go():
        src = PulledSource(url)
        try:
            return await src.sample_all(**kw), await src.sample_pulled()
        finally:
            await src.aclose()

    return asyncio.run(go())


def test_pulled_models_are_read_once_each() -> None:
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        listed = server.client.get("/api/tags").json()["models"]
        assert len(listed) >= 2
        snap, again = _pulled(server.url)
        assert snap.error is None and snap.tags is not None
        assert sorted(t.name for t in snap.tags.values()) == sorted(m["name"] for m in listed)
        assert set(snap.shows) == set(snap.tags)
        assert all(s.error is None and s.model_info for s in snap.shows.values())
        reqs = server.requests()
        assert reqs.count(("POST", "/api/show")) == len(listed)  # cached per digest: the second round asks none
        assert reqs.count(("GET", "/api/tags")) == 2  # this test's and one: not again within TAGS_EVERY_S
        assert again.shows == snap.shows
        assert server.writes() == []


def test_show_is_fetched_lazily_a_few_at_a_time() -> None:
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        async def go():
            src = PulledSource(server.url)
            try:
                first = await src.sample_pulled(shows=1)
                second = await src.sample_pulled(shows=1)
                return first, second
            finally:
                await src.aclose()

        first, second = asyncio.run(go())
        assert len(first.shows) == 1 and len(second.shows) == 2
        rows = preflight(first, server_defaults("0.22.1", None, 24 * GiB), free_bytes=8 * GiB)
        assert [r.verdict for r in rows].count("waiting") == len(first.tags) - 1  # type: ignore[arg-type]


def test_verdicts_against_the_kv_math() -> None:
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        snap, _ = _pulled(server.url)
    defaults = server_defaults("0.22.1", {"OLLAMA_CONTEXT_LENGTH": "8192", "OLLAMA_NUM_PARALLEL": "2",
                                          "OLLAMA_KV_CACHE_TYPE": "q8_0", "OLLAMA_FLASH_ATTENTION": "1"}, None)
    assert (defaults.num_ctx.value, defaults.num_ctx.source) == (8192, "service")
    assert (defaults.parallel.value, defaults.cache_type.value, defaults.flash_attention.value) == (2, "q8_0", True)
    assert snap.tags is not None
    for digest, tag in snap.tags.items():
        show = snap.shows[digest]
        layout = kv.layout_from_model_info(show.model_info)
        assert isinstance(layout, kv.KVLayout), tag.name
        ctx = min(8192, int(show.model_info.get(f"{show.model_info['general.architecture']}.context_length") or 8192))
        expected_kv = kv.kv_allocation(layout, ctx, 2, "q8_0", flash_attention=True).total_bytes
        roomy = preflight_row(tag, show, defaults, free_bytes=64 * GiB)
        assert roomy.kv_bytes == expected_kv, tag.name
        assert roomy.num_ctx.value == ctx
        assert roomy.total_bytes is not None and roomy.gpu_bytes is not None
        assert roomy.total_bytes > expected_kv + (tag.size_bytes or 0) // 2
        assert roomy.verdict == "fits" and roomy.headroom_bytes == 64 * GiB - roomy.gpu_bytes
        short = preflight_row(tag, show, defaults, free_bytes=roomy.gpu_bytes // 4)
        assert short.verdict == "spills" and short.headroom_bytes < 0  # type: ignore[operator]
        # a loaded model's own VRAM is given back on a reload: it counts as available to it
        beside = preflight_row(tag, show, defaults, free_bytes=roomy.gpu_bytes // 4, loaded_vram_bytes=roomy.gpu_bytes)
        assert beside.budget_bytes == roomy.gpu_bytes // 4 + roomy.gpu_bytes and beside.verdict == "fits"
        # the largest num_ctx that fits: it fits there, and 256 more (llama.cpp's padding) does not
        budget = roomy.gpu_bytes + 256 * 1024**2
        best = preflight_row(tag, show, defaults, free_bytes=budget).max_num_ctx
        spec = plan.model_spec(tag.name, show.model_info, file_size=tag.size_bytes)
        config = plan.PlanConfig(best or 0, "q8_0", 2, True)
        assert best is not None and best >= ctx
        at = plan.predict(spec, config, budget_bytes=budget)
        assert at.gpu_bytes is not None and at.gpu_bytes <= budget
        if best < (spec.context_train or 0):
            above = plan.predict(spec, plan.PlanConfig(best + 256, "q8_0", 2, True), budget_bytes=budget)
            assert above.gpu_bytes is not None and above.gpu_bytes > budget


def test_default_num_ctx_by_version_and_vram() -> None:
    assert [vram_tier_num_ctx(g * GiB) for g in (8, 22, 23, 46, 47, 80)] == [4096, 4096, 32768, 32768, 262144,
                                                                              262144]
    assert vram_tier_num_ctx(48 * GiB, overhead_bytes=2 * GiB) == 32768
    assert VRAM_TIERS[-1] == (0, 4096)
    tiered = server_defaults("0.22.1", {}, 24 * GiB).num_ctx
    assert (tiered.value, tiered.source) == (32768, "default")
    assert server_defaults("0.15.4", {}, 80 * GiB).num_ctx.value == 4096
    assert server_defaults("0.6.6", None, None).num_ctx.value == 2048
    unknown = server_defaults("0.22.1", None, None).num_ctx
    assert (unknown.value, unknown.source) == (4096, "estimated")
    zero = server_defaults("0.22.1", {"OLLAMA_CONTEXT_LENGTH": "0"}, 48 * GiB).num_ctx
    assert (zero.value, zero.source) == (262144, "default")  # 0 means the VRAM tier


def test_plan_all_json_and_text() -> None:
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        names = sorted(m["name"] for m in server.client.get("/api/tags").json()["models"])
        done = subprocess.run([sys.executable, "-m", "kvtop", "plan", "--all", "--host", server.url, "--gpu-free",
                               "8GiB", "--ctx", "8k", "--json"], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        doc = json.loads(done.stdout)
        assert doc["gpu"]["free_bytes"] == 8 * GiB and doc["defaults"]["num_ctx"] == 8192
        assert doc["defaults"]["num_ctx_source"] == "requested"
        assert sorted(m["name"] for m in doc["models"]) == names
        for m in doc["models"]:
            assert m["verdict"] in ("fits", "marginal", "spills")
            assert m["kv"] > 0 and m["total"] > m["kv"] and m["max_num_ctx"] is not None
            expected_budget = 8 * GiB + (m["loaded_vram"] or 0)
            assert m["budget"] == expected_budget
            assert (m["verdict"] == "spills") == (m["headroom"] < 0 and m["verdict"] != "marginal")
        text = subprocess.run([sys.executable, "-m", "kvtop", "plan", "--all", "--host", server.url],
                              capture_output=True, text=True, timeout=60)
        assert text.returncode == 0, text.stderr
        for name in names:
            assert name in text.stdout
        assert "not given: no fit verdict" in text.stdout
        assert server.writes() == []
        bad = subprocess.run([sys.executable, "-m", "kvtop", "plan", "--all", "qwen3:1.7b", "--host", server.url],
                             capture_output=True, text=True, timeout=60)
        assert bad.returncode == 2 and "--all plans every pulled model" in bad.stderr
