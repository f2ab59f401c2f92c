"""config.toml, KVTOP_* variables and flags: precedence, errors, --print-config."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kvtop.config import resolve_config
from kvtop.config.files import ConfigError, config_path, read_config_file
from kvtop.config.ui_state import save_theme, saved_theme

REPO = Path(__file__).resolve().parents[2]


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"XDG_CONFIG_HOME": str(tmp_path / "cfg"), "XDG_STATE_HOME": str(tmp_path / "state"), **extra}


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cfg" / "kvtop" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("flag", "env", "file", "value", "origin"),
    [
        (None, None, None, 1.0, "default"),
        (None, None, "interval = 5", 5.0, "file"),
        (None, "7", "interval = 5", 7.0, "env KVTOP_INTERVAL"),
        (2.0, "7", "interval = 5", 2.0, "flag"),
        (None, None, "interval = 500", 60.0, "file"),  # clamped to 0.25–60
    ],
)
def test_precedence_flag_env_file_default(
    tmp_path: Path, flag: float | None, env: str | None, file: str | None, value: float, origin: str
) -> None:
    if file:
        _write(tmp_path, file)
    e = _env(tmp_path, **({"KVTOP_INTERVAL": env} if env else {}))
    r = resolve_config({"interval": flag}, e)
    assert r.values["interval"] == value
    assert r.origins["interval"].startswith(origin)


def test_theme_precedence_includes_saved_choice_and_no_color(tmp_path: Path) -> None:
    e = _env(tmp_path)
    assert resolve_config({}, e).values["theme"] == "kvtop-dark"
    assert resolve_config({}, {**e, "NO_COLOR": "1"}).values["theme"] == "kvtop-mono"
    assert save_theme("kvtop-light", e) is None and saved_theme(e) == "kvtop-light"
    r = resolve_config({}, {**e, "NO_COLOR": "1"}, saved_theme=saved_theme(e))
    assert r.values["theme"] == "kvtop-light" and r.origins["theme"].startswith("saved choice")
    assert (
        resolve_config({"theme": "kvtop-high-contrast"}, e, saved_theme="kvtop-light").values["theme"]
        == "kvtop-high-contrast"
    )


def test_broken_file_names_the_line_and_defaults_are_used(tmp_path: Path) -> None:
    path = _write(tmp_path, 'interval = 5\ntheme = "kvtop-light\nreadonly = true\n')
    values, warnings = read_config_file(path)
    assert values == {} and len(warnings) == 1
    assert str(path) in warnings[0] and "line 2" in warnings[0]
    r = resolve_config({}, _env(tmp_path))
    assert r.values["interval"] == 1.0 and r.warnings == tuple(warnings)


def test_unknown_key_and_bad_value_are_warnings(tmp_path: Path) -> None:
    _write(tmp_path, 'colour = "red"\ninterval = "fast"\nreadonly = true\n[alerts]\nforeign_vram_bytes = 1000\n')
    r = resolve_config({}, _env(tmp_path))
    assert r.values["readonly"] is True and r.values["interval"] == 1.0
    assert r.values["alerts"] == {"foreign_vram_bytes": 1000}
    assert any("unknown key 'colour'" in w for w in r.warnings)
    assert any("interval from" in w and "'fast'" in w for w in r.warnings)


def test_bad_environment_value_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="KVTOP_READONLY"):
        resolve_config({}, _env(tmp_path, KVTOP_READONLY="maybe"))


def test_kvtop_config_points_elsewhere(tmp_path: Path) -> None:
    other = tmp_path / "elsewhere.toml"
    other.write_text('log = "none"\n')
    e = _env(tmp_path, KVTOP_CONFIG=str(other))
    assert config_path(e) == other
    assert resolve_config({}, e).values["log"] == "none"


def test_print_config_cli(tmp_path: Path) -> None:
    _write(tmp_path, 'interval = 5\nlog = "none"\n')
    env = {"PATH": "/usr/bin:/bin", **_env(tmp_path), "OLLAMA_HOST": "gpu-box:1234"}
    proc = subprocess.run(
        [sys.executable, "-m", "kvtop", "--print-config", "--theme", "kvtop-mono"],
        capture_output=True,
        text=True,
        cwd=str(REPO),
        env=env,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    lines = {line.split()[0]: line for line in proc.stdout.splitlines()[1:]}
    assert "http://gpu-box:1234" in lines["host"] and lines["host"].endswith("env OLLAMA_HOST")
    assert "5.0" in lines["interval"] and "file " in lines["interval"]
    assert lines["theme"].split()[1] == "kvtop-mono" and lines["theme"].endswith("flag")
    assert lines["timeout"].endswith("default")
