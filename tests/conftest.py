"""Shared fixtures: isolation from the user's config and environment, fixture loaders."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import install_test_extras

FIXTURES = Path(__file__).parent / "fixtures"

SLOW_FILE_S = 5.0
"""The ``slow`` rule: a test file whose tests take over this many seconds in all (setup, call and
teardown summed from ``pytest --durations=0``, the whole suite on 2 cores) is listed in
:data:`SLOW_FILES`, and each of its tests carries the ``slow`` marker. ``pytest -m "not slow"`` is
then the inner loop (under 2 minutes on 2 cores); the whole suite (no ``-m``) is what CI and the
README run. A file that grows past the bound goes on the list with its seconds; the whole run
starts the files with the most seconds first, so that with 4 workers (pyproject.toml addopts) no
long file starts last and runs alone. ``tests/unit/test_slow_files.py`` checks that every entry
still names a file."""

SLOW_FILES: dict[str, float] = {  # seconds in all: the run of 2026-12-02 on 2 busy cores (25 min in all)
    "tests/integration/test_apply_step.py": 11,
    "tests/integration/test_check_log.py": 16,
    "tests/integration/test_cli.py": 18,
    "tests/integration/test_credentials.py": 25,
    "tests/integration/test_export_prometheus.py": 28,
    "tests/integration/test_export_textfile.py": 29,
    "tests/integration/test_exporter_load.py": 14,
    "tests/integration/test_exporter_slowloris.py": 10,
    "tests/integration/test_hostile_server.py": 58,
    "tests/integration/test_ladder_real.py": 12,  # alone, since its llama-server runs one thread (88 s before)
    "tests/integration/test_llama_server.py": 7,
    "tests/integration/test_log_burst.py": 12,
    "tests/integration/test_log_never_found.py": 8,
    "tests/integration/test_multi_host.py": 15,
    "tests/integration/test_one_engine.py": 5.1,  # alone on a quiet machine (newer than the run above)
    "tests/integration/test_one_vocabulary.py": 9,
    "tests/integration/test_plan_cli.py": 28,
    "tests/integration/test_preflight.py": 14,
    "tests/integration/test_preflight_pool.py": 37,
    "tests/integration/test_process.py": 10,
    "tests/integration/test_record_replay.py": 17,
    "tests/integration/test_remote_servers.py": 16,
    "tests/integration/test_slots_llama_server.py": 30,  # alone, since its llama-server runs one thread (224 s before)
    "tests/integration/test_soak.py": 218,
    "tests/integration/test_stream.py": 7,
    "tests/integration/test_tail_rotation.py": 6,
    "tests/integration/test_tls_words.py": 9,
    "tests/integration/test_tmux.py": 9,
    "tests/integration/test_type_ahead_tmux.py": 5,
    "tests/integration/test_way_forward.py": 9,
    "tests/ui/test_app.py": 11,
    "tests/ui/test_dashboard_layout.py": 9,
    "tests/ui/test_demo_mission.py": 11,
    "tests/ui/test_header_flags.py": 11,
    "tests/ui/test_history_fit.py": 17,
    "tests/ui/test_history_screen.py": 12,
    "tests/ui/test_memory_map.py": 10,
    "tests/ui/test_narrow_text.py": 10,
    "tests/ui/test_operator_actions.py": 71,
    "tests/ui/test_plan_screen.py": 16,
    "tests/ui/test_plot_resolution.py": 6,
    "tests/ui/test_screen_leaks.py": 56,
    "tests/ui/test_snapshots.py": 10,
    "tests/ui/test_snapshots_narrow.py": 25,
    "tests/ui/test_table_cost.py": 7,
    "tests/ui/test_terminals.py": 6,
    "tests/ui/test_themes.py": 8,
    "tests/ui/test_type_ahead.py": 46,
    "tests/ui/test_write_safety.py": 17,
    "tests/unit/test_fuzz.py": 52,
    "tests/unit/test_inspect_log_stream.py": 11,
    "tests/unit/test_output_safety.py": 10,
    "tests/unit/test_replay_hostile.py": 10,
    "tests/unit/test_tail.py": 6,
}


WORKERS = 4
"""Worker processes (pytest-xdist) for a run of the whole suite or of folders (pyproject.toml's
``-n auto``): most tests wait on servers, Pilot or tmux, so 4 beat 2 even on 2 cores."""


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """:data:`WORKERS` for the whole suite or folders (``pytest``, ``pytest -m "not slow"``,
    ``pytest tests/ui``); none (one process) when the arguments name test files or tests, whose
    few tests would not pay for the workers' start-up. ``-n N`` on the command line overrides."""
    for arg in config.args:
        if "::" in arg or Path(arg).is_file():
            return 0
    return WORKERS


LLAMA_SERVER_NAMES = frozenset({"llama_server_binary", "run_llama_server", "require_llama_server"})
"""A test needs the real ``llama-server`` when its module or its function uses one of these
(tests/llama_fixture.py)."""


def needs_llama_server(item: pytest.Item) -> bool:
    """Whether ``item`` runs the real ``llama-server`` (:data:`LLAMA_SERVER_NAMES`)."""
    module = getattr(item, "module", None)
    names = set(vars(module)) if module is not None else set()
    code = getattr(getattr(item, "function", None), "__code__", None)
    if code is not None:
        names |= set(code.co_names) | set(code.co_varnames)
    return not names.isdisjoint(LLAMA_SERVER_NAMES)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test of a :data:`SLOW_FILES` file ``slow`` (no test file carries the marker
    itself); run the slow files first, longest first, and the tests that need ``llama-server``
    last: the README's install builds it in the background while the others run
    (tests/install_test_extras.py)."""
    slow = pytest.mark.slow
    seconds: dict[int, float] = {}
    for item in items:
        try:
            path = item.path.relative_to(config.rootpath).as_posix()
        except ValueError:  # a test outside the repository
            continue
        if path in SLOW_FILES:
            item.add_marker(slow)
            seconds[id(item)] = SLOW_FILES[path]
    # the llama-server tests last; before them the slow files, longest first; then the rest
    # (sorted() keeps the order of equals: a file's tests stay in their order)
    items.sort(key=lambda item: (needs_llama_server(item), -seconds.get(id(item), 0.0)))
    for item in items:
        if needs_llama_server(item):
            # one worker runs them all, one after another (--dist loadgroup): two of their runners
            # at once would share a blob (the same tiny model) and a test that finds its runner
            # in the process table by its blob found two (seen in a parallel run)
            item.add_marker(pytest.mark.xdist_group("llama-server"))


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """A test that needs ``llama-server`` waits here, before its timeout starts, while the
    background build runs; the test then fails with the build's log if the build failed."""
    if needs_llama_server(item):
        install_test_extras.wait_for_build()
    yield


def pytest_report_header(config: pytest.Config) -> str | None:
    state = install_test_extras.build_state()
    if state == "running":
        log = install_test_extras.build_dir() / "log"
        return f"llama-server: building in the background ({log}); the tests that need it run last and wait for it"
    if state == "failed":
        return f"llama-server: the background build FAILED ({install_test_extras.build_dir() / 'log'})"
    return None


@pytest.fixture(autouse=True)
def _isolate(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Never read the developer's config or talk to their Ollama by accident."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    monkeypatch.delenv("NO_COLOR", raising=False)


def load_json(relative: str) -> Any:
    """A JSON fixture under tests/fixtures/."""
    return json.loads((FIXTURES / relative).read_text(encoding="utf-8"))
