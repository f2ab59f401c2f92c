"""An operator who hits a wall is told the way forward.

* A server that does not answer: the TUI, ``--once`` and ``--check`` (text and JSON) say the same
  three things (``kvtop.model.hints``): is ``ollama serve`` running, ``--host`` / ``OLLAMA_HOST``
  (and where the address in use came from), ``kvtop --demo``.
* A bad ``--theme`` (or ``KVTOP_THEME``) exits 2 naming the themes there are, as the README says of
  every bad flag value; one from the config file is reported and the default is used.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvtop.config import Settings
from kvtop.model.hints import unreachable_hint_line, unreachable_hints
from kvtop.ui.app import make_app
from tests.integration.test_cli import free_port
from tests.standin import REPO
from tests.ui.fakes import HOST, FakeSource, down_snapshot
from tests.ui.screen_text import screen_lines

WAY_FORWARD = ("ollama serve", "--host", "OLLAMA_HOST", "kvtop --demo")


def kvtop(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvtop", *args],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=str(REPO),
        env={**os.environ, **(env or {})},
    )


def says_the_way_forward(text: str) -> None:
    for words in WAY_FORWARD:
        assert words in text, (words, text)


# --------------------------------------------------------------------------------------------
# Unreachable


def test_hints_name_the_server_the_address_origin_and_the_demo() -> None:
    local = unreachable_hints("http://127.0.0.1:11434", "default", "refused")
    says_the_way_forward("\n".join(local))
    assert "neither --host nor OLLAMA_HOST is set" in local[1]
    remote = unreachable_hints("http://gpu-box:11434", "env OLLAMA_HOST", "timeout")
    assert "gpu-box" in remote[0] and "OLLAMA_HOST=0.0.0.0" in remote[0] and "from OLLAMA_HOST" in remote[1]
    wrong = unreachable_hints("http://127.0.0.1:8080", "flag", "invalid_json")
    assert "not as Ollama does" in wrong[0] and "from --host" in wrong[1]
    assert not any("--demo" in line for line in unreachable_hints(HOST, None, "refused", demo=True))
    for width in (78, 118):
        line = unreachable_hint_line(width)
        assert len(line) <= width and "ollama serve" in line and "--host" in line and "kvtop --demo" in line


def test_once_unreachable_says_the_way_forward() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    proc = kvtop("--once", "--host", url)
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"kvtop: {url}: unreachable: connection refused")
    says_the_way_forward(proc.stderr)
    assert "this address is from --host" in proc.stderr
    doc = json.loads(kvtop("--once", "--json", "--host", url).stdout)
    assert doc["reachable"] is False
    says_the_way_forward("\n".join(doc["hints"]))


def test_check_unreachable_says_the_way_forward_text_and_json() -> None:
    port = free_port()
    proc = kvtop("--check", "--log", "none", env={"OLLAMA_HOST": f"127.0.0.1:{port}"})
    assert proc.returncode == 2
    says_the_way_forward(proc.stdout)
    assert "this address is from OLLAMA_HOST" in proc.stdout
    doc = json.loads(kvtop("--check", "--json", "--log", "none", "--host", f"127.0.0.1:{port}").stdout)
    says_the_way_forward("\n".join(doc["hints"]))
    assert [a["kind"] for a in doc["alerts"]] == ["server_unreachable"]


def test_check_reachable_has_no_hints() -> None:
    from tests.standin import BUNDLED, running

    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        server.goto(1)
        doc = json.loads(kvtop("--check", "--json", "--log", "none", "--host", server.url).stdout)
    assert doc["reachable"] is True and doc["hints"] == []


@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
async def test_dashboard_unreachable_says_the_way_forward(size: tuple[int, int]) -> None:
    app = make_app(Settings(host_url=HOST, interval_s=0.25, log_spec="none"), FakeSource(down_snapshot(1.0), hold=True))
    async with app.run_test(size=size) as pilot:
        for _ in range(40):
            await pilot.pause(0.05)
            if app.state is not None and app.state.ollama is not None:
                break
        await pilot.pause(0.1)
        lines = screen_lines(app)
    status = next(line for line in lines if "ollama serve" in line)
    assert "--host" in status and "OLLAMA_HOST" in status and "kvtop --demo" in status and "…" not in status


# --------------------------------------------------------------------------------------------
# --theme


def test_bad_theme_flag_or_environment_exits_2_naming_the_themes() -> None:
    proc = kvtop("--theme", "bogus", "--once", "--host", f"127.0.0.1:{free_port()}")
    assert proc.returncode == 2 and proc.stdout == ""
    assert "kvtop: --theme: unknown theme 'bogus'" in proc.stderr and "kvtop-light" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = kvtop("--print-config", env={"KVTOP_THEME": "bogus"})
    assert proc.returncode == 2 and "kvtop: KVTOP_THEME: unknown theme 'bogus'" in proc.stderr


def test_good_themes_pass(tmp_path: Path) -> None:
    themes = Path(os.environ["XDG_CONFIG_HOME"]) / "kvtop" / "themes"
    themes.mkdir(parents=True, exist_ok=True)
    (themes / "mine.toml").write_text('name = "mine"\n[colors]\nprimary = "#112233"\n', encoding="utf-8")
    for name in ("kvtop-light", "nord", "mine"):
        proc = kvtop("--theme", name, "--print-config")
        assert proc.returncode == 0, proc.stderr
        assert f"theme     {name}" in proc.stdout


def test_bad_theme_in_the_config_file_is_reported_and_the_default_used() -> None:
    folder = Path(os.environ["XDG_CONFIG_HOME"]) / "kvtop"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.toml").write_text('theme = "bogus"\n', encoding="utf-8")
    proc = kvtop("--print-config")
    assert proc.returncode == 0, proc.stderr
    assert "theme     kvtop-dark" in proc.stdout and "unknown theme 'bogus'" in proc.stdout
