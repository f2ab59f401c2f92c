"""``kvtop --check`` / ``--once`` read the server log's newest lines: real processes, real files.

The log files hold real corpus lines (tests/fixtures/logs 015: four ``truncating input prompt``
warnings in a journald export; 005: a CUDA out-of-memory and the GGML_ASSERT after it) with their
timestamps moved to a minute ago, since event alerts count only within 15 minutes of the sample.
The server is the stand-in playing the bundled catalog with one step: qwen3:1.7b-q8_0 at num_ctx
512, 100% on the GPU (no state alert), the context corpus 015's prompts were cut to.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from tests.integration.test_cli import free_port
from tests.standin import BUNDLED, REPO, running

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


def restamped(stem: str, seconds_ago: float = 60.0) -> list[str]:
    """Corpus ``stem``'s lines with every timestamp set to ``seconds_ago`` before now: the journald
    prefix (``Jun 11 08:07:59``, local time) and slog's ``time=`` (written in UTC)."""
    (path,) = LOGS.glob(f"{stem}-*.log")
    when = time.time() - seconds_ago
    local = datetime.fromtimestamp(when).strftime("%b %d %H:%M:%S")
    utc = datetime.fromtimestamp(when, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = re.sub(r"^[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d ", local + " ", line)
        out.append(re.sub(r"\btime=\S+", f"time={utc}", line))
    return out


def one_model_at_512(tmp_path: Path) -> list[str]:
    """Stand-in arguments: the bundled catalog, one step with qwen3:1.7b-q8_0 at num_ctx 512."""
    data = json.loads(BUNDLED.read_text(encoding="utf-8"))
    data["steps"] = [
        {
            "at_s": 0,
            "label": "q8 at 512",
            "loaded": [
                {
                    "model": "qwen3:1.7b-q8_0",
                    "context_length": 512,
                    "size": 2_300_000_000,
                    "size_vram": 2_300_000_000,
                    "expires_in_s": 300,
                }
            ],
        }
    ]
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return ["--manual", "--scenario", str(path)]


def kvtop(*args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvtop", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=str(REPO),
        env=env,
        input=stdin,
    )


def write_log(tmp_path: Path, *stems: str) -> Path:
    log = tmp_path / "server.log"
    log.write_text("".join(line + "\n" for stem in stems for line in restamped(stem)), encoding="utf-8")
    return log


def test_check_counts_a_truncation_from_the_log(tmp_path: Path) -> None:
    log = write_log(tmp_path, "015")
    with running(one_model_at_512(tmp_path)) as server:
        plain = kvtop("--check", "--log", "none", "--host", server.url)
        assert plain.returncode == 0 and plain.stdout == "kvtop: no alerts\n", plain.stdout + plain.stderr
        text = kvtop("--check", "--log", f"file:{log}", "--host", server.url)
        doc_proc = kvtop("--check", "--json", "--log", f"file:{log}", "--host", server.url)
    assert text.returncode == 1, text.stdout + text.stderr
    assert "4 prompts truncated in the last 15 min (latest: a 587-token prompt cut to 512" in text.stdout
    assert text.stderr == f"kvtop: server log file:{log}: read its newest 7 lines\n"
    assert doc_proc.returncode == 1
    doc = json.loads(doc_proc.stdout)  # stdout is the JSON alone: what was read went to stderr
    assert [a["kind"] for a in doc["alerts"]] == ["prompt_truncated"]
    alert = doc["alerts"][0]
    assert alert["severity"] == "warning" and alert["model"] == "qwen3:1.7b-q8_0"  # the only model loaded
    assert [f["action"] for f in alert["fixes"]] == ["num_ctx 1024"]  # the longest prompt (617) → a power of two
    assert doc["log"] == {"source": f"file:{log}", "lines": 7, "ok": True, "status": None}


def test_check_exits_2_for_an_out_of_memory(tmp_path: Path) -> None:
    log = write_log(tmp_path, "005")
    with running(one_model_at_512(tmp_path)) as server:
        proc = kvtop("--check", "--json", "--log", f"file:{log}", "--host", server.url)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert [(a["kind"], a["severity"]) for a in doc["alerts"]] == [("oom", "critical"), ("runner_crash", "critical")]
    assert "CUDA error: out of memory" in doc["alerts"][0]["message"]


def test_a_journald_only_log_is_dated_in_the_current_year(tmp_path: Path) -> None:
    """A journald short stamp carries no year; with no slog line to learn it from, the year is
    the current one (the log is read now), so a fresh OOM line still counts."""
    oom = [line for line in restamped("005") if line.endswith("CUDA error: out of memory")]
    assert len(oom) == 1 and re.match(r"[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d host ollama\[114917\]: ", oom[0])
    log = tmp_path / "journal.log"
    log.write_text(oom[0] + "\n", encoding="utf-8")
    with running(one_model_at_512(tmp_path)) as server:
        proc = kvtop("--check", "--log", f"file:{log}", "--host", server.url)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout.startswith(
        "ALERT critical oom: 1 out-of-memory incident in the last 15 min: CUDA error: out of memory"
    )


def test_an_old_log_raises_nothing(tmp_path: Path) -> None:
    (path,) = LOGS.glob("015-*.log")  # the real stamps: June 2025, far outside the 15 min window
    with running(one_model_at_512(tmp_path)) as server:
        proc = kvtop("--check", "--log", f"file:{path}", "--host", server.url)
    assert proc.returncode == 0 and proc.stdout == "kvtop: no alerts\n", proc.stdout + proc.stderr


def test_once_reads_the_log_it_is_given(tmp_path: Path) -> None:
    log = write_log(tmp_path, "015")
    with running(one_model_at_512(tmp_path)) as server:
        proc = kvtop("--once", "--json", "--log", f"file:{log}", "--host", server.url)
        default = kvtop("--once", "--json", "--host", server.url)  # --once alone reads no log
    assert proc.returncode == 0, proc.stderr
    assert [a["kind"] for a in json.loads(proc.stdout)["alerts"]] == ["prompt_truncated"]
    assert "--once/--check read no server log" not in proc.stderr
    assert json.loads(default.stdout)["alerts"] == [] and "server log" not in default.stderr


def test_check_reads_stdin(tmp_path: Path) -> None:
    lines = "".join(line + "\n" for line in restamped("005"))
    with running(one_model_at_512(tmp_path)) as server:
        proc = kvtop("--check", "--log", "-", "--host", server.url, stdin=lines)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "out-of-memory incident" in proc.stdout
    assert proc.stderr == f"kvtop: server log stdin: read its newest {len(restamped('005'))} lines\n"


def _isolated_env(home: Path) -> dict[str, str]:
    """No journalctl or docker on PATH, HOME in tmp: ``auto`` can only find ``~/.ollama/logs/server.log``."""
    bare = home / "bin"
    bare.mkdir(exist_ok=True)
    return {**os.environ, "HOME": str(home), "PATH": str(bare)}


def test_check_with_auto_reads_the_log_it_finds(tmp_path: Path) -> None:
    logs = tmp_path / ".ollama" / "logs"
    logs.mkdir(parents=True)
    (logs / "server.log").write_text("".join(line + "\n" for line in restamped("015")), encoding="utf-8")
    env = _isolated_env(tmp_path)
    with running(one_model_at_512(tmp_path)) as server:
        proc = kvtop("--check", "--host", server.url, env=env)  # --log auto is --check's default
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "prompts truncated" in proc.stdout
    assert proc.stderr == f"kvtop: server log file:{logs / 'server.log'}: read its newest 7 lines\n"


def test_check_with_auto_and_no_log_is_unchanged(tmp_path: Path) -> None:
    env = _isolated_env(tmp_path)
    with running(one_model_at_512(tmp_path)) as server:
        proc = kvtop("--check", "--json", "--host", server.url, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["alerts"] == []
    assert proc.stderr.startswith("kvtop: server log auto: no Ollama server log found (tried: ")


def test_a_named_log_that_cannot_be_read_is_a_warning(tmp_path: Path) -> None:
    missing = tmp_path / "nope.log"
    with running(one_model_at_512(tmp_path)) as server:
        proc = kvtop("--check", "--log", f"file:{missing}", "--host", server.url)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"server log file:{missing}: {missing} not found" in proc.stdout  # the log_source_lost alert
    assert proc.stderr == f"kvtop: server log file:{missing}: {missing} not found\n"
    unreachable = kvtop("--check", "--log", f"file:{missing}", "--host", f"http://127.0.0.1:{free_port()}")
    assert unreachable.returncode == 2
