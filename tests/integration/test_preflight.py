"""Pre-flight of every pulled model against the stand-in server (a real process serving /api/tags
and /api/show), verdicts checked against the KV arithmetic; ``kvtop plan --all``."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

from kvtop.model import kv, plan
from kvtop.model.preflight import VRAM_TIERS, preflight, preflight_row, server_defaults, vram_tier_num_ctx
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
    defaults = server_defaults(
        "0.22.1",
        {
            "OLLAMA_CONTEXT_LENGTH": "8192",
            "OLLAMA_NUM_PARALLEL": "2",
            "OLLAMA_KV_CACHE_TYPE": "q8_0",
            "OLLAMA_FLASH_ATTENTION": "1",
        },
        None,
    )
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
    assert [vram_tier_num_ctx(g * GiB) for g in (8, 22, 23, 46, 47, 80)] == [4096, 4096, 32768, 32768, 262144, 262144]
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
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "kvtop",
                "plan",
                "--all",
                "--host",
                server.url,
                "--gpu-free",
                "8GiB",
                "--ctx",
                "8k",
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
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
        text = subprocess.run(
            [sys.executable, "-m", "kvtop", "plan", "--all", "--host", server.url],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert text.returncode == 0, text.stderr
        for name in names:
            assert name in text.stdout
        assert "not given: no fit verdict" in text.stdout
        assert server.writes() == []
        bad = subprocess.run(
            [sys.executable, "-m", "kvtop", "plan", "--all", "qwen3:1.7b", "--host", server.url],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert bad.returncode == 2 and "--all plans every pulled model" in bad.stderr


def test_a_loaded_model_is_planned_from_its_real_figures() -> None:
    """The source ladder: a model loaded now shows its /api/ps size (reported) at the settings it
    runs with, and its compute buffers anchor the estimate; one not loaded stays estimated."""
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        step = next(i for i in range(8) if server.goto(i) is not None and server.ps())  # a step with a model loaded
        snap, _ = _pulled(server.url)

        async def go():
            src = PulledSource(server.url)
            try:
                return await src.version_and_ps()
            finally:
                await src.aclose()

        version, ps, error = asyncio.run(go())
    assert error is None and ps
    assert snap.tags is not None
    loaded = ps[0]
    tag, show = snap.tags[loaded.digest], snap.shows[loaded.digest]
    assert loaded.context_length and loaded.size_bytes
    at_its_ctx = server_defaults(version, {"OLLAMA_CONTEXT_LENGTH": str(loaded.context_length)}, None)
    row = preflight_row(tag, show, at_its_ctx, free_bytes=1 * GiB, loaded=loaded)
    assert (row.total_bytes, row.total_source) == (loaded.size_bytes, "reported")
    assert row.kv_source == "estimated"  # no log: the KV figure is kvtop's arithmetic
    assert row.loaded_vram_bytes == loaded.size_vram_bytes
    assert row.budget_bytes == 1 * GiB + (loaded.size_vram_bytes or 0)
    assert row.calibration == (
        f"runs at num_ctx {loaded.context_length} (/api/ps), compute derived from its size assuming f16, 1 slot, FA on"
    )
    cold = preflight_row(tag, show, at_its_ctx, free_bytes=1 * GiB, loaded_vram_bytes=loaded.size_vram_bytes)
    assert cold.total_source == "estimated" and cold.calibration == ""
    assert cold.total_bytes != loaded.size_bytes  # the estimate alone differs: the real figure won
    # at another num_ctx the row stays an estimate, anchored on the loaded model's compute buffers:
    # it differs from the bare estimate by (derived compute − the estimate's compute) at the loaded settings
    half = loaded.context_length // 2
    other = server_defaults(version, {"OLLAMA_CONTEXT_LENGTH": str(half)}, None)
    anchored = preflight_row(tag, show, other, free_bytes=1 * GiB, loaded=loaded)
    bare = preflight_row(tag, show, other, free_bytes=1 * GiB)
    spec = plan.model_spec(tag.name, show.model_info, file_size=tag.size_bytes)
    base = plan.predict(spec, plan.PlanConfig(loaded.context_length))
    assert base.kv_bytes is not None and spec.weights_bytes is not None
    derived = loaded.size_bytes - spec.weights_bytes - base.kv_bytes - (base.recurrent_bytes or 0)
    assert anchored.num_ctx.value == half and anchored.total_source == "estimated"
    assert anchored.kv_bytes == bare.kv_bytes
    assert anchored.total_bytes is not None and bare.total_bytes is not None
    assert anchored.total_bytes - bare.total_bytes == derived - base.compute_bytes != 0
    # plan --all shows it unmarked, with the line saying where it comes from
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        server.goto(step)
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "kvtop",
                "plan",
                "--all",
                "--host",
                server.url,
                "--ctx",
                str(loaded.context_length),
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        asked = subprocess.run(
            [
                sys.executable,
                "-m",
                "kvtop",
                "plan",
                "--all",
                "--host",
                server.url,
                "--ctx",
                str(loaded.context_length),
                "--kv",
                "q8_0",
                "--parallel",
                "2",
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    doc = json.loads(done.stdout)
    row_json = next(m for m in doc["models"] if m["digest"] == loaded.digest)
    assert (row_json["total"], row_json["total_source"]) == (loaded.size_bytes, "reported")
    # other settings asked (--kv q8_0 --parallel 2): an estimate, but the /api/ps size is still read at
    # the server's defaults (f16, 1 slot), not at the settings asked about
    other_row = next(m for m in json.loads(asked.stdout)["models"] if m["digest"] == loaded.digest)
    assert other_row["total_source"] == "estimated" and "assuming f16, 1 slot" in other_row["calibration"]
    assert all(m["total_source"] == "estimated" for m in doc["models"] if m["loaded_vram"] is None)


def test_plan_all_refuses_garbage_gpu_free_in_one_line(capsys) -> None:  # noqa: ANN001 - pytest's fixture
    from kvtop.plan_cli import main_plan

    for value, says in [
        ("abc", "not a byte count"),
        ("-1", "not a byte count"),
        ("1e999", "not a byte count"),
        ("24G", "ambiguous unit"),
        ("99999999999999999999GiB", "more than 1 PiB"),
        ("8G\x1b[31m", "not a byte count"),
    ]:
        assert main_plan(["--all", "--host", "http://127.0.0.1:9", "--gpu-free", value]) == 2, value
        out, err = capsys.readouterr()
        assert out == "" and says in err and "Traceback" not in err, (value, err)
        assert "\x1b" not in err  # the typed escape is shown escaped, never sent to the terminal


def test_plan_all_gpu_free_auto_without_nvml_says_so(capsys) -> None:  # noqa: ANN001
    from kvtop.plan_cli import main_plan
    from kvtop.plan_cli.all_models import nvml_total_bytes

    if nvml_total_bytes() is not None:
        import pytest

        pytest.skip("this machine has NVML: auto works here")
    assert main_plan(["--all", "--host", "http://127.0.0.1:9", "--gpu-free", "auto"]) == 2
    _, err = capsys.readouterr()
    assert err.count("\n") == 1 and "--gpu-free auto: NVML is not available" in err and "--gpu-free 24GiB" in err


def test_plan_all_gpu_free_auto_reads_the_tier_and_warns_for_another_machine(monkeypatch, capsys) -> None:  # noqa: ANN001
    """--gpu-free auto over NVML (the fake library: 48 + 24 GiB) gives the free memory and the VRAM tier
    (≥ 47 GiB: 262144); against a server on another machine the note says whose GPUs were read."""
    from kvtop.plan_cli import main_plan
    from kvtop.sources import hosts
    from tests.fakes.nvml import FakeNvml

    FakeNvml().install(monkeypatch)
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        assert main_plan(["--all", "--host", server.url, "--gpu-free", "auto", "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["gpu"]["total_bytes"] == 72 * GiB and doc["gpu"]["free_source"].startswith("NVML, GPU ")
        assert (doc["defaults"]["num_ctx"], doc["defaults"]["num_ctx_source"]) == (262144, "default")
        assert not any("not on this machine" in n for n in doc["notes"])
        monkeypatch.setattr(hosts, "host_is_this_machine", lambda url, **_: False)  # as if it were elsewhere
        assert main_plan(["--all", "--host", server.url, "--gpu-free", "auto"]) == 0
        out = capsys.readouterr().out
    assert f"--gpu-free auto read this machine's GPUs, but {server.url} is not on this machine" in out


def test_once_json_reads_every_pulled_model_of_a_quick_server() -> None:
    """``--once --json``: within its bound, the pre-flight reads every pulled model's /api/show
    (none is left "waiting" on a server that answers at once), and writes nothing."""
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        names = sorted(m["name"] for m in server.client.get("/api/tags").json()["models"])
        done = subprocess.run(
            [sys.executable, "-m", "kvtop", "--once", "--json", "--log", "none", "--host", server.url],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        rows = json.loads(done.stdout)["server"]["preflight"]
        assert sorted(r["name"] for r in rows) == names and len(names) >= 2
        assert all(r["verdict"] != "waiting" for r in rows), [(r["name"], r["verdict"]) for r in rows]
        shows = [p for m, p in server.requests() if p == "/api/show"]
        assert len(shows) >= len(names) and server.writes() == []
