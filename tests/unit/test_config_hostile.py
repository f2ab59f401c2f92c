"""Hostile or careless config, state and theme files: reported in words, never a traceback.

A deeply nested TOML file made ``tomllib`` raise RecursionError and kvtop exit with a traceback;
the README promises "a file that does not parse is reported with its line and ignored".
A mistyped ``alerts = 5`` was dropped without a word. Each case runs the real CLI as a
subprocess on real files where the promise is about what the user sees.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from kvtop.config import resolve_config
from kvtop.config.files import MAX_TOML_NESTING, read_config_file, toml_loads
from kvtop.config.ui_state import saved_theme
from kvtop.ui.themes import load_themes_reporting

REPO = Path(__file__).resolve().parents[2]

DEEP_ARRAY = "interval = 2\n\nhost = " + "[" * 50_000 + "]" * 50_000 + "\n"
DEEP_TABLE = "interval = 2\n# a comment [[[[\nx = " + "{a = " * 2_000 + "1" + "}" * 2_000 + "\n"


def _kvtop(args: list[str], tmp_path: Path, env_extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OLLAMA_HOST", "NO_COLOR") and not k.startswith("KVTOP_")}
    env.update(
        {
            "XDG_CONFIG_HOME": str(tmp_path / "config"),
            "XDG_STATE_HOME": str(tmp_path / "state"),
            "NO_PROXY": "*",
            "PYTHONIOENCODING": "utf-8",
        }
    )
    env.update(env_extra)
    return subprocess.run(
        [sys.executable, "-m", "kvtop", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        cwd=REPO,
        check=False,
    )


def test_the_attack_is_real_for_plain_tomllib() -> None:
    with pytest.raises(RecursionError):
        tomllib.loads(DEEP_ARRAY)


@pytest.mark.parametrize(("text", "line"), [(DEEP_ARRAY, 3), (DEEP_TABLE, 3)])
def test_deep_nesting_is_a_decode_error_naming_the_line(text: str, line: int) -> None:
    with pytest.raises(tomllib.TOMLDecodeError, match=rf"nested more than {MAX_TOML_NESTING} deep \(at line {line}\)"):
        toml_loads(text)


def test_brackets_in_strings_and_comments_are_not_nesting() -> None:
    text = (
        's = "' + "[" * 100 + '"\n'
        "t = '" + "{" * 100 + "'\n"
        'u = """\n' + "[" * 100 + '\n"""\n'
        "# " + "[" * 100 + "\n"
        "[alerts]\n[[arr]]\nx = [[1, [2]], {a = [3]}]\n"
    )
    data = toml_loads(text)
    assert data["s"] == "[" * 100 and data["t"] == "{" * 100 and data["u"] == "[" * 100 + "\n"
    assert data["arr"] == [{"x": [[1, [2]], {"a": [3]}]}]


def test_nesting_at_the_limit_still_parses() -> None:
    ok = "x = " + "[" * MAX_TOML_NESTING + "]" * MAX_TOML_NESTING
    assert toml_loads(ok)["x"] is not None
    with pytest.raises(tomllib.TOMLDecodeError, match="at line 1"):
        toml_loads("x = " + "[" * (MAX_TOML_NESTING + 1) + "]" * (MAX_TOML_NESTING + 1))


def test_read_config_file_reports_and_ignores_a_deep_file(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(DEEP_ARRAY, encoding="utf-8")
    values, warnings = read_config_file(path)
    assert values == {}  # the whole file is ignored, interval = 2 included
    assert len(warnings) == 1
    assert str(path) in warnings[0] and "at line 3" in warnings[0] and "ignored" in warnings[0]


@pytest.mark.parametrize("args", [["--print-config"], ["--check", "--host", "http://127.0.0.1:9", "--log", "none"]])
@pytest.mark.parametrize("text", [DEEP_ARRAY, DEEP_TABLE], ids=["array", "table"])
def test_cli_with_a_deep_config_reports_it_without_a_traceback(tmp_path: Path, args: list[str], text: str) -> None:
    cfg = tmp_path / "deep.toml"
    cfg.write_text(text, encoding="utf-8")
    proc = _kvtop(args, tmp_path, {"KVTOP_CONFIG": str(cfg)})
    assert "Traceback" not in proc.stderr and "RecursionError" not in proc.stderr + proc.stdout
    both = proc.stdout + proc.stderr
    assert "deep.toml" in both and "at line 3" in both and "the file is ignored" in both
    if args == ["--print-config"]:
        assert proc.returncode == 0
        assert "interval  1.0" in proc.stdout  # the default: the file's interval = 2 was not used
    else:
        assert proc.returncode == 2  # unreachable server: the check itself ran


def test_config_that_never_ends_is_not_read_to_the_end(tmp_path: Path) -> None:
    proc = _kvtop(["--print-config"], tmp_path, {"KVTOP_CONFIG": "/dev/zero"})
    assert proc.returncode == 0, proc.stderr
    assert "warning: /dev/zero: larger than the 1,048,576 bytes read" in proc.stdout


def test_deep_state_file_gives_no_saved_theme(tmp_path: Path) -> None:
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    (tmp_path / "state" / "kvtop").mkdir(parents=True)
    (tmp_path / "state" / "kvtop" / "state.toml").write_text(
        'theme = "kvtop-light"\nx = ' + "[" * 5000, encoding="utf-8"
    )
    assert saved_theme(env) is None


def test_deep_theme_file_is_reported_and_the_others_load(tmp_path: Path) -> None:
    (tmp_path / "deep.toml").write_text(
        'name = "deep"\n[colors]\nprimary = "#ff0000"\nx = ' + "[" * 5000 + "]" * 5000, encoding="utf-8"
    )
    (tmp_path / "fine.toml").write_text('name = "fine"\n[colors]\nprimary = "#00ff00"\n', encoding="utf-8")
    themes, problems = load_themes_reporting(tmp_path)
    assert "fine" in themes and "deep" not in themes and "kvtop-dark" in themes
    assert len(problems) == 1 and "deep.toml" in problems[0] and "at line 4" in problems[0]


# --------------------------------------------------------------------------------------------
# Item 11a: unknown and mistyped keys


def test_alerts_that_is_not_a_table_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("alerts = 5\n", encoding="utf-8")
    values, warnings = read_config_file(path)
    assert "alerts" not in values
    assert warnings == [
        f"{path}: alerts = 5: must be a table ([alerts] with one threshold a line)"
        " — ignored, the default thresholds are used"
    ]
    resolved = resolve_config({}, {"KVTOP_CONFIG": str(path)})
    assert resolved.values["alerts"] == {}
    assert resolved.warnings == tuple(warnings)


def test_print_config_shows_every_unknown_or_mistyped_key(tmp_path: Path) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text('intervall = 2\nalerts = "high"\ntheme = 5\n[alert]\nx = 1\n', encoding="utf-8")
    proc = _kvtop(["--print-config"], tmp_path, {"KVTOP_CONFIG": str(cfg)})
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stdout.splitlines() if line.startswith("warning: ")]
    assert any("unknown key 'intervall' ignored" in w for w in warnings), warnings
    assert any("unknown key 'alert' ignored" in w for w in warnings), warnings
    assert any("alerts = 'high': must be a table" in w for w in warnings), warnings
    assert any("theme from" in w and "must be a string" in w for w in warnings), warnings
    assert len(warnings) == 4, warnings


def test_print_config_shows_unknown_alert_thresholds(tmp_path: Path) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text('[alerts]\ngpu_headrom = "1GiB"\nchurn_reloads = "many"\n', encoding="utf-8")
    proc = _kvtop(["--print-config"], tmp_path, {"KVTOP_CONFIG": str(cfg)})
    assert proc.returncode == 0, proc.stderr
    assert "warning: [alerts] unknown key 'gpu_headrom' ignored" in proc.stdout
    assert "warning: [alerts] churn_reloads = 'many'" in proc.stdout


def test_check_prints_alert_warnings_once_with_one_prefix(tmp_path: Path) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text('[alerts]\ngpu_headrom = "1GiB"\n', encoding="utf-8")
    proc = _kvtop(["--check", "--host", "http://127.0.0.1:9", "--log", "none"], tmp_path, {"KVTOP_CONFIG": str(cfg)})
    lines = [line for line in proc.stderr.splitlines() if "gpu_headrom" in line]
    assert len(lines) == 1 and lines[0].startswith("kvtop: [alerts] unknown key 'gpu_headrom'"), proc.stderr
