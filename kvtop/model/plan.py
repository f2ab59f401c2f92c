"""What-if planner: a model's memory at another num_ctx, KV cache type, slot count or flash attention.

One module over ~600 lines on purpose (issue 24): it is one idea, the planner, whose predictions
(weights, KV, compute buffer, spill, largest fitting num_ctx) share one configuration and one budget.

For a model (its ``/api/show`` layout and its weights) and a launch configuration, predict the
weights, the KV cache, the compute buffer and the total; whether that fits in a GPU budget and,
when it does not, which layers would spill to the CPU; and, per cache type, the largest num_ctx
(and slot count) that stays 100% on the GPU. Pure: no I/O, no clock, no UI imports.

What is exact and what is not:

* **KV cache: exact.** It comes from :func:`kvtop.model.kv.kv_allocation` (llama.cpp's own
  allocation rules; equal to the real llama-server logs in ``tests/fixtures/llama_server``).
  Where the arithmetic is not known for an architecture the reason is carried instead
  (:class:`kvtop.model.kv.KVUnavailable`), never a guess.
* **Weights: reported.** The sum of the ``/api/show`` tensor list (element count x ggml type
  size, :data:`GGML_TYPE_SIZES`), else the ``/api/tags`` file size (which also holds the GGUF
  header and tokenizer, a few MB).
* **Compute buffer: estimated**, always labelled so, with a stated error. llama.cpp reserves its
  worst-case prompt-processing graph of ``n_ubatch`` tokens (Ollama passes ``-b 512 -ub 512``,
  Ref §4.4). The model here is::

      compute ≈ mask + scores + max(output, ffn) + act
      mask    = cells x n_ubatch x mask_bytes      (+ the same for the SWA cache's cells)
      scores  = cells x n_ubatch x n_head x 4      (flash attention off only: f32 KQ)
      output  = n_vocab x n_ubatch x 4             (llama-server only: logits of every token)
      ffn     = 3 x n_ff x n_ubatch x 4
      act     = 4 x n_embd x n_ubatch x 4

  ``mask_bytes`` is 2 for llama-server (Ollama v0.30+: an f16 mask) and 4 before (an f32 mask).
  Evidence for the per-cell terms: the real llama-server stderr in ``tests/fixtures/llama_server``
  grows by exactly 1,024 B per cell at n_ubatch 512 with flash attention on (4.77 / 6.77 / 10.77
  MiB at 2,048 / 4,096 / 8,192 cells) and by 4 heads x 4 B x 512 more without it (11.76 MiB at
  1,024 cells); an older llama.cpp log (fedora-copr/logdetective#106, Mistral 7B, flash
  attention off) grows by 512 x (32 x 4 + 4) B per cell; the seeds' qwen3:1.7b on Ollama 0.22.1
  (seeds/kv-cache-experiments-ja.txt, "約 63 MB") grows by 62,914,560 B from 4,096 to 32,768
  cells, 2,194 B per cell, against 2,048 B modelled (-7%).
  The base terms agree with the tiny model's logs within 6%; they are the least certain part
  (Ollama's Go engine, v0.11.5-v0.24, evidently reserves no logits for a whole batch), so an
  uncalibrated estimate states ±50% (at least 32 MiB). A **calibrated** estimate starts from a
  real compute figure of the loaded model (the runner log's allocation, or ``/api/ps`` size
  minus weights minus KV) and adds only the modelled change, stating ±25% of that change plus
  16 MiB (the seeds' qwen3 steps stay inside it).

Fit: llama.cpp keeps the input layer (``token_embd``) in host memory and offloads from the end:
``-ngl k`` puts the output layer and the last ``k - 1`` blocks on the GPU (``i_gpu_start =
n_layer + 1 - n_gpu_layers``), each with its own KV cache; the compute buffer sits on the GPU as
soon as anything is offloaded. So the layers that spill are the first ones. A GPU budget is the
GPU's free memory plus what the model already holds there (``size_vram``) when it is loaded.

Sources: "Ref §x" is ``docs/ollama-internals.md`` in this repository; llama.cpp
``src/llama-context.cpp`` (``graph_reserve``), ``src/llama-model.cpp`` (layer placement),
``src/llama-cparams.h`` (``LLAMA_MAX_SEQ 256``); ggml block sizes as in the ``gguf`` package's
``GGML_QUANT_SIZES``; the seeds' settings reference for the systemd / launchctl / docker lines.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, Literal

from kvtop.model import kv
from kvtop.model.views import ModelView

__all__ = [
    "CALIBRATED_MIN_ERROR",
    "CALIBRATED_REL_ERROR",
    "COMPUTE_MIN_ERROR",
    "COMPUTE_REL_ERROR",
    "LOG_ROUNDING_BYTES",
    "DEFAULT_NUM_CTX",
    "ENGINES",
    "GGML_TYPE_SIZES",
    "MAX_SLOTS",
    "N_UBATCH",
    "PLAN_CACHE_TYPES",
    "Calibration",
    "Comparison",
    "ComparisonRow",
    "Engine",
    "Fit",
    "LayerWeights",
    "ModelSpec",
    "PlanConfig",
    "Prediction",
    "ServerSettings",
    "calibration_from_load",
    "calibration_from_view",
    "compare",
    "comparison_json",
    "compute_model_bytes",
    "engine_for_version",
    "gpu_budget",
    "max_num_ctx_on_gpu",
    "num_ctx_bound",
    "num_ctx_limit_text",
    "max_parallel_on_gpu",
    "model_spec",
    "parse_num_ctx",
    "predict",
    "prediction_json",
    "server_settings",
    "tensor_bytes",
]

Engine = Literal["llama-server", "go-runner"]
"""Which runner allocates the memory: Ollama v0.30+ runs upstream ``llama-server`` (Era C);
before, Ollama's Go runner with vendored llama.cpp or its own engine (Eras A/B, Ref §0)."""

ENGINES: Final[tuple[Engine, ...]] = ("llama-server", "go-runner")

N_UBATCH: Final = 512
"""Physical batch Ollama passes (``-b 512 -ub 512``, Ref §4.4 and corpus 062)."""

MAX_SLOTS: Final = 256
"""llama.cpp ``LLAMA_MAX_SEQ`` (``src/llama-cparams.h``): more slots are refused."""

DEFAULT_NUM_CTX: Final = 4096
"""Ollama's default num_ctx below 23 GiB of total VRAM (Ref §3.4; VRAM-tiered since v0.15.5)."""

PLAN_CACHE_TYPES: Final[tuple[str, ...]] = ("f16", "q8_0", "q4_0")
"""The three ``OLLAMA_KV_CACHE_TYPE`` values Ollama documents (Ref §3.2)."""

COMPUTE_REL_ERROR: Final = 0.5
"""Stated relative error of an uncalibrated compute estimate (see the module docstring)."""

COMPUTE_MIN_ERROR: Final = 32 * 1024 * 1024
"""Stated minimum error of an uncalibrated compute estimate, in bytes."""

CALIBRATED_REL_ERROR: Final = 0.25
"""Stated relative error of the modelled change when calibrated from a real figure."""

