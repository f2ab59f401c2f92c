"""The one renderer of a value and its source mark (``kvtop.model.known.marked``): a size carries its
mark before it, a setting after it, ``?`` alone when not known; every face writes through it."""

from __future__ import annotations

import pytest

from kvtop.model.known import Known, context_pair, marked, setting_text, size_text
from kvtop.model.preflight import ServerDefaults, marked as preflight_marked


@pytest.mark.parametrize(
    ("value", "source", "kwargs", "expected"),
    [
        (3_758_096_384, "estimated", {"size": True}, "~3.5 GiB"),
        (3_758_096_384, "estimated", {"size": True, "short": True}, "~3.5G"),
        (3_758_096_384, "estimated", {"size": True, "exact": True}, "~3.5 GiB (3,758,096,384 B)"),
        (2_147_483_648, "reported", {"size": True}, "2.0 GiB"),
        (None, "estimated", {"size": True}, "?"),
        (4096, "default", {}, "4096*"),
        ("q8_0", "service", {}, "q8_0="),
        (8192, "requested", {}, "8192^"),
        (True, "requested", {}, "on^"),
        (False, "default", {}, "off*"),
        (32768, "allocated", {}, "32768"),
        (None, "default", {}, "?"),
        (40960, "estimated", {"fmt": "{:,}"}, "40,960~"),
    ],
)
def test_marked_puts_the_mark_where_its_kind_wants_it(
    value: object, source: str, kwargs: dict[str, bool], expected: str
) -> None:
    assert marked(value, source, **kwargs) == expected  # type: ignore[arg-type]


def test_a_size_must_be_bytes() -> None:
    with pytest.raises(TypeError, match="int of bytes"):
        marked("4 GiB", "estimated", size=True)


def test_context_pair_marks_each_number_after_itself() -> None:
    default, one_default = Known(4096, "default"), Known(1, "default")
    assert context_pair(default, one_default) == "4096*×1*"
    assert context_pair(Known(32768, "allocated"), one_default) == "32768×1*"  # only the slot count is a default
    assert context_pair(Known(8192, "runner"), Known(4, "runner")) == "8192×4"
    assert context_pair(default, Known()) == "4096*"
    assert context_pair(Known(), one_default) == "?"
    assert context_pair(Known(131072, "reported"), Known(2, "service"), number=lambda n: f"{n // 1024}K") == "128K×2="
    assert context_pair(default, one_default, sep=" × ") == "4096* × 1*"


def test_size_and_setting_text_are_the_renderer() -> None:
    assert size_text(Known(448 * 2**20, "estimated"), short=True) == "~448M"
    assert setting_text(Known("f16", "default")) == "f16*"
    assert setting_text(Known()) == "?"


def test_plan_all_and_server_view_settings_read_value_then_mark() -> None:
    """``plan --all`` and the server view once wrote ``*4096 × *1 slot(s), KV *f16``."""
    d = ServerDefaults(
        num_ctx=Known(4096, "default"),
        parallel=Known(1, "default"),
        cache_type=Known("f16", "default"),
        flash_attention=Known(False, "default"),
    )
    assert [preflight_marked(k) for k in (d.num_ctx, d.parallel, d.cache_type, d.flash_attention)] == [
        "4096*",
        "1*",
        "f16*",
        "off*",
    ]
