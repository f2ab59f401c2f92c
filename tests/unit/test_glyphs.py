"""ASCII mode's glyph table (``kvtop.core.glyphs``): cell for cell, never a source mark, every bar's
parts still told apart; the locale detection; ``--once`` under ``LC_ALL=C``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvtop.core.glyphs import (
    ASCII_GLYPHS,
    SOURCE_MARKS,
    ascii_char,
    output_wants_ascii,
    started_in_c_locale,
    to_ascii,
    wants_ascii,
)
from kvtop.model.known import SOURCE_MARK

ROOT = Path(__file__).resolve().parents[2]

BARS = {
    "model memory bar": "█▓▒·",
    "memory map": "█▓▤▒▇▐▚▄·░",
    "GPU strip": "█▚▄·░",
    "sparkline": "▁▂▃▄▅▆▇█",
    "plot markers": "│┆║",
    "plot series markers": "•×◆◇□■○",
}


def test_the_marks_are_the_source_marks() -> None:
    assert set(SOURCE_MARKS) == {m for m in SOURCE_MARK.values() if m} | {"?"}


def test_no_glyph_becomes_a_source_mark_and_each_keeps_one_cell() -> None:
    for glyph, stand_in in ASCII_GLYPHS.items():
        assert stand_in.isascii() and len(stand_in) == 1, glyph
        assert stand_in not in SOURCE_MARKS, (glyph, stand_in)


@pytest.mark.parametrize("name", sorted(BARS))
def test_each_bar_keeps_its_parts_apart(name: str) -> None:
    glyphs = BARS[name]
    assert len({ascii_char(g) for g in glyphs}) == len(glyphs), [ascii_char(g) for g in glyphs]


def test_the_swa_pool_is_told_from_the_kv_cache() -> None:
    """The map's legend drew ``▓`` for both "KV cache" and "KV SWA pool" (issue 26 review): each has
    its own glyph, in ASCII too, and the help lists it."""
    from kvtop.ui.screens.help import glyph_text
    from kvtop.ui.widgets.memory_map import GLYPHS, KIND_WORDS

    assert (GLYPHS["kv"], GLYPHS["kv_swa"]) == ("▓", "▤")
    assert (ascii_char(GLYPHS["kv"]), ascii_char(GLYPHS["kv_swa"])) == ("%", ";")
    drawn = {GLYPHS[k] for k in KIND_WORDS if k not in ("recurrent", "output")}  # those share KV's / compute's
    assert len(drawn) == len(KIND_WORDS) - 2
    assert any(line.lstrip().startswith("▤") and "SWA pool" in line for line in glyph_text().splitlines())


def test_the_unknown_part_is_no_longer_the_estimated_mark() -> None:
    """Without UTF-8, tmux showed ``·`` as ``~``, kvtop's "estimated"."""
    assert to_ascii("██▓▓▒··") == "##%%+.."
    assert to_ascii("4096*×1*") == "4096*x1*"


def test_plot_series_markers_are_no_source_mark() -> None:
    from kvtop.ui.screens.history import LINE_MARKERS, POINT_MARKERS

    for marker in {*LINE_MARKERS, *POINT_MARKERS} - {"braille"}:
        assert to_ascii(marker) not in SOURCE_MARKS and to_ascii(marker) != "_", marker


def test_the_palettes_search_icon() -> None:
    """Textual's command palette draws 🔎 (two cells): ``__`` in ASCII mode before."""
    assert to_ascii("🔎 unl", cell_width=lambda ch: 2 if ch == "🔎" else 1) == ">> unl"


def test_box_lines_braille_and_wide_characters() -> None:
    assert to_ascii("╭──╮│ │╰──╯┼━┃") == "+--+| |+--++-|"
    assert to_ascii("┄┈╌") == "```"  # a plot's limit line is not its axis (issue 26: both were ``-``)
    assert to_ascii("⠀⠁⡀⠒⣿") == " '.::"
    assert to_ascii("模型:latest") == "____:latest"  # two cells each: the layout keeps its width
    assert to_ascii("café") == "cafe"
    assert to_ascii("plain ascii") == "plain ascii"


def test_plain_text_output_uses_the_clearer_forms() -> None:
    assert to_ascii("±12 MiB ≥ 4 — x", keep_cells=False) == "+/-12 MiB >= 4 -- x"
    assert to_ascii("qwen…:q8_0 4096×1", keep_cells=False) == "qwen.:q8_0 4096x1"  # aligned columns keep one cell


