"""Several servers at once: two stand-in processes, one killed mid-run: the other is still watched.

The live one must keep updating while the dead one is down, the switcher keys must put each
server on screen, and ``--once --json`` / ``--check`` must report both.
"""

from __future__ import annotations

import json
import time

from rich.text import Text
from textual.widgets import Static

from kvtop.config import Settings
from kvtop.ui.app import make_app
from kvtop.ui.widgets.header import ServerHeader
from tests.integration.test_app_live import rows, until
from tests.integration.test_cli import free_port, kvtop
from tests.standin import BUNDLED, _stop, running

ARGS = ["--manual", "--scenario", str(BUNDLED)]


def _servers_text(app: object) -> str:
    content = app.dashboard.query_one("#servers", Static).render()  # type: ignore[attr-defined]
    return content.plain if isinstance(content, Text) else str(content)


async def test_two_servers_one_killed_the_other_keeps_updating() -> None:
    with running(ARGS) as a, running(ARGS) as b:
        a.goto(1)  # qwen3:1.7b-q8_0 at 4096
        b.goto(4)  # three models, gemma4 spilled
        settings = Settings(host_url=a.url, interval_s=0.25, timeout_s=1.0, more_hosts=(b.url,))
        app = make_app(settings)
        async with app.run_test(size=(160, 48)) as pilot:
            await until(pilot, lambda: all(app.states[h].reachable for h in (a.url, b.url)))
            assert app.hosts == (a.url, b.url) and app.current_host == a.url
            await until(pilot, lambda: [r[0] for r in rows(app)] == ["qwen3:1.7b-q8_0"])
            bar = _servers_text(app)
            assert bar.startswith("1 " + a.url.removeprefix("http://") + " ● 1 model")
            await until(
                pilot, lambda: "2 " + b.url.removeprefix("http://") + " ● 3 models 1 spilled" in _servers_text(app)
            )

            await pilot.press("right_square_bracket")  # ]
            assert app.current_host == b.url
            await until(pilot, lambda: len(rows(app)) == 3)
            assert b.url.removeprefix("http://") in app.query_one(ServerHeader).render().plain
            assert [a_.kind for a_ in app.state.alerts] == ["spill"]

            _stop(a.proc)  # server 1 dies; server 2 must keep updating
            b.goto(2)  # only qwen3 at 32768
            await until(
                pilot, lambda: [r[0] for r in rows(app)] == ["qwen3:1.7b-q8_0"] and rows(app)[0][4] == "32768×1*"
            )
            await until(pilot, lambda: app.states[a.url].reachable is False)
            assert app.states[b.url].reachable is True
            assert " ✖ down" in _servers_text(app)
            polls_before = app.states[b.url].ollama.taken_at  # type: ignore[union-attr]
            await until(pilot, lambda: app.states[b.url].ollama.taken_at > polls_before + 0.5)  # type: ignore[union-attr]

            await pilot.press("1")
            assert app.current_host == a.url
            assert app.state.reachable is False and app.state.stale_s is not None
            await pilot.press("left_square_bracket")  # [ wraps to the last server
            assert app.current_host == b.url
            await pilot.press("9")  # no ninth server: nothing changes
            assert app.current_host == b.url


async def test_one_server_has_no_switcher() -> None:
    with running(ARGS) as a:
        app = make_app(Settings(host_url=a.url, interval_s=0.25, timeout_s=1.0))
        async with app.run_test(size=(100, 30)) as pilot:
            await until(pilot, lambda: app.state.reachable is True)
            assert not app.dashboard.query_one("#servers").display
            await pilot.press("right_square_bracket")
            assert app.current_host == a.url
            # check_action turns the switcher keys off, so the footer leaves them out
            active = app.active_bindings
            assert not {"right_square_bracket", "left_square_bracket", "1", "2"} & set(active)
            assert active["p"].enabled


def test_once_json_and_check_with_two_hosts_one_dead() -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with running(ARGS) as a:
        a.goto(4)
        proc = kvtop("--once", "--json", "--host", a.url, "--host", dead, "--timeout", "1")
        check = kvtop("--check", "--json", "--host", a.url, "--host", dead, "--timeout", "1")
        both = kvtop("--once", "--host", a.url, "--host", a.url)  # the same server twice is watched once
    assert proc.returncode == 2, proc.stderr
    doc = json.loads(proc.stdout)
    assert [h["host"] for h in doc["hosts"]] == [a.url, dead]
    live, down = doc["hosts"]
    assert live["reachable"] is True and {m["name"] for m in live["models"]} == {
        "qwen3:1.7b-q4_K_M",
        "gemma4:latest",
        "qwen3:1.7b-q8_0",
    }
    gemma = next(m for m in live["models"] if m["name"] == "gemma4:latest")
    assert (gemma["size"], gemma["size_vram"], gemma["processor"]) == (6591830464, 5333539264, "19%/81% CPU/GPU")
    assert down["reachable"] is False and down["models"] == [] and "refused" in down["error"]
    assert (
        down["gpu_status"]
        == (
            "GPU telemetry: none for this server (kvtop reads the GPUs of the machine it"
            f" runs on, reported with {a.url})"
        )
        and down["gpus"] == []
    )
    assert live["gpu_status"] != down["gpu_status"] and live["gpu_status"].startswith("GPU telemetry: ")
    assert check.returncode == 2
    cdoc = json.loads(check.stdout)
    assert cdoc["exit_code"] == 2
    assert [(h["host"], [x["kind"] for x in h["alerts"]]) for h in cdoc["hosts"]] == [
        (a.url, ["spill"]),
        (dead, ["server_unreachable"]),
    ]
    assert both.returncode == 0 and both.stdout.count("kvtop ") == 1


def test_hosts_list_in_the_config_file(tmp_path: object) -> None:
    from pathlib import Path

    with running(ARGS) as a, running(ARGS) as b:
        a.goto(1)
        b.goto(2)
        cfg = Path(str(tmp_path)) / "config.toml"
        cfg.write_text(f'host = ["{a.url}", "{b.url}"]\n', encoding="utf-8")
        start = time.monotonic()
        proc = kvtop("--once", "--config", str(cfg))
        shown = kvtop("--print-config", "--config", str(cfg))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("qwen3:1.7b-q8_0") == 2 and a.url in proc.stdout and b.url in proc.stdout
    assert "4096×1" in proc.stdout and "32768×1" in proc.stdout
    assert f"host      {a.url}, {b.url}" in shown.stdout
    assert time.monotonic() - start < 30
