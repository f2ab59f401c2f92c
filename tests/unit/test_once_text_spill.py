"""``--once`` text: while a model is spilled, VRAM+RAM after SIZE says which part is where (VRAM
first, then system RAM), next to PROCESSOR's CPU-first split as ``ollama ps`` prints it."""

from __future__ import annotations

from kvtop.model.fold_alerts import fold_with_alerts
from kvtop.model.views import AppState
from kvtop.report import state_text
from tests.ui.fakes import snapshot_at, step_index


def _table(step: str) -> list[str]:
    snap = snapshot_at(step_index(step))
    lines = state_text(fold_with_alerts(AppState(snap.host_url), snap)).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("NAME"))
    return lines[start : start + 4]


def test_a_spilled_model_shows_its_vram_then_its_ram() -> None:
    header, *rows = _table("spills")
    assert header.split()[:5] == ["NAME", "ID", "SIZE", "VRAM+RAM", "WEIGHTS"]  # the dashboard's order
    gemma = next(r for r in rows if r.startswith("gemma4:latest"))
    # /api/ps: size 6,591,830,464 B, size_vram 5,333,539,264 B (reported; 19%/81% CPU/GPU)
    assert "6.1 GiB  5.0 GiB+1.2 GiB  ?" in gemma and "4096×1*   19%/81% CPU/GPU" in gemma
    q8 = next(r for r in rows if r.startswith("qwen3:1.7b-q8_0"))
    assert "5.7 GiB  5.7 GiB+0 B" in q8 and "100% GPU" in q8
    assert header.index("VRAM+RAM") == gemma.index("5.0 GiB+1.2 GiB")


def test_without_a_spill_the_column_is_left_out() -> None:
    header, *_ = _table("A second model")
    assert "VRAM+RAM" not in header and header.split()[:4] == ["NAME", "ID", "SIZE", "WEIGHTS"]