@pytest.mark.parametrize(
    ("environ", "encoding", "expected"),
    [
        ({"LANG": "C.UTF-8"}, "utf-8", False),
        ({"LANG": "en_US.utf8"}, None, False),
        ({"LC_ALL": "C", "LANG": "en_US.UTF-8"}, "utf-8", True),  # LC_ALL wins; Python's UTF-8 mode does not count
        ({"LC_CTYPE": "en_US.UTF-8", "LANG": "C"}, None, False),
        ({"LANG": "POSIX"}, None, True),
        ({"LANG": "de_DE.ISO-8859-1"}, None, True),
        ({}, None, True),  # no locale variable: the C locale
        ({"LANG": "en_US.UTF-8"}, "ascii", True),
        ({"LC_ALL": "", "LANG": "en_US.UTF-8"}, "UTF-8", False),  # an empty variable is not set
    ],
)
def test_wants_ascii(environ: dict[str, str], encoding: str | None, expected: bool) -> None:
    assert wants_ascii(environ, encoding) is expected


def test_pythons_own_locale_coercion_is_not_the_users() -> None:
    """``LANG=C kvtop``: Python starts in the C locale, turns its UTF-8 mode on and sets
    ``LC_CTYPE=C.UTF-8`` in its own environment (PEP 538/540); the terminal still is not UTF-8."""
    coerced = {"LANG": "C", "LC_CTYPE": "C.UTF-8"}
    assert started_in_c_locale(1, coerced, {}) and not started_in_c_locale(0, coerced, {})
    assert not started_in_c_locale(1, {**coerced, "PYTHONUTF8": "1"}, {}) and not started_in_c_locale(
        1, coerced, {"utf8": True}
    )
    assert wants_ascii(coerced, "utf-8", c_locale_start=True)
    assert wants_ascii({"LC_CTYPE": "C.UTF-8"}, "utf-8", c_locale_start=True)  # no LANG at all
    assert not wants_ascii(
        {"LANG": "en_US.UTF-8", "LC_CTYPE": "C.UTF-8"}, "utf-8", c_locale_start=True
    )  # not installed here
    assert not wants_ascii(coerced, "utf-8")  # a user's own LC_CTYPE=C.UTF-8 counts
    assert output_wants_ascii(coerced, "utf-8", 1, {}) and not output_wants_ascii({"LANG": "C.UTF-8"}, "utf-8", 0, {})


def _once(env_extra: dict[str, str], *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LC_") and k != "LANG"}
    env.update(env_extra)
    out = subprocess.run(
        [sys.executable, "-m", "kvtop", "--demo", "--once", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_once_under_the_c_locale_is_ascii_with_every_mark_kept() -> None:
    text = _once({"LANG": "C"})  # the case: Python coerces its own LC_CTYPE to C.UTF-8
    assert text.isascii()
    assert "4096x1^" in text and "~448 MiB" in text and "? not known" in text
    assert "sizes binary: G/GiB = 2^30 B" in text


def test_ascii_flag_forces_it_under_utf8() -> None:
    from kvtop.cli import build_parser
    from kvtop.cli.outputs import plain_text
    from kvtop.config import Settings

    assert build_parser().parse_args(["--ascii"]).ascii is True
    assert plain_text("4096×1* ██·", Settings(extra={"ascii": "1"})) == "4096x1* ##."
    assert plain_text("4096×1* ██·", Settings(extra={"ascii": "0"})) == "4096×1* ██·"


def test_plan_ascii_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """``kvtop plan --ascii``: the same table, every character ASCII (offline, from a model_info file)."""
    import json

    from kvtop.plan_cli import main_plan
    from tests.unit.test_plan_models import llama31_8b_show

    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.delenv("LC_ALL", raising=False)
    monkeypatch.delenv("LC_CTYPE", raising=False)
    show = tmp_path / "llama3.1-8b.json"
    show.write_text(json.dumps(llama31_8b_show()), encoding="utf-8")
    args = ["llama3.1:8b", "--model-info", str(show), "--ctx", "32k", "--gpu-free", "24GB"]
    assert main_plan(args) == 0
    plain = capsys.readouterr().out
    assert main_plan([*args, "--ascii"]) == 0
    ascii_out = capsys.readouterr().out
    assert not plain.isascii() and ascii_out.isascii()
    assert ascii_out == to_ascii(plain, keep_cells=False)
    assert "~" in ascii_out and "+/-" in ascii_out  # estimates keep their mark; ± is spelled out


def test_alert_severities_and_sort_arrows_in_ascii() -> None:
    """``✖``/``▲`` are the alerts' critical and warning: ``x`` and ``!`` (not the article "A");
    the table's sort arrows are written ``v`` / ``A`` in ASCII mode by the table itself."""
    from kvtop.ui.widgets.models_table import columns_for, sorted_label

    assert to_ascii("✖ spill") == "x spill" and to_ascii("▲ prompt truncated") == "! prompt truncated"
    name = next(c for c in columns_for(120) if c.key == "name")
    assert sorted_label(name, "name", ascii_mode=True).endswith(" A")
    assert sorted_label(name, "name", True, ascii_mode=True).endswith(" v")
    assert sorted_label(name, "name").endswith(" ▲")
