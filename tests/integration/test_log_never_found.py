"""A server log ``--log auto`` never found is a status line with its fix, not an alert; a log that
was being read and stopped is the ``log_source_lost`` alert. The same in every
mode: the dashboard (real ``AutoTail`` and ``FileTail`` under Pilot), ``--check`` and ``--once``
(real processes), the exporter's ``kvtop_alerts``.

``AutoTail`` looks only where the test says: no ``journalctl``/``docker`` on PATH, and
``~/.ollama/logs/server.log`` under a temporary HOME as the one file candidate.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvtop.config import Settings
from kvtop.export.metrics import HostView
from kvtop.model.alerts import evaluate
from kvtop.model.views import AppState
from kvtop.model.fold_alerts import fold_with_alerts, fold_log_with_alerts
from kvtop.sources import tail
from kvtop.sources.tail import AutoTail
from kvtop.ui.app import KvtopApp, make_app
from tests.integration.test_check_log import _isolated_env, kvtop, one_model_at_512, restamped
from tests.standin import running
from tests.ui.fakes import HOST, FakeSource, snapshot_at, step_index
from tests.ui.test_app import wait_for
from tests.unit.test_prometheus import scrape

NEVER_FOUND = f"no Ollama server log found — {tail.NOT_FOUND_FIX}. Tried: file:/nowhere: not used"


def _kinds(state: AppState) -> list[str]:
    return [a.kind for a in state.alerts]


# --------------------------------------------------------------------------------------------
# The rule, as every mode evaluates it


def test_auto_still_looking_is_no_alert_a_lost_log_is() -> None:
    state = fold_with_alerts(AppState(HOST), snapshot_at(1))
    looking = fold_log_with_alerts(state, [], source="auto", status=NEVER_FOUND, ok=False, lines=0)
    assert "log_source_lost" not in [a.kind for a in evaluate(looking)]
    read = fold_log_with_alerts(state, [], source="file:/var/log/ollama.log", status=None, ok=True, lines=12)
    assert "log_source_lost" not in [a.kind for a in evaluate(read)]
    lost = fold_log_with_alerts(
        read,
        [],
        source="file:/var/log/ollama.log",
        status="/var/log/ollama.log was deleted — waiting for it to be re-created",
        ok=False,
        lines=0,
    )
    (alert,) = [a for a in evaluate(lost) if a.kind == "log_source_lost"]
    assert alert.severity == "warning" and "was deleted" in alert.message
    # a log named with --log that cannot be read is the user's problem to know: an alert from the start
    named = fold_log_with_alerts(state, [], source="file:/nope.log", status="/nope.log not found", ok=False, lines=0)
    assert "log_source_lost" in [a.kind for a in evaluate(named)]


def test_the_exporter_counts_the_lost_log_only() -> None:
    state = fold_with_alerts(AppState(HOST), snapshot_at(1))

    def alert_kinds(st: AppState) -> set[str]:
        fams = scrape([HostView(url=HOST, local=True, log=True, state=st)])
        fam = fams.get("kvtop_alerts")
        return {s.labels["kind"] for s in fam.samples if s.value} if fam is not None else set()

    looking = fold_log_with_alerts(state, [], source="auto", status=NEVER_FOUND, ok=False, lines=0)
    assert "log_source_lost" not in alert_kinds(looking)
    read = fold_log_with_alerts(state, [], source="file:/x", status=None, ok=True, lines=3)
    lost = fold_log_with_alerts(read, [], source="file:/x", status="/x was deleted", ok=False, lines=0)
    assert "log_source_lost" in alert_kinds(lost)


# --------------------------------------------------------------------------------------------
# The dashboard


def _auto_here(monkeypatch: pytest.MonkeyPatch, home: Path) -> AutoTail:
    """A real ``AutoTail`` that can find only ``home``'s ``~/.ollama/logs/server.log``."""
    server_log = home / ".ollama" / "logs" / "server.log"
    monkeypatch.setattr(
        tail, "auto_file_candidates", lambda env=None, platform=None: [(server_log, "the macOS app's server log")]
    )
    return AutoTail(env=_isolated_env(home))


def _text(app: KvtopApp, selector: str) -> str:
    return str(app.dashboard.query_one(selector).render())


async def test_dashboard_without_a_log_says_what_to_do_and_raises_no_alert(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    app = make_app(
        Settings(host_url=HOST, interval_s=0.25, log_spec="auto"),
        FakeSource(snapshot_at(1)),
        log_source=_auto_here(monkeypatch, tmp_path),
    )
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.state.log.source == "auto" and not app.state.log.ok and app.state.models)
        await pilot.pause(0.3)
        assert "log_source_lost" not in _kinds(app.state)
        assert "log source lost" not in _text(app, "#alertbar")
        line = _text(app, "#logline")
        assert line.startswith("Server log: auto — no Ollama server log found — choose one with --log"), line


async def test_dashboard_log_read_then_lost_is_an_alert(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    auto = _auto_here(monkeypatch, tmp_path)
    server_log = tmp_path / ".ollama" / "logs" / "server.log"
    server_log.parent.mkdir(parents=True)
    server_log.write_text("".join(line + "\n" for line in restamped("015")), encoding="utf-8")
    app = make_app(
        Settings(host_url=HOST, interval_s=0.25, log_spec="auto"),
        FakeSource(snapshot_at(step_index("spills"))),
        log_source=auto,
    )
    async with app.run_test(size=(160, 40)) as pilot:
        await wait_for(pilot, lambda: app.state.log.ok and app.state.log.lines == 7)
        assert app.state.log.source == f"file:{server_log}" and "log_source_lost" not in _kinds(app.state)
        server_log.unlink()
        await wait_for(pilot, lambda: "log_source_lost" in _kinds(app.state), timeout_s=10.0)
        (alert,) = [a for a in app.state.alerts if a.kind == "log_source_lost"]
        assert "was deleted" in alert.message and alert.severity == "warning"
        await pilot.pause(0.3)
        assert "log source lost" in _text(app, "#alertbar") or "+" in _text(app, "#alertbar")  # a spill may lead


# --------------------------------------------------------------------------------------------
# --check and --once


def test_check_and_once_with_log_auto_named_and_nothing_found(tmp_path: Path) -> None:
    env = _isolated_env(tmp_path)
    with running(one_model_at_512(tmp_path)) as server:
        check = kvtop("--check", "--json", "--log", "auto", "--host", server.url, env=env)
        once = kvtop("--once", "--json", "--log", "auto", "--host", server.url, env=env)
    assert check.returncode == 0, check.stdout + check.stderr
    assert json.loads(check.stdout)["alerts"] == []
    assert "no Ollama server log found" in check.stderr and "choose one with --log" in check.stderr
    assert once.returncode == 0, once.stdout + once.stderr
    assert json.loads(once.stdout)["alerts"] == []
    assert "choose one with --log" in once.stderr
