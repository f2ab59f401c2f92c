"""Exact KV-cache arithmetic for models served by Ollama.

One module over ~600 lines on purpose (issue 24): it is one idea, the KV arithmetic, whose layout,
allocation rules and their inverse check one another and would only be harder to read apart.

kvtop shows the KV cache a runner *should* have allocated next to what the log says it did
allocate; this module is the "estimated" side. It is pure: no I/O, no clock, no UI imports.
Every size is an integer number of bytes and every result is exact (integer arithmetic that
follows ggml's own ``ggml_nbytes``), so a number here either equals llama.cpp's or points at a
real difference.

Sources. "Ref §x" is a section of ``docs/ollama-internals.md`` in this repository
(Ollama HEAD v0.33.0-rc2, its vendored llama.cpp @v0.24.0, llama.cpp b4747). "Corpus NNN" is a
real posted log in the project corpus (copied to ``tests/fixtures/logs/``).

The pipeline is:

1. :func:`layout_from_model_info` turns ``/api/show`` ``model_info`` (full GGUF keys) into a
   :class:`KVLayout`: which layers own a per-token cache, their KV heads and head dims, which
   are sliding-window, and the per-sequence recurrent state of hybrid models. It never raises:
   anything it cannot derive without guessing becomes a :class:`KVUnavailable` with a reason.
2. :func:`bytes_per_token` and :func:`kv_allocation` apply llama.cpp's allocation rules
   (cell padding, one stream per slot, the capped SWA cache, transposed V without flash
   attention) to a layout. :func:`max_num_ctx` inverts that by search.
3. :func:`processor_string` reproduces the PROCESSOR column of ``ollama ps``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType
from typing import Any, Final

from kvtop.model.humanize import go_round

__all__ = [
    "CACHE_TYPES",
    "CELL_PADDING",
    "MAX_CONTEXT_CELLS",
    "VERBOSE_HINT",
    "KVEstimate",
    "KVLayer",
    "KVLayout",
    "KVUnavailable",
    "bytes_per_token",
    "kv_allocation",
    "layout_from_model_info",
    "max_num_ctx",
    "normalize_cache_type",
    "processor_string",
]

CACHE_TYPES: Final[Mapping[str, tuple[int, int]]] = MappingProxyType(
    {
        "f32": (4, 1),
        "f16": (2, 1),
        "bf16": (2, 1),
        "q8_0": (34, 32),
        "q4_0": (18, 32),
        "q4_1": (20, 32),
        "q5_0": (22, 32),
        "q5_1": (24, 32),
        "iq4_nl": (18, 32),
    }
)
"""KV cache types llama-server accepts, as ``name -> (type_size_bytes, block_size)``.

