"""Which runner serves a model (issue 25, "0.40's runner field"): ``/api/ps``'s ``runner``
(``llama.cpp`` or ``mlx``, Ollama 0.40+) decoded and tolerated when absent, else the runner's
command line, and shown by ``--once`` text and JSON.

No real 0.40 ``/api/ps`` body was available (the Ollama source mirrored here ends at v0.33.0-rc2,
docs/ollama-internals.md §7.2), so the bodies below are the real v0.33 body of
``tests/fixtures/api/001-api-ps-gemma3-full-gpu.json`` with the one key added.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

from kvtop.model.fold_alerts import fold_with_alerts
from kvtop.model.views import AppState
from kvtop.report import model_json, state_text
from kvtop.sources.ollama_decode import parse_ps, parse_runner
from tests.ui.fakes import snapshot_at, step_index

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "api" / "001-api-ps-gemma3-full-gpu.json"


def _body(runner: Any) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(FIXTURE.read_text(encoding="utf-8"))
    out = copy.deepcopy(body)
    for entry in out["models"]:
        if runner is not ...:
            entry["runner"] = runner
    return out


def test_the_runner_field_is_read_as_sent() -> None:
    (m,) = parse_ps(_body("mlx"))
    assert m.name == "gemma3:latest" and m.runner == "mlx"
    (m,) = parse_ps(_body("llama.cpp"))
    assert m.runner == "llama.cpp"


def test_a_body_without_the_field_decodes_as_before() -> None:
    (m,) = parse_ps(_body(...))
    assert m.runner is None and m.size_vram_bytes == 5_964_735_424  # the fixture's figure, unchanged


def test_odd_shapes_are_tolerated() -> None:
    assert parse_runner(None) is None
    assert parse_runner(3) is None
    assert parse_runner("  ") is None
    assert parse_runner({"name": "mlx", "version": "0.30"}) == "mlx"
    assert parse_runner({"type": "llama.cpp"}) == "llama.cpp"
    assert parse_runner({"other": 1}) is None
    assert parse_runner("\x1b[31mmlx") == "\ufffd[31mmlx"  # server text never reaches the terminal as an escape
    assert parse_runner("x" * 200) == "x" * 40


def _state(runner: str | None) -> AppState:
    snap = snapshot_at(step_index("spills"))
    models = tuple(dataclasses.replace(m, runner=runner if m.name.startswith("gemma4") else None) for m in snap.models)
    return fold_with_alerts(AppState(snap.host_url), dataclasses.replace(snap, models=models))


def test_once_text_and_json_show_the_reported_runner() -> None:
    state = _state("mlx")
    lines = state_text(state).splitlines()
    header = next(line for line in lines if line.startswith("NAME"))
    assert header.split()[-2:] == ["RUNNER", "UNTIL"]
    gemma = next(line for line in lines if line.startswith("gemma4:latest"))
    assert gemma[header.index("RUNNER") :].startswith("mlx ")
    other = next(line for line in lines if line.startswith("qwen3:1.7b-q8_0"))
    assert other[header.index("RUNNER") :].startswith("? ")  # the other row's runner is not known
    by_name = {v.name: v for v in state.models}
    doc = model_json(by_name["gemma4:latest"])
    assert (doc["engine"], doc["engine_source"]) == ("mlx", "reported")
    doc = model_json(by_name["qwen3:1.7b-q8_0"])
    assert (doc["engine"], doc["engine_source"]) == (None, None)
    assert "before Ollama 0.40" in by_name["qwen3:1.7b-q8_0"].engine.note


def test_without_any_runner_known_the_column_is_left_out() -> None:
    header = next(line for line in state_text(_state(None)).splitlines() if line.startswith("NAME"))
    assert "RUNNER" not in header
