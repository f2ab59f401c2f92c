"""Model descriptions the planner tests share, and checks of the descriptions themselves.

* ``llama31_8b_show()``: Llama 3.1 8B as ``/api/show`` describes it. ``model_info`` is the
  published architecture (Meta's config: 32 layers, 4096 embd, 32 heads, 8 KV heads, head dim
  128, ff 14336, vocab 128256, 131072 context). The tensor list is *synthesised* with llama.cpp's
  Q4_K_M type mix (``llama_tensor_get_type``: ``attn_v`` and ``ffn_down`` in Q6_K on the
  "use_more_bits" layers, ``output`` in Q6_K, the rest Q4_K, norms F32), not captured from a
  server; its sum, 4,912,898,304 B, sits just under the library's "4.9 GB".
* ``tiny_llama_show()``: the tiny GGUF ``tests/llama_fixture.py`` writes (f32 weights), whose
  real llama-server stderr is in ``tests/fixtures/llama_server``.
* ``qwen3_17b_info()``: qwen3:1.7b from the bundled demo scenario (the seeds' measured model).
"""

from __future__ import annotations

import json
from typing import Any

from kvtop.model import plan
from tests.llama_fixture import TinyLlama, tensor_bytes
from tests.standin import BUNDLED

LLAMA_N, LLAMA_E, LLAMA_FF, LLAMA_HEADS, LLAMA_KV, LLAMA_VOCAB = 32, 4096, 14336, 32, 8, 128256


def _q4_k_m(il: int, n: int) -> str:
    more_bits = il < n // 8 or il >= 7 * n // 8 or (il - n // 8) % 3 == 2
    return "Q6_K" if more_bits else "Q4_K"


def llama31_8b_info() -> dict[str, Any]:
    """``model_info`` of llama3.1:8b (the keys the planner reads)."""
    return {
        "general.architecture": "llama",
        "general.file_type": 15,
        "general.parameter_count": 8030261312,
        "llama.block_count": LLAMA_N,
        "llama.context_length": 131072,
        "llama.embedding_length": LLAMA_E,
        "llama.feed_forward_length": LLAMA_FF,
        "llama.attention.head_count": LLAMA_HEADS,
        "llama.attention.head_count_kv": LLAMA_KV,
        "llama.attention.layer_norm_rms_epsilon": 1e-5,
        "llama.rope.dimension_count": 128,
        "llama.rope.freq_base": 500000.0,
        "llama.vocab_size": LLAMA_VOCAB,
    }


def llama31_8b_tensors() -> list[dict[str, Any]]:
    """A Q4_K_M tensor list of Llama 3.1 8B (synthesised, see the module docstring)."""
    e, ff, kvw = LLAMA_E, LLAMA_FF, LLAMA_KV * 128
    t: list[dict[str, Any]] = [
        {"name": "token_embd.weight", "type": "Q4_K", "shape": [e, LLAMA_VOCAB]},
        {"name": "rope_freqs.weight", "type": "F32", "shape": [64]},
    ]
    for il in range(LLAMA_N):
        b = f"blk.{il}"
        t += [
            {"name": f"{b}.attn_norm.weight", "type": "F32", "shape": [e]},
            {"name": f"{b}.attn_q.weight", "type": "Q4_K", "shape": [e, e]},
            {"name": f"{b}.attn_k.weight", "type": "Q4_K", "shape": [e, kvw]},
            {"name": f"{b}.attn_v.weight", "type": _q4_k_m(il, LLAMA_N), "shape": [e, kvw]},
            {"name": f"{b}.attn_output.weight", "type": "Q4_K", "shape": [e, e]},
            {"name": f"{b}.ffn_norm.weight", "type": "F32", "shape": [e]},
            {"name": f"{b}.ffn_gate.weight", "type": "Q4_K", "shape": [e, ff]},
            {"name": f"{b}.ffn_up.weight", "type": "Q4_K", "shape": [e, ff]},
            {"name": f"{b}.ffn_down.weight", "type": _q4_k_m(il, LLAMA_N), "shape": [ff, e]},
        ]
    t += [
        {"name": "output_norm.weight", "type": "F32", "shape": [e]},
        {"name": "output.weight", "type": "Q6_K", "shape": [e, LLAMA_VOCAB]},
    ]
    return t


