"""Integration tests for the stand-in Ollama server (``python -m kvtop.demo.server``).

The server runs as a real subprocess on 127.0.0.1 and is queried over HTTP with httpx.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest

from kvtop.demo.scenario_file import load_scenario, parse_scenario
from kvtop.demo.api_bodies import format_go_time
from kvtop.demo.player import ScenarioPlayer
from kvtop.demo.server import serve
from kvtop.model.kv import processor_string
from tests.standin import START_TIMEOUT_S, Standin, _read_line, _spawn, _stop, running

REPO = Path(__file__).resolve().parents[2]
BUNDLED = REPO / "snapshots" / "demo-scenario.json"

PS_KEYS = {"name", "model", "size", "digest", "details", "expires_at", "size_vram", "context_length"}
DETAILS_KEYS = {"parent_model", "format", "family", "families", "parameter_size", "quantization_level"}
GO_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{0,8}[1-9])?(Z|[+-]\d{2}:\d{2})")


def _digest(char: str) -> str:
    return char * 64


def _details(family: str, quant: str = "Q4_K_M") -> dict[str, Any]:
    return {
        "format": "gguf",
        "family": family,
        "families": [family],
        "parameter_size": "8.0B",
        "quantization_level": quant,
    }


TEST_SCENARIO: dict[str, Any] = {
    "format": 1,
    "version": "0.99.0-test",
    "description": "small scenario for the integration tests",
    "sources": ["made up for tests"],
    "models": {
        "alpha:7b": {
            "digest": _digest("a"),
            "details": _details("llama"),
            "file_size": 4_000_000_000,
            "modified_at": "2026-01-02T03:04:05.5+09:00",
            "capabilities": ["completion", "tools"],
            "parameters": {"temperature": 0.6, "stop": ["<|end|>", "<|eot|>"]},
            "template": "{{ .Prompt }}",
            "model_info": {
                "general.architecture": "llama",
                "llama.block_count": 4,
                "llama.attention.head_count": 32,
                "llama.attention.head_count_kv": [8, 8, 0, 8],
                "llama.empty_list": [],
                "llama.rope.freq_base": 500000.0,
            },
            "tensors": [{"name": "blk.0.attn_k.weight", "type": "Q4_K", "shape": [4096, 1024]}],
        },
        "beta:latest": {
            "digest": _digest("b"),
            "details": _details("qwen3", "Q8_0"),
            "file_size": 2_000_000_000,
            "modified_at": "2026-03-01T00:00:00Z",
            "capabilities": ["completion"],
            "model_info": {"general.architecture": "qwen3", "qwen3.block_count": 28},
        },
        "gamma:1b": {
            "digest": _digest("c"),
            "details": _details("gemma3"),
            "file_size": 800_000_000,
            "modified_at": "2025-12-01T00:00:00Z",
            "capabilities": ["completion"],
            "model_info": {"general.architecture": "gemma3"},
        },
    },
    "steps": [
        {"at_s": 0, "label": "empty"},
        {
            "at_s": 1,
            "label": "three loaded",
            "loaded": [
                {"model": "gamma:1b", "context_length": 2048, "size": 1_000, "size_vram": 0, "expires_in_s": 60},
                {
                    "model": "alpha:7b",
                    "context_length": 4096,
                    "size": 6_591_830_464,
                    "size_vram": 5_333_539_264,
                    "expires_in_s": 300,
                },
                {
                    "model": "beta:latest",
                    "context_length": None,
                    "size": 2_754_892_672,
                    "size_vram": 2_754_892_672,
                    "expires_in_s": "forever",
                },
            ],
        },
        {
            "at_s": 2,
            "label": "alpha busy past keep-alive",
            "loaded": [{"model": "alpha:7b", "context_length": 4096, "size": 10, "size_vram": 10, "expires_in_s": -30}],
        },
        {"at_s": 3, "label": "restarting", "status": 503, "error": "server restarting"},
        {
            "at_s": 4,
            "label": "garbage",
            "garbage": True,
            "loaded": [{"model": "beta:latest", "context_length": 8192, "size": 1, "size_vram": 1, "expires_in_s": 5}],
        },
        {"at_s": 5, "hold_s": 1, "label": "busy queue", "status": 503},
    ],
}

STEP_EMPTY, STEP_THREE, STEP_BUSY, STEP_503, STEP_GARBAGE, STEP_QUEUE = range(6)


# --------------------------------------------------------------------------------------------
# Helpers


def _parse_go_time(text: str) -> datetime:
    assert GO_TIME.fullmatch(text), text
    match = re.fullmatch(r"(.*T\d{2}:\d{2}:\d{2})(?:\.(\d+))?(Z|[+-]\d{2}:\d{2})", text)
    assert match
    base, frac, offset = match.groups()
    micro = int((frac or "0")[:6].ljust(6, "0"))
    tz = timezone.utc
    if offset != "Z":
        sign = 1 if offset[0] == "+" else -1
        tz = timezone(sign * timedelta(hours=int(offset[1:3]), minutes=int(offset[4:6])))
    return datetime.strptime(base, "%Y-%m-%dT%H:%M:%S").replace(microsecond=micro, tzinfo=tz)


@pytest.fixture(scope="module")
def scenario_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("standin") / "scenario.json"
    path.write_text(json.dumps(TEST_SCENARIO), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def standin(scenario_file: Path) -> Iterator[Standin]:
    with running(["--manual", "--scenario", str(scenario_file)], {"TZ": "UTC"}) as server:
        yield server


# --------------------------------------------------------------------------------------------
# Ollama API over HTTP


def test_version_root_and_initial_state(standin: Standin) -> None:
    standin.goto(STEP_EMPTY)
    response = standin.client.get("/api/version")
    assert response.status_code == 200
    assert response.json() == {"version": "0.99.0-test"}
    root = standin.client.get("/")
    assert root.status_code == 200 and root.text == "Ollama is running"
    state = standin.state()
    assert state["step"] == STEP_EMPTY
    assert state["label"] == "empty"
    assert state["steps"] == len(TEST_SCENARIO["steps"])
    assert standin.ps() == []


def test_advance_moves_one_step_jumps_and_wraps(standin: Standin) -> None:
    standin.goto(STEP_EMPTY)
    response = standin.client.post("/_standin/advance")
    assert response.status_code == 200
    assert response.json()["step"] == 1
    assert response.json()["label"] == "three loaded"
    assert standin.state()["step"] == 1
    standin.goto(STEP_QUEUE)
    wrapped = standin.client.post("/_standin/advance", content=b"")
    assert wrapped.json()["step"] == 0  # loop is on by default
    bad = standin.client.post("/_standin/advance", json={"to": 99})
    assert bad.status_code == 400 and "error" in bad.json()
    bad_type = standin.client.post("/_standin/advance", json={"to": "2"})
    assert bad_type.status_code == 400
    assert standin.state()["step"] == 0


def test_ps_shape_values_and_order(standin: Standin) -> None:
    standin.goto(STEP_THREE)
    models = standin.ps()
    # Longest remaining expires_at first: forever, then 300 s, then 60 s.
    assert [m["name"] for m in models] == ["beta:latest", "alpha:7b", "gamma:1b"]
    for entry in models:
        assert entry["model"] == entry["name"]
        assert re.fullmatch(r"[0-9a-f]{64}", entry["digest"])
        assert set(entry["details"]) == DETAILS_KEYS
        assert entry["details"]["parent_model"] == ""
        assert GO_TIME.fullmatch(entry["expires_at"]), entry["expires_at"]
        assert entry["expires_at"].endswith("Z")  # TZ=UTC: Go prints Z, not +00:00
    beta, alpha, gamma = models
    assert set(alpha) == PS_KEYS
    assert set(beta) == PS_KEYS - {"context_length"}  # null in the scenario: key left out
    assert alpha["digest"] == "a" * 64
    assert alpha["size"] == 6_591_830_464 and alpha["size_vram"] == 5_333_539_264
    assert alpha["context_length"] == 4096
    assert alpha["details"] == {
        "parent_model": "",
        "format": "gguf",
        "family": "llama",
        "families": ["llama"],
        "parameter_size": "8.0B",
        "quantization_level": "Q4_K_M",
    }
    assert processor_string(alpha["size"], alpha["size_vram"]) == "19%/81% CPU/GPU"
    assert processor_string(beta["size"], beta["size_vram"]) == "100% GPU"
    assert processor_string(gamma["size"], gamma["size_vram"]) == "100% CPU"
    now = datetime.now(timezone.utc)
    forever = _parse_go_time(beta["expires_at"])
    assert forever.year >= now.year + 291  # Go: now + MaxInt64 ns, about 292 years
    remaining = (_parse_go_time(alpha["expires_at"]) - now).total_seconds()
    assert 290 < remaining <= 301
    remaining = (_parse_go_time(gamma["expires_at"]) - now).total_seconds()
    assert 50 < remaining <= 61


def test_ps_is_stable_while_a_step_lasts(standin: Standin) -> None:
    standin.goto(STEP_THREE)
    first = standin.ps()
    time.sleep(0.05)
    assert standin.ps() == first  # expires_at is a fixed time, not "now + n"


def test_busy_model_has_expires_at_in_the_past(standin: Standin) -> None:
    standin.goto(STEP_BUSY)
    (alpha,) = standin.ps()
    expires = _parse_go_time(alpha["expires_at"])
    behind = (datetime.now(timezone.utc) - expires).total_seconds()
    assert 29 < behind < 40
    assert alpha["size"] == 10


def test_show_verbose_and_not_verbose(standin: Standin) -> None:
    verbose = standin.client.post("/api/show", json={"model": "alpha:7b", "verbose": True})
    assert verbose.status_code == 200
    body = verbose.json()
    assert {"license", "modelfile", "parameters", "template", "details", "model_info"} <= set(body)
    assert {"capabilities", "modified_at", "tensors"} <= set(body)
    info = body["model_info"]
    assert info["llama.attention.head_count_kv"] == [8, 8, 0, 8]
    assert info["llama.empty_list"] == []
    assert info["llama.block_count"] == 4
    assert body["details"]["family"] == "llama"
    assert body["capabilities"] == ["completion", "tools"]
    assert body["tensors"] == [{"name": "blk.0.attn_k.weight", "type": "Q4_K", "shape": [4096, 1024]}]
    assert body["parameters"].splitlines() == [
        "temperature                    0.6",
        'stop                           "<|end|>"',
        'stop                           "<|eot|>"',
    ]
    assert body["modified_at"] == "2026-01-02T03:04:05.5+09:00"

    terse = standin.client.post("/api/show", json={"model": "alpha:7b"}).json()
    assert terse["model_info"]["llama.attention.head_count_kv"] is None  # v0.6.7+ behaviour
    assert terse["model_info"]["llama.empty_list"] == []
    assert terse["model_info"]["llama.block_count"] == 4
    assert terse["model_info"]["llama.rope.freq_base"] == 500000.0
    not_verbose = standin.client.post("/api/show", json={"model": "alpha:7b", "verbose": False})
    assert not_verbose.json() == terse


def test_show_name_forms(standin: Standin) -> None:
    legacy = standin.client.post("/api/show", json={"name": "beta"})  # deprecated alias, :latest
    assert legacy.status_code == 200
    assert legacy.json()["model_info"]["qwen3.block_count"] == 28
    assert "tensors" not in legacy.json()
    full = standin.client.post("/api/show", json={"model": "registry.ollama.ai/library/beta:latest"})
    assert full.status_code == 200


def test_show_errors(standin: Standin) -> None:
    missing = standin.client.post("/api/show", json={"model": "nope:1b"})
    assert missing.status_code == 404
    assert missing.json() == {"error": "model 'nope:1b' not found"}
    bad = standin.client.post("/api/show", content=b"{not json", headers={"Content-Type": "application/json"})
    assert bad.status_code == 400
    assert isinstance(bad.json()["error"], str) and bad.json()["error"]
    empty = standin.client.post("/api/show", content=b"")
    assert empty.status_code == 400
    no_model = standin.client.post("/api/show", json={"verbose": True})
    assert no_model.status_code == 400
    assert no_model.json() == {"error": "model is required"}


def test_tags_lists_the_catalog(standin: Standin) -> None:
    response = standin.client.get("/api/tags")
    assert response.status_code == 200
    models = response.json()["models"]
    assert [m["name"] for m in models] == ["beta:latest", "alpha:7b", "gamma:1b"]  # newest first
    alpha = models[1]
    assert set(alpha) == {"name", "model", "modified_at", "size", "digest", "details"}
    assert alpha["size"] == 4_000_000_000
    assert set(alpha["details"]) == DETAILS_KEYS


def test_unknown_routes_are_404_json(standin: Standin) -> None:
    for method, path in [
        ("GET", "/api/nothing"),
        ("GET", "/v1/models"),
        ("GET", "/api/show"),
        ("POST", "/api/ps"),
        ("DELETE", "/api/delete"),
        ("GET", "/_standin/nothing"),
    ]:
        response = standin.client.request(method, path)
        assert response.status_code == 404, (method, path)
        assert response.json() == {"error": "not found"}


def test_status_step_fails_every_api_call(standin: Standin) -> None:
    standin.goto(STEP_503)
    for method, path, payload in [
        ("GET", "/api/ps", None),
        ("GET", "/api/version", None),
        ("GET", "/api/tags", None),
        ("POST", "/api/show", {"model": "alpha:7b"}),
    ]:
        response = standin.client.request(method, path, json=payload)
        assert response.status_code == 503, path
        assert response.json() == {"error": "server restarting"}
    assert standin.state()["step"] == STEP_503  # the control endpoint still answers
    standin.goto(STEP_QUEUE)
    response = standin.client.get("/api/ps")
    assert response.status_code == 503
    assert "server busy" in response.json()["error"]


def test_garbage_step_breaks_only_ps(standin: Standin) -> None:
    standin.goto(STEP_GARBAGE)
    response = standin.client.get("/api/ps")
    assert response.status_code == 200
    with pytest.raises(json.JSONDecodeError):
        json.loads(response.text)
    assert standin.client.get("/api/version").status_code == 200
    standin.goto(STEP_THREE)
    assert len(standin.ps()) == 3


# --------------------------------------------------------------------------------------------
# Process behaviour


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_clean_exit_on_signal(scenario_file: Path, sig: signal.Signals) -> None:
    proc = _spawn(["--manual", "--scenario", str(scenario_file)])
    try:
        line = _read_line(proc.stdout, START_TIMEOUT_S)
        assert line.startswith("LISTENING http://127.0.0.1:")
        url = line.split()[1]
        assert httpx.get(url + "/api/version", trust_env=False).status_code == 200
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=5)
    finally:
        _stop(proc)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert out == ""  # nothing after the single LISTENING line
    assert err == ""  # quiet: no per-request log lines without --verbose


def test_bad_scenario_file_exits_2_with_a_message(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({**TEST_SCENARIO, "steps": [{"at_s": 0}]}), encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "kvtop.demo.server", "--scenario", str(path)],
        capture_output=True,
        text=True,
        timeout=15,
        cwd=str(REPO),
    )
    assert result.returncode == 2
    assert "$.steps[0].label" in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_timed_mode_plays_and_loops(tmp_path: Path) -> None:
    doc = {
        **TEST_SCENARIO,
        "steps": [{"at_s": 0, "label": "a"}, {"at_s": 1, "label": "b"}, {"at_s": 2, "hold_s": 1, "label": "c"}],
    }
    path = tmp_path / "timed.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    # Period 3 s at speed 10 = 0.3 s per loop.
    with running(["--scenario", str(path), "--speed", "10"]) as server:
        seen: list[int] = []
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            step = server.state()["step"]
            if not seen or seen[-1] != step:
                seen.append(step)
            if 2 in seen and seen[-1] < seen[-2]:
                break  # went back after reaching the last step: it looped
            time.sleep(0.005)
        assert 2 in seen and seen[-1] < seen[-2], seen
        assert server.client.post("/_standin/advance").status_code == 409


def test_timed_mode_without_loop_stops_at_the_last_step(tmp_path: Path) -> None:
    doc = {**TEST_SCENARIO, "steps": [{"at_s": 0, "label": "a"}, {"at_s": 1, "label": "b"}]}
    path = tmp_path / "once.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    with running(["--scenario", str(path), "--speed", "20", "--no-loop"]) as server:
        deadline = time.monotonic() + 5
        while server.state()["step"] != 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        assert server.state() | {"since": ""} == {"step": 1, "label": "b", "steps": 2, "manual": False, "since": ""}


def test_bundled_scenario_tells_the_story() -> None:
    """The default scenario (no --scenario) with the measured numbers from the sources."""
    with running(["--manual"]) as server:
        assert server.client.get("/api/version").json() == {"version": "0.22.1"}
        state = server.state()
        count = state["steps"]
        assert server.ps() == []

        def rows(step: int) -> dict[str, dict[str, Any]]:
            server.goto(step)
            return {m["name"]: m for m in server.ps()}

        labels: list[str] = []
        by_step = []
        for i in range(count):
            by_step.append(rows(i))
            labels.append(server.state()["label"])
        q8 = "qwen3:1.7b-q8_0"
        sizes = [(s[q8]["context_length"], s[q8]["size"]) for s in by_step if q8 in s]
        assert (4096, 2_754_892_672) in sizes
        assert (32768, 6_106_141_568) in sizes
        assert sizes[0] == (4096, 2_754_892_672) and sizes[-1] == (4096, 2_754_892_672)
        assert all(s[q8]["size_vram"] == s[q8]["size"] for s in by_step if q8 in s)
        spills = [row for step in by_step for row in step.values() if row["size_vram"] < row["size"]]
        assert spills
        assert all(processor_string(r["size"], r["size_vram"]) == "19%/81% CPU/GPU" for r in spills)
        assert {(r["size"], r["size_vram"], r["context_length"]) for r in spills} == {
            (6_591_830_464, 5_333_539_264, 4096)
        }
        now = datetime.now(timezone.utc)
        past = [r for step in by_step for r in step.values() if _parse_go_time(r["expires_at"]) < now]
        assert past, "one step shows a busy model whose expires_at is in the past"
        assert max(len(s) for s in by_step) >= 2
        assert by_step[-1] == {}
        forever = [
            r for step in by_step for r in step.values() if _parse_go_time(r["expires_at"]).year > now.year + 200
        ]
        assert forever, "keep_alive -1 shows up as a far-future expires_at"
        for name in {name for step in by_step for name in step}:
            show = server.client.post("/api/show", json={"model": name, "verbose": True})
            assert show.status_code == 200
            info = show.json()["model_info"]
            assert not any(key.startswith("tokenizer.") for key in info)
        qwen = server.client.post("/api/show", json={"model": q8, "verbose": True}).json()
        info = qwen["model_info"]
        assert info["general.architecture"] == "qwen3"
        assert info["qwen3.block_count"] == 28
        assert info["qwen3.attention.head_count"] == 16
        assert info["qwen3.attention.head_count_kv"] == 8
        assert info["qwen3.attention.key_length"] == 128
        assert info["qwen3.attention.value_length"] == 128
        assert info["qwen3.embedding_length"] == 2048
        assert info["qwen3.context_length"] == 40960
        assert info["general.parameter_count"] == 2_031_739_904
        assert qwen["details"]["quantization_level"] == "Q8_0"
        # 2 (K and V) x 28 layers x 8 KV heads x 128 x 2 bytes = 114,688 B/token (seeds text).
        per_token = 2 * info["qwen3.block_count"] * 8 * 128 * 2
        assert per_token == 114_688
        assert 6_106_141_568 - 2_754_892_672 - (32768 - 4096) * per_token < 70_000_000
        assert all(labels)


# --------------------------------------------------------------------------------------------
# Python API and units (no subprocess)


def test_serve_python_api_in_process(scenario_file: Path) -> None:
    scenario = load_scenario(scenario_file)
    server = serve(scenario, manual=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        assert host == "127.0.0.1" and port > 0
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", trust_env=False) as client:
            assert client.get("/api/version").json() == {"version": "0.99.0-test"}
            assert client.post("/_standin/advance").json()["step"] == 1
            assert len(client.get("/api/ps").json()["models"]) == 3
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=2)


def test_format_go_time() -> None:
    base = int(datetime(2026, 11, 29, 15, 4, 5, tzinfo=timezone.utc).timestamp()) * 10**9
    assert format_go_time(base + 123_456_789, timezone.utc) == "2026-11-29T15:04:05.123456789Z"
    assert format_go_time(base + 930_000_000, timezone.utc) == "2026-11-29T15:04:05.93Z"
    assert format_go_time(base, timezone.utc) == "2026-11-29T15:04:05Z"
    pdt = timezone(timedelta(hours=-7))
    assert format_go_time(base + 933_550_000, pdt) == "2026-11-29T08:04:05.93355-07:00"
    ist = timezone(timedelta(hours=5, minutes=30))
    assert format_go_time(base, ist) == "2026-11-29T20:34:05+05:30"
    forever = format_go_time(base + 2**63 - 1, timezone.utc)
    assert forever.startswith("2319-03-")


def test_player_with_a_fake_clock() -> None:
    scenario = parse_scenario(TEST_SCENARIO)  # steps at 0..5, period 6 s
    now = [100.0]
    player = ScenarioPlayer(scenario, speed=2.0, clock=lambda: now[0], wall_ns=lambda: int(now[0] * 1e9))
    assert player.current()[0] == 0
    now[0] += 0.5  # 1.0 scenario second
    assert player.current() == (1, int(100.5e9))
    now[0] += 0.74  # 2.48 scenario seconds: step 2 began 0.48 s / 2 = 0.24 s ago
    index, since = player.current()
    assert index == 2 and abs(since - int(101.0e9)) < 1000
    now[0] += 1.8  # 6.08 -> looped to 0.08
    assert player.current()[0] == 0
    once = ScenarioPlayer(scenario, speed=1.0, loop=False, clock=lambda: now[0])
    now[0] += 100
    assert once.current()[0] == len(scenario.steps) - 1
    with pytest.raises(RuntimeError):
        once.advance()
    with pytest.raises(ValueError):
        ScenarioPlayer(scenario, speed=0)


# --------------------------------------------------------------------------------------------
# load_scenario errors


def _with(path: list[Any], value: Any, *, delete: bool = False) -> dict[str, Any]:
    doc = json.loads(json.dumps(TEST_SCENARIO))
    target = doc
    for key in path[:-1]:
        target = target[key]
    if delete:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return doc


@pytest.mark.parametrize(
    ("doc", "fragment"),
    [
        (_with(["format"], 2), "$.format"),
        (_with(["version"], 22), "$.version"),
        (_with(["steps"], []), "$.steps"),
        (_with(["models"], None, delete=True), "$.models: missing required key"),
        (_with(["steps", 1, "loaded", 0, "size"], "12"), "$.steps[1].loaded[0].size"),
        (_with(["steps", 1, "loaded", 0, "size_vram"], -1), "$.steps[1].loaded[0].size_vram"),
        (_with(["steps", 1, "loaded", 0, "model"], "ghost:1b"), "'ghost:1b' is not in $.models"),
        (_with(["steps", 1, "loaded", 0, "expires_in_s"], "never"), "expires_in_s"),
        (_with(["steps", 1, "loaded", 0, "context_length"], None, delete=True), "context_length"),
        (_with(["steps", 2, "at_s"], 0.5), "$.steps[2].at_s: steps must be in time order"),
        (_with(["steps", 3, "status"], 700), "$.steps[3].status"),
        (_with(["steps", 4, "garbage"], "yes"), "$.steps[4].garbage"),
        (_with(["steps", 0, "lable"], "typo"), "$.steps[0].lable: unknown key"),
        (_with(["models", "alpha:7b", "digest"], "sha256:" + "a" * 64), '$.models["alpha:7b"].digest'),
        (_with(["models", "alpha:7b", "details", "family"], None, delete=True), "details.family"),
        (_with(["models", "alpha:7b", "model_info", "tokenizer.ggml.tokens"], ["a", "b"]), "tokenizer arrays"),
        (_with(["models", "alpha:7b", "modified_at"], "yesterday"), "modified_at"),
        (_with(["models", "no-tag"], TEST_SCENARIO["models"]["gamma:1b"]), "name:tag"),
    ],
)
def test_load_scenario_errors_name_the_json_path(doc: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        load_scenario(json.dumps(doc))
    assert fragment in str(info.value)


def test_load_scenario_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot read scenario file"):
        load_scenario(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text('{"format": 1,\n  "steps": [', encoding="utf-8")
    with pytest.raises(ValueError, match=r"broken\.json: not valid JSON \(line 2"):
        load_scenario(broken)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(_with(["steps", 1, "loaded", 0, "size"], 1.5)), encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad\.json: scenario \$\.steps\[1\]\.loaded\[0\]\.size"):
        load_scenario(bad)


def test_bundled_scenario_loads_and_is_80_seconds() -> None:
    scenario = load_scenario(BUNDLED)
    assert scenario.version == "0.22.1"
    assert 60 <= scenario.period_s <= 90
    assert scenario.sources
    assert all(step.status is None and not step.garbage for step in scenario.steps)
    assert scenario.steps[0].loaded == () and scenario.steps[-1].loaded == ()


def test_generate_reloads_a_loaded_model_at_another_num_ctx() -> None:
    # POST /api/generate {"prompt": "", "options": {"num_ctx": N}} is what the what-if planner sends
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        server.goto(1)  # qwen3:1.7b-q8_0 at 4096: 2,754,892,672 B (seeds)
        r = server.client.post(
            "/api/generate", json={"model": "qwen3:1.7b-q8_0", "prompt": "", "options": {"num_ctx": 32768}}
        )
        assert r.status_code == 200 and r.json()["done_reason"] == "load"
        row = server.ps()[0]
        assert row["context_length"] == 32768
        assert row["size"] == 2_754_892_672 + 28_672 * 114_688 == row["size_vram"]  # + the KV difference
        assert server.client.post("/api/generate", json={"model": "nope", "prompt": ""}).status_code == 404
        assert server.client.post("/api/generate", json={"model": "qwen3:1.7b-q8_0", "prompt": ""}).status_code == 400
        server.goto(2)
        assert server.ps()[0]["size"] == 6_106_141_568  # the scenario's own number again after the step


def test_the_log_file_carries_gins_line_for_every_api_request_served(tmp_path: Path) -> None:
    """A real server logs its pollers too: each Ollama API request the stand-in serves gets gin's access
    line (status, measured latency, client address, method, path with its query); its own /_standin/
    endpoints and what a proxy in front refuses do not."""
    from kvtop.logparse import parse_lines
    from kvtop.logparse.events import GinRequest

    log = tmp_path / "server.log"
    with running(
        ["--manual", "--scenario", str(BUNDLED), "--log-file", str(log), "--require-bearer", "s3cret"]
    ) as server:
        auth = {"Authorization": "Bearer s3cret"}
        server.goto(1)
        assert server.client.get("/api/ps", headers=auth).status_code == 200
        assert server.client.post("/api/show", json={"model": "gemma4:latest"}, headers=auth).status_code == 200
        assert server.client.get("/api/nope?x=1", headers=auth).status_code == 404
        assert server.client.head("/", headers=auth).status_code == 200
        assert server.client.get("/api/ps").status_code == 401  # refused by the "proxy": Ollama never saw it
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and log.read_text(encoding="utf-8").count('"/"') < 1:
            time.sleep(0.05)
        text = log.read_text(encoding="utf-8")
    served = [
        (e.status, e.method, e.path, e.client)
        for e in parse_lines(text.splitlines())
        if isinstance(e, GinRequest) and e.path not in ("/api/chat", "/api/generate")
    ]  # not the scenario's
    assert served == [
        (200, "GET", "/api/ps", "127.0.0.1"),
        (200, "POST", "/api/show", "127.0.0.1"),
        (404, "GET", "/api/nope?x=1", "127.0.0.1"),
        (200, "HEAD", "/", "127.0.0.1"),
    ]
    latencies = [e.latency_s for e in parse_lines(text.splitlines()) if isinstance(e, GinRequest)]
    assert all(lat is not None and 0 < lat < 5 for lat in latencies)
    assert "_standin" not in text
