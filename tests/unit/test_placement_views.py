"""The placement report on the live faces: the detail view's section and ``--once --json``'s ``models[].placement``,
from one state (``model.placement_reason.placement_for``). The log is corpus 001's real lines (ollama/ollama#9181,
4 × CUDA, 44/81 layers) with its blob replaced by the stand-in catalog's model, so the row matches the load."""

from __future__ import annotations

from pathlib import Path

from kvtop.model.placement_reason import placement_for
from kvtop.report import model_json
from kvtop.ui.screens.model_detail import detail_text
from tests.unit.test_alerts import TINY, blob, ps_snapshot, row, state_of

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
BLOB_001 = "sha256-feef62aa06ab4162ebd3b9af4ff8383a37bf9544a7d30a3fe4623c8398bd1a28"


def _state():  # type: ignore[no-untyped-def]
    (path,) = LOGS.glob("001-*.log")
    lines = path.read_text(encoding="utf-8").replace(BLOB_001, blob(TINY)).splitlines()
    return state_of(ps_snapshot([row(TINY, 64000, 100 * 2**30, 60 * 2**30)]), lines)


def test_detail_view_and_json_show_the_same_report() -> None:
    state = _state()
    (v,) = state.models
    report = placement_for(state, v)
    assert report is not None and report.reason == "not_enough"
    text = detail_text(v, state).plain
    assert "Placement (why it landed there)" in text
    assert "CUDA3               11 layers, placed ~21.8 GiB, free 22.0 GiB at load" in text
    assert "CPU                 37 layers, ~40.3 GiB overflowed" in text
    assert "fix                 num_ctx 2048 (not enough)" in text
    placement = model_json(v, None, state)["placement"]
    assert placement == report.to_json()
    assert [d["layers"] for d in placement["devices"]] == [11, 11, 11, 11]
    assert placement["cpu_bytes"] == 136794708378 - 93522912870


def test_no_log_no_section() -> None:
    state = state_of(ps_snapshot([row(TINY, 4096, 2**30)]))
    (v,) = state.models
    assert placement_for(state, v) is None
    assert "Placement" not in detail_text(v, state).plain
    assert model_json(v, None, state)["placement"] is None
