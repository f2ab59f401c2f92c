"""``kvtop plan`` as a real process: against the stand-in Ollama server, offline, and with a log."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.standin import BUNDLED, REPO, running
from tests.unit.test_plan_models import (
    LLAMA31_8B_WEIGHTS,
    llama31_8b_info,
    llama31_8b_show,
    llama31_8b_tensors,
    tiny_llama_show,
)

MIB = 1024**2
GIB = 1024**3
FIXTURES = REPO / "tests" / "fixtures" / "llama_server"
CLI_WIRED = "main_plan" in (REPO / "kvtop" / "cli" / "__init__.py").read_text(encoding="utf-8")


def plan_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``kvtop plan ARGS`` (through the module until kvtop/cli/__init__.py dispatches ``plan``)."""
    return subprocess.run(
        [sys.executable, "-m", "kvtop.plan_cli", *args], capture_output=True, text=True, timeout=timeout, cwd=str(REPO)
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def llama_scenario(tmp_path: Path) -> Path:
    """A stand-in scenario whose catalog has llama3.1:8b with its tensor list (not loaded)."""
    doc = {
        "format": 1,
        "version": "0.33.0",
        "description": "llama3.1:8b for kvtop plan (model_info: Meta's config; tensors: synthesised Q4_K_M)",
        "models": {
            "llama3.1:8b": {
                "digest": "46e0c10c039e019119339687c3c1757cc81b9da49709a3b3924863ba87ca666e",
                "details": {
                    "format": "gguf",
                    "family": "llama",
                    "families": ["llama"],
                    "parameter_size": "8.0B",
                    "quantization_level": "Q4_K_M",
                },
                "file_size": LLAMA31_8B_WEIGHTS + 8_000_000,
                "note": "file_size: tensor sum + an illustrative 8 MB of header and tokenizer",
                "model_info": llama31_8b_info(),
                "capabilities": ["completion", "tools"],
                "tensors": llama31_8b_tensors(),
            }
        },
        "steps": [{"at_s": 0, "label": "nothing loaded"}],
    }
    path = tmp_path / "llama.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


# --------------------------------------------------------------------------------------------
# against the stand-in


def test_llama31_8b_table_against_a_standin_that_has_it(tmp_path: Path) -> None:
    with running(["--manual", "--scenario", str(llama_scenario(tmp_path))]) as server:
        proc = plan_cli(
            "llama3.1:8b", "--ctx", "32768", "--kv", "f16", "--kv", "q8_0", "--kv", "q4_0", "--host", server.url
        )
        js = plan_cli(
            "llama3.1:8b",
            "--ctx",
            "32768",
            "--kv",
            "f16",
            "--kv",
            "q8_0",
            "--kv",
            "q4_0",
            "--host",
            server.url,
            "--gpu-free",
            "8GiB",
            "--json",
        )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("kvtop plan llama3.1:8b — llama, 32 layers, 8 KV heads × 128")
    table = [line.split() for line in lines if line.strip().startswith("32768")]
    # the units and marks of every screen: KV ~ estimated (4096 / 2176 / 1152 MiB), weights reported
    assert [(row[2], row[6], row[7]) for row in table] == [
        ("f16", "~4.0", "GiB"),
        ("q8_0", "~2.1", "GiB"),
        ("q4_0", "~1.1", "GiB"),
    ]
    assert all(row[4:6] == ["4.6", "GiB"] for row in table)  # weights: the tensor sum (4685.3 MiB)
    assert "free memory not given" in proc.stdout
    assert js.returncode == 0, js.stderr
    doc = json.loads(js.stdout)
    assert doc["model"] == "llama3.1:8b" and doc["engine"] == "llama-server" and doc["version"] == "0.33.0"
    assert doc["weights_bytes"] == LLAMA31_8B_WEIGHTS and doc["layers_exact"] is True
    assert [r["kv_bytes"] for r in doc["rows"]] == [4 * GIB, 2176 * MIB, 1152 * MIB]
    assert [r["fit"]["verdict"] for r in doc["rows"]] == ["spills", "fits", "fits"]
    assert doc["rows"][0]["fit"]["spilled_layers"][0] == 0
    assert all(r["compute_estimated"] is True for r in doc["rows"])
    assert doc["gpu"] == {
        "free_bytes": 8 * GIB,
        "free_source": "--gpu-free",
        "held_bytes": None,
        "reserve_bytes": 0,
        "budget_bytes": 8 * GIB,
    }


def test_json_against_the_bundled_standin_uses_what_the_model_holds() -> None:
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        server.goto(2)  # qwen3:1.7b-q8_0 loaded at 32768: 6,106,141,568 B, 100% GPU
        proc = plan_cli(
            "qwen3:1.7b-q8_0",
            "--host",
            server.url,
            "--ctx",
            "4096",
            "--ctx",
            "40960",
            "--kv",
            "f16",
            "--kv",
            "q8_0",
            "--gpu-free",
            "4GiB",
            "--json",
        )
    assert proc.returncode == 0, proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout)
    assert doc["version"] == "0.22.1" and doc["engine"] == "go-runner"
    assert doc["loaded"] == {"size_bytes": 6_106_141_568, "size_vram_bytes": 6_106_141_568, "context_length": 32768}
    assert doc["gpu"]["budget_bytes"] == 4 * GIB + 6_106_141_568  # free + what this model holds
    assert doc["weights_bytes"] == 2_200_000_000 and doc["layers_exact"] is False
    rows = {(r["num_ctx"], r["kv_type"]): r for r in doc["rows"]}
    assert rows[(4096, "f16")]["kv_bytes"] == 448 * MIB
    assert rows[(40960, "f16")]["kv_bytes"] == 4480 * MIB
    assert rows[(4096, "q8_0")]["kv_bytes"] == 448 * MIB * 34 // 64
    # compute anchored to /api/ps: size − weights − KV at 32768 = 148,045,184 B
    assert all(r["compute_calibrated"] for r in doc["rows"])
    assert "derived from /api/ps" in rows[(4096, "f16")]["compute_note"]
    # the seeds measured 2,754,892,672 B at 4096 (f16): the prediction is within its stated error
    at4096 = rows[(4096, "f16")]
    assert abs(at4096["total_bytes"] - 2_754_892_672) <= at4096["total_error_bytes"]
    assert doc["comparison"]["source"] == "derived"
    assert [r["component"] for r in doc["comparison"]["rows"]] == ["compute", "total"]
    assert all(r["max_num_ctx_on_gpu"] == 40960 for r in doc["rows"])  # the model's maximum fits
    assert {s["env"]["OLLAMA_KV_CACHE_TYPE"] for s in doc["server_settings"]} == {"f16", "q8_0"}


