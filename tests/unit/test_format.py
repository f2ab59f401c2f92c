"""ui.format: units, safe text and the memory bar."""

from __future__ import annotations

import pytest

from kvtop.model.views import AppState
from kvtop.model.fold_alerts import fold_with_alerts
from kvtop.ui.format import context_text, ibytes, memory_bar, memory_figures, safe
from tests.ui.fakes import snapshot_at, step_index


@pytest.mark.parametrize(
    ("n", "long", "short"),
    [
        (0, "0 B", "0B"),
        (1023, "1023 B", "1023B"),
        (448 * 2**20, "448 MiB", "448M"),
        (4 * 2**30, "4.0 GiB", "4.0G"),
        (int(61.3 * 2**20), "61.3 MiB", "61M"),
        (6_106_141_568, "5.7 GiB", "5.7G"),
        (None, "?", "?"),
    ],
)
def test_ibytes(n: int | None, long: str, short: str) -> None:
    assert ibytes(n) == long and ibytes(n, short=True) == short


@pytest.mark.parametrize(
    ("text", "shown"),
    [("\x1b[31mred", "�[31mred"), ("a\x07b", "a�b"), ("rtl\u202eevil", "rtl�evil"), ("ok:latest", "ok:latest")],
)
def test_safe_strips_control_characters(text: str, shown: str) -> None:
    assert safe(text) == shown


def test_safe_truncates_with_ellipsis() -> None:
    assert safe("abcdefgh", 5) == "abcd…"


def test_memory_bar_segments_follow_the_split() -> None:
    views = {v.name: v for v in fold_with_alerts(AppState("h"), snapshot_at(step_index("spills"))).models}
    q8 = views["qwen3:1.7b-q8_0"]  # 2.2 GB weights, 3.5 GiB KV, 141 MiB compute of 6.1 GB
    bar = memory_bar(q8, 20, {}).plain
    assert bar == "███████▓▓▓▓▓▓▓▓▓▓▓▓▒"
    assert memory_figures(q8) == "W 2.0G KV ~3.5G C ~141M"
    assert context_text(q8) == "32768×1*"
    gemma = views["gemma4:latest"]  # weights unknown: no made-up split
    assert memory_bar(gemma, 10, {}).plain == "·········▓"  # weights and compute unknown; KV 104 MiB gets its cell


@pytest.mark.parametrize(
    ("name", "limit", "shown"),
    [
        ("qwen3:1.7b-q8_0", 20, "qwen3:1.7b-q8_0"),
        ("hf.co/unsloth/Qwen3-Coder-30B-A3B-Instruct-GGUF:Q4_K_M", 22, "hf.co/unsloth/…:Q4_K_M"),
        ("averyveryverylongnamewithouttag", 12, "averyver…tag"),
        # a credential a server echoes in a name is not shown (the table, --once)
        ("mirror:https://bob:pw/9@x.example/m", 40, "mirror:https://x.example/m"),
        ("evil:latest?token=abc123", 40, "evil:latest?token=***"),
    ],
)
def test_safe_name_keeps_the_tag(name: str, limit: int, shown: str) -> None:
    from kvtop.ui.format import safe_name

    assert safe_name(name, limit) == shown and len(shown) <= limit


@pytest.mark.parametrize("width", range(70, 221))
def test_columns_fit_every_supported_width(width: int) -> None:
    from kvtop.ui.widgets.models_table import columns_for

    cols = columns_for(width)
    used = sum(c.width + 2 for c in cols) + 2  # cell padding and the vertical scrollbar
    assert used <= width
    assert cols[0].key == "name" and cols[0].width >= 12
    keys = [c.key for c in cols]
    assert ("until" in keys) == (width >= 100)
    assert ("id" in keys) == (width >= 160)


@pytest.mark.parametrize(
    ("n", "text"),
    [(4096, "4096"), (32768, "32768"), (99999, "99999"), (131072, "128K"), (1048576, "1024K"), (100001, "100001")],
)
def test_ctx_number(n: int, text: str) -> None:
    from kvtop.ui.format import ctx_number

    assert ctx_number(n) == text


def test_ibytes_never_overflows() -> None:
    assert ibytes(10**400) == "huge"


def test_short_until_keeps_stopping_within_the_narrow_column() -> None:
    import dataclasses

    from kvtop.ui.format import short_until

    (v, *_) = fold_with_alerts(AppState(host_url="http://127.0.0.1:11434"), snapshot_at(step_index("spills"))).models
    assert short_until(dataclasses.replace(v, until="Stopping...")) == "Stopping"
    assert short_until(dataclasses.replace(v, until="4 minutes from now")) == "4 min"
    assert len("Stopping") <= 9  # the UNTIL column's width below 160 columns
