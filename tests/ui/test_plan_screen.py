"""The what-if screen driven by Pilot, over the dashboard with fake sources (bundled scenario)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx

from kvtop.config import Settings
from kvtop.model import plan
from kvtop.ui.app import KvtopApp, make_app
from kvtop.ui.format import ibytes
from kvtop.ui.messages import SnapshotReceived
from kvtop.ui.screens.plan import ConfirmLoad, PlanScreen, next_num_ctx
from tests.standin import BUNDLED, running
from tests.ui.confirming import confirm
from tests.ui.fakes import HOST, FakeSource, snapshot_at, step_index

GIB = 1024**3
MIB = 1024**2


async def wait_for(pilot: Any, cond: Callable[[], bool], timeout_s: float = 5.0) -> None:
    import asyncio

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not cond():
        if loop.time() > deadline:
            raise AssertionError("condition not met in time")
        await pilot.pause(0.05)


def app_at(label: str, host: str = HOST) -> KvtopApp:
    return make_app(Settings(host_url=host, interval_s=0.25), FakeSource(snapshot_at(step_index(label)), hold=True))


async def open_plan(pilot: Any, name: str = "qwen3:1.7b-q8_0", **kwargs: Any) -> PlanScreen:
    app = pilot.app
    await wait_for(pilot, lambda: bool(app.state.models))
    view = next(v for v in app.state.models if v.name == name)
    screen = PlanScreen(view.name, view.digest, **kwargs)
    app.push_screen(screen)
    await wait_for(pilot, lambda: screen.is_mounted and screen.spec is not None)
    return screen


def recorder(seen: list[httpx.Request]) -> Callable[[httpx.Request], httpx.Response]:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={})

    return handler


def body(screen: PlanScreen) -> str:
    return screen.body_text().plain


async def test_opens_on_the_loaded_configuration_without_gpu_telemetry() -> None:
    app = app_at("raised to 32768")
    async with app.run_test(size=(130, 50)) as pilot:
        screen = await open_plan(pilot)
        assert screen.config == plan.PlanConfig(32768, "f16", 1, True)
        text = body(screen)
        assert text.startswith("What if: qwen3:1.7b-q8_0")
        assert "loaded now: 32768 × 1* slot(s), f16*" in text  # each mark after its value (model.known.marked)
        assert "GPU free memory not known" in text and "no fit verdict" in text
        assert "KV cache    ~3.5 GiB" in text and "estimated: 28 layers × 8 KV heads" in text
        assert "compute     ~141 MiB" in text  # anchored to /api/ps: size − weights − KV
        assert "estimated: 148,045,184 B derived from /api/ps" in text
        assert "Prediction vs reality at 32768 × 1 slot, f16, FA on" in text
        assert "  verdict " not in text
        await pilot.press("escape")
        await wait_for(pilot, lambda: len(app.screen_stack) == 1)


async def test_arrow_keys_and_typed_values_update_bars_and_verdict_at_once() -> None:
    app = app_at("raised to 32768")
    async with app.run_test(size=(130, 50)) as pilot:
        screen = await open_plan(pilot, gpu_free_bytes=GIB // 2)
        text = body(screen)
        # budget = 512 MiB free + the 5.7 GiB this model holds now
        assert "GPU budget 6.2 GiB = 512 MiB free + 5.7 GiB held by this model" in text
        assert "FITS: 100% GPU" in text
        await pilot.press("right")  # num_ctx: 32768 -> 40960 (the model's maximum is a stop)
        assert screen.config is not None and screen.config.num_ctx == 40960
        assert "SPILLS" in body(screen) and "layers 0–" in body(screen)
        assert "layer sizes assumed equal" in body(screen)
        await pilot.press("left", "left", "left")  # 32768, 24576, 16384
        assert screen.config.num_ctx == 16384 and "KV cache    ~1.8 GiB" in body(screen)
        await pilot.press("k")  # f16 -> q8_0
        assert screen.config.cache_type == "q8_0" and "KV cache    ~952 MiB" in body(screen)
        assert 'Environment="OLLAMA_KV_CACHE_TYPE=q8_0"' in body(screen)  # server-wide: how to set it
        await pilot.press("down", "right")  # slots 1 -> 2
        assert screen.config.parallel == 2 and "× 2 slots = 1,996,488,704 B" in body(screen)
        await pilot.press("8", "enter")  # typed: 8 slots
        assert screen.config.parallel == 8
        await pilot.press("3", "0", "0", "enter")  # over LLAMA_MAX_SEQ: refused, value kept
        assert screen.config.parallel == 8 and "slots must be 1–256" in body(screen)
        await pilot.press("up", "up", "4", "0", "9", "6")  # slots -> KV type -> num_ctx
        assert "typing 4096_" in body(screen)
        await pilot.press("enter")
        assert screen.config.num_ctx == 4096
        await pilot.press("f")  # flash attention off with a quantized cache: llama.cpp refuses
        assert not screen.config.flash_attention
        text = body(screen)
        assert "KV cache    unavailable" in text and "requires flash attention" in text
        assert "q8_0 with flash attention off is refused" in text
        # largest num_ctx per cache type and slot count, recomputed by the model
        await pilot.press("f", "k", "k")  # FA on, q8_0 -> q4_0 -> f16
        assert screen.config.cache_type == "f16"
        lim = screen.limits()
        budget = screen.budget()
        assert budget == GIB // 2 + 6_106_141_568
        for ct in plan.PLAN_CACHE_TYPES:
            assert lim[ct] == plan.max_num_ctx_on_gpu(
                screen.spec,
                plan.PlanConfig(4096, ct, 8),
                budget,  # type: ignore[arg-type]
                calibration=screen.calibration,
                engine="go-runner",
            )
        assert f"Largest slot count at this num_ctx: {lim['slots']}" in body(screen)


async def test_gpu_free_memory_follows_the_app() -> None:
    app = app_at("raised to 32768")
    async with app.run_test(size=(130, 50)) as pilot:
        screen = await open_plan(pilot)
        assert "GPU free memory not known" in body(screen)
        screen.gpu_free_bytes = 0
        await pilot.pause()
        # the loaded configuration needs exactly what the model holds: within the estimate's error
        assert "MARGINAL: 0 B to spare, within the estimate's error" in body(screen)
        await pilot.press("left")
        assert "FITS: 100% GPU" in body(screen)
        await pilot.press("right", "right")
        assert "SPILLS" in body(screen)
        screen.gpu_free_bytes = 2 * GIB
        await pilot.pause()
        assert "FITS: 100% GPU" in body(screen)
        # with room to spare each cache type's largest num_ctx says which limit binds
        screen.gpu_free_bytes = 64 * GIB
        await pilot.pause()
        assert "f16 40,960 (training context)  q8_0 40,960 (training context)" in body(screen)
        screen.gpu_free_bytes = 0
        await pilot.pause()
        assert "(memory)" in next(line for line in body(screen).splitlines() if line.startswith("Largest num_ctx"))


async def test_model_unloaded_while_open_keeps_planning() -> None:
    app = app_at("raised to 32768")
    async with app.run_test(size=(130, 50)) as pilot:
        screen = await open_plan(pilot, gpu_free_bytes=8 * GIB)
        app.post_message(SnapshotReceived(snapshot_at(step_index("Empty server"), taken_at=1_795_000_100.0)))
        await wait_for(pilot, lambda: screen.view is None)
        text = body(screen)
        assert "not loaded now" in text and "GPU budget 8.0 GiB = 8.0 GiB free\n" in text
        assert "KV cache    ~3.5 GiB" in text


async def test_readonly_disables_the_load() -> None:
    seen: list[httpx.Request] = []
    transport = httpx.MockTransport(recorder(seen))
    app = app_at("raised to 32768")
    async with app.run_test(size=(130, 50)) as pilot:
        screen = await open_plan(pilot, readonly=True, transport=transport)
        assert "read-only (--readonly): kvtop sends nothing that changes the server" in body(screen)
        assert "a  load" not in body(screen)
        await pilot.press("a")
        await pilot.pause(0.2)
        assert not isinstance(app.screen, ConfirmLoad) and seen == []


async def test_load_asks_first_and_cancel_sends_nothing() -> None:
    seen: list[httpx.Request] = []
    transport = httpx.MockTransport(recorder(seen))
    app = app_at("raised to 32768")
    async with app.run_test(size=(130, 50)) as pilot:
        screen = await open_plan(pilot, transport=transport)
        await pilot.press("left")  # 24576
        await pilot.press("a")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmLoad))
        confirm = app.screen
        assert isinstance(confirm, ConfirmLoad)
        assert "Load qwen3:1.7b-q8_0 with num_ctx 24,576 now?" in confirm.text
        assert f"POST {HOST}/api/generate" in confirm.text
        await pilot.press("n")
        await wait_for(pilot, lambda: app.screen is screen)
        assert seen == [] and "load cancelled: nothing was sent" in body(screen)


async def test_load_sends_generate_with_num_ctx_and_keep_alive() -> None:
    seen: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append({"method": request.method, "path": request.url.path, "body": json.loads(request.content)})
        return httpx.Response(
            200, json={"model": "qwen3:1.7b-q4_K_M", "response": "", "done": True, "done_reason": "load"}
        )

    app = app_at("A second model loads")
    async with app.run_test(size=(130, 50)) as pilot:
        screen = await open_plan(pilot, name="qwen3:1.7b-q4_K_M", transport=httpx.MockTransport(handler))
        await pilot.press("right")  # 4096 -> 6144
        await pilot.press("a")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmLoad))
        assert "keep_alive -1" in app.screen.text  # type: ignore[attr-defined]
        await confirm(pilot)
        await wait_for(pilot, lambda: "loaded with num_ctx 6,144" in body(screen))
        assert seen == [
            {
                "method": "POST",
                "path": "/api/generate",
                "body": {
                    "model": "qwen3:1.7b-q4_K_M",
                    "prompt": "",
                    "options": {"num_ctx": 6144},
                    "stream": False,
                    "keep_alive": -1,
                },
            }
        ]


async def test_load_against_the_standin_reloads_the_model() -> None:
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        server.goto(1)
        app = app_at("loads at num_ctx 4096", host=server.url)
        async with app.run_test(size=(130, 50)) as pilot:
            screen = await open_plan(pilot, host_url=server.url)
            assert screen.host_url == server.url
            await pilot.press("right")  # 6144
            await pilot.press("a")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmLoad))
            await confirm(pilot)
            await wait_for(pilot, lambda: "loaded with num_ctx 6,144" in body(screen), timeout_s=10)
            assert not screen.loading
            assert server.ps()[0]["context_length"] == 6144  # the stand-in reloaded it (POST /api/generate)


async def test_load_error_is_shown_clearly() -> None:
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        server.goto(1)
        app = app_at("loads at num_ctx 4096", host=server.url)
        async with app.run_test(size=(130, 50)) as pilot:
            screen = await open_plan(pilot, host_url=server.url)
            server.goto(0)  # the model is gone by the time the user confirms
            await pilot.press("right", "a")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmLoad))
            await confirm(pilot)
            await wait_for(pilot, lambda: "load failed" in body(screen), timeout_s=10)
            assert "HTTP 404 Not Found: model 'qwen3:1.7b-q8_0' is not loaded" in body(screen)


def test_num_ctx_ladder() -> None:
    assert next_num_ctx(4096, 1, 40960) == 6144
    assert next_num_ctx(32768, 1, 40960) == 40960
    assert next_num_ctx(40960, 1, 40960) == 40960
    assert next_num_ctx(5000, -1, None) == 4096
    assert next_num_ctx(256, -1, None) == 256
    assert next_num_ctx(1048576, 1, None) == 1048576


async def test_typed_values_in_one_burst_all_apply() -> None:
    app = app_at("loads at num_ctx 4096")
    async with app.run_test(size=(130, 50)) as pilot:
        screen = await open_plan(pilot)
        await pilot.press("8", "1", "9", "2", "enter", "down", "down", "4", "enter")
        assert screen.config is not None
        assert screen.config.num_ctx == 8192 and screen.config.parallel == 4
        await pilot.press("up", "up", "1", "6", "3", "8", "4", "down")  # moving on applies typed digits
        assert screen.config.num_ctx == 16384


async def test_spilled_gemma4_without_a_weights_figure_gets_the_spill_alerts_derivation() -> None:
    """gemma4's file size is not in the scenario (its published size exceeds /api/ps's), and it
    spills: the weights are derived as the spill alert derives weights + compute (
    ``plan.beside_kv``: /api/ps size − KV), less the compute estimate, so the total is known, marked
    estimated, and equals the /api/ps size at the loaded configuration."""
    app = app_at("spills")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_plan(pilot, "gemma4:latest")
        view = next(v for v in app.state.models if v.name == "gemma4:latest")
        p = screen.prediction()
        assert p is not None and p.weights_estimated and p.total_bytes == view.size_bytes
        rest = plan.beside_kv(view)
        assert rest is not None and p.weights_bytes == rest - p.compute_bytes
        spill = next(a for a in app.state.alerts if a.kind == "spill" and a.model == "gemma4:latest")
        said = next(f.detail for f in spill.fixes if "weights and compute alone need" in f.detail)
        assert f"alone need {ibytes(rest)} of" in said  # the same figure in the alert's fix
        text = body(screen)
        assert "KV cache    ~104 MiB" in text and "estimated: " in text
        assert f"weights     ~{ibytes(p.weights_bytes)}" in text and "as the spill alert derives them" in text
        assert f"total       ~{ibytes(view.size_bytes)}" in text and "needs the weights" not in text
