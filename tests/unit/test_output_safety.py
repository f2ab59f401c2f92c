"""No terminal escape from a server, a log, a file or the environment reaches kvtop's output.

A hostile server answered ``--check`` with an error body carrying an OSC 52
clipboard write and a CSI 2J clear-screen, and both reached the terminal. Here the real CLI runs
as a subprocess against a real HTTP server on 127.0.0.1 that puts escape sequences (C0 and
C1 controls, bidi overrides) into its error bodies and into ``/api/show`` fields, and every byte
of stdout and stderr is checked: no control character but newline and tab. JSON may carry
the text with every control and format character replaced by U+FFFD — not escaped: ``jq -r``
would turn ``\\u001b`` back into a raw ESC — in every string and key at any depth.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import unicodedata
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from kvtop.textsafe import safe, safe_block
from tests.unit.test_redact import assert_no_control

REPO = Path(__file__).resolve().parents[2]

OSC52 = "\x1b]52;c;SGFja2Vk\x07"
"""An OSC 52 clipboard write ("Hacked")."""
CLEAR = "\x1b[2J\x1b[H"
C1_CSI = "\x9b31m"
"""The 8-bit CSI (U+009B), which some terminals honour like ``ESC [``."""
BIDI = "\u202e"
HOSTILE = f"{OSC52}boom{CLEAR}{C1_CSI}{BIDI}\r\x00x"

DIGEST = "a2af6cc3eb7fa8be8504abaf9b04e88f17a119ec3f04a3addf55f92841195f5a"


def _bad_chars(text: str) -> list[str]:
    """Every character a terminal could act on: C0/C1 controls (but newline and tab), DEL, format characters."""
    return [repr(ch) for ch in text if ch not in "\n\t" and unicodedata.category(ch) in ("Cc", "Cf")]


def assert_clean(data: bytes, what: str) -> str:
    assert b"\x1b" not in data, f"{what}: raw ESC in {data[:400]!r}"
    assert b"\x9b" not in data.replace("\u009b".encode(), b""), what  # only the UTF-8 form could exist
    text = data.decode("utf-8", "replace")
    assert _bad_chars(text) == [], f"{what}: {text[:600]!r}"
    return text


class _Hostile(BaseHTTPRequestHandler):
    mode = "error"  # "error": every API call fails with HOSTILE in its error body; "show": /api/show carries it

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        pass

    def _send(self, status: int, obj: Any) -> None:
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        self._answer()

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self._answer()

    def _answer(self) -> None:
        if self.mode == "error":
            self._send(500, {"error": HOSTILE})
            return
        path = self.path
        if path == "/api/version":
            self._send(200, {"version": "0.12.0" + HOSTILE})
        elif path == "/api/ps":
            self._send(
                200,
                {
                    "models": [
                        {
                            "name": "gem" + HOSTILE + ":latest",
                            "model": "gem:latest",
                            "size": 5964735424,
                            "digest": DIGEST,
                            "size_vram": 5964735424,
                            "context_length": 4096,
                            "expires_at": "2025-08-08T00:07:26.817827822+02:00",
                            "details": {
                                "format": "gguf",
                                "family": "x" + HOSTILE,
                                "families": ["x" + HOSTILE],
                                "parameter_size": "4.3B" + HOSTILE,
                                "quantization_level": "Q4_K_M" + HOSTILE,
                            },
                        }
                    ]
                },
            )
        elif path == "/api/tags":
            self._send(
                200, {"models": [{"name": "gem:latest", "model": "gem:latest", "size": 3338801804, "digest": DIGEST}]}
            )
        elif path == "/api/show":
            arch = "gemma3" + HOSTILE
            self._send(
                200,
                {
                    "modelfile": "FROM /root/.ollama/models/blobs/sha256-" + DIGEST + "\n",
                    "parameters": "stop " + HOSTILE,
                    "details": {"family": arch},
                    "capabilities": ["completion" + HOSTILE],
                    "model_info": {
                        "general.architecture": arch,
                        "general.name": HOSTILE,
                        f"{arch}.block_count": 34,
                        f"{arch}.context_length": 131072,
                        f"{arch}.attention.head_count": 8,
                        f"{arch}.attention.head_count_kv": 4,
                        f"{arch}.embedding_length": 2560,
                        f"{arch}.attention.key_length": 256,
                    },
                },
            )
        else:
            self._send(404, {"error": "not found" + HOSTILE})


@pytest.fixture()
def hostile() -> Iterator[tuple[str, type[_Hostile]]]:
    handler = type("Handler", (_Hostile,), {})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


def _kvtop(
    args: list[str], tmp_path: Path, env_extra: dict[str, str] | None = None, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if k not in ("OLLAMA_HOST", "NO_COLOR") and not k.startswith("KVTOP_")}
    env.update(
        {
            "XDG_CONFIG_HOME": str(tmp_path / "config"),
            "XDG_STATE_HOME": str(tmp_path / "state"),
            "NO_PROXY": "*",
            "PYTHONIOENCODING": "utf-8",
        }
    )
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-m", "kvtop", *args],
        capture_output=True,
        env=env,
        input=stdin,
        timeout=60,
        cwd=REPO,
        check=False,
    )


# --------------------------------------------------------------------------------------------
# The sanitizer itself


def test_safe_block_keeps_layout_and_replaces_every_other_control() -> None:
    assert safe_block("a\tb\nc") == "a\tb\nc"
    out = safe_block("x" + HOSTILE + "\n")
    assert _bad_chars(out) == []
    assert out.endswith("\n") and "boom" in out and out.count("\ufffd") == 8  # ESC×3, BEL, C1, U+202E, CR, NUL
    assert safe_block("\x7f") == "\ufffd"
    assert safe("a\nb\tc") == "a\ufffdb\ufffdc"  # one field: no newline either


def test_safe_is_the_one_sanitizer_ui_format_reexports() -> None:
    from kvtop.ui import format as ui_format

    assert ui_format.safe is safe


# --------------------------------------------------------------------------------------------
# --check, --once, --json against the hostile server


def test_check_text_does_not_print_the_error_body_raw(hostile: tuple[str, type[_Hostile]], tmp_path: Path) -> None:
    url, handler = hostile
    handler.mode = "error"
    proc = _kvtop(["--check", "--host", url, "--log", "none"], tmp_path)
    out = assert_clean(proc.stdout, "stdout")
    assert_clean(proc.stderr, "stderr")
    assert proc.returncode == 2
    assert "unreachable" in out and "boom" in out  # the message is still there, defused


def test_check_json_escapes_and_keeps_the_error(hostile: tuple[str, type[_Hostile]], tmp_path: Path) -> None:
    url, handler = hostile
    handler.mode = "error"
    proc = _kvtop(["--check", "--json", "--host", url, "--log", "none"], tmp_path)
    assert_clean(proc.stdout, "stdout")
    assert_clean(proc.stderr, "stderr")
    doc = json.loads(proc.stdout)
    assert_no_control(doc)
    assert doc["reachable"] is False
    assert "HTTP 500" in doc["error"] and "]52;c;SGFja2Vk" in doc["error"]  # the message is kept, defused


def test_once_text_against_hostile_show(hostile: tuple[str, type[_Hostile]], tmp_path: Path) -> None:
    url, handler = hostile
    handler.mode = "show"
    proc = _kvtop(["--once", "--host", url], tmp_path)
    out = assert_clean(proc.stdout, "stdout")
    assert_clean(proc.stderr, "stderr")
    assert proc.returncode == 0, proc.stderr
    assert "gem" in out and "boom" in out  # the model row is printed, its name defused


def test_once_text_unreachable_goes_to_stderr_clean(hostile: tuple[str, type[_Hostile]], tmp_path: Path) -> None:
    url, handler = hostile
    handler.mode = "error"
    proc = _kvtop(["--once", "--host", url], tmp_path)
    assert proc.returncode == 2
    assert_clean(proc.stdout, "stdout")
    assert "boom" in assert_clean(proc.stderr, "stderr")


def test_once_json_against_hostile_show(hostile: tuple[str, type[_Hostile]], tmp_path: Path) -> None:
    url, handler = hostile
    handler.mode = "show"
    proc = _kvtop(["--once", "--json", "--host", url], tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = assert_clean(proc.stdout, "stdout")
    assert_clean(proc.stderr, "stderr")
    doc = json.loads(text)
    assert_no_control(doc)  # every text field (kv_estimate_unavailable, preflight notes …), not only names
    assert doc["models"][0]["name"].startswith("gem")
    assert doc["version"].startswith("0.12.0")
    assert doc["models"][0]["name"] == "gem" + safe(HOSTILE) + ":latest"  # replaced, not escaped


def test_json_dumps_escapes_esc() -> None:
    """The premise of the JSON outputs: json.dumps writes ESC as \\u001b, even with ensure_ascii=False."""
    assert json.dumps("\x1b[2J", ensure_ascii=False) == '"\\u001b[2J"'
    assert "\x9b" in json.dumps("\x9b", ensure_ascii=False)  # …but not C1: kvtop escapes those itself


# --------------------------------------------------------------------------------------------
# plan


def test_plan_text_against_hostile_show(hostile: tuple[str, type[_Hostile]], tmp_path: Path) -> None:
    url, handler = hostile
    handler.mode = "show"
    proc = _kvtop(["plan", "gem:latest", "--host", url, "--ctx", "8192"], tmp_path)
    out = assert_clean(proc.stdout, "stdout")
    assert_clean(proc.stderr, "stderr")
    assert proc.returncode == 0, proc.stderr
    assert "kvtop plan gem:latest" in out


def test_plan_error_message_is_clean(hostile: tuple[str, type[_Hostile]], tmp_path: Path) -> None:
    url, handler = hostile
    handler.mode = "error"
    proc = _kvtop(["plan", "gem:latest", "--host", url], tmp_path)
    assert proc.returncode != 0
    assert_clean(proc.stdout, "stdout")
    err = assert_clean(proc.stderr, "stderr")
    assert "kvtop plan:" in err and "HTTP 500" in err and "boom" in err


def test_plan_json_is_escaped(hostile: tuple[str, type[_Hostile]], tmp_path: Path) -> None:
    url, handler = hostile
    handler.mode = "show"
    proc = _kvtop(["plan", "gem:latest", "--host", url, "--json"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = assert_clean(proc.stdout, "stdout")  # json.dumps escapes C0 only; C1 and U+202E must be escaped too
    assert_clean(proc.stderr, "stderr")
    assert "\\u009b" not in text and "\\u202e" not in text and "\\u001b" not in text  # not even escaped
    doc = json.loads(text)
    assert_no_control(doc)
    assert doc["architecture"] == "gemma3" + safe(HOSTILE)  # the data survives, defused as names are


# --------------------------------------------------------------------------------------------
# inspect-log


LOG_LINES = [
    'time=2025-02-18T02:21:25.000Z level=INFO source=routes.go:1 msg="server config" '
    'env="map[OLLAMA_CONTEXT_LENGTH:4096 OLLAMA_HOST:http://0.0.0.0:11434' + HOSTILE + ']"',
    'time=2025-02-18T02:21:25.100Z level=INFO source=routes.go:2 msg="Listening on 127.0.0.1:11434 (version 0.5.7'
    + HOSTILE
    + ')"',
    "llama_model_loader: loaded meta data with 26 key-value pairs and 995 tensors from "
    "/root/.ollama/models/blobs/sha256-" + DIGEST + HOSTILE + " (version GGUF V3 (latest))",
    "llama_new_context_with_model: n_ctx      = 8192",
    "llama_kv_cache_init:      CUDA0 KV buffer size =  1024.00 MiB",
    'time=2025-02-18T02:21:26.000Z level=ERROR source=sched.go:3 msg="error loading llama server" error="'
    + HOSTILE.replace("\x00", "")
    + '"',
]


@pytest.mark.parametrize("json_out", [False, True])
def test_inspect_log_on_a_log_with_escapes(tmp_path: Path, json_out: bool) -> None:
    log = tmp_path / "server.log"
    log.write_text("\n".join(LOG_LINES) + "\n", encoding="utf-8")
    proc = _kvtop(["inspect-log", str(log), *(["--json"] if json_out else [])], tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = assert_clean(proc.stdout, "stdout")
    assert_clean(proc.stderr, "stderr")
    if json_out:
        assert_no_control(json.loads(out))
    else:
        assert "load 1" in out and "8192" in out


def test_inspect_log_missing_file_with_escapes_in_its_name(tmp_path: Path) -> None:
    proc = _kvtop(["inspect-log", str(tmp_path / ("nope" + HOSTILE.replace("\x00", "")))], tmp_path)
    assert proc.returncode == 2
    assert "cannot read" in assert_clean(proc.stderr, "stderr")


# --------------------------------------------------------------------------------------------
# stderr messages: config file, environment, log spec


def test_config_path_and_values_with_escapes(hostile: tuple[str, type[_Hostile]], tmp_path: Path) -> None:
    url, handler = hostile
    handler.mode = "error"
    cfg = tmp_path / ("cfg" + OSC52 + ".toml")
    cfg.write_text('theme = 5\n"\\u001b[2J" = 1\nlog = "file:/nowhere/\\u001b]52;c;eA==\\u0007"\n', encoding="utf-8")
    for args in (["--print-config"], ["--check", "--host", url]):
        proc = _kvtop(args, tmp_path, {"KVTOP_CONFIG": str(cfg)})
        out = assert_clean(proc.stdout, f"{args} stdout")
        err = assert_clean(proc.stderr, f"{args} stderr")
        assert "cfg" in out + err  # the warnings name the file, defused


def test_environment_values_with_escapes(tmp_path: Path) -> None:
    proc = _kvtop(["--check"], tmp_path, {"KVTOP_INTERVAL": "x" + OSC52, "OLLAMA_HOST": "http://h" + CLEAR})
    assert proc.returncode == 2
    assert_clean(proc.stdout, "stdout")
    assert "KVTOP_INTERVAL" in assert_clean(proc.stderr, "stderr")


def test_log_spec_with_escapes(hostile: tuple[str, type[_Hostile]], tmp_path: Path) -> None:
    url, handler = hostile
    handler.mode = "error"
    proc = _kvtop(["--check", "--host", url, "--log", "file:/nowhere/x" + OSC52], tmp_path)
    assert_clean(proc.stdout, "stdout")
    assert "server log" in assert_clean(proc.stderr, "stderr")