def test_not_loaded_model_plans_from_tags_and_show() -> None:
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        server.goto(0)  # nothing loaded
        proc = plan_cli("qwen3:1.7b-q4_K_M", "--host", server.url, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["loaded"] is None and doc["comparison"] is None and doc["weights_bytes"] == 1_360_000_000
    (row,) = doc["rows"]
    assert row["num_ctx"] == 4096 and row["kv_bytes"] == 448 * MIB and row["fit"] is None
    assert row["compute_calibrated"] is False
    assert any("Ollama's default" in note for note in doc["notes"])


def test_model_without_a_file_size_says_so() -> None:
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        proc = plan_cli("gemma4:latest", "--host", server.url, "--ctx", "8192")
    assert proc.returncode == 0, proc.stderr
    assert "weights   not known" in proc.stdout and "iSWA" in proc.stdout


def test_unknown_model_and_unreachable_server_exit_2() -> None:
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        proc = plan_cli("nosuch:1b", "--host", server.url)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "model 'nosuch:1b' not found" in proc.stderr
    down = plan_cli("qwen3:1.7b-q8_0", "--host", f"http://127.0.0.1:{free_port()}")
    assert down.returncode == 2 and "cannot connect" in down.stderr


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["m", "--kv", "q5"], "unknown KV cache type"),
        (["m", "--gpu-free", "24G"], "ambiguous"),
        (["m", "--ctx", "lots"], "not a context length"),
        (["m", "--parallel", "0"], "slots must be"),
        (["m", "--model-info", "x.json", "--host", "http://127.0.0.1:1"], "offline"),
        (["m", "--model-info", "/nonexistent/x.json"], "cannot read"),
    ],
)
def test_bad_arguments_exit_2(args: list[str], fragment: str) -> None:
    proc = plan_cli(*args)
    assert proc.returncode == 2
    assert fragment in proc.stderr


# --------------------------------------------------------------------------------------------
# offline and with a log


