"""The alerts panel at hundreds of alerts does the work of what changed: each alert's
blocks are built once per colours and its lines counted once per width, so a poll that changes
one alert builds and measures that one; the counts and the text are always exactly what drawing
and wrapping everything gives. Work is counted, never timed."""

from __future__ import annotations

import dataclasses

from rich.console import Console

from kvtop.model.alerts import Alert, Fix
from kvtop.ui.themes import default_variables
from kvtop.ui.widgets.panels import AlertBlocks, alert_blocks, alerts_text


def many(n: int) -> tuple[Alert, ...]:
    return tuple(
        Alert(
            kind="spill",
            severity="critical" if i % 3 == 0 else "warning",
            model=f"m{i:04d}:8b",
            since=1.0,
            message=f"{i % 40}% of 6.1 GiB in system RAM (1.2 GiB); a longer message " * (1 + i % 3),
            fixes=(
                Fix(
                    action=f"num_ctx {2048 * (1 + i % 4)}",
                    detail="frees 512 MiB of KV cache",
                    fits=bool(i % 2),
                    cost="a shorter context",
                ),
                Fix(action="unload another model", detail="frees 4.9 GiB", fits=None, cost=""),
            ),
            key=f"spill:m{i:04d}",
        )
        for i in range(n)
    )


def test_blocks_and_lines_are_built_once_per_alert_and_equal_a_full_draw() -> None:
    console = Console(width=200)
    colors = default_variables()
    alerts = many(333)
    memo = AlertBlocks()
    widest = 1.0 + 59 * 60  # each heading measured with the widest age: "59 min"
    for width in (118, 78):
        assert memo.line_count(alerts, width, console) == len(alerts_text(alerts, colors, widest).wrap(console, width))
    blocks = memo.blocks(alerts, colors)
    assert [(b.plain, b.spans, r) for b, r in blocks] == [
        (b.plain, b.spans, r) for b, r in alert_blocks(alerts, colors)
    ]
    assert (memo.built, memo.measured) == (333, 666)
    # the next poll: equal alerts, one changed
    nxt = list(dataclasses.replace(a) for a in alerts)
    nxt[100] = dataclasses.replace(alerts[100], message="now 30% of 6.1 GiB in system RAM")
    nxt_t = tuple(nxt)
    assert memo.line_count(nxt_t, 118, console) == len(alerts_text(nxt_t, colors, widest).wrap(console, 118))
    memo.blocks(nxt_t, colors)
    assert (memo.built, memo.measured) == (334, 667)
    # other colours: every alert built again (their styles changed), none measured again
    memo.blocks(nxt_t, {**colors, "kv-crit": "#ff00ff"})
    assert memo.built == 334 + 333
    assert memo.line_count((), 118, console) == 1  # the one "No alerts" line
