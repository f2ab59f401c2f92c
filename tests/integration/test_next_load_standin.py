"""The next-load forecast (``kvtop plan MODEL --json`` ``next_load``) against scripted loads on the
stand-in, whose scheduler (``kvtop.demo.standin_sched``) follows Ollama's rules (docs/ollama-scheduler.md):
kvtop predicts, the test loads the model with a generate, and ``/api/ps`` must then show the prediction —
the models unloaded, the num_ctx, 100% on the GPU — and the stand-in's own record of the load agrees.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kvtop.plan_cli import main_plan
from tests.standin import BUNDLED, Standin, running

GiB = 1024**3
VRAM = 24 * GiB


def _scenario(tmp_path: Path, loaded: list[tuple[str, int, float | None]]) -> Path:
    """Five qwen3-1.7B models (the bundled one's keys, other names and file sizes), a 24 GiB GPU
    (``--vram-bytes``), Ollama 0.33.0; ``loaded``: (name, size_vram, expires_in_s) of step 0."""
    data = json.loads(BUNDLED.read_text(encoding="utf-8"))
    template = data["models"]["qwen3:1.7b-q8_0"]
    sizes = {"alpha:latest": 8, "bravo:latest": 5, "charlie:latest": 4, "delta:latest": 3, "newbie:latest": 2}
    data["models"] = {
        name: {**template, "digest": f"{i:02d}" * 32, "file_size": gib * GiB, "runner": None}
        for i, (name, gib) in enumerate(sizes.items())
    }
    for m in data["models"].values():
        m.pop("runner")
    data["version"] = "0.33.0"
    data.pop("log_version", None)
    data.pop("machine", None)
    data["steps"] = [
        {
            "at_s": 0,
            "label": "loaded",
            "loaded": [
                {
                    "model": n,
                    "context_length": 4096,
                    "size": vram,
                    "size_vram": vram,
                    "expires_in_s": "forever" if keep is None else keep,
                }
                for n, vram, keep in loaded
            ],
        }
    ]
    path = tmp_path / "sched.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.fixture
def standin(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Standin]:
    path = _scenario(tmp_path, request.param)
    with running(["--scenario", str(path), "--manual", "--vram-bytes", str(VRAM)]) as server:
        assert server.client.post("/_standin/sched", json={"enabled": True}).json() == {"enabled": True}
        yield server


def _plan(server: Standin, model: str, capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, Any]:
    used = sum(r["size_vram"] for r in server.ps())
    argv = [model, "--host", server.url, "--json", "--gpu-free", str(VRAM - used), "--gpu-total", str(VRAM)]
    argv += ["--gpus", "1", *extra]
    capsys.readouterr()
    assert main_plan(argv) == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert doc["next_load"] is not None
    return doc["next_load"]


def _load(server: Standin, model: str) -> None:
    r = server.client.post("/api/generate", json={"model": model}, timeout=30)
    assert r.status_code == 200, r.text


def _check(server: Standin, before: list[str], nl: dict[str, Any], model: str) -> None:
    ps = {r["name"]: r for r in server.ps()}
    unloaded = [n for n in before if n not in ps]
    assert unloaded == [e["name"] for e in nl["evicted"]]
    assert sorted(ps) == sorted(nl["stays"] + [model])
    row = ps[model]
    assert row["context_length"] == nl["num_ctx"]
    assert nl["verdict"] == "fits" and row["size_vram"] == row["size"]  # 100% on the GPU, as predicted
    record = server.client.get("/_standin/sched").json()["loads"][-1]
    assert record["unloaded"] == unloaded and record["num_ctx"] == nl["num_ctx"]


def _env(server: Standin, **env: str) -> list[str]:
    """Set the stand-in's scheduler variables; the same as ``kvtop plan --env`` arguments."""
    assert server.client.post("/_standin/env", json=env).status_code == 200
    return [f"--env={k}={v}" for k, v in env.items()]


# three loaded (the default limit is 3 per GPU: 4 lets memory decide)
LOADED_3 = [("alpha:latest", 9 * GiB, 300.0), ("bravo:latest", 6 * GiB, 300.0), ("charlie:latest", 4 * GiB, None)]


@pytest.mark.parametrize("standin", [LOADED_3], indirect=True)
def test_evicts_what_the_forecast_says_to_make_room(standin: Standin, capsys: pytest.CaptureFixture[str]) -> None:
    # free 5 GiB: the 32768-token default (24 GiB tier) needs ~5.8 GiB > 80% of 5 → one model goes:
    # charlie is forever (last); alpha and bravo have 5m: the one whose blob sorts first
    before = [r["name"] for r in standin.ps()]
    nl = _plan(standin, "newbie", capsys, *_env(standin, OLLAMA_MAX_LOADED_MODELS="4"))
    assert nl["num_ctx"] == 32768 and nl["num_ctx_source"] == "default"
    assert len(nl["evicted"]) == 1 and nl["evicted"][0]["reason"] == "memory"
    assert nl["evicted"][0]["name"] in ("alpha:latest", "bravo:latest")
    # the text says the table's fit is beside the models loaded now, the forecast after the unload
    used = sum(r["size_vram"] for r in standin.ps())
    argv = ["newbie", "--host", standin.url, "--gpu-free", str(VRAM - used), "--gpu-total", str(VRAM), "--gpus", "1"]
    argv.append("--env=OLLAMA_MAX_LOADED_MODELS=4")
    assert main_plan(argv) == 0
    text = capsys.readouterr().out
    assert "fit now   in the GPU memory free now, beside the models loaded now; a load first unloads (below)" in text
    assert f"  unloads {nl['evicted'][0]['name']}: to make room" in text
    _load(standin, "newbie")
    _check(standin, before, nl, "newbie:latest")


@pytest.mark.parametrize("standin", [LOADED_3], indirect=True)
def test_an_idle_model_goes_before_one_in_use(standin: Standin, capsys: pytest.CaptureFixture[str]) -> None:
    env = _env(standin, OLLAMA_MAX_LOADED_MODELS="4")
    first = _plan(standin, "newbie", capsys, *env)["evicted"][0]["name"]
    r = standin.client.post("/_standin/busy", json={"model": first, "requests": 1})
    assert r.status_code == 200
    before = [r["name"] for r in standin.ps()]
    nl = _plan(standin, "newbie", capsys, *env, "--in-use", first)
    assert [e["name"] for e in nl["evicted"]] != [first] and len(nl["evicted"]) == 1
    _load(standin, "newbie")
    _check(standin, before, nl, "newbie:latest")


@pytest.mark.parametrize(
    "standin", [[("alpha:latest", 2 * GiB, 300.0), ("bravo:latest", 2 * GiB, 600.0)]], indirect=True
)
def test_max_loaded_models_unloads_one_with_room_to_spare(standin: Standin, capsys: pytest.CaptureFixture[str]) -> None:
    env = _env(standin, OLLAMA_MAX_LOADED_MODELS="2", OLLAMA_CONTEXT_LENGTH="8192")
    before = [r["name"] for r in standin.ps()]
    nl = _plan(standin, "delta", capsys, *env)
    # at the limit, the shortest keep-alive (alpha, 5m) goes though 20 GiB are free
    assert [(e["name"], e["reason"]) for e in nl["evicted"]] == [("alpha:latest", "max_loaded")]
    assert (nl["num_ctx"], nl["num_ctx_source"], nl["max_loaded"]) == (8192, "service", 2)
    _load(standin, "delta")
    _check(standin, before, nl, "delta:latest")


@pytest.mark.parametrize(
    "standin", [[("alpha:latest", 10 * GiB, 300.0), ("bravo:latest", 10 * GiB, 600.0)]], indirect=True
)
def test_all_in_use_the_load_waits_for_the_first_in_order(standin: Standin, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("alpha:latest", "bravo:latest"):
        assert standin.client.post("/_standin/busy", json={"model": name, "requests": 1}).status_code == 200
    before = [r["name"] for r in standin.ps()]
    nl = _plan(standin, "newbie", capsys, "--in-use", "alpha", "--in-use", "bravo")
    assert [(e["name"], e["waits"]) for e in nl["evicted"]] == [("alpha:latest", True)]
    done: list[int] = []
    worker = threading.Thread(
        target=lambda: done.append(
            standin.client.post("/api/generate", json={"model": "newbie"}, timeout=60).status_code
        )
    )
    worker.start()
    try:
        while standin.client.get("/_standin/sched").json()["waiting"] != ["alpha:latest"]:
            pass  # the load is waiting for alpha's request (a state, polled)
        assert sorted(r["name"] for r in standin.ps()) == ["alpha:latest", "bravo:latest"]
        standin.client.post("/_standin/busy", json={"model": "alpha:latest", "requests": 0})
    finally:
        worker.join(60)
    assert done == [200]
    _check(standin, before, nl, "newbie:latest")


@pytest.mark.parametrize("standin", [[("alpha:latest", 9 * GiB, 300.0)]], indirect=True)
def test_a_local_gguf_file(standin: Standin, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """``kvtop plan --gguf PATH``: the model from the file's header (written here, GGUF v3), the
    server's loaded models from the stand-in."""
    from tests.unit.test_gguf_file import tiny_llama

    path = tmp_path / "tiny.gguf"
    tiny_llama(path)
    argv = ["--gguf", str(path), "--host", standin.url, "--json", "--gpu-free", str(15 * GiB)]
    argv += ["--gpu-total", str(VRAM)]
    assert main_plan(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["model"], doc["architecture"], doc["block_count"], doc["context_train"]) == (
        "tiny.gguf",
        "llama",
        2,
        8192,
    )
    assert doc["version"] == "0.33.0" and doc["source"].startswith(f"--gguf {path} (GGUF v3)")
    nl = doc["next_load"]
    # the 24 GiB tier's 32768 clamped to the file's training context; tiny: nothing unloaded
    assert (nl["num_ctx"], nl["num_ctx_source"], nl["evicted"], nl["stays"]) == (
        8192,
        "estimated",
        [],
        ["alpha:latest"],
    )
    assert nl["verdict"] == "fits"


@pytest.mark.parametrize("standin", [LOADED_3], indirect=True)
def test_plan_all_gives_each_model_the_same_forecast(standin: Standin, capsys: pytest.CaptureFixture[str]) -> None:
    env = _env(standin, OLLAMA_MAX_LOADED_MODELS="4")
    one = _plan(standin, "newbie", capsys, *env)
    used = sum(r["size_vram"] for r in standin.ps())
    argv = ["--all", "--host", standin.url, "--json", "--gpu-free", str(VRAM - used), "--gpu-total", str(VRAM)]
    assert main_plan([*argv, "--gpus", "1", *env]) == 0
    rows = {m["name"]: m["next_load"] for m in json.loads(capsys.readouterr().out)["models"]}
    assert rows["newbie:latest"]["evicted"] == one["evicted"] and rows["newbie:latest"]["num_ctx"] == 32768
    assert rows["alpha:latest"]["verdict"] == "loaded" and rows["alpha:latest"]["evicted"] == []


@pytest.mark.parametrize("standin", [[("alpha:latest", 2 * GiB, 300.0)]], indirect=True)
def test_num_parallel_multiplies_the_runner_context(standin: Standin, capsys: pytest.CaptureFixture[str]) -> None:
    env = _env(standin, OLLAMA_NUM_PARALLEL="2", OLLAMA_CONTEXT_LENGTH="8192")
    used = sum(r["size_vram"] for r in standin.ps())
    argv = ["delta", "--host", standin.url, "--json", "--gpu-free", str(VRAM - used), "--gpu-total", str(VRAM), *env]
    assert main_plan(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    nl = doc["next_load"]
    assert (nl["num_ctx"], nl["parallel"], nl["parallel_source"], nl["runner_ctx"]) == (8192, 2, "service", 16384)
    assert doc["rows"][0]["parallel"] == 2  # the table at the server's slots too
    _load(standin, "delta")
    record = standin.client.get("/_standin/sched").json()["loads"][-1]
    assert (record["num_ctx"], record["parallel"], record["unloaded"]) == (8192, 2, [])
    assert {r["name"]: r["context_length"] for r in standin.ps()}["delta:latest"] == 8192


@pytest.mark.parametrize("standin", [LOADED_3], indirect=True)
def test_a_server_setting_restarts_the_server_first(standin: Standin, capsys: pytest.CaptureFixture[str]) -> None:
    # --kv q8_0 for a model loaded with the server's f16: OLLAMA_KV_CACHE_TYPE is the server's, so the
    # load comes after a restart that unloads every model (not "already loaded at these settings")
    nl = _plan(standin, "alpha", capsys, "--kv", "q8_0")
    assert nl["kv_type"] == "q8_0" and nl["kv_type_source"] == "requested"
    assert nl["evicted"] == [] and nl["stays"] == [] and nl["verdict"] != "loaded"
    assert nl["notes"][0] == (
        "--kv q8_0: server settings, not the server's now; setting them restarts ollama serve, which unloads"
        " every model (charlie:latest, alpha:latest, bravo:latest): the load starts on an empty server"
    )
    same = _plan(standin, "alpha", capsys)  # at the server's own settings it is loaded: nothing loads
    assert same["verdict"] == "loaded"