def test_offline_model_info_file(tmp_path: Path) -> None:
    show = tmp_path / "llama3.1-8b.json"
    show.write_text(json.dumps(llama31_8b_show()), encoding="utf-8")
    proc = plan_cli(
        "llama3.1:8b",
        "--model-info",
        str(show),
        "--ctx",
        "32k",
        "--kv",
        "q8_0",
        "--gpu-free",
        "24GB",
        "--parallel",
        "2",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    (row,) = doc["rows"]
    assert row["num_ctx"] == 32768 and row["parallel"] == 2 and row["kv_bytes"] == 2 * 2176 * MIB
    assert row["fit"]["verdict"] == "fits" and doc["gpu"]["budget_bytes"] == 24 * 10**9
    # a bare model_info map with --weights works too
    bare = tmp_path / "info.json"
    bare.write_text(json.dumps(llama31_8b_info()), encoding="utf-8")
    proc2 = plan_cli("llama3.1:8b", "--model-info", str(bare), "--weights", "4.9GB", "--json")
    assert proc2.returncode == 0, proc2.stderr
    assert json.loads(proc2.stdout)["weights_bytes"] == 4_900_000_000


def test_log_gives_the_prediction_next_to_the_allocation(tmp_path: Path) -> None:
    show = tmp_path / "tiny.json"
    show.write_text(json.dumps(tiny_llama_show()), encoding="utf-8")
    log = FIXTURES / "q8_0-fa-on-np2.log"
    proc = plan_cli(
        "tiny",
        "--model-info",
        str(show),
        "--log",
        str(log),
        "--ctx",
        "4096",
        "--kv",
        "q8_0",
        "--parallel",
        "2",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    comparison = {r["component"]: r for r in doc["comparison"]["rows"]}
    assert doc["comparison"]["source"] == "allocated"
    assert comparison["KV cache"]["error_bytes"] == 0
    assert all(r["within"] for r in comparison.values())
    (row,) = doc["rows"]
    assert row["compute_calibrated"] and row["compute_bytes"] == 7_098_860  # the allocation itself
    text = plan_cli("tiny", "--model-info", str(show), "--log", str(log))
    assert text.returncode == 0, text.stderr
    assert "Prediction vs the loaded model" in text.stdout and "OUTSIDE" not in text.stdout


def test_unavailable_kv_math_is_said(tmp_path: Path) -> None:
    info = {"general.architecture": "mllama", "mllama.block_count": 40, "mllama.attention.head_count": 32}
    path = tmp_path / "mllama.json"
    path.write_text(json.dumps(info), encoding="utf-8")
    proc = plan_cli("llama3.2-vision", "--model-info", str(path), "--weights", "7.9GB")
    assert proc.returncode == 0, proc.stderr
    assert "estimate unavailable for mllama" in proc.stdout
    assert "kvtop cannot predict this model's KV cache" in proc.stdout


# --------------------------------------------------------------------------------------------
# --gpu-free auto


def test_gpu_free_auto_without_nvml_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import importlib

    from kvtop import plan_cli as module

    real = importlib.import_module

    def no_pynvml(name: str, package: str | None = None) -> Any:
        if name == "pynvml":
            raise ImportError("No module named 'pynvml'")
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", no_pynvml)
    show = tmp_path / "s.json"
    show.write_text(json.dumps(llama31_8b_show()), encoding="utf-8")
    assert module.main_plan(["llama3.1:8b", "--model-info", str(show), "--gpu-free", "auto"]) == 2
    err = capsys.readouterr().err
    assert "--gpu-free auto needs NVML" in err and "--gpu-free 24GiB" in err


def test_gpu_free_auto_when_nvml_cannot_start(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import importlib

    from kvtop import plan_cli as module

    class Broken:
        def nvmlInit(self) -> None:  # noqa: N802 - NVML's name
            raise RuntimeError("NVML Shared Library Not Found")

    real = importlib.import_module

    def broken_nvml(name: str, package: str | None = None) -> Any:
        return Broken() if name == "pynvml" else real(name, package)

    monkeypatch.setattr(importlib, "import_module", broken_nvml)
    show = tmp_path / "s.json"
    show.write_text(json.dumps(llama31_8b_show()), encoding="utf-8")
    assert module.main_plan(["llama3.1:8b", "--model-info", str(show), "--gpu-free", "auto"]) == 2
    assert "NVML is not available (NVML Shared Library Not Found)" in capsys.readouterr().err


@pytest.mark.gpu
def test_gpu_free_auto_reads_nvml(tmp_path: Path) -> None:
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"NVML does not initialise: {exc}")
    show = tmp_path / "s.json"
    show.write_text(json.dumps(llama31_8b_show()), encoding="utf-8")
    proc = plan_cli("llama3.1:8b", "--model-info", str(show), "--gpu-free", "auto", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["gpu"]["free_source"].startswith("NVML, GPU ") and doc["gpu"]["free_bytes"] > 0
    assert doc["rows"][0]["fit"] is not None


@pytest.mark.skipif(not CLI_WIRED, reason="kvtop/cli/__init__.py does not dispatch `plan` yet")
def test_kvtop_plan_subcommand(tmp_path: Path) -> None:
    show = tmp_path / "s.json"
    show.write_text(json.dumps(llama31_8b_show()), encoding="utf-8")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvtop",
            "plan",
            "llama3.1:8b",
            "--model-info",
            str(show),
            "--ctx",
            "32768",
            "--kv",
            "q4_0",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(REPO),
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["rows"][0]["kv_bytes"] == 1152 * MIB
