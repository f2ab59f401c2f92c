"""``sources.gguf_file``: a GGUF v3 header written here byte by byte (ggml docs/gguf.md layout)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest

from kvtop.sources.gguf_file import GgufError, read_gguf_header


def _s(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def _kv(key: str, vtype: int, payload: bytes) -> bytes:
    return _s(key) + struct.pack("<I", vtype) + payload


def write_gguf(path: Path, kvs: list[bytes], tensors: list[tuple[str, list[int], int]], data_bytes: int = 0) -> None:
    """GGUF v3: magic, version, tensor count, kv count, kvs, tensor infos, then (aligned) data."""
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs)
    offset = 0
    for name, shape, ggml_type in tensors:
        out += _s(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", d) for d in shape)
        out += struct.pack("<IQ", ggml_type, offset)
        offset += 32
    out += b"\0" * (-len(out) % 32) + b"\0" * data_bytes
    path.write_bytes(out)


def tiny_llama(path: Path) -> None:
    kvs = [
        _kv("general.architecture", 8, _s("llama")),
        _kv("general.name", 8, _s("tiny")),
        _kv("llama.block_count", 4, struct.pack("<I", 2)),
        _kv("llama.context_length", 4, struct.pack("<I", 8192)),
        _kv("llama.embedding_length", 4, struct.pack("<I", 128)),
        _kv("llama.attention.head_count", 4, struct.pack("<I", 4)),
        _kv("llama.attention.head_count_kv", 9, struct.pack("<IQ", 5, 2) + struct.pack("<ii", 2, 2)),
        _kv("llama.rope.freq_base", 6, struct.pack("<f", 10000.0)),
        _kv("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, 3) + _s("a") + _s("b") + _s("c")),
        _kv("tokenizer.ggml.scores", 9, struct.pack("<IQ", 6, 3) + struct.pack("<fff", 0, 0, 0)),
        _kv("general.file_type", 4, struct.pack("<I", 15)),
        _kv("llama.use_parallel", 7, b"\x01"),
    ]
    tensors = [
        ("token_embd.weight", [128, 3], 12),
        ("blk.0.attn_q.weight", [128, 128], 8),
        ("blk.1.attn_q.weight", [128, 128], 8),
        ("output.weight", [128, 3], 14),
    ]
    write_gguf(path, kvs, tensors, data_bytes=1024)


def test_reads_metadata_and_tensors(tmp_path: Path) -> None:
    path = tmp_path / "tiny.gguf"
    tiny_llama(path)
    h = read_gguf_header(str(path))
    assert h.version == 3
    info: dict[str, Any] = h.model_info
    assert info["general.architecture"] == "llama"
    assert info["llama.block_count"] == 2 and info["llama.context_length"] == 8192
    assert info["llama.attention.head_count_kv"] == [2, 2]
    assert info["llama.rope.freq_base"] == pytest.approx(10000.0)
    assert info["llama.use_parallel"] is True
    assert "tokenizer.ggml.tokens" not in info and "tokenizer.ggml.scores" not in info
    assert h.tensors == [
        {"name": "token_embd.weight", "type": "Q4_K", "shape": [128, 3]},
        {"name": "blk.0.attn_q.weight", "type": "Q8_0", "shape": [128, 128]},
        {"name": "blk.1.attn_q.weight", "type": "Q8_0", "shape": [128, 128]},
        {"name": "output.weight", "type": "Q6_K", "shape": [128, 3]},
    ]
    assert h.file_size_bytes == path.stat().st_size


def test_refuses_what_is_not_gguf(tmp_path: Path) -> None:
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"GGML" + b"\0" * 20)
    with pytest.raises(GgufError, match="magic"):
        read_gguf_header(str(bad))
    cut = tmp_path / "cut.gguf"
    tiny_llama(cut)
    cut.write_bytes(cut.read_bytes()[:60])
    with pytest.raises(GgufError, match="ends inside the header"):
        read_gguf_header(str(cut))
    huge = tmp_path / "huge.gguf"
    huge.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1 << 40))
    with pytest.raises(GgufError, match="string of"):
        read_gguf_header(str(huge))
