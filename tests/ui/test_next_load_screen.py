"""The what-if screen's "If loaded now" section: the next-load forecast (``model.next_load``) of its
``a`` load, driven by Pilot over the bundled scenario's two loaded models."""

from __future__ import annotations

from tests.ui.test_plan_screen import app_at, body, open_plan, wait_for

GIB = 1024**3


async def test_a_larger_num_ctx_forecasts_the_other_model_unloaded() -> None:
    app = app_at("A second model loads")
    async with app.run_test(size=(130, 60)) as pilot:
        screen = await open_plan(pilot, name="qwen3:1.7b-q4_K_M", gpu_free_bytes=1 * GIB)
        text = body(screen)
        assert "If loaded now" in text
        assert "already loaded at these settings: nothing loads, nothing is unloaded" in text
        await pilot.press("4", "0", "9", "6", "0", "enter")  # a reload at the training context
        await wait_for(pilot, lambda: screen.config is not None and screen.config.num_ctx == 40960)
        text = body(screen)
        assert "loads with num_ctx 40960^ × 1" in text
        assert "unloads qwen3:1.7b-q4_K_M: itself, loaded at other settings" in text
        assert "unloads qwen3:1.7b-q8_0: to make room" in text
        assert "stays loaded: nothing else" in text
