"""JSON <-> the frozen snapshot dataclasses (``OllamaSnapshot``, ``GpuSnapshot``, ``ProcSnapshot``).

Used by ``kvtop --record`` / ``--replay`` (``kvtop.sources.replay``). The codec is generic: it
walks a dataclass's fields and their type hints, so a field added to a snapshot later is recorded
without touching this module, and an older recording that lacks it decodes to the field's default.
The round trip is exact: ``decode(type(x), encode(x)) == x`` for every snapshot a source makes
(tuples stay tuples, mappings become read-only mappings, aware datetimes keep their offset,
integer mapping keys such as ``ProcSnapshot.processes``' PIDs come back as integers).

Encoding rules: a dataclass becomes an object of its fields, leaving out those equal to their
default (recordings stay small); a datetime becomes its ISO 8601 text; a mapping becomes an object
with string keys; a tuple becomes an array. Values typed ``Any`` (``ShowInfo.model_info``) are
already JSON (they came from JSON) and are kept as they are.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from datetime import datetime
from functools import cache
from types import MappingProxyType
from typing import Any, TypeVar, Union, get_args, get_origin

T = TypeVar("T")

_MISSING = dataclasses.MISSING


class CodecError(ValueError):
    """A JSON value does not have the shape of the dataclass field it is decoded into."""


def encode(value: Any) -> Any:
    """``value`` (a snapshot dataclass, or anything inside one) as JSON-ready data.

    Raises:
        TypeError: A value of a type the snapshots never hold (a set, an arbitrary object).
    """
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if f.default is not _MISSING and _same(item, f.default):
                continue
            if f.default_factory is not _MISSING and _same(item, f.default_factory()):
                continue
            out[f.name] = encode(item)
        return out
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [encode(v) for v in value]
    raise TypeError(f"cannot record a {type(value).__name__}")


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same kind (``0 == False`` must not drop a field that is ``False``)."""
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # noqa: BLE001 - an odd __eq__ just means "keep the field"
        return False


def decode(tp: type[T], data: Any) -> T:
    """The ``tp`` instance ``data`` encodes (``data`` as :func:`encode` made it).

    Unknown object keys are ignored (a newer kvtop's extra fields), missing ones take the field's
    default.

    Raises:
        CodecError: ``data`` does not fit ``tp`` (wrong JSON type, a required field missing, a
            value outside a ``Literal``, an unparsable datetime).
    """
    return typing.cast(T, _decode(tp, data, tp.__name__ if isinstance(tp, type) else str(tp)))


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


MAX_ANY_DEPTH = 64
"""The deepest nesting of arrays and objects accepted in a value typed ``Any`` (``model_info``
values are flat or one level deep): a deeper one would crash whatever walks it later."""


def _check_depth(data: Any, path: str) -> None:
    """Raise CodecError when ``data`` nests arrays/objects deeper than :data:`MAX_ANY_DEPTH` (iterative)."""
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (list, dict)):
            if depth >= MAX_ANY_DEPTH:
                raise CodecError(f"{path}: nested deeper than {MAX_ANY_DEPTH} levels")
            items = value.values() if isinstance(value, dict) else value
            stack.extend((v, depth + 1) for v in items if isinstance(v, (list, dict)))


def _decode(tp: Any, data: Any, path: str) -> Any:
    if tp is Any:
        _check_depth(data, path)
        return data
    origin = get_origin(tp)
    if origin is Union or origin is types.UnionType:
        args = get_args(tp)
        if data is None:
            if type(None) in args:
                return None
            raise CodecError(f"{path}: null where a value is required")
        options = [a for a in args if a is not type(None)]
        if len(options) == 1:
            return _decode(options[0], data, path)
        for option in options:  # e.g. int | float: the first whose JSON type matches
            try:
                return _decode(option, data, path)
            except CodecError:
                continue
        raise CodecError(f"{path}: {_describe(data)} fits none of {tp}")
    if origin is typing.Literal:
        if data in get_args(tp):
            return data
        raise CodecError(f"{path}: {data!r} is not one of {get_args(tp)}")
    if origin is tuple:
        if not isinstance(data, list):
            raise CodecError(f"{path}: expected an array, got {_describe(data)}")
        args = get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_decode(args[0], v, f"{path}[{i}]") for i, v in enumerate(data))
        if len(args) != len(data):
            raise CodecError(f"{path}: expected {len(args)} items, got {len(data)}")
        return tuple(_decode(a, v, f"{path}[{i}]") for i, (a, v) in enumerate(zip(args, data)))
    if origin in (Mapping, dict, typing.Mapping) or tp in (Mapping, dict):
        if not isinstance(data, dict):
            raise CodecError(f"{path}: expected an object, got {_describe(data)}")
        key_t, value_t = get_args(tp) or (str, Any)
        out = {_key(key_t, k, path): _decode(value_t, v, f"{path}.{k}") for k, v in data.items()}
        return MappingProxyType(out)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if not isinstance(data, dict):
            raise CodecError(f"{path}: expected an object, got {_describe(data)}")
        hints = _hints(tp)
        kwargs: dict[str, Any] = {}
        for f in dataclasses.fields(tp):
            if f.name in data:
                kwargs[f.name] = _decode(hints[f.name], data[f.name], f"{path}.{f.name}")
            elif f.default is _MISSING and f.default_factory is _MISSING:
                raise CodecError(f"{path}: required field {f.name!r} missing")
        return tp(**kwargs)
    if tp is datetime:
        if not isinstance(data, str):
            raise CodecError(f"{path}: expected a timestamp text, got {_describe(data)}")
        try:
            return datetime.fromisoformat(data)
        except ValueError as exc:
            raise CodecError(f"{path}: {exc}") from None
    if tp is bool:
        if isinstance(data, bool):
            return data
        raise CodecError(f"{path}: expected true/false, got {_describe(data)}")
    if tp is int:
        if isinstance(data, int) and not isinstance(data, bool):
            return data
        raise CodecError(f"{path}: expected an integer, got {_describe(data)}")
    if tp is float:
        if isinstance(data, (int, float)) and not isinstance(data, bool):
            try:
                return float(data)
            except OverflowError:
                raise CodecError(f"{path}: the number is too large") from None
        raise CodecError(f"{path}: expected a number, got {_describe(data)}")
    if tp is str:
        if isinstance(data, str):
            return data
        raise CodecError(f"{path}: expected a string, got {_describe(data)}")
    raise CodecError(f"{path}: kvtop cannot decode a {tp}")


def _key(tp: Any, key: str, path: str) -> Any:
    if tp is int:
        try:
            return int(key)
        except ValueError:
            raise CodecError(f"{path}: key {key!r} is not an integer") from None
    return key


def _describe(data: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "true/false", type(None): "null"}.get(
        type(data), type(data).__name__
    )
