"""How an event class is made: the base every event shares and the decorator that makes it frozen and cheap.

Every event carries ``line_no`` (1-based number of the first physical line of the logical
line), ``time`` (the timestamp printed on the line, ``None`` when it has none) and ``raw``
(the logical line with control characters replaced by U+FFFD; ``""`` in the events a long-lived
store keeps, see :class:`~kvtop.logparse.event_compactor.EventCompactor`). ``kind`` is a stable
snake_case class attribute. The classes themselves are in :mod:`kvtop.logparse.events` (what a
load is made of) and :mod:`kvtop.logparse.request_events` (what one request did).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, cast

if TYPE_CHECKING:  # tells the type checker that @_event makes a frozen dataclass with an __init__
    from typing_extensions import dataclass_transform
else:

    def dataclass_transform(**_kw: object) -> Any:
        return lambda f: f


_T = TypeVar("_T")


def _fast_init(cls: type[_T]) -> type[_T]:
    """Give a frozen, slotted dataclass a faster ``__init__`` with the same signature.

    A frozen dataclass sets each field through ``object.__setattr__``; calling the slot
    descriptors' ``__set__`` directly does the same thing (the instance stays frozen:
    assignment still raises ``FrozenInstanceError``) in about half the time, which matters
    because the parser creates an event for almost every interesting log line.

    The code is generated when the class is first used (its first instance or compaction), not
    at import: a run that reads no log, and the first frame of every run, do not pay for it.
    """

    def first_init(self: Any, *args: Any, **kwargs: Any) -> None:
        if cls.__init__ is first_init:
            _build_fast_init(cls)
        cls.__init__(self, *args, **kwargs)

    def first_lean(self: Any, compactor: Any, get: Any, share: Any) -> Any:
        if cls._lean is first_lean:  # type: ignore[attr-defined]
            _build_fast_init(cls)
        return cls._lean(self, compactor, get, share)  # type: ignore[attr-defined]

    first_init.__qualname__ = f"{cls.__qualname__}.__init__"
    cls.__init__ = first_init  # type: ignore[method-assign]
    cls._lean = first_lean  # type: ignore[attr-defined]
    return cls


def _build_fast_init(cls: type[Any]) -> None:
    """Generate and install ``cls``'s ``__init__`` and ``_lean`` (see :func:`_fast_init`)."""
    params: list[str] = []
    body: list[str] = []
    lean: list[str] = []
    env: dict[str, Any] = {"_new": object.__new__, "_cls": cls}
    for f in dataclasses.fields(cast(Any, cls)):
        if f.default is not dataclasses.MISSING:
            env[f"_d_{f.name}"] = f.default
            params.append(f"{f.name}=_d_{f.name}")
        else:
            params.append(f.name)
        env[f"_s_{f.name}"] = getattr(cls, f.name).__set__
        body.append(f"    _s_{f.name}(self, {f.name})")
        if f.name == "raw":
            value = '""'
        elif f.name == "time":
            value = "t if (t := self.time) is None or t is compactor._last_time else compactor.same_time(t)"
        elif f.type in ("str", "str | None"):  # (annotations are strings: ``from __future__ import annotations``)
            # a string seen before costs one dict lookup; anything else goes through share()
            value = f"None if (v := self.{f.name}) is None else ((type(v) is str and get(v)) or share(v))"
        elif f.type == "Mapping[str, str]":
            value = f"compactor.share_map(self.{f.name})"
        else:
            value = f"self.{f.name}"
        lean.append(f"    _s_{f.name}(new, {value})")
    src = (
        f"def __init__(self, {', '.join(params)}):\n" + "\n".join(body) + "\n"
        "def _lean(self, compactor, get, share):\n    new = _new(_cls)\n" + "\n".join(lean) + "\n    return new\n"
    )
    exec(src, env)  # noqa: S102 - generated from the dataclass's own field names
    init = env["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    cls.__init__ = init
    cls._lean = env["_lean"]


@dataclass(frozen=True, slots=True, repr=False)
class EventBase:
    """Fields every event has."""

    kind: ClassVar[str] = ""
    line_no: int
    time: datetime | None
    raw: str

    def __repr__(self) -> str:
        """As the dataclass ``__repr__`` reads (``Oom(line_no=3, time=None, raw='…', …)``): written once
        here instead of generated for each of the event classes at import (startup time)."""
        fields = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self) if f.repr)
        return f"{type(self).__qualname__}({fields})"


@dataclass_transform(frozen_default=True)
def frozen_event(cls: type[_T]) -> type[_T]:
    """``@dataclass(frozen=True, slots=True)`` for an event class, made cheaper to create: its
    ``__repr__`` is ``_Event``'s and its ``__init__`` comes from :func:`_fast_init` only (the
    dataclass machinery compiles each generated method from source: about a millisecond per class
    at import, 31 classes)."""
    return _fast_init(dataclass(frozen=True, slots=True, repr=False, init=False)(cls))