def llama31_8b_show() -> dict[str, Any]:
    """An ``/api/show`` answer for llama3.1:8b (the parts the planner reads)."""
    return {
        "modelfile": "FROM /usr/share/ollama/.ollama/models/blobs/sha256-" + "6" * 64 + "\n",
        "details": {"format": "gguf", "family": "llama", "parameter_size": "8.0B", "quantization_level": "Q4_K_M"},
        "model_info": llama31_8b_info(),
        "tensors": llama31_8b_tensors(),
    }


LLAMA31_8B_WEIGHTS = 4_912_898_304
"""Hand sum: 16 layers of 122,716,160 B + 16 of 138,936,320 B + token_embd 295,501,824 (Q4_K)
+ output 430,940,160 (Q6_K) + output_norm 16,384 + rope_freqs 256."""

LLAMA31_8B_TOKEN_EMBD = 4096 * 128256 * 144 // 256


def tiny_llama_show(spec: TinyLlama = TinyLlama()) -> dict[str, Any]:
    """``/api/show`` of the tiny f32 llama that ``tests/llama_fixture.py:write_tiny_llama`` writes."""
    n_vocab = 3 + 256 + spec.n_extra_tokens
    e, hd, ff = spec.n_embd, spec.head_dim, spec.n_ff
    t: list[dict[str, Any]] = [{"name": "token_embd.weight", "type": "F32", "shape": [e, n_vocab]}]
    for il in range(spec.n_layer):
        b = f"blk.{il}"
        t += [
            {"name": f"{b}.attn_norm.weight", "type": "F32", "shape": [e]},
            {"name": f"{b}.attn_q.weight", "type": "F32", "shape": [e, spec.n_head * hd]},
            {"name": f"{b}.attn_k.weight", "type": "F32", "shape": [e, spec.n_head_kv * hd]},
            {"name": f"{b}.attn_v.weight", "type": "F32", "shape": [e, spec.n_head_kv * hd]},
            {"name": f"{b}.attn_output.weight", "type": "F32", "shape": [spec.n_head * hd, e]},
            {"name": f"{b}.ffn_norm.weight", "type": "F32", "shape": [e]},
            {"name": f"{b}.ffn_gate.weight", "type": "F32", "shape": [e, ff]},
            {"name": f"{b}.ffn_up.weight", "type": "F32", "shape": [e, ff]},
            {"name": f"{b}.ffn_down.weight", "type": "F32", "shape": [ff, e]},
        ]
    t += [
        {"name": "output_norm.weight", "type": "F32", "shape": [e]},
        {"name": "output.weight", "type": "F32", "shape": [e, n_vocab]},
    ]
    info = {
        "general.architecture": "llama",
        "general.file_type": 0,
        "llama.block_count": spec.n_layer,
        "llama.context_length": spec.context_length,
        "llama.embedding_length": e,
        "llama.feed_forward_length": ff,
        "llama.attention.head_count": spec.n_head,
        "llama.attention.head_count_kv": spec.n_head_kv,
        "llama.attention.layer_norm_rms_epsilon": 1e-5,
        "llama.rope.dimension_count": hd,
        "llama.rope.freq_base": 10000.0,
        "llama.vocab_size": n_vocab,
    }
    return {"model_info": info, "tensors": t}


def qwen3_17b_info() -> dict[str, Any]:
    """``model_info`` of qwen3:1.7b-q8_0 in the bundled scenario (the seeds' model)."""
    doc = json.loads(BUNDLED.read_text(encoding="utf-8"))
    info: dict[str, Any] = doc["models"]["qwen3:1.7b-q8_0"]["model_info"]
    return info


# --------------------------------------------------------------------------------------------


def test_llama_tensor_list_sums_to_the_hand_computed_weights() -> None:
    spec = plan.model_spec("llama3.1:8b", llama31_8b_info(), tensors=llama31_8b_tensors())
    assert spec.weights_bytes == LLAMA31_8B_WEIGHTS
    assert spec.layers is not None and spec.layers.exact
    assert spec.layers.input_bytes == LLAMA31_8B_TOKEN_EMBD == 295_501_824
    assert spec.layers.tied_copy_bytes == 0
    assert sorted(set(spec.layers.blocks)) == [122_716_160, 138_936_320]
    assert spec.n_vocab == LLAMA_VOCAB and spec.n_ff == LLAMA_FF and spec.n_head == LLAMA_HEADS


def test_tiny_tensor_list_equals_the_fixture_writer() -> None:
    show = tiny_llama_show()
    spec = plan.model_spec("tiny", show["model_info"], tensors=show["tensors"])
    assert spec.weights_bytes == tensor_bytes(TinyLlama()) == 2_694_656
