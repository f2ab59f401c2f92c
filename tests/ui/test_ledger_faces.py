"""The memory ledger on the dashboard's faces (``kvtop.model.ledger``): the model detail view and the memory map,
on a real llama-server run's log (``tests/ui/ledger_app.py``: an interleaved-SWA model with both KV pools, the host
prompt cache and context checkpoints) and NVML per process (the shared two-GPU server, fakes at its boundaries)."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Static

from kvtop.ui.screens.model_detail import ModelDetailScreen
from tests.ui.ledger_app import MODEL, ledger_app
from tests.ui.settle import settle
from tests.ui.test_app import wait_for


async def test_the_detail_view_lists_every_part_measured_and_the_remainder(tmp_path: Path) -> None:
    app = ledger_app(tmp_path)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot, rows=3)
        await wait_for(
            pilot,
            lambda: any(
                m.name == MODEL and m.load is not None and m.load.checkpoint_count == 3 for m in app.state.models
            ),
        )
        view = next(m for m in app.state.models if m.name == MODEL)
        await app.push_screen(ModelDetailScreen(view.name, view.digest))
        body = app.screen.query_one("#detail-body", Static)
        await wait_for(pilot, lambda: "Memory ledger" in str(body.content))
        text = " ".join(str(body.content).split())
    assert "Memory ledger the runner log, per device CPU KV cache 1.1 MiB (1,111,491 B) [allocated]" in text
    assert "KV SWA pool 1.0 MiB (1,048,576 B) [allocated] CPU KV buffers of the SWA cache" in text
    assert "prompt cache 464 KiB (475,005 B) [allocated] llama-server's cache state: 2 prompt(s)" in text
    assert "checkpoints 261 KiB (267,387 B) [allocated] 3 live context checkpoint(s)" in text
    # the run is CPU only (-ngl 0) while NVML measures its runner on both GPUs: all of it is unexplained
    assert (
        "all GPUs of the runner listed 0 B measured 5.2 GiB (5,637,144,576 B) [reported]"
        " NVML: the runner's memory on every GPU unexplained ~5.2 GiB (5,637,144,576 B) [estimated] measured − listed"
    ) in text
    assert "host RAM listed 13.8 MiB (14,520,681 B) measured ? not known" in text
