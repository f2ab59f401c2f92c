"""``kvtop.model.plan``: table tests of the what-if planner (pure, no I/O)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from kvtop.core.units import parse_bytes
from kvtop.model import kv, plan
from kvtop.model.plan import PlanConfig, model_spec, predict
from tests.unit.test_plan_models import (
    LLAMA31_8B_TOKEN_EMBD,
    LLAMA31_8B_WEIGHTS,
    llama31_8b_info,
    llama31_8b_tensors,
    qwen3_17b_info,
)

MIB = 1024**2
GIB = 1024**3


def llama() -> plan.ModelSpec:
    return model_spec("llama3.1:8b", llama31_8b_info(), tensors=llama31_8b_tensors())


def info(arch: str, **keys: Any) -> dict[str, Any]:
    """``model_info`` with ``attention__head_count`` style keys (``__`` = ``.``)."""
    out: dict[str, Any] = {"general.architecture": arch}
    for key, value in keys.items():
        out[f"{arch}.{key.replace('__', '.')}"] = value
    return out


GEMMA3_12B = info(  # gemma-3-12b config: 48 layers, 16 heads, 8 KV x 256, window 1024 (5 SWA : 1)
    "gemma3",
    block_count=48,
    context_length=131072,
    embedding_length=3840,
    feed_forward_length=15360,
    attention__head_count=16,
    attention__head_count_kv=8,
    attention__key_length=256,
    attention__value_length=256,
    attention__sliding_window=1024,
    vocab_size=262208,
)
QWEN3NEXT_80B = info(  # Qwen3-Next-80B-A3B: 48 layers, 12 full attention (2 KV x 256), 36 Gated DeltaNet
    "qwen3next",
    block_count=48,
    context_length=262144,
    embedding_length=2048,
    feed_forward_length=5120,
    attention__head_count=16,
    attention__head_count_kv=2,
    attention__key_length=256,
    attention__value_length=256,
    full_attention_interval=4,
    ssm__conv_kernel=4,
    ssm__inner_size=4096,
    ssm__state_size=128,
    ssm__group_count=16,
    ssm__time_step_rank=32,
    expert_feed_forward_length=512,
    expert_used_count=10,
)


# --------------------------------------------------------------------------------------------
# parsers and tables


def test_ggml_type_sizes_match_gguf() -> None:
    constants = pytest.importorskip("gguf.constants")
    for quant, (block, size) in constants.GGML_QUANT_SIZES.items():
        assert plan.GGML_TYPE_SIZES[quant.name] == (block, size), quant.name
    assert set(plan.GGML_TYPE_SIZES) == {q.name for q in constants.GGML_QUANT_SIZES}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("25769803776", 25769803776),
        ("24GiB", 24 * GIB),
        ("24GB", 24 * 10**9),
        ("24 gib", 24 * GIB),
        ("1.5TiB", 3 * 2**39),
        ("512MiB", 512 * MIB),
        ("0", 0),
        ("100B", 100),
        ("2.25GB", 2_250_000_000),
    ],
)
def test_parse_bytes(text: str, expected: int) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("24G", "ambiguous"), ("x", "not a byte count"), ("-1GiB", "not a byte count"), ("", "not a byte count")],
)
def test_parse_bytes_rejects(text: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        parse_bytes(text)


@pytest.mark.parametrize(("text", "expected"), [("32768", 32768), ("32k", 32768), ("128K", 131072)])
def test_parse_num_ctx(text: str, expected: int) -> None:
    assert plan.parse_num_ctx(text) == expected


@pytest.mark.parametrize("text", ["0", "k", "32m", "-5"])
def test_parse_num_ctx_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        plan.parse_num_ctx(text)


@pytest.mark.parametrize(
    ("version", "engine"),
    [
        ("0.30.0", "llama-server"),
        ("0.33.0-rc2", "llama-server"),
        ("1.0.0", "llama-server"),
        ("0.24.0", "go-runner"),
        ("0.22.1", "go-runner"),
        (None, "llama-server"),
        ("garbage", "llama-server"),
    ],
)
def test_engine_for_version(version: str | None, engine: str) -> None:
    assert plan.engine_for_version(version) == engine


def test_gpu_budget() -> None:
    assert plan.gpu_budget(None, 5 * GIB) is None
    assert plan.gpu_budget(4 * GIB) == 4 * GIB
    assert plan.gpu_budget(4 * GIB, 6 * GIB) == 10 * GIB  # what the model holds is available to it
    assert plan.gpu_budget(4 * GIB, 6 * GIB, reserve_bytes=GIB) == 9 * GIB
    assert plan.gpu_budget(GIB, None, reserve_bytes=2 * GIB) == 0


# --------------------------------------------------------------------------------------------
# Llama 3.1 8B (the table)


@pytest.mark.parametrize(("cache_type", "kv_bytes"), [("f16", 4 * GIB), ("q8_0", 2176 * MIB), ("q4_0", 1152 * MIB)])
def test_llama31_8b_kv_at_32768(cache_type: str, kv_bytes: int) -> None:
    p = predict(llama(), PlanConfig(32768, cache_type))
    assert p.kv_bytes == kv_bytes
    assert p.weights_bytes == LLAMA31_8B_WEIGHTS
    assert p.total_bytes == LLAMA31_8B_WEIGHTS + kv_bytes + p.compute_bytes
    assert p.gpu_bytes == p.total_bytes - LLAMA31_8B_TOKEN_EMBD  # token_embd stays on the CPU
    assert p.compute_note.startswith("estimated")
    assert not p.compute_calibrated and p.compute_error_bytes == p.compute_bytes // 2


def test_llama31_8b_compute_terms() -> None:
    # llama-server, FA on: f16 mask 32768 x 512 x 2 + logits 128256 x 512 x 4 + 4 x 4096 x 512 x 4
    expected = 32768 * 512 * 2 + 128256 * 512 * 4 + 4 * 4096 * 512 * 4
    assert predict(llama(), PlanConfig(32768)).compute_bytes == expected == 314.5 * MIB
    # FA off: + f32 scores for 32 heads
    off = predict(llama(), PlanConfig(32768, flash_attention=False))
    assert off.compute_bytes == expected + 32768 * 512 * 32 * 4
    # the older Go runner: f32 mask, no batch of logits reserved
    go = predict(llama(), PlanConfig(32768), engine="go-runner")
    assert go.compute_bytes == 32768 * 512 * 4 + 3 * 14336 * 512 * 4 + 4 * 4096 * 512 * 4


def test_llama31_8b_fit_and_spill_layers() -> None:
    spec = llama()
    p = predict(spec, PlanConfig(32768), budget_bytes=8 * GIB)
    assert p.fit is not None and p.fit.verdict == "spills"
    assert p.fit.total_layers == 33
    # llama.cpp offloads from the end: the first blocks spill
    n_spilled = 33 - p.fit.gpu_layers
    assert p.fit.spilled == tuple(range(n_spilled)) and n_spilled > 0
    assert p.fit.gpu_used_bytes <= 8 * GIB
    assert p.fit.text().startswith("spills: layers 0–")
    assert p.fit.processor.endswith("CPU/GPU")
    # one more layer on the GPU would not fit: recompute with the layers' own sizes
    assert spec.layers is not None
    kv_per_layer = p.kv_bytes // 32 if p.kv_bytes else 0
    next_layer = spec.layers.blocks[n_spilled - 1] + kv_per_layer
    assert p.fit.gpu_used_bytes + next_layer > 8 * GIB
    q8 = predict(spec, PlanConfig(32768, "q8_0"), budget_bytes=8 * GIB)
    assert q8.fit is not None and q8.fit.verdict == "fits" and q8.fit.processor == "100% GPU"
    assert q8.fit.gpu_layers == 33 and q8.fit.spilled == ()


def test_marginal_verdict_inside_the_error() -> None:
    spec = llama()
    p = predict(spec, PlanConfig(32768, "q8_0"))
    assert p.gpu_bytes is not None
    at = predict(spec, PlanConfig(32768, "q8_0"), budget_bytes=p.gpu_bytes)
    assert at.fit is not None and at.fit.verdict == "marginal" and at.fit.headroom_bytes == 0
    short = predict(spec, PlanConfig(32768, "q8_0"), budget_bytes=p.gpu_bytes - 1)
    assert short.fit is not None and short.fit.verdict == "marginal" and short.fit.gpu_layers < 33
    far = predict(spec, PlanConfig(32768, "q8_0"), budget_bytes=p.gpu_bytes - p.compute_error_bytes - 1)
    assert far.fit is not None and far.fit.verdict == "spills"


def test_nothing_fits_is_100_percent_cpu() -> None:
    p = predict(llama(), PlanConfig(4096), budget_bytes=100 * MIB)
    assert p.fit is not None and p.fit.gpu_layers == 0 and p.fit.gpu_used_bytes == 0
    assert p.fit.processor == "100% CPU" and p.fit.spilled == tuple(range(32))


# --------------------------------------------------------------------------------------------
# max num_ctx / max slots, checked by recomputing


@pytest.mark.parametrize("cache_type", plan.PLAN_CACHE_TYPES)
@pytest.mark.parametrize("budget_gib", [6, 8, 12, 24])
@pytest.mark.parametrize("parallel", [1, 2])
def test_max_num_ctx_by_recomputation(cache_type: str, budget_gib: int, parallel: int) -> None:
    spec, budget = llama(), budget_gib * GIB
    config = PlanConfig(4096, cache_type, parallel)
    best = plan.max_num_ctx_on_gpu(spec, config, budget)
    assert best is not None

    def need(ctx: int) -> int:
        gpu = predict(spec, dataclasses.replace(config, num_ctx=ctx)).gpu_bytes
        assert gpu is not None
        return gpu

    if best == 0:
        assert need(256) > budget
        return
    assert need(best) <= budget
    assert best == spec.context_train or need(best + 256) > budget
    assert best % 256 == 0 or best == spec.context_train


def test_max_num_ctx_is_the_training_context_when_everything_fits() -> None:
    assert plan.max_num_ctx_on_gpu(llama(), PlanConfig(4096, "q4_0"), 200 * GIB) == 131072
    assert plan.max_num_ctx_on_gpu(llama(), PlanConfig(4096), 1 * GIB) == 0
    assert plan.max_num_ctx_on_gpu(llama(), PlanConfig(4096), None) is None


def test_the_largest_num_ctx_says_which_limit_binds() -> None:
    """The what-if printed 40,960 for f16, q8_0 and q4_0 alike: the training context, not memory.
    Every face now says which limit binds (plan.num_ctx_limit_text)."""
    spec = llama()
    trained = plan.max_num_ctx_on_gpu(spec, PlanConfig(4096, "q4_0"), 200 * GIB)
    assert plan.num_ctx_bound(spec, PlanConfig(4096, "q4_0"), trained) == "training context"
    assert plan.num_ctx_limit_text(spec, PlanConfig(4096, "q4_0"), trained) == "131,072 (training context)"
    tight = plan.max_num_ctx_on_gpu(spec, PlanConfig(4096), 8 * GIB)
    assert tight is not None and 0 < tight < 131072
    assert plan.num_ctx_limit_text(spec, PlanConfig(4096), tight) == f"{tight:,} (memory)"
    assert plan.num_ctx_limit_text(spec, PlanConfig(4096), 0) == "0 (memory: not even 256 fit)"
    assert plan.num_ctx_limit_text(spec, PlanConfig(4096), None) == "?"
    untrained = dataclasses.replace(spec, context_train=None)
    cells = plan.kv.MAX_CONTEXT_CELLS // 2
    assert plan.num_ctx_bound(untrained, PlanConfig(4096, "f16", 2), cells) == "cell limit"


@pytest.mark.parametrize("num_ctx", [2048, 8192, 32768])
@pytest.mark.parametrize("budget_gib", [8, 24, 80])
def test_max_parallel_by_recomputation(num_ctx: int, budget_gib: int) -> None:
    spec, budget = llama(), budget_gib * GIB
    config = PlanConfig(num_ctx, "q8_0")
    best = plan.max_parallel_on_gpu(spec, config, budget)
    assert best is not None

    def need(p: int) -> int:
        gpu = predict(spec, dataclasses.replace(config, parallel=p)).gpu_bytes
        assert gpu is not None
        return gpu

    if best == 0:
        assert need(1) > budget
        return
    assert need(best) <= budget
    assert best == plan.MAX_SLOTS or need(best + 1) > budget


def test_max_slots_is_capped_by_llama_max_seq() -> None:
    assert plan.max_parallel_on_gpu(llama(), PlanConfig(256, "q4_0"), 10_000 * GIB) == plan.MAX_SLOTS == 256
    with pytest.raises(ValueError, match="LLAMA_MAX_SEQ"):
        predict(llama(), PlanConfig(4096, parallel=257))


# --------------------------------------------------------------------------------------------
# qwen3 1.7B against the seeds' measured table (Ollama 0.22.1, ROCm, 100% GPU)

SEEDS_Q8_0 = {  # num_ctx: (/api/ps size, log kv cache)
    2048: (2_517_914_496, 224 * MIB),
    4096: (2_754_892_672, 448 * MIB),
    8192: (3_237_237_632, 896 * MIB),
    16384: (4_189_344_640, 1792 * MIB),  # log prints "1.8 GiB"; the seeds' formula 1.750 GiB
    32768: (6_106_141_568, 3584 * MIB),
    40960: (7_070_831_488, 4480 * MIB),  # 4.375 GiB
}
SEEDS_FILE_SIZE = 2_200_000_000  # the scenario's /api/tags size for qwen3:1.7b-q8_0 ("2.2 GB")


@pytest.mark.parametrize("num_ctx", sorted(SEEDS_Q8_0))
def test_qwen3_kv_equals_the_seeds_log(num_ctx: int) -> None:
    spec = model_spec("qwen3:1.7b-q8_0", qwen3_17b_info(), file_size=SEEDS_FILE_SIZE)
    assert predict(spec, PlanConfig(num_ctx)).kv_bytes == SEEDS_Q8_0[num_ctx][1]


def test_qwen3_compute_growth_4096_to_32768_against_the_seeds() -> None:
    # seeds: size grew 3,351,248,896 B; 28,672 tokens x 114,688 B of it is KV, the rest
    # (62,914,560 B, "約 63 MB") is the compute graph
    growth = SEEDS_Q8_0[32768][0] - SEEDS_Q8_0[4096][0]
    assert growth == 3_351_248_896 and growth - 28672 * 114688 == 62_914_560
    spec = model_spec("qwen3:1.7b-q8_0", qwen3_17b_info(), file_size=SEEDS_FILE_SIZE)
    a = plan.compute_model_bytes(spec, PlanConfig(4096), engine="go-runner")
    b = plan.compute_model_bytes(spec, PlanConfig(32768), engine="go-runner")
    assert b - a == 28672 * 512 * 4  # f32 mask: 56 MiB modelled vs 60 MiB measured (-7%)
    assert abs((b - a) - 62_914_560) <= plan.CALIBRATED_REL_ERROR * (b - a) + plan.CALIBRATED_MIN_ERROR


@pytest.mark.parametrize("num_ctx", sorted(SEEDS_Q8_0))
def test_qwen3_total_against_the_seeds(num_ctx: int) -> None:
    spec = model_spec("qwen3:1.7b-q8_0", qwen3_17b_info(), file_size=SEEDS_FILE_SIZE)
    size = SEEDS_Q8_0[num_ctx][0]
    # uncalibrated, for Ollama 0.22.1's Go runner
    p = predict(spec, PlanConfig(num_ctx), engine=plan.engine_for_version("0.22.1"))
    assert p.total_bytes is not None and abs(p.total_bytes - size) <= p.total_error_bytes
    # calibrated from the 4096 row (compute = size - weights - KV, as the dashboard derives it)
    at4096 = predict(spec, PlanConfig(4096), engine="go-runner")
    assert at4096.kv_bytes is not None
    cal = plan.Calibration(
        PlanConfig(4096), SEEDS_Q8_0[4096][0] - SEEDS_FILE_SIZE - at4096.kv_bytes, "derived", "seeds 4096 row"
    )
    c = predict(spec, PlanConfig(num_ctx), calibration=cal, engine="go-runner")
    assert c.compute_calibrated and c.compute_note.startswith("estimated")
    assert c.total_bytes is not None and abs(c.total_bytes - size) <= c.total_error_bytes
    assert abs(c.total_bytes - size) <= 12 * MIB  # 0.2% of 7 GB at worst (the 40960 row)


def test_weight_quantization_does_not_change_the_growth() -> None:
    # seeds: qwen3:1.7b-fp16 grew by the same 3,351,248,896 B from 4096 to 32768
    q8 = model_spec("a", qwen3_17b_info(), file_size=SEEDS_FILE_SIZE)
    f16 = model_spec("b", qwen3_17b_info(), file_size=4_000_000_000)
    for spec in (q8, f16):
        lo, hi = predict(spec, PlanConfig(4096)), predict(spec, PlanConfig(32768))
        assert lo.total_bytes is not None and hi.total_bytes is not None
        assert hi.total_bytes - lo.total_bytes == 28672 * 114688 + 28672 * 1024


# --------------------------------------------------------------------------------------------
# sliding-window, hybrid, unavailable


def test_sliding_window_gemma3() -> None:
    spec = model_spec("gemma3:12b", GEMMA3_12B, file_size=8_100_000_000)
    assert isinstance(spec.layout, kv.KVLayout)
    p = predict(spec, PlanConfig(32768))
    assert p.kv is not None
    assert p.kv == kv.kv_allocation(spec.layout, 32768)  # the planner adds nothing to the KV math
    assert (p.kv.full_layers, p.kv.swa_layers, p.kv.swa_cells) == (8, 40, 1536)
    row = 8 * 256 * 2
    assert p.kv_bytes == 8 * 2 * row * 32768 + 40 * 2 * row * 1536
    # the SWA cache has its own mask in the compute graph
    expected_mask = (32768 + 1536) * 512 * 2
    terms = expected_mask + 262208 * 512 * 4 + 4 * 3840 * 512 * 4
    assert p.compute_bytes == terms
    # going from 32k to 128k grows only the 8 full layers
    big = predict(spec, PlanConfig(131072))
    assert big.kv_bytes is not None and p.kv_bytes is not None
    assert big.kv_bytes - p.kv_bytes == 8 * 2 * row * (131072 - 32768)
    best = plan.max_num_ctx_on_gpu(spec, PlanConfig(4096), 16 * GIB)
    assert best is not None and 0 < best < 131072
    at, over = predict(spec, PlanConfig(best)).gpu_bytes, predict(spec, PlanConfig(best + 256)).gpu_bytes
    assert at is not None and over is not None and at <= 16 * GIB < over


def test_hybrid_qwen3next_counts_the_recurrent_state() -> None:
    spec = model_spec("qwen3-next:80b", QWEN3NEXT_80B, file_size=50_000_000_000)
    p = predict(spec, PlanConfig(65536, parallel=2), budget_bytes=40 * GIB)
    per_layer_state = (3 * (4096 + 2 * 16 * 128) + 128 * 4096) * 4
    assert p.recurrent_bytes == 2 * 36 * per_layer_state
    assert p.kv is not None and p.kv.full_layers == 12
    assert p.kv_bytes == 12 * 2 * (2 * 256) * 2 * 65536 * 2
    assert p.total_bytes == 50_000_000_000 + p.kv_bytes + p.recurrent_bytes + p.compute_bytes
    assert spec.n_ff == 5120  # max(dense ff, 512 x 10 active experts)
    assert p.fit is not None and p.fit.verdict == "spills"
    assert p.fit.gpu_used_bytes + p.fit.cpu_bytes == p.gpu_bytes  # layers (weights + KV + state) add up


@pytest.mark.parametrize(
    ("model_info", "fragment"),
    [
        (info("mllama", block_count=40, attention__head_count=32), "cross-attention"),
        (info("bert", block_count=12, attention__head_count=12), "no KV cache"),
        (
            {
                "general.architecture": "deepseek4",
                "deepseek4.context_length": 1048576,
                "deepseek4.embedding_length": 7168,
            },
            "stub",
        ),
    ],
)
def test_unavailable_kv_math_is_said_not_guessed(model_info: dict[str, Any], fragment: str) -> None:
    spec = model_spec("m", model_info, file_size=10 * GIB)
    assert spec.kv_reason is not None and fragment in spec.kv_reason
    p = predict(spec, PlanConfig(4096), budget_bytes=80 * GIB)
    assert p.kv is None and p.kv_problem == spec.kv_reason
    assert p.total_bytes is None and p.gpu_bytes is None and p.fit is None
    assert plan.max_num_ctx_on_gpu(spec, PlanConfig(4096), 80 * GIB) is None
    assert plan.max_parallel_on_gpu(spec, PlanConfig(4096), 80 * GIB) is None
    assert p.compute_note.startswith("estimated")


def test_llama_cpp_refusals_are_reported() -> None:
    p = predict(llama(), PlanConfig(4096, "q8_0", flash_attention=False))
    assert p.kv is None and p.kv_problem is not None and "flash attention" in p.kv_problem
    assert any("needs flash attention" in note for note in p.notes)
    odd = info(
        "llama",
        block_count=2,
        context_length=4096,
        embedding_length=192,
        attention__head_count=4,
        attention__head_count_kv=2,
    )  # head dim 48
    p2 = predict(model_spec("odd", odd, file_size=10**6), PlanConfig(2048, "q8_0"))
    assert p2.kv is None and p2.kv_problem is not None and "does not divide" in p2.kv_problem


def test_num_ctx_above_training_context_is_clamped() -> None:
    p = predict(llama(), PlanConfig(262144))
    assert p.config.num_ctx == 131072 and p.requested_num_ctx == 262144
    assert any("clamps" in note for note in p.notes)


def test_invalid_configs_raise() -> None:
    for bad in (PlanConfig(0), PlanConfig(4096, parallel=0), PlanConfig(4096, "q5")):
        with pytest.raises(ValueError):
            predict(llama(), bad)


# --------------------------------------------------------------------------------------------
# weights without a tensor list, tensor list details


def test_weights_from_the_file_size_split_evenly() -> None:
    spec = model_spec("q", qwen3_17b_info(), file_size=SEEDS_FILE_SIZE)
    assert spec.layers is not None and not spec.layers.exact
    assert spec.layers.file_bytes == SEEDS_FILE_SIZE and len(spec.layers.blocks) == 28
    assert any("assumed equal" in note for note in spec.notes)
    p = predict(spec, PlanConfig(32768), budget_bytes=3 * GIB)
    assert p.fit is not None and p.fit.spilled and not p.fit.layers_exact
    assert any("equal layer sizes" in note for note in p.notes)


def test_unknown_tensor_type_falls_back_to_the_file_size() -> None:
    tensors = llama31_8b_tensors()
    tensors[5] = {**tensors[5], "type": "Q9_Z"}
    spec = model_spec("x", llama31_8b_info(), tensors=tensors, file_size=4_920_000_000)
    assert spec.weights_bytes == 4_920_000_000 and spec.layers is not None and not spec.layers.exact
    assert any("does not know" in n and "blk.0.attn_v.weight" in n for n in spec.notes)


def test_tied_embeddings_put_a_copy_on_the_gpu() -> None:
    tensors = [t for t in llama31_8b_tensors() if t["name"] != "output.weight"]
    spec = model_spec("tied", llama31_8b_info(), tensors=tensors)
    assert spec.layers is not None and spec.layers.tied_copy_bytes == LLAMA31_8B_TOKEN_EMBD
    assert spec.weights_bytes == spec.layers.file_bytes  # the file holds the embeddings once
    assert spec.layers.gpu_bytes == spec.layers.file_bytes  # llama.cpp loads them again as the output layer


def test_no_weights_known() -> None:
    spec = model_spec("w", llama31_8b_info())
    p = predict(spec, PlanConfig(4096), budget_bytes=GIB)
    assert spec.weights_bytes is None and p.total_bytes is None and p.fit is None
    assert p.kv_bytes == 512 * MIB  # the KV part is still exact


def test_tensor_bytes() -> None:
    assert plan.tensor_bytes("Q4_K", [4096, 4096]) == 4096 * 4096 * 144 // 256
    assert plan.tensor_bytes("f32", [10]) == 40
    assert plan.tensor_bytes("MXFP4", [2880, 2880]) == 2880 * 2880 * 17 // 32
    assert plan.tensor_bytes("Q9_Z", [1]) is None
    assert plan.tensor_bytes("F32", []) is None
    assert plan.tensor_bytes("F32", [True]) is None


# --------------------------------------------------------------------------------------------
# calibration and comparison


def test_calibration_moves_the_compute_by_the_modelled_change_only() -> None:
    spec = llama()
    cal = plan.Calibration(PlanConfig(8192), 300 * MIB, "allocated", "log")
    p = predict(spec, PlanConfig(32768), calibration=cal)
    delta = plan.compute_model_bytes(spec, PlanConfig(32768)) - plan.compute_model_bytes(spec, PlanConfig(8192))
    assert delta == (32768 - 8192) * 512 * 2
    assert p.compute_bytes == 300 * MIB + delta
    assert p.compute_error_bytes == int(0.25 * delta) + 16 * MIB
    assert p.compute_calibrated and "allocated at 8192" in p.compute_note
    same = predict(spec, PlanConfig(8192), calibration=cal)
    assert same.compute_bytes == 300 * MIB and same.compute_error_bytes == 16 * MIB


def test_compare_derived_has_compute_and_total_only() -> None:
    spec = model_spec("q", qwen3_17b_info(), file_size=SEEDS_FILE_SIZE)
    cal = plan.Calibration(
        PlanConfig(32768),
        148_045_184,
        "derived",
        "ps",
        weights_bytes=SEEDS_FILE_SIZE,
        kv_bytes=3584 * MIB,
        total_bytes=6_106_141_568,
    )
    c = plan.compare(spec, cal, engine="go-runner")
    assert [r.component for r in c.rows] == ["compute", "total"]
    assert all(r.within for r in c.rows)


def test_calibration_from_view_of_the_demo() -> None:
    from tests.ui.fakes import snapshot_at, step_index
    from kvtop.model.views import AppState
    from kvtop.model.fold_alerts import fold_with_alerts

    state = fold_with_alerts(AppState(host_url="http://x"), snapshot_at(step_index("raised to 32768")))
    view = state.models[0]
    cal = plan.calibration_from_view(view)
    assert cal is not None and cal.source == "derived"
    assert cal.config == PlanConfig(32768, "f16", 1, True)
    assert cal.compute_bytes == 6_106_141_568 - 2_200_000_000 - 3_758_096_384 == 148_045_184
    assert cal.total_bytes == 6_106_141_568


def test_calibration_from_load_needs_compute() -> None:
    @dataclasses.dataclass
    class FakeLoad:
        memory: dict[str, dict[str, int]]
        num_ctx_per_seq: int | None = 4096
        parallel: int | None = 2
        kv_type_k: str | None = "q8_0"
        flash_attention: str | None = "enabled"
        kv_bytes: int | None = 100
        kv_bytes_stated: bool = True

    assert plan.calibration_from_load(FakeLoad({"weights": {"CUDA0": 5}})) is None
    cal = plan.calibration_from_load(
        FakeLoad(
            {"weights": {"CUDA0": 5, "CPU_Mapped": 1}, "kv": {"CUDA0": 100}, "compute": {"CUDA0": 7, "CUDA_Host": 3}}
        )
    )
    assert cal is not None
    assert cal.config == PlanConfig(4096, "q8_0", 2, True)
    assert (cal.compute_bytes, cal.weights_bytes, cal.kv_bytes, cal.total_bytes) == (10, 6, 100, 116)
    assert (cal.weights_lines, cal.kv_lines, cal.lines) == (2, 1, 5)


# --------------------------------------------------------------------------------------------
# server-wide settings


def test_server_settings_lines() -> None:
    s = plan.server_settings("Q8_0", 2, True)
    assert s.env == (("OLLAMA_FLASH_ATTENTION", "1"), ("OLLAMA_KV_CACHE_TYPE", "q8_0"), ("OLLAMA_NUM_PARALLEL", "2"))
    assert s.systemd == (
        "sudo systemctl edit ollama.service",
        "[Service]",
        'Environment="OLLAMA_FLASH_ATTENTION=1"',
        'Environment="OLLAMA_KV_CACHE_TYPE=q8_0"',
        'Environment="OLLAMA_NUM_PARALLEL=2"',
        "sudo systemctl daemon-reload && sudo systemctl restart ollama",
    )
    assert s.launchctl[:3] == (
        "launchctl setenv OLLAMA_FLASH_ATTENTION 1",
        "launchctl setenv OLLAMA_KV_CACHE_TYPE q8_0",
        "launchctl setenv OLLAMA_NUM_PARALLEL 2",
    )
    assert s.docker == (
        "docker run -d -e OLLAMA_FLASH_ATTENTION=1 -e OLLAMA_KV_CACHE_TYPE=q8_0 "
        "-e OLLAMA_NUM_PARALLEL=2 -p 11434:11434 ollama/ollama"
    )
    refused = plan.server_settings("q4_0", 1, False)
    assert any("refused" in note for note in refused.notes)
    with pytest.raises(ValueError):
        plan.server_settings("q5", 1, True)


def test_prediction_json_flags_compute_as_estimated() -> None:
    p = predict(llama(), PlanConfig(32768, "q8_0"), budget_bytes=8 * GIB)
    doc = plan.prediction_json(p, max_num_ctx=51968, max_parallel=1)
    assert doc["kv_bytes"] == 2176 * MIB and doc["compute_estimated"] is True
    assert doc["fit"]["verdict"] == "fits" and doc["fit"]["processor"] == "100% GPU"
    assert doc["max_num_ctx_on_gpu"] == 51968
    assert doc["kv_formula"].endswith("= 2,281,701,376 B")


def test_dataclasses_are_frozen() -> None:
    p = predict(llama(), PlanConfig(4096))
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.compute_bytes = 0  # type: ignore[misc]


def test_planner_and_cli_do_not_import_textual() -> None:
    import subprocess
    import sys

    code = (
        "import sys, kvtop.model.plan, kvtop.plan_cli;"
        "bad = [m for m in sys.modules if m == 'textual' or m.startswith('textual.')];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