CALIBRATED_MIN_ERROR: Final = 16 * 1024 * 1024
"""Stated minimum error of a calibrated compute estimate, in bytes."""

_MASK_BYTES: Final[Mapping[str, int]] = MappingProxyType({"llama-server": 2, "go-runner": 4})
_F32: Final = 4
_MIB: Final = 1024 * 1024
_LLAMA_SERVER_SINCE: Final = (0, 30, 0)

GGML_TYPE_SIZES: Final[Mapping[str, tuple[int, int]]] = MappingProxyType(
    {
        "F32": (1, 4),
        "F16": (1, 2),
        "BF16": (1, 2),
        "F64": (1, 8),
        "I8": (1, 1),
        "I16": (1, 2),
        "I32": (1, 4),
        "I64": (1, 8),
        "Q4_0": (32, 18),
        "Q4_1": (32, 20),
        "Q5_0": (32, 22),
        "Q5_1": (32, 24),
        "Q8_0": (32, 34),
        "Q8_1": (32, 40),
        "Q2_K": (256, 84),
        "Q3_K": (256, 110),
        "Q4_K": (256, 144),
        "Q5_K": (256, 176),
        "Q6_K": (256, 210),
        "Q8_K": (256, 292),
        "IQ2_XXS": (256, 66),
        "IQ2_XS": (256, 74),
        "IQ2_S": (256, 82),
        "IQ3_XXS": (256, 98),
        "IQ3_S": (256, 110),
        "IQ1_S": (256, 50),
        "IQ1_M": (256, 56),
        "IQ4_NL": (32, 18),
        "IQ4_XS": (256, 136),
        "TQ1_0": (256, 54),
        "TQ2_0": (256, 66),
        "MXFP4": (32, 17),
        "NVFP4": (64, 36),
        "Q1_0": (128, 18),
    }
)
"""ggml tensor types as ``/api/show`` names them (``tensors[].type``), ``-> (block, bytes)``.

Values as ``gguf.constants.GGML_QUANT_SIZES`` (checked by a unit test); e.g. ``Q4_K`` is 256
values in 144 bytes (2+2 B scales, 12 B sub-scales, 128 B of nibbles).
"""

_INPUT_TENSORS: Final = ("token_embd.", "token_embd_norm.", "per_layer_token_embd.", "token_types.", "position_embd.")
_OUTPUT_TENSORS: Final = ("output.", "output_norm.", "cls.", "cls_out.")
_BLOCK: Final = re.compile(r"^blk\.(\d+)\.")


# --------------------------------------------------------------------------------------------
# Small parsers (shared by the CLI and the what-if screen)


def parse_num_ctx(text: str) -> int:
    """Parse a context length: ``32768`` or ``32k`` / ``128K`` (K = 1024 tokens, as Ollama's docs).

    Raises:
        ValueError: Not a positive integer (with an optional ``k``).
    """
    m = re.fullmatch(r"\s*(\d+)\s*([kK]?)\s*", text)
    if not m:
        raise ValueError(f"not a context length: {text!r} (e.g. 32768 or 32k)")
    value = int(m.group(1)) * (1024 if m.group(2) else 1)
    if value < 1:
        raise ValueError("num_ctx must be at least 1")
    return value


def engine_for_version(version: str | None) -> Engine:
    """The runner a server version uses: llama-server from v0.30.0 (Ref §0), else the Go runner.

    An unknown version is taken as the current one (llama-server).
    """
    m = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?", version or "")
    if not m:
        return "llama-server"
    parsed = (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))
    return "llama-server" if parsed >= _LLAMA_SERVER_SINCE else "go-runner"


def gpu_budget(free_bytes: int | None, held_bytes: int | None = None, reserve_bytes: int = 0) -> int | None:
    """GPU memory a model can use: free memory, plus what the model itself holds now, minus a reserve.

    A loaded model's ``size_vram`` is given back when it reloads with the new configuration, so
    it counts as available to it (and only to it).

    Args:
        free_bytes: Free GPU memory now (NVML or typed), None when not known.
        held_bytes: ``/api/ps`` ``size_vram`` of this model when it is loaded.
        reserve_bytes: Memory to leave free (a safety margin).

    Returns:
        Bytes, or None when the free memory is not known.
    """
    if free_bytes is None:
        return None
    return max(0, free_bytes + max(0, held_bytes or 0) - max(0, reserve_bytes))


# --------------------------------------------------------------------------------------------
# The model


@dataclass(frozen=True, slots=True)
class LayerWeights:
    """Weights split the way llama.cpp places them.

    Attributes:
        blocks: Bytes of each repeating layer ``blk.<i>``, ``block_count`` entries.
        input_bytes: Input layer (``token_embd`` …): llama.cpp keeps it in host memory.
        output_bytes: Output layer on the GPU (``output.weight``, ``output_norm`` …).
        other_bytes: Tensors outside the blocks (``rope_freqs`` …), placed with the output.
        exact: True when taken from the tensor list; False when the file size was split evenly.
        tied_copy_bytes: With tied embeddings (no ``output.weight``) llama.cpp loads a second
            copy of ``token_embd`` for the output layer (``TENSOR_DUPLICATED``); its size, else 0.
    """

    blocks: tuple[int, ...]
    input_bytes: int
    output_bytes: int
    other_bytes: int
    exact: bool
    tied_copy_bytes: int = 0

    @property
    def file_bytes(self) -> int:
        """Bytes of every tensor once (what the file holds)."""
        return sum(self.blocks) + self.input_bytes + self.output_bytes + self.other_bytes

    @property
    def head_bytes(self) -> int:
        """The output layer as offloaded: output tensors, other tensors and the tied copy."""
        return self.output_bytes + self.other_bytes + self.tied_copy_bytes

    @property
    def gpu_bytes(self) -> int:
        """Weights on the GPU with every layer offloaded (all but the input layer)."""
        return sum(self.blocks) + self.head_bytes


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """What the planner knows about a model, independent of the launch configuration.

    Attributes:
        name: Model name (``llama3.1:8b``).
        architecture: ``general.architecture`` ("unknown" when missing).
        layout: KV layout, or why there is none.
        weights_bytes: Weight bytes (tensor sum, or file size), None when not known.
        weights_note: Where ``weights_bytes`` comes from.
        layers: Per-layer split, None when neither tensors nor a file size are known.
        n_vocab: Vocabulary size (output logits), None when not known.
        n_embd: ``embedding_length``.
        n_ff: Widest feed-forward (dense, or the active experts together).
        n_head: Most attention heads of any layer (scores without flash attention).
        context_train: ``<arch>.context_length``: Ollama clamps num_ctx to it (Ref §1.3).
        notes: Facts about the inputs (unknown tensor types, layer sizes assumed equal …).
        weights_estimated: The weights were derived from the loaded model (:func:`derive_weights`),
            not read from a tensor list or a file size.
    """

    name: str
    architecture: str
    layout: kv.KVLayout | kv.KVUnavailable
    weights_bytes: int | None
    weights_note: str
    layers: LayerWeights | None
    n_vocab: int | None
    n_embd: int | None
    n_ff: int | None
    n_head: int | None
    context_train: int | None
    notes: tuple[str, ...] = ()
    weights_estimated: bool = False

    @property
    def block_count(self) -> int:
        """Repeating layers (0 when not known)."""
        if isinstance(self.layout, kv.KVLayout):
            return self.layout.block_count
        return len(self.layers.blocks) if self.layers is not None else 0

    @property
    def kv_reason(self) -> str | None:
        """Why the KV arithmetic is unavailable, or None when it is available."""
        return self.layout.reason if isinstance(self.layout, kv.KVUnavailable) else None


