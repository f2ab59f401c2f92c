"""`kvtop --once` / `--once --json` as real processes against the stand-in server."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from typing import Any

from tests.standin import BUNDLED, REPO, running


def kvtop(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvtop", *args], capture_output=True, text=True, timeout=timeout, cwd=str(REPO)
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


MODEL_KEYS = {
    "name",
    "digest",
    "size",
    "size_vram",
    "processor",
    "context_length",
    "parallel",
    "kv_type",
    "flash_attention",
    "memory",
    "kv_bytes_per_token",
    "expires_at",
}


def test_once_json_schema_against_standin() -> None:
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        server.goto(4)
        proc = kvtop("--once", "--json", "--host", server.url)
    assert proc.returncode == 0, proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout)
    assert {"host", "reachable", "error", "version", "models", "gpus", "gpu_status", "alerts"} <= set(doc)
    assert doc["host"] == server.url and doc["reachable"] is True and doc["error"] is None
    assert (
        doc["version"] == "0.22.1" and isinstance(doc["gpus"], list) and [a["kind"] for a in doc["alerts"]] == ["spill"]
    )
    assert doc["gpu_status"].startswith("GPU telemetry: ")
    models = {m["name"]: m for m in doc["models"]}
    assert set(models) == {"qwen3:1.7b-q4_K_M", "gemma4:latest", "qwen3:1.7b-q8_0"}
    for m in doc["models"]:
        assert set(m) >= MODEL_KEYS
        assert {"weights", "kv", "compute", "source"} <= set(m["memory"])
    q8 = models["qwen3:1.7b-q8_0"]
    assert q8["size"] == 6_106_141_568 and q8["size_vram"] == 6_106_141_568
    assert q8["processor"] == "100% GPU" and q8["context_length"] == 32768 and q8["parallel"] == 1
    assert q8["kv_bytes_per_token"] == 114_688
    assert q8["memory"] == {
        "weights": 2_200_000_000,
        "kv": 3_758_096_384,
        "compute": 148_045_184,
        "source": "estimated",
    }
    assert q8["kv_type"] == "f16" and q8["flash_attention"] is None
    g = models["gemma4:latest"]
    assert g["processor"] == "19%/81% CPU/GPU" and g["memory"]["weights"] is None


def test_once_text_against_standin() -> None:
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        server.goto(1)
        proc = kvtop("--once", "--host", server.url)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].endswith("Ollama 0.22.1 — 1 model loaded")
    assert lines[1].split() == [
        "NAME",
        "ID",
        "SIZE",
        "WEIGHTS",
        "KV",
        "COMPUTE",
        "CONTEXT",
        "PROCESSOR",
        "FLASH",
        "ATTN",
        "KV",
        "TYPE",
        "UNTIL",
    ]  # the dashboard's order
    row = lines[2].split()
    assert row[:4] == ["qwen3:1.7b-q8_0", "b4c0dd6fbac8", "2.6", "GiB"] and "4096×1*  100% GPU" in lines[2]
    assert "~448 MiB" in lines[2] and "4096×1*" in lines[2]


def test_once_unreachable_exits_2() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    proc = kvtop("--once", "--json", "--host", url)
    assert proc.returncode == 2
    doc = json.loads(proc.stdout)
    assert doc["reachable"] is False and doc["models"] == []
    assert doc["error"] == f"connection refused ({url})"
    text = kvtop("--once", "--host", url)
    assert text.returncode == 2 and "unreachable: connection refused" in text.stderr


def test_ollama_host_environment_is_honoured() -> None:
    port = free_port()
    proc = subprocess.run(
        [sys.executable, "-m", "kvtop", "--once", "--json"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=str(REPO),
        env={**__import__("os").environ, "OLLAMA_HOST": f"0.0.0.0:{port}"},
    )
    assert json.loads(proc.stdout)["host"] == f"http://127.0.0.1:{port}"


def test_bad_arguments_exit_2_with_a_message() -> None:
    proc = kvtop("--json")
    assert proc.returncode == 2 and "--json needs --once" in proc.stderr
    proc = kvtop("--interval", "0")
    assert proc.returncode == 2 and "--interval must be a positive" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_demo_once_starts_and_stops_the_embedded_server() -> None:
    proc = kvtop("--demo", "--once", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["reachable"] is True and doc["version"] == "0.22.1"
    assert doc["host"].startswith("http://127.0.0.1:")


def test_invalid_host_is_a_clear_error() -> None:
    for host, message in [
        ("localhost:99999", "invalid port '99999'"),
        ("ftp://x", "unsupported scheme 'ftp'"),
        ("::1:40155", "cannot use '::1:40155' as a server address"),
    ]:
        proc = kvtop("--once", "--host", host)
        assert proc.returncode == 2, proc.stderr
        assert message in proc.stderr and "Traceback" not in proc.stderr


def test_demo_once_shows_the_busiest_step() -> None:
    proc = kvtop("--demo", "--once")
    assert proc.returncode == 0, proc.stderr
    assert "3 models loaded" in proc.stdout.splitlines()[0]
    assert "19%/81% CPU/GPU" in proc.stdout


def test_demo_and_host_conflict() -> None:
    proc = kvtop("--demo", "--host", "127.0.0.1:1")
    assert proc.returncode == 2 and "--demo watches its own stand-in server" in proc.stderr


def test_check_exit_codes_and_alerts() -> None:
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        server.goto(1)  # one model, 100% GPU: no alert
        proc = kvtop("--check", "--host", server.url)
        assert proc.returncode == 0 and "no alerts" in proc.stdout, proc.stdout + proc.stderr
        server.goto(4)  # gemma4 spills: critical
        proc = kvtop("--check", "--json", "--host", server.url)
        assert proc.returncode == 2, proc.stderr
        alert = json.loads(proc.stdout)["alerts"][0]
        assert alert["kind"] == "spill" and alert["severity"] == "critical" and alert["model"] == "gemma4:latest"
        assert "19% of 6.1 GiB in system RAM" in alert["message"] and alert["fixes"]
    proc = kvtop("--check", "--host", f"http://127.0.0.1:{free_port()}")
    assert proc.returncode == 2 and "unreachable" in proc.stdout


def _documented_server_example() -> dict[str, Any]:
    text = (REPO / "docs" / "json.md").read_text(encoding="utf-8")
    section = text[text.index("### `server`") :]
    block = section[section.index("```json") + len("```json") :]
    block = block[: block.index("```")]
    return json.loads("{" + block.strip() + "}")["server"]


def _key_paths(doc: Any, other: Any, path: str = "") -> tuple[set[str], set[str]]:
    """Keys present on one side only, wherever both sides have an object (free-form maps skipped)."""
    only_doc: set[str] = set()
    only_other: set[str] = set()
    if isinstance(doc, dict) and isinstance(other, dict):
        if path == "health.settings.":  # the server's environment: any OLLAMA_* names
            return only_doc, only_other
        only_doc |= {path + k for k in set(doc) - set(other)}
        only_other |= {path + k for k in set(other) - set(doc)}
        for k in set(doc) & set(other):
            a, b = _key_paths(doc[k], other[k], f"{path}{k}.")
            only_doc |= a
            only_other |= b
    elif isinstance(doc, list) and isinstance(other, list) and doc and other:
        for item in other:
            a, b = _key_paths(doc[0], item, f"{path}[].")
            only_doc |= a
            only_other |= b
    return only_doc, only_other


def test_once_json_server_section_matches_docs_json_md() -> None:
    """Every key docs/json.md shows in the ``server`` section is emitted, and every emitted key is
    documented: a real ``--once --json`` with real access lines and a loaded model's pre-flight."""
    log = REPO / "tests" / "fixtures" / "gin" / "access-corpus.log"
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        server.goto(4)
        proc = kvtop("--once", "--json", "--host", server.url, "--log", f"file:{log}")
    assert proc.returncode == 0, proc.stderr
    emitted = json.loads(proc.stdout)["server"]
    assert emitted["traffic"]["requests"] > 0 and emitted["traffic"]["endpoints"] and emitted["preflight"]
    assert any(row["calibration"] for row in emitted["preflight"])  # a loaded model: its real figures
    documented = _documented_server_example()
    only_doc, only_emitted = _key_paths(documented, emitted)
    assert only_emitted == set(), "emitted but not in docs/json.md"
    assert only_doc == set(), "in docs/json.md but not emitted"
