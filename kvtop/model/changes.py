"""What changed on a server: facts about it (its version, environment, runners, each model's last
load) compared over time into typed :class:`Change` records, and the story they tell.

Pure and data-only (below ``views.py``, which keeps a state's recent changes): no I/O, no clock —
every time is the Unix seconds of the sample or log line that showed the fact. Reading the facts
out of a state is ``model.change_facts``; keeping them across kvtop runs is
``sources.timeline_store``; the engine's apply step joins them (``engine.timeline``).

A fingerprint is a mapping ``key -> Fact``. Keys, by prefix (the ``kind`` of a change):

- ``version``: ``/api/version`` or the log's ``Listening on … (version X)``;
- ``pid``: the ``ollama serve`` process; ``start``: the log's ``server config`` line (a restart);
- ``env:NAME``: the service environment (``sources.service_env``; secrets masked there);
- ``config:NAME``: the log's ``server config`` map (docs/ollama-internals.md §3.6);
- ``runner:MODEL``: what the runner's argv requests (``RunnerProcess.flags``, §7);
- ``fa:MODEL``, ``kv:MODEL``, ``placement:MODEL``: each model's latest load — flash attention,
  KV cache type, and whether it fits the GPU (``gpu``), spills (``spill``) or runs on the CPU.

An ``env:``/``config:`` read is complete (:attr:`Observation.whole`): a name it no longer lists was
unset. The per-model keys outlive the model's unload, so the next load is compared with the last.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

__all__ = [
    "Change",
    "ChangeRow",
    "Fact",
    "Observation",
    "change_rows",
    "changes_since",
    "observe",
    "parse_since",
    "runner_diff",
    "start_label",
    "story",
]

WHOLE_PREFIXES = ("env:", "config:")
"""Key prefixes read as a whole: a name missing from a complete read is unset."""

KINDS = ("version", "pid", "start", "env", "config", "runner", "fa", "kv", "placement")

_ORIGIN = {
    "version": "server version",
    "pid": "server process",
    "start": "server log",
    "env": "service environment",
    "config": "server config line",
    "runner": "runner argv",
    "fa": "model load",
    "kv": "model load",
    "placement": "model load",
}


@dataclass(frozen=True, slots=True)
class Fact:
    """One thing known about a server.

    Attributes:
        value: The value as text; None when unset (an environment variable no longer set).
        at: Unix seconds of the sample or log line that showed it.
        source: The figure's source mark (``reported``, ``service``, ``requested``, ``runner``…:
            ``model.known``'s vocabulary).
    """

    value: str | None
    at: float
    source: str = "reported"


@dataclass(frozen=True, slots=True)
class Observation:
    """Facts read together.

    Attributes:
        facts: Key -> fact (keys as the module says).
        whole: The ``WHOLE_PREFIXES`` read completely: their keys missing from ``facts`` were unset.
        at: Unix seconds of the read (the time of an unset).
    """

    facts: Mapping[str, Fact]
    whole: frozenset[str] = frozenset()
    at: float = 0.0


@dataclass(frozen=True, slots=True)
class Change:
    """One fact that changed.

    Attributes:
        at: Unix seconds when the new value was first seen.
        key: The fact's key (``version``, ``env:OLLAMA_FLASH_ATTENTION``, ``kv:qwen3:8b``…).
        before / after: The values, None for unset (``after`` None: it was unset; ``before``
            None: newly set).
        source: The new value's source mark.
    """

    at: float
    key: str
    before: str | None
    after: str | None
    source: str = "reported"
    extra: Mapping[str, str] = field(default_factory=dict, compare=False)

    @property
    def kind(self) -> str:
        """The key's prefix: ``version``, ``pid``, ``start``, ``env``, ``config``, ``runner``, ``fa``,
        ``kv`` or ``placement``."""
        return self.key.split(":", 1)[0]

    @property
    def subject(self) -> str:
        """What the key names after its prefix (a variable or a model), "" for server facts."""
        return self.key.split(":", 1)[1] if ":" in self.key else ""

    @property
    def origin(self) -> str:
        """Where such a fact is read, in words (``service environment``)."""
        return _ORIGIN.get(self.kind, self.kind)

    @property
    def restart(self) -> bool:
        """A change that means the server started again (a new version, PID or config line)."""
        return self.kind in ("version", "pid", "start")

    def text(self) -> str:
        """One line: ``server restarted: 0.32.15 → 0.33.0``, ``OLLAMA_FLASH_ATTENTION 1 → unset``,
        ``qwen3:8b: KV f16 → q8_0``."""
        before, after = _v(self.before), _v(self.after)
        kind, subject = self.kind, self.subject
        if kind == "version":
            return f"server restarted: {before} → {after}"
        if kind == "pid":
            return f"server restarted: PID {before} → {after}"
        if kind == "start":
            return f"server restarted (log: new 'server config' line at {after})"
        if kind in ("env", "config"):
            where = "" if kind == "env" else " (server config)"
            return f"{subject} {before} → {after}{where}"
        if kind == "runner":  # a reload at other settings: only the flags that differ
            return f"{subject} runner: {runner_diff(self.before, self.after)}"
        label = {"fa": "flash attention", "kv": "KV", "placement": "placement"}[kind]
        return f"{subject}: {label} {before} → {after}"

    def short(self) -> str:
        """The new state in a few words, for a story: ``flash attention off``, ``KV f16``, ``spill``,
        ``0.33.0``, ``OLLAMA_KV_CACHE_TYPE=q8_0``, ``restart``."""
        kind, after = self.kind, self.after
        if kind == "version":
            return f"version {_v(after)}"
        if kind in ("pid", "start"):
            return "restart"
        if kind in ("env", "config"):
            return f"{self.subject} unset" if after is None else f"{self.subject}={after}"
        if kind == "fa":
            return f"flash attention {_v(after)}"
        if kind == "kv":
            return f"KV {_v(after)}"
        if kind == "placement":
            return {"gpu": "all on GPU", "spill": "spill", "cpu": "on CPU"}.get(after or "", _v(after))
        return f"runner {runner_diff(self.before, after, new_only=True)}"

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` / timeline object: ``at`` (ISO 8601 UTC), ``at_unix``, ``kind``, ``key``,
        ``subject``, ``before``, ``after``, ``source``, ``origin``, ``text``."""
        return {
            "at": iso(self.at),
            "at_unix": self.at,
            "kind": self.kind,
            "key": self.key,
            "subject": self.subject,
            "before": self.before,
            "after": self.after,
            "source": self.source,
            "origin": self.origin,
            "text": self.text(),
        }

    @classmethod
    def from_json(cls, obj: object) -> Change:
        """The change a :meth:`to_json` object describes.

        Raises:
            ValueError: ``obj`` is not such an object (a field missing or of the wrong type).
        """
        if not isinstance(obj, dict):
            raise ValueError("not an object")
        at, key, source = obj.get("at_unix"), obj.get("key"), obj.get("source", "reported")
        before, after = obj.get("before"), obj.get("after")
        if not isinstance(at, (int, float)) or isinstance(at, bool) or not math.isfinite(at):
            raise ValueError("at_unix is not a number")
        if not isinstance(key, str) or key.split(":", 1)[0] not in KINDS:
            raise ValueError(f"unknown key {key!r}")
        for name, v in (("before", before), ("after", after), ("source", source)):
            if v is not None and not isinstance(v, str):
                raise ValueError(f"{name} is not a string")
        return cls(float(at), key, before, after, str(source or "reported"))


