"""The memory ledger (``kvtop.model.ledger``) and the log lines it is made of, on real lines: the iSWA model's two
KV pools (``posted/ollama-16480-…``, ``llama-server-runs/gemma3-iswa-…``), a hybrid model's recurrent state (corpus
043), the projector (corpus 012's scheduler estimate, llama-server's ``[mtmd]`` line), the host prompt cache and
the slots' context checkpoints (``posted/llama-server-gemma4-mmproj-checkpoints-prompt-cache.log``,
``llama_server/q4_0-fa-auto-np1.log``); measured against NVML per process through the real GPU and process sources
with fakes at their boundaries."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from kvtop.logparse import group_loads, parse_lines
from kvtop.logparse.load_build import Load
from kvtop.logparse.memory_events import ContextCheckpoint, ProjectorEstimate, PromptCacheState
from kvtop.logparse.values import MIB
from kvtop.model.gpu import model_gpu_usage
from kvtop.model.ledger import HOST, UNKNOWN_DEVICE, Ledger, ledger_json, model_ledger
from kvtop.model.views import ModelView
from tests.fakes.nvml import GiB
from tests.ui.mapfakes import one_gpu_nvml, sample_with

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
LOGS = FIXTURES / "logs"
Q8 = "qwen3:1.7b-q8_0"


def _lines(path: Path) -> list[str]:
    return [line for line in path.read_text(encoding="utf-8").splitlines() if not line.startswith("#")]


def _load(path: Path) -> Load:
    (load,) = group_loads(parse_lines(_lines(path)))
    return load


def _mib(text: str) -> int:
    return round(float(text) * MIB)


def _rows(ledger: Ledger) -> list[tuple[str, str, int, str]]:
    return [(r.component, r.device, r.bytes, r.source) for r in ledger.rows]


def _with_load(models: tuple[ModelView, ...], name: str, load: Load) -> tuple[ModelView, ...]:
    return tuple(dataclasses.replace(m, load=load, devices=load.memory) if m.name == name else m for m in models)


def test_prompt_cache_checkpoint_and_projector_lines() -> None:
    events = parse_lines(_lines(LOGS / "posted" / "llama-server-gemma4-mmproj-checkpoints-prompt-cache.log"))
    caches = [e for e in events if isinstance(e, PromptCacheState)]
    assert [(c.prompts, c.size_bytes, c.limit_bytes, c.limit_tokens) for c in caches] == [
        (0, 0, 8192 * MIB, 2649600),
        (1, _mib("404.720"), 8192 * MIB, 2649600),
    ]
    checkpoints = [(e.slot, e.number, e.max_count, e.size_bytes) for e in events if isinstance(e, ContextCheckpoint)]
    assert checkpoints == [
        (9, 1, 32, _mib("90.652")),
        (8, 1, 32, _mib("170.013")),
        (8, 1, 32, _mib("1.329")),
        (7, 1, 32, _mib("1.329")),
        (7, 2, 32, _mib("45.824")),
    ]
    assert [e.size_bytes for e in events if isinstance(e, ProjectorEstimate)] == [_mib("354.46")]


def test_ledger_of_a_llama_server_runner_with_projector_cache_and_checkpoints() -> None:
    load = _load(LOGS / "posted" / "llama-server-gemma4-mmproj-checkpoints-prompt-cache.log")
    # slot 8's second task numbers its checkpoints from 1 again: its first task's 170.013 MiB checkpoint went into
    # the prompt cache (404.720 = 234.707 MiB of state + that checkpoint), so the slots hold 9 + 8 + 7's
    assert (load.checkpoint_count, load.checkpoint_bytes) == (
        4,
        _mib("90.652") + _mib("1.329") + _mib("1.329") + _mib("45.824"),
    )
    view = _view(load)
    ledger = model_ledger(view, None)
    assert _rows(ledger) == [
        ("projector", UNKNOWN_DEVICE, _mib("354.46"), "estimated"),
        ("prompt_cache", HOST, _mib("404.720"), "allocated"),
        ("checkpoints", HOST, load.checkpoint_bytes, "allocated"),
    ]
    host = ledger.measure(HOST)
    assert host is not None and host.remainder_bytes is None and host.measured.value is None
    assert host.listed_bytes == _mib("404.720") + (load.checkpoint_bytes or 0)


def test_ledger_lists_both_kv_pools_of_an_iswa_model() -> None:
    load = _load(LOGS / "posted" / "ollama-16480-era-c-iswa-non-swa-and-swa-kv-caches-0.30.2.log")
    assert _rows(model_ledger(_view(load), None)) == [
        ("kv", "ROCm0", 9216 * MIB, "allocated"),
        ("kv_swa", "ROCm0", 90 * MIB, "allocated"),
        ("output", "ROCm_Host", _mib("1.53"), "allocated"),
    ]
    run = _load(LOGS / "llama-server-runs" / "gemma3-iswa-q8_0-fa-on-np2.log")
    assert _rows(model_ledger(_view(run), None)) == [
        ("weights", "CPU_Mapped", _mib("3.55"), "allocated"),
        ("kv", "CPU", _mib("1.06"), "allocated"),
        ("kv_swa", "CPU", _mib("1.00"), "allocated"),
        ("compute", "CPU", _mib("7.53"), "allocated"),
    ]


def test_ledger_of_a_hybrid_model_keeps_the_recurrent_state() -> None:
    load = _load(LOGS / "043-llamacpp-hybrid-kv-cache-plus-memory-recurrent-sizes.log")
    assert _rows(model_ledger(_view(load), None)) == [
        ("kv", UNKNOWN_DEVICE, 16384 * MIB, "allocated"),
        ("recurrent", UNKNOWN_DEVICE, _mib("598.50"), "allocated"),
    ]


def test_ledger_projector_from_the_scheduler_estimate() -> None:
    load = _load(LOGS / "012-cpu-only-newengine-offload-parallel2-quoted.log")
    assert _rows(model_ledger(_view(load), None)) == [
        ("projector", UNKNOWN_DEVICE, _mib("795.9") + 1 * GiB, "estimated")
    ]


def test_prompt_cache_of_a_real_llama_server_run() -> None:
    load = _load(FIXTURES / "llama_server" / "q4_0-fa-auto-np1.log")
    assert load.prompt_cache is not None
    assert (load.prompt_cache.prompts, load.prompt_cache.size_bytes) == (1, _mib("0.010"))
    assert ("prompt_cache", HOST, _mib("0.010"), "allocated") in _rows(model_ledger(_view(load), None))


def test_measured_minus_listed_on_the_paired_gpu(tmp_path: Path) -> None:
    """The runner's NVML memory against the 16480 load's buffers on its one GPU: the remainder is shown, and
    negative when the log lists more than NVML measures."""
    load = _load(LOGS / "posted" / "ollama-16480-era-c-iswa-non-swa-and-swa-kv-caches-0.30.2.log")
    gpu, procs, models = sample_with(tmp_path, one_gpu_nvml())
    models = _with_load(models, Q8, load)
    usage = model_gpu_usage(gpu, procs, models)
    view = next(m for m in models if m.name == Q8)
    ledger = model_ledger(view, usage[(view.name, view.digest)])
    measured = 6 * GiB + 256 * 1024 * 1024  # one_gpu_nvml: the q8 runner's PID
    listed = 9216 * MIB + 90 * MIB
    dev = ledger.measure("ROCm0")
    assert dev is not None and dev.measured.value == measured and dev.measured.source == "reported"
    assert (dev.listed_bytes, dev.remainder_bytes) == (listed, measured - listed)
    assert dev.remainder_bytes < 0 and dev.remainder.source == "estimated"  # never hidden, even negative
    gpus = ledger.measure("GPUs")
    assert gpus is not None and gpus.remainder_bytes == measured - listed
    doc = ledger_json(ledger)
    assert doc["listed_bytes"] == listed + _mib("1.53")
    assert {"scope": "ROCm0", "listed_bytes": listed, "measured_bytes": measured}.items() <= doc["measures"][0].items()


def test_without_a_log_the_rows_are_the_api_figures(tmp_path: Path) -> None:
    gpu, procs, models = sample_with(tmp_path, one_gpu_nvml())
    view = next(m for m in models if m.name == Q8)
    ledger = model_ledger(view, model_gpu_usage(gpu, procs, models)[(view.name, view.digest)])
    assert not ledger.from_log
    assert [(r.component, r.device) for r in ledger.rows] == [(c, UNKNOWN_DEVICE) for c in ("weights", "kv", "compute")]
    gpus = ledger.measure("GPUs")
    assert gpus is not None and gpus.measured.value == 6 * GiB + 256 * 1024 * 1024 and gpus.remainder_bytes is None


def _view(load: Load) -> ModelView:
    from tests.fakes.scenario import demo_models

    model = demo_models()[0]
    return dataclasses.replace(model, load=load, devices=load.memory)


def test_ledger_of_a_recurrent_runner_lists_its_rs_buffers() -> None:
    """A real llama-server run of a recurrent (Mamba) model: its ``RS buffer size`` line gives the device, its size
    line (``2 seqs  0 rs_seq``, this build's form) the whole; no KV cache."""
    load = _load(LOGS / "llama-server-runs" / "mamba-recurrent-np2.log")
    assert load.recurrent_size_bytes == _mib("0.15") and load.kv_bytes is None
    assert _rows(model_ledger(_view(load), None)) == [
        ("weights", "CPU_Mapped", _mib("1.94"), "allocated"),
        ("recurrent", "CPU", _mib("0.15"), "allocated"),
        ("compute", "CPU", _mib("3.79"), "allocated"),
        ("prompt_cache", HOST, 0, "allocated"),
        ("checkpoints", HOST, load.checkpoint_bytes, "allocated"),
    ]
    assert load.checkpoint_count == 1


def test_a_draft_models_buffers_are_its_own_not_the_targets() -> None:
    """A real llama-server run with --model-draft: the draft's load lines after ``loading draft model`` neither start
    a new load nor replace the target's figures (what ``ollama ps`` shows for such a runner); the ledger lists them
    as the ``draft`` row."""
    path = LOGS / "llama-server-runs" / "draft-gemma3-iswa-np1.log"
    events = parse_lines(_lines(path))
    assert [e.kind for e in events if e.kind == "draft_model_load"] == ["draft_model_load"]
    load = _load(path)  # one load, not two
    assert load.memory["kv"] == {"CPU": _mib("0.53") + _mib("0.50")}  # the target's q8_0 cache
    assert load.kv_swa == {"CPU": _mib("0.50")}
    assert load.draft == {
        "weights": {"CPU_Mapped": _mib("3.55")},
        "output": {"CPU": 0},
        "kv": {"CPU": _mib("1.00") + _mib("0.94")},  # the draft's f16 cache
        "compute": {"CPU": _mib("7.53")},
    }
    assert load.num_ctx_total == 4096 and load.kv_type_k == "q8_0"  # the draft's context lines are not the target's
    draft = [r for r in model_ledger(_view(load), None).rows if r.component == "draft"]
    assert [(r.device, r.bytes, r.source) for r in draft] == [
        ("CPU", _mib("1.00") + _mib("0.94") + _mib("7.53"), "allocated"),
        ("CPU_Mapped", _mib("3.55"), "allocated"),
    ]