A row of ``n`` elements costs ``n * type_size / block_size`` bytes (ggml ``ggml_row_size``).
The list is llama.cpp ``common/arg.cpp kv_cache_types`` (Ref §3.2); the sizes are ggml's block
structs, e.g. ``block_q8_0`` = 2-byte f16 scale + 32 int8 = 34 bytes per 32 values (Ref §2.6).
"""

CELL_PADDING: Final = 256
"""Cells of a llama.cpp KV cache are padded to a multiple of this (Ref §2.4, ``GGML_PAD``)."""

MAX_CONTEXT_CELLS: Final = 2**32 - 1
"""llama.cpp keeps ``n_ctx`` (= num_ctx x parallel) in a ``uint32_t`` (Ref §2.4)."""

VERBOSE_HINT: Final = "per-layer arrays missing: call /api/show with verbose"
"""Reason text when ``model_info`` arrays are ``null`` (non-verbose ``/api/show``, Ref §2.2)."""

_F32_BYTES: Final = 4
_MAX_LAYERS: Final = 4096
_GEMMA3N_KV_LAYERS: Final = 20
_LLAMA4_CHUNK: Final = 8192
_GEMMA2_DEFAULT_SWA: Final = 4096
_QWEN_HYBRID_DEFAULT_INTERVAL: Final = 4

_QWEN_HYBRID: Final = frozenset({"qwen3next", "qwen35", "qwen35moe"})
_NEMOTRON_H: Final = frozenset({"nemotron_h", "nemotron_h_moe"})
_LFM2: Final = frozenset({"lfm2", "lfm2moe"})
_MAMBA: Final = frozenset({"mamba", "mamba2"})
_RWKV: Final = frozenset({"rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"})
_NEXTN_EXCLUDED: Final = frozenset({"glm4moe", "bailingmoe2"})
_MLA_ARCHS: Final = frozenset({"deepseek2", "glm4moelite"})
_SWA_ARCHS: Final = frozenset(
    {"gemma2", "gemma3", "gemma3n", "gemma4", "gpt-oss", "gptoss", "llama4", "olmo3", "cohere2"}
)
_SWA_IGNORED: Final = frozenset({"phi3"})

_NO_KV: Final[Mapping[str, str]] = MappingProxyType(
    {
        name: "encoder-only embedding model: llama.cpp allocates no KV cache for it"
        for name in (
            "bert",
            "nomic-bert",
            "nomic-bert-moe",
            "jina-bert-v2",
            "jina-bert-v3",
            "neo-bert",
            "modern-bert",
            "eurobert",
            "gemma-embedding",
        )
    }
)
"""Embedding archs with no generation KV cache (llama.cpp ``create_memory`` returns none; corpus 063
shows an embedding model's context with no KV cache lines)."""

_NOT_MODELLED: Final[Mapping[str, str]] = MappingProxyType(
    {
        "deepseek4": "DeepSeek V4 keeps a compressed KV cache (llama.cpp llama-memory-deepseek4) "
        "that kvtop does not model",
        "mllama": "cross-attention layers keep a fixed-size image cache that kvtop does not model",
        "t5": "encoder-decoder model: its cross-attention cache is not modelled",
        "t5encoder": "encoder-only model: no generation KV cache",
        "plamo2": "hybrid Mamba/attention layout not modelled",
        "kimi-linear": "hybrid KDA/MLA layout not modelled",
    }
)


class _Unavailable(Exception):
    """Internal: the reason a layout cannot be derived without guessing."""


# --------------------------------------------------------------------------------------------
# Cache types


def normalize_cache_type(name: str | None) -> str | None:
    """Return the canonical KV cache type name, or ``None`` if it is unknown.

    Ollama lower-cases ``OLLAMA_KV_CACHE_TYPE`` and trims spaces and quotes, and treats an empty
    value as the f16 default (Ref §3.2 and §3; B2 ``KvCacheType:`` empty means f16).

    Args:
        name: A cache type as configured or logged (``"Q8_0"``, ``"f16"``, ``""``), or ``None``
            when the type is not known at all.

    Returns:
        A key of :data:`CACHE_TYPES`; ``"f16"`` for an empty string; ``None`` for ``None``,
        a non-string, or a name llama.cpp does not accept.
    """
    if not isinstance(name, str):
        return None
    value = name.strip().strip("\"'").strip().lower()
    if value == "":
        return "f16"
    return value if value in CACHE_TYPES else None


def _cache_type(name: object) -> str:
    """Normalise a cache type argument or raise ``ValueError``."""
    canonical = normalize_cache_type(name) if isinstance(name, str) else None
    if canonical is None:
        raise ValueError(f"unknown KV cache type {name!r}; expected one of {', '.join(CACHE_TYPES)}")
    return canonical


def _is_quantized(cache_type: str) -> bool:
    return CACHE_TYPES[cache_type][1] > 1


def _row_bytes(n_elements: int, cache_type: str) -> int:
    """Bytes of one ggml row of ``n_elements`` values (``ggml_row_size``), or ``ValueError``."""
    type_size, block = CACHE_TYPES[cache_type]
    if n_elements % block:
        raise ValueError(f"{cache_type} rows need a multiple of {block} elements, got {n_elements}")
    return n_elements * type_size // block


# --------------------------------------------------------------------------------------------
# Data types


@dataclass(frozen=True, slots=True)
class KVLayer:
    """One transformer layer that owns a per-token KV cache.

    Attributes:
        index: Layer index ``il`` in the GGUF (``blk.<il>``), 0-based.
        n_head_kv: KV heads of this layer (``attention.head_count_kv[il]``), > 0.
        key_length: Elements per head in K (``n_embd_head_k``).
        value_length: Elements per head in V (``n_embd_head_v``).
        sliding_window: True for a SWA/chunked/local layer whose cache is capped at about
            ``n_swa + n_ubatch`` cells; False for a full-context layer.
    """

    index: int
    n_head_kv: int
    key_length: int
    value_length: int
    sliding_window: bool

    @property
    def k_width(self) -> int:
        """Elements of K per token (``n_embd_k_gqa(il)`` = key_length x n_head_kv)."""
        return self.key_length * self.n_head_kv

    @property
    def v_width(self) -> int:
        """Elements of V per token (``n_embd_v_gqa(il)`` = value_length x n_head_kv)."""
        return self.value_length * self.n_head_kv


@dataclass(frozen=True, slots=True)
class KVLayout:
    """The KV-relevant shape of a model, derived from its GGUF keys.

    Attributes:
        architecture: ``general.architecture``.
        block_count: ``<arch>.block_count`` (all layers, including ones without KV).
        context_length_train: ``<arch>.context_length`` (n_ctx_train) or ``None``.
        layers: Layers that own a per-token KV cache, in index order. Recurrent, MLP-only and
            shared-KV layers are excluded.
        sliding_window_tokens: ``n_swa`` when any layer is SWA/chunked, else ``None``.
        recurrent_layers: Number of recurrent (Mamba/GDN/conv/RWKV) layers.
        recurrent_state_bytes_per_seq: f32 R+S state bytes per sequence summed over the
            recurrent layers (0 when there are none), ``None`` when the keys needed are missing.
        notes: Human-readable facts about the layout (iSWA split, MLA dims, hybrids...).
        mla: True for a multi-head latent attention model (``key_length_mla`` and
            ``value_length_mla`` present), where newer llama.cpp may skip the V cache.
    """

    architecture: str
    block_count: int
    context_length_train: int | None
    layers: tuple[KVLayer, ...]
    sliding_window_tokens: int | None
    recurrent_layers: int
    recurrent_state_bytes_per_seq: int | None
    notes: tuple[str, ...]
    mla: bool = False
    _hash: int = field(init=False, repr=False, compare=False)
    """The hash of the other fields, computed once: a layout is part of the key of the cached
    :func:`kv_allocation` and :func:`max_num_ctx`, which the alert rules call many times per
    evaluation, and a generated hash walked every layer on each call (equality stays the
    generated field-by-field one)."""

    def __post_init__(self) -> None:
        object.__setattr__(
            self,
            "_hash",
            hash(
                (
                    self.architecture,
                    self.block_count,
                    self.context_length_train,
                    self.layers,
                    self.sliding_window_tokens,
                    self.recurrent_layers,
                    self.recurrent_state_bytes_per_seq,
                    self.notes,
                    self.mla,
                )
            ),
        )

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[Any, ...]:
        """Rebuilt from the fields (string hashes differ between processes: never copy ``_hash``)."""
        return (
            self.__class__,
            (
                self.architecture,
                self.block_count,
                self.context_length_train,
                self.layers,
                self.sliding_window_tokens,
                self.recurrent_layers,
                self.recurrent_state_bytes_per_seq,
                self.notes,
                self.mla,
            ),
        )

    @property
    def full_layers(self) -> int:
        """Number of full-context KV layers."""
        return sum(1 for layer in self.layers if not layer.sliding_window)

    @property
    def swa_layers(self) -> int:
        """Number of sliding-window KV layers."""
        return sum(1 for layer in self.layers if layer.sliding_window)


@dataclass(frozen=True, slots=True)
class KVUnavailable:
    """Why no KV layout could be derived (shown instead of a number, never a guess).

    Attributes:
        architecture: ``general.architecture`` (``"unknown"`` when missing).
        reason: ``"estimate unavailable for <arch>: <why>"``.
    """

    architecture: str
    reason: str


@dataclass(frozen=True, slots=True)
class KVEstimate:
    """The KV cache llama.cpp allocates for one layout and launch configuration.

    Attributes:
        total_bytes: K + V over all KV layers and streams (not the recurrent state).
        k_bytes: K part of ``total_bytes`` (llama.cpp ``K (<type>): ... MiB``).
        v_bytes: V part of ``total_bytes`` (llama.cpp ``V (<type>): ... MiB``).
        cells_per_seq: Cells per stream of the full-attention cache (``n_ctx_seq``, padded);
            the ``cells`` of the ``llama_kv_cache: size = ... (N cells, ...)`` line.
        n_seq: Streams (``n_stream``): the parallel slots, or 1 for a unified cache.
        swa_cells: Cells per stream of the SWA cache, ``None`` without SWA layers.
        full_layers: Full-context KV layers.
        swa_layers: Sliding-window KV layers.
        recurrent_bytes: Recurrent state over all sequences (per seq x max(1, parallel)),
            0 without recurrent layers, ``None`` if unknown. Not included in ``total_bytes``.
        cache_type_k: Canonical K cache type.
        cache_type_v: Canonical V cache type.
        formula: The arithmetic in words and numbers, ending in ``= <total> B``.
        swa_bytes: Part of ``total_bytes`` held by the SWA cache.
        unified: True when the estimate assumed one unified stream (``kv_unified``).
    """

    total_bytes: int
    k_bytes: int
    v_bytes: int
    cells_per_seq: int
    n_seq: int
    swa_cells: int | None
    full_layers: int
    swa_layers: int
    recurrent_bytes: int | None
    cache_type_k: str
    cache_type_v: str
    formula: str
    swa_bytes: int = 0
    unified: bool = False


# --------------------------------------------------------------------------------------------
# model_info reading


def _as_int(value: Any) -> int | None:
    """Return a non-negative int for an int (or integral float) value that a GGUF header can
    hold (< 2**32: counts, dims and context lengths are u32 there), else ``None``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and 0 <= value < 2**32:
        return value
    return None


_ABSENT: Final = object()


class _Keys:
    """Typed access to ``<arch>.<key>`` entries of ``model_info``; raises ``_Unavailable``."""

    __slots__ = ("arch", "info")

    def __init__(self, info: Mapping[str, Any], arch: str) -> None:
        self.info = info
        self.arch = arch

    def name(self, key: str) -> str:
        return f"{self.arch}.{key}"

    def raw(self, key: str) -> Any:
        return self.info.get(self.name(key), _ABSENT)

    def has(self, key: str) -> bool:
        return self.raw(key) is not _ABSENT

    def uint(self, key: str) -> int:
        """A required scalar unsigned integer."""
        value = self.raw(key)
        if value is _ABSENT:
            raise _Unavailable(f"model_info has no {self.name(key)}")
        if value is None or isinstance(value, (list, tuple)):
            raise _Unavailable(f"{self.name(key)} is not a scalar integer")
        number = _as_int(value)
        if number is None:
            raise _Unavailable(f"{self.name(key)} is not a non-negative integer: {value!r}")
        return number

    def opt_uint(self, key: str) -> int | None:
        """An optional scalar: ``None`` when absent, ``_Unavailable`` when malformed."""
        if not self.has(key):
            return None
        return self.uint(key)

    def per_layer(self, key: str, n_layer: int) -> tuple[int, ...] | None:
        """A scalar-or-array key as one value per layer (llama.cpp ``get_key_or_arr``).

        Returns ``None`` when absent. A ``null`` or empty array is the non-verbose
        ``/api/show`` (Ref §2.2) and raises with :data:`VERBOSE_HINT`.
        """
        value = self.raw(key)
        if value is _ABSENT:
            return None
        if value is None or (isinstance(value, (list, tuple)) and len(value) == 0):
            raise _Unavailable(f"{VERBOSE_HINT} ({self.name(key)} is null)")
        if isinstance(value, (list, tuple)):
            if len(value) != n_layer:
                raise _Unavailable(f"{self.name(key)} has {len(value)} entries for {n_layer} layers")
            numbers = tuple(_as_int(item) for item in value)
            if any(number is None for number in numbers):
                raise _Unavailable(f"{self.name(key)} holds a non-integer entry")
            return tuple(number for number in numbers if number is not None)
        number = _as_int(value)
        if number is None:
            raise _Unavailable(f"{self.name(key)} is not a non-negative integer: {value!r}")
        return (number,) * n_layer

    def is_array(self, key: str) -> bool:
        return isinstance(self.raw(key), (list, tuple))

    def bools(self, key: str, n_layer: int) -> tuple[bool, ...] | None:
        """A per-layer bool array (``sliding_window_pattern``); ``None`` when absent."""
        value = self.raw(key)
        if value is _ABSENT:
            return None
        if value is None or (isinstance(value, (list, tuple)) and len(value) == 0):
            raise _Unavailable(f"{VERBOSE_HINT} ({self.name(key)} is null)")
        if not isinstance(value, (list, tuple)):
            raise _Unavailable(f"{self.name(key)} is not an array")
        if len(value) != n_layer:
            raise _Unavailable(f"{self.name(key)} has {len(value)} entries for {n_layer} layers")
        if not all(isinstance(item, bool) or item in (0, 1) for item in value):
            raise _Unavailable(f"{self.name(key)} holds a non-boolean entry")
        return tuple(bool(item) for item in value)


@dataclass(frozen=True, slots=True)
class _Attention:
    """Per-layer attention dims before the KV/SWA filters."""

    heads: tuple[int, ...]
    kv_heads: tuple[int, ...]
    key_length: int
    value_length: int


def _attention(keys: _Keys, n_layer: int, *, head_dim_key: bool = False) -> _Attention:
    """Read head counts and head dims the way llama.cpp ``load_hparams`` does (Ref §2.3).

    ``head_count_kv`` defaults to ``head_count``; ``key_length``/``value_length`` default to
    ``embedding_length / head_count[0]``. ``head_dim_key`` also accepts ``attention.head_dim``
    first (the Ollama engine's nemotron_h reader, Ref §2.3).
    """
    heads = keys.per_layer("attention.head_count", n_layer)
    if heads is None:
        raise _Unavailable(f"model_info has no {keys.name('attention.head_count')}")
    kv_heads = keys.per_layer("attention.head_count_kv", n_layer) or heads
    key_length = keys.opt_uint("attention.key_length")
    value_length = keys.opt_uint("attention.value_length")
    if key_length is None or value_length is None:
        fallback = keys.opt_uint("attention.head_dim") if head_dim_key else None
        if fallback is None:
            n_embd = keys.opt_uint("embedding_length")
            if n_embd is None:
                raise _Unavailable(
                    f"model_info has neither {keys.name('attention.key_length')} nor {keys.name('embedding_length')}"
                )
            if heads[0] == 0 or n_embd % heads[0]:
                raise _Unavailable(
                    f"cannot derive the head dim: embedding_length {n_embd} / "
                    f"head_count {heads[0]} is not a whole number"
                )
            fallback = n_embd // heads[0]
        key_length = fallback if key_length is None else key_length
        value_length = fallback if value_length is None else value_length
    return _Attention(heads, kv_heads, key_length, value_length)


def _ssm_state_bytes(keys: _Keys) -> int | None:
    """f32 bytes of one Mamba/Mamba2/GDN layer's state for one sequence (Ref §2.4).

    ``R = (d_conv-1) * (d_inner + 2*n_group*d_state)``, ``S = d_state * d_inner``
    (llama.cpp ``n_embd_r``/``n_embd_s``); confirmed for qwen35 by corpus 043 (598.50 MiB).
    """
    d_conv = keys.opt_uint("ssm.conv_kernel")
    d_inner = keys.opt_uint("ssm.inner_size")
    d_state = keys.opt_uint("ssm.state_size")
    n_group = keys.opt_uint("ssm.group_count") or 0
    if d_conv is None or d_inner is None or d_state is None:
        return None
    r = max(d_conv - 1, 0) * (d_inner + 2 * n_group * d_state)
    s = d_state * d_inner
    return (r + s) * _F32_BYTES


def _rwkv_state_bytes(keys: _Keys) -> int | None:
    """f32 bytes of one RWKV layer's state per sequence (Ref §2.4).

    ``R = token_shift_count * n_embd`` (count defaults to 2), ``S = n_embd * wkv.head_size``.
    """
    n_embd = keys.opt_uint("embedding_length")
    head_size = keys.opt_uint("wkv.head_size")
    shift = keys.opt_uint("token_shift_count")
    if n_embd is None or head_size is None:
        return None
    shift = 2 if shift is None else shift
    return (shift * n_embd + n_embd * head_size) * _F32_BYTES


def _shortconv_state_bytes(keys: _Keys) -> int | None:
    """f32 bytes of one LFM2 conv layer per sequence (Ref §2.4): R = n_embd*(l_cache-1), S = 0."""
    n_embd = keys.opt_uint("embedding_length")
    l_cache = keys.opt_uint("shortconv.l_cache")
    if n_embd is None or l_cache is None:
        return None
    return n_embd * max(l_cache - 1, 0) * _F32_BYTES


def _kv_layers(attn: _Attention, has_kv: Sequence[bool], swa: Sequence[bool]) -> tuple[KVLayer, ...]:
    return tuple(
        KVLayer(il, attn.kv_heads[il], attn.key_length, attn.value_length, bool(swa[il]))
        for il in range(len(has_kv))
        if has_kv[il] and attn.kv_heads[il] > 0
    )


def _pattern(n_layer: int, period: int) -> tuple[bool, ...]:
    """llama.cpp ``set_swa_pattern(n)``: layer ``il`` is SWA iff ``il % n < n - 1``."""
    return tuple(il % period < period - 1 for il in range(n_layer))


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def _swa_note(kind: str, n_swa_layers: int, n_kv_layers: int, window: int) -> str:
    what = "chunk" if kind.startswith("chunked") else "sliding window"
    return f"{kind}: {n_swa_layers} of {_plural(n_kv_layers, 'layer')} {what} {window}"


def _recurrent_note(n_attn: int, n_rec: int, what: str) -> str:
    return (
        f"hybrid: {_plural(n_attn, 'attention layer')} + {_plural(n_rec, what + ' layer')} (fixed state per sequence)"
    )


def _layout(
    keys: _Keys,
    n_layer: int,
    ctx_train: int | None,
    layers: tuple[KVLayer, ...],
    *,
    n_swa: int | None = None,
    recurrent_layers: int = 0,
    state_per_layer: int | None = 0,
    notes: Sequence[str] = (),
    mla: bool = False,
) -> KVLayout:
    if recurrent_layers == 0:
        state: int | None = 0
    elif state_per_layer is None:
        state = None
    else:
        state = state_per_layer * recurrent_layers
    has_swa = any(layer.sliding_window for layer in layers)
    return KVLayout(
        architecture=keys.arch,
        block_count=n_layer,
        context_length_train=ctx_train,
        layers=layers,
        sliding_window_tokens=n_swa if has_swa else None,
        recurrent_layers=recurrent_layers,
        recurrent_state_bytes_per_seq=state,
        notes=tuple(notes),
        mla=mla,
    )


def _swa_layout(keys: _Keys, n_layer: int, ctx_train: int | None) -> KVLayout:
    """Interleaved SWA / chunked / shared-KV families (Ref §2.3, llama.cpp ``load_hparams``)."""
    arch = keys.arch
    notes: list[str] = []
    has_kv = [True] * n_layer
    kind = "iSWA"
    if arch == "gemma4":
        return _gemma4_layout(keys, n_layer, ctx_train)
    attn = _attention(keys, n_layer)
    n_swa: int | None
    if arch == "gemma2":
        # set_swa_pattern(2): even layers SWA; n_swa default 4096.
        n_swa = keys.opt_uint("attention.sliding_window")
        n_swa = _GEMMA2_DEFAULT_SWA if n_swa is None else n_swa
        swa = _pattern(n_layer, 2) if n_swa else (False,) * n_layer
    elif arch == "gemma3":
        # set_swa_pattern(6) only when attention.sliding_window > 0.
        n_swa = keys.opt_uint("attention.sliding_window")
        pattern = _optional_pattern(keys, n_layer)
        if not n_swa:
            swa = (False,) * n_layer
        elif pattern is not None:
            swa = pattern
        else:
            swa = _pattern(n_layer, 6)
    elif arch == "gemma3n":
        n_swa = keys.uint("attention.sliding_window")
        pattern = _optional_pattern(keys, n_layer)
        swa = pattern if pattern is not None else _pattern(n_layer, 5)
        shared = keys.opt_uint("attention.shared_kv_layers")
        kv_from_start = max(n_layer - shared, 0) if shared is not None else min(_GEMMA3N_KV_LAYERS, n_layer)
        has_kv = [il < kv_from_start for il in range(n_layer)]
        if kv_from_start < n_layer:
            notes.append(f"shared KV: layers {kv_from_start}-{n_layer - 1} reuse earlier layers' cache")
    elif arch in ("gpt-oss", "gptoss"):
        n_swa = keys.uint("attention.sliding_window")
        swa = _pattern(n_layer, 2)
    elif arch == "cohere2":
        n_swa = keys.uint("attention.sliding_window")
        swa = _pattern(n_layer, 4)
    elif arch == "olmo3":
        n_swa = keys.opt_uint("attention.sliding_window")
        pattern = _optional_pattern(keys, n_layer)
        if not n_swa:
            swa = (False,) * n_layer
        else:
            swa = pattern if pattern is not None else _pattern(n_layer, 4)
    else:  # llama4
        window = keys.opt_uint("attention.sliding_window")
        if keys.has("attention.sliding_window") and window == 0:
            n_swa, swa = None, (False,) * n_layer
        else:
            n_swa, swa, kind = _LLAMA4_CHUNK, _pattern(n_layer, 4), "chunked attention"
    layers = _kv_layers(attn, has_kv, swa)
    n_swa_layers = sum(1 for layer in layers if layer.sliding_window)
    if n_swa_layers and n_swa:
        notes.insert(0, _swa_note(kind, n_swa_layers, len(layers), n_swa))
    elif n_swa_layers:
        raise _Unavailable(f"sliding-window layers but no {keys.name('attention.sliding_window')}")
    return _layout(keys, n_layer, ctx_train, layers, n_swa=n_swa, notes=notes)


def _optional_pattern(keys: _Keys, n_layer: int) -> tuple[bool, ...] | None:
    """``attention.sliding_window_pattern`` when given; a hidden (null) array falls back to
    llama.cpp's hard-coded pattern instead of blocking, since llama.cpp does not need it."""
    try:
        return keys.bools("attention.sliding_window_pattern", n_layer)
    except _Unavailable as exc:
        if VERBOSE_HINT in str(exc):
            return None
        raise


def _gemma4_layout(keys: _Keys, n_layer: int, ctx_train: int | None) -> KVLayout:
    """gemma4 per the Ollama engine ``model/models/gemma4/model_text.go`` (Ref §2.3).

    Local layers: ``key_length_swa`` (default 256) x ``head_count_kv``; global layers:
    ``key_length`` (default 512) x ``global_head_count_kv`` (else the array entry). V uses the
    same head dim unless ``value_length[_swa]`` says otherwise. The last
    ``shared_kv_layers`` layers reuse a donor's cache and own none.
    """
    pattern = keys.bools("attention.sliding_window_pattern", n_layer)
    if pattern is None:
        raise _Unavailable(f"model_info has no {keys.name('attention.sliding_window_pattern')}")
    kv_heads = keys.per_layer("attention.head_count_kv", n_layer)
    if kv_heads is None:
        raise _Unavailable(f"model_info has no {keys.name('attention.head_count_kv')}")
    global_kv = keys.opt_uint("attention.global_head_count_kv") or 0
    k_local = keys.opt_uint("attention.key_length_swa") or 256
    v_local = keys.opt_uint("attention.value_length_swa") or k_local
    k_global = keys.opt_uint("attention.key_length") or 512
    v_global = keys.opt_uint("attention.value_length") or k_global
    shared = keys.opt_uint("attention.shared_kv_layers") or 0
    first_shared = max(n_layer - shared, 0)
    layers: list[KVLayer] = []
    for il in range(first_shared):
        local = pattern[il]
        heads = kv_heads[il] if local or not global_kv else global_kv
        if heads == 0:
            continue
        k_len, v_len = (k_local, v_local) if local else (k_global, v_global)
        layers.append(KVLayer(il, heads, k_len, v_len, local))
    n_swa_layers = sum(1 for layer in layers if layer.sliding_window)
    n_swa = keys.opt_uint("attention.sliding_window") if n_swa_layers else None
    if n_swa_layers and not n_swa:
        raise _Unavailable(f"sliding-window layers but no {keys.name('attention.sliding_window')}")
    notes: list[str] = []
    if n_swa_layers and n_swa:
        notes.append(_swa_note("iSWA", n_swa_layers, len(layers), n_swa))
    if shared:
        notes.append(f"shared KV: layers {first_shared}-{n_layer - 1} reuse earlier layers' cache")
    return _layout(keys, n_layer, ctx_train, tuple(layers), n_swa=n_swa, notes=notes)


def _hybrid_layout(keys: _Keys, n_layer: int, ctx_train: int | None) -> KVLayout:
    """Attention + recurrent hybrids: qwen3next/qwen35, granitehybrid, jamba, nemotron_h, lfm2,
    falcon-h1 (Ref §2.3). Recurrent layers hold a per-sequence state, not per-token KV."""
    arch = keys.arch
    notes: list[str] = []
    if arch in _NEMOTRON_H:
        attn = _attention(keys, n_layer, head_dim_key=True)
    else:
        attn = _attention(keys, n_layer)
    what = "Mamba"
    state = _ssm_state_bytes(keys)
    if arch in _QWEN_HYBRID:
        what = "Gated DeltaNet"
        if keys.is_array("attention.head_count_kv"):
            is_attn = [h > 0 for h in attn.kv_heads]
        else:
            interval = keys.opt_uint("full_attention_interval") or _QWEN_HYBRID_DEFAULT_INTERVAL
            is_attn = [(il + 1) % interval == 0 for il in range(n_layer)]
            notes.append(f"full attention every {interval} layers")
        is_rec = [not a for a in is_attn]
        nextn = keys.opt_uint("nextn_predict_layers") or 0
        if nextn:
            notes.append(f"block_count includes {nextn} MTP layer(s); how llama.cpp b10488 treats them is unconfirmed")
    elif arch in _NEMOTRON_H:
        ff = keys.per_layer("feed_forward_length", n_layer)
        if ff is None:
            raise _Unavailable(f"model_info has no {keys.name('feed_forward_length')}")
        is_attn = [h > 0 for h in attn.kv_heads]
        is_rec = [h == 0 and f == 0 for h, f in zip(attn.kv_heads, ff, strict=True)]
        mlp_only = sum(1 for h, f in zip(attn.kv_heads, ff, strict=True) if h == 0 and f > 0)
        if mlp_only:
            notes.append(f"{mlp_only} MLP-only layers hold no cache")
    elif arch in _LFM2:
        what = "short-conv"
        state = _shortconv_state_bytes(keys)
        is_attn = [h > 0 for h in attn.kv_heads]
        is_rec = [not a for a in is_attn]
    elif arch == "falcon-h1":
        # every layer runs attention and a Mamba2 mixer in parallel
        is_attn = [h > 0 for h in attn.kv_heads]
        is_rec = [True] * n_layer
    else:  # granitehybrid, jamba: recurrent iff head_count_kv[il] == 0
        is_attn = [h > 0 for h in attn.kv_heads]
        is_rec = [not a for a in is_attn]
    layers = _kv_layers(attn, is_attn, [False] * n_layer)
    n_rec = sum(is_rec)
    notes.insert(0, _recurrent_note(len(layers), n_rec, what))
    if n_rec and state is None:
        notes.append("recurrent state size unknown: state keys missing")
    return _layout(keys, n_layer, ctx_train, layers, recurrent_layers=n_rec, state_per_layer=state, notes=notes)


def _recurrent_only_layout(keys: _Keys, n_layer: int, ctx_train: int | None) -> KVLayout:
    """mamba/mamba2/rwkv*: no per-token KV at all, only a per-sequence state (Ref §2.3)."""
    state = _rwkv_state_bytes(keys) if keys.arch in _RWKV else _ssm_state_bytes(keys)
    notes = ["recurrent model: no per-token KV cache, fixed state per sequence"]
    if state is None:
        notes.append("recurrent state size unknown: state keys missing")
    return _layout(keys, n_layer, ctx_train, (), recurrent_layers=n_layer, state_per_layer=state, notes=notes)


def _plain_layout(keys: _Keys, n_layer: int, ctx_train: int | None) -> KVLayout:
    """Plain GQA/MHA (and MLA following its keys): every layer with KV heads has a full cache."""
    arch = keys.arch
    known = arch in _MLA_ARCHS or arch in _NEXTN_EXCLUDED or arch in _SWA_IGNORED
    if not known:
        for key, why in (
            ("ssm.conv_kernel", "recurrent (ssm) keys"),
            ("ssm.state_size", "recurrent (ssm) keys"),
            ("wkv.head_size", "RWKV keys"),
            ("shortconv.l_cache", "short-conv keys"),
            ("attention.kv_lora_rank", "MLA keys"),
            ("attention.sliding_window_pattern", "a sliding_window_pattern"),
            ("attention.shared_kv_layers", "shared-KV layers"),
        ):
            if keys.has(key):
                raise _Unavailable(f"architecture not modelled: it has {why} ({keys.name(key)})")
    attn = _attention(keys, n_layer)
    notes: list[str] = []
    has_kv = [True] * n_layer
    nextn = keys.opt_uint("nextn_predict_layers") or 0
    if nextn and arch in _NEXTN_EXCLUDED:
        has_kv = [il < n_layer - nextn for il in range(n_layer)]
        notes.append(f"MTP: last {nextn} layer(s) (nextn_predict_layers) hold no KV")
    elif nextn:
        notes.append(f"{nextn} MTP layer(s) counted in block_count (nextn_predict_layers)")
    layers = _kv_layers(attn, has_kv, [False] * n_layer)
    k_mla = keys.opt_uint("attention.key_length_mla")
    v_mla = keys.opt_uint("attention.value_length_mla")
    mla = bool(k_mla) and bool(v_mla)
    if mla:
        notes.append(
            f"MLA: K={attn.key_length} V={attn.value_length} per layer (kv_lora_rank+rope); "
            "newer llama.cpp may store no separate V for MLA (has_v = !is_mla), check the "
            "log's K/V split"
        )
    elif keys.has("attention.kv_lora_rank"):
        notes.append(
            f"MLA stored without absorption: {attn.kv_heads[0]} KV heads x "
            f"(K {attn.key_length} + V {attn.value_length}) per layer"
        )
    if arch in _SWA_IGNORED and keys.opt_uint("attention.sliding_window"):
        notes.append(f"llama.cpp ignores attention.sliding_window for {arch}: full cache")
    elif not known and keys.opt_uint("attention.sliding_window"):
        notes.append("attention.sliding_window is present but not applied (plain layout)")
    return _layout(keys, n_layer, ctx_train, layers, notes=notes, mla=mla)


def _build(info: Mapping[str, Any], arch: str) -> KVLayout:
    keys = _Keys(info, arch)
    if arch in _NO_KV:
        raise _Unavailable(_NO_KV[arch])
    if not keys.has("block_count") and not keys.has("attention.head_count"):
        stub = keys.has("context_length") or keys.has("embedding_length")
        raise _Unavailable(
            "model_info has no attention.head_count" + (" (cloud model: /api/show returns only a stub)" if stub else "")
        )
    if arch in _NOT_MODELLED:
        raise _Unavailable(_NOT_MODELLED[arch])
    n_layer = keys.uint("block_count")
    if n_layer == 0 or n_layer > _MAX_LAYERS:
        raise _Unavailable(f"implausible block_count {n_layer}")
    ctx_train = _as_int(keys.raw("context_length")) or None
    if arch in _MAMBA or arch in _RWKV:
        return _recurrent_only_layout(keys, n_layer, ctx_train)
    if arch in _QWEN_HYBRID or arch in _NEMOTRON_H or arch in _LFM2 or arch in ("granitehybrid", "jamba", "falcon-h1"):
        return _hybrid_layout(keys, n_layer, ctx_train)
    if arch in _SWA_ARCHS:
        return _swa_layout(keys, n_layer, ctx_train)
    return _plain_layout(keys, n_layer, ctx_train)


_LAYOUT_CACHE: dict[int, tuple[Mapping[str, Any], KVLayout | KVUnavailable]] = {}
_INTERNED: dict[KVLayout, KVLayout] = {}
"""The first layout object of each distinct layout (models of one architecture and size, under
several names or quantizations, share it): a cached :func:`kv_allocation` key then compares by
identity instead of layer by layer."""
_LAYOUT_CACHE_SIZE = 1024
"""Layouts kept, one per ``model_info`` mapping: more than the models one server keeps loaded
(a dashboard of 1,000 loaded models derived 936 of them again on every poll at 64; a mapping
holds no tokenizer, a few KiB)."""


def layout_from_model_info(model_info: Mapping[str, Any]) -> KVLayout | KVUnavailable:
    """``_layout_from_model_info`` memoized on the mapping object (``/api/show`` answers are
    cached per digest by the source, so every poll passes the same object). The cache holds a
    reference to each mapping it keys, so an ``id`` is never reused while it is cached. Only
    read-only ``MappingProxyType`` views (what snapshots hold) are cached; equal layouts from
    them come back as one object."""
    if not isinstance(model_info, MappingProxyType):
        return _layout_from_model_info(model_info)  # a plain dict may change: never cached
    hit = _LAYOUT_CACHE.get(id(model_info))
    if hit is not None and hit[0] is model_info:
        return hit[1]
    result = _layout_from_model_info(model_info)
    if isinstance(result, KVLayout):  # one object per distinct layout: cache keys then match by identity
        result = _INTERNED.setdefault(result, result)
        if len(_INTERNED) > _LAYOUT_CACHE_SIZE:
            _INTERNED.pop(next(iter(_INTERNED)))
    if len(_LAYOUT_CACHE) >= _LAYOUT_CACHE_SIZE:
        _LAYOUT_CACHE.pop(next(iter(_LAYOUT_CACHE)))
    _LAYOUT_CACHE[id(model_info)] = (model_info, result)
    return result


def _layout_from_model_info(model_info: Mapping[str, Any]) -> KVLayout | KVUnavailable:
    """Derive the KV layout of a model from ``/api/show`` ``model_info``.

    Per-architecture rules follow Ref §2.3 (llama.cpp ``load_hparams`` @ Ollama v0.24.0's vendored
    copy, and the Ollama engine's ``model/models/<arch>`` where llama.cpp lacks the arch):
    plain GQA/MHA for any arch with ``block_count`` + ``head_count`` that is not special;
    SWA families gemma2/gemma3/gemma3n/gemma4/gpt-oss/llama4/olmo3/cohere2; hybrids
    qwen3next/qwen35*/granitehybrid/jamba/nemotron_h*/lfm2*/falcon-h1; recurrent-only
    mamba*/rwkv*; MLA deepseek2/glm4moelite by their keys; MTP layers excluded for
    glm4moe/bailingmoe2.

    Args:
        model_info: The ``model_info`` map with full GGUF keys (``"llama.block_count"``...).
            Arrays are ``null`` unless ``/api/show`` was called with ``verbose`` (Ref §2.2).

    Returns:
        A :class:`KVLayout`, or a :class:`KVUnavailable` whose ``reason`` reads
        ``"estimate unavailable for <arch>: <why>"`` for missing/hidden/malformed keys,
        cloud stubs, encoder-only models and architectures kvtop does not model. This
        function never raises on bad input.
    """
    if not isinstance(model_info, Mapping):
        return KVUnavailable("unknown", "estimate unavailable: model_info is not a mapping")
    arch_value = model_info.get("general.architecture")
    if not isinstance(arch_value, str) or not arch_value.strip():
        return KVUnavailable("unknown", "estimate unavailable: model_info has no general.architecture")
    arch = arch_value.strip()
    try:
        return _build(model_info, arch)
    except _Unavailable as exc:
        return KVUnavailable(arch, f"estimate unavailable for {arch}: {exc}")
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, OverflowError) as exc:
        return KVUnavailable(arch, f"estimate unavailable for {arch}: malformed model_info ({exc})")


# --------------------------------------------------------------------------------------------
# Allocation


def _check_layout(layout: object) -> KVLayout:
    if isinstance(layout, KVUnavailable):
        raise ValueError(layout.reason)
    if not isinstance(layout, KVLayout):
        raise ValueError(f"expected a KVLayout, got {type(layout).__name__}")
    return layout


def _positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def _check_head_dims(layout: KVLayout, type_k: str, type_v: str) -> None:
    """Reject quantized types on head dims llama.cpp rejects.

    llama.cpp ``llama_init_from_model``: "K cache type %s with block size %u does not divide
    n_embd_head_k=%u" (and the same for V); Ref §2.6 "quantized types need n_embd_{k,v}_gqa to be
    a multiple of 32".
    """
    for cache_type, part in ((type_k, "K"), (type_v, "V")):
        block = CACHE_TYPES[cache_type][1]
        if block == 1:
            continue
        for layer in layout.layers:
            dim = layer.key_length if part == "K" else layer.value_length
            if dim % block:
                raise ValueError(
                    f"{part} cache type {cache_type} with block size {block} does not divide "
                    f"the head dim {dim} of layer {layer.index} (head dim not multiple of {block})"
                )


def bytes_per_token(layout: KVLayout, cache_type_k: str = "f16", cache_type_v: str | None = None) -> int:
    """KV bytes one token costs in one stream, over every KV layer (full and SWA).

    ``Σ_il row(key_length*n_head_kv, type_k) + row(value_length*n_head_kv, type_v)`` with
    ``row(n, t) = n * type_size / block_size`` (ggml ``ggml_row_size``; Ref §2.4, §2.6). This is
    the flash-attention layout (V not transposed); see :func:`kv_allocation` for the rest.

    Args:
        layout: A layout from :func:`layout_from_model_info`.
        cache_type_k: K cache type (any case; ``""`` means f16).
        cache_type_v: V cache type; defaults to ``cache_type_k``.

    Returns:
        Exact bytes per token (an int).

    Raises:
        ValueError: Unknown cache type, not a :class:`KVLayout`, or a quantized type whose
            block size does not divide a layer's head dim (llama.cpp refuses those).
    """
    layout = _check_layout(layout)
    type_k = _cache_type(cache_type_k)
    type_v = type_k if cache_type_v is None else _cache_type(cache_type_v)
    _check_head_dims(layout, type_k, type_v)
    return sum(_row_bytes(layer.k_width, type_k) + _row_bytes(layer.v_width, type_v) for layer in layout.layers)


def _pad(value: int, multiple: int) -> int:
    """``GGML_PAD(value, multiple)``: round up to a multiple."""
    return -(-value // multiple) * multiple


def _fmt_type_bytes(cache_type: str) -> str:
    type_size, block = CACHE_TYPES[cache_type]
    value = Fraction(type_size, block)
    if value.denominator == 1:
        return f"{value.numerator} B"
    return f"{float(value):g} B"  # every block size here is a power of two: exact in decimal


def _formula(
    layout: KVLayout,
    type_k: str,
    type_v: str,
    v_row: dict[int, int],
    cells: int,
    swa_cells: int | None,
    n_stream: int,
    unified: bool,
    total: int,
) -> str:
    """The arithmetic behind an estimate, one term per group of identical layers."""
    groups: dict[tuple[bool, int, int, int, int], int] = {}
    for layer in layout.layers:
        key = (layer.sliding_window, layer.n_head_kv, layer.key_length, layer.value_length, v_row[layer.index])
        groups[key] = groups.get(key, 0) + 1
    streams = f"{n_stream} unified stream" if unified else _plural(n_stream, "slot")
    terms: list[str] = []
    padded = no_v = False
    for (sliding, heads, k_len, v_len, v_width), count in groups.items():
        layers = _plural(count, "layer")
        if v_width == heads * v_len or v_width == 0:
            no_v = no_v or v_width == 0
            shape = f"{layers} × {_plural(heads, 'KV head')} × "
            k_part, v_part = f"{k_len} K", f"{v_len if v_width else 0} V"
        else:
            padded = True
            shape = f"{layers} × "
            k_part, v_part = f"{heads * k_len} K", f"{v_width} V"
        if type_k == type_v:
            body = f"({k_part} + {v_part}) × {_fmt_type_bytes(type_k)}"
        else:
            body = f"({k_part} × {_fmt_type_bytes(type_k)} + {v_part} × {_fmt_type_bytes(type_v)})"
        n_cells = swa_cells if sliding else cells
        cell_word = "SWA cells" if sliding else "cells"
        terms.append(f"{shape}{body} × {n_cells} {cell_word} × {streams}")
    if not terms:
        terms.append("0 KV layers")
    text = " + ".join(terms) + f" = {total:,} B"
    if padded:
        text += " (V rows padded to the widest layer: flash attention off)"
    if no_v:
        text += " (MLA: no separate V cache)"
    return text


@functools.lru_cache(maxsize=4096)  # pure; the alert rules ask the same questions every poll
def kv_allocation(
    layout: KVLayout,
    num_ctx: int,
    parallel: int = 1,
    cache_type_k: str = "f16",
    cache_type_v: str | None = None,
    *,
    flash_attention: bool = True,
    n_ubatch: int = 512,
    swa_full: bool = False,
    unified: bool = False,
    ctx_padding: int = CELL_PADDING,
    mla_v_cache: bool = True,
) -> KVEstimate:
    """The KV cache llama.cpp allocates for ``num_ctx`` tokens per slot and ``parallel`` slots.

    Ollama launches ``n_ctx = num_ctx * parallel`` with ``n_seq_max = parallel`` (Ref §3.3).
    llama.cpp then (Ref §2.4, ``llama_context::llama_context`` / ``llama_kv_cache_iswa``)::

        non-unified: n_ctx_seq = GGML_PAD(n_ctx / n_seq_max, 256); n_stream = n_seq_max
        unified:     n_ctx_seq = GGML_PAD(n_ctx, 256);             n_stream = 1
        SWA cells  = GGML_PAD(min(n_ctx_seq, n_swa*(unified ? n_seq_max : 1) + n_ubatch), 256)
        K[il] = type_k x n_embd_k_gqa(il) x cells x n_stream
        V[il] = type_v x (flash_attn ? n_embd_v_gqa(il) : max_il n_embd_v_gqa) x cells x n_stream

    Args:
        layout: A layout from :func:`layout_from_model_info`.
        num_ctx: Context per slot in tokens (``/api/ps`` ``context_length``), >= 1.
        parallel: Slots (``OLLAMA_NUM_PARALLEL`` as resolved), >= 1.
        cache_type_k: K cache type (any case; ``""`` means f16).
        cache_type_v: V cache type; defaults to ``cache_type_k``.
        flash_attention: Resolved flash attention. Off transposes V and pads every layer's V
            row to the widest one (``v_trans``), and forbids a quantized V.
        n_ubatch: Physical batch size (``-ub``; Ollama passes 512, corpus 062).
        swa_full: ``--swa-full``: the SWA cache gets the full ``n_ctx_seq`` cells.
        unified: ``kv_unified``: one stream shared by all slots. Ollama's runners use false
            (Ref §2.4); LM Studio's llama.cpp uses true (corpus 043 ``4/1 seqs``).
        ctx_padding: Cell padding of the full cache. 256 since llama.cpp of late 2025 (Era C
            and Ollama's vendored copy, Ref §2.4). Older llama.cpp padded the total ``n_ctx``
            of its single stream to 256 with flash attention and to 32 without (corpus 042
            prints ``n_ctx = 240000 (padded)``); pass ``unified=True, ctx_padding=32`` for it.
        mla_v_cache: False models newer llama.cpp, which stores no V for MLA models
            (``has_v = !is_mla``; unconfirmed for Ollama's b10488). Ignored for non-MLA.

    Returns:
        A :class:`KVEstimate` with exact byte counts and the formula.

    Raises:
        ValueError: ``num_ctx``/``parallel``/``n_ubatch``/``ctx_padding`` < 1, an unknown cache
            type, a quantized type on a head dim its block size does not divide, a quantized V
            with flash attention off (llama.cpp: "quantized V cache was requested, but this
            requires Flash Attention", Ref §3.2), or ``n_ctx`` beyond ``uint32``.
    """
    layout = _check_layout(layout)
    num_ctx = _positive("num_ctx", num_ctx)
    parallel = _positive("parallel", parallel)
    n_ubatch = _positive("n_ubatch", n_ubatch)
    ctx_padding = _positive("ctx_padding", ctx_padding)
    type_k = _cache_type(cache_type_k)
    type_v = type_k if cache_type_v is None else _cache_type(cache_type_v)
    if not flash_attention and _is_quantized(type_v):
        raise ValueError(f"quantized V cache ({type_v}) requires flash attention (llama.cpp refuses it)")
    _check_head_dims(layout, type_k, type_v)
    n_ctx = num_ctx * parallel
    if n_ctx > MAX_CONTEXT_CELLS:
        raise ValueError(f"num_ctx x parallel = {n_ctx} exceeds llama.cpp's uint32 n_ctx")

    if unified:
        n_stream = 1
        cells = _pad(n_ctx, ctx_padding)
    else:
        n_stream = parallel
        cells = _pad(_pad(n_ctx, ctx_padding) // parallel, ctx_padding)

    swa_cells: int | None = None
    if any(layer.sliding_window for layer in layout.layers):
        n_swa = layout.sliding_window_tokens or 0
        if swa_full:
            swa_cells = cells
        else:
            window = n_swa * (parallel if unified else 1) + n_ubatch
            swa_cells = _pad(min(cells, window), CELL_PADDING)

    v_max = max((layer.v_width for layer in layout.layers), default=0)
    skip_v = layout.mla and not mla_v_cache
    v_row: dict[int, int] = {}
    k_bytes = v_bytes = swa_bytes = 0
    for layer in layout.layers:
        layer_cells = swa_cells if layer.sliding_window and swa_cells is not None else cells
        width_v = 0 if skip_v else (layer.v_width if flash_attention else v_max)
        v_row[layer.index] = width_v
        k = _row_bytes(layer.k_width, type_k) * layer_cells * n_stream
        v = _row_bytes(width_v, type_v) * layer_cells * n_stream
        k_bytes += k
        v_bytes += v
        if layer.sliding_window:
            swa_bytes += k + v

    total = k_bytes + v_bytes
    if layout.recurrent_state_bytes_per_seq is None:
        recurrent: int | None = None
    else:
        recurrent = layout.recurrent_state_bytes_per_seq * max(1, parallel)
    return KVEstimate(
        total_bytes=total,
        k_bytes=k_bytes,
        v_bytes=v_bytes,
        cells_per_seq=cells,
        n_seq=n_stream,
        swa_cells=swa_cells,
        full_layers=layout.full_layers,
        swa_layers=layout.swa_layers,
        recurrent_bytes=recurrent,
        cache_type_k=type_k,
        cache_type_v=type_v,
        formula=_formula(layout, type_k, type_v, v_row, cells, swa_cells, n_stream, unified, total),
        swa_bytes=swa_bytes,
        unified=unified,
    )


@functools.lru_cache(maxsize=4096)  # pure; the alert rules ask the same questions every poll
def max_num_ctx(
    layout: KVLayout,
    budget_bytes: int,
    parallel: int = 1,
    cache_type_k: str = "f16",
    cache_type_v: str | None = None,
    *,
    flash_attention: bool = True,
    n_ubatch: int = 512,
    swa_full: bool = False,
    unified: bool = False,
) -> int:
    """Largest per-slot ``num_ctx`` (a multiple of 256) whose KV cache fits ``budget_bytes``.

    Found by binary search on :func:`kv_allocation` (``total_bytes`` is non-decreasing in
    ``num_ctx``), so the answer is exactly consistent with it. Capped at the model's
    ``context_length_train`` when known (Ollama clamps num_ctx to it, Ref §1.3) and at
    llama.cpp's ``uint32`` ``n_ctx``. The recurrent state is not counted (it does not grow with
    num_ctx). A model without per-token KV returns the cap.

    Args:
        layout: A layout from :func:`layout_from_model_info`.
        budget_bytes: Bytes available for the KV cache.
        parallel: Slots, >= 1.
        cache_type_k: K cache type.
        cache_type_v: V cache type; defaults to ``cache_type_k``.
        flash_attention: Resolved flash attention (see :func:`kv_allocation`).
        n_ubatch: Physical batch size.
        swa_full: ``--swa-full``.
        unified: ``kv_unified``.

    Returns:
        The per-slot context in tokens, or 0 when not even 256 tokens fit.

    Raises:
        ValueError: As :func:`kv_allocation` (bad parallel or cache type, ...).
    """
    layout = _check_layout(layout)
    parallel = _positive("parallel", parallel)
    if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, int):
        raise ValueError(f"budget_bytes must be an integer, got {budget_bytes!r}")
    step = CELL_PADDING
    hi = MAX_CONTEXT_CELLS // parallel // step
    if layout.context_length_train:
        hi = min(hi, layout.context_length_train // step)

    def fits(units: int) -> bool:
        estimate = kv_allocation(
            layout,
            units * step,
            parallel,
            cache_type_k,
            cache_type_v,
            flash_attention=flash_attention,
            n_ubatch=n_ubatch,
            swa_full=swa_full,
            unified=unified,
        )
        return estimate.total_bytes <= budget_bytes

    # validates the arguments even when the budget is hopeless
    kv_allocation(
        layout, step, parallel, cache_type_k, cache_type_v, flash_attention=flash_attention, n_ubatch=n_ubatch
    )
    if hi < 1 or budget_bytes < 0 or not fits(1):
        return 0
    lo = 1
    if fits(hi):
        return hi * step
    while hi - lo > 1:  # invariant: fits(lo) and not fits(hi)
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo * step


# --------------------------------------------------------------------------------------------
# ollama ps


def processor_string(size: int | None, size_vram: int | None) -> str:
    """The PROCESSOR column of ``ollama ps`` for one ``/api/ps`` row.

    Exactly ``cmd/cmd.go:ListRunningHandler`` (Ref §1.5): ``size_vram == 0`` -> ``100% CPU``;
    ``== size`` -> ``100% GPU``; ``size_vram > size`` or ``size == 0`` -> ``Unknown``; else
    ``cpu = math.Round((size - size_vram) / size * 100)`` (half away from zero, not Python's
    banker's ``round``) and ``"<cpu>%/<100-cpu>% CPU/GPU"``.

    Args:
        size: ``/api/ps`` ``size`` in bytes, or ``None`` when unknown.
        size_vram: ``/api/ps`` ``size_vram`` in bytes, or ``None`` when unknown.

    Returns:
        The column text; ``"Unknown"`` when either input is missing or not an integer.
    """
    if isinstance(size, bool) or isinstance(size_vram, bool):
        return "Unknown"
    if not isinstance(size, int) or not isinstance(size_vram, int):
        return "Unknown"
    if size_vram == 0:
        return "100% CPU"
    if size_vram == size:
        return "100% GPU"
    if size_vram > size or size == 0:
        return "Unknown"
    cpu_percent = go_round(float(size - size_vram) / float(size) * 100)
    return f"{int(cpu_percent)}%/{int(100 - cpu_percent)}% CPU/GPU"