def _v(value: str | None) -> str:
    return "unset" if value is None else (value if value != "" else "(empty)")


def _flags(argv: str | None) -> dict[str, str]:
    """``-c 4096 -np 1 --flash-attn`` -> ``{"-c": "4096", "-np": "1", "--flash-attn": ""}`` (a
    token after a flag is its value unless it is a flag itself; ``-1`` is a value)."""
    out: dict[str, str] = {}
    flag: str | None = None
    for token in (argv or "").split():
        if token.startswith("-") and not token[1:2].isdigit():
            flag = token
            out[flag] = ""
        elif flag is not None:
            out[flag] = f"{out[flag]} {token}".strip()
    return out


def runner_diff(before: str | None, after: str | None, *, new_only: bool = False) -> str:
    """The flags of two runner command lines (``RunnerProcess.flags``) that differ, in the new
    line's order: ``--ctx-size 4096 → 32768``, ``--flash-attn added``, ``--kv-cache-type q8_0
    removed`` (``new_only``: the new values only, ``--ctx-size 32768``). The whole lines when no
    flag can be told apart."""
    b, a = _flags(before), _flags(after)
    parts: list[str] = []
    for flag in dict.fromkeys([*a, *b]):
        old, new = b.get(flag), a.get(flag)
        if old == new:
            continue
        if new_only:
            parts.append(f"{flag} removed" if new is None else f"{flag} {new}".strip())
        elif old is None:
            parts.append(f"{flag} {new} added" if new else f"{flag} added")
        elif new is None:
            parts.append(f"{flag} {old} removed" if old else f"{flag} removed")
        else:
            parts.append(f"{flag} {_v(old)} → {_v(new)}")
    if parts:
        return ", ".join(parts)
    return _v(after) if new_only else f"{_v(before)} → {_v(after)}"


