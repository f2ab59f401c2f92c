"""The memory ledger on every face (``kvtop.model.ledger``): the model detail view, ``--once --json`` and its text,
and ``/metrics``,
on a real llama-server run's log (``tests/ui/ledger_app.py``: an interleaved-SWA model with both KV pools, the host
prompt cache and context checkpoints) and NVML per process (the shared two-GPU server, fakes at its boundaries)."""

from __future__ import annotations

import json
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from textual.widgets import Static

from kvtop.export.metrics import HostView, KvtopCollector, make_registry
from kvtop.model.views import AppState
from kvtop.report import state_json, state_text

from kvtop.ui.screens.model_detail import ModelDetailScreen
from tests.ui.fakes import HOST
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


async def _settled_state(tmp_path: Path) -> AppState:
    """The ledger app's state once the whole run's log is folded and the GPU sampled."""
    app = ledger_app(tmp_path)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot, rows=3)
        await wait_for(
            pilot,
            lambda: any(
                m.name == MODEL and m.load is not None and m.load.checkpoint_count == 3 for m in app.state.models
            ),
        )
        state: AppState = app.state
    return state


async def test_once_json_and_text_carry_the_same_ledger(tmp_path: Path) -> None:
    state = await _settled_state(tmp_path)
    doc = json.loads(json.dumps(state_json(state)))
    ledger = next(m for m in doc["models"] if m["name"] == MODEL)["ledger"]
    assert ledger["from_log"] is True
    assert [(r["component"], r["device"], r["bytes"], r["source"]) for r in ledger["rows"]] == [
        ("weights", "CPU_Mapped", 3722445, "allocated"),
        ("kv", "CPU", 1111491, "allocated"),
        ("kv_swa", "CPU", 1048576, "allocated"),
        ("compute", "CPU", 7895777, "allocated"),
        ("prompt_cache", "host", 475005, "allocated"),
        ("checkpoints", "host", 267387, "allocated"),
    ]
    gpus, host = ledger["measures"]
    assert gpus == {
        "scope": "GPUs",
        "listed_bytes": 0,
        "measured_bytes": 5637144576,
        "measured_source": "reported",
        "remainder_bytes": 5637144576,
        "remainder_source": "estimated",
        "note": "NVML: the runner's memory on every GPU",
    }
    assert (host["scope"], host["listed_bytes"], host["measured_bytes"], host["remainder_bytes"]) == (
        "host",
        14520681,
        None,
        None,
    )
    line = next(x for x in state_text(state).splitlines() if x.startswith(f"LEDGER {MODEL}:"))
    assert "KV SWA pool CPU 1.0 MiB" in line and "prompt cache host 464 KiB" in line
    assert line.endswith("; GPUs: measured 5.2 GiB, listed 0 B, unexplained ~5.2 GiB")
    # the models without a log load of their own print no LEDGER line (their rows are /api/ps figures)
    assert sum(x.startswith("LEDGER ") for x in state_text(state).splitlines()) == 1


async def test_metrics_export_the_ledger_with_bounded_labels(tmp_path: Path) -> None:
    state = await _settled_state(tmp_path)
    view = next(m for m in state.models if m.name == MODEL)
    text = generate_latest(
        make_registry(KvtopCollector(lambda: [HostView(url=HOST, local=True, log=True, state=state)], lambda: None))
    ).decode("utf-8")
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    mine = [s for s in fams["kvtop_model_ledger_bytes"].samples if s.labels["model"] == MODEL]
    assert {(s.labels["component"], s.labels["device"], s.labels["source"], s.value) for s in mine} == {
        ("weights", "CPU_Mapped", "allocated", 3722445.0),
        ("kv", "CPU", "allocated", 1111491.0),
        ("kv_swa", "CPU", "allocated", 1048576.0),
        ("compute", "CPU", "allocated", 7895777.0),
        ("prompt_cache", "host", "allocated", 475005.0),
        ("checkpoints", "host", "allocated", 267387.0),
    }
    assert all(s.labels["digest"] == view.digest for s in mine)
    measured = {
        (s.labels["model"], s.labels["device"]): s.value for s in fams["kvtop_model_ledger_measured_bytes"].samples
    }
    unexplained = {
        (s.labels["model"], s.labels["device"]): s.value for s in fams["kvtop_model_ledger_unexplained_bytes"].samples
    }
    assert measured[(MODEL, "GPUs")] == unexplained[(MODEL, "GPUs")] == 5637144576.0
    devices = {s.labels["device"] for s in fams["kvtop_model_ledger_bytes"].samples}
    assert devices <= {"CPU", "CPU_Mapped", "host", "?"}