def _uint(value: Any) -> int | None:
    """A non-negative int from a scalar, or the max of a per-layer list; None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, int):
        return value if 0 <= value < 2**40 else None
    if isinstance(value, (list, tuple)) and value:
        known = [v for v in (_uint(item) for item in value if not isinstance(item, (list, tuple))) if v is not None]
        return max(known) if known else None
    return None


def tensor_bytes(ggml_type: str, shape: Sequence[Any]) -> int | None:
    """Bytes of one tensor (``ggml_nbytes``): elements x type size / block size.

    Args:
        ggml_type: Type name as ``/api/show`` gives it (``Q4_K``, ``F32``; any case).
        shape: Dimensions in GGUF ``ne`` order.

    Returns:
        Bytes, or None for an unknown type or a malformed shape.
    """
    sizes = GGML_TYPE_SIZES.get(ggml_type.strip().upper()) if isinstance(ggml_type, str) else None
    if sizes is None or not isinstance(shape, (list, tuple)) or not shape:
        return None
    n = 1
    for dim in shape:
        d = None if isinstance(dim, (list, tuple)) else _uint(dim)
        if d is None:
            return None
        n *= d
    block, size = sizes
    return n * size // block


def _layer_weights(tensors: Iterable[Any], n_layer: int) -> tuple[LayerWeights | None, int | None, list[str]]:
    """Split a tensor list into blocks / input / output / other; also n_vocab from the shapes."""
    blocks = [0] * n_layer
    inp = out = other = 0
    embd = 0
    has_output = False
    n_vocab: int | None = None
    unknown: list[str] = []
    count = 0
    for t in tensors:
        if not isinstance(t, Mapping) or not isinstance(t.get("name"), str):
            continue
        name: str = t["name"]
        count += 1
        shape = t.get("shape")
        shape_seq: Sequence[Any] = shape if isinstance(shape, (list, tuple)) else ()
        size = tensor_bytes(str(t.get("type", "")), shape_seq)
        if size is None:
            unknown.append(name)
            continue
        m = _BLOCK.match(name)
        if m and int(m.group(1)) < n_layer:
            blocks[int(m.group(1))] += size
        elif name.startswith(_INPUT_TENSORS):
            inp += size
            if name == "token_embd.weight":
                embd = size
                if len(shape_seq) >= 2 and n_vocab is None:
                    n_vocab = _uint(shape_seq[1])
        elif name.startswith(_OUTPUT_TENSORS):
            out += size
            if name == "output.weight":
                has_output = True
                if len(shape_seq) >= 2:
                    n_vocab = _uint(shape_seq[1])
        else:
            other += size
    if count == 0:
        return None, None, []
    if unknown:
        return (
            None,
            n_vocab,
            [
                f"tensor list: {len(unknown)} tensor(s) of a ggml type kvtop does not know "
                f"(e.g. {unknown[0]}): weights use the file size"
            ],
        )
    tied = embd if embd and not has_output else 0
    return LayerWeights(tuple(blocks), inp, out, other, exact=True, tied_copy_bytes=tied), n_vocab, []


def _even_split(total: int, n_layer: int) -> LayerWeights:
    """Weights spread evenly over ``n_layer`` blocks and the output layer (no tensor list)."""
    each = total // (n_layer + 1)
    return LayerWeights((each,) * n_layer, 0, total - each * n_layer, 0, exact=False)


def model_spec(
    name: str,
    model_info: Mapping[str, Any],
    *,
    tensors: Sequence[Any] | None = None,
    file_size: int | None = None,
    file_size_note: str = "/api/tags file size (also holds the GGUF header and tokenizer)",
) -> ModelSpec:
    """Describe a model for the planner from ``/api/show`` (and ``/api/tags``).

    Args:
        name: Model name.
        model_info: ``/api/show`` ``model_info`` (full GGUF keys; verbose for per-layer arrays).
        tensors: ``/api/show`` ``tensors`` (``[{name, type, shape}]``), when known.
        file_size: Weights file size (``/api/tags`` ``size``), when known.
        file_size_note: Where ``file_size`` comes from.

    Returns:
        The spec. Weights come from the tensor list when every tensor type is known, else the
        file size (split evenly over the layers, and said so), else they are unknown.
    """
    info: Mapping[str, Any] = model_info if isinstance(model_info, Mapping) else {}
    layout = kv.layout_from_model_info(info)
    arch_value = info.get("general.architecture")
    arch = arch_value.strip() if isinstance(arch_value, str) and arch_value.strip() else "unknown"

    def key(k: str) -> Any:
        return info.get(f"{arch}.{k}")

    block_count = _uint(key("block_count"))
    n_layer = (
        layout.block_count
        if isinstance(layout, kv.KVLayout)
        else (block_count if block_count is not None and block_count <= 4096 else 0)
    )
    notes: list[str] = []
    layers: LayerWeights | None = None
    n_vocab_t: int | None = None
    weights: int | None = None
    weights_note = "no tensor list and no file size"
    if tensors:
        layers, n_vocab_t, tensor_notes = _layer_weights(tensors, n_layer)
        notes.extend(tensor_notes)
        if layers is not None:
            weights = layers.file_bytes
            weights_note = "sum of the /api/show tensor list (elements × ggml type size)"
    if layers is None and file_size is not None and file_size >= 0:
        weights, weights_note = file_size, file_size_note
        if n_layer > 0:
            layers = _even_split(file_size, n_layer)
            notes.append("layer sizes assumed equal: no usable tensor list from /api/show")
    tokens = info.get("tokenizer.ggml.tokens")
    n_vocab = _uint(key("vocab_size")) or n_vocab_t or (len(tokens) if isinstance(tokens, list) and tokens else None)
    n_ff = _uint(key("feed_forward_length"))
    expert_ff, used = _uint(key("expert_feed_forward_length")), _uint(key("expert_used_count"))
    if expert_ff and used:
        n_ff = max(n_ff or 0, expert_ff * used)
    return ModelSpec(
        name=name,
        architecture=arch,
        layout=layout,
        weights_bytes=weights,
        weights_note=weights_note,
        layers=layers,
        n_vocab=n_vocab,
        n_embd=_uint(key("embedding_length")),
        n_ff=n_ff,
        n_head=_uint(key("attention.head_count")),
        context_train=_uint(key("context_length")) or None,
        notes=tuple(notes),
    )


# --------------------------------------------------------------------------------------------
# Configurations, calibration, predictions


@dataclass(frozen=True, slots=True)
class PlanConfig:
    """One launch configuration of a model.

    Attributes:
        num_ctx: Context per slot (``options.num_ctx`` / ``OLLAMA_CONTEXT_LENGTH``), tokens.
        cache_type: ``OLLAMA_KV_CACHE_TYPE`` (K and V alike, as Ollama passes them, Ref §3.2).
        parallel: Slots (``OLLAMA_NUM_PARALLEL``, Ref §3.3).
        flash_attention: Flash attention as resolved by the runner (Ref §3.1).
        n_ubatch: Physical batch (``-ub``).
    """

    num_ctx: int
    cache_type: str = "f16"
    parallel: int = 1
    flash_attention: bool = True
    n_ubatch: int = N_UBATCH

    def label(self) -> str:
        """``32768 × 1 slot, q8_0, FA on``."""
        slots = "slot" if self.parallel == 1 else "slots"
        return (
            f"{self.num_ctx} × {self.parallel} {slots}, {self.cache_type}, FA {'on' if self.flash_attention else 'off'}"
        )


CalibrationSource = Literal["allocated", "derived"]


@dataclass(frozen=True, slots=True)
class Calibration:
    """Real figures of the loaded model, to anchor the compute estimate and to compare with.

    Attributes:
        config: The configuration the model is loaded with.
        compute_bytes: Its compute buffers: allocated (runner log) or derived (``/api/ps`` size
            minus weights minus KV).
        source: ``allocated`` (runner log) or ``derived`` (from ``/api/ps``).
        note: Where the figures come from, in words.
        weights_bytes: Weights as allocated (log), or as used in the derivation.
        kv_bytes: KV cache as allocated (log), or as used in the derivation.
        total_bytes: Every buffer of the load (log), or ``/api/ps`` size.
        weights_lines: Weight buffer lines behind ``weights_bytes`` (each rounded to 0.01 MiB).
        kv_lines: KV buffer lines behind ``kv_bytes``.
        lines: Buffer lines behind ``total_bytes``.
    """

    config: PlanConfig
    compute_bytes: int
    source: CalibrationSource
    note: str
    weights_bytes: int | None = None
    kv_bytes: int | None = None
    total_bytes: int | None = None
    weights_lines: int = 0
    kv_lines: int = 0
    lines: int = 0


def calibration_from_load(load: Any, *, note: str = "runner log") -> Calibration | None:
    """Calibration from a runner log load (``kvtop.logparse.loads.Load``) that has allocations.

    Args:
        load: A ``Load``; duck-typed so this module needs no log-parser import.
        note: Where the load comes from (shown to the user).

    Returns:
        None when the load lacks the context, slots or a compute allocation.
    """
    memory: Mapping[str, Mapping[str, int]] = getattr(load, "memory", {}) or {}
    compute = memory.get("compute") or {}
    per_seq = getattr(load, "num_ctx_per_seq", None)
    parallel = getattr(load, "parallel", None) or 1
    if not compute or not per_seq:
        return None
    kv_type = kv.normalize_cache_type(getattr(load, "kv_type_k", None) or "f16") or "f16"
    fa = getattr(load, "flash_attention", None) != "disabled"
    weights = memory.get("weights") or {}
    kv_lines = 1 if getattr(load, "kv_bytes_stated", False) else len(memory.get("kv") or {})
    total = sum(sum(per.values()) for per in memory.values())
    return Calibration(
        config=PlanConfig(per_seq, kv_type, parallel, fa),
        compute_bytes=sum(compute.values()),
        source="allocated",
        note=note,
        weights_bytes=sum(weights.values()) if weights else None,
        kv_bytes=getattr(load, "kv_bytes", None),
        total_bytes=total,
        weights_lines=len(weights),
        kv_lines=kv_lines,
        lines=sum(len(per) for per in memory.values()),
    )


def calibration_from_view(view: ModelView) -> Calibration | None:
    """Calibration from a dashboard row: its matched runner load, else ``/api/ps`` size.

    Without a load, the compute figure is the row's ``size − weights − KV`` (at the KV type,
    slots and flash attention the row assumes: Ollama's defaults until the log says otherwise).

    Returns:
        None for a cloud model, or when the context, slots or compute figure are not known.
    """
    if view.cloud:
        return None
    if view.load is not None:
        cal = calibration_from_load(view.load, note=view.load_note)
        if cal is not None:
            return cal
    ctx, par = view.context.value, view.parallel.value
    compute = view.memory.compute
    if ctx is None or par is None or compute.value is None:
        return None
    kv_type = kv.normalize_cache_type((view.kv_type.value or "f16").split("/")[0]) or "f16"
    fa = view.flash_attention.value != "disabled"
    source: CalibrationSource = "allocated" if compute.source == "allocated" else "derived"
    note = compute.note if compute.source == "allocated" else "/api/ps size − weights − KV"
    return Calibration(
        PlanConfig(ctx, kv_type, par, fa),
        compute.value,
        source,
        note,
        weights_bytes=view.memory.weights.value,
        kv_bytes=view.memory.kv.value,
        total_bytes=view.size_bytes,
    )


def kv_now(view: ModelView) -> int | None:
    """A loaded model's KV cache now: allocated (runner log), else kvtop's estimate; None when neither."""
    if view.memory.kv.value is not None:
        return view.memory.kv.value
    return view.kv_estimate.total_bytes if view.kv_estimate is not None else None


def beside_kv(view: ModelView, total_bytes: int | None = None) -> int | None:
    """Everything of a loaded model but its KV cache (weights and compute buffers): its memory
    (``total_bytes``, by default its ``/api/ps`` size) minus its KV cache now (:func:`kv_now`).

    One derivation for two users: the spill alert sizes its fixes with it (``total_bytes`` = what
    the model needs on the GPU), and the what-if splits it into weights and compute when neither a
    tensor list nor a file size gives the weights (:func:`derive_weights`). None when the size or
    the KV cache is not known.
    """
    total = view.size_bytes if total_bytes is None else total_bytes
    kv_bytes = kv_now(view)
    if total is None or kv_bytes is None:
        return None
    return max(0, total - kv_bytes)


def derive_weights(spec: ModelSpec, view: ModelView, *, engine: Engine = "llama-server") -> ModelSpec:
    """``spec`` with the weights of the loaded ``view`` when nothing else gave them: what is not the
    KV cache (:func:`beside_kv`, as the spill alert derives it) less the compute estimate at the
    configuration it runs with. So the what-if of a spilled model whose file size is not known
    still has a total (marked estimated), equal to the ``/api/ps`` size at the loaded configuration.

    Returns:
        ``spec`` unchanged when it has weights, the model is a cloud model, or the size, KV cache,
        context or slots are not known.
    """
    if spec.weights_bytes is not None or view.cloud:
        return spec
    rest = beside_kv(view)
    ctx, par = view.context.value, view.parallel.value
    if rest is None or not ctx or not par:
        return spec
    cache_type = kv.normalize_cache_type((view.kv_type.value or "f16").split("/")[0]) or "f16"
    config = PlanConfig(
        ctx, cache_type if cache_type in PLAN_CACHE_TYPES else "f16", par, view.flash_attention.value != "disabled"
    )
    try:
        compute = compute_model_bytes(spec, config, engine=engine)
    except ValueError:
        return spec
    weights = max(0, rest - compute)
    note = (
        f"estimated: /api/ps size − KV cache = {rest:,} B (weights + compute, as the spill alert derives "
        f"them) − {compute:,} B compute estimate at {config.label()}; no tensor list or file size"
    )
    n_layer = spec.block_count
    layers = _even_split(weights, n_layer) if n_layer > 0 else None
    notes = spec.notes + (("layer sizes assumed equal: no usable tensor list from /api/show",) if layers else ())
    return dataclasses.replace(
        spec, weights_bytes=weights, weights_note=note, layers=layers, notes=notes, weights_estimated=True
    )


@dataclass(frozen=True, slots=True)
class Fit:
    """Where a configuration lands on the GPU, layer by layer.

    Attributes:
        budget_bytes: GPU memory available to the model.
        need_bytes: GPU memory for 100% offload (weights but the input layer, KV, compute).
        verdict: ``fits`` (with room beyond the stated error), ``marginal`` (within it) or
            ``spills`` (short by more than it).
        headroom_bytes: ``budget − need``; negative when short.
        gpu_layers: Layers offloaded, counting the output layer (``offloaded N/M``).
        total_layers: ``block_count + 1`` (Ollama and llama.cpp count the output layer).
        spilled: Block indices left on the CPU (the first ones; llama.cpp offloads from the end).
        gpu_used_bytes: GPU memory used with ``gpu_layers`` offloaded.
        cpu_bytes: Host memory of the model then (input layer, spilled layers and their KV).
        processor: The PROCESSOR column ``ollama ps`` would print (``kv.processor_string``).
        layers_exact: False when per-layer weights were assumed equal.
    """

    budget_bytes: int
    need_bytes: int
    verdict: Literal["fits", "marginal", "spills"]
    headroom_bytes: int
    gpu_layers: int
    total_layers: int
    spilled: tuple[int, ...]
    gpu_used_bytes: int
    cpu_bytes: int
    processor: str
    layers_exact: bool

    def text(self) -> str:
        """``fits: 100% GPU`` / ``spills: layers 0–5 on CPU (27/33 on GPU)`` / ``marginal: …``."""
        where = f"{_ranges(self.spilled)} on CPU ({self.gpu_layers}/{self.total_layers} on GPU)"
        if self.verdict == "fits":
            return "fits: 100% GPU"
        if self.verdict == "marginal":
            if self.headroom_bytes >= 0:
                return "marginal: fits, inside the error"
            return f"marginal: {where}"
        return f"spills: {where}"


def _ranges(indices: Sequence[int]) -> str:
    """``layers 0–5, 9`` for ``(0, 1, 2, 3, 4, 5, 9)``; ``no layer`` for none."""
    if not indices:
        return "no layer"
    parts: list[str] = []
    start = prev = indices[0]
    for i in list(indices[1:]) + [-2]:
        if i == prev + 1:
            prev = i
            continue
        parts.append(f"{start}" if start == prev else f"{start}–{prev}")
        start = prev = i
    return ("layer " if len(indices) == 1 else "layers ") + ", ".join(parts)


@dataclass(frozen=True, slots=True)
class Prediction:
    """The predicted memory of one configuration.

    Attributes:
        config: The configuration as it would run (num_ctx clamped to the training context).
        requested_num_ctx: The num_ctx asked for.
        engine: The runner the compute model assumed.
        weights_bytes: All weights (tensor sum or file size), None when not known.
        weights_note: Where ``weights_bytes`` comes from.
        kv: Exact KV allocation, None when unavailable (see ``kv_problem``).
        kv_problem: Why there is no KV figure: the architecture is not modelled, or llama.cpp
            refuses the configuration (quantized V without flash attention, head dims).
        recurrent_bytes: Recurrent state of hybrid models (per sequence x slots), 0 for none,
            None when its keys are missing.
        compute_bytes: Estimated compute buffers (always an estimate).
        compute_error_bytes: Stated error of ``compute_bytes``.
        compute_note: How the estimate was made, beginning with "estimated".
        compute_calibrated: True when anchored to a real figure of the loaded model.
        total_bytes: weights + KV + recurrent + compute, None when a part is unknown.
        total_error_bytes: Stated error of the total (the compute estimate's).
        gpu_bytes: GPU memory for 100% offload (the input layer stays on the CPU).
        fit: The fit against a budget, None without one.
        notes: Clamping, refusals and assumptions, in words.
        weights_estimated: The weights were derived (``ModelSpec.weights_estimated``): the weights
            and the total are estimates.
    """

    config: PlanConfig
    requested_num_ctx: int
    engine: Engine
    weights_bytes: int | None
    weights_note: str
    kv: kv.KVEstimate | None
    kv_problem: str | None
    recurrent_bytes: int | None
    compute_bytes: int
    compute_error_bytes: int
    compute_note: str
    compute_calibrated: bool
    total_bytes: int | None
    total_error_bytes: int
    gpu_bytes: int | None
    fit: Fit | None
    notes: tuple[str, ...] = ()
    weights_estimated: bool = False

    @property
    def kv_bytes(self) -> int | None:
        """KV cache bytes (K + V over every layer and slot), None when unavailable."""
        return self.kv.total_bytes if self.kv is not None else None


def _check_config(config: PlanConfig) -> PlanConfig:
    for name in ("num_ctx", "parallel", "n_ubatch"):
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if config.parallel > MAX_SLOTS:
        raise ValueError(f"parallel {config.parallel} exceeds llama.cpp's LLAMA_MAX_SEQ ({MAX_SLOTS})")
    cache_type = kv.normalize_cache_type(config.cache_type)
    if cache_type is None:
        raise ValueError(f"unknown KV cache type {config.cache_type!r}; expected one of {', '.join(PLAN_CACHE_TYPES)}")
    return dataclasses.replace(config, cache_type=cache_type)


def _kv(spec: ModelSpec, config: PlanConfig) -> tuple[kv.KVEstimate | None, str | None]:
    if isinstance(spec.layout, kv.KVUnavailable):
        return None, spec.layout.reason
    try:
        return kv.kv_allocation(
            spec.layout,
            config.num_ctx,
            config.parallel,
            config.cache_type,
            flash_attention=config.flash_attention,
            n_ubatch=config.n_ubatch,
        ), None
    except ValueError as exc:
        return None, f"llama.cpp refuses this configuration: {exc}"


def _compute_terms(
    spec: ModelSpec, config: PlanConfig, estimate: kv.KVEstimate | None, engine: Engine
) -> dict[str, int]:
    """The terms of the compute model (module docstring), in bytes."""
    ub = min(config.n_ubatch, config.num_ctx * config.parallel)
    mask_bytes = _MASK_BYTES[engine]
    terms: dict[str, int] = {"mask": 0, "scores": 0, "output": 0, "ffn": 0, "act": 0}
    if estimate is not None:
        full = estimate.full_layers > 0
        cells = estimate.cells_per_seq
        swa = estimate.swa_cells or 0
        terms["mask"] = ((cells if full else 0) + (swa if estimate.swa_layers else 0)) * ub * mask_bytes
        if not config.flash_attention and (estimate.full_layers or estimate.swa_layers):
            terms["scores"] = (cells if full else swa) * ub * (spec.n_head or 0) * _F32
    if engine == "llama-server" and spec.n_vocab:
        terms["output"] = spec.n_vocab * ub * _F32
    terms["ffn"] = 3 * (spec.n_ff or 0) * ub * _F32
    terms["act"] = 4 * (spec.n_embd or 0) * ub * _F32
    return terms


def compute_model_bytes(spec: ModelSpec, config: PlanConfig, *, engine: Engine = "llama-server") -> int:
    """The uncalibrated compute estimate of ``config`` (module docstring), in bytes.

    Raises:
        ValueError: An invalid configuration (see :func:`predict`).
    """
    config = _check_config(config)
    estimate, _ = _kv(spec, config)
    terms = _compute_terms(spec, config, estimate, engine)
    return terms["mask"] + terms["scores"] + max(terms["output"], terms["ffn"]) + terms["act"]


def _compute(
    spec: ModelSpec, config: PlanConfig, estimate: kv.KVEstimate | None, engine: Engine, calibration: Calibration | None
) -> tuple[int, int, str, bool]:
    terms = _compute_terms(spec, config, estimate, engine)
    model = terms["mask"] + terms["scores"] + max(terms["output"], terms["ffn"]) + terms["act"]
    if calibration is not None:
        try:
            base = compute_model_bytes(spec, calibration.config, engine=engine)
        except ValueError:
            base = None
        if base is not None:
            delta = model - base
            value = max(0, calibration.compute_bytes + delta)
            error = int(CALIBRATED_REL_ERROR * abs(delta)) + CALIBRATED_MIN_ERROR
            what = "allocated" if calibration.source == "allocated" else "derived from /api/ps"
            note = (
                f"estimated: {calibration.compute_bytes:,} B {what} at {calibration.config.label()}, "
                f"{'+' if delta >= 0 else '−'}{abs(delta):,} B modelled change (±{error:,} B)"
            )
            return value, error, note, True
    error = max(int(COMPUTE_REL_ERROR * model), COMPUTE_MIN_ERROR)
    missing = [
        name
        for name, value in (
            ("vocabulary size", spec.n_vocab),
            ("embedding_length", spec.n_embd),
            ("feed_forward_length", spec.n_ff),
        )
        if not value
    ]
    note = f"estimated from the graph llama.cpp reserves for {min(config.n_ubatch, config.num_ctx * config.parallel)} tokens (±{error:,} B)"
    if missing:
        note += f"; {', '.join(missing)} not known: left out"
    return model, error, note, False


def _per_layer_kv(spec: ModelSpec, config: PlanConfig, estimate: kv.KVEstimate, recurrent: int) -> list[int]:
    """KV (plus recurrent state) of each block, summing exactly to the totals.

    Layers with the same shape get equal shares of their group's :func:`kv.kv_allocation`; a
    flash-attention-off V padding difference is spread proportionally so the sum stays exact.
    """
    n = spec.block_count
    per = [0] * n
    layout = spec.layout
    if not isinstance(layout, kv.KVLayout) or n == 0:
        return per
    groups: dict[tuple[int, int, int, bool], list[int]] = {}
    for layer in layout.layers:
        groups.setdefault((layer.n_head_kv, layer.key_length, layer.value_length, layer.sliding_window), []).append(
            layer.index
        )
    for (heads, k_len, v_len, swa), indices in groups.items():
        sub = dataclasses.replace(layout, layers=(kv.KVLayer(indices[0], heads, k_len, v_len, swa),))
        each = kv.kv_allocation(
            sub,
            config.num_ctx,
            config.parallel,
            config.cache_type,
            flash_attention=config.flash_attention,
            n_ubatch=config.n_ubatch,
        ).total_bytes
        for i in indices:
            if i < n:
                per[i] += each
    gap = estimate.total_bytes - sum(per)
    if gap and sum(per):
        base = sum(per)
        shares = [p * gap // base for p in per]
        shares[max(range(n), key=lambda i: per[i])] += gap - sum(shares)
        per = [p + s for p, s in zip(per, shares)]
    if recurrent:
        each_state = recurrent // n
        per = [p + each_state for p in per]
        per[-1] += recurrent - each_state * n
    return per


def _fit(
    spec: ModelSpec, layers: LayerWeights, per_layer: Sequence[int], compute: int, need: int, error: int, budget: int
) -> Fit:
    n = len(layers.blocks)
    units = [layers.head_bytes] + [layers.blocks[i] + per_layer[i] for i in reversed(range(n))]
    headroom = budget - need
    if need + error <= budget:
        verdict: Literal["fits", "marginal", "spills"] = "fits"
    elif need - error > budget:
        verdict = "spills"
    else:
        verdict = "marginal"
    used = compute
    k = 0
    for unit in units:
        if used + unit > budget:
            break
        used += unit
        k += 1
    if k == 0:
        used = 0
    spilled = tuple(range(0, n - max(0, k - 1))) if k <= n else ()
    cpu = layers.input_bytes + sum(units[k:]) + (compute if k == 0 else 0)
    return Fit(
        budget_bytes=budget,
        need_bytes=need,
        verdict=verdict,
        headroom_bytes=headroom,
        gpu_layers=k,
        total_layers=n + 1,
        spilled=spilled,
        gpu_used_bytes=used,
        cpu_bytes=cpu,
        processor="100% GPU" if k == n + 1 else kv.processor_string(used + cpu, used),
        layers_exact=layers.exact,
    )


def predict(
    spec: ModelSpec,
    config: PlanConfig,
    *,
    budget_bytes: int | None = None,
    calibration: Calibration | None = None,
    engine: Engine = "llama-server",
) -> Prediction:
    """Predict the memory of ``spec`` launched with ``config``, and its fit in ``budget_bytes``.

    Args:
        spec: The model (:func:`model_spec`).
        config: The configuration.
        budget_bytes: GPU memory available to the model (:func:`gpu_budget`), or None.
        calibration: Real figures of the loaded model to anchor the compute estimate.
        engine: The runner (:func:`engine_for_version`); it decides the compute model's mask.

    Returns:
        The prediction. The KV figure is exact or absent with a reason; the compute figure is
        always an estimate with a stated error; the total is None when the KV or the weights
        are unknown.

    Raises:
        ValueError: num_ctx/parallel/n_ubatch not positive, more than ``MAX_SLOTS`` slots,
            or an unknown cache type.
    """
    requested = config.num_ctx
    config = _check_config(config)
    notes: list[str] = []
    if spec.context_train and config.num_ctx > spec.context_train:
        notes.append(
            f"num_ctx {config.num_ctx:,} is above the training context {spec.context_train:,}: "
            "Ollama (v0.15.5+) clamps it"
        )
        config = dataclasses.replace(config, num_ctx=spec.context_train)
    if kv.normalize_cache_type(config.cache_type) != "f16" and not config.flash_attention:
        notes.append("a quantized cache needs flash attention (llama.cpp refuses the load)")
    estimate, problem = _kv(spec, config)
    recurrent: int | None = 0
    if estimate is not None:
        recurrent = estimate.recurrent_bytes
        if recurrent is None:
            notes.append("recurrent state size unknown (state keys missing): not counted")
    compute, error, compute_note, calibrated = _compute(spec, config, estimate, engine, calibration)
    weights = spec.weights_bytes
    total: int | None = None
    gpu: int | None = None
    fit: Fit | None = None
    if estimate is not None and weights is not None:
        state = recurrent or 0
        total = weights + estimate.total_bytes + state + compute
        layers = spec.layers
        gpu_weights = layers.gpu_bytes if layers is not None else weights
        gpu = gpu_weights + estimate.total_bytes + state + compute
        if budget_bytes is not None and layers is not None and spec.block_count == len(layers.blocks):
            per_layer = _per_layer_kv(spec, config, estimate, state)
            fit = _fit(spec, layers, per_layer, compute, gpu, error, budget_bytes)
        elif budget_bytes is not None:
            fit = _fit(spec, LayerWeights((), 0, gpu_weights, 0, exact=False), [], compute, gpu, error, budget_bytes)
    if spec.layers is not None and not spec.layers.exact and fit is not None and fit.spilled:
        notes.append("spilled layers assume equal layer sizes (no tensor list)")
    return Prediction(
        config=config,
        requested_num_ctx=requested,
        engine=engine,
        weights_bytes=weights,
        weights_note=spec.weights_note,
        kv=estimate,
        kv_problem=problem,
        recurrent_bytes=recurrent,
        compute_bytes=compute,
        compute_error_bytes=error,
        compute_note=compute_note,
        compute_calibrated=calibrated,
        total_bytes=total,
        total_error_bytes=error,
        gpu_bytes=gpu,
        fit=fit,
        notes=tuple(notes),
        weights_estimated=spec.weights_estimated,
    )


def _gpu_need(spec: ModelSpec, config: PlanConfig, calibration: Calibration | None, engine: Engine) -> int | None:
    p = predict(spec, config, calibration=calibration, engine=engine)
    return p.gpu_bytes


def max_num_ctx_on_gpu(
    spec: ModelSpec,
    config: PlanConfig,
    budget_bytes: int | None,
    *,
    calibration: Calibration | None = None,
    engine: Engine = "llama-server",
) -> int | None:
    """The largest num_ctx that keeps ``config`` (its cache type, slots, flash attention) 100% on the GPU.

    Searched over multiples of 256 (llama.cpp pads cells to 256, so a value in between costs
    what the next multiple does) up to the training context, which is returned itself when it
    fits. Monotonic because KV and compute never shrink as num_ctx grows.

    Args:
        spec: The model.
        config: The configuration; its ``num_ctx`` is ignored.
        budget_bytes: GPU memory available to the model.
        calibration: As for :func:`predict`.
        engine: As for :func:`predict`.

    Returns:
        Tokens per slot; 0 when not even 256 fit; None when the budget or the KV/weights are
        unknown, or llama.cpp refuses the configuration.
    """
    if budget_bytes is None:
        return None
    cap = spec.context_train or (kv.MAX_CONTEXT_CELLS // max(1, config.parallel))

    def fits(num_ctx: int) -> bool | None:
        need = _gpu_need(spec, dataclasses.replace(config, num_ctx=num_ctx), calibration, engine)
        return None if need is None else need <= budget_bytes

    first = fits(min(256, cap))
    if first is None:
        return None
    if not first:
        return 0
    if fits(cap):
        return cap
    lo, hi = 1, max(1, cap // 256)  # fits(lo * 256); not fits(cap) so hi*256 (≤ cap) may or may not
    if fits(hi * 256):
        return hi * 256
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid * 256):
            lo = mid
        else:
            hi = mid
    return lo * 256


def num_ctx_bound(spec: ModelSpec, config: PlanConfig, value: int | None) -> str | None:
    """Which limit a :func:`max_num_ctx_on_gpu` result ``value`` is: ``"memory"`` (the GPU budget),
    ``"training context"`` (the model's: Ollama clamps num_ctx to it, docs/ollama-internals.md §3.4)
    or ``"cell limit"`` (llama.cpp's ``uint32`` of cells, when no training context is known); None
    when ``value`` is None."""
    if value is None:
        return None
    if spec.context_train and value >= spec.context_train:
        return "training context"
    if not spec.context_train and value >= kv.MAX_CONTEXT_CELLS // max(1, config.parallel):
        return "cell limit"
    return "memory"


def num_ctx_limit_text(spec: ModelSpec, config: PlanConfig, value: int | None) -> str:
    """``24,576 (memory)``, ``40,960 (training context)``, ``0 (memory: not even 256 fit)`` or ``?``:
    the largest num_ctx on the GPU with the limit that binds, the same on every face."""
    bound = num_ctx_bound(spec, config, value)
    if value is None or bound is None:
        return "?"
    return f"{value:,} ({bound}{': not even 256 fit' if value == 0 else ''})"


def max_parallel_on_gpu(
    spec: ModelSpec,
    config: PlanConfig,
    budget_bytes: int | None,
    *,
    calibration: Calibration | None = None,
    engine: Engine = "llama-server",
) -> int | None:
    """The most slots at ``config.num_ctx`` that stay 100% on the GPU (at most ``MAX_SLOTS``).

    Returns:
        Slots; 0 when not even one fits; None when the budget or the KV/weights are unknown.
    """
    if budget_bytes is None:
        return None

    def fits(parallel: int) -> bool | None:
        need = _gpu_need(spec, dataclasses.replace(config, parallel=parallel), calibration, engine)
        return None if need is None else need <= budget_bytes

    first = fits(1)
    if first is None:
        return None
    if not first:
        return 0
    if fits(MAX_SLOTS):
        return MAX_SLOTS
    lo, hi = 1, MAX_SLOTS
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


# --------------------------------------------------------------------------------------------
# Prediction next to reality


LOG_ROUNDING_BYTES: Final = 5243
"""llama.cpp prints buffer sizes in MiB with two decimals: each line is within 0.005 MiB."""


@dataclass(frozen=True, slots=True)
class ComparisonRow:
    """One component: predicted, real, and whether the difference is within the stated error.

    Attributes:
        component: ``weights``, ``KV cache``, ``compute`` or ``total``.
        predicted: The uncalibrated prediction, bytes.
        actual: The real figure, bytes (None when the source has none).
        error_bytes: ``predicted − actual``.
        stated_error_bytes: The error the prediction states (log rounding for exact parts).
        within: Whether ``|error| ≤ stated error``; None when not comparable.
    """

    component: str
    predicted: int | None
    actual: int | None
    error_bytes: int | None
    stated_error_bytes: int
    within: bool | None

    @property
    def error_percent(self) -> float | None:
        """The error relative to the real figure, in percent."""
        if self.error_bytes is None or not self.actual:
            return None
        return 100.0 * self.error_bytes / self.actual


@dataclass(frozen=True, slots=True)
class Comparison:
    """The prediction for the loaded configuration next to what the runner allocated.

    Attributes:
        calibration: The real figures.
        prediction: The uncalibrated prediction at ``calibration.config``.
        rows: Weights, KV cache, compute and total.
    """

    calibration: Calibration
    prediction: Prediction
    rows: tuple[ComparisonRow, ...]


def compare(spec: ModelSpec, calibration: Calibration, *, engine: Engine = "llama-server") -> Comparison:
    """Predict the loaded configuration without calibration and compare it with the real figures.

    KV must match exactly (within the log's 0.01 MiB rounding); weights within the rounding of
    their buffer lines; compute and total within the compute estimate's stated error. A derived
    calibration (from ``/api/ps``) compares compute and total only: its weights and KV are the
    predicted ones.
    """
    p = predict(spec, calibration.config, engine=engine)
    rounding = LOG_ROUNDING_BYTES if calibration.source == "allocated" else 0

    def row(name: str, predicted: int | None, actual: int | None, stated: int) -> ComparisonRow:
        if predicted is None or actual is None:
            return ComparisonRow(name, predicted, actual, None, stated, None)
        error = predicted - actual
        return ComparisonRow(name, predicted, actual, error, stated, abs(error) <= stated)

    c = calibration
    rows: tuple[ComparisonRow, ...] = (
        row("compute", p.compute_bytes, c.compute_bytes, p.compute_error_bytes + rounding),
        row("total", p.total_bytes, c.total_bytes, p.total_error_bytes + rounding * max(1, c.lines)),
    )
    if c.source == "allocated":  # derived figures used the predicted weights and KV themselves
        rows = (
            row("weights", p.weights_bytes, c.weights_bytes, rounding * max(1, c.weights_lines)),
            row("KV cache", p.kv_bytes, c.kv_bytes, rounding * max(1, c.kv_lines)),
        ) + rows
    return Comparison(calibration, p, rows)


# --------------------------------------------------------------------------------------------
# Applying server-wide settings


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """How to apply server-wide settings: they cannot be set per request (Ref §3.1-§3.3).

    Attributes:
        env: ``(variable, value)`` pairs.
        systemd: A drop-in and the commands around it (Linux install, systemd unit ``ollama``).
        launchctl: ``launchctl setenv`` lines (macOS app), then restart the app.
        docker: A ``docker run`` line with ``-e`` flags.
        notes: What else to know (restart unloads every model; num_ctx is per request).
    """

    env: tuple[tuple[str, str], ...]
    systemd: tuple[str, ...]
    launchctl: tuple[str, ...]
    docker: str
    notes: tuple[str, ...]


def server_settings(cache_type: str, parallel: int, flash_attention: bool) -> ServerSettings:
    """The lines that set ``OLLAMA_KV_CACHE_TYPE``, ``OLLAMA_NUM_PARALLEL`` and ``OLLAMA_FLASH_ATTENTION``.

    Flash attention is always set explicitly: a quantized cache without it is refused by the
    runner, and the unset default leaves the decision to a probe (seeds settings reference;
    Ref §3.1). Values are read at server start only (Ref §3).

    Raises:
        ValueError: Unknown cache type or parallel < 1.
    """
    ct = kv.normalize_cache_type(cache_type)
    if ct is None:
        raise ValueError(f"unknown KV cache type {cache_type!r}")
    if isinstance(parallel, bool) or not isinstance(parallel, int) or parallel < 1:
        raise ValueError("parallel must be a positive integer")
    env = (
        ("OLLAMA_FLASH_ATTENTION", "1" if flash_attention else "0"),
        ("OLLAMA_KV_CACHE_TYPE", ct),
        ("OLLAMA_NUM_PARALLEL", str(parallel)),
    )
    systemd = (
        "sudo systemctl edit ollama.service",
        "[Service]",
        *(f'Environment="{k}={v}"' for k, v in env),
        "sudo systemctl daemon-reload && sudo systemctl restart ollama",
    )
    launchctl = tuple(f"launchctl setenv {k} {v}" for k, v in env) + ("# then quit and reopen the Ollama app",)
    docker = "docker run -d " + " ".join(f"-e {k}={v}" for k, v in env) + " -p 11434:11434 ollama/ollama"
    notes = [
        "a restart unloads every model",
        "num_ctx is per request (options.num_ctx), or OLLAMA_CONTEXT_LENGTH for the server's default",
    ]
    if ct != "f16" and not flash_attention:
        notes.append(f"{ct} with flash attention off is refused by llama.cpp: the load fails")
    return ServerSettings(env, systemd, launchctl, docker, tuple(notes))


# --------------------------------------------------------------------------------------------
# JSON


def prediction_json(
    p: Prediction,
    *,
    max_num_ctx: int | None = None,
    max_parallel: int | None = None,
    max_num_ctx_bound: str | None = None,
) -> dict[str, Any]:
    """One prediction as JSON-ready data (exact bytes; the compute figure flagged as estimated)."""
    fit: dict[str, Any] | None = None
    if p.fit is not None:
        f = p.fit
        fit = {
            "verdict": f.verdict,
            "budget_bytes": f.budget_bytes,
            "need_bytes": f.need_bytes,
            "headroom_bytes": f.headroom_bytes,
            "gpu_layers": f.gpu_layers,
            "total_layers": f.total_layers,
            "spilled_layers": list(f.spilled),
            "gpu_used_bytes": f.gpu_used_bytes,
            "cpu_bytes": f.cpu_bytes,
            "processor": f.processor,
            "layers_exact": f.layers_exact,
        }
    return {
        "num_ctx": p.config.num_ctx,
        "requested_num_ctx": p.requested_num_ctx,
        "kv_type": p.config.cache_type,
        "parallel": p.config.parallel,
        "flash_attention": p.config.flash_attention,
        "weights_bytes": p.weights_bytes,
        "weights_source": p.weights_note,
        "kv_bytes": p.kv_bytes,
        "kv_formula": p.kv.formula if p.kv is not None else None,
        "kv_unavailable": p.kv_problem,
        "recurrent_bytes": p.recurrent_bytes,
        "compute_bytes": p.compute_bytes,
        "compute_error_bytes": p.compute_error_bytes,
        "compute_estimated": True,
        "compute_calibrated": p.compute_calibrated,
        "compute_note": p.compute_note,
        "total_bytes": p.total_bytes,
        "total_error_bytes": p.total_error_bytes,
        "gpu_bytes": p.gpu_bytes,
        "fit": fit,
        "max_num_ctx_on_gpu": max_num_ctx,
        "max_num_ctx_on_gpu_bound": max_num_ctx_bound,
        "max_parallel_on_gpu": max_parallel,
        "engine": p.engine,
        "notes": list(p.notes),
    }


def comparison_json(c: Comparison) -> dict[str, Any]:
    """A comparison as JSON-ready data."""
    return {
        "source": c.calibration.source,
        "note": c.calibration.note,
        "config": dataclasses.asdict(c.calibration.config),
        "rows": [
            {
                "component": r.component,
                "predicted_bytes": r.predicted,
                "actual_bytes": r.actual,
                "error_bytes": r.error_bytes,
                "error_percent": None if r.error_percent is None else round(r.error_percent, 3),
                "stated_error_bytes": r.stated_error_bytes,
                "within": r.within,
            }
            for r in c.rows
        ],
    }