MODEL_KINDS = ("runner", "fa", "kv", "placement")
"""Change kinds about one model's load (the rest are about the server)."""


@dataclass(frozen=True, slots=True)
class ChangeRow:
    """One line of a short list of changes (the dashboard's events pane).

    Attributes:
        at: Unix seconds of the newest change the row stands for.
        text: The change (a model's reload: every fact that changed with it, ``; `` between).
        marks: ``(source, origin)`` of each part, e.g. ``("requested", "runner argv")``.
        restart: The row is a server restart.
        earlier: Older rows folded into this one (the same model's earlier reloads or load facts,
            or the same server change again).
        since: Unix seconds of the oldest change folded in (``at`` when none).
    """

    at: float
    text: str
    marks: tuple[tuple[str, str], ...]
    restart: bool = False
    earlier: int = 0
    since: float = 0.0


def change_rows(changes: Sequence[Change], limit: int) -> tuple[list[ChangeRow], int]:
    """The changes as at most ``limit`` rows, newest first, calm on a server that reloads often:
    the facts of one model that changed at the same time (a reload at other settings) are one
    row, each model keeps only its newest row (the older ones counted in ``earlier``), and a
    server change whose text repeats is folded into its newest row.

    Returns:
        The rows and how many rows did not fit in ``limit``.
    """
    groups: dict[tuple[float, str], list[Change]] = {}
    for c in changes:
        key = (c.at, c.subject) if c.kind in MODEL_KINDS else (c.at, f"\0{c.key}")
        groups.setdefault(key, []).append(c)
    rows: list[ChangeRow] = []
    index: dict[str, int] = {}
    for (at, _), group in sorted(groups.items(), key=lambda kv: kv[0][0], reverse=True):
        group.sort(key=lambda c: MODEL_KINDS.index(c.kind) if c.kind in MODEL_KINDS else -1)
        first = group[0]
        if first.kind in MODEL_KINDS:
            parts = [group[0].text()]
            parts += [c.text().removeprefix(f"{c.subject}: ") for c in group[1:]]
            text, fold = "; ".join(parts), f"model:{first.subject}"
        else:
            text = first.text()
            fold = f"text:{text}"
        marks = tuple(dict.fromkeys((c.source, c.origin) for c in group))
        if fold in index:
            i = index[fold]
            rows[i] = replace(rows[i], earlier=rows[i].earlier + 1, since=at)
            continue
        index[fold] = len(rows)
        rows.append(ChangeRow(at, text, marks, any(c.restart for c in group), 0, at))
    return rows[:limit], max(0, len(rows) - limit)


