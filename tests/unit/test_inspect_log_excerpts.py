"""``kvtop inspect-log`` on files that are not a server log, and on excerpts that miss devices,
with real corpus files (``tests/fixtures``, copied from the corpus).

* A file without one Ollama server log line (a real ``/api/ps`` answer, real ``ollama ps``
  output, this README) says so, says where the server log usually is, and exits 1 (``--json``
  still prints the empty document).
* A KV total that includes devices whose KV lines are not in the excerpt (corpus 045: a 39040 MiB
  total, one CPU line of 31360 MiB, three CUDA devices in the compute lines) says how much is on
  them; a total that is the CPU's only while layers are on a GPU (corpus 032) says the GPU's KV
  line is missing; a complete split (corpus 056) has no such note.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvtop.inspect_log import EXIT_NOT_A_LOG, main_inspect_log

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
REPO = Path(__file__).resolve().parents[2]
LOGS = FIXTURES / "logs"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvtop", "inspect-log", *args], capture_output=True, text=True, timeout=60, cwd=str(REPO)
    )


def log(prefix: str) -> Path:
    (path,) = LOGS.glob(f"{prefix}-*.log")
    return path


@pytest.mark.parametrize(
    "path",
    [
        FIXTURES / "api" / "001-api-ps-gemma3-full-gpu.json",
        FIXTURES / "api" / "003-ollama-ps-llama4-cpu-gpu-split-forever.txt",
        REPO / "README.md",
    ],
)
def test_a_file_without_an_ollama_line_says_so_and_exits_1(path: Path) -> None:
    proc = run(str(path))
    assert proc.returncode == EXIT_NOT_A_LOG == 1
    assert proc.stdout == ""
    assert "no Ollama server log line" in proc.stderr and "journalctl -u ollama" in proc.stderr
    assert "~/.ollama/logs/server.log" in proc.stderr
    as_json = run(str(path), "--json")
    assert as_json.returncode == 1
    assert json.loads(as_json.stdout) == {"server": {}, "loads": [], "events": []}


def test_an_empty_stdin_is_not_a_log(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import io

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"")))
    assert main_inspect_log(["-"]) == 1
    assert "<stdin>: no Ollama server log line in its 0 line(s)" in capsys.readouterr().err


def test_one_real_line_is_enough() -> None:
    text = log("031").read_text(encoding="utf-8")  # one cut WARN line: the OOM
    proc = subprocess.run(
        [sys.executable, "-m", "kvtop", "inspect-log", "-"],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(REPO),
    )
    assert proc.returncode == 0, proc.stderr
    assert "oom" in proc.stdout


def kv_total_line(prefix: str) -> str:
    proc = run(str(log(prefix)))
    assert proc.returncode == 0, proc.stderr
    (line,) = [x for x in proc.stdout.splitlines() if x.strip().startswith("KV total")]
    return line


def test_kv_total_with_devices_missing_from_the_excerpt_says_how_much() -> None:
    line = kv_total_line("045")
    assert "38.1 GiB" in line and "40,936,407,040 B" in line
    assert "includes 7.5 GiB on devices whose KV lines are not in this excerpt" in line
    assert "the KV lines here (CPU) add up to 30.6 GiB" in line
    assert "this load also used CUDA0, CUDA1, CUDA2" in line


def test_kv_total_of_the_cpu_only_while_layers_are_on_the_gpu_says_so() -> None:
    line = kv_total_line("032")
    assert "112 MiB" in line and "counts CPU only" in line and "29/37 layers are on the GPU" in line
    assert "missing from the excerpt" in line


@pytest.mark.parametrize("prefix", ["056", "002", "035"])
def test_kv_total_that_the_lines_account_for_has_no_note(prefix: str) -> None:
    line = kv_total_line(prefix)
    assert "excerpt" not in line and "includes" not in line


def load_objects(prefix: str) -> list[dict]:
    proc = run(str(log(prefix)), "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["loads"]


def test_json_carries_the_unlisted_kv_bytes_of_an_excerpt() -> None:
    (load,) = [x for x in load_objects("045") if "kv_coverage" in x]
    cover = load["kv_coverage"]
    assert load["kv_bytes"] == 40_936_407_040
    assert cover["listed_devices"] == ["CPU"] and cover["listed_bytes"] == 31360 * 1024 * 1024
    assert cover["unlisted_bytes"] == 40_936_407_040 - 31360 * 1024 * 1024
    assert cover["other_devices"] == ["CUDA0", "CUDA1", "CUDA2"] and cover["gpu_kv_line_missing"] is False


def test_json_says_the_gpu_kv_line_is_missing() -> None:
    (load,) = [x for x in load_objects("032") if "kv_coverage" in x]
    assert load["kv_coverage"]["gpu_kv_line_missing"] is True
    assert load["kv_coverage"]["unlisted_bytes"] == 0 and load["kv_coverage"]["listed_devices"] == ["CPU"]


@pytest.mark.parametrize("prefix", ["056", "002", "035"])
def test_json_has_no_coverage_note_when_the_lines_account_for_the_total(prefix: str) -> None:
    assert all("kv_coverage" not in x for x in load_objects(prefix))
