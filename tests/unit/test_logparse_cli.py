"""``kvtop inspect-log``: ``main_inspect_log(argv)`` on corpus files, stdin, bad input."""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

import pytest

from kvtop.inspect_log import inspect_document, main_inspect_log

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # newline and tab are layout


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = main_inspect_log(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def _stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))


def test_missing_file_is_exit_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = _run([str(tmp_path / "nope.log")], capsys)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and "cannot read" in err


def test_directory_is_unreadable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = _run([str(tmp_path)], capsys)
    assert rc == 2 and "cannot read" in err


def test_bad_arguments_are_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, _ = _run([], capsys)
    assert rc == 2


def test_json_is_the_inspect_document(capsys: pytest.CaptureFixture[str]) -> None:
    path = LOGS / "056-newengine-hybrid-qwen3-coder-next-kv-f16-split-gpu-cpu-20of49.log"
    rc, out, _ = _run([str(path), "--json"], capsys)
    assert rc == 0
    doc = json.loads(out)
    assert doc == json.loads(json.dumps(inspect_document(path.read_text(encoding="utf-8").splitlines())))
    assert doc["loads"][0]["placement"]["cpu_layers"] == 29  # 20 of 49 layers on the GPU (model.placement_reason)
    assert doc["loads"][0]["memory"]["kv"] == {"CUDA0": 1181116006, "CPU": 1610612736}
    assert out.startswith("{\n  ")  # indent=2


def test_human_report_per_load(capsys: pytest.CaptureFixture[str]) -> None:
    # 001: B1 spawn with an estimate and a 44/81 partial offload
    rc, out, _ = _run([str(LOGS / "001-multigpu-4x-partial-offload-fa-kvtype-unsupported-0.5.log")], capsys)
    assert rc == 0
    assert "sha256-feef62aa06ab4162ebd3b9af4ff8383a37bf9544a7d30a3fe4623c8398bd1a28" in out
    assert "era B1" in out and "num_ctx total 64000 = 1 slot(s) × 64000 per slot" in out
    assert "flash attention  enabled" in out and "44/81" in out
    assert "spill: only 44/81 layers offloaded to GPU" in out
    assert "kv ~19.5 GiB" in out  # the scheduler's estimate: marked ~ as on every screen


def test_human_report_memory_in_units_and_exact_bytes(capsys: pytest.CaptureFixture[str]) -> None:
    # 045: KV on CPU, compute on three GPUs
    rc, out, _ = _run([str(LOGS / "045-deepseek-mla-kv-on-cpu-39040mib-3gpus-graph-splits.log")], capsys)
    assert rc == 0
    assert "CPU 30.6 GiB (32,883,343,360 B)" in out
    assert "38.1 GiB (40,936,407,040 B)" in out
    assert "spill: KV cache partly in system memory (CPU)" in out


def test_stdin_binary_crlf_and_invalid_utf8(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = (LOGS / "033-server-config-fa-true-kv-q8_0-wrapped-0.6.6.log").read_bytes().replace(b"\n", b"\r\n")
    data += b'time=2025-04-28T19:02:12.000Z level=WARN source=x.go:1 msg="bad \xff\xfe bytes \x1b[31m"\r\n'
    _stdin(monkeypatch, data)
    rc, out, _ = _run(["-", "--json"], capsys)
    assert rc == 0
    doc = json.loads(out)
    assert doc["server"]["version"] == "0.6.6"
    assert doc["server"]["config"]["OLLAMA_KV_CACHE_TYPE"] == "q8_0"
    _stdin(monkeypatch, data)
    rc, out, _ = _run(["-"], capsys)
    assert rc == 0 and "<stdin>" in out and "OLLAMA_KV_CACHE_TYPE=q8_0" in out
    assert not CONTROL.search(out)


def test_untrusted_text_has_no_control_characters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "evil.log"
    log.write_bytes(
        b"llama_new_context_with_model: KV self size  =  128.00 MiB, K (f16):   64.00 MiB, V (f16):   64.00 MiB\n"
        b"llama_init_from_gpt_params: error: failed to create context with model '/x/\x1b]0;pwned\x07sha'\n"
    )
    rc, out, _ = _run([str(log)], capsys)
    assert rc == 0 and "load failed" in out
    assert not CONTROL.search(out)


@pytest.mark.parametrize("path", sorted(LOGS.glob("*.log")), ids=lambda p: p.stem[:3])
def test_every_corpus_log_reports(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run([str(path)], capsys)
    assert rc == 0 and out.startswith("kvtop inspect-log: ")
    assert not CONTROL.search(out)


def test_context_over_training_finding_in_text_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    # 006 (ollama/ollama#10114): `n_ctx_pre_seq (32768) > n_ctx_train (8192) -- possible training context overflow`
    path = LOGS / "006-cuda-llama_init_from_model-ctx32768-exceeds-train-0.5.log"
    finding = (
        "context over training: 32768 tokens per slot > the model's training context 8192 "
        "(llama.cpp: possible training context overflow)"
    )
    rc, out, _ = _run([str(path)], capsys)
    assert rc == 0
    assert f"    ! {finding}\n" in out
    assert "num_ctx total 32768 = 1 slot(s) × 32768 per slot (model trained on 8192)" in out
    rc, out, _ = _run([str(path), "--json"], capsys)
    assert rc == 0
    (load,) = json.loads(out)["loads"]
    assert load["findings"] == [finding] and load["n_ctx_train"] == 8192


@pytest.mark.parametrize(
    "path",
    sorted([*(LOGS / "posted").glob("*.log"), *(LOGS / "llama-server-runs").glob("*.log")]),
    ids=lambda p: p.stem[:16],
)
def test_every_posted_log_reports(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run([str(path)], capsys)
    assert rc == 0 and out.startswith("kvtop inspect-log: ")
    assert not CONTROL.search(out)
