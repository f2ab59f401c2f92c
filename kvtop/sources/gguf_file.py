"""A local GGUF file's header: its key/value metadata (as ``/api/show`` ``model_info`` holds it)
and its tensor list (``[{name, type, shape}]`` as ``/api/show`` ``tensors``), for ``kvtop plan --gguf``.

The layout (GGUF v2 and v3; ggml's ``docs/gguf.md``, llama.cpp ``gguf-py/gguf/constants.py``):
``"GGUF"``, ``uint32`` version, ``uint64`` tensor count, ``uint64`` key/value count, the key/value
pairs (key: ``uint64`` length + UTF-8; ``uint32`` value type; the value), then per tensor: name,
``uint32`` dimension count, ``uint64`` dimensions, ``uint32`` ggml type, ``uint64`` offset.
Little-endian. Version 1 (``uint32`` counts and lengths) is read too.

Only the header is read (the tensor data is never touched); arrays of the ``tokenizer.*`` keys are
skipped (not kept), every length and count is bounded (:data:`MAX_STRING_BYTES`, :data:`MAX_COUNT`).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Any, BinaryIO, Final

__all__ = ["GGML_TYPES", "GgufError", "GgufHeader", "read_gguf_header"]

MAX_STRING_BYTES: Final = 16 * 1024 * 1024
"""A key or string value longer than this is not a GGUF header (16 MiB; a chat template is ~10 KiB)."""

MAX_COUNT: Final = 50_000_000
"""More tensors, keys or array items than this is not a GGUF header."""

GGML_TYPES: Final[dict[int, str]] = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 9: "Q8_1",
    10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 15: "Q8_K", 16: "IQ2_XXS",
    17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S", 20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S", 23: "IQ4_XS",
    24: "I8", 25: "I16", 26: "I32", 27: "I64", 28: "F64", 29: "IQ1_M", 30: "BF16", 34: "TQ1_0",
    35: "TQ2_0", 39: "MXFP4",
}  # fmt: skip
"""``enum ggml_type`` (ggml/include/ggml.h) → the names ``/api/show`` writes."""

_SCALARS: Final[dict[int, str]] = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}  # fmt: skip
_STRING, _ARRAY = 8, 9


class GgufError(ValueError):
    """Not a GGUF file, or a header that breaks a bound; the message says where."""


@dataclass(frozen=True, slots=True)
class GgufHeader:
    """What :func:`read_gguf_header` read.

    Attributes:
        version: The GGUF version (1, 2 or 3).
        model_info: Key → value (arrays as lists; ``tokenizer.*`` arrays left out, as kvtop keeps ``/api/show``).
        tensors: ``[{"name", "type", "shape"}]``; ``type`` is the ggml name (``Q4_K``), or ``type_<n>`` when unknown.
        file_size_bytes: The file's size.
    """

    version: int
    model_info: dict[str, Any]
    tensors: list[dict[str, Any]]
    file_size_bytes: int


class _Reader:
    def __init__(self, fh: BinaryIO, wide: bool) -> None:
        self.fh, self.wide = fh, wide

    def take(self, n: int) -> bytes:
        data = self.fh.read(n)
        if len(data) != n:
            raise GgufError(f"the file ends inside the header (at byte {self.fh.tell()})")
        return data

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def count(self, what: str) -> int:
        n = int(self.unpack("<Q" if self.wide else "<I"))
        if n > MAX_COUNT:
            raise GgufError(f"{what} {n:,} is more than a GGUF header holds")
        return n

    def string(self) -> str:
        n = int(self.unpack("<Q" if self.wide else "<I"))
        if n > MAX_STRING_BYTES:
            raise GgufError(f"a string of {n:,} bytes at byte {self.fh.tell()}")
        return self.take(n).decode("utf-8", errors="replace")

    def value(self, vtype: int, keep: bool) -> Any:
        if vtype in _SCALARS:
            return self.unpack(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            item = int(self.unpack("<I"))
            n = self.count("array length")
            if item in _SCALARS and not keep:
                self.skip(n * struct.calcsize(_SCALARS[item]))
                return None
            values = [self.value(item, keep) for _ in range(n)]
            return values if keep else None
        raise GgufError(f"unknown value type {vtype} at byte {self.fh.tell()}")

    def skip(self, n: int) -> None:
        self.fh.seek(n, os.SEEK_CUR)


def read_gguf_header(path: str) -> GgufHeader:
    """Read ``path``'s GGUF header.

    Raises:
        OSError: The file cannot be read.
        GgufError: It is not a GGUF file (magic, version) or its header breaks a bound.
    """
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if fh.read(4) != b"GGUF":
            raise GgufError("not a GGUF file (no GGUF magic)")
        version = struct.unpack("<I", fh.read(4) or b"\0\0\0\0")[0]
        if version not in (1, 2, 3):
            raise GgufError(f"GGUF version {version} is not one kvtop reads (1-3)")
        r = _Reader(fh, wide=version >= 2)
        n_tensors = r.count("tensor count")
        n_kv = r.count("key count")
        info: dict[str, Any] = {}
        for _ in range(n_kv):
            key = r.string()
            vtype = int(r.unpack("<I"))
            value = r.value(vtype, keep=not key.startswith("tokenizer."))
            if value is not None:
                info[key] = value
        tensors: list[dict[str, Any]] = []
        for _ in range(n_tensors):
            name = r.string()
            n_dims = int(r.unpack("<I"))
            if n_dims > 8:
                raise GgufError(f"tensor {name!r} has {n_dims} dimensions")
            shape = [int(r.unpack("<Q" if r.wide else "<I")) for _ in range(n_dims)]
            ggml_type = int(r.unpack("<I"))
            r.unpack("<Q")  # offset into the data section
            tensors.append({"name": name, "type": GGML_TYPES.get(ggml_type, f"type_{ggml_type}"), "shape": shape})
    return GgufHeader(version, info, tensors, size)
