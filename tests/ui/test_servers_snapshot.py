"""The server switcher row on screen: two servers, one down (snapshot at 80×24)."""

from __future__ import annotations

from kvtop.config import Settings
from kvtop.ui.app import make_app
from tests.ui.fakes import HOST, FakeSource, down_snapshot, snapshot_at, step_index, TAKEN_AT

OTHER = "http://gpu-box-2:11434"


def _app() -> object:
    main = FakeSource(snapshot_at(step_index("gemma4")), hold=True)
    other = FakeSource(down_snapshot(TAKEN_AT, "connection refused (http://gpu-box-2:11434)"), hold=True)
    return make_app(
        Settings(host_url=HOST, interval_s=0.25, more_hosts=(OTHER,)),
        main,  # type: ignore[arg-type]
        more_sources={OTHER: other},
    )  # type: ignore[dict-item]


def test_two_servers_80x24(snap_compare: object) -> None:
    async def settle(pilot: object) -> None:
        await pilot.pause(0.3)  # type: ignore[attr-defined]

    assert snap_compare(_app(), terminal_size=(80, 24), run_before=settle)  # type: ignore[operator]


def test_second_server_on_screen_160x48(snap_compare: object) -> None:
    async def switch(pilot: object) -> None:
        await pilot.pause(0.3)  # type: ignore[attr-defined]
        await pilot.press("2")  # type: ignore[attr-defined]
        await pilot.pause(0.1)  # type: ignore[attr-defined]

    assert snap_compare(_app(), terminal_size=(160, 48), run_before=switch)  # type: ignore[operator]
