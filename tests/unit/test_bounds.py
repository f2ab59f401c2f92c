"""One rule for sizes and counts from the API and from the log.

The log parser took ``-1.0 GiB``, ``99999999999 GiB`` or a 20-digit token count as they came, and
they reached inspect-log reports, alerts and JSON, while ``/api/ps``'s reader rejects anything
outside ``0 <= n <= 2**63 - 1``. Here real corpus lines are altered to carry such numbers: each
original line is parsed first (the value it must give), then the altered one (not known).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kvtop.logparse import parse_lines
from kvtop.logparse.values import mib_bytes, size_bytes, size_list, to_count, to_float, to_int
from kvtop.core.bounds import INT64_MAX, count_from_text, count_or_none
from kvtop.sources import ollama_decode

REPO = Path(__file__).resolve().parents[2]
HUGE = "99999999999999999999"  # > 2**63
OVER = str(2**63)


# --------------------------------------------------------------------------------------------
# The rule, and that the API reader follows the same one


VALUES: list[Any] = [
    0,
    1,
    4096,
    INT64_MAX,
    INT64_MAX + 1,
    -1,
    2**64,
    True,
    False,
    1.0,
    1.5,
    -0.0,
    float("nan"),
    float("inf"),
    2.0**63,
    2.0**62,
    "5",
    None,
    [1],
]


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_api_reader_and_bounds_apply_the_same_rule(value: Any) -> None:
    assert ollama_decode._int_or_none(value) == count_or_none(value)


def test_count_from_text_bounds() -> None:
    assert count_from_text("0") == 0 and count_from_text(str(INT64_MAX)) == INT64_MAX
    for bad in ("-1", OVER, HUGE, "1" * 5000, "1.5", "", "x", None):
        assert count_from_text(bad) is None, bad
    assert to_count is count_from_text


def test_size_readers_bounds() -> None:
    assert size_bytes("1.5 GiB") == 1610612736
    assert size_bytes("-1.5 GiB") is None
    assert size_bytes("99999999999 GiB") is None  # 1.07e20 bytes
    assert size_bytes("8191 PiB") == 8191 * 2**50 and size_bytes("8192 PiB") is None  # 8192 PiB = 2**63
    assert mib_bytes("577.22") == round(577.22 * 2**20) and mib_bytes(HUGE) is None
    assert size_list("[22.0 GiB 22.0 GiB]") == (22 * 2**30, 22 * 2**30)
    assert size_list("[22.0 GiB -22.0 GiB]") == ()  # per device: one bad item voids the list
    assert size_list("[22.0 GiB, 99999999999 GiB]") == ()


def test_to_int_keeps_meaningful_negatives_but_not_out_of_int64() -> None:
    assert to_int("-1") == -1  # layers.requested=-1: "as many as fit"
    assert to_int(OVER) is None and to_int("-" + HUGE) is None
    assert to_float("nan") is None and to_float("inf") is None and to_float("25.01") == 25.01


# --------------------------------------------------------------------------------------------
# Real corpus lines, altered

OFFLOAD = (
    "time=2025-02-18T02:21:25.646Z level=INFO source=server.go:130 msg=offload library=cuda layers.requested=-1 "
    'layers.model=81 layers.offload=44 layers.split=11,11,11,11 memory.available="[22.0 GiB 22.0 GiB 22.0 GiB '
    '22.0 GiB]" memory.gpu_overhead="0 B" memory.required.full="127.4 GiB" memory.required.partial="87.1 GiB" '
    'memory.required.kv="19.5 GiB"'
)
TRUNC = (
    'time=2025-04-22T11:21:47.546Z level=WARN source=runner.go:131 msg="truncating input prompt" '
    "limit=2048 prompt=5065 keep=5 new=2048"
)

CASES = [
    # (original line, altered line, event kind, field, value of the original)
    (
        OFFLOAD,
        OFFLOAD.replace('kv="19.5 GiB"', 'kv="-19.5 GiB"'),
        "scheduler_estimate",
        "kv_bytes",
        round(19.5 * 2**30),
    ),
    (
        OFFLOAD,
        OFFLOAD.replace('full="127.4 GiB"', 'full="99999999999 GiB"'),
        "scheduler_estimate",
        "full_bytes",
        round(127.4 * 2**30),
    ),
    (OFFLOAD, OFFLOAD.replace("22.0 GiB]", "-22.0 GiB]"), "scheduler_estimate", "available_bytes", (22 * 2**30,) * 4),
    (OFFLOAD, OFFLOAD.replace("layers.model=81", f"layers.model={HUGE}"), "scheduler_estimate", "layers_model", 81),
    (OFFLOAD, OFFLOAD.replace("layers.offload=44", "layers.offload=-44"), "scheduler_estimate", "layers_offload", 44),
    (TRUNC, TRUNC.replace("prompt=5065", "prompt=-5065"), "truncation", "prompt", 5065),
    (TRUNC, TRUNC.replace("limit=2048", f"limit={OVER}"), "truncation", "limit", 2048),
    (
        "llama_kv_cache: size = 16384.00 MiB (262144 cells, 16 layers, 4/1 seqs)",
        f"llama_kv_cache: size = 16384.00 MiB ({HUGE} cells, 16 layers, 4/1 seqs)",
        "kv_summary",
        "cells",
        262144,
    ),
    (
        "llama_kv_cache: size = 16384.00 MiB (262144 cells, 16 layers, 4/1 seqs)",
        f"llama_kv_cache: size = {HUGE}.00 MiB (262144 cells, 16 layers, 4/1 seqs)",
        "kv_summary",
        "size_bytes",
        16384 * 2**20,
    ),
    (
        "llama_kv_cache_init: kv_size = 32768, offload = 1, type_k = 'f16', type_v = 'f16', n_layer = 24, can_shift = 1",
        f"llama_kv_cache_init: kv_size = {HUGE}, offload = 1, type_k = 'f16', type_v = 'f16', n_layer = 24, can_shift = 1",
        "kv_summary",
        "cells",
        32768,
    ),
]

DROPPED = [
    # (original, altered, kind): the altered line gives no such event (its figure is all it says)
    (
        "llama_kv_cache_init:      CUDA0 KV buffer size =  6784.00 MiB",
        f"llama_kv_cache_init:      CUDA0 KV buffer size =  {HUGE}.00 MiB",
        "allocation",
    ),
    (
        'time=2025-07-18T14:50:44.599Z level=INFO source=ggml.go:362 msg="offloaded 40/41 layers to GPU"',
        f'time=2025-07-18T14:50:44.599Z level=INFO source=ggml.go:362 msg="offloaded {HUGE}/41 layers to GPU"',
        "offloaded_layers",
    ),
    (
        "load_tensors: offloaded 25/25 layers to GPU",
        f"load_tensors: offloaded 25/{HUGE} layers to GPU",
        "offloaded_layers",
    ),
    (
        "llama_new_context_with_model: n_ctx      = 32768",
        f"llama_new_context_with_model: n_ctx      = {HUGE}",
        "context_params",
    ),
    (
        'time=2025-02-18T02:21:25.646Z level=INFO source=device.go:256 msg="kv cache" device=CUDA0 size="1.5 GiB"',
        'time=2025-02-18T02:21:25.646Z level=INFO source=device.go:256 msg="kv cache" device=CUDA0 size="99999999999 GiB"',
        "allocation",
    ),
    (
        'time=2025-02-18T02:21:25.646Z level=INFO source=device.go:256 msg="kv cache" device=CPU size="112.0 MiB"',
        'time=2025-02-18T02:21:25.646Z level=INFO source=device.go:256 msg="kv cache" device=CPU size="-112.0 MiB"',
        "allocation",
    ),
]


def _one(lines: list[str], kind: str) -> Any:
    found = [e for e in parse_lines(lines) if e.kind == kind]
    assert len(found) == 1, (kind, found)
    return found[0]


@pytest.mark.parametrize(
    ("original", "altered", "kind", "field", "value"), CASES, ids=[f"{c[2]}.{c[3]}-{i}" for i, c in enumerate(CASES)]
)
def test_altered_corpus_line_reads_not_known(original: str, altered: str, kind: str, field: str, value: Any) -> None:
    assert getattr(_one([original], kind), field) == value
    assert getattr(_one([altered], kind), field) in (None, ())


@pytest.mark.parametrize(("original", "altered", "kind"), DROPPED, ids=[f"{c[2]}-{i}" for i, c in enumerate(DROPPED)])
def test_altered_corpus_line_gives_no_event(original: str, altered: str, kind: str) -> None:
    _one([original], kind)
    assert [e for e in parse_lines([altered]) if e.kind == kind] == []


def test_altered_timing_and_slot_lines() -> None:
    base = "prompt eval time =     519.73 ms /    13 tokens (   39.98 ms per token,    25.01 tokens per second)"
    ok = [e for e in parse_lines([base, base.replace("prompt eval", "       eval")]) if e.kind == "request_timing"]
    assert ok[0].prompt_tokens == 13
    bad = [e for e in parse_lines([base.replace("13 tokens", f"{HUGE} tokens")]) if e.kind == "request_timing"]
    assert bad[0].prompt_tokens is None


def _numbers(obj: Any) -> list[int | float]:
    if isinstance(obj, bool):
        return []
    if isinstance(obj, (int, float)):
        return [obj]
    if isinstance(obj, dict):
        return [n for v in obj.values() for n in _numbers(v)]
    if isinstance(obj, list):
        return [n for v in obj for n in _numbers(v)]
    return []


def test_inspect_log_json_carries_no_out_of_range_number(tmp_path: Path) -> None:
    altered = [c[1] for c in CASES] + [c[1] for c in DROPPED]
    log = tmp_path / "server.log"
    log.write_text("\n".join(altered) + "\n", encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "kvtop", "inspect-log", str(log), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    numbers = _numbers(doc)
    assert numbers, "the report has figures (line numbers at least)"
    bad = [
        n for n in numbers if (isinstance(n, float) and not math.isfinite(n)) or n > INT64_MAX or (n < 0 and n != -1)
    ]  # -1: layers.requested, "as many as fit"
    assert bad == []
    text = proc.stdout
    assert HUGE not in text and "-19.5" not in text
