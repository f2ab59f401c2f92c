"""``--si``: every size in decimal units, as ``ollama ps`` writes them (``6.1 GB`` where kvtop's
default says ``5.7 GiB``), on every text face; JSON stays bytes; the legend says which."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvtop.model.known import UNITS_NOTE, UNITS_NOTE_SI, exact_bytes, ibytes, si_on, si_units, units_note
from kvtop.model.humanize import human_bytes_decimal

QWEN_Q8_SIZE = 6_106_141_568  # qwen3:1.7b-q8_0 at num_ctx 32768 in the bundled scenario


@pytest.mark.parametrize(
    ("n", "binary", "decimal", "short"),
    [
        (QWEN_Q8_SIZE, "5.7 GiB", "6.1 GB", "6.1G"),
        (469_762_048, "448 MiB", "470 MB", "470M"),
        (61_300_000, "58.5 MiB", "61.3 MB", "61M"),
        (512, "512 B", "512 B", "512B"),
        (None, "?", "?", "?"),
    ],
)
def test_ibytes_in_both_units(n: int | None, binary: str, decimal: str, short: str) -> None:
    assert ibytes(n) == binary
    with si_units():
        assert ibytes(n) == decimal and ibytes(n, short=True) == short
    assert ibytes(n) == binary  # the block ends, the default is back


def test_decimal_agrees_with_ollama_ps() -> None:
    with si_units():
        assert ibytes(QWEN_Q8_SIZE) == human_bytes_decimal(QWEN_Q8_SIZE) == "6.1 GB"
        assert exact_bytes(QWEN_Q8_SIZE) == "6.1 GB (6,106,141,568 B)"
        assert si_on() and units_note() == UNITS_NOTE_SI
    assert not si_on() and units_note() == UNITS_NOTE


def test_plan_si_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kvtop.plan_cli import main_plan
    from tests.unit.test_plan_models import llama31_8b_show

    show = tmp_path / "llama3.1-8b.json"
    show.write_text(json.dumps(llama31_8b_show()), encoding="utf-8")
    args = ["llama3.1:8b", "--model-info", str(show), "--ctx", "32k", "--gpu-free", "24GB"]
    with si_units(False):  # main_plan sets the run's units; the block gives the test's back
        assert main_plan([*args, "--si"]) == 0
    decimal = capsys.readouterr().out
    assert " GB" in decimal and "GiB" not in decimal and UNITS_NOTE_SI in decimal
    with si_units(False):
        assert main_plan([*args, "--json", "--si"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["gpu"]["budget_bytes"] == 24 * 10**9  # JSON: bytes either way


def test_dashboard_legend_says_decimal() -> None:
    from kvtop.ui.format import legend

    assert "GB" not in legend(())
    with si_units():
        assert legend(()).endswith("G = GB (--si)")


def test_kvtop_accepts_si() -> None:
    from kvtop.cli import build_parser

    assert build_parser().parse_args(["--si"]).si is True and build_parser().parse_args([]).si is False
