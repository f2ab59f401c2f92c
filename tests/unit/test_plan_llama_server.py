"""Planner predictions against real llama-server allocations (``tests/fixtures/llama_server``).

The logs are the captured stderr of upstream ``llama-server`` (Ollama v0.30+'s runner) loading
the tiny f32 llama of ``tests/llama_fixture.py`` (4 layers, n_embd 128, 4 heads, 2 KV heads,
n_ff 256) in five configurations; ``kvtop.logparse.loads.inspect_lines`` / ``group_loads`` read
them. The KV cache must be exact, the weights equal to the tensor sum within the log's 0.01 MiB
rounding, and compute and total within the error the prediction states.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvtop.logparse.inspect_doc import inspect_lines
from kvtop.logparse.load_build import Load
from kvtop.logparse.load_grouping import group_loads
from kvtop.logparse.parser import iter_events
from kvtop.model import plan
from tests.unit.test_plan_models import tiny_llama_show

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "llama_server"
GOOD = ["f16-fa-on-np1", "q8_0-fa-on-np2", "q4_0-fa-auto-np1", "f16-fa-off-np1-ctx1000", "default-fa-auto-np1"]


def load_of(stem: str) -> Load:
    loads = group_loads(iter_events((FIXTURES / f"{stem}.log").read_text(encoding="utf-8").splitlines()))
    assert len(loads) == 1
    return loads[0]


def spec() -> plan.ModelSpec:
    show = tiny_llama_show()
    return plan.model_spec("tiny", show["model_info"], tensors=show["tensors"])


@pytest.mark.parametrize("stem", GOOD)
def test_prediction_next_to_the_allocation(stem: str) -> None:
    load = load_of(stem)
    cal = plan.calibration_from_load(load)
    assert cal is not None and cal.source == "allocated"
    c = plan.compare(spec(), cal, engine="llama-server")
    rows = {r.component: r for r in c.rows}
    assert rows["KV cache"].error_bytes == 0  # exact
    assert abs(rows["weights"].error_bytes or 0) <= plan.LOG_ROUNDING_BYTES
    for name in ("weights", "KV cache", "compute", "total"):
        assert rows[name].within, (name, rows[name])
    # the compute estimate is within 6% here (the stated error is far wider: ±32 MiB minimum)
    assert abs(rows["compute"].error_percent or 0) < 6.0


@pytest.mark.parametrize("stem", GOOD)
def test_the_inspect_log_document_agrees(stem: str) -> None:
    doc = inspect_lines((FIXTURES / f"{stem}.log").read_text(encoding="utf-8").splitlines())
    (load,) = doc["loads"]
    config = plan.PlanConfig(
        load["num_ctx_per_seq"], load["kv_type_k"], load["parallel"], load["flash_attention"] == "enabled"
    )
    p = plan.predict(spec(), config)
    assert p.kv_bytes == load["kv_bytes"] == sum(load["memory"]["kv"].values())


def test_the_configurations_the_logs_cover() -> None:
    configs = {stem: plan.calibration_from_load(load_of(stem)) for stem in GOOD}
    labels = {stem: cal.config.label() for stem, cal in configs.items() if cal is not None}
    assert labels == {
        "f16-fa-on-np1": "2048 × 1 slot, f16, FA on",
        "q8_0-fa-on-np2": "4096 × 2 slots, q8_0, FA on",
        "q4_0-fa-auto-np1": "8192 × 1 slot, q4_0, FA on",
        "f16-fa-off-np1-ctx1000": "1024 × 1 slot, f16, FA off",
        "default-fa-auto-np1": "2048 × 1 slot, f16, FA on",
    }


@pytest.mark.parametrize("target", ["q8_0-fa-on-np2", "q4_0-fa-auto-np1"])
def test_calibrated_from_one_load_predicts_another(target: str) -> None:
    # anchored to the 2048-cell load, the modelled growth (an f16 mask of 1,024 B per cell at
    # n_ubatch 512) reproduces the other flash-attention loads' compute buffers to the byte
    base = plan.calibration_from_load(load_of("f16-fa-on-np1"))
    real = plan.calibration_from_load(load_of(target))
    assert base is not None and real is not None
    p = plan.predict(spec(), real.config, calibration=base, engine="llama-server")
    assert p.compute_calibrated
    assert p.compute_bytes == real.compute_bytes
    assert p.total_bytes is not None and real.total_bytes is not None
    assert abs(p.total_bytes - real.total_bytes) <= plan.LOG_ROUNDING_BYTES * real.lines


def test_flash_attention_off_adds_the_scores() -> None:
    base = plan.calibration_from_load(load_of("f16-fa-on-np1"))
    off = plan.calibration_from_load(load_of("f16-fa-off-np1-ctx1000"))
    assert base is not None and off is not None
    p = plan.predict(spec(), off.config, calibration=base, engine="llama-server")
    # 1024 cells x 512 tokens x 4 heads x 4 B of f32 scores, less the 1024 cells the mask lost
    assert p.compute_bytes - base.compute_bytes == 1024 * 512 * 4 * 4 - 1024 * 512 * 2
    assert abs(p.compute_bytes - off.compute_bytes) <= plan.LOG_ROUNDING_BYTES * 2


@pytest.mark.parametrize("stem", ["fail-q8_0-fa-off", "fail-q8_0-head-dim-48"])
def test_refused_configurations_are_refused_by_the_planner_too(stem: str) -> None:
    assert plan.calibration_from_load(load_of(stem)) is None  # the runner never got to allocate
    if stem == "fail-q8_0-fa-off":
        p = plan.predict(spec(), plan.PlanConfig(2048, "q8_0", flash_attention=False))
    else:
        odd = {
            "general.architecture": "llama",
            "llama.block_count": 2,
            "llama.context_length": 16384,
            "llama.embedding_length": 192,
            "llama.attention.head_count": 4,
            "llama.attention.head_count_kv": 2,
        }
        p = plan.predict(plan.model_spec("odd", odd, file_size=2_569_011), plan.PlanConfig(2048, "q8_0"))
    assert p.kv is None and p.kv_problem is not None and p.kv_problem.startswith("llama.cpp refuses")