def iso(t: float) -> str:
    """Unix seconds as ISO 8601 UTC to the second (``2026-12-02T08:40:12Z``)."""
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def observe(fingerprint: Mapping[str, Fact], obs: Observation) -> tuple[dict[str, Fact], tuple[Change, ...]]:
    """Compare one observation with the fingerprint so far.

    A fact older than the one kept for its key (a backlog log line from before the poll that
    showed the current value) is left out. A key seen for the first time is no change, except in
    a ``whole`` prefix read before (a variable newly set). Keys of a ``whole`` prefix missing
    from the read become unset.

    Returns:
        The new fingerprint (a new dict; ``fingerprint`` is not changed) and the changes by time,
        a restart first among those of one time, then by key.
    """
    new = dict(fingerprint)
    changes: list[Change] = []
    facts: dict[str, Fact] = dict(obs.facts)
    for prefix in obs.whole:
        seen_before = prefix in fingerprint
        source = next((f.source for k, f in facts.items() if k.startswith(prefix)), "reported")
        new[prefix] = Fact("read", obs.at, source)  # the namespace marker: its later keys are news
        for key, kept in fingerprint.items():
            if key.startswith(prefix) and key != prefix and key not in facts and kept.value is not None:
                facts[key] = Fact(None, obs.at, source)
        if seen_before:
            for key, fact in facts.items():
                if key.startswith(prefix) and key not in fingerprint and fact.value is not None:
                    new[key] = fact
                    changes.append(Change(fact.at, key, None, fact.value, fact.source))
    for key in sorted(facts):
        fact = facts[key]
        old = fingerprint.get(key)
        if old is None:
            if key not in new:
                new[key] = fact
            continue
        if fact.at < old.at:
            continue  # older news than what is kept
        if fact.value != old.value:
            changes.append(Change(fact.at, key, old.value, fact.value, fact.source))
            new[key] = fact
        elif fact.source != old.source:
            new[key] = fact
    changes.sort(key=lambda c: (c.at, not c.restart, c.key))  # a restart first: the settings came with it
    return new, tuple(changes)


def story(changes: Sequence[Change], *, since: str | None = None) -> str:
    """The changes as one line in the order they happened, each as its new state, repeats
    merged: ``since 0.40.2: flash attention off → KV f16 → spill``. The model is named when the
    changes are about more than one. "" for none."""
    if not changes:
        return ""
    models = {c.subject for c in changes if c.kind in ("runner", "fa", "kv", "placement")}
    parts: list[str] = []
    for c in sorted(changes, key=lambda c: c.at):
        part = c.short()
        if len(models) > 1 and c.kind in ("runner", "fa", "kv", "placement"):
            part = f"{c.subject} {part}"
        if not parts or parts[-1] != part:
            parts.append(part)
    head = f"since {since}: " if since else ""
    return head + " → ".join(parts)


def start_label(changes: Sequence[Change]) -> str | None:
    """What a story of ``changes`` starts from when nothing else is said: the version the server ran
    before the first change, when that change is an upgrade (``0.32.15``); else None (say the time)."""
    first = min(changes, key=lambda c: c.at, default=None)
    return first.before if first is not None and first.kind == "version" and first.before else None


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|min|h|d)\s*$", re.IGNORECASE)
_VERSION = re.compile(r"^v?\d+(\.\d+)+([-+.\w]*)$")


def parse_since(text: str, now: float) -> tuple[str, float | str]:
    """What ``--since`` means: ``("version", "0.40.2")`` for a version, ``("time", unix)`` for an ISO
    date or time (UTC unless it says) or a duration back from ``now`` (``90m``, ``2h``, ``1d``).

    Raises:
        ValueError: None of those (the message says what is accepted).
    """
    text = text.strip()
    m = _DURATION.match(text)
    if m:
        unit = m.group(2).lower()
        seconds = float(m.group(1)) * {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}[unit]
        return "time", now - seconds
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        when = None
    if when is not None:
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        return "time", when.timestamp()
    if _VERSION.match(text):
        return "version", text.lstrip("v")
    raise ValueError(f"--since {text!r}: a version (0.40.2), a time (2026-12-01T09:00) or a duration (2h, 30m, 1d)")


def changes_since(changes: Iterable[Change], since: tuple[str, float | str]) -> tuple[Change, ...] | None:
    """The changes after ``since`` (:func:`parse_since`), oldest first: after a time; or, for a
    version, after the server last became that version (from the first change away from it when
    the timeline starts on it). None when the version is not in the timeline."""
    ordered = sorted(changes, key=lambda c: c.at)
    what, value = since
    if what == "time":
        return tuple(c for c in ordered if c.at >= float(value))
    became = [i for i, c in enumerate(ordered) if c.kind == "version" and c.after == value]
    if became:
        return tuple(ordered[became[-1] + 1 :])
    left = [i for i, c in enumerate(ordered) if c.kind == "version" and c.before == value]
    if left:
        return tuple(ordered[left[0] :])
    return None
