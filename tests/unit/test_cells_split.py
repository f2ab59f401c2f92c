"""``ui.format._cells`` (bars split in proportion, every non-zero value at least one cell) gives the
same cells as the plain rule it replaced (a search for the widest per value: O(n²), seconds per
repaint for a 1,000-model memory map), for any values, and keeps its invariants."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kvtop.ui.format import _cells


def plain_rule(values: list[int], total: int, width: int) -> list[int]:
    """The rule as first written: largest remainder, then each non-zero value with no cell takes one
    from the first of the widest."""
    if total <= 0:
        return [0] * len(values)
    exact = [v / total * width for v in values]
    cells = [int(x) for x in exact]
    order = sorted(range(len(values)), key=lambda i: exact[i] - cells[i], reverse=True)
    for i in order[: max(0, width - sum(cells))]:
        cells[i] += 1
    for i, v in enumerate(values):
        if v > 0 and cells[i] == 0:
            donor = max(range(len(cells)), key=lambda j: cells[j])
            if cells[donor] > 1:
                cells[donor] -= 1
                cells[i] = 1
    return cells


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.one_of(st.just(0), st.just(1), st.integers(0, 10**10)), max_size=80),
    st.integers(0, 10**10),
    st.integers(0, 160),
)
def test_same_cells_as_the_plain_rule(values: list[int], extra: int, width: int) -> None:
    total = sum(values) + extra
    got = _cells(values, total, width)
    assert got == plain_rule(values, total, width)
    if total > 0 and values:
        assert sum(got) <= max(width, sum(1 for v in values if v > 0))


def test_thousands_of_segments_in_a_hundred_cells() -> None:
    """The shape of a 1,000-model map's bar: 3,000 segments, one large, in 116 cells."""
    values = [10**9] + [7 * 10**6 + i for i in range(3000)]
    got = _cells(values, sum(values), 116)
    assert got == plain_rule(values, sum(values), 116)
    assert sum(got) == 116 and got[0] == 1 and got.count(1) == 116
