"""Start the stand-in Ollama server (``python -m kvtop.demo.server``) as a real process for tests."""

from __future__ import annotations

import os
import queue
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

REPO = Path(__file__).resolve().parents[1]
BUNDLED = REPO / "snapshots" / "demo-scenario.json"
START_TIMEOUT_S = 15.0


@dataclass
class Standin:
    """A running stand-in server subprocess."""

    proc: subprocess.Popen[str]
    url: str
    client: httpx.Client

    def state(self) -> dict[str, Any]:
        response = self.client.get("/_standin/state")
        assert response.status_code == 200
        return response.json()

    def goto(self, index: int) -> dict[str, Any]:
        response = self.client.post("/_standin/advance", json={"to": index})
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["step"] == index
        return body

    def requests(self) -> list[tuple[str, str]]:
        """``(method, path)`` of every Ollama API request the server got so far, oldest first."""
        response = self.client.get("/_standin/requests")
        assert response.status_code == 200, response.text
        return [(r["method"], r["path"]) for r in response.json()["requests"]]

    def writes(self) -> list[tuple[str, str]]:
        """The requests that change the server (a load: ``POST /api/generate``, or anything
        else but reads: ``POST /api/show`` only reads)."""
        return [(m, p) for m, p in self.requests() if m not in ("GET", "HEAD") and p != "/api/show"]

    def ps(self) -> list[dict[str, Any]]:
        response = self.client.get("/api/ps")
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith("application/json")
        body = response.json()
        assert set(body) == {"models"}
        return body["models"]


def _read_line(stream: Any, timeout: float) -> str:
    box: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: box.put(stream.readline()), daemon=True).start()
    try:
        return box.get(timeout=timeout)
    except queue.Empty:
        return ""


def _spawn(args: list[str], env_extra: dict[str, str] | None = None, port: int = 0) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(env_extra or {})
    return subprocess.Popen(
        [sys.executable, "-m", "kvtop.demo.server", "--port", str(port), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(REPO),
        env=env,
    )


def _stop(proc: subprocess.Popen[str]) -> tuple[str, str]:
    if proc.poll() is None:
        proc.terminate()
    try:
        out, err = proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate(timeout=5)
    return out, err


@contextmanager
def running(
    args: list[str], env_extra: dict[str, str] | None = None, port: int = 0, verify: Any = True
) -> Iterator[Standin]:
    """Start the server, yield it once it printed LISTENING, always stop it afterwards.

    ``verify``: the control client's TLS trust when ``args`` serve https (``--tls-cert``):
    the test CA's file, typically."""
    proc = _spawn(args, env_extra, port)
    client: httpx.Client | None = None
    try:
        line = _read_line(proc.stdout, START_TIMEOUT_S)
        if not line.startswith("LISTENING "):
            proc.kill()
            _, err = proc.communicate(timeout=5)
            pytest.fail(f"server did not start: stdout={line!r} stderr={err!r}")
        url = line.split(" ", 1)[1].strip()
        assert re.fullmatch(r"https?://127\.0\.0\.1:\d+", url), url
        client = httpx.Client(base_url=url, timeout=5.0, trust_env=False, verify=verify)
        yield Standin(proc, url, client)
    finally:
        if client is not None:
            client.close()
        _stop(proc)


TINY_INFO = {  # tests/llama_fixture.py TinyLlama(): 4 layers, n_embd 128, 4 heads, 2 KV heads (head dim 32)
    "general.architecture": "llama",
    "llama.block_count": 4,
    "llama.embedding_length": 128,
    "llama.attention.head_count": 4,
    "llama.attention.head_count_kv": 2,
    "llama.context_length": 16384,
    "llama.feed_forward_length": 256,
}


def tiny_scenario(tmp_path: Path) -> tuple[Path, str]:
    """A one-step scenario whose model is the tiny llama of tests/fixtures/llama_server, loaded at
    num_ctx 2048; returns its path and the model's weights blob (``sha256-…``)."""
    import json

    from kvtop.demo.scenario_file import load_scenario
    from kvtop.demo.scenario import model_blob

    data = json.loads(BUNDLED.read_text(encoding="utf-8"))
    template = data["models"]["qwen3:1.7b-q8_0"]
    tiny = {**template, "model_info": TINY_INFO, "file_size": 1_048_576, "note": "tiny test model"}
    tiny["details"] = {**template["details"], "family": "llama", "families": ["llama"], "parameter_size": "1M"}
    data["models"] = {"tiny:latest": tiny}
    data["steps"] = [
        {
            "at_s": 0,
            "label": "tiny at 2048",
            "loaded": [
                {"model": "tiny:latest", "context_length": 2048, "size": 5_000_000, "size_vram": 0, "expires_in_s": 300}
            ],
        }
    ]
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path, model_blob(load_scenario(path).models["tiny:latest"])


def port_of(url: str) -> int:
    """The port of a ``http://127.0.0.1:N`` URL."""
    return int(url.rsplit(":", 1)[1])
